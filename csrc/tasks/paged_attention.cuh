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
//   elements of sum_j p_j v_j (online softmax: m, l and the sums rescaled when m grows). A bf16 / fp16
//   request of 16+ (token, query head) pairs runs step 3 on the tensor cores instead (attn_pairs_mma).
// Test: tests/runtime_python/paged_attention/test_paged_attention.py (the kernel alone, task by task),
//       tests/runtime_python/paged_attention/test_paged_attention_testmode.py (in a graph, the meta pass)
#pragma once
#include <math.h>
#include "common.cuh"
#include "mma_linear.cuh"
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

// Pair (token i, query head g)'s query in step 3: q's head g of token i, normed and roped at the token's
// absolute position (both forms of step 3 take it from here). All lanes of the warp call it.
template <typename T, int NV>
MPK_DEVICE MPK_INLINE void attn_query(const TaskView& v, const AttnRequest& q, const AttnOptions<T>& o, int64_t i,
                                      int g, float (&x)[NV]) {
    const Tile2D xt = tile2d(v.in_tile(0));
    const int64_t pos = q.seq_len - q.tokens + i;
    attn_load<NV>(x, v.in<const T>(0) + (q.first + i) * xt.row_stride + g * 32 * NV * xt.col_stride,
                  xt.col_stride);
    attn_norm_rope<NV>(x, o.q_norm, o.cos ? o.cos + pos * o.cos_stride : nullptr,
                       o.sin ? o.sin + pos * o.sin_stride : nullptr, o.eps);
}

// The end of token i's keys in a range ending at k_hi: causal, keys up to its own position.
MPK_DEVICE MPK_INLINE int64_t attn_key_end(const AttnRequest& q, int64_t i, int64_t k_hi) {
    const int64_t pos = q.seq_len - q.tokens + i;
    const int64_t end = k_hi < pos + 1 ? k_hi : pos + 1;
    return end;
}

// The scores' scale to log2 units, both forms of step 3: exp(s / sqrt(D)) = exp2(s * log2(e) / sqrt(D)).
template <int NV> MPK_DEVICE MPK_INLINE float attn_score_scale() {
    return 1.4426950408889634f / sqrtf(static_cast<float>(32 * NV));
}

// Step 3 for one (token i, query head g) pair on one warp: keys [k_lo, min(k_hi, pos_i + 1)) from the
// cache (inputs 1 and 2). acc gets sum_j p_j v_j / sum_j p_j; returns the log2-sum-exp of the scaled
// scores (-inf, acc = 0: no key in the range). qw, pw: this warp's D + 32 floats of shared memory.
template <typename T, int NV>
__device__ float attn_pair(const TaskView& v, const AttnRequest& q, const AttnOptions<T>& o, int64_t i, int g,
                           int64_t k_lo, int64_t k_hi, float (&acc)[NV], float* qw, float* pw) {
    const int lane = threadIdx.x % 32;
    const MpkTile &kt = v.in_tile(1), &vt = v.in_tile(2);
    const T *kc = v.in<const T>(1), *vc = v.in<const T>(2);
    const int64_t end = attn_key_end(q, i, k_hi);
    float x[NV];
    attn_query<T, NV>(v, q, o, i, g, x);
    const float scale = attn_score_scale<NV>();
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

// ---- step 3 on the tensor cores (16-bit T; a request of at least 16 (token, query head) pairs)
// A warp takes 16 pairs u0..u0+15 of the request's T x G (u = i G + g) as the 16 rows of mma.m16n8k16's A:
// their q, normed and roped as attn_query gives it and rounded to T, staged in the warp's shared memory
// and held as A fragments (ldmatrix.x4). Keys go 8 at a time: their K and V rows copied from the cache
// slots by cp.async.cg (16 bytes a copy, K and V as two groups: V lands while the scores are computed);
// S = Q K^T by D/16 mma (K's rows by ldmatrix: B is column-major), scaled to log2 units in fp32 and
// masked per row (keys [k_lo, attn_key_end)); the online softmax per row over its 4 lanes (2 shuffles);
// P = exp2(S - m) rounded to T becomes mma.m16n8k8's A as it lies (the C fragment's rows and columns are
// A's), and O += P V by D/8 mma (V's rows by ldmatrix.trans). l sums the rounded P, so o = sum p~ v / sum p~.
// Shared memory per warp: 16 rows of D elements of T (q, then K's and V's 8 rows), rows XOR-swizzled by
// 16-byte chunk (chunk c of row r at c ^ (r & 7)) so one ldmatrix matrix's 8 rows hit 8 bank groups.
// Budget: q and P rounded to T, D and the keys counted twice (an mma's order is unspecified): testing's
// tol_attention(tensor_cores=) (mirage/mpk/testing/tolerances.py, "Attention").
template <int NV> MPK_DEVICE MPK_INLINE int attn_chunk(int r, int c) {
    return r * 64 * NV + 16 * (c ^ (r & 7));
}
template <typename T> MPK_DEVICE MPK_INLINE uint32_t attn_pack2(float lo, float hi) {
    const T a = from_float<T>(lo), b = from_float<T>(hi);
    uint16_t ua, ub;
    memcpy(&ua, &a, 2);
    memcpy(&ub, &b, 2);
    return uint32_t(ua) | uint32_t(ub) << 16;
}
// Whether step 3 of this request runs on the tensor cores (mirage/mpk/layers/paged_attention.py
// tensor_core_rows says the same per row): 16-bit T, at least 16 pairs, and cache rows cp.async can copy.
template <typename T> MPK_DEVICE MPK_INLINE bool attn_tensor_cores(const TaskView& v, const AttnRequest& q, int G) {
    if constexpr (sizeof(T) != 2) {
        return false;
    } else {
        auto rows16 = [](const void* p, const MpkTile& t) {
            return uintptr_t(p) % 16 == 0 && t.strides[3] == 1 && t.strides[1] % 8 == 0 && t.strides[0] % 8 == 0;
        };
        return q.tokens * G >= 16 && rows16(v.in<const T>(1), v.in_tile(1)) && rows16(v.in<const T>(2), v.in_tile(2));
    }
}

// Keys [base, base + 8) of the cache tile `t` into 8 staged rows (keys past `end` zero-filled).
template <typename T, int NV>
MPK_DEVICE MPK_INLINE void attn_stage_keys(const TaskView& v, const AttnRequest& q, const MpkTile& t, const T* cache,
                                           int64_t base, int64_t end, char* rows) {
    for (int c = threadIdx.x % 32; c < 8 * 4 * NV; c += 32) {
        const int r = c / (4 * NV), ch = c % (4 * NV);
        const int64_t at = base + r < end ? attn_slot(v, q, t, base + r) : -1;
        ptx::cp_async_cg_shared_global<16>(rows + attn_chunk<NV>(r, ch), at >= 0 ? cache + at + 8 * ch : cache,
                                           at >= 0 ? 16u : 0u);
    }
    ptx::cp_async_commit_group();
}

// Pairs [u0, u0 + 16) of the request, keys [k_lo, attn_key_end) each; out(i, g, d, o) per element and
// out.lse(i, g, lse) per pair (the log2-sum-exp of the scaled scores; -inf and o = 0 without a key).
template <typename T, int NV, typename Out>
__device__ void attn_pairs_mma(const TaskView& v, const AttnRequest& q, const AttnOptions<T>& o, int G, int64_t u0,
                               int64_t k_lo, int64_t k_hi, char* rows, const Out& out) {
    using mma_linear_detail::mma16;
    using mma_linear_detail::mma8;
    const int lane = threadIdx.x % 32, g4 = lane >> 2, t4 = lane & 3;
    const int64_t pairs = q.tokens * G;
    for (int r = 0; r < 16; ++r) {  // q of the 16 pairs (rows past the request: zeros), rounded to T
        float x[NV];
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) x[k] = 0.0f;
        if (u0 + r < pairs) attn_query<T, NV>(v, q, o, (u0 + r) / G, int((u0 + r) % G), x);
        MPK_UNROLL
        for (int k = 0; k < NV; ++k) {
            const int d = lane + 32 * k;
            reinterpret_cast<T*>(rows + attn_chunk<NV>(r, d / 8))[d % 8] = from_float<T>(x[k]);
        }
    }
    __syncwarp();
    uint32_t qa[2 * NV][4];  // A of k16 step j: rows 0-15, dims 16 j .. 16 j + 15
    MPK_UNROLL
    for (int j = 0; j < 2 * NV; ++j)
        ptx::ldmatrix_m8n8_x4_shared_b16(qa[j], rows + attn_chunk<NV>((lane & 7) + 8 * ((lane >> 3) & 1),
                                                                         2 * j + (lane >> 4)));
    __syncwarp();  // every lane holds its fragments: the rows take K and V next
    int64_t row_end[2];  // this lane's rows g4 and g4 + 8
    for (int h = 0; h < 2; ++h) {
        const int64_t u = u0 + g4 + 8 * h;
        row_end[h] = u < pairs ? attn_key_end(q, u / G, k_hi) : k_lo;
    }
    const int64_t last = u0 + 15 < pairs ? u0 + 15 : pairs - 1;
    const int64_t end = attn_key_end(q, last / G, k_hi);  // the last pair's: the most keys
    const MpkTile &kt = v.in_tile(1), &vt = v.in_tile(2);
    const T *kc = v.in<const T>(1), *vc = v.in<const T>(2);
    char *ks = rows, *vs = rows + 8 * 64 * NV;
    const float scale = attn_score_scale<NV>();
    float acc[4 * NV][4] = {};
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    for (int64_t base = k_lo; base < end; base += 8) {
        attn_stage_keys<T, NV>(v, q, kt, kc, base, end, ks);
        attn_stage_keys<T, NV>(v, q, vt, vc, base, end, vs);
        ptx::cp_async_wait_group<1>();  // K has landed; V may still be in flight
        __syncwarp();
        float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        MPK_UNROLL
        for (int p = 0; p < NV; ++p) {  // dims 32 p .. 32 p + 31: two k16 steps
            uint32_t kb[4];
            ptx::ldmatrix_m8n8_x4_shared_b16(kb, ks + attn_chunk<NV>(lane & 7, 4 * p + (lane >> 3)));
            const uint32_t b0[2] = {kb[0], kb[1]}, b1[2] = {kb[2], kb[3]};
            mma16<T>(s, qa[2 * p], b0);
            mma16<T>(s, qa[2 * p + 1], b1);
        }
        float alpha[2];
        for (int h = 0; h < 2; ++h) {  // s[2h + e]: row g4 + 8h, key base + 2 t4 + e
            for (int e = 0; e < 2; ++e)
                s[2 * h + e] = base + 2 * t4 + e < row_end[h] ? s[2 * h + e] * scale : -INFINITY;
            float bm = fmaxf(s[2 * h], s[2 * h + 1]);
            bm = fmaxf(bm, __shfl_xor_sync(0xFFFFFFFFu, bm, 1));
            bm = fmaxf(bm, __shfl_xor_sync(0xFFFFFFFFu, bm, 2));
            const float m_new = fmaxf(m[h], bm);
            alpha[h] = m_new == -INFINITY ? 1.0f : exp2f(m[h] - m_new);  // 0 once m leaves -inf
            for (int e = 0; e < 2; ++e) {
                const float p = s[2 * h + e] == -INFINITY ? 0.0f : exp2f(s[2 * h + e] - m_new);
                s[2 * h + e] = to_float(from_float<T>(p));  // P as the mma takes it
            }
            l[h] = l[h] * alpha[h] + s[2 * h] + s[2 * h + 1];
            m[h] = m_new;
        }
        const uint32_t pa[2] = {attn_pack2<T>(s[0], s[1]), attn_pack2<T>(s[2], s[3])};
        MPK_UNROLL
        for (int n = 0; n < 4 * NV; ++n) {
            acc[n][0] *= alpha[0];
            acc[n][1] *= alpha[0];
            acc[n][2] *= alpha[1];
            acc[n][3] *= alpha[1];
        }
        ptx::cp_async_wait_group<0>();
        __syncwarp();
        MPK_UNROLL
        for (int p = 0; p < NV; ++p) {  // dims 32 p .. 32 p + 31: four n8 tiles
            uint32_t vb[4];
            ptx::ldmatrix_m8n8_x4_trans_shared_b16(vb, vs + attn_chunk<NV>(lane & 7, 4 * p + (lane >> 3)));
            MPK_UNROLL
            for (int j = 0; j < 4; ++j) {
                const uint32_t b[1] = {vb[j]};
                mma8<T>(acc[4 * p + j], pa, b);
            }
        }
        __syncwarp();  // every lane has read K and V before the next keys are copied over them
    }
    for (int h = 0; h < 2; ++h) {
        float total = l[h];
        total += __shfl_xor_sync(0xFFFFFFFFu, total, 1);
        total += __shfl_xor_sync(0xFFFFFFFFu, total, 2);
        const int64_t u = u0 + g4 + 8 * h;
        if (u >= pairs) continue;
        const float inv = total > 0.0f ? 1.0f / total : 0.0f;
        MPK_UNROLL
        for (int n = 0; n < 4 * NV; ++n)
            for (int e = 0; e < 2; ++e) out(u / G, int(u % G), 8 * n + 2 * t4 + e, acc[n][2 * h + e] * inv);
        if (t4 == 0) out.lse(u / G, int(u % G), total > 0.0f ? m[h] + log2f(total) : -INFINITY);
    }
}

// Where step 3 puts pair (i, g)'s output: o into output 0's row of token i, head g's column block; lse
// into output 3 (split-KV) when it has one.
template <typename T> struct AttnOut {
    T* y;
    int64_t first, row_stride, col_stride, head;  // head: a head's column block (D)
    float* ls = nullptr;
    int64_t lse_row = 0, lse_col = 0;
    MPK_DEVICE MPK_INLINE void operator()(int64_t i, int g, int d, float o) const {
        y[(first + i) * row_stride + (g * head + d) * col_stride] = from_float<T>(o);
    }
    MPK_DEVICE MPK_INLINE void lse(int64_t i, int g, float value) const {
        if (ls) ls[(first + i) * lse_row + g * lse_col] = value;
    }
};

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
    const Tile2D yt = tile2d(v.out_tile(0));
    T* y = v.out<T>(0);
    if (attn_tensor_cores<T>(v, q, G)) {
        char* rows = smem<char>(size_t(warp) * 16 * 64 * NV, 16 * 64 * NV);
        const AttnOut<T> out{y, q.first, yt.row_stride, yt.col_stride, 32 * NV};
        for (int64_t u0 = int64_t(warp) * 16; u0 < q.tokens * G; u0 += int64_t(warps) * 16)
            attn_pairs_mma<T, NV>(v, q, o, G, u0, 0, q.seq_len, rows, out);
        return;
    }
    float* qw = smem<float>(warp * (32 * NV + 32) * sizeof(float), 32 * NV + 32);
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
