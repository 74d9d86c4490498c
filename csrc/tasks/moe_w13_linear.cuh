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
//   iparams (first, stride, tensor_cores): the task's expert offset (grid.x coordinate), the expert stride
//   (grid.x), and the layer's tensor-core choice (below)
// Experts: the task takes mask[first], mask[first + stride], ... below mask[E] (MPK's activated-expert
// loop, moe_detail::for_each_routed, which the fp8 variants share); every thread reads the same mask and
// routing entries, so every branch is uniform. A routing entry 0 skips the token; a mask count outside
// [0, E], an expert id outside [0, E) or an entry outside [0, topk] fails the task (task_fail) before the
// access it would index. A (t, s) that no expert claims
// is not written. Two experts claiming the same (t, s) (no top-k routing does) would race.
// Per expert: its routed (token, slot) pairs are listed in shared memory (thread 0 writes them in token
// order, __syncthreads), then one pass over W[e]'s tile computes every listed row through linear.cuh's
// linear_rows with x's rows gathered and y's scattered by the list (GatherX, ScatterStore): the SIMT GEMV
// (a warp per group of 4 columns, lanes split K, 16-byte loads where every x row and W's rows are aligned
// with unit column stride, else the scalar path), or, when the layer asks (iparam(2): bf16 / fp16 with a
// batch of at least 16 tokens, mirage/mpk/layers/linear.py's rule), the tensor cores (mma_linear.cuh, x's
// gathered rows staged by the lanes). Either way an output's summation order is linear's: it depends on
// K, T and the path only, not on which tokens share the expert. __syncthreads before the next expert's list.
// Shared memory: linear_rows' [0, warps x linear_detail::SMEM_PER_WARP), then the list, 2 x batch int32
// (the layer bounds the batch).
// Test: tests/runtime_python/moe_w13_linear/, tests/runtime_python/moe_w2_linear/
// Run:  python -m pytest tests/runtime_python/moe_w13_linear/ tests/runtime_python/moe_w2_linear/
#pragma once
#include "linear.cuh"

namespace mpk {

// ---- kernel
namespace moe_detail {

// MPK's activated-expert loop, shared by the four MoE expert linears (this file, moe_w13_fp8.cuh): calls
// f(e) for every expert e the task handles (mask[first], mask[first + stride], ... below mask[E];
// iparams (first, stride)), in mask order, until f returns false. Every thread reads the same entries, so
// every branch is uniform. A bad mask fails the task before the access it would index.
template <typename F>
MPK_DEVICE void for_each_expert(const TaskView& v, int mask_in, int64_t num_experts, F&& f) {
    const MpkTile& mt = v.in_tile(mask_in);
    const int32_t* mask = v.in<const int32_t>(mask_in);
    const int64_t first = v.iparam(0), stride = v.iparam(1);
    const int64_t count = mask[num_experts * mt.strides[0]];
    if (count < 0 || count > num_experts)
        return task_fail(v, "moe: moe_mask[num_experts] (the activated experts' count) is outside [0, num_experts]");
    if (first < 0 || stride < 1) return task_fail(v, "moe: a bad expert offset or stride (iparams 0, 1)");
    for (int64_t a = first; a < count; a += stride) {
        const int64_t e = mask[a * mt.strides[0]];
        if (e < 0 || e >= num_experts) return task_fail(v, "moe: moe_mask names an expert outside [0, num_experts)");
        if (!f(e)) return;
    }
}

// Calls f(t, slot) for every token t expert e routes (slot = routing[e, t] - 1), in increasing t; false
// (the task failed) at an entry outside [0, topk], before the access it would index.
template <typename F>
MPK_DEVICE bool for_each_token(const TaskView& v, int routing_in, int64_t e, int64_t batch, int64_t topk, F&& f) {
    const MpkTile& rt = v.in_tile(routing_in);
    const int32_t* routing = v.in<const int32_t>(routing_in);
    for (int64_t t = 0; t < batch; ++t) {
        const int64_t s = routing[e * rt.strides[0] + t * rt.strides[1]];
        if (s == 0) continue;
        if (s < 0 || s > topk) {
            task_fail(v, "moe: a moe_routing_indices entry is outside [0, topk]");
            return false;
        }
        f(t, s - 1);
    }
    return true;
}

// f(e, t, slot) for every expert the task handles and every token it routes (the fp8 variants' loop).
template <typename F>
MPK_DEVICE void for_each_routed(const TaskView& v, int routing_in, int mask_in, int64_t num_experts, int64_t batch,
                                int64_t topk, F&& f) {
    for_each_expert(v, mask_in, num_experts, [&](int64_t e) {
        return for_each_token(v, routing_in, e, batch, topk, [&](int64_t t, int64_t slot) { f(e, t, slot); });
    });
}

// Lists expert e's routed (token, slot) pairs in `rows` (shared memory, 2 x batch int32: rows[2 b],
// rows[2 b + 1] for row b of the expert's GEMM) in token order, then __syncthreads: thread 0 writes them,
// every thread counts the same tokens. Returns the count; -1 after a bad routing entry failed the task
// (every thread returns alike, before the barrier).
MPK_DEVICE MPK_INLINE int64_t list_routed(const TaskView& v, int routing_in, int64_t e, int64_t batch, int64_t topk,
                                          int32_t* rows) {
    int64_t count = 0;
    const bool ok = for_each_token(v, routing_in, e, batch, topk, [&](int64_t t, int64_t slot) {
        if (threadIdx.x == 0) rows[2 * count] = int32_t(t), rows[2 * count + 1] = int32_t(slot);
        ++count;
    });
    if (!ok) return -1;
    __syncthreads();  // the list is visible to every warp
    return count;
}

// Row b of an expert's GEMM is its b-th routed (token, slot) (list_routed).
// GatherX reads x's row of it (linear.cuh's PlainX says what load and at take); ScatterStore stores y's.
template <typename T> struct GatherX {
    const T* x;
    const int32_t* rows;
    int64_t token_stride, slot_stride, col_stride;  // slot_stride 0: w13's x has one row per token
    MPK_DEVICE MPK_INLINE const T* row(int64_t b) const {
        return x + rows[2 * b] * token_stride + rows[2 * b + 1] * slot_stride;
    }
    template <int N> MPK_DEVICE MPK_INLINE void load(int64_t b, int64_t k, float* out) const {
        const Pack<T, N> q = load_pack<T, N>(row(b) + k);
        MPK_UNROLL
        for (int i = 0; i < N; ++i) out[i] = to_float(q.e[i]);
    }
    MPK_DEVICE MPK_INLINE float at(int64_t b, int64_t k) const { return to_float(row(b)[k * col_stride]); }
};

template <typename T> struct ScatterStore {
    T* y;
    const int32_t* rows;
    int64_t token_stride, slot_stride, col_stride;
    MPK_DEVICE MPK_INLINE void operator()(int64_t b, int64_t col, float sum) const {
        y[rows[2 * b] * token_stride + rows[2 * b + 1] * slot_stride + col * col_stride] = from_float<T>(sum);
    }
};

}  // namespace moe_detail

template <typename T, bool W2>
MPK_DEVICE void moe_linear_tile(const TaskView& v) {
    const MpkTile &xt = v.in_tile(0), &wt = v.in_tile(1), &yt = v.out_tile(0);
    const int64_t num_experts = wt.dims[0], n = wt.dims[1], k_len = wt.dims[2], batch = yt.dims[0];
    const T* x = v.in<const T>(0);
    const T* w = v.in<const T>(1);
    const Tile2D we{n, k_len, wt.strides[1], wt.strides[2]};
    const int64_t x_row = xt.strides[0], x_slot = W2 ? xt.strides[1] : 0, x_col = xt.strides[xt.ndim - 1];
    const bool tensor_cores = v.iparam(2) != 0;
    // every row of x 16-byte aligned with unit column stride: the vector path (and the tensor cores)
    constexpr int64_t V = PACK16<T>;
    const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && x_col == 1 && x_row % V == 0 && x_slot % V == 0;
    int32_t* rows = smem<int32_t>(size_t(blockDim.x / 32) * linear_detail::SMEM_PER_WARP, 2 * batch);
    const moe_detail::GatherX<T> xs{x, rows, x_row, x_slot, x_col};
    const moe_detail::ScatterStore<T> st{v.out<T>(0), rows, yt.strides[0], yt.strides[1], yt.strides[2]};
    moe_detail::for_each_expert(v, 3, num_experts, [&](int64_t e) {
        const int64_t count = moe_detail::list_routed(v, 2, e, batch, yt.dims[1], rows);
        if (count < 0) return false;
        linear_rows<T>(count, k_len, w + e * wt.strides[0], we, nullptr, Tile2D{}, xs, vec, st, tensor_cores);
        __syncthreads();  // every warp is done with the list before the next expert's
        return true;
    });
}

// ---- dispatch
template <typename T> MPK_DEVICE void moe_w13_linear_task(const TaskView& v) { moe_linear_tile<T, false>(v); }

}  // namespace mpk
