// ptx_probe.cu: every wrapper of csrc/runtime/ptx.h in one kernel, for nvcc (tests/unit/test_nvcc.py:
// test_ptx_wrappers_are_the_instructions builds it for each architecture and finds each PTX instruction
// in the PTX nvcc wrote, with no spills). m16n8k32 e4m3 needs sm_89 or newer; mbarrier's expect_tx, complete_tx
// and try_wait forms and the TMA copies sm_90 or newer. runtime/ptx_wgmma.h's wrappers are in a kernel of their
// own, ptx_wgmma_probe (below): stmatrix on sm_90 and newer, wgmma on sm_90a only (not sm_100a).
#include <cuda.h>
#include <utility>
#include "runtime/ptx.h"
// ptx.h's TensorMap and make_tensor_map's enum values, as cuda.h has them
static_assert(sizeof(mpk::ptx::TensorMap) == sizeof(CUtensorMap) && alignof(mpk::ptx::TensorMap) == alignof(CUtensorMap),
              "mpk::ptx::TensorMap is CUtensorMap's size and alignment");
static_assert(CU_TENSOR_MAP_DATA_TYPE_UINT8 == 0 && CU_TENSOR_MAP_DATA_TYPE_UINT16 == 1 &&
                  CU_TENSOR_MAP_DATA_TYPE_UINT32 == 2 && CU_TENSOR_MAP_DATA_TYPE_UINT64 == 4 &&
                  CU_TENSOR_MAP_INTERLEAVE_NONE == 0 && CU_TENSOR_MAP_L2_PROMOTION_NONE == 0 &&
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE == 0 && CU_TENSOR_MAP_SWIZZLE_128B == 3 && CUDA_SUCCESS == 0,
              "make_tensor_map's enum values");
std::string probe_host_map(mpk::ptx::TensorMap* m, void* p) {  // the host helper compiles under nvcc
    const uint64_t d[2] = {64, 64}, st[2] = {2, 128};
    const uint32_t bx[2] = {64, 32};
    return mpk::ptx::make_tensor_map(m, p, 2, 2, d, st, bx, 3);
}
extern "C" __global__ void ptx_probe(float* out, const uint16_t* g, const mpk::ptx::TensorMap* map) {
    __shared__ __align__(16) uint16_t s[4096];
    using namespace mpk::ptx;
    const int l = threadIdx.x;
    cp_async_cg_shared_global<16>(s + l * 8, g + l * 8);
    cp_async_ca_shared_global<8>(s + 1024 + l * 4, g + l * 4, 4);
    cp_async_ca_shared_global<4>(s + 2048 + l * 2, g + l * 2);
    cp_async_commit_group();
    cp_async_wait_group<0>();
    cp_async_wait_all();
    __syncthreads();
    uint32_t a[4], b[2], r1[1], r2[2];
    ldmatrix_m8n8_x4_shared_b16(a, s + (l % 16) * 8);
    ldmatrix_m8n8_x2_trans_shared_b16(b, s + 256 + (l % 16) * 8);
    ldmatrix_m8n8_x1_shared_b16(r1, s + 512 + (l % 8) * 8);
    ldmatrix_m8n8_x2_shared_b16(r2, s + 768 + (l % 16) * 8);
    ldmatrix_m8n8_x4_trans_shared_b16(a, s + 1024 + (l % 32) * 8);
    ldmatrix_m8n8_x1_trans_shared_b16(r1, s + 1536 + (l % 8) * 8);
    float c[4] = {0, 0, 0, 0}, d[4];
    mma_m16n8k16_row_col_f32_bf16_bf16_f32(d, a, b, c);
    mma_m16n8k16_row_col_f32_f16_f16_f32(c, a, b, d);
    const uint32_t a2[2] = {a[0], r2[1]}, b1[1] = {r1[0]};
    mma_m16n8k8_row_col_f32_bf16_bf16_f32(d, a2, b1, c);
    mma_m16n8k8_row_col_f32_f16_f16_f32(c, a2, b1, d);
#if __CUDA_ARCH__ >= 890
    mma_m16n8k32_row_col_f32_e4m3_e4m3_f32(d, a, b, c);
#endif
    __shared__ __align__(8) uint64_t bar[2];
    if (l == 0) mbarrier_init_shared_b64(bar, blockDim.x);
    __syncthreads();
    mbarrier_arrive_shared_b64(bar);
    while (!mbarrier_test_wait_parity_shared_b64(bar, 0)) {
    }
#if __CUDA_ARCH__ >= 900
    if (l == 0) {
        mbarrier_init_shared_b64(bar + 1, 1);
        mbarrier_expect_tx_shared_b64(bar + 1, 16);
        mbarrier_arrive_expect_tx_shared_b64(bar + 1, 16);
        mbarrier_complete_tx_shared_b64(bar + 1, 32);
    }
    __syncthreads();
    mbarrier_wait_parity(bar + 1, 0);
    __shared__ __align__(1024) uint16_t box[2048];
    if (l == 0) {
        mbarrier_arrive_expect_tx_shared_b64(bar + 1, 8192);
        cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(box, map, 0, 0, bar + 1);
        cp_async_bulk_tensor_3d_shared_cluster_global_mbarrier_complete_tx_bytes(box + 1024, map + 1, 0, 0, 1, bar + 1);
    }
    mbarrier_wait_parity(bar + 1, 1);
    c[0] += box[l];
    box[l] = uint16_t(l);
    fence_proxy_async_shared_cta();
    __syncthreads();
    if (l == 0) {
        cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(map + 2, 0, 0, box);
        cp_async_bulk_tensor_3d_global_shared_cta_bulk_group(map + 3, 0, 0, 0, box + 1024);
        cp_async_bulk_commit_group();
        cp_async_bulk_wait_group_read<0>();
        cp_async_bulk_wait_group<0>();
    }
#endif
    __syncthreads();
    if (l == 0) mbarrier_inval_shared_b64(bar);
    for (int i = 0; i < 4; ++i) out[l * 4 + i] = d[i] + c[i];
}

// runtime/ptx_wgmma.h: wgmma exists on sm_90a only (not on sm_100a), guarded as the header guards it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define PROBE_WGMMA 1
#else
#define PROBE_WGMMA 0
#endif
constexpr int kWarpgroup = 128;

#if PROBE_WGMMA
// One N: A from shared memory (SS) and from registers (RS), bf16 and f16, in two commit groups waited with
// wait_group<1> and then <0>; the accumulators go to out (N / 2 floats a thread) after the last wait.
template <int N>
__device__ __forceinline__ void wgmma_shape(float* out, uint64_t desc_a, uint64_t desc_b, const uint32_t (&a)[4]) {
    using namespace mpk::ptx;
    float d[N / 2];
    for (int i = 0; i < N / 2; ++i) d[i] = 0.f;
    wgmma_fence();
    wgmma_mma_async_m64nNk16_f32_bf16_bf16<N>(d, desc_a, desc_b, 0);  // D = A B
    wgmma_mma_async_m64nNk16_f32_bf16_bf16<N>(d, a, desc_b, 1);       // D += A B
    wgmma_commit_group();
    wgmma_mma_async_m64nNk16_f32_f16_f16<N>(d, desc_a, desc_b, 1);
    wgmma_mma_async_m64nNk16_f32_f16_f16<N>(d, a, desc_b, 1);
    wgmma_commit_group();
    wgmma_wait_group<1>();
    wgmma_wait_group<0>();
    for (int i = 0; i < N / 2; ++i) out[i * kWarpgroup + threadIdx.x % kWarpgroup] = d[i];
}
// Each N of Ns in turn, its results after the previous N's.
template <int... Ns>
__device__ __forceinline__ void wgmma_shapes(float* out, uint64_t desc_a, uint64_t desc_b, const uint32_t (&a)[4]) {
    int at = 0;
    ((wgmma_shape<Ns>(out + at, desc_a, desc_b, a), at += Ns / 2 * kWarpgroup), ...);
}
// The immediates other than 1, 1, 0, 0: negated A and / or B, A and / or B MN-major (N = 64).
__device__ __forceinline__ void wgmma_scales(float* out, uint64_t desc_a, uint64_t desc_b, const uint32_t (&a)[4]) {
    using namespace mpk::ptx;
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    wgmma_fence();
    wgmma_mma_async_m64nNk16_f32_bf16_bf16<64, -1, 1, 1, 1>(d, desc_a, desc_b, 0);  // -A B, both MN-major
    wgmma_mma_async_m64nNk16_f32_f16_f16<64, 1, -1, 1, 0>(d, desc_a, desc_b, 1);    // A -B, A MN-major
    wgmma_mma_async_m64nNk16_f32_bf16_bf16<64, -1, -1, 1>(d, a, desc_b, 1);         // RS: -A -B, B MN-major
    wgmma_mma_async_m64nNk16_f32_f16_f16<64, 1, -1, 0>(d, a, desc_b, 1);            // RS: A -B
    wgmma_commit_group();
    wgmma_wait_group<0>();
    for (int i = 0; i < 32; ++i) out[i * kWarpgroup + threadIdx.x % kWarpgroup] = d[i];
}
#endif

// The wrappers of runtime/ptx_wgmma.h, one warpgroup: matrix descriptors of each swizzle (every
// architecture: the descriptor is arithmetic), stmatrix x1 / x2 / x4 and their .trans forms (sm_90 and
// newer), and on sm_90a wgmma.mma_async for N = 8, 16, 64, 128, 200 and 256, SS and RS, bf16 and f16.
extern "C" __global__ void __launch_bounds__(kWarpgroup) ptx_wgmma_probe(float* out, const uint16_t* g) {
    __shared__ __align__(1024) uint16_t tile[2][64 * 64];
    using namespace mpk::ptx;
    const int l = threadIdx.x;
    for (int i = l; i < 2 * 64 * 64; i += kWarpgroup) tile[i / (64 * 64)][i % (64 * 64)] = g[i];
    const uint64_t desc[4] = {wgmma_descriptor<0>(tile[0], 128, 256), wgmma_descriptor<32>(tile[1], 16, 256),
                              wgmma_descriptor<64>(tile[0], 16, 512), wgmma_descriptor<128>(tile[1], 16, 1024)};
    if (l == 0)
        for (int i = 0; i < 4; ++i) reinterpret_cast<uint64_t*>(out)[i] = desc[i];
    out += 8;
#if __CUDA_ARCH__ >= 900
    fence_proxy_async_shared_cta();  // the generic-proxy writes above, before the async proxy reads them
    __syncthreads();
    uint32_t a[4];
    ldmatrix_m8n8_x4_shared_b16(a, tile[0] + (l % 32) * 64);
#if PROBE_WGMMA
    wgmma_shapes<8, 16, 64, 128, 200, 256>(out, desc[3], desc[2], a);
    out += (8 + 16 + 64 + 128 + 200 + 256) / 2 * kWarpgroup;
    wgmma_scales(out, desc[1], desc[0], a);
    out += 32 * kWarpgroup;
#endif
    __syncthreads();  // stmatrix overwrites tile[1] once every warp's wgmma (waited above) has read it
    uint16_t* const w = tile[1] + (l / 32) * 1024;  // each warp's own 1024 elements
    const uint32_t r1[1] = {a[0]}, r2[2] = {a[1], a[2]};
    stmatrix_m8n8_x1_shared_b16(w + (l % 8) * 8, r1);
    stmatrix_m8n8_x2_shared_b16(w + 64 + (l % 16) * 8, r2);
    stmatrix_m8n8_x4_shared_b16(w + 192 + (l % 32) * 8, a);
    stmatrix_m8n8_x1_trans_shared_b16(w + 448 + (l % 8) * 8, r1);
    stmatrix_m8n8_x2_trans_shared_b16(w + 512 + (l % 16) * 8, r2);
    stmatrix_m8n8_x4_trans_shared_b16(w + 640 + (l % 32) * 8, a);
    __syncwarp();
    for (int i = 0; i < 28; ++i) out[i * kWarpgroup + l] = w[(l % 32) + i * 32];
#endif
}
