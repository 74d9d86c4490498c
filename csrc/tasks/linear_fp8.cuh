// linear_fp8.cuh: y = x~ @ w~^T (+ residual) on e4m3 codes with packed UE8M0 block scales, one task's
// columns: MPK's linear_fp8 and linear_fp8_with_residual (linear_fp8_with_residual.cuh is the second entry
// point into the same kernel). CUDA device code for both backends (runtime/simt.h).
//   y[b, j] = round_T( sum_g 2^(cx[b, g] - 127) 2^(cw[j, g] - 127) sum_{k in block g} qx[b, k] qw[j, k]
//                      (+ r[b, j]) ),  blocks of 128 codes
// cx[b, g] = byte g % 4 of word g / 4 of row b's words (quantize_fp8.cuh's UE8M0 packing); the residual
// added in fp32 before the one rounding. The dot product and its exactness: fp8_dot.cuh (exact products,
// fp32 sums: linear.cuh's budget on the dequantized operands, plus the residual's one addition).
//
// Shapes (2-D tiles, any strides):
//   in(0) qx [B, K] e4m3, whole            in(1) sx [ceil(K / 512), aligned B] uint32, whole: row b's words
//                                           in column b
//   in(2) qw [n, K] e4m3: this task's rows  in(3) sw [ceil(K / 512), n] uint32: those rows' words, a column each
//   (residual variant) in(4) r [B, n]        out(0) y [B, n]: this task's columns of [B, N]
// Threads: warp w of the block computes the outputs w, w + warps, ... of the tile (row-major over [B, n]:
// a warp per output, fp8::block_dot), lane 0 adds the residual, rounds once and stores. No shared memory,
// no block barrier. Summation order: depends on K only. A tile whose scales do not hold a word per 4 blocks
// of its rows fails the task (task_fail) before any access past them.
// Tensor cores (iparam(0), the layer's choice: at least 16 rows on an sm_89+ target): linear_fp8_mma below,
// mma.m16n8k32 e4m3 with ldmatrix operands from cp.async-staged tiles, blocks summed apart and scaled as here.
// Not here (future variants): the block-scaled MMA of sm_100 (MPK's tcgen05 path), 16-byte code loads.
// Test: tests/runtime_python/linear_fp8/, tests/runtime_python/linear_fp8_with_residual/
// Run:  python -m pytest tests/runtime_python/linear_fp8/ tests/runtime_python/linear_fp8_with_residual/
#pragma once
#include "../runtime/ptx.h"
#include "fp8_dot.cuh"
#include "linear.cuh"

namespace mpk {

// ---- kernel
namespace fp8_linear_detail {

constexpr int64_t BLOCK = 128;  // codes per UE8M0 scale

// Block g's scale of output (b, j): x row b's UE8M0 code times W row j's.
struct BlockScales {
    const uint32_t *xs, *ws;
    Tile2D xst, wst;
    MPK_DEVICE MPK_INLINE float operator()(int64_t b, int64_t j, int64_t g) const {
        const uint32_t wx = xs[(g / 4) * xst.row_stride + b * xst.col_stride];
        const uint32_t ww = ws[(g / 4) * wst.row_stride + j * wst.col_stride];
        return fp8::ue8m0_value(fp8::ue8m0_byte(wx, g % 4)) * fp8::ue8m0_value(fp8::ue8m0_byte(ww, g % 4));
    }
};

// Output (b, j) of both paths: the residual (if any) added in fp32, then the one rounding to T.
template <typename T>
MPK_DEVICE MPK_INLINE void store_output(T* y, const Tile2D& yt, int64_t b, int64_t j, float sum, const T* residual,
                                        const Tile2D& rt) {
    if (residual) sum += to_float(residual[b * rt.row_stride + j * rt.col_stride]);
    y[b * yt.row_stride + j * yt.col_stride] = from_float<T>(sum);
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
// The tensor-core path (mma.m16n8k32 e4m3, sm_89 and newer), in mma_linear.cuh's form: y^T = W x^T, warp w
// owning the groups of 16 output columns w, w + warps, ..., each pass over 8 batch rows streaming K in
// stages of 64 codes through two per-warp buffers (cp.async.cg, rows past n or B zero-filled, the same
// XOR swizzle of 64-byte rows, chunk_at), per stage one ldmatrix.x4 of x (8 rows x 64 codes: B of two k32
// steps) and per k32 step one ldmatrix.x4 of W (16 rows x 32 codes: A) and one mma. A block of 128 codes
// (two stages) sums into its own fp32 accumulator, which then enters y's times the block's scale: the
// SIMT path's structure, with the block's products added in the tensor core's order (budget: K twice,
// as mma_linear.cuh). Shared memory: 3 KiB per warp at warp x 3 KiB.
template <typename T>
MPK_DEVICE void linear_fp8_mma(const fp8_e4m3_t* x, const Tile2D& xt, const fp8_e4m3_t* w, const Tile2D& wt,
                               const BlockScales& scale, const T* residual, const Tile2D& rt, T* y,
                               const Tile2D& yt) {
    using mma_linear_detail::chunk_at;
    constexpr int KS = 64, WROWS = 16, XROWS = 8, STAGE = (WROWS + XROWS) * KS, WARP_BYTES = 2 * STAGE;
    static_assert(KS == mma_linear_detail::ROW, "chunk_at's 64-byte rows");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    char* bufs = smem<char>(size_t(warp) * WARP_BYTES, WARP_BYTES);
    const int64_t n = yt.cols, rows = yt.rows, stages = xt.cols / KS;
    const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_chunk = lane >> 4;  // W: rows 0-15, codes 0-15 | 16-31
    const int b_row = WROWS + (lane & 7), b_chunk = lane >> 3;                    // x: rows 0-7, 16-code chunks 0-3
    const int g = lane >> 2, t = lane & 3;
    for (int64_t c0 = int64_t(warp) * WROWS; c0 < n; c0 += int64_t(warps) * WROWS) {
        for (int64_t b0 = 0; b0 < rows; b0 += XROWS) {
            // stage s's 16 W rows and 8 x rows of 4 chunks of 16 codes: lane l fills chunks l, l + 32, ...
            auto stage = [&](char* dst, int64_t k0) {
                for (int c = lane; c < (WROWS + XROWS) * 4; c += 32) {
                    const int r = c / 4;
                    const int64_t row = r < WROWS ? c0 + r : b0 + r - WROWS;
                    const bool in = r < WROWS ? row < n : row < rows;
                    const fp8_e4m3_t* src = r < WROWS ? w + (in ? row * wt.row_stride + k0 + 16 * (c % 4) : 0)
                                                      : x + (in ? row * xt.row_stride + k0 + 16 * (c % 4) : 0);
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
                if (s % 2 == 1) {  // block s / 2 complete: into y's sums, times its scale
                    MPK_UNROLL
                    for (int i = 0; i < 4; ++i) {
                        const int64_t col = c0 + g + 8 * (i >> 1), b = b0 + 2 * t + (i & 1);
                        if (col < n && b < rows) acc[i] += blk[i] * scale(b, col, s / 2);
                        blk[i] = 0.0f;
                    }
                }
            }
            MPK_UNROLL
            for (int i = 0; i < 4; ++i) {  // D: rows are output columns c0 + g (+ 8), columns batch rows b0 + 2t (+ 1)
                const int64_t col = c0 + g + 8 * (i >> 1), b = b0 + 2 * t + (i & 1);
                if (col < n && b < rows) store_output(y, yt, b, col, acc[i], residual, rt);
            }
        }
    }
}
#endif

}  // namespace fp8_linear_detail

// tensor_cores: the layer asks for the tensor-core path (iparam(0): at least 16 rows on an sm_89+ target,
// mirage/mpk/layers/linear_fp8.py), taken when the codes' rows are 16-byte aligned and contiguous.
template <typename T>
MPK_DEVICE void linear_fp8_tile(const TaskView& v, const T* residual, const Tile2D& rt, bool tensor_cores) {
    using namespace fp8_linear_detail;
    const Tile2D xt = tile2d(v.in_tile(0)), xst = tile2d(v.in_tile(1)), wt = tile2d(v.in_tile(2));
    const Tile2D wst = tile2d(v.in_tile(3)), yt = tile2d(v.out_tile(0));
    const int64_t groups = xt.cols / BLOCK;
    if (xt.cols % BLOCK || xst.rows != (groups + 3) / 4 || wst.rows != xst.rows || xst.cols < xt.rows ||
        wst.cols != wt.rows)
        return task_fail(v, "linear_fp8: the UE8M0 scales are not [ceil(K / 512), rows] words for these codes");
    const fp8_e4m3_t* x = v.in<const fp8_e4m3_t>(0);
    const fp8_e4m3_t* w = v.in<const fp8_e4m3_t>(2);
    const BlockScales scale{v.in<const uint32_t>(1), v.in<const uint32_t>(3), xst, wst};
    T* y = v.out<T>(0);
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
    if (tensor_cores && linear_detail::rows_aligned16(x, xt) && linear_detail::rows_aligned16(w, wt)) {
        linear_fp8_mma<T>(x, xt, w, wt, scale, residual, rt, y, yt);
        return;
    }
#endif
    const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
    for (int64_t o = threadIdx.x / 32; o < yt.rows * yt.cols; o += warps) {     // warp-uniform
        const int64_t b = o / yt.cols, j = o % yt.cols;
        const float sum = fp8::block_dot(x + b * xt.row_stride, xt.col_stride, w + j * wt.row_stride, wt.col_stride,
                                   groups, BLOCK, [&](int64_t g) { return scale(b, j, g); });
        if (lane == 0) store_output(y, yt, b, j, sum, residual, rt);
    }
}

// ---- dispatch
// iparam(0) != 0: the tensor cores (the layer's tensor_cores).
template <typename T> MPK_DEVICE void linear_fp8_task(const TaskView& v) {
    linear_fp8_tile<T>(v, nullptr, Tile2D{}, v.iparam(0) != 0);
}

}  // namespace mpk
