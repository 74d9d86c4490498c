// rmsnorm.cuh: RMSNorm of each row of one task's tile, as CUDA device code for both backends
// (runtime/simt.h):
//   y[r, j] = x[r, j] * (1 / sqrt(sum_j x[r, j]^2 / hidden + eps)) * w[j]
// fp32 math, one rounding to T per output; eps = fparam(0) (the layer's default is 1e-6).
// Shapes: in(0) x [rows, hidden] (row stride strides[0], any column stride), in(1) w [hidden]
//         (1-D, any stride), out(0) y [rows, hidden] with its own strides (the layer splits rows).
// Threads: the whole block takes one row at a time; thread t handles chunks t, t + blockDim.x, ...
//   of the row, where a chunk is PACK16<T> elements moved as one 16-byte access when x, w and y
//   all allow it (unit column stride, 16-byte aligned rows, hidden a multiple of PACK16<T>;
//   checked at run time), else one element.
// Summation order of sum_j x^2 (fp32): each thread adds the squares of its chunks in column
//   order (nvcc may fuse square and add into one fma: one rounding fewer), then warp_sum's
//   butterfly over the 32 lanes, then the warps' totals in warp order (every thread adds them
//   in the same order). Its error is within the hidden / 2 + 6 fp32 operations of the budget
//   in mirage/mpk/testing/tolerances.py (tol_rmsnorm). inv_rms = 1 / sqrtf(mean + eps): division and square
//   root correctly rounded (not rsqrtf), as in the CPU-only kernel before it; then
//   y = (x * inv_rms) * w, rounded once to T.
// Barriers: rows go in passes of smem_bytes() / (4 * warps) rows (3072 at 128 threads, 48 KiB):
//   a pass stores each row's per-warp sums in shared memory (warp_sum: 5 shuffles per row per
//   warp), one __syncthreads, then normalizes its rows (x is read a second time); one more
//   __syncthreads only when another pass follows. A tile that fits one pass: one barrier.
// Test: tests/csrc/test_kernels_elementwise.cpp (rmsnorm), tests/runtime_python/rmsnorm/
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_elementwise
#pragma once
#include <math.h>
#include "common.cuh"

namespace mpk {

// ---- kernel
// N: elements per access (PACK16<T> on the packed path, 1 on the scalar path).
template <typename T, int N>
__device__ void rmsnorm_rows(const T* x, const Tile2D& xt, const T* w, const Tile2D& wt, T* y,
                             const Tile2D& yt, float eps) {
    const int warps = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t hidden = xt.cols, chunks = hidden / N;
    // partial[i * warps + q]: warp q's share of the sum of squares of row r0 + i
    int64_t pass_rows = static_cast<int64_t>(smem_bytes() / sizeof(float)) / warps;
    if (pass_rows < 1) pass_rows = 1;
    float* partial = smem<float>(0, pass_rows * warps);

    for (int64_t r0 = 0; r0 < xt.rows; r0 += pass_rows) {
        const int64_t n = xt.rows - r0 < pass_rows ? xt.rows - r0 : pass_rows;
        for (int64_t i = 0; i < n; ++i) {
            const T* xr = x + (r0 + i) * xt.row_stride;
            float sum_sq = 0.0f;
            for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
                const Pack<T, N> p = load_pack<T, N>(xr + c * N * xt.col_stride);
                for (int k = 0; k < N; ++k) {
                    const float f = to_float(p.e[k]);
                    sum_sq += f * f;
                }
            }
            sum_sq = warp_sum(sum_sq);
            if (lane == 0) partial[i * warps + warp] = sum_sq;
        }
        __syncthreads();
        for (int64_t i = 0; i < n; ++i) {
            float sum_sq = 0.0f;
            for (int q = 0; q < warps; ++q) sum_sq += partial[i * warps + q];
            const float inv_rms = 1.0f / sqrtf(sum_sq / static_cast<float>(hidden) + eps);
            const T* xr = x + (r0 + i) * xt.row_stride;
            T* yr = y + (r0 + i) * yt.row_stride;
            for (int64_t c = threadIdx.x; c < chunks; c += blockDim.x) {
                const Pack<T, N> px = load_pack<T, N>(xr + c * N * xt.col_stride);
                const Pack<T, N> pw = load_pack<T, N>(w + c * N * wt.col_stride);
                Pack<T, N> py;
                for (int k = 0; k < N; ++k)
                    py.e[k] = from_float<T>(to_float(px.e[k]) * inv_rms * to_float(pw.e[k]));
                store_pack<T, N>(yr + c * N * yt.col_stride, py);
            }
        }
        // the next pass overwrites the partials: every thread must have read them
        if (r0 + n < xt.rows) __syncthreads();
    }
}

// ---- dispatch
template <typename T>
__device__ void rmsnorm_task(const TaskView& v) {
    const T* x = v.in<const T>(0);
    const T* w = v.in<const T>(1);
    T* y = v.out<T>(0);
    const Tile2D xt = tile2d(v.in_tile(0)), wt = tile2d(v.in_tile(1)), yt = tile2d(v.out_tile(0));
    const float eps = static_cast<float>(v.fparam(0));
    constexpr int N = PACK16<T>;
    if (packable<N>(x, xt) && packable<N>(w, wt) && packable<N>(y, yt))
        rmsnorm_rows<T, N>(x, xt, w, wt, y, yt, eps);
    else
        rmsnorm_rows<T, 1>(x, xt, w, wt, y, yt, eps);
}

}  // namespace mpk
