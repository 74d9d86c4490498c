// ptx_probe.cu: every wrapper of csrc/runtime/ptx.h in one kernel, for nvcc (tests/unit/test_nvcc.py:
// test_ptx_wrappers_are_the_instructions builds it for each architecture and finds each PTX instruction
// in the PTX nvcc wrote, with no spills). m16n8k32 e4m3 needs sm_89 or newer; mbarrier's expect_tx, complete_tx
// and try_wait forms and the TMA copies sm_90 or newer.
#include <cuda.h>
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
