// moe_topk_sigmoid_routing.cuh: DeepSeek-V3's grouped sigmoid MoE router (MPK's topk_sigmoid_sm100),
// as CUDA device code for both backends (runtime/simt.h), G = iparam(0) groups of E / G consecutive
// experts, TG = iparam(1), scale = fparam(0):
//   s[r, e]     = 1 / (1 + exp(-x[r, e])),  t[r, e] = s[r, e] + bias[e]  (fp32: the selection score)
//   group g     scores the fp32 sum of its two largest t (equal values count twice); the TG best groups
//               are kept (equal group scores: the lower group first)
//   sel[r, k]   = the K experts of the kept groups with the largest t, descending (equal: the lower)
//   w[r, k]     = s[r, sel_k] * (1 / (sum_{j<K} s[r, sel_j] + 1e-20)) * scale   (the sum in slot order)
//   ri, m       as moe_topk_softmax_routing.cuh (1-indexed slots; the activated experts ascending,
//               -1 after them, their count last)
// Shapes: in(0) x [B, E] (any strides); in(1) bias [E] float32; out(0) w [B, K] float32;
//         out(1) ri [E, B] int32; out(2) m [E + 1] int32. One task takes the whole batch.
// Threads: warp q routes rows q, q + warps, ...: lane g < G scores group g (its E / G experts in
//   order), TG warp argmaxes over the lanes' group keys pick the groups, a ballot makes them a bit
//   mask, then moe_topk_softmax_routing.cuh's routing_row picks the experts among the kept groups.
//   One __syncthreads before the masks (routing_masks), one after zeroing the flags.
// Test: tests/runtime_python/moe_topk_sigmoid_routing/test_moe_topk_sigmoid_routing.py (kernel alone),
//       tests/runtime_python/moe_topk_sigmoid_routing/test_moe_topk_sigmoid_routing_testmode.py (graph)
// Run:  python -m pytest tests/runtime_python/moe_topk_sigmoid_routing/
#pragma once
#include "moe_topk_softmax_routing.cuh"

namespace mpk {

// ---- kernel
MPK_DEVICE MPK_INLINE float routing_sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// Warp-wide: the bit mask of the TG best groups of row xr (group g = bit g); t(c) the selection score.
template <typename S>
__device__ unsigned routing_groups(int64_t G, int64_t TG, int64_t per_group, S&& t) {
    const int lane = threadIdx.x % 32;
    uint64_t mine = 0;                      // lane g's group key; 0 for lanes past the groups
    if (lane < G) {
        float t1 = -INFINITY, t2 = -INFINITY;
        for (int64_t c = lane * per_group; c < (lane + 1) * per_group; ++c) {
            const float f = t(c);
            if (f > t1) { t2 = t1; t1 = f; } else if (f > t2) { t2 = f; }
        }
        mine = routing_key(t1 + t2, lane);
    }
    bool kept = false;
    for (int64_t i = 0; i < TG; ++i) {
        uint64_t best = kept ? 0 : mine;
        for (int offset = 16; offset > 0; offset >>= 1) {
            const uint64_t other = __shfl_xor_sync(0xFFFFFFFFu, static_cast<unsigned long long>(best), offset);
            if (routing_beats(other, best)) best = other;
        }
        if (lane < G && best == mine) kept = true;
    }
    return __ballot_sync(0xFFFFFFFFu, kept);
}

// ---- dispatch
template <typename T>
__device__ void moe_topk_sigmoid_routing_task(const TaskView& v) {
    const Tile2D xt = tile2d(v.in_tile(0)), bt = tile2d(v.in_tile(1)), wt = tile2d(v.out_tile(0));
    const Tile2D rt = tile2d(v.out_tile(1)), mt = tile2d(v.out_tile(2));
    const T* x = v.in<const T>(0);
    const float* bias = v.in<const float>(1);
    const int64_t E = xt.cols, K = wt.cols, G = v.iparam(0), TG = v.iparam(1), per_group = E / G;
    const float scale = static_cast<float>(v.fparam(0));
    int32_t* flags = routing_flags(E);
    for (int64_t r = threadIdx.x / 32; r < xt.rows; r += blockDim.x / 32) {
        const T* xr = x + r * xt.row_stride;
        const auto s = [&](int64_t c) { return routing_sigmoid(to_float(xr[c * xt.col_stride])); };
        const auto t = [&](int64_t c) { return s(c) + bias[c * bt.col_stride]; };
        const unsigned kept = routing_groups(G, TG, per_group, t);
        routing_row(
            r, E, K, t, [&](int64_t c) { return ((kept >> (c / per_group)) & 1u) != 0; },
            [&](int64_t, int64_t e) { return s(e); },
            [&](float sum) { return (1.f / (sum + 1e-20f)) * scale; }, v.out<float>(0), wt, v.out<int32_t>(1), rt,
            flags);
    }
    routing_masks(flags, E, v.out<int32_t>(2), mt.col_stride);
}

}  // namespace mpk
