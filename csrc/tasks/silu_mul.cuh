// silu_mul.cuh: the SwiGLU activation of one task's tile, as CUDA device code for both backends
// (runtime/simt.h):
//   y[b, j] = silu(gate[b, j]) * up[b, j],  silu(g) = g / (1 + exp(-g)),  j < m
// The input tile is [gate | up]: its first m columns are gate, the next m up (the layer shuffles
// W_gate and W_up per task so that each task's tile has this layout). fp32 math (expf is within
// 2 ulp on both backends, without fast math), one rounding to T per output.
// Shapes: in(0) x [B, 2m] (row stride strides[0], any column stride), out(0) y [B, m] with its
//         own strides (a column tile of [B, I]: row stride I); m = y's columns.
// Threads: y is walked in row-major chunks, blockDim.x apart (for_each_chunk); a chunk is
//   PACK16<T> elements moved as one 16-byte access when gate, up and y all allow it (unit column
//   stride, 16-byte aligned rows, m a multiple of PACK16<T>; checked at run time), else one
//   element. No barriers.
// Tails: g / (1 + exp(-g)) overflows exp for g < -88.7 and gives -0; for g < 0 the same value
//   is g * e / (1 + e) with e = exp(g), which does not overflow (as in the CPU-only kernel
//   before it). Below g = -80, e would become an fp32 subnormal (under g = -87.3) and lose its
//   relative precision, so there e = exp(g + 64) * e^-64 (g + 64 is exact; 1 + e == 1) and the
//   constant e^-64 (fp32, within 0.51 u_fp32) multiplies last, after up: a result below fp32's
//   normal range is then rounded once, as the reference's is.
// Test: tests/csrc/test_kernels_elementwise.cpp (silu_mul), tests/runtime_python/silu_mul/
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_elementwise
#pragma once
#include <math.h>
#include "common.cuh"

namespace mpk {

// ---- kernel
// silu(g) * up in fp32, with one expf and no branch (selects): e = exp(-|g|), or exp(g + 64)
// in the tail, so exp never overflows (the header explains the g < 0 and g < -80 cases).
// NaN in, NaN out; g = -inf gives NaN, as the reference's -inf / inf does.
__device__ MPK_INLINE float silu_times(float g, float up) {
    const bool tail = g < -80.0f;
    const float e = expf(tail ? g + 64.0f : -fabsf(g));
    const float silu = (g >= 0.0f ? g : g * e) / (tail ? 1.0f : 1.0f + e);
    return silu * up * (tail ? 0x1.969d48p-93f : 1.0f);  // e^-64 in the tail
}

// N: elements per access (PACK16<T> on the packed path, 1 on the scalar path).
template <typename T, int N>
__device__ void silu_mul_chunks(const T* gate, const T* up, const Tile2D& xt, T* y, const Tile2D& yt) {
    for_each_chunk(yt.rows, yt.cols / N, [&](int64_t r, int64_t c) {
        const int64_t j = c * N, at = r * xt.row_stride + j * xt.col_stride;
        const Pack<T, N> pg = load_pack<T, N>(gate + at);
        const Pack<T, N> pu = load_pack<T, N>(up + at);
        Pack<T, N> py;
        for (int k = 0; k < N; ++k) py.e[k] = from_float<T>(silu_times(to_float(pg.e[k]), to_float(pu.e[k])));
        store_pack<T, N>(y + r * yt.row_stride + j * yt.col_stride, py);
    });
}

// ---- dispatch
template <typename T>
__device__ void silu_mul_task(const TaskView& v) {
    const Tile2D x2 = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));
    const int64_t m = yt.cols;
    const Tile2D xt{x2.rows, m, x2.row_stride, x2.col_stride};  // gate's (and up's) [B, m]
    const T* gate = v.in<const T>(0);
    const T* up = gate + m * x2.col_stride;
    T* y = v.out<T>(0);
    constexpr int N = PACK16<T>;
    if (packable<N>(gate, xt) && packable<N>(up, xt) && packable<N>(y, yt))
        silu_mul_chunks<T, N>(gate, up, xt, y, yt);
    else
        silu_mul_chunks<T, 1>(gate, up, xt, y, yt);
}

}  // namespace mpk
