// tensor_init.h: zero one task's tile, CPU (T{} is all-zero bits for every dtype here).
// Shapes: out(0) [rows, cols] with its strides; the task's inputs are dummies (MPK's
//         tensor_init_layer(input, dummy_input, dummy_output) zeroes `input`, which the
//         layer module passes as this task's out(0)).
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include "runtime/dtypes.h"
#include "tile2d.h"

namespace mpk {

// ---- kernel
template <typename T>
void tensor_init_kernel(T* y, Tile2D yt) {
    for (int64_t r = 0; r < yt.rows; ++r)
        for (int64_t c = 0; c < yt.cols; ++c) y[r * yt.row_stride + c * yt.col_stride] = T{};
}

// ---- dispatch
template <typename T>
void tensor_init_task(const TaskView& v) {
    tensor_init_kernel<T>(v.out<T>(0), tile2d(v.out_tile(0)));
}

}  // namespace mpk
