// paged_attention_split_kv_merge.cuh: the split-KV chunks' partial attentions of one request and one KV
// head combined into the output, as CUDA device code for both backends (runtime/simt.h).
// Layer: mirage/mpk/layers/paged_attention_split_kv_merge.py (MPK's paged_attention_split_kv_merge_layer);
// its inputs are paged_attention_split_kv.cuh's outputs.
//
// The request r = iparam(0) owns rows [qo[r], qo[r+1]) (qo_indptr_buffer); head_dim D = iparam(1).
// Tiles: inputs 0 lse [rows, C * G, 1] float (log2 units, -inf: a chunk with no key), 1 output_tmp
//   [rows, C * G * D, 1] (element (t, (c * G + g) * D + d, 0)); output 0 [rows, G * D] (query head g of
//   the KV head at columns g * D); G = output cols / D, C = lse dim 1 / G.
// Per element (t, g, d), one thread each, no barrier: m = max_c lse_c, then in chunk order
//   w_c = exp2(lse_c - m) for every chunk with lse_c > -inf (a chunk at -inf is skipped: its weight is 0,
//   and exp2(-inf - m) would be NaN where m is -inf too), o = sum_c w_c o_c / sum_c w_c in fp32, rounded
//   once; 0 when every chunk is -inf (a row no chunk holds a key for: cannot occur, chunk 0 holds key 0).
// A request whose rows lie outside the tiles fails the task with a message (common.cuh task_fail).
// Test: tests/runtime_python/paged_attention_split_kv_merge/test_paged_attention_split_kv_merge.py (alone),
//       tests/runtime_python/paged_attention_split_kv_merge/test_paged_attention_split_kv_merge_testmode.py
//       (the split and the merge in one graph)
#pragma once
#include <math.h>
#include "common.cuh"
#include "../runtime/text.h"

namespace mpk {

template <typename T>
__device__ void paged_attention_split_kv_merge_task(const TaskView& v) {
    const int64_t r = v.iparam(0), D = v.iparam(1);
    const int64_t first = v.meta->qo_indptr_buffer[r], rows = v.meta->qo_indptr_buffer[r + 1] - first;
    if (rows == 0) return;
    const MpkTile &lt = v.in_tile(0), &xt = v.in_tile(1);
    const Tile2D yt = tile2d(v.out_tile(0));
    if (rows < 0 || first < 0 || first + rows > yt.rows) {
        const int64_t i = first < 0 || first > yt.rows ? r : r + 1;
        task_fail_text(v, [&](Text& t) {    // (written into the launch's record: no buffer on the stack)
            t.s("paged_attention_split_kv_merge: meta tensor 'qo_indptr_buffer'[").i(i).s("] = ")
                .i(v.meta->qo_indptr_buffer[i]).s(" gives the request rows outside the tiles (rows ").i(yt.rows).s(")");
        });
        return;                     // (task_fail records and returns: nothing read or written)
    }
    const int64_t G = yt.cols / D, C = lt.dims[1] / G;
    const float* lse = v.in<const float>(0);
    const T* x = v.in<const T>(1);
    T* y = v.out<T>(0);
    for (int64_t e = threadIdx.x; e < rows * G * D; e += blockDim.x) {
        const int64_t t = first + e / (G * D), g = e % (G * D) / D, d = e % D;
        const float* lr = lse + t * lt.strides[0] + g * lt.strides[1];
        float m = -INFINITY;
        for (int64_t c = 0; c < C; ++c) m = fmaxf(m, lr[c * G * lt.strides[1]]);
        float sum = 0.0f, acc = 0.0f;
        for (int64_t c = 0; c < C; ++c) {
            const float l = lr[c * G * lt.strides[1]];
            if (l == -INFINITY) continue;          // an empty chunk: weight 0
            const float w = exp2f(l - m);
            sum += w;
            acc += w * to_float(x[t * xt.strides[0] + ((c * G + g) * D + d) * xt.strides[1]]);
        }
        y[t * yt.row_stride + (g * D + d) * yt.col_stride] = from_float<T>(sum == 0.0f ? 0.0f : acc / sum);
    }
}

}  // namespace mpk
