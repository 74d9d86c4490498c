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
//   iparams (first, stride, tensor_cores): the task's expert offset (grid.x coordinate), the expert stride
//   (grid.x), the layer's tensor-core choice (below)
// Experts and bad routing: moe_w13_linear.cuh's moe_detail::for_each_routed (MPK's activated-expert loop;
// a bad mask count, expert id or routing entry fails the task before the access it would index).
// Threads: per routed (expert, token), warp w of the block computes columns w, w + warps, ... (a warp per
// output: fp8::block_dot), lane 0 rounds once and stores. No shared memory, no block barrier. Summation
// order: depends on K and G only (not on the split, the block size or the thread order).
// Tensor cores (iparam(2): at least 16 tokens on an sm_89+ target, layers/moe_w13_linear.py; every code row
// 16-byte aligned and contiguous): per expert its routed (token, slot) pairs listed in shared memory
// (moe_detail::list_routed, after linear_detail::SMEM_PER_WARP per warp), then one pass over W[e]'s tile
// for all of them: mma_fp8.cuh's fp8_mma_rows with x's rows gathered and y's scattered by the list, each
// block's scale the same product of UE8M0 values; __syncthreads before the next expert's list.
// Not here (future variants): the block-scaled MMA of sm_100, 16-byte loads of the codes (SIMT path).
// Test: tests/runtime_python/moe_w13_fp8/, tests/runtime_python/moe_w2_fp8/
// Run:  python -m pytest tests/runtime_python/moe_w13_fp8/ tests/runtime_python/moe_w2_fp8/
#pragma once
#include "fp8_dot.cuh"
#include "mma_fp8.cuh"
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
    const int64_t batch = yt.dims[0], topk = yt.dims[1];
    const int64_t x_col = xt.strides[xt.ndim - 1], xs_col = xst.strides[xst.ndim - 1];
    const int64_t x_slot = W2 ? xt.strides[1] : 0, xs_slot = W2 ? xst.strides[1] : 0;
    // expert e's weight scales, and block g's scale of output (token t, slot, column j) from them
    auto expert_scales = [&](int64_t e) { return ws + e * wst.strides[0]; };
    auto scale = [&](const float* wsr, int64_t t, int64_t slot, int64_t j, int64_t g) {
        return ue8m0(xs[t * xst.strides[0] + slot * xs_slot + g * xs_col]) * ue8m0(wsr[j * wst.strides[1] + g * wst.strides[2]]);
    };
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
    // the tensor cores (iparam(2), the layer's choice), every code row 16-byte aligned and contiguous
    const bool aligned = x_col == 1 && wt.strides[2] == 1 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                         reinterpret_cast<uintptr_t>(w) % 16 == 0 && xt.strides[0] % 16 == 0 && x_slot % 16 == 0 &&
                         wt.strides[0] % 16 == 0 && wt.strides[1] % 16 == 0;
    if (v.iparam(2) != 0 && aligned) {
        int32_t* rows = smem<int32_t>(size_t(warps) * linear_detail::SMEM_PER_WARP, 2 * batch);
        const moe_detail::GatherX<fp8_e4m3_t> xr{x, rows, xt.strides[0], x_slot, x_col};
        const moe_detail::ScatterStore<T> st{y, rows, yt.strides[0], yt.strides[1], yt.strides[2]};
        const Tile2D we{n, wt.dims[2], wt.strides[1], wt.strides[2]};
        moe_detail::for_each_expert(v, 5, num_experts, [&](int64_t e) {
            const int64_t count = moe_detail::list_routed(v, 4, e, batch, topk, rows);
            if (count < 0) return false;
            const float* wsr = expert_scales(e);
            fp8_mma_rows(count, wt.dims[2], group, xr, w + e * wt.strides[0], we, [&](int64_t b, int64_t j, int64_t g) {
                return scale(wsr, rows[2 * b], rows[2 * b + 1], j, g);
            }, st);
            __syncthreads();  // every warp is done with the list before the next expert's
            return true;
        });
        return;
    }
#endif
    moe_detail::for_each_routed(v, 4, 5, num_experts, batch, topk, [&](int64_t e, int64_t t, int64_t slot) {
        const fp8_e4m3_t* xr = x + t * xt.strides[0] + slot * x_slot;
        T* yr = y + t * yt.strides[0] + slot * yt.strides[1];
        const float* wsr = expert_scales(e);
        for (int64_t j = warp; j < n; j += warps) {         // warp-uniform
            const fp8_e4m3_t* wr = w + e * wt.strides[0] + j * wt.strides[1];
            const float sum = fp8::block_dot(xr, x_col, wr, wt.strides[2], groups, group, [&](int64_t g) {
                return scale(wsr, t, slot, j, g);
            });
            if (lane == 0) yr[j * yt.strides[2]] = from_float<T>(sum);
        }
    });
}

// ---- dispatch
template <typename T> MPK_DEVICE void moe_w13_fp8_task(const TaskView& v) { moe_fp8_tile<T, false>(v); }

}  // namespace mpk
