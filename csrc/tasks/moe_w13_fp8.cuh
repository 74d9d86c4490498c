// moe_w13_fp8.cuh: the MoE expert linears on e4m3 codes with block scales, MPK's moe_w13_fp8 and
// moe_w2_fp8 (moe_w2_fp8.cuh is the second entry point into the same kernel): for each activated expert e
// the task handles and each token t it routes (slot s = routing[e, t] - 1), every column j of the tile:
//   y[t, s, j] = round_T( sum_g 2^E(sx[r, g]) 2^E(sw[e, j, g]) sum_{k in block g} qx[r, k] qw[e, j, k] )
// r the input row (w13: t; w2: (t, s)); blocks g of G = K / (the scales' last dim) codes, 128 as MPK or
// 64 (this project's extension, as quantize_fp8's); E(s) the exponent field of the float32
// scale (its UE8M0 code minus 127): the scales count as the powers of two MPK's fp8_group_gemm_sm100.cuh
// makes of them ((bits >> 23) & 0xFF) for its block-scaled MMA; code 0 is 2^-127, code 255 NaN (UE8M0's).
// The dot product and its exactness (exact products, fp32 sums only: linear.cuh's budget on the
// dequantized operands): fp8_dot.cuh's fp8::block_dot.
// CUDA device code for both backends (runtime/simt.h).
//
// Shapes (tiles, any strides):
//   in(0) qx w13 [B, K] / w2 [B, topk, K] e4m3, whole    in(1) sx [..., K / G] float32, whole
//   in(2) qw [E, n, K] e4m3: this task's n rows of every expert's [N, K] weight (grid.y, the column split)
//   in(3) sw [E, n, K / G] float32, split as qw          in(4) routing [E, B] int32   in(5) mask [E + 1] int32
//   out(0) y [B, topk, n]: this task's columns of [B, topk, N]
//   iparams (first, stride): the task's expert offset (grid.x coordinate) and the expert stride (grid.x)
// Experts and bad routing: moe_w13_linear.cuh's moe_detail::for_each_routed (MPK's activated-expert loop;
// a bad mask count, expert id or routing entry fails the task before the access it would index).
// Threads: per routed (expert, token), warp w of the block computes columns w, w + warps, ... (a warp per
// output: fp8::block_dot), lane 0 rounds once and stores. No shared memory, no block barrier. Summation
// order: depends on K and G only (not on the split, the block size or the thread order). Not here
// (future variants): the tensor-core block-scaled MMA, 16-byte loads of the codes.
// Test: tests/runtime_python/moe_w13_fp8/, tests/runtime_python/moe_w2_fp8/
// Run:  python -m pytest tests/runtime_python/moe_w13_fp8/ tests/runtime_python/moe_w2_fp8/
#pragma once
#include "fp8_dot.cuh"
#include "moe_w13_linear.cuh"

namespace mpk {

// ---- kernel
template <typename T, bool W2>
MPK_DEVICE void moe_fp8_tile(const TaskView& v) {
    using fp8::ue8m0;
    const MpkTile &xt = v.in_tile(0), &xst = v.in_tile(1), &wt = v.in_tile(2), &wst = v.in_tile(3);
    const MpkTile& yt = v.out_tile(0);
    const int64_t num_experts = wt.dims[0], n = wt.dims[1], groups = xst.dims[xst.ndim - 1];
    const int64_t group = groups > 0 ? wt.dims[2] / groups : 0;
    if ((group != 64 && group != 128) || group * groups != wt.dims[2] || wst.dims[2] != groups)
        return task_fail(v, "moe fp8: the scales' blocks are not 64 or 128 codes of K, or input and weight scales disagree");
    const fp8_e4m3_t* x = v.in<const fp8_e4m3_t>(0);
    const float* xs = v.in<const float>(1);
    const fp8_e4m3_t* w = v.in<const fp8_e4m3_t>(2);
    const float* ws = v.in<const float>(3);
    T* y = v.out<T>(0);
    const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
    const int warps = static_cast<int>(blockDim.x / 32);
    const int64_t x_col = xt.strides[xt.ndim - 1], xs_col = xst.strides[xst.ndim - 1];
    const int64_t x_slot = W2 ? xt.strides[1] : 0, xs_slot = W2 ? xst.strides[1] : 0;
    moe_detail::for_each_routed(v, 4, 5, num_experts, yt.dims[0], yt.dims[1], [&](int64_t e, int64_t t,
                                                                                 int64_t slot) {
        const fp8_e4m3_t* xr = x + t * xt.strides[0] + slot * x_slot;
        const float* xsr = xs + t * xst.strides[0] + slot * xs_slot;
        T* yr = y + t * yt.strides[0] + slot * yt.strides[1];
        for (int64_t j = warp; j < n; j += warps) {         // warp-uniform
            const fp8_e4m3_t* wr = w + e * wt.strides[0] + j * wt.strides[1];
            const float* wsr = ws + e * wst.strides[0] + j * wst.strides[1];
            const float sum = fp8::block_dot(xr, x_col, wr, wt.strides[2], groups, group, [&](int64_t g) {
                return ue8m0(xsr[g * xs_col]) * ue8m0(wsr[g * wst.strides[2]]);
            });
            if (lane == 0) yr[j * yt.strides[2]] = from_float<T>(sum);
        }
    });
}

// ---- dispatch
template <typename T> MPK_DEVICE void moe_w13_fp8_task(const TaskView& v) { moe_fp8_tile<T, false>(v); }

}  // namespace mpk
