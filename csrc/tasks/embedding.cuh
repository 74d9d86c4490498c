// embedding.cuh: the embedding lookup of one task's tile, as CUDA device code for both backends
// (runtime/simt.h). A bit copy (no fp32 round trip), for any T:
//   y[r, j] = w[id(r), j] if 0 <= id(r) < vocab, else 0
// where r is the tile's row and id(r) its token id (iparam(0), the layer's input_source):
//   1: in(0)[r, 0], the input tile (token ids, int64, its own row stride);
//   0: meta->tokens[step[0] + R + r] with R the tile's first row of the whole output: request 0's
//      tokens from position step[0] (MPK's runtime_config.tokens + step[0]); a position outside
//      [0, max_seq_length = iparam(1)) counts as an id outside the vocabulary. R comes from the input
//      tile's offset (bytes / 8 / its row stride), the only place a task sees its rows' position.
// An id outside [0, vocab) writes zeros and reads nothing of w: never an out-of-bounds read.
// Shapes: in(0) ids [rows, 1] int64; in(1) w [vocab, cols] (a column block of the table: the layer's
//         grid.x splits hidden), any strides; out(0) y [rows, cols] with its own strides.
// Threads: the tile is walked in row-major chunks, blockDim.x apart (for_each_chunk), so consecutive
//   threads touch consecutive chunks of a row; each looks up its row's id (a load of one int64).
//   A chunk is 16 bytes (PACK16<T> elements) when w and y both allow it (unit column stride, 16-byte
//   aligned rows, cols a multiple of PACK16<T>; checked at run time), else one element. No barriers.
// Test: tests/runtime_python/embedding/test_embedding.py (the kernel alone, task by task),
//       tests/runtime_python/embedding/test_embedding_testmode.py (in a graph, ids from the meta tensors)
// Run:  python -m pytest tests/runtime_python/embedding/
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
// The token id of tile row r (see the header); -1 for a source-0 position outside the tokens row.
MPK_DEVICE MPK_INLINE int64_t embedding_id(const TaskView& v, int64_t r) {
    const MpkTile& it = v.in_tile(0);
    const int64_t row_stride = it.ndim > 1 && it.strides[0] > 0 ? it.strides[0] : 1;
    if (v.iparam(0) == 1) return v.in<const int64_t>(0)[r * row_stride];
    const int64_t pos = int64_t(v.meta->step[0]) + it.offset / int64_t(sizeof(int64_t)) / row_stride + r;
    return pos >= 0 && pos < v.iparam(1) ? v.meta->tokens[pos] : -1;
}

// N: elements per access (PACK16<T> on the packed path, 1 on the scalar path).
template <typename T, int N>
__device__ void embedding_chunks(const TaskView& v, const T* w, const Tile2D& wt, T* y, const Tile2D& yt) {
    Pack<T, N> zero;
    for (int k = 0; k < N; ++k) zero.e[k] = from_float<T>(0.0f);
    for_each_chunk(yt.rows, yt.cols / N, [&](int64_t r, int64_t c) {
        const int64_t id = embedding_id(v, r), j = c * N;
        T* dst = y + r * yt.row_stride + j * yt.col_stride;
        if (id >= 0 && id < wt.rows)
            store_pack<T, N>(dst, load_pack<T, N>(w + id * wt.row_stride + j * wt.col_stride));
        else
            store_pack<T, N>(dst, zero);
    });
}

// ---- dispatch
template <typename T>
__device__ void embedding_task(const TaskView& v) {
    const T* w = v.in<const T>(1);
    T* y = v.out<T>(0);
    const Tile2D wt = tile2d(v.in_tile(1)), yt = tile2d(v.out_tile(0));
    constexpr int N = PACK16<T>;
    if (packable<N>(w, wt) && packable<N>(y, yt))
        embedding_chunks<T, N>(v, w, wt, y, yt);
    else
        embedding_chunks<T, 1>(v, w, wt, y, yt);
}

}  // namespace mpk
