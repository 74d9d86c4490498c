// moe_w2_linear.cuh: MPK's moe_w2_linear, y[t, s, :] = x[t, s, :] @ W[e]^T per routed (expert, token):
// the entry point into moe_w13_linear.cuh's kernel with the input row chosen by the slot (x [B, topk, K]);
// shapes, expert loop, bad routing, threads and summation order are described there.
// Test: tests/runtime_python/moe_w2_linear/
// Run:  python -m pytest tests/runtime_python/moe_w2_linear/
#pragma once
#include "moe_w13_linear.cuh"

namespace mpk {

// ---- dispatch
template <typename T> MPK_DEVICE void moe_w2_linear_task(const TaskView& v) { moe_linear_tile<T, true>(v); }

}  // namespace mpk
