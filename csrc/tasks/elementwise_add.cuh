// elementwise_add.cuh: y = a + b on one task's tile, as CUDA device code for both backends
// (runtime/simt.h); fp32 add, one rounding to T per output.
// Shapes: in(0) a, in(1) b, out(0) y: each [rows, cols] with its own strides (2-D; 3-D/4-D
//         tiles fold their packed leading dims into rows); the extent is y's.
// Threads: the tile is walked in row-major chunks, blockDim.x apart (for_each_chunk), so
//   consecutive threads touch consecutive chunks of a row. A chunk is PACK16<T> elements moved
//   as one 16-byte access when a, b and y all allow it (unit column stride, 16-byte aligned rows,
//   cols a multiple of PACK16<T>; checked at run time), else one element. No barriers.
// Test: tests/csrc/test_kernels_elementwise.cpp (elementwise_add),
//       tests/runtime_python/elementwise_add/
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_elementwise
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
// N: elements per access (PACK16<T> on the packed path, 1 on the scalar path).
template <typename T, int N>
__device__ void elementwise_add_chunks(const T* a, const Tile2D& at, const T* b, const Tile2D& bt, T* y,
                                       const Tile2D& yt) {
    for_each_chunk(yt.rows, yt.cols / N, [&](int64_t r, int64_t c) {
        const int64_t j = c * N;
        const Pack<T, N> pa = load_pack<T, N>(a + r * at.row_stride + j * at.col_stride);
        const Pack<T, N> pb = load_pack<T, N>(b + r * bt.row_stride + j * bt.col_stride);
        Pack<T, N> py;
        for (int k = 0; k < N; ++k) py.e[k] = from_float<T>(to_float(pa.e[k]) + to_float(pb.e[k]));
        store_pack<T, N>(y + r * yt.row_stride + j * yt.col_stride, py);
    });
}

// ---- dispatch
template <typename T>
__device__ void elementwise_add_task(const TaskView& v) {
    const T* a = v.in<const T>(0);
    const T* b = v.in<const T>(1);
    T* y = v.out<T>(0);
    const Tile2D at = tile2d(v.in_tile(0)), bt = tile2d(v.in_tile(1)), yt = tile2d(v.out_tile(0));
    constexpr int N = PACK16<T>;
    if (packable<N>(a, at) && packable<N>(b, bt) && packable<N>(y, yt))
        elementwise_add_chunks<T, N>(a, at, b, bt, y, yt);
    else
        elementwise_add_chunks<T, 1>(a, at, b, bt, y, yt);
}

}  // namespace mpk
