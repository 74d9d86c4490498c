// identity.cuh: copy one task's tile, as CUDA device code for both backends (runtime/simt.h).
// A bit copy (no fp32 round trip): every bit pattern, NaN payloads and -0 included, arrives
// unchanged, for any T.
// Shapes: in(0) x, out(0) y: each [rows, cols] with its own strides, the extent y's. The layer's
//         grid.x splits the last dim, so a tile is a column block of the tensor (row stride >
//         cols); a 3-D tile [B, S, h] keeps S whole, so tile2d folds B and S into B * S rows.
// Threads: the tile is walked in row-major chunks, blockDim.x apart (for_each_chunk), so
//   consecutive threads touch consecutive chunks of a row. A chunk is 16 bytes (PACK16<T>
//   elements, one 16-byte load and store) when x and y both allow it (unit column stride,
//   16-byte aligned rows, cols a multiple of PACK16<T>; checked at run time), else one element.
//   No barriers.
// Test: tests/csrc/test_kernels_elementwise.cpp (identity), tests/runtime_python/identity/
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_elementwise
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
// N: elements per access (PACK16<T> on the packed path, 1 on the scalar path).
template <typename T, int N>
__device__ void identity_chunks(const T* x, const Tile2D& xt, T* y, const Tile2D& yt) {
    for_each_chunk(yt.rows, yt.cols / N, [&](int64_t r, int64_t c) {
        const int64_t j = c * N;
        store_pack<T, N>(y + r * yt.row_stride + j * yt.col_stride,
                         load_pack<T, N>(x + r * xt.row_stride + j * xt.col_stride));
    });
}

// ---- dispatch
template <typename T>
__device__ void identity_task(const TaskView& v) {
    const T* x = v.in<const T>(0);
    T* y = v.out<T>(0);
    const Tile2D xt = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));
    constexpr int N = PACK16<T>;
    if (packable<N>(x, xt) && packable<N>(y, yt))
        identity_chunks<T, N>(x, xt, y, yt);
    else
        identity_chunks<T, 1>(x, xt, y, yt);
}

}  // namespace mpk
