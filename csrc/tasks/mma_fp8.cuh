// mma_fp8.cuh: the block-scaled e4m3 GEMM on the tensor cores that the fp8 linears share (linear_fp8.cuh,
// moe_w13_fp8.cuh): mma.sync.m16n8k32 .e4m3 (sm_89 and newer) with ldmatrix operands from cp.async-staged,
// double-buffered tiles (runtime/ptx.h), in mma_linear.cuh's form:
//   y[b, j] = sum_g scale(b, j, g) sum_{k in block g} x[b, k] w[j, k],   blocks of G = 64 or 128 codes
// The product is computed transposed, y^T = W x^T: A = 16 W rows x 32 codes (row-major, as stored), B = x^T
// (x's rows as stored), D = 16 output columns x 8 batch rows in fp32. Warp w owns the groups of 16 output
// columns w, w + warps, ...; per group and pass of 8 batch rows it streams K in stages of 64 codes through
// its two buffers (16 W rows and 8 x rows of 64 bytes, one 16-byte cp.async.cg per chunk, rows past n or
// the batch zero-filled with src-size 0; chunk_at's XOR swizzle), per stage one ldmatrix.x4 of x (B of two
// k32 steps) and per k32 step one ldmatrix.x4 of W (A) and one mma. Each block of G codes sums into its own
// fp32 accumulator (from 0), which then enters the output's sum times scale(b, j, g): the SIMT path's
// structure (fp8_dot.cuh), the block's exact products added in the tensor core's order. Budget: linear's
// with K counted twice (mma_linear.cuh). ldmatrix moves 16-bit elements; e4m3 pairs move as such, so the
// fragments land as the ISA's .e4m3 layouts want them (four codes per register: runtime/simt_cpu_ptx.h).
// Caller's contract: every row xr.row(b) and W's rows 16-byte aligned with unit column stride, K % G == 0.
// Shared memory: 3 KiB per warp at warp x 3 KiB. No block barrier.
// Test: tests/runtime_python/linear_fp8/, tests/runtime_python/moe_w13_fp8/ (their target_cc 90 cases of 16+ rows)
#pragma once
#include "../runtime/ptx.h"
#include "common.cuh"
#include "mma_linear.cuh"

namespace mpk {

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
// xr.row(b): x's row b of codes; scale(b, j, g): block g's scale of output (b, j); st(b, j, sum): stores it.
template <typename XR, typename SC, typename ST>
MPK_DEVICE void fp8_mma_rows(int64_t rows, int64_t k_len, int64_t group, const XR& xr, const fp8_e4m3_t* w,
                             const Tile2D& wt, const SC& scale, const ST& st) {
    using mma_linear_detail::chunk_at;
    constexpr int KS = 64, WROWS = 16, XROWS = 8, STAGE = (WROWS + XROWS) * KS, WARP_BYTES = 2 * STAGE;
    static_assert(KS == mma_linear_detail::ROW, "chunk_at's 64-byte rows");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    char* bufs = smem<char>(size_t(warp) * WARP_BYTES, WARP_BYTES);
    const int64_t n = wt.rows, stages = k_len / KS, per_block = group / KS;
    const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_chunk = lane >> 4;  // W: rows 0-15, codes 0-15 | 16-31
    const int b_row = WROWS + (lane & 7), b_chunk = lane >> 3;                    // x: rows 0-7, 16-code chunks 0-3
    const int g = lane >> 2, t = lane & 3;
    for (int64_t c0 = int64_t(warp) * WROWS; c0 < n; c0 += int64_t(warps) * WROWS) {
        for (int64_t b0 = 0; b0 < rows; b0 += XROWS) {
            // stage s: 16 W rows and 8 x rows of 4 chunks of 16 codes; lane l fills chunks l, l + 32, ...
            auto stage = [&](char* dst, int64_t k0) {
                for (int c = lane; c < (WROWS + XROWS) * 4; c += 32) {
                    const int r = c / 4;
                    const int64_t row = r < WROWS ? c0 + r : b0 + r - WROWS;
                    const bool in = r < WROWS ? row < n : row < rows;
                    const fp8_e4m3_t* base = r < WROWS ? w : xr.row(0);
                    const fp8_e4m3_t* src = !in ? base
                                            : (r < WROWS ? w + row * wt.row_stride : xr.row(row)) + k0 + 16 * (c % 4);
                    ptx::cp_async_cg_shared_global<16>(dst + chunk_at(r, c % 4), src, in ? 16u : 0u);
                }
            };
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, blk[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            stage(bufs, 0);
            ptx::cp_async_commit_group();
            for (int64_t s = 0; s < stages; ++s) {
                if (s + 1 < stages) {
                    stage(bufs + ((s + 1) & 1) * STAGE, (s + 1) * KS);
                    ptx::cp_async_commit_group();
                    ptx::cp_async_wait_group<1>();  // stage s has landed, s + 1 may be in flight
                } else {
                    ptx::cp_async_wait_group<0>();
                }
                __syncwarp();  // every lane's copies of stage s are visible to the warp
                const char* sg = bufs + (s & 1) * STAGE;
                uint32_t xb[4];  // registers 2j, 2j + 1: B of k32 step j
                ptx::ldmatrix_m8n8_x4_shared_b16(xb, sg + chunk_at(b_row, b_chunk));
                MPK_UNROLL
                for (int j = 0; j < 2; ++j) {
                    uint32_t a[4];
                    ptx::ldmatrix_m8n8_x4_shared_b16(a, sg + chunk_at(a_row, 2 * j + a_chunk));
                    const uint32_t b[2] = {xb[2 * j], xb[2 * j + 1]};
                    ptx::mma_m16n8k32_row_col_f32_e4m3_e4m3_f32(blk, a, b, blk);
                }
                __syncwarp();  // every lane has read stage s & 1 before stage s + 2 is copied into it
                if ((s + 1) % per_block == 0) {  // block s / per_block complete: into the sums, times its scale
                    MPK_UNROLL
                    for (int i = 0; i < 4; ++i) {
                        const int64_t col = c0 + g + 8 * (i >> 1), b = b0 + 2 * t + (i & 1);
                        if (col < n && b < rows) acc[i] += blk[i] * scale(b, col, s / per_block);
                        blk[i] = 0.0f;
                    }
                }
            }
            MPK_UNROLL
            for (int i = 0; i < 4; ++i) {  // D: rows are output columns c0 + g (+ 8), columns batch rows b0 + 2t (+ 1)
                const int64_t col = c0 + g + 8 * (i >> 1), b = b0 + 2 * t + (i & 1);
                if (col < n && b < rows) st(b, col, acc[i]);
            }
        }
    }
}
#endif

}  // namespace mpk
