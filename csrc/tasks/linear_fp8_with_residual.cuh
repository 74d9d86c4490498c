// linear_fp8_with_residual.cuh: MPK's linear_fp8_with_residual, y = x~ @ w~^T + residual: the entry point
// into linear_fp8.cuh's kernel with in(4) r [B, n] (this task's columns) added in fp32 before the rounding;
// shapes, scales, threads and order are described there.
// Test: tests/runtime_python/linear_fp8_with_residual/
// Run:  python -m pytest tests/runtime_python/linear_fp8_with_residual/
#pragma once
#include "linear_fp8.cuh"

namespace mpk {

// ---- dispatch
template <typename T> MPK_DEVICE void linear_fp8_with_residual_task(const TaskView& v) {
    linear_fp8_tile<T>(v, v.in<const T>(4), tile2d(v.in_tile(4)), v.iparam(0) != 0);
}

}  // namespace mpk
