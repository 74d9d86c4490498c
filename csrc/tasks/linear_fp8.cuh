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
// Tensor cores (iparam(0), the layer's choice: at least 16 rows on an sm_89+ target): mma_fp8.cuh's
// fp8_mma_rows, mma.m16n8k32 e4m3 with ldmatrix operands from cp.async-staged tiles, each block summed apart
// and scaled into the output as here.
// Not here (future variants): the block-scaled MMA of sm_100 (MPK's tcgen05 path), 16-byte code loads.
// Test: tests/runtime_python/linear_fp8/, tests/runtime_python/linear_fp8_with_residual/
// Run:  python -m pytest tests/runtime_python/linear_fp8/ tests/runtime_python/linear_fp8_with_residual/
#pragma once
#include "fp8_dot.cuh"
#include "linear.cuh"
#include "mma_fp8.cuh"

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

// x's row b (the tensor-core path reads rows through it, mma_fp8.cuh).
struct PlainRows {
    const fp8_e4m3_t* x;
    int64_t row_stride;
    MPK_DEVICE MPK_INLINE const fp8_e4m3_t* row(int64_t b) const { return x + b * row_stride; }
};

// How the tensor-core path's output (b, j) reaches y: store_output.
template <typename T> struct OutputStore {
    T* y;
    Tile2D yt;
    const T* residual;
    Tile2D rt;
    MPK_DEVICE MPK_INLINE void operator()(int64_t b, int64_t j, float sum) const {
        store_output(y, yt, b, j, sum, residual, rt);
    }
};


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
        fp8_mma_rows(xt.rows, xt.cols, BLOCK, PlainRows{x, xt.row_stride}, w, wt, scale,
                     OutputStore<T>{y, yt, residual, rt});
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
