// quantize_fp8.cuh: per-token group quantization to e4m3 with fp32 block scales, one task's rows, as
// CUDA device code for both backends (runtime/simt.h):
//   amax = max(max_j |x[r, gG + j]|, 1e-10),  s[r, g] = amax / 448,
//   q[r, gG + j] = e4m3(clamp(x[r, gG + j] / s[r, g], -448, 448)),  j < G = group_size = iparam(0)
// fp32 math: the max is exact, the scale and each quotient one IEEE division, then one rounding to e4m3
// (runtime/dtypes.h: ties to even; NaN stays NaN through the clamp). MPK's quantize_fp8_f32scale_sm100
// (per_token_group_quantize_fp8.cuh) computes the same; it takes its row from blockIdx.x, the worker's
// index in a persistent kernel, where this kernel takes its rows from the task's tiles.
// Shapes: in(0) x [rows, K] or [bt, kt, K] (leading dims packed: the layer splits dim 0 only), out(0) q
//         like x (fp8_e4m3_t), out(1) s [..., K / G] float; each with its own strides.
// Threads: one warp per (row, group), warps of the block take them in turn; lane l holds elements
//   l, l + 32, ... of its group (G / 32 of them: 2 or 4), warp_max (common.cuh) gives every lane the
//   group's amax. No shared memory, no barriers.
// Test: tests/runtime_python/quantize_fp8/test_quantize_fp8.py (the kernel alone, task by task),
//       tests/runtime_python/quantize_fp8/test_quantize_fp8_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/quantize_fp8/
#pragma once
#include "common.cuh"

namespace mpk {

constexpr float kFp8Max = 448.0f;        // e4m3's largest finite value

// ---- kernel
template <typename T>
__device__ void quantize_fp8_rows(const T* x, const Tile2D& xt, fp8_e4m3_t* q, const Tile2D& qt, float* s,
                                  const Tile2D& st, int group) {
    const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
    const int per_lane = group / 32;
    if (group % 32 || per_lane < 1 || per_lane > 4) task_fail("quantize_fp8: group_size must be 32, 64, 96 or 128");
    const int64_t groups = st.cols;
    for (int64_t w = threadIdx.x / 32; w < xt.rows * groups; w += warps) {   // warp-uniform
        const int64_t r = w / groups, c0 = (w % groups) * group;
        float v[4];
        float amax = 0.0f;
        // a constant trip count, guarded: v stays in registers (a loop to per_lane indexed it at run
        // time, a 32-byte stack frame on every architecture; tests/unit/test_nvcc.py)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            v[i] = i < per_lane ? to_float(x[r * xt.row_stride + (c0 + lane + 32 * i) * xt.col_stride]) : 0.0f;
            amax = fmaxf(amax, fabsf(v[i]));
        }
        const float scale = fmaxf(warp_max(amax), 1e-10f) / kFp8Max;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if (i >= per_lane) break;
            const float y = v[i] / scale;
            q[r * qt.row_stride + (c0 + lane + 32 * i) * qt.col_stride] =
                from_float<fp8_e4m3_t>(y < -kFp8Max ? -kFp8Max : (y > kFp8Max ? kFp8Max : y));
        }
        if (lane == 0) s[r * st.row_stride + (w % groups) * st.col_stride] = scale;
    }
}

// ---- dispatch
template <typename T>
__device__ void quantize_fp8_task(const TaskView& v) {
    quantize_fp8_rows<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.out<fp8_e4m3_t>(0), tile2d(v.out_tile(0)),
                         v.out<float>(1), tile2d(v.out_tile(1)), static_cast<int>(v.iparam(0)));
}

}  // namespace mpk
