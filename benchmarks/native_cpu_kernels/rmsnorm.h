// rmsnorm.h: RMSNorm of each row of a tile, CPU.
//   y[r, j] = x[r, j] * rsqrt(mean_j(x[r, :]^2) + eps) * w[j]
// fp32 math (sum of squares in fp32, in order), one rounding to T per output.
// Shapes: in(0) x [rows, hidden] (row stride strides[0]), in(1) w [hidden] (1-D),
//         out(0) y [rows, hidden]; eps = fparam(0) (the layer's default is 1e-6).
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/*.cuh). Its output is compared with the emulated kernel's there.
#pragma once
#include <math.h>
#include "runtime/dtypes.h"
#include "tile2d.h"

namespace mpk {

// ---- kernel
template <typename T>
void rmsnorm_kernel(const T* x, Tile2D xt, const T* w, Tile2D wt, T* y, Tile2D yt, float eps) {
    const int64_t hidden = xt.cols;
    for (int64_t r = 0; r < xt.rows; ++r) {
        const T* xr = x + r * xt.row_stride;
        T* yr = y + r * yt.row_stride;
        float sum_sq = 0.0f;
        for (int64_t j = 0; j < hidden; ++j) {
            const float v = to_float(xr[j * xt.col_stride]);
            sum_sq += v * v;
        }
        const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(hidden) + eps);
        for (int64_t j = 0; j < hidden; ++j)
            yr[j * yt.col_stride] =
                from_float<T>(to_float(xr[j * xt.col_stride]) * inv_rms * to_float(w[j * wt.col_stride]));
    }
}

// ---- dispatch
template <typename T>
void rmsnorm_task(const TaskView& v) {
    rmsnorm_kernel<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.in<const T>(1), tile2d(v.in_tile(1)),
                      v.out<T>(0), tile2d(v.out_tile(0)), static_cast<float>(v.fparam(0)));
}

}  // namespace mpk
