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
// iparam(0) != 0: the tensor cores (the layer's tensor_cores, mirage/mpk/layers/linear.py's rule: bf16 /
//   fp16 with at least 16 rows).
// Threads: phase 1, warp q takes rows q, q + warps, ...: its lanes add the squares of k = l, l + 32, ...
//   in k order, then warp_sum's butterfly; lane 0 stores 1 / rms of the row in shared memory. One
//   __syncthreads. Phase 2 is linear.cuh's linear_rows with x's elements computed as they are loaded
//   (NormX below: n from x, the row's 1/rms and w_norm, no staging): its thread mapping, loads and
//   summation order (the SIMT GEMV's lane partials, or the tensor-core path of mma_linear.cuh, where n
//   is computed into the staged slices).
// Shared memory: linear_rows' [0, warps x linear_detail::SMEM_PER_WARP), then B floats of 1/rms (the
//   layer bounds B and declares the total).
// Error: the rmsnorm part within tol_rmsnorm's K / 2 + 6 fp32 ops of n plus n's rounding to T, the
//   dot product within linear's (K + 1) u32 sum |n W| (2K + 1 on the tensor cores):
//   tol_rmsnorm_linear (mirage/mpk/testing/tolerances.py).
// Test: tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear.py (the kernel alone, task by task),
//       tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/rmsnorm_linear/
#pragma once
#include <math.h>
#include "common.cuh"
#include "linear.cuh"

namespace mpk {

// ---- kernel
// x's element (b, k) as linear_rows multiplies it: n[b, k] (linear.cuh's PlainX says what load and at take).
template <typename T> struct NormX {
    const T* x;
    Tile2D xt;
    const float* inv_rms;  // [B], shared memory
    const T* wn;
    int64_t wn_stride;
    MPK_DEVICE MPK_INLINE float n(float xv, float s, int64_t k) const {
        return to_float(from_float<T>(xv * s * to_float(wn[k * wn_stride])));
    }
    template <int N> MPK_DEVICE MPK_INLINE void load(int64_t b, int64_t k, float* out) const {
        const Pack<T, N> q = load_pack<T, N>(x + b * xt.row_stride + k);
        const float s = inv_rms[b];
        MPK_UNROLL
        for (int i = 0; i < N; ++i) out[i] = n(to_float(q.e[i]), s, k + i);
    }
    MPK_DEVICE MPK_INLINE float at(int64_t b, int64_t k) const {
        return n(to_float(x[b * xt.row_stride + k * xt.col_stride]), inv_rms[b], k);
    }
};

template <typename T>
__device__ void rmsnorm_linear_tile(const T* x, const Tile2D& xt, const T* wn, const Tile2D& wnt, const T* w,
                                    const Tile2D& wt, T* y, const Tile2D& yt, float eps, bool tensor_cores) {
    const int warps = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t batch = xt.rows, k_len = xt.cols;
    float* inv_rms = smem<float>(size_t(warps) * linear_detail::SMEM_PER_WARP, batch);
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
    linear_rows<T>(batch, k_len, w, wt, nullptr, Tile2D{}, NormX<T>{x, xt, inv_rms, wn, wnt.col_stride},
                   linear_detail::rows_aligned16(x, xt), linear_detail::Store<T>{y, yt}, tensor_cores);
}

// ---- dispatch
template <typename T>
__device__ void rmsnorm_linear_task(const TaskView& v) {
    rmsnorm_linear_tile<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.in<const T>(1), tile2d(v.in_tile(1)),
                           v.in<const T>(2), tile2d(v.in_tile(2)), v.out<T>(0), tile2d(v.out_tile(0)),
                           static_cast<float>(v.fparam(0)), v.iparam(0) != 0);
}

}  // namespace mpk
