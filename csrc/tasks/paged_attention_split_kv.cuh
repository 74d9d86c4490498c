// paged_attention_split_kv.cuh: paged attention over one chunk of the keys (split-KV), for one request,
// one KV head and its group of query heads, as CUDA device code for both backends (runtime/simt.h).
// Layer: mirage/mpk/layers/paged_attention_split_kv.py (MPK's paged_attention_split_kv_layer); the chunks
// are combined by paged_attention_split_kv_merge.cuh. It runs paged_attention.cuh's functions over a key
// range (the request, its options, attn_store_kv, attn_pair: see there for the batch layout and threads).
//
// Per task (request r = iparam(0), KV head h = its tiles, chunk [lo, hi) = iparam(3) as lo << 32 | hi,
// hi <= max_seq_len = iparam(2)):
//   1. the new tokens whose absolute positions lie in [lo, hi): K (normed, roped) and V into their cache
//      slots (attn_store_kv(lo', hi'), the range cut to the new tokens): each slot is stored by exactly
//      one chunk's task, so the tasks of one request and head never write the same slot;
//   2. __syncthreads (the chunk's new K/V are then read back from the cache by every warp);
//   3. each (token i, query head g) pair: keys [lo, min(hi, pos_i + 1)) (causal), attn_pair: the normalized
//      partial o and lse = log2 sum_j exp(s_j), s_j = q . k_j / sqrt(D). A pair whose chunk holds no key
//      (the chunk starts after pos_i: beyond the sequence, or causally empty for a prefill's early tokens)
//      writes o = 0 and lse = -inf without reading a key.
// Tiles: inputs as paged_attention.cuh (qkv, k_cache, v_cache, then q/k norm, cos/sin by flags); outputs
//   0 output [rows, G * D, 1] (element (t, g * D + d, 0): the chunk's column block of head h), 1 and 2
//   k_cache and v_cache again (in place), 3 lse [rows, G, 1] float.
// Test: tests/runtime_python/paged_attention_split_kv/test_paged_attention_split_kv.py (the kernel alone),
//       tests/runtime_python/paged_attention_split_kv/test_paged_attention_split_kv_testmode.py (in a graph)
#pragma once
#include "paged_attention.cuh"

namespace mpk {

template <typename T, int NV>
__device__ void paged_attention_split_kv_rows(const TaskView& v) {
    const AttnRequest q = attn_request(v);
    if (q.tokens == 0) return;
    const AttnOptions<T> o = attn_options<T>(v);
    const int64_t lo = v.iparam(3) >> 32, hi = v.iparam(3) & 0xFFFFFFFFll;
    const int64_t start = q.seq_len - q.tokens;
    const int64_t s_lo = lo > start ? lo : start, s_hi = hi < q.seq_len ? hi : q.seq_len;
    if (s_lo < s_hi) attn_store_kv<T, NV>(v, q, o, s_lo, s_hi);
    __syncthreads();
    const int64_t keys_hi = hi;  // step 3's keys: the chunk's [lo, hi), each token's causal end within it
    const int G = static_cast<int>(tile2d(v.in_tile(0)).cols / (32 * NV)) - 2;
    const int warps = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const MpkTile &yt = v.out_tile(0), &lt = v.out_tile(3);
    T* y = v.out<T>(0);
    float* ls = v.out<float>(3);
    if (attn_tensor_cores<T>(v, q, G)) {  // the chunk's keys on the tensor cores (paged_attention.cuh)
        char* rows = smem<char>(size_t(warp) * 16 * 64 * NV, 16 * 64 * NV);
        const AttnOut<T> out{y, q.first, yt.strides[0], yt.strides[1], 32 * NV, ls, lt.strides[0], lt.strides[1]};
        for (int64_t u0 = int64_t(warp) * 16; u0 < q.tokens * G; u0 += int64_t(warps) * 16)
            attn_pairs_mma<T, NV>(v, q, o, G, u0, lo, keys_hi, rows, out);
        return;
    }
    float* qw = smem<float>(warp * (32 * NV + 32) * sizeof(float), 32 * NV + 32);
    for (int64_t u = warp; u < q.tokens * G; u += warps) {
        const int64_t i = u / G;
        const int g = static_cast<int>(u % G);
        float acc[NV];
        float lse = -INFINITY;
        if (lo <= start + i) {
            lse = attn_pair<T, NV>(v, q, o, i, g, lo, keys_hi, acc, qw, qw + 32 * NV);
        } else {
            MPK_UNROLL
            for (int k = 0; k < NV; ++k) acc[k] = 0.0f;
        }
        T* yr = y + (q.first + i) * yt.strides[0] + g * 32 * NV * yt.strides[1];
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) yr[(lane + 32 * k) * yt.strides[1]] = from_float<T>(acc[k]);
        if (lane == 0) ls[(q.first + i) * lt.strides[0] + g * lt.strides[1]] = lse;
    }
}

template <typename T>
__device__ void paged_attention_split_kv_task(const TaskView& v) {
    MPK_ATTN_DISPATCH(paged_attention_split_kv_rows, T, v)
}

}  // namespace mpk
