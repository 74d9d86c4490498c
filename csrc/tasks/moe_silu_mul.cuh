// moe_silu_mul.cuh: the SwiGLU activation of routed tokens, one task's tile, as CUDA device code for
// both backends (runtime/simt.h):
//   y[b, k, j] = silu(x[b, k, j]) * x[b, k, I + j],  silu(g) = g / (1 + exp(-g)),  j < I
// Each (token b, slot k) row of x is [gate (I) | up (I)] (MPK's layout: tasks/ampere/silu_mul.cuh
// on each row, gate first). fp32 math (silu_times of silu_mul.cuh: its tails, one expf), one rounding
// to T per output (MPK rounds silu to T before the multiply; within tol_elementwise either way).
// Shapes: in(0) x [bt, kt, 2I], out(0) y [bt, kt, I], each with its own strides (any, per dim): the
//         layer's grid.x splits dim 0, grid.y dim 1, so with grid.y > 1 a tile's rows are not evenly
//         spaced and tile2d's folding does not hold: rows are walked as (b, k) pairs.
// Threads: the block walks the bt * kt * I outputs in row-major order, blockDim.x apart
//   (for_each_chunk over [bt * kt, I]): consecutive threads, consecutive columns. No barriers.
// Test: tests/runtime_python/moe_silu_mul/test_moe_silu_mul.py (the kernel alone, task by task),
//       tests/runtime_python/moe_silu_mul/test_moe_silu_mul_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/moe_silu_mul/
#pragma once
#include "common.cuh"
#include "silu_mul.cuh"

namespace mpk {

// ---- kernel
template <typename T>
__device__ void moe_silu_mul_rows(const T* x, const MpkTile& xt, T* y, const MpkTile& yt) {
    const int64_t kt = yt.dims[1], m = yt.dims[2];
    const int64_t up = m * xt.strides[2];            // up is m of x's columns past gate
    for_each_chunk(yt.dims[0] * kt, m, [&](int64_t r, int64_t j) {
        const int64_t b = r / kt, k = r % kt;
        const T* g = x + b * xt.strides[0] + k * xt.strides[1] + j * xt.strides[2];
        y[b * yt.strides[0] + k * yt.strides[1] + j * yt.strides[2]] =
            from_float<T>(silu_times(to_float(g[0]), to_float(g[up])));
    });
}

// ---- dispatch
template <typename T>
__device__ void moe_silu_mul_task(const TaskView& v) {
    moe_silu_mul_rows<T>(v.in<const T>(0), v.in_tile(0), v.out<T>(0), v.out_tile(0));
}

}  // namespace mpk
