// paged_attention.cuh: causal attention of one request's new tokens over its paged KV cache, for one
// KV head and its group of query heads, as CUDA device code for both backends (runtime/simt.h).
// Layer: mirage/mpk/layers/paged_attention.py (MPK's paged_attention_layer); the split-KV form
// (paged_attention_split_kv.cuh) runs the same code over one chunk of the keys.
//
// The request r = iparam(0) (the task's grid.x) owns, from the meta tensors prepare_next_batch lays out:
//   rows [qo[r], qo[r+1]) of the packed QKV input and of the output (T = the row count, its new tokens);
//   pages paged_kv_indices[kv[r] .. kv[r+1]) of the cache, in that order (any pages, not contiguous);
//   S = (pages - 1) * page_size + last_page_len[r] tokens in them, cached + new: new token i sits at
//   absolute position S - T + i, in page pages[pos / page_size], slot pos % page_size.
// Per task (request r, KV head h: the tiles below are h's columns):
//   1. each new token's K: optional RMSNorm over head_dim (k_norm, eps ATTN_EPS) then optional
//      rotate-half RoPE at its absolute position (cos/sin rows pos); K and V stored into its cache slot;
//   2. __syncthreads (the stores are the block's: visible to its threads after the barrier);
//   3. each (token i, query head g) pair: q normed and roped the same way (q_norm), then softmax over
//      keys 0..pos_i (causal) of (q . k_j) / sqrt(head_dim), weighted sum of v_j, all in fp32.
// Tiles: inputs 0 qkv [rows, (G + 2) * D] (h's group: query heads g at g * D, K at G * D, V at
//   (G + 1) * D), 1 k_cache and 2 v_cache [pages, page_size, 1, D], then q_norm and k_norm [D] when
//   flags (iparam(1)) & 1, cos and sin [positions, D] when flags & 2; outputs 0 output [rows, G * D],
//   then k_cache and v_cache again (written in place: only the new tokens' slots).
// A task whose request has no token returns at once. A batch layout the task cannot trust (rows past
// its tiles, a page range past the page list, S < T, S > max_seq_len = iparam(2), a page index outside
// the cache) fails the task with a message naming the meta tensor, the entry and its value (common.cuh
// task_fail), never an access outside the tensors. (Python refuses such values before a launch,
// mirage/mpk/meta.py; these checks catch a value corrupted after that.)
// Threads: one warp per K/V row in step 1 and per (token, query head) pair in step 3; lane l holds
//   elements l + 32 k of a head vector (k < D / 32), so RoPE's partner d + D/2 is in the same lane.
//   Keys go 32 at a time: lane l scores key base + l (a dot product with q from the warp's shared
//   memory), a warp max, p_j = exp2(s_j - m) into shared memory, then every lane accumulates its
//   elements of sum_j p_j v_j (online softmax: m, l and the sums rescaled when m grows).
// Test: tests/runtime_python/paged_attention/test_paged_attention.py (the kernel alone, task by task),
//       tests/runtime_python/paged_attention/test_paged_attention_testmode.py (in a graph, the meta pass)
#pragma once
#include <math.h>
#include "common.cuh"
#include "../runtime/text.h"

namespace mpk {

// The q/k RMSNorm epsilon: MPK's kernels fix it at 1e-6 and its layer takes no eps (layers/paged_attention.py EPS).
constexpr float ATTN_EPS = 1e-6f;

// ---- the request's part of the batch (meta tensors)
struct AttnRequest {
    int64_t first = 0, tokens = 0, seq_len = 0;   // its first row, new tokens, cached + new tokens
    const int32_t* pages = nullptr;               // its page list: paged_kv_indices_buffer + first_page
    int64_t first_page = 0, num_pages = 0, page_size = 1;
};

// Fails the task: "paged_attention: meta tensor '<name>'[<i>] = <value> <why><bound>)", a corrupt meta
// value named with its numbers, written into the launch's record (common.cuh task_fail_text: no buffer on
// the thread's stack, no snprintf on the device). The first failure of the launch wins; task_fail_text
// returns, and the caller goes on with an empty request or skips the slot.
MPK_DEVICE MPK_NOINLINE inline void attn_fail(const TaskView& v, const char* name, int64_t i, int64_t value, const char* why,
                                 int64_t bound) {
    task_fail_text(v, [&](Text& t) {
        t.s("paged_attention: meta tensor '").s(name).s("'[").i(i).s("] = ").i(value).s(" ").s(why).i(bound).s(")");
    });
}

// Request slot r = iparam(0) (< max_num_batched_requests: the grid's x, so its indptr entries exist).
// Every meta value it indexes with is checked first: the rows against the input tile, the page range
// against the cache's pages (the cache tile's dim 0 is max_num_pages, the page list's length:
// layers/paged_attention.py checks it and never splits it), the token count against both.
MPK_DEVICE MPK_INLINE AttnRequest attn_request(const TaskView& v) {
    const int64_t r = v.iparam(0);
    const MpkTile& kc = v.in_tile(1);
    const int32_t *qo = v.meta->qo_indptr_buffer, *kv = v.meta->paged_kv_indptr_buffer;
    AttnRequest q;
    q.first = qo[r];
    q.tokens = qo[r + 1] - q.first;
    if (q.tokens == 0) return q;
    const int64_t rows = tile2d(v.in_tile(0)).rows, pages = kc.dims[0];
    if (q.tokens < 0 || q.first < 0 || q.first + q.tokens > rows) {
        const int64_t i = q.first < 0 || q.first > rows ? r : r + 1;
        attn_fail(v, "qo_indptr_buffer", i, qo[i], "gives the request rows outside the input tile (rows ", rows);
        return AttnRequest{};
    }
    q.first_page = kv[r];
    q.num_pages = kv[r + 1] - q.first_page;
    if (q.first_page < 0 || q.num_pages < 0 || q.first_page + q.num_pages > pages) {
        const int64_t i = q.first_page < 0 || q.first_page > pages ? r : r + 1;
        attn_fail(v, "paged_kv_indptr_buffer", i, kv[i], "leaves the page list (max_num_pages ", pages);
        return AttnRequest{};
    }
    q.pages = v.meta->paged_kv_indices_buffer + q.first_page;
    q.page_size = kc.dims[1];
    const int64_t last = q.num_pages > 0 ? v.meta->paged_kv_last_page_len_buffer[r] : 0;
    q.seq_len = q.num_pages > 0 ? (q.num_pages - 1) * q.page_size + last : 0;
    if (q.seq_len < q.tokens || q.seq_len > v.iparam(2) || q.num_pages * q.page_size < q.seq_len) {
        attn_fail(v, "paged_kv_last_page_len_buffer", r, last, "with its pages: the request's pages hold fewer "
                  "tokens than it has new ones, or more than max_seq_length (", v.iparam(2));
        return AttnRequest{};
    }
    return q;
}

// The element offset of position pos's slot in a cache tile [pages, page_size, 1, D] (d = 0); -1 for a page
// index outside the cache, which fails the task: the caller skips the access (one lane may see it alone, so
// the warp carries on to its collectives).
MPK_DEVICE MPK_INLINE int64_t attn_slot(const TaskView& v, const AttnRequest& q, const MpkTile& t, int64_t pos) {
    const int64_t k = pos / q.page_size, page = q.pages[k];
    if (page < 0 || page >= t.dims[0]) {
        attn_fail(v, "paged_kv_indices_buffer", q.first_page + k, page, "is a page index outside the KV cache (pages ",
                  t.dims[0]);
        return -1;
    }
    return page * t.strides[0] + (pos % q.page_size) * t.strides[1];
}

// ---- one head vector in a warp: lane l holds elements l + 32 k, k < NV = D / 32
template <int NV, typename T>
MPK_DEVICE MPK_INLINE void attn_load(float (&x)[NV], const T* p, int64_t stride) {
    const int lane = threadIdx.x % 32;
    MPK_UNROLL
    for (int k = 0; k < NV; ++k) x[k] = to_float(p[(lane + 32 * k) * stride]);
}

// Optional RMSNorm (w: the norm weight, nullptr: none) then optional rotate-half RoPE (cs, sn: the
// position's cos and sin rows, nullptr: none): out[d] = x[d] cos[d] - x[d + D/2] sin[d] for d < D/2,
// x[d] cos[d] + x[d - D/2] sin[d] above. All lanes of the warp call it (the norm is a warp sum).
template <int NV, typename T>
MPK_DEVICE MPK_INLINE void attn_norm_rope(float (&x)[NV], const T* w, const T* cs, const T* sn, float eps) {
    const int lane = threadIdx.x % 32;
    if (w != nullptr) {
        float ss = 0.0f;
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) ss += x[k] * x[k];
        const float inv_rms = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(32 * NV) + eps);
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) x[k] *= inv_rms * to_float(w[lane + 32 * k]);
    }
    if (cs != nullptr) {
        MPK_UNROLL
        for (int k = 0; k < NV / 2; ++k) {
            const int lo = lane + 32 * k, hi = lo + 16 * NV;
            const float a = x[k], b = x[k + NV / 2];
            x[k] = a * to_float(cs[lo]) - b * to_float(sn[lo]);
            x[k + NV / 2] = b * to_float(cs[hi]) + a * to_float(sn[hi]);
        }
    }
}

// The options' inputs: norm weights and cos / sin tables, nullptr when off (flags = iparam(1)).
template <typename T> struct AttnOptions {
    const T *q_norm = nullptr, *k_norm = nullptr, *cos = nullptr, *sin = nullptr;
    int64_t cos_stride = 0, sin_stride = 0;
    float eps = 0.0f;
};

template <typename T> MPK_DEVICE MPK_INLINE AttnOptions<T> attn_options(const TaskView& v) {
    AttnOptions<T> o;
    const int64_t flags = v.iparam(1);
    int next = 3;
    if (flags & 1) {
        o.q_norm = v.in<const T>(next++);
        o.k_norm = v.in<const T>(next++);
    }
    if (flags & 2) {
        o.cos_stride = v.in_tile(next).strides[0];
        o.cos = v.in<const T>(next++);
        o.sin_stride = v.in_tile(next).strides[0];
        o.sin = v.in<const T>(next++);
    }
    o.eps = ATTN_EPS;
    return o;
}

// Step 1: the new tokens at positions [lo, hi) (of S - T .. S - 1) into the cache; outputs 1 and 2 are
// the cache tiles (in place). One warp per row: 2 rows (K, V) per token.
template <typename T, int NV>
__device__ void attn_store_kv(const TaskView& v, const AttnRequest& q, const AttnOptions<T>& o, int64_t lo,
                              int64_t hi) {
    const Tile2D xt = tile2d(v.in_tile(0));
    const int G = static_cast<int>(xt.cols / (32 * NV)) - 2;
    const int warps = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const MpkTile &kt = v.out_tile(1), &vt = v.out_tile(2);
    T *kc = v.out<T>(1), *vc = v.out<T>(2);
    const T* x = v.in<const T>(0);
    const int64_t start = q.seq_len - q.tokens;
    for (int64_t u = warp; u < 2 * (hi - lo); u += warps) {
        const int64_t pos = lo + u / 2, i = pos - start;
        const bool is_k = u % 2 == 0;
        const T* row = x + (q.first + i) * xt.row_stride + (G + (is_k ? 0 : 1)) * 32 * NV * xt.col_stride;
        float e[NV];
        attn_load<NV>(e, row, xt.col_stride);
        if (is_k)
            attn_norm_rope<NV>(e, o.k_norm, o.cos ? o.cos + pos * o.cos_stride : nullptr,
                               o.sin ? o.sin + pos * o.sin_stride : nullptr, o.eps);
        const MpkTile& t = is_k ? kt : vt;
        const int64_t at = attn_slot(v, q, t, pos);  // (warp-uniform)
        if (at < 0) continue;
        T* slot = (is_k ? kc : vc) + at;
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) slot[(lane + 32 * k) * t.strides[3]] = from_float<T>(e[k]);
    }
}

// Step 3 for one (token i, query head g) pair on one warp: keys [k_lo, min(k_hi, pos_i + 1)) from the
// cache (inputs 1 and 2). acc gets sum_j p_j v_j / sum_j p_j; returns the log2-sum-exp of the scaled
// scores (-inf, acc = 0: no key in the range). qw, pw: this warp's D + 32 floats of shared memory.
template <typename T, int NV>
__device__ float attn_pair(const TaskView& v, const AttnRequest& q, const AttnOptions<T>& o, int64_t i, int g,
                           int64_t k_lo, int64_t k_hi, float (&acc)[NV], float* qw, float* pw) {
    const int lane = threadIdx.x % 32;
    const Tile2D xt = tile2d(v.in_tile(0));
    const MpkTile &kt = v.in_tile(1), &vt = v.in_tile(2);
    const T *kc = v.in<const T>(1), *vc = v.in<const T>(2);
    const int64_t pos = q.seq_len - q.tokens + i;
    const int64_t end = k_hi < pos + 1 ? k_hi : pos + 1;
    float x[NV];
    attn_load<NV>(x, v.in<const T>(0) + (q.first + i) * xt.row_stride + g * 32 * NV * xt.col_stride,
                  xt.col_stride);
    attn_norm_rope<NV>(x, o.q_norm, o.cos ? o.cos + pos * o.cos_stride : nullptr,
                       o.sin ? o.sin + pos * o.sin_stride : nullptr, o.eps);
    // scores in log2 units: exp(s / sqrt(D)) = exp2(s * log2(e) / sqrt(D))
    const float scale = 1.4426950408889634f / sqrtf(static_cast<float>(32 * NV));
    MPK_UNROLL
    for (int k = 0; k < NV; ++k) {
        qw[lane + 32 * k] = x[k] * scale;
        acc[k] = 0.0f;
    }
    __syncwarp();
    float m = -INFINITY, l = 0.0f;
    for (int64_t base = k_lo; base < end; base += 32) {
        const int64_t j = base + lane;
        float s = -INFINITY;
        const int64_t at = j < end ? attn_slot(v, q, kt, j) : -1;
        if (at >= 0) {
            const T* kr = kc + at;
            s = 0.0f;
            for (int d = 0; d < 32 * NV; ++d) s += qw[d] * to_float(kr[d * kt.strides[3]]);
        }
        const float m_new = fmaxf(m, warp_max(s));         // finite: key `base` is in range
        const float alpha = exp2f(m - m_new);               // 0 on the first block (m = -inf)
        const float p = j < end ? exp2f(s - m_new) : 0.0f;
        l = l * alpha + p;
        pw[lane] = p;
        __syncwarp();
        const int64_t n = end - base < 32 ? end - base : 32;
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) acc[k] *= alpha;
        for (int64_t jj = 0; jj < n; ++jj) {
            const int64_t at = attn_slot(v, q, vt, base + jj);  // (warp-uniform)
            if (at < 0) continue;
            const T* vr = vc + at;
            const float pj = pw[jj];
            MPK_UNROLL
            for (int k = 0; k < NV; ++k) acc[k] += pj * to_float(vr[(lane + 32 * k) * vt.strides[3]]);
        }
        __syncwarp();          // every lane has read pw before the next block writes it
        m = m_new;
    }
    const float total = warp_sum(l);
    if (end <= k_lo) return -INFINITY;
    MPK_UNROLL
    for (int k = 0; k < NV; ++k) acc[k] /= total;
    return m + log2f(total);
}

// ---- the whole-sequence task (paged_attention_layer)
template <typename T, int NV>
__device__ void paged_attention_rows(const TaskView& v) {
    const AttnRequest q = attn_request(v);
    if (q.tokens == 0) return;
    const AttnOptions<T> o = attn_options<T>(v);
    attn_store_kv<T, NV>(v, q, o, q.seq_len - q.tokens, q.seq_len);
    __syncthreads();
    const int G = static_cast<int>(tile2d(v.in_tile(0)).cols / (32 * NV)) - 2;
    const int warps = static_cast<int>(blockDim.x) / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float* qw = smem<float>(warp * (32 * NV + 32) * sizeof(float), 32 * NV + 32);
    const Tile2D yt = tile2d(v.out_tile(0));
    T* y = v.out<T>(0);
    for (int64_t u = warp; u < q.tokens * G; u += warps) {
        const int64_t i = u / G;
        const int g = static_cast<int>(u % G);
        float acc[NV];
        attn_pair<T, NV>(v, q, o, i, g, 0, q.seq_len, acc, qw, qw + 32 * NV);
        T* yr = y + (q.first + i) * yt.row_stride + g * 32 * NV * yt.col_stride;
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) yr[(lane + 32 * k) * yt.col_stride] = from_float<T>(acc[k]);
    }
}

// head_dim -> NV (the layer allows 64 and 128: layers/paged_attention.py HEAD_DIMS)
#define MPK_ATTN_DISPATCH(fn, T, v)                                                           \
    switch (v.in_tile(1).dims[3]) {                                                           \
        case 64: fn<T, 2>(v); break;                                                          \
        case 128: fn<T, 4>(v); break;                                                         \
        default: task_fail(v, "paged_attention: head_dim is not 64 or 128");                  \
    }

// ---- dispatch
template <typename T>
__device__ void paged_attention_task(const TaskView& v) {
    MPK_ATTN_DISPATCH(paged_attention_rows, T, v)
}

}  // namespace mpk
