// elementwise_add.h: y = a + b on one task's tile, CPU; fp32 add, one rounding to T.
// Shapes: in(0) a, in(1) b, out(0) y, each [rows, cols] with its own strides;
//         the extent is out(0)'s.
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include "runtime/dtypes.h"
#include "tile2d.h"

namespace mpk {

// ---- kernel
template <typename T>
void elementwise_add_kernel(const T* a, Tile2D at, const T* b, Tile2D bt, T* y, Tile2D yt) {
    for (int64_t r = 0; r < yt.rows; ++r)
        for (int64_t c = 0; c < yt.cols; ++c)
            y[r * yt.row_stride + c * yt.col_stride] =
                from_float<T>(to_float(a[r * at.row_stride + c * at.col_stride]) +
                              to_float(b[r * bt.row_stride + c * bt.col_stride]));
}

// ---- dispatch
template <typename T>
void elementwise_add_task(const TaskView& v) {
    elementwise_add_kernel<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.in<const T>(1),
                              tile2d(v.in_tile(1)), v.out<T>(0), tile2d(v.out_tile(0)));
}

}  // namespace mpk
