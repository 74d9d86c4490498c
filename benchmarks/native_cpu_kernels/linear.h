// linear.h: y = x @ W^T (+ residual) for one task's tile, CPU; fp32 accumulation, one
// rounding to T per output. linear_with_residual.h adds the residual variant's dispatch.
// Shapes: in(0) x [B, K]   the whole input (the layer never splits K), row stride strides[0]
//         in(1) W  [n, K]  this task's rows of the [N, K] weight, row stride strides[0]
//         out(0) y [B, n]  this task's columns of [B, N]: row stride N when column-split
//         (residual variant) in(2) r [B, n], added in fp32 before the rounding.
// Any column strides are honoured (x and W are copied to fp32 scratch anyway).
// Summation order (fast path): lane l of 8 sums the products with k % 8 == l in order, then
// ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), then the residual. It depends on K only, so a
// result does not depend on how N is split into tasks. The reference sums k in order.
// Speed: GCC -O2 without -ffast-math does not vectorize a float reduction, so the fast path
// spells out 4-wide vectors (GCC/Clang vector extensions: SSE on x86-64, NEON on arm64) and
// computes 2 x rows by 2 W rows per pass (8 vector accumulators, W and x loads shared).
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include <string.h>
#include <algorithm>
#include <vector>
#include "runtime/dtypes.h"
#include "tile2d.h"

namespace mpk {

// ---- reference
// Plain loops: the readable definition, and what the fast path is tested against.
template <typename T>
void linear_reference(const T* x, Tile2D xt, const T* w, Tile2D wt, const T* residual, Tile2D rt,
                      T* y, Tile2D yt) {
    for (int64_t b = 0; b < yt.rows; ++b)
        for (int64_t j = 0; j < yt.cols; ++j) {
            float acc = 0.0f;
            for (int64_t k = 0; k < xt.cols; ++k)
                acc += to_float(x[b * xt.row_stride + k * xt.col_stride]) *
                       to_float(w[j * wt.row_stride + k * wt.col_stride]);
            if (residual) acc += to_float(residual[b * rt.row_stride + j * rt.col_stride]);
            y[b * yt.row_stride + j * yt.col_stride] = from_float<T>(acc);
        }
}

// ---- kernel
namespace linear_detail {

typedef float f32x4 __attribute__((vector_size(16)));
constexpr int64_t LANES = 8;  // two f32x4 per step of k
constexpr int XB = 2, WB = 2;  // x rows and W rows per pass (8 accumulators of 16 xmm registers)

inline f32x4 load4(const float* p) { f32x4 v; memcpy(&v, p, sizeof v); return v; }

// rows x [rows, k] (strided T) -> dst [rows, kp] fp32, zero-padded to kp (a multiple of 8):
// padding adds +0 products, which leaves every lane's sum unchanged.
template <typename T>
void rows_to_f32(const T* src, Tile2D t, int64_t rows, int64_t k, int64_t kp, float* dst) {
    for (int64_t r = 0; r < rows; ++r) {
        const T* s = src + r * t.row_stride;
        float* d = dst + r * kp;
        int64_t c = 0;
        if (t.col_stride == 1)  // fixed 8-element chunks so GCC -O2 vectorizes the conversion
            for (; c + LANES <= k; c += LANES)
                for (int64_t l = 0; l < LANES; ++l) d[c + l] = to_float(s[c + l]);
        for (; c < k; ++c) d[c] = to_float(s[c * t.col_stride]);
        for (; c < kp; ++c) d[c] = 0.0f;
    }
}

// out[i][j] = dot(xs row i, ws row j) for i < NX, j < NW; rows are kp floats apart.
template <int NX, int NW>
inline void dot_block(const float* xs, const float* ws, int64_t kp, float out[XB][WB]) {
    f32x4 lo[NX][NW] = {}, hi[NX][NW] = {};  // lanes 0..3 and 4..7
    for (int64_t k = 0; k < kp; k += LANES) {
        f32x4 wl[NW], wh[NW];
#pragma GCC unroll 4
        for (int j = 0; j < NW; ++j) {
            wl[j] = load4(ws + j * kp + k);
            wh[j] = load4(ws + j * kp + k + 4);
        }
#pragma GCC unroll 4
        for (int i = 0; i < NX; ++i) {
            const f32x4 xl = load4(xs + i * kp + k), xh = load4(xs + i * kp + k + 4);
#pragma GCC unroll 4
            for (int j = 0; j < NW; ++j) {
                lo[i][j] += xl * wl[j];
                hi[i][j] += xh * wh[j];
            }
        }
    }
    for (int i = 0; i < NX; ++i)
        for (int j = 0; j < NW; ++j) {
            const f32x4 a = lo[i][j], b = hi[i][j];
            out[i][j] = ((a[0] + a[1]) + (a[2] + a[3])) + ((b[0] + b[1]) + (b[2] + b[3]));
        }
}

}  // namespace linear_detail

template <typename T>
void linear_fast(const T* x, Tile2D xt, const T* w, Tile2D wt, const T* residual, Tile2D rt,
                 T* y, Tile2D yt) {
    using namespace linear_detail;
    const int64_t batch = yt.rows, n = yt.cols, k = xt.cols;
    const int64_t kp = (k + LANES - 1) / LANES * LANES;
    // Per worker thread: x as fp32 [batch, kp], then WB W rows [WB, kp]. It only grows,
    // so after the first task of a given size a thread allocates nothing.
    thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>((batch + WB) * kp)) scratch.resize((batch + WB) * kp);
    float* xf = scratch.data();
    float* wf = xf + batch * kp;
    rows_to_f32(x, xt, batch, k, kp, xf);

    for (int64_t j0 = 0; j0 < n; j0 += WB) {
        const int nw = static_cast<int>(std::min<int64_t>(WB, n - j0));
        rows_to_f32(w + j0 * wt.row_stride, wt, nw, k, kp, wf);  // each W element converted once
        for (int64_t b0 = 0; b0 < batch; b0 += XB) {
            const int nx = static_cast<int>(std::min<int64_t>(XB, batch - b0));
            float out[XB][WB];
            const float* xs = xf + b0 * kp;
            if (nx == 2 && nw == 2) dot_block<2, 2>(xs, wf, kp, out);
            else if (nx == 2) dot_block<2, 1>(xs, wf, kp, out);
            else if (nw == 2) dot_block<1, 2>(xs, wf, kp, out);
            else dot_block<1, 1>(xs, wf, kp, out);
            for (int i = 0; i < nx; ++i)
                for (int j = 0; j < nw; ++j) {
                    const int64_t b = b0 + i, col = j0 + j;
                    float acc = out[i][j];
                    if (residual) acc += to_float(residual[b * rt.row_stride + col * rt.col_stride]);
                    y[b * yt.row_stride + col * yt.col_stride] = from_float<T>(acc);
                }
        }
    }
}

// ---- dispatch
template <typename T>
void linear_task(const TaskView& v) {
    linear_fast<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.in<const T>(1), tile2d(v.in_tile(1)),
                   nullptr, Tile2D{}, v.out<T>(0), tile2d(v.out_tile(0)));
}

}  // namespace mpk
