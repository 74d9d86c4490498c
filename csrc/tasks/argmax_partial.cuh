// argmax_partial.cuh: each row's maximum and its index over one task's vocabulary range, as CUDA
// device code for both backends (runtime/simt.h); argmax.cuh's rule and block reduction:
//   value[r, 0] = x[r, j*] (its bits), index[r, 0] = start + j* (int64, the GLOBAL vocabulary index)
// where j* is the first maximum (or first NaN) of the tile's row r (argmax.cuh) and start =
// iparam(0) = grid.x * chunk, the task's first vocabulary column (the layer's per-task iparams).
// argmax_reduce.cuh then picks among the tasks' partials, preferring the earlier task on equal values.
// Shapes: in(0) x [rows, chunk] (a column block of [batch, vocab], any strides); out(0) value [rows, 1]
//         in x's dtype, out(1) index [rows, 1] int64, each with its own row stride.
// Threads and barriers: argmax.cuh's argmax_rows.
// Test: tests/runtime_python/argmax_partial/test_argmax_partial.py (the kernel alone, task by task),
//       tests/runtime_python/argmax_partial/test_argmax_partial_testmode.py (in a graph, with the reduce)
// Run:  python -m pytest tests/runtime_python/argmax_partial/
#pragma once
#include "argmax.cuh"

namespace mpk {

// ---- dispatch
template <typename T>
__device__ void argmax_partial_task(const TaskView& v) {
    const T* x = v.in<const T>(0);
    const Tile2D xt = tile2d(v.in_tile(0)), vt = tile2d(v.out_tile(0)), it = tile2d(v.out_tile(1));
    T* value = v.out<T>(0);
    int64_t* index = v.out<int64_t>(1);
    argmax_rows<T>(x, xt, [&](int64_t r, uint64_t best) {
        const int64_t c = static_cast<uint32_t>(best);
        value[r * vt.row_stride] = x[r * xt.row_stride + c * xt.col_stride];
        index[r * it.row_stride] = v.iparam(0) + c;
    });
}

}  // namespace mpk
