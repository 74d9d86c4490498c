// linear_with_residual.cuh: y = x @ W^T + residual for one task's tile (the kernel is
// linear_tile in linear.cuh: thread mapping, loads and summation order are stated there).
// Shapes: in(0) x [B, K], in(1) W [n, K], in(2) residual [B, n], out(0) y [B, n], each with its
//         own strides (y's and the residual's row stride is N when column-split).
// iparam(0) != 0: add the residual, in fp32 after the 32 lane partials and before the one
// rounding to T; 0: y = x @ W^T (with world_size > 1 only rank 0 adds it, so the allreduce that
// follows sums it once: mirage/mpk/layers/linear_with_residual.py). iparam(1) != 0: the tensor-core
// path (the layer's tensor_cores, mirage/mpk/layers/linear.py; linear.cuh).
// Test: tests/csrc/test_kernels_linear.cpp, tests/runtime_python/linear_with_residual/
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_linear
#pragma once
#include "linear.cuh"

namespace mpk {

// ---- dispatch
template <typename T> MPK_DEVICE void linear_with_residual_task(const TaskView& v) {
    const bool add_residual = v.iparam(0) != 0;
    linear_tile<T>(v, add_residual ? v.in<const T>(2) : nullptr, tile2d(v.in_tile(2)), int(v.iparam(1)));
}

}  // namespace mpk
