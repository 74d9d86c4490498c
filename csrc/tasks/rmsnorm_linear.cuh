// rmsnorm_linear.cuh: y = rmsnorm(x, w_norm) @ W^T for one task's tile, fused (MPK's norm_linear task),
// as CUDA device code for both backends (runtime/simt.h):
//   n[b, k] = round_T(x[b, k] * (1 / sqrt(sum_k x[b, k]^2 / K + eps)) * w_norm[k])
//   y[b, j] = round_T(sum_k n[b, k] * W[j, k])
// The same rounding points as rmsnorm.cuh followed by linear.cuh: the normalized row is rounded to T
// (as the unfused rmsnorm's output), never stored; the dot product accumulates in fp32, one rounding
// to T per output. eps = fparam(0) (the layer's default 1e-6, MPK's fixed value).
// Shapes (2-D tiles, any strides; tile2d in common.cuh):
//   in(0) x [B, K] the whole input (never split), in(1) w_norm [K] (1-D, any stride),
//   in(2) W [n, K] this task's rows of [N, K], out(0) y [B, n] this task's columns of [B, N].
// Threads: phase 1, warp q takes rows q, q + warps, ...: its lanes add the squares of k = l, l + 32, ...
//   in k order, then warp_sum's butterfly; lane 0 stores 1 / rms of the row in shared memory (B floats
//   at offset 0; the layer bounds B). One __syncthreads. Phase 2, warp q takes the output columns
//   j = q, q + warps, ...; for each row b its lanes accumulate n[b, k] * W[j, k] over k = l, l + 32, ...
//   (n recomputed from x, 1/rms and w_norm: no staging), then warp_sum; lane 0 rounds and stores.
// Error: the rmsnorm part within tol_rmsnorm's K / 2 + 6 fp32 ops of n plus n's rounding to T, the
//   dot product within (K + 1) u32 sum |n W|: tol_rmsnorm_linear (mirage/mpk/testing/tolerances.py).
// Not here (future variants): 16-byte loads, shared-memory staging of the normalized rows, tensor cores.
// Test: tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear.py (the kernel alone, task by task),
//       tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/rmsnorm_linear/
#pragma once
#include <math.h>
#include "common.cuh"

namespace mpk {

// ---- kernel
template <typename T>
__device__ void rmsnorm_linear_tile(const T* x, const Tile2D& xt, const T* wn, const Tile2D& wnt, const T* w,
                                    const Tile2D& wt, T* y, const Tile2D& yt, float eps) {
    const int warps = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t batch = xt.rows, k_len = xt.cols;
    float* inv_rms = smem<float>(0, batch);
    for (int64_t b = warp; b < batch; b += warps) {
        const T* xr = x + b * xt.row_stride;
        float sum_sq = 0.0f;
        for (int64_t k = lane; k < k_len; k += 32) {
            const float f = to_float(xr[k * xt.col_stride]);
            sum_sq += f * f;
        }
        sum_sq = warp_sum(sum_sq);
        if (lane == 0) inv_rms[b] = 1.0f / sqrtf(sum_sq / static_cast<float>(k_len) + eps);
    }
    __syncthreads();
    for (int64_t j = warp; j < yt.cols; j += warps) {
        const T* wr = w + j * wt.row_stride;
        for (int64_t b = 0; b < batch; ++b) {
            const T* xr = x + b * xt.row_stride;
            const float s = inv_rms[b];
            float acc = 0.0f;
            for (int64_t k = lane; k < k_len; k += 32) {
                const T n = from_float<T>(to_float(xr[k * xt.col_stride]) * s * to_float(wn[k * wnt.col_stride]));
                acc += to_float(n) * to_float(wr[k * wt.col_stride]);
            }
            acc = warp_sum(acc);
            if (lane == 0) y[b * yt.row_stride + j * yt.col_stride] = from_float<T>(acc);
        }
    }
}

// ---- dispatch
template <typename T>
__device__ void rmsnorm_linear_task(const TaskView& v) {
    rmsnorm_linear_tile<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.in<const T>(1), tile2d(v.in_tile(1)),
                           v.in<const T>(2), tile2d(v.in_tile(2)), v.out<T>(0), tile2d(v.out_tile(0)),
                           static_cast<float>(v.fparam(0)));
}

}  // namespace mpk
