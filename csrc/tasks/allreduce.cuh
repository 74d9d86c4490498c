// allreduce.cuh: sum one task's tile over the ranks (docs/runtime.md):
//   y = ((x_0 + x_1) + ...) + x_{W-1}, in fp32 from 0, in rank order, one rounding to T. Every
//   rank adds the same W values in the same order, so every rank's output is bit-identical.
// CUDA device code for both backends (runtime/simt.h).
// Shapes: in(0)  x   [B, h]     this rank's tile of the input (any strides)
//         out(0) y   [B, h]     this rank's output tile
//         out(1) buf [W, B, h]  the task's tile of the symmetric staging buffer [W, B, H]:
//                               slot q holds rank q's x; every rank writes it, this one reads it
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
// watchdog) makes the whole block return at once; the executor then drops the task.
// Threads: thread 0 alone waits and signals, through the executor's TaskView::wait / ::signal
// (csrc/runtime/executor.cuh's wait_peer / signal_peer, device code). Barriers order them
// with the block's copies and reads: wait -> __syncthreads_and(thread 0's answer) -> everyone
// copies / sums -> __syncthreads -> signal; the _and hands a wait's "gave up" to every thread,
// so the block leaves together. A task takes 2 W + 2 barriers and no shared memory. The copies and the sum are element-parallel over the tile
// (common.cuh's for_each_chunk: element (b, c) in row-major order, thread t takes t,
// t + blockDim.x, ...; coalesced along a row).
// GPU: the executor builds the TaskView in device code, so wait and signal are device functions
// (an acquire poll at system scope that checks the abort flag and backs off with __nanosleep; a
// release store at system scope, which with the __syncthreads before it publishes the whole
// block's puts). This kernel calls them the same way on both backends.
// Test: tests/csrc/test_kernels_linear.cpp (one rank; 2 and 3 ranks on OS threads in one
//       process, bit-identical; an aborted wait), tests/runtime_python/allreduce/
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_linear
//       mpirun -n 4 python tests/runtime_python/allreduce/test_allreduce_testmode.py
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
template <typename T> MPK_DEVICE void allreduce_task(const TaskView& v) {
    const int32_t world = v.world_size, rank = v.rank;
    const int64_t slot = v.iparam(0), use = v.iparam(1), uses = v.iparam(2);
    if (!v.peer_signals || !v.peers_served() || uses < 1 || use < 0 || use >= uses)
        return task_fail(v, "allreduce: no signal counters, no wait/signal, or a bad slot use (iparams 1, 2)");
    for (int32_t p = 0; p < world; ++p)
        if (!v.peer_out<T>(1, p)) return task_fail(v, "allreduce: a rank's staging buffer is not mapped (peer_tensors)");
    const int64_t n = (v.iteration - 1) * uses + use + 1;
    const Tile2D xt = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));
    const MpkTile& bt = v.out_tile(1);  // [W, B, h]
    const int64_t slot_stride = bt.strides[0], row_stride = bt.strides[1], col_stride = bt.strides[2];
    const T* x = v.in<const T>(0);
    const int tid = threadIdx.x;

    // 1. put this rank's tile into slot `rank` of every rank's buffer
    for (int32_t j = 0; j < world; ++j) {
        const int32_t p = (rank + j) % world;
        int64_t* sig = v.peer_signals[p] + slot * (world + 1);
        bool free = true;
        if (tid == 0) free = v.wait(sig + world, n - 1, p, MPK_PEER_CONSUMED);
        if (!__syncthreads_and(free)) return;  // thread 0's answer, to all: the block leaves together
        T* dst = v.peer_out<T>(1, p) + rank * slot_stride;
        for_each_chunk(xt.rows, xt.cols, [&](int64_t b, int64_t c) {
            dst[b * row_stride + c * col_stride] = x[b * xt.row_stride + c * xt.col_stride];
        });
        __syncthreads();  // the whole tile is in p's slot before the signal
        if (tid == 0) v.signal(sig + rank, n, p);
    }
    // 2. every rank's tile has arrived here
    int64_t* mine = v.peer_signals[rank] + slot * (world + 1);
    bool arrived = true;
    if (tid == 0)
        for (int32_t q = 0; q < world && arrived; ++q) arrived = v.wait(mine + q, n, q, MPK_PEER_DATA);
    if (!__syncthreads_and(arrived)) return;
    // 3. sum in rank order, fp32, one rounding
    const T* buf = v.out<const T>(1);
    T* y = v.out<T>(0);
    for_each_chunk(yt.rows, yt.cols, [&](int64_t b, int64_t c) {
        const T* src = buf + b * row_stride + c * col_stride;
        float acc = 0.0f;
        for (int32_t q = 0; q < world; ++q) acc += to_float(src[q * slot_stride]);
        y[b * yt.row_stride + c * yt.col_stride] = from_float<T>(acc);
    });
    __syncthreads();  // every thread has read its slots before they are declared free
    if (tid == 0) v.signal(mine + world, n, rank);
}

}  // namespace mpk
