// linear_with_residual.h: y = x @ W^T + residual for one task's tile, CPU (kernel in linear.h).
// Shapes: in(0) x [B, K], in(1) W [n, K], in(2) residual [B, n], out(0) y [B, n], each
//         with its own row stride (y's and the residual's are N when column-split).
// iparam(0) != 0: add the residual (in fp32, before the one rounding to T); 0: y = x @ W^T
// (with world_size > 1 only rank 0 adds it, so the allreduce sums it once).
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include "linear.h"

namespace mpk {

// ---- dispatch
template <typename T>
void linear_with_residual_task(const TaskView& v) {
    const bool add_residual = v.iparam(0) != 0;
    linear_fast<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.in<const T>(1), tile2d(v.in_tile(1)),
                   add_residual ? v.in<const T>(2) : nullptr, tile2d(v.in_tile(2)),
                   v.out<T>(0), tile2d(v.out_tile(0)));
}

}  // namespace mpk
