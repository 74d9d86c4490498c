// tensor_init.cuh: zero one task's tile, as CUDA device code for both backends
// (runtime/simt.h). Every element becomes +0 (all bits clear, for every T here).
// Shapes: out(0) y [rows, cols] with its strides. The task's other tiles are dummies: MPK's
//         tensor_init_layer(input, dummy_input, dummy_output) zeroes `input`, which the layer
//         module passes as out(0); in(0) = dummy_input is read by no one (it orders the task),
//         out(1) = dummy_output is never written.
// Threads: the tile is walked in row-major chunks, blockDim.x apart (for_each_chunk), so
//   consecutive threads store consecutive chunks of a row. A chunk is PACK16<T> elements stored
//   as one 16-byte access when y allows it (unit column stride, 16-byte aligned rows, cols a
//   multiple of PACK16<T>; checked at run time), else one element. No barriers.
// Test: tests/csrc/test_kernels_elementwise.cpp (tensor_init), tests/runtime_python/tensor_init/
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_elementwise
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
// N: elements per access (PACK16<T> on the packed path, 1 on the scalar path).
template <typename T, int N>
__device__ void tensor_init_chunks(T* y, const Tile2D& yt) {
    Pack<T, N> zero;
    for (int k = 0; k < N; ++k) zero.e[k] = from_float<T>(0.0f);
    for_each_chunk(yt.rows, yt.cols / N, [&](int64_t r, int64_t c) {
        store_pack<T, N>(y + r * yt.row_stride + c * N * yt.col_stride, zero);
    });
}

// ---- dispatch
template <typename T>
__device__ void tensor_init_task(const TaskView& v) {
    T* y = v.out<T>(0);
    const Tile2D yt = tile2d(v.out_tile(0));
    constexpr int N = PACK16<T>;
    if (packable<N>(y, yt))
        tensor_init_chunks<T, N>(y, yt);
    else
        tensor_init_chunks<T, 1>(y, yt);
}

}  // namespace mpk
