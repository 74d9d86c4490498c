// wgmma_linear.cuh: y = x @ W^T (+ residual) for 16-bit T on Hopper: TMA into a ring of shared-memory
// stages under full / empty mbarriers, warpgroup MMAs (runtime/ptx.h; the form of tests/csrc/wgmma_gemm.cpp).
// linear.cuh's linear_tile takes this path when its layer asks for it (tensor_cores iparam 2: bf16 / fp16,
// a batch of at least 16 rows, target_cc >= 90, a 256-thread worker block, x's and W's rows contiguous and
// 16-byte aligned; mirage/mpk/layers/linear.py), which also has the runtime build the two tensor maps it
// reads through: x's tile in boxes of 16 rows x 64 k, W's in boxes of 64 rows x 64 k, 128-byte swizzle
// (TaskView::tma; runtime/tile_maps.h: a map covers the task's tile only, zeros past its edges).
//
// The product is computed transposed, y^T = W x^T: A = 64 W rows (the wgmma's M), B = 16 x rows (its N),
// both K-major, so a task's tile is covered by blocks of 64 output columns x 16 batch rows, each summed over
// K in steps of BK = 64 (one stage: A 64 x 64 and B 16 x 64 elements, 10 KiB, each row 128 bytes wide,
// swizzled by TMA as the descriptors read it: start + 32 bytes per 16 k, SBO 1024).
// Threads (256, two warpgroups): thread 0 produces, a step at a time over every block and K step in order:
// waits until its stage is empty, announces the stage's bytes (expect_tx), issues the two boxes; the other
// threads of warpgroup 0 have nothing to do. At the end every thread meets at a barrier and thread 0
// invalidates the six mbarriers (the next task may use the bytes otherwise). Warpgroup 1 consumes: per step it waits for the stage to be
// full, fences, issues 4 wgmma m64n16k16 (one per 16 k) as one group, waits for the previous group
// (wait_group 1) and releases that group's stage; after a block's last step it waits for everything,
// releases the last stage and stores its 64 x 16 results (thread t: rows 16 w + g + 8 (i >> 1), columns
// 8 j + 2 q + (i & 1) of D, register 4 j + i; g = lane / 4, q = lane % 4, w its warp in the warpgroup).
// Shared memory: 3 stages x 10 KiB and 6 barriers: 30 KiB + 48, within linear_rows' 8 x 4224 bytes of a
// 256-thread block (the launch plan's, mirage/mpk/persistent_kernel.py: unchanged by this path).
// Summation order of y[b][j]: per K step of 16, in increasing k, the 16 products added to the accumulator
// one by one (the tensor core's own order and precision on a GPU), from 0; then + r[b][j] in fp32 and one
// rounding to T: mma_linear.cuh's order, so the same budget (K counted twice: testing.tol_linear).
// Test: tests/runtime_python/linear/ (the target_cc=90 cases), tests/unit/test_wgmma_gemm.py (the pipeline),
//       tests/unit/test_nvcc.py (sm_90a build, no spills).
#pragma once
#include <type_traits>
#include "../runtime/ptx.h"
#include "common.cuh"

namespace mpk {
namespace wgmma_linear_detail {

constexpr int BM = 64, BN = 16, BK = 64, STAGES = 3;
constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
constexpr int SMEM_BYTES = STAGES * STAGE_BYTES + 2 * STAGES * 8;  // the stages, then full[] and empty[]
constexpr int THREADS = 256;

template <typename T> MPK_DEVICE MPK_INLINE void mma(float (&d)[8], const char* a, const char* b, int kk) {
    const uint64_t da = ptx::wgmma_descriptor<128>(a + 32 * kk, 16, 1024), db = ptx::wgmma_descriptor<128>(b + 32 * kk, 16, 1024);
    if constexpr (std::is_same<T, bf16_t>::value) ptx::wgmma_mma_async_m64nNk16_f32_bf16_bf16<BN>(d, da, db, 1);
    else ptx::wgmma_mma_async_m64nNk16_f32_f16_f16<BN>(d, da, db, 1);
}

}  // namespace wgmma_linear_detail

// y = x @ W^T (+ residual) over the task's tiles: x [rows, k_len] through the map xm, W [n, k_len] through
// wm; st: how output (b, col)'s fp32 sum reaches y (linear.cuh's Store).
template <typename T, typename ST>
MPK_DEVICE void wgmma_linear_rows(const TaskView& v, int64_t rows, int64_t k_len, int64_t n, const T* residual,
                                  const Tile2D& rt, const ST& st) {
    using namespace wgmma_linear_detail;
    static_assert(sizeof(T) == 2, "the Hopper path takes bf16 or fp16");
#if defined(__CUDA_ARCH__) && !(__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL))
    (void)rows, (void)k_len, (void)n, (void)residual, (void)rt, (void)st;
    task_fail(v, "linear: the Hopper path (TMA + wgmma) runs on sm_90a only: build for target_cc 90");
#else
    const ptx::TensorMap* xm = v.tma<ptx::TensorMap>(0);
    const ptx::TensorMap* wm = v.tma<ptx::TensorMap>(1);
    if (blockDim.x != THREADS || !xm || !wm) {
        task_fail(v, "linear: the Hopper path needs a 256-thread worker block and the tensor maps of x and W "
                     "(its layer's Access.tma)");
        return;
    }
    char* stages = smem<char>(0, SMEM_BYTES);
    uint64_t* full = reinterpret_cast<uint64_t*>(stages + STAGES * STAGE_BYTES);
    uint64_t* empty = full + STAGES;
    const int64_t groups = (n + BM - 1) / BM, chunks = (rows + BN - 1) / BN, ksteps = (k_len + BK - 1) / BK;
    const int64_t steps = groups * chunks * ksteps;
    if (threadIdx.x == 0)
        for (int s = 0; s < STAGES; ++s) {
            ptx::mbarrier_init_shared_b64(&full[s], 1);
            ptx::mbarrier_init_shared_b64(&empty[s], 128);
        }
    __syncthreads();
    if (threadIdx.x == 0) {  // the producer: step i = (block, K step) in order
        ptx::fence_proxy_async_shared_cta();  // the stages' earlier generic writes before TMA's
        for (int64_t i = 0; i < steps; ++i) {
            const int s = int(i % STAGES);
            const int64_t round = i / STAGES, block = i / ksteps, k0 = (i % ksteps) * BK;
            if (round > 0) ptx::mbarrier_wait_parity(&empty[s], uint32_t((round - 1) & 1));
            ptx::mbarrier_arrive_expect_tx_shared_b64(&full[s], STAGE_BYTES);
            char* a = stages + s * STAGE_BYTES;
            ptx::cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(
                a, wm, int32_t(k0), int32_t((block / chunks) * BM), &full[s]);
            ptx::cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(
                a + A_BYTES, xm, int32_t(k0), int32_t((block % chunks) * BN), &full[s]);
        }
    } else if (threadIdx.x >= 128) {  // the consumer warpgroup
        const int t = int(threadIdx.x) - 128, w = t / 32, g = (t % 32) / 4, q = t % 4;
        int64_t i = 0;  // the step, as the producer counts them
        for (int64_t block = 0; block < groups * chunks; ++block) {
            float d[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            for (int64_t ks = 0; ks < ksteps; ++ks, ++i) {
                const int s = int(i % STAGES);
                ptx::mbarrier_wait_parity(&full[s], uint32_t((i / STAGES) & 1));
                const char* a = stages + s * STAGE_BYTES;
                ptx::wgmma_fence();
                MPK_UNROLL
                for (int kk = 0; kk < BK / 16; ++kk) mma<T>(d, a, a + A_BYTES, kk);
                ptx::wgmma_commit_group();
                ptx::wgmma_wait_group<1>();  // the previous step's group is done: release its stage
                if (ks > 0) ptx::mbarrier_arrive_shared_b64(&empty[(i - 1) % STAGES]);
            }
            ptx::wgmma_wait_group<0>();
            ptx::mbarrier_arrive_shared_b64(&empty[(i - 1) % STAGES]);
            const int64_t c0 = (block / chunks) * BM, b0 = (block % chunks) * BN;
            MPK_UNROLL
            for (int r = 0; r < 8; ++r) {
                const int64_t col = c0 + 16 * w + g + 8 * ((r % 4) >> 1), b = b0 + 8 * (r / 4) + 2 * q + (r & 1);
                if (col >= n || b >= rows) continue;
                float sum = d[r];
                if (residual) sum += to_float(residual[b * rt.row_stride + col * rt.col_stride]);
                st(b, col, sum);
            }
        }
    }
    __syncthreads();  // every copy landed (the consumers waited on each) and every barrier's use is over
    if (threadIdx.x == 0)
        for (int s = 0; s < 2 * STAGES; ++s) ptx::mbarrier_inval_shared_b64(&full[s]);  // (empty follows full)
#endif
}

}  // namespace mpk
