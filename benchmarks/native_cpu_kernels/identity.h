// identity.h: copy one task's tile, CPU. A bit copy (no fp32 round trip), so any T
// works, NaN payloads included.
// Shapes: in(0) [rows, cols], out(0) [rows, cols], each with its own strides; the extent
//         is out(0)'s.
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include "runtime/dtypes.h"
#include "tile2d.h"

namespace mpk {

// ---- kernel
template <typename T>
void identity_kernel(const T* x, Tile2D xt, T* y, Tile2D yt) {
    for (int64_t r = 0; r < yt.rows; ++r)
        for (int64_t c = 0; c < yt.cols; ++c)
            y[r * yt.row_stride + c * yt.col_stride] = x[r * xt.row_stride + c * xt.col_stride];
}

// ---- dispatch
template <typename T>
void identity_task(const TaskView& v) {
    identity_kernel<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.out<T>(0), tile2d(v.out_tile(0)));
}

}  // namespace mpk
