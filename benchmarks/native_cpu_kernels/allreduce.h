// allreduce.h: sum one task's tile over the ranks, CPU (docs/runtime.md).
//   y = x_0 + x_1 + ... + x_{W-1}: fp32, in rank order, one rounding to T. Every rank adds
//   the same W values in the same order, so every rank's output is bit-identical.
// Shapes: in(0)  x [B, h]         this rank's tile of the input (row stride strides[0])
//         out(0) y [B, h]         this rank's output tile
//         out(1) buf [W, B, h]    the task's tile of the symmetric staging buffer [W, B, H]:
//                                 slot q holds rank q's x; every rank writes it, this one reads it
// Signals: every rank has a symmetric int64 array [num_slots][W + 1]; iparam(0) = slot,
// iparam(1) = this task's use of the slot within a pass, iparam(2) = uses per pass (layers
// sharing one buffer tile share its slot). Use n = (iteration - 1) * uses + use + 1 counts
// from 1 across passes and launches, so counters only grow:
//   sig[slot][q]  on rank p: the last use whose tile rank q has put into p's slot q
//   sig[slot][W]  on rank p: the last use p has finished reading (its slots are free again)
// Use n, on rank r:
//   1. put, for each peer p (itself first): wait sig_p[slot][W] >= n - 1 (p is done reading
//      use n - 1, so slot r is free: a fast rank never overwrites what a slow one still
//      reads), copy x into p's slot r, then signal sig_p[slot][r] = n (release);
//   2. wait sig_r[slot][q] >= n for q = 0..W-1 (acquire): every rank's tile has arrived;
//   3. sum in rank order, then sig_r[slot][W] = n (release).
// One writer per counter, so a store suffices. A wait that gives up (the launch aborts:
// watchdog) returns at once; the executor then drops the task.
// Kept only for benchmarks/qwen3_mlp_pass.py (the former native CPU kernel; the mainline runs
// csrc/tasks/allreduce.cuh).
#pragma once
#include <stdexcept>
#include <string>
#include "runtime/dtypes.h"
#include "tile2d.h"

namespace mpk {

// ---- kernel
template <typename T>
void allreduce_task(const TaskView& v) {
    const int32_t world = v.world_size, rank = v.rank;
    const int64_t slot = v.iparam(0), use = v.iparam(1), uses = v.iparam(2);
    if (!v.peer_signals || !v.wait || uses < 1 || use < 0 || use >= uses)
        throw std::runtime_error("allreduce: no signal counters or bad slot (iparams " + std::to_string(slot) +
                                 ", " + std::to_string(use) + ", " + std::to_string(uses) + ")");
    const int64_t n = (v.iteration - 1) * uses + use + 1;
    const Tile2D xt = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));
    const MpkTile& bt = v.out_tile(1);                  // [W, B, h]
    const int64_t slot_stride = bt.strides[0], row_stride = bt.strides[1], col_stride = bt.strides[2];
    const T* x = v.in<const T>(0);
    auto signals = [&](int32_t r) { return v.peer_signals[r] + slot * (world + 1); };

    // 1. put this rank's tile into slot `rank` of every rank's buffer
    for (int32_t j = 0; j < world; ++j) {
        const int32_t p = (rank + j) % world;
        T* dst = v.peer_out<T>(1, p);
        if (!dst) throw std::runtime_error("allreduce: rank " + std::to_string(p) + "'s buffer is not mapped");
        if (!v.wait(v, signals(p) + world, n - 1, p, MPK_PEER_CONSUMED)) return;
        dst += rank * slot_stride;
        for (int64_t b = 0; b < xt.rows; ++b)
            for (int64_t c = 0; c < xt.cols; ++c)
                dst[b * row_stride + c * col_stride] = x[b * xt.row_stride + c * xt.col_stride];
        v.signal(v, signals(p) + rank, n, p);
    }
    // 2. every rank's tile has arrived here
    int64_t* mine = signals(rank);
    for (int32_t q = 0; q < world; ++q)
        if (!v.wait(v, mine + q, n, q, MPK_PEER_DATA)) return;
    // 3. sum in rank order, fp32, one rounding
    const T* buf = v.out<const T>(1);
    T* y = v.out<T>(0);
    for (int64_t b = 0; b < yt.rows; ++b)
        for (int64_t c = 0; c < yt.cols; ++c) {
            float acc = 0.0f;
            for (int32_t q = 0; q < world; ++q) acc += to_float(buf[q * slot_stride + b * row_stride + c * col_stride]);
            y[b * yt.row_stride + c * yt.col_stride] = from_float<T>(acc);
        }
    v.signal(v, mine + world, n, rank);
}

}  // namespace mpk
