// quantize_fp8.cuh: per-token group quantization to e4m3 with fp32 block scales, one task's rows, as
// CUDA device code for both backends (runtime/simt.h):
//   amax = max(max_j |x[r, gG + j]|, 1e-10),  s[r, g] = amax / 448,
//   q[r, gG + j] = e4m3(clamp(x[r, gG + j] / s[r, g], -448, 448)),  j < G = group_size = iparam(0)
// fp32 math: the max is exact, the scale and each quotient one IEEE division, then one rounding to e4m3
// (runtime/dtypes.h: ties to even; NaN stays NaN through the clamp). MPK's quantize_fp8_f32scale_sm100
// (per_token_group_quantize_fp8.cuh) computes the same; it takes its row from blockIdx.x, the worker's
// index in a persistent kernel, where this kernel takes its rows from the task's tiles.
// Shapes: in(0) x [rows, K] or [bt, kt, K] (leading dims packed: the layer splits dim 0 only), out(0) q
//         like x (fp8_e4m3_t), out(1) s [..., K / G] float, or with UE8M0 (iparam 1; quantize_fp8_ue8m0_rows
//         below) the whole [ceil(K / G / 4), aligned rows] uint32; each with its own strides.
// Threads: one warp per (row, group), warps of the block take them in turn; lane l holds elements
//   l, l + 32, ... of its group (G / 32 of them: 2 or 4), warp_max (common.cuh) gives every lane the
//   group's amax. No shared memory, no barriers.
// Test: tests/runtime_python/quantize_fp8/test_quantize_fp8.py (the kernel alone, task by task),
//       tests/runtime_python/quantize_fp8/test_quantize_fp8_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/quantize_fp8/
#pragma once
#include "fp8_dot.cuh"     // fp8::ue8m0_value

namespace mpk {

constexpr float kFp8Max = 448.0f;        // e4m3's largest finite value

// ---- kernel
// One warp quantizes the block of row r starting at column c0: lane l takes elements l, l + 32, ... (G / 32
// of them), warp_max gives every lane the block's amax, scale_of(max(amax, 1e-10) / 448) the scale the
// codes divide by (and report). Returns that scale.
template <typename T, typename F>
MPK_DEVICE MPK_INLINE float quantize_block(const T* x, const Tile2D& xt, fp8_e4m3_t* q, const Tile2D& qt, int64_t r,
                                           int64_t c0, int per_lane, const F& scale_of) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    float v[4];
    float amax = 0.0f;
    // a constant trip count, guarded: v stays in registers (a loop to per_lane indexed it at run
    // time, a 32-byte stack frame on every architecture; tests/unit/test_nvcc.py)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        v[i] = i < per_lane ? to_float(x[r * xt.row_stride + (c0 + lane + 32 * i) * xt.col_stride]) : 0.0f;
        amax = fmaxf(amax, fabsf(v[i]));
    }
    const float scale = scale_of(fmaxf(warp_max(amax), 1e-10f) / kFp8Max);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        if (i >= per_lane) break;
        const float y = v[i] / scale;
        q[r * qt.row_stride + (c0 + lane + 32 * i) * qt.col_stride] =
            from_float<fp8_e4m3_t>(y < -kFp8Max ? -kFp8Max : (y > kFp8Max ? kFp8Max : y));
    }
    return scale;
}

template <typename T>
__device__ void quantize_fp8_rows(const TaskView& v, const T* x, const Tile2D& xt, fp8_e4m3_t* q, const Tile2D& qt,
                                  float* s, const Tile2D& st, int group) {
    const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
    if (group != 64 && group != 128) return task_fail(v, "quantize_fp8: group_size must be 64 or 128");
    const int64_t groups = st.cols;
    for (int64_t w = threadIdx.x / 32; w < xt.rows * groups; w += warps) {   // warp-uniform
        const int64_t r = w / groups;
        const float scale = quantize_block(x, xt, q, qt, r, (w % groups) * group, group / 32,
                                           [](float exact) { return exact; });
        if (lane == 0) s[r * st.row_stride + (w % groups) * st.col_stride] = scale;
    }
}

// UE8M0 (MPK's quantize_fp8_sm100): per (row, block), code c = ceil(log2(s)) + 127 for s = max(amax,
// 1e-10) / 448 in fp32, read from s's bits (exponent field + 1 unless the mantissa is 0: exact, where
// MPK's ceilf(log2f(s)) may land one low just above a power of two), clamped to [0, 255]; the codes use
// the power of two 2^(c - 127) (an exact division); four blocks' codes per uint32, block 4p + i in byte i
// of word p, written by lane 0 of the warp that took (row, p) at column first_row + row of s
// ([packed_k, aligned_rows], the whole tensor in every task: its rows' columns are the task's part).
MPK_DEVICE MPK_INLINE unsigned ue8m0_code(float s) {
    const unsigned bits = __float_as_uint(s);
    const unsigned c = ((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0u ? 1u : 0u);
    return c > 255u ? 255u : c;
}

template <typename T>
__device__ void quantize_fp8_ue8m0_rows(const TaskView& v, const T* x, const Tile2D& xt, fp8_e4m3_t* q,
                                        const Tile2D& qt, uint32_t* s, const Tile2D& st, int group,
                                        int64_t first_row) {
    const int lane = static_cast<int>(threadIdx.x % 32), warps = static_cast<int>(blockDim.x / 32);
    if (group != 64 && group != 128) return task_fail(v, "quantize_fp8: group_size must be 64 or 128");
    const int64_t groups = xt.cols / group, words = (groups + 3) / 4;
    if (words != st.rows || first_row < 0 || first_row + xt.rows > st.cols)
        return task_fail(v, "quantize_fp8: the UE8M0 scales are not [ceil(K / group / 4), aligned rows] for this task's rows");
    for (int64_t w = threadIdx.x / 32; w < xt.rows * words; w += warps) {   // warp-uniform
        const int64_t r = w / words, p = w % words;
        uint32_t word = 0;
        for (int64_t g = 4 * p; g < 4 * p + 4 && g < groups; ++g) {
            unsigned code = 0;
            quantize_block(x, xt, q, qt, r, g * group, group / 32, [&](float exact) {
                code = ue8m0_code(exact);
                return fp8::ue8m0_value(code);
            });
            word |= static_cast<uint32_t>(code) << (8 * (g - 4 * p));
        }
        if (lane == 0) s[p * st.row_stride + (first_row + r) * st.col_stride] = word;
    }
}

// ---- dispatch
// iparams (group_size, ue8m0, first_row): ue8m0 1 writes packed UE8M0 codes (first_row: the task's first
// flattened row, its column in the scales), 0 float32 scales
template <typename T>
__device__ void quantize_fp8_task(const TaskView& v) {
    if (v.iparam(1))
        quantize_fp8_ue8m0_rows<T>(v, v.in<const T>(0), tile2d(v.in_tile(0)), v.out<fp8_e4m3_t>(0),
                                   tile2d(v.out_tile(0)), v.out<uint32_t>(1), tile2d(v.out_tile(1)),
                                   static_cast<int>(v.iparam(0)), v.iparam(2));
    else
        quantize_fp8_rows<T>(v, v.in<const T>(0), tile2d(v.in_tile(0)), v.out<fp8_e4m3_t>(0), tile2d(v.out_tile(0)),
                             v.out<float>(1), tile2d(v.out_tile(1)), static_cast<int>(v.iparam(0)));
}

}  // namespace mpk
