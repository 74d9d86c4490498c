// moe_mul_sum_add.cuh: the MoE combine of one task's tile, as CUDA device code for both backends
// (runtime/simt.h):
//   y[b, j] = residual[b, j] + sum_{k = 0}^{K-1} w[b, k] * x[b, k, j]
// fp32 math in MPK's order (tasks/blackwell/mul_sum_add_sm100.cuh): acc = residual, then
// acc += x * w for k ascending (x and residual T, w float32), one rounding to T per output. A slot
// whose weight is 0 adds an exact 0 (finite x).
// Shapes: in(0) x [bt, K, ht], in(1) w [bt, K] (float), in(2) residual [bt, ht], out(0) y [bt, ht],
//         each with its own strides (any, per dim). The layer's grid.x splits batch, grid.y hidden;
//         every task has its tokens' whole weight rows (all K slots).
// Threads: the block walks y's bt * ht elements in row-major order, blockDim.x apart
//   (for_each_chunk): consecutive threads, consecutive columns of x's rows (coalesced), the weight
//   row read by every thread of a token (broadcast). No barriers.
// Test: tests/runtime_python/moe_mul_sum_add/test_moe_mul_sum_add.py (the kernel alone, task by task),
//       tests/runtime_python/moe_mul_sum_add/test_moe_mul_sum_add_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/moe_mul_sum_add/
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
template <typename T>
__device__ void moe_mul_sum_add_tile(const T* x, const MpkTile& xt, const float* w, const MpkTile& wt,
                                     const T* res, const Tile2D& rt, T* y, const Tile2D& yt) {
    const int64_t kt = xt.dims[1];
    for_each_chunk(yt.rows, yt.cols, [&](int64_t b, int64_t j) {
        const T* xb = x + b * xt.strides[0] + j * xt.strides[2];
        const float* wb = w + b * wt.strides[0];
        float acc = to_float(res[b * rt.row_stride + j * rt.col_stride]);
        for (int64_t k = 0; k < kt; ++k) acc += to_float(xb[k * xt.strides[1]]) * wb[k * wt.strides[1]];
        y[b * yt.row_stride + j * yt.col_stride] = from_float<T>(acc);
    });
}

// ---- dispatch
template <typename T>
__device__ void moe_mul_sum_add_task(const TaskView& v) {
    moe_mul_sum_add_tile<T>(v.in<const T>(0), v.in_tile(0), v.in<const float>(1), v.in_tile(1),
                            v.in<const T>(2), tile2d(v.in_tile(2)), v.out<T>(0), tile2d(v.out_tile(0)));
}

}  // namespace mpk
