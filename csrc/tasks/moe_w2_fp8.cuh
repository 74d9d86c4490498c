// moe_w2_fp8.cuh: MPK's moe_w2_fp8, the down projection on e4m3 codes with per-128 block scales: the entry
// point into moe_w13_fp8.cuh's kernel with the input row (and its scales) chosen by the slot (qx [B, topk,
// K], sx [B, topk, K / 128]); math, shapes, expert loop, bad routing, threads and order are described there.
// Test: tests/runtime_python/moe_w2_fp8/
// Run:  python -m pytest tests/runtime_python/moe_w2_fp8/
#pragma once
#include "moe_w13_fp8.cuh"

namespace mpk {

// ---- dispatch
template <typename T> MPK_DEVICE void moe_w2_fp8_task(const TaskView& v) { moe_fp8_tile<T, true>(v); }

}  // namespace mpk
