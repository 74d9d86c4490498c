// layernorm.cuh: LayerNorm of each row of one task's tile, as CUDA device code for both backends
// (runtime/simt.h):
//   mean[r] = sum_j x[r, j] / hidden,  var[r] = sum_j (x[r, j] - mean[r])^2 / hidden  (biased)
//   y[r, j] = (x[r, j] - mean[r]) * (1 / sqrt(var[r] + eps)) * w[j] + b[j]
// fp32 math, one rounding to T per output; eps = fparam(0) (the layer's default is 1e-5).
// Shapes: in(0) x [rows, hidden] (row stride strides[0], any column stride), in(1) w [hidden] and
//         in(2) b [hidden] (1-D, any stride), out(0) y [rows, hidden] with its own strides (the
//         layer splits rows, so a task has whole rows).
// Threads: the whole block takes one row at a time; thread t handles columns t, t + blockDim.x, ...
//   (consecutive threads, consecutive elements: coalesced).
// Two passes over each row (x is read three times), so the variance sums squares of deviations
//   from the computed mean and never cancels (a one-pass sum of x^2 - mean^2 would, for rows
//   with |mean| >> std). Summation order of each sum (fp32): each thread adds its columns in
//   column order, then block_sum (common.cuh): warp_sum's butterfly over 32 lanes, then the warps'
//   totals in warp order, the same in every thread. inv_std = 1 / sqrtf(var + eps): division and
//   square root correctly rounded (not rsqrtf). Error budget: test_layernorm_testmode.py, tol_layernorm.
// Barriers: block_sum has two __syncthreads (the second lets the next call reuse its shared
//   floats, blockDim.x / 32 at offset 0): four per row.
// Test: tests/runtime_python/layernorm/test_layernorm.py (the kernel alone, task by task),
//       tests/runtime_python/layernorm/test_layernorm_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/layernorm/
#pragma once
#include <math.h>
#include "common.cuh"

namespace mpk {

// ---- kernel
template <typename T>
__device__ void layernorm_rows(const T* x, const Tile2D& xt, const T* w, const Tile2D& wt, const T* b,
                               const Tile2D& bt, T* y, const Tile2D& yt, float eps) {
    const int64_t hidden = xt.cols;
    for (int64_t r = 0; r < xt.rows; ++r) {
        const T* xr = x + r * xt.row_stride;
        T* yr = y + r * yt.row_stride;
        float sum = 0.0f;
        for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) sum += to_float(xr[c * xt.col_stride]);
        const float mean = block_sum(sum, 0) / static_cast<float>(hidden);
        float sum_sq = 0.0f;
        for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
            const float d = to_float(xr[c * xt.col_stride]) - mean;
            sum_sq += d * d;
        }
        const float inv_std = 1.0f / sqrtf(block_sum(sum_sq, 0) / static_cast<float>(hidden) + eps);
        for (int64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
            const float d = to_float(xr[c * xt.col_stride]) - mean;
            yr[c * yt.col_stride] =
                from_float<T>(d * inv_std * to_float(w[c * wt.col_stride]) + to_float(b[c * bt.col_stride]));
        }
    }
}

// ---- dispatch
template <typename T>
__device__ void layernorm_task(const TaskView& v) {
    layernorm_rows<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.in<const T>(1), tile2d(v.in_tile(1)),
                      v.in<const T>(2), tile2d(v.in_tile(2)), v.out<T>(0), tile2d(v.out_tile(0)),
                      static_cast<float>(v.fparam(0)));
}

}  // namespace mpk
