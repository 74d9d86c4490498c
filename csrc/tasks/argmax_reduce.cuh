// argmax_reduce.cuh: the final argmax of each row from the partials of argmax_partial's tasks, as CUDA
// device code for both backends (runtime/simt.h):
//   y[r, 0] = index[r, j*], j* the first task whose value[r, j] is the row's maximum (argmax.cuh's
//             order: a NaN above every number, the first NaN's task if any; +0 and -0 equal)
// argmax_partial's tasks cover ascending vocabulary ranges, so the earlier task holds the lower
// index: on equal values this is torch.argmax's first maximum, across the tasks' boundaries too.
// Shapes: in(0) value [rows, tasks] (any dtype T of the logits), in(1) index [rows, tasks] int64,
//         out(0) y [rows, 1] int64; each with its own strides. The layer's grid.y splits rows.
// Threads: thread t takes rows t, t + blockDim.x, ... and scans its row's tasks in order, keeping
//   the first of the highest rank (a strict >). No barriers, no shuffles, no shared memory.
// Test: tests/runtime_python/argmax_reduce/test_argmax_reduce.py (the kernel alone, task by task),
//       tests/runtime_python/argmax_reduce/test_argmax_reduce_testmode.py (in a graph, into output_tokens)
// Run:  python -m pytest tests/runtime_python/argmax_reduce/
#pragma once
#include "argmax.cuh"

namespace mpk {

// ---- dispatch
template <typename T>
__device__ void argmax_reduce_task(const TaskView& v) {
    const T* value = v.in<const T>(0);
    const int64_t* index = v.in<const int64_t>(1);
    const Tile2D vt = tile2d(v.in_tile(0)), it = tile2d(v.in_tile(1)), yt = tile2d(v.out_tile(0));
    int64_t* y = v.out<int64_t>(0);
    for (int64_t r = threadIdx.x; r < vt.rows; r += blockDim.x) {
        const T* vr = value + r * vt.row_stride;
        uint32_t best = argmax_order(to_float(vr[0]));
        int64_t at = 0;
        for (int64_t j = 1; j < vt.cols; ++j) {
            const uint32_t o = argmax_order(to_float(vr[j * vt.col_stride]));
            if (o > best) {
                best = o;
                at = j;
            }
        }
        y[r * yt.row_stride] = index[r * it.row_stride + at * it.col_stride];
    }
}

}  // namespace mpk
