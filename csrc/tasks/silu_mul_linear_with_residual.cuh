// silu_mul_linear_with_residual.cuh: MPK's fused down projection for one task's tile, as CUDA device
// code for both backends (runtime/simt.h):
//   h[b, k] = round_T(silu(gate[b, k]) * up[b, k])      (silu_mul.cuh's silu_times, fp32)
//   y[b, j] = round_T(sum_k h[b, k] W[j, k] + residual[b, j])   (linear.cuh's linear_rows)
// The input is [gate | up] as whole halves: gate = columns [0, I), up = [I, 2I) (MPK's kernel reads
// up at input + I; not silu_mul's per-task shuffle). h is rounded to T before the GEMM, as the unfused
// silu_mul -> linear_with_residual chain does (MPK keeps its silu_mul tile in shared memory as T).
// h is not stored: each warp recomputes it as it loads x in linear.cuh's loops (GluX below), so the
// thread mapping, summation order and bits are linear_tile's with x replaced by h.
// Shapes: in(0) x [B, 2I] (whole: every task), in(1) W [n, I] (this task's rows of [N, I]),
//         in(2) residual [B, n], out(0) y [B, n], each with its own strides.
// iparam(0) != 0: add the residual (fp32, before the one rounding); 0: not (ranks other than 0 with
// world_size > 1: MPK passes my_gpu_id == 0; the allreduce after it sums it once). iparam(1) != 0: the
// tensor cores (the layer's tensor_cores, mirage/mpk/layers/linear.py): h is computed into shared
// memory slice by slice as T (mma_linear.cuh), the same values the SIMT path multiplies.
// Vector path when gate, up and W rows are 16-byte aligned with unit column stride, else scalar.
// Shared memory: linear.cuh's reduction arrays. No block barrier.
// Test: tests/runtime_python/silu_mul_linear_with_residual/ (the kernel alone, and in a graph)
// Run:  python -m pytest tests/runtime_python/silu_mul_linear_with_residual/
#pragma once
#include "linear.cuh"
#include "silu_mul.cuh"

namespace mpk {

// ---- kernel
// x's element (b, k) is h = round_T(silu(g[k]) * g[k + up]), g = gate's row b: up is I times gate's
// column stride (linear.cuh's PlainX says what load and at take).
template <typename T> struct GluX {
    const T* gate;
    Tile2D xt;  // gate's [B, I]
    int64_t up;
    template <int N> MPK_DEVICE MPK_INLINE void load(int64_t b, int64_t k, float* out) const {
        const T* p = gate + b * xt.row_stride + k;
        const Pack<T, N> g = load_pack<T, N>(p), u = load_pack<T, N>(p + up);
        MPK_UNROLL
        for (int i = 0; i < N; ++i) out[i] = to_float(from_float<T>(silu_times(to_float(g.e[i]), to_float(u.e[i]))));
    }
    MPK_DEVICE MPK_INLINE float at(int64_t b, int64_t k) const {
        const T* p = gate + b * xt.row_stride + k * xt.col_stride;
        return to_float(from_float<T>(silu_times(to_float(p[0]), to_float(p[up]))));
    }
};

// ---- dispatch
template <typename T> MPK_DEVICE void silu_mul_linear_with_residual_task(const TaskView& v) {
    const Tile2D x2 = tile2d(v.in_tile(0)), wt = tile2d(v.in_tile(1)), rt = tile2d(v.in_tile(2));
    const Tile2D xt{x2.rows, x2.cols / 2, x2.row_stride, x2.col_stride};   // gate's (and up's) [B, I]
    const T* gate = v.in<const T>(0);
    const GluX<T> xs{gate, xt, xt.cols * xt.col_stride};
    const bool vec = linear_detail::rows_aligned16(gate, xt) && linear_detail::rows_aligned16(gate + xs.up, xt);
    const T* residual = v.iparam(0) != 0 ? v.in<const T>(2) : nullptr;
    const Tile2D yt = tile2d(v.out_tile(0));
    linear_rows<T>(yt.rows, xt.cols, v.in<const T>(1), wt, residual, rt, xs, vec,
                   linear_detail::Store<T>{v.out<T>(0), yt}, v.iparam(1) != 0);
}

}  // namespace mpk
