// splitk_linear.cuh: y += x @ W^T with K split across grid.y: each task computes the fp32 partial
// sum of its K slice for its [B, n] output tile and adds it into y atomically (MPK's
// splitk_linear_layer, TASK_SPLITK_LINEAR_SWAPAB_HOPPER: the output accumulates, MPK's TMA
// reduce-add). The GEMV is linear.cuh's linear_rows (thread mapping, loads, the partial's
// summation order: stated there); only the store differs (AtomicAddStore below).
//
// Shapes (2-D tiles, any strides; tile2d in common.cuh), task (i, j) of grid (gx, gy):
//   in(0)  x [B, K/gy]  columns [j K/gy, (j+1) K/gy) of the input
//   in(1)  W [n, K/gy]  rows [i n, (i+1) n) of the [N, K] weight, the same K columns
//   in(2)  y [B, n]     the output tile's value before the layer (the same storage as out(0):
//                       read-modify-written; the layer declares it in place)
//   out(0) y [B, n]     columns [i n, (i+1) n) of [B, N]; every task (i, *) adds into it
//                       (Access.shared = ACCUMULATE)
// Per output element y[b][c] a task makes exactly one add, by one thread (the lane that sums
// the 32 lane partials in linear.cuh): fp32 (T = float): atomicAdd; bf16/fp16: a CAS loop on
// the aligned 32-bit word holding the element (the other half kept as it is read), each try
//   y <- round_T(to_float(y) + p)
// with p the task's fp32 partial.
//
// Deterministic: each partial p_j (its bits depend on K/gy, T and the path only, linear.cuh),
// and a task run alone (y_init + p_j, one rounding). Not deterministic: the order in which the gy
// tasks of a tile add (the schedule decides), so with gy > 1 the output's bits may differ from
// run to run: each add rounds the running value to T once (fp32: round to fp32), so the result
// is within gy roundings of |y_init| + sum_j |p_j| in u_T plus the partials' own fp32 error
// (testing.tol_splitk_linear; tolerances module doc, "Split-K accumulate").
// Test: tests/runtime_python/splitk_linear/ (kernel level: each task alone, y_init + its own
//       partial; test mode: the sum of all partials under jitter), and
//       tests/runtime_python/test_mode/test_splitk_linear_controls.py
// Run:  python -m pytest tests/runtime_python/splitk_linear/
#pragma once
#include "linear.cuh"

namespace mpk {

namespace splitk_detail {

// y += sum, one rounding to T per add, atomic against every other task adding into y.
template <typename T> struct AtomicAddStore {
    T* y;
    Tile2D yt;
    MPK_DEVICE MPK_INLINE void operator()(int64_t b, int64_t col, float sum) const {
        T* p = y + b * yt.row_stride + col * yt.col_stride;
        if constexpr (sizeof(T) == 4) {
            atomicAdd(reinterpret_cast<float*>(p), sum);
        } else {
            const uintptr_t a = reinterpret_cast<uintptr_t>(p);
            unsigned int* word = reinterpret_cast<unsigned int*>(a & ~uintptr_t(3));
            const unsigned int shift = unsigned(a & 2) * 8;  // the element's bits in its word (little-endian)
            // an atomic read (a CAS that changes nothing): a plain read races with the other adders' CAS
            unsigned int old = atomicCAS(word, 0u, 0u), assumed;
            do {  // scalar memcpys only (registers: no stack frame under nvcc)
                assumed = old;
                const uint16_t cur_bits = uint16_t(assumed >> shift);
                T cur;
                memcpy(&cur, &cur_bits, sizeof(T));
                const T next = from_float<T>(to_float(cur) + sum);
                uint16_t next_bits;
                memcpy(&next_bits, &next, sizeof(T));
                const unsigned int want = (assumed & ~(0xFFFFu << shift)) | (unsigned(next_bits) << shift);
                old = atomicCAS(word, assumed, want);
            } while (old != assumed);
        }
    }
};

}  // namespace splitk_detail

// ---- dispatch
// iparam(0) != 0: the tensor-core path (the layer's tensor_cores, mirage/mpk/layers/linear.py; linear.cuh).
template <typename T> MPK_DEVICE void splitk_linear_task(const TaskView& v) {
    const Tile2D xt = tile2d(v.in_tile(0)), wt = tile2d(v.in_tile(1)), yt = tile2d(v.out_tile(0));
    const T* x = v.in<const T>(0);
    linear_rows<T>(yt.rows, xt.cols, v.in<const T>(1), wt, nullptr, Tile2D{}, linear_detail::PlainX<T>{x, xt},
                   linear_detail::rows_aligned16(x, xt), splitk_detail::AtomicAddStore<T>{v.out<T>(0), yt},
                   v.iparam(0) != 0);
}

}  // namespace mpk
