// argmax.cuh: the index of each row's maximum over one task's tile, as CUDA device code for both
// backends (runtime/simt.h), torch.argmax's rule exactly:
//   y[r, 0] = the lowest j with x[r, j] == max_j x[r, j] (int64), and if the row holds a NaN, the
//             lowest j with x[r, j] NaN (a NaN is above every number; +0 and -0 are equal).
// No arithmetic: the values are only compared (argmax_order: a float's rank as a uint32, monotone,
// every NaN 0xFFFFFFFF, -0 as +0, 0 for "none", below -inf), so the result is exact for every T.
// The helpers here are also argmax_partial.cuh's (a vocabulary range per task) and argmax_reduce.cuh's.
// Shapes: in(0) x [rows, vocab] (row stride strides[0], any column stride; vocab < 2^32);
//         out(0) y [rows, 1] int64 with its own row stride. The layer does not split (MPK's map).
// Threads: the block takes one row at a time; thread t scans columns t, t + blockDim.x, ... keeping
//   the best (rank, column) key (argmax_beats: the higher rank, on equal ranks the lower column),
//   then a butterfly over the warp (5 64-bit shuffles per row) and lane 0 stores the warp's key in
//   shared memory. Rows go in passes of smem_bytes() / (8 * warps) rows: one __syncthreads per pass,
//   then thread i combines row i's warps in warp order and writes it; one more __syncthreads only
//   when another pass follows (a tile that fits one pass: one barrier).
// Test: tests/runtime_python/argmax/test_argmax.py (the kernel alone, task by task),
//       tests/runtime_python/argmax/test_argmax_testmode.py (in a graph, into output_tokens)
// Run:  python -m pytest tests/runtime_python/argmax/
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
// A float's rank in argmax order (see the header).
MPK_DEVICE MPK_INLINE uint32_t argmax_order(float f) {
    const uint32_t u = __float_as_uint(f), mag = u & 0x7FFFFFFFu;
    if (mag > 0x7F800000u) return 0xFFFFFFFFu;               // NaN: above +inf (0xFF800000)
    if (mag == 0) return 0x80000000u;                        // -0 == +0
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);       // -inf: 0x007FFFFF
}
// A candidate: its rank in the high 32 bits, its column (or task) in the low ones; 0 is "none".
MPK_DEVICE MPK_INLINE uint64_t argmax_key(uint32_t order, int64_t at) {
    return (static_cast<uint64_t>(order) << 32) | static_cast<uint32_t>(at);
}
// a beats b: the higher rank, on equal ranks the lower column (torch.argmax's first maximum).
MPK_DEVICE MPK_INLINE bool argmax_beats(uint64_t a, uint64_t b) {
    const uint32_t oa = static_cast<uint32_t>(a >> 32), ob = static_cast<uint32_t>(b >> 32);
    return oa > ob || (oa == ob && static_cast<uint32_t>(a) < static_cast<uint32_t>(b));
}

// Calls done(r, best key of row r) once per row of x's tile, from one thread (see the header), the
// values ranked being score(r)(column, x[r, column] as float): argmax_rows ranks x itself;
// sampling_sm100.cuh adds each column's Gumbel noise (score(r) computes the row's key once).
template <typename T, typename S, typename F>
__device__ void argmax_rows_by(const T* x, const Tile2D& xt, S&& score, F&& done) {
    const int warps = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int64_t pass_rows = static_cast<int64_t>(smem_bytes() / sizeof(uint64_t)) / warps;
    if (pass_rows < 1) pass_rows = 1;
    uint64_t* part = smem<uint64_t>(0, pass_rows * warps);   // part[i * warps + q]: warp q's of row r0 + i
    for (int64_t r0 = 0; r0 < xt.rows; r0 += pass_rows) {
        const int64_t n = xt.rows - r0 < pass_rows ? xt.rows - r0 : pass_rows;
        for (int64_t i = 0; i < n; ++i) {
            const T* xr = x + (r0 + i) * xt.row_stride;
            const auto value = score(r0 + i);
            uint64_t best = 0;
            for (int64_t c = threadIdx.x; c < xt.cols; c += blockDim.x) {
                const uint64_t k = argmax_key(argmax_order(value(c, to_float(xr[c * xt.col_stride]))), c);
                if (argmax_beats(k, best)) best = k;
            }
            for (int offset = 16; offset > 0; offset >>= 1) {
                const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, static_cast<unsigned long long>(best), offset);
                if (argmax_beats(other, best)) best = other;
            }
            if (lane == 0) part[i * warps + warp] = best;
        }
        __syncthreads();
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
            uint64_t best = part[i * warps];
            for (int q = 1; q < warps; ++q)
                if (argmax_beats(part[i * warps + q], best)) best = part[i * warps + q];
            done(r0 + i, best);
        }
        if (r0 + pass_rows < xt.rows) __syncthreads();
    }
}

template <typename T, typename F>
__device__ void argmax_rows(const T* x, const Tile2D& xt, F&& done) {
    argmax_rows_by<T>(x, xt, [](int64_t) { return [](int64_t, float f) { return f; }; }, done);
}

// ---- dispatch
template <typename T>
__device__ void argmax_task(const TaskView& v) {
    const Tile2D xt = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));
    int64_t* y = v.out<int64_t>(0);
    argmax_rows<T>(v.in<const T>(0), xt, [&](int64_t r, uint64_t best) {
        y[r * yt.row_stride] = static_cast<uint32_t>(best);
    });
}

}  // namespace mpk
