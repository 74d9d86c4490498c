// moe_topk_softmax_routing.cuh: MoE router, top-k of a softmax over the experts, renormalized (MPK's
// topk_softmax_sm100 with renormalize = true), as CUDA device code for both backends (runtime/simt.h):
//   sel[r, 0..K-1] = the K experts with the largest x[r, e], in descending order, on equal logits the
//                    lower expert first (softmax is monotone, so this is the top-k of softmax(x[r]))
//   w[r, k]        = exp(x[r, sel_k] - x[r, sel_0]) / sum_{j<K} exp(x[r, sel_j] - x[r, sel_0])
//                    (= p_k / sum_{j<K} p_j with p = softmax(x[r]): the full softmax's sum cancels)
//   ri[e, r]       = k + 1 where sel[r, k] == e, else 0 (1-indexed slot, expert-major)
//   m[0..n-1]      = the n experts with a nonzero ri[e, :], ascending; m[n..E-1] = -1; m[E] = n
// Selection compares the logits only (argmax.cuh's order: exact for every T); the weights are fp32
// (K exps, a K-term sum in slot order, one reciprocal, one product per weight).
// Shapes: in(0) x [B, E] (any strides); out(0) w [B, K] float32; out(1) ri [E, B] int32;
//         out(2) m [E + 1] int32. One task takes the whole batch (the layer refuses grid.x > 1).
// Threads: warp q routes rows q, q + warps, ...: lane l scans experts l, l + 32, ... for the best key
//   below the previous winner (no per-row storage), a 5-step butterfly picks the warp's; the lane
//   owning the winner writes ri and sets the expert's flag (shared memory, atomicOr); lane 0 writes w.
//   One __syncthreads, then thread t places experts t, t + blockDim.x, ... into m by counting flags.
// Test: tests/runtime_python/moe_topk_softmax_routing/test_moe_topk_softmax_routing.py (kernel alone),
//       tests/runtime_python/moe_topk_softmax_routing/test_moe_topk_softmax_routing_testmode.py (graph)
// Run:  python -m pytest tests/runtime_python/moe_topk_softmax_routing/
#pragma once
#include "argmax.cuh"

namespace mpk {

// ---- kernel (the helpers are also moe_topk_sigmoid_routing.cuh's)
// The key of expert c scoring f (argmax.cuh's order of f, then c); 0 is "none".
MPK_DEVICE MPK_INLINE uint64_t routing_key(float f, int64_t c) { return argmax_key(argmax_order(f), c); }
// a beats b: the higher score, on equal scores the lower expert (MPK's tie rule).
MPK_DEVICE MPK_INLINE bool routing_beats(uint64_t a, uint64_t b) {
    const uint32_t oa = static_cast<uint32_t>(a >> 32), ob = static_cast<uint32_t>(b >> 32);
    return oa > ob || (oa == ob && static_cast<uint32_t>(a) < static_cast<uint32_t>(b));
}

// Warp-wide (all 32 lanes call it): the best key among experts c < n with ok(c) that `prev` beats
// (first: every expert), every lane gets it; 0 if none.
template <typename S, typename O>
__device__ uint64_t routing_next(int64_t n, bool first, uint64_t prev, S&& score, O&& ok) {
    uint64_t best = 0;
    for (int64_t c = threadIdx.x % 32; c < n; c += 32) {
        if (!ok(c)) continue;
        const uint64_t k = routing_key(score(c), c);
        if ((first || routing_beats(prev, k)) && routing_beats(k, best)) best = k;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, static_cast<unsigned long long>(best), offset);
        if (routing_beats(other, best)) best = other;
    }
    return best;
}

// Row r's routing by warp: K winners of score among ok experts; weight(k, e) winner k's unnormalized
// weight (every lane calls it, in slot order); w[r, k] = weight_k * norm(sum of the weights); ri and the flags as above.
template <typename S, typename O, typename W, typename N>
__device__ void routing_row(int64_t r, int64_t E, int64_t K, S&& score, O&& ok, W&& weight, N&& norm,
                            float* w, const Tile2D& wt, int32_t* ri, const Tile2D& rt, int32_t* flags) {
    const int lane = threadIdx.x % 32;
    for (int64_t c = lane; c < E; c += 32) ri[c * rt.row_stride + r * rt.col_stride] = 0;
    uint64_t prev = 0;
    float sum = 0.f;
    for (int64_t k = 0; k < K; ++k) {
        prev = routing_next(E, k == 0, prev, score, ok);
        const int64_t e = static_cast<uint32_t>(prev);
        const float p = weight(k, e);
        sum += p;
        if (lane == e % 32) {
            ri[e * rt.row_stride + r * rt.col_stride] = static_cast<int32_t>(k + 1);
            atomicOr(flags + e, 1);
        }
        if (lane == 0) w[r * wt.row_stride + k * wt.col_stride] = p;
    }
    if (lane == 0) {
        const float f = norm(sum);
        for (int64_t k = 0; k < K; ++k) w[r * wt.row_stride + k * wt.col_stride] *= f;
    }
}

// After every row: m[0..n-1] the flagged experts ascending, m[n..E-1] = -1, m[E] = n.
MPK_DEVICE MPK_INLINE void routing_masks(const int32_t* flags, int64_t E, int32_t* m, int64_t ms) {
    __syncthreads();
    int64_t n = 0;
    for (int64_t j = 0; j < E; ++j) n += flags[j];
    for (int64_t c = threadIdx.x; c < E; c += blockDim.x) {
        int64_t before = 0;
        for (int64_t j = 0; j < c; ++j) before += flags[j];
        if (flags[c]) m[before * ms] = static_cast<int32_t>(c);
        else m[(n + c - before) * ms] = -1;
    }
    if (threadIdx.x == 0) m[E * ms] = static_cast<int32_t>(n);
}

// Zeroes the E flags (shared memory at offset 0); ends with a barrier.
MPK_DEVICE MPK_INLINE int32_t* routing_flags(int64_t E) {
    int32_t* flags = smem<int32_t>(0, E);
    for (int64_t c = threadIdx.x; c < E; c += blockDim.x) flags[c] = 0;
    __syncthreads();
    return flags;
}

// ---- dispatch
template <typename T>
__device__ void moe_topk_softmax_routing_task(const TaskView& v) {
    const Tile2D xt = tile2d(v.in_tile(0)), wt = tile2d(v.out_tile(0)), rt = tile2d(v.out_tile(1));
    const Tile2D mt = tile2d(v.out_tile(2));
    const T* x = v.in<const T>(0);
    const int64_t E = xt.cols, K = wt.cols;
    int32_t* flags = routing_flags(E);
    for (int64_t r = threadIdx.x / 32; r < xt.rows; r += blockDim.x / 32) {
        const T* xr = x + r * xt.row_stride;
        float top = 0.f;       // the first winner's logit: every exp is at most 1
        routing_row(
            r, E, K, [&](int64_t c) { return to_float(xr[c * xt.col_stride]); }, [](int64_t) { return true; },
            [&](int64_t k, int64_t e) {
                const float f = to_float(xr[e * xt.col_stride]);
                if (k == 0) top = f;
                return expf(f - top);
            },
            [](float s) { return 1.f / s; }, v.out<float>(0), wt, v.out<int32_t>(1), rt, flags);
    }
    routing_masks(flags, E, v.out<int32_t>(2), mt.col_stride);
}

}  // namespace mpk
