// moe_w13_linear.cuh: the MoE expert linears of one task, MPK's moe_w13_linear and moe_w2_linear
// (moe_w2_linear.cuh is the second entry point into the same kernel): for each activated expert e the
// task handles and each token t it routes (slot s = routing[e, t] - 1):
//   w13: y[t, s, :] = x[t, :]    @ W[e]^T      w2: y[t, s, :] = x[t, s, :] @ W[e]^T
// fp32 accumulation, one rounding to T per output. CUDA device code for both backends (runtime/simt.h).
//
// Shapes (tiles, any strides):
//   in(0)  x  w13 [B, K] / w2 [B, topk, K], whole (the layer never splits it)
//   in(1)  W  [E, n, K]: this task's n rows of every expert's [N, K] weight (grid.y, the column split)
//   in(2)  routing [E, B] int32: slot + 1 where token t routes to expert e, 0 where it does not
//   in(3)  mask [E + 1] int32: mask[0..c) the activated experts, mask[E] = c
//   out(0) y  [B, topk, n]: this task's columns of [B, topk, N]
//   iparams (first, stride): the task's expert offset (grid.x coordinate) and the expert stride (grid.x)
// Experts: the task takes mask[first], mask[first + stride], ... below mask[E] (MPK's activated-expert
// loop, moe_detail::for_each_routed, which the fp8 variants share); every thread reads the same mask and
// routing entries, so every branch is uniform. A routing entry 0 skips the token; a mask count outside
// [0, E], an expert id outside [0, E) or an entry outside [0, topk] fails the task (task_fail) before the
// access it would index. A (t, s) that no expert claims
// is not written. Two experts claiming the same (t, s) (no top-k routing does) would race.
// Per (expert, token): one output row of n columns through linear.cuh's linear_rows (a warp per group of
// 4 columns, lanes split K, 16-byte loads where x's row and W's rows are aligned with unit column
// stride, else the scalar path); so its summation order is linear's: depends on K, T and the path only.
// Rows go one at a time (the tokens of an expert land on rows strided by their slots): W[e]'s tile is
// re-read per routed token (decode batches are small); batching an expert's tokens into one pass over
// W is a future variant.
// Shared memory: linear_rows' reduction arrays ((blockDim.x / 32) x 32 x 33 floats at offset 0).
// Test: tests/runtime_python/moe_w13_linear/, tests/runtime_python/moe_w2_linear/
// Run:  python -m pytest tests/runtime_python/moe_w13_linear/ tests/runtime_python/moe_w2_linear/
#pragma once
#include "linear.cuh"

namespace mpk {

// ---- kernel
namespace moe_detail {

// MPK's activated-expert loop, shared by the four MoE expert linears (this file, moe_w13_fp8.cuh): calls
// f(e, t, slot) for every expert e the task handles (mask[first], mask[first + stride], ... below
// mask[E]; iparams (first, stride)) and every token t it routes (slot = routing[e, t] - 1), experts in
// mask order, tokens in increasing order. Every thread reads the same entries, so every branch is uniform.
// Bad routing fails the task before the access it would index.
template <typename F>
MPK_DEVICE void for_each_routed(const TaskView& v, int routing_in, int mask_in, int64_t num_experts, int64_t batch,
                                int64_t topk, F&& f) {
    const MpkTile &rt = v.in_tile(routing_in), &mt = v.in_tile(mask_in);
    const int32_t* routing = v.in<const int32_t>(routing_in);
    const int32_t* mask = v.in<const int32_t>(mask_in);
    const int64_t first = v.iparam(0), stride = v.iparam(1);
    const int64_t count = mask[num_experts * mt.strides[0]];
    if (count < 0 || count > num_experts)
        return task_fail(v, "moe: moe_mask[num_experts] (the activated experts' count) is outside [0, num_experts]");
    if (first < 0 || stride < 1) return task_fail(v, "moe: a bad expert offset or stride (iparams 0, 1)");
    for (int64_t a = first; a < count; a += stride) {
        const int64_t e = mask[a * mt.strides[0]];
        if (e < 0 || e >= num_experts) return task_fail(v, "moe: moe_mask names an expert outside [0, num_experts)");
        for (int64_t t = 0; t < batch; ++t) {
            const int64_t s = routing[e * rt.strides[0] + t * rt.strides[1]];
            if (s == 0) continue;
            if (s < 0 || s > topk) return task_fail(v, "moe: a moe_routing_indices entry is outside [0, topk]");
            const int64_t slot = s - 1;
            f(e, t, slot);
        }
    }
}

}  // namespace moe_detail

template <typename T, bool W2>
MPK_DEVICE void moe_linear_tile(const TaskView& v) {
    const MpkTile &xt = v.in_tile(0), &wt = v.in_tile(1), &yt = v.out_tile(0);
    const int64_t num_experts = wt.dims[0], n = wt.dims[1], k_len = wt.dims[2];
    const T* x = v.in<const T>(0);
    const T* w = v.in<const T>(1);
    T* y = v.out<T>(0);
    const Tile2D we{n, k_len, wt.strides[1], wt.strides[2]};
    const int64_t x_row = xt.strides[0], x_slot = W2 ? xt.strides[1] : 0, x_col = xt.strides[xt.ndim - 1];
    moe_detail::for_each_routed(v, 2, 3, num_experts, yt.dims[0], yt.dims[1], [&](int64_t e, int64_t t,
                                                                                 int64_t slot) {
        const T* xr = x + t * x_row + slot * x_slot;
        const Tile2D xr_t{1, k_len, 0, x_col};
        T* yr = y + t * yt.strides[0] + slot * yt.strides[1];
        const Tile2D yr_t{1, n, 0, yt.strides[2]};
        linear_rows<T>(k_len, w + e * wt.strides[0], we, nullptr, Tile2D{}, yr, yr_t, linear_detail::PlainX<T>{xr, xr_t},
                       linear_detail::rows_aligned16(xr, xr_t));
    });
}

// ---- dispatch
template <typename T> MPK_DEVICE void moe_w13_linear_task(const TaskView& v) { moe_linear_tile<T, false>(v); }

}  // namespace mpk
