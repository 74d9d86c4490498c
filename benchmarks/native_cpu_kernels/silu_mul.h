// silu_mul.h: SwiGLU activation of one task's tile, CPU.
//   y[b, j] = silu(gate[b, j]) * up[b, j],  silu(g) = g / (1 + exp(-g)),  j < m
// The input tile is [gate | up]: its first m columns are gate, the next m up (the layer
// shuffles W_gate and W_up per task so each task's tile has this layout). fp32 math,
// one rounding to T per output.
// Shapes: in(0) [B, 2m] (row stride strides[0]), out(0) [B, m]; m = out(0)'s columns.
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include <math.h>
#include "runtime/dtypes.h"
#include "tile2d.h"

namespace mpk {

// ---- kernel
// g / (1 + exp(-g)) overflows exp for g < -88.7 and returns -0; for g < 0 the same value is
// g * e / (1 + e) with e = exp(g), which stays finite and tiny as the reference does.
inline float silu(float g) {
    if (g >= 0.0f) return g / (1.0f + expf(-g));
    const float e = expf(g);
    return g * e / (1.0f + e);
}

template <typename T>
void silu_mul_kernel(const T* x, Tile2D xt, T* y, Tile2D yt) {
    const int64_t m = yt.cols;
    for (int64_t b = 0; b < yt.rows; ++b) {
        const T* gate = x + b * xt.row_stride;
        const T* up = gate + m * xt.col_stride;
        T* yb = y + b * yt.row_stride;
        for (int64_t j = 0; j < m; ++j) {
            const float g = to_float(gate[j * xt.col_stride]);
            yb[j * yt.col_stride] = from_float<T>(silu(g) * to_float(up[j * xt.col_stride]));
        }
    }
}

// ---- dispatch
template <typename T>
void silu_mul_task(const TaskView& v) {
    silu_mul_kernel<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.out<T>(0), tile2d(v.out_tile(0)));
}

}  // namespace mpk
