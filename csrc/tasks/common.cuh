// common.cuh: what several task kernels share: a tile seen as a 2-D strided matrix, and warp /
// block sums. CUDA device code for both backends (runtime/simt.h; docs/simt.md).
// Test: tests/csrc/test_kernels_*.cpp; run: bash tests/csrc/run_kernel_tests.sh
#pragma once
#include <stdio.h>
#include <stdexcept>
#include "../runtime/atomics.h"
#include "../runtime/dtypes.h"
#include "../runtime/simt.h"
#include "../runtime/task_view.h"
#include "../runtime/text.h"

namespace mpk {

// A task tile as a matrix: element (r, c) of a tile whose pointer is p is
// p[r * row_stride + c * col_stride] (elements).
//   ndim 0/1: [1, dims[0]]         column stride strides[0]
//   ndim 2:   [dims[0], dims[1]]   row stride strides[0], column stride strides[1]
//   ndim 3/4: leading dims folded into rows, row stride strides[ndim-2]; valid only when the
//             leading dims are packed (the layers' partition maps keep them so).
struct Tile2D {
    int64_t rows, cols, row_stride, col_stride;
};

MPK_HOST_DEVICE MPK_INLINE Tile2D tile2d(const MpkTile& t) {
    if (t.ndim <= 1) return Tile2D{1, t.dims[0], 0, t.strides[0]};
    int64_t rows = 1;
    for (int i = 0; i < t.ndim - 1; ++i) rows *= t.dims[i];
    return Tile2D{rows, t.dims[t.ndim - 1], t.strides[t.ndim - 2], t.strides[t.ndim - 1]};
}

// Sum over the 32 lanes of a warp (butterfly: every lane gets the total). All 32 lanes call it.
MPK_DEVICE MPK_INLINE float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xFFFFFFFFu, x, offset);
    return x;
}

// Maximum over the 32 lanes of a warp (butterfly: every lane gets it). All 32 lanes call it.
MPK_DEVICE MPK_INLINE float warp_max(float x) {
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xFFFFFFFFu, x, offset));
    return x;
}

// Sum over the block; every thread gets the total. All threads call it. Uses blockDim.x / 32
// floats of shared memory at `smem_offset` and two barriers (the second keeps a following call
// from overwriting the partials before every thread has read them).
MPK_DEVICE MPK_INLINE float block_sum(float x, size_t smem_offset) {
    const int warps = static_cast<int>(blockDim.x) / 32;
    float* partial = smem<float>(smem_offset, warps);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    x = warp_sum(x);
    if (lane == 0) partial[warp] = x;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < warps; ++w) total += partial[w];  // the same order in every thread
    __syncthreads();
    return total;
}

// ---- packed access: N consecutive elements moved as one N * sizeof(T)-byte access
// (N = PACK16<T>: one 128-bit load or store; N = 1: the scalar access, any column stride).
template <typename T, int N> struct alignas(sizeof(T) * N) Pack {
    T e[N];
};
template <typename T> constexpr int PACK16 = static_cast<int>(16 / sizeof(T));

template <typename T, int N> MPK_DEVICE MPK_INLINE Pack<T, N> load_pack(const T* p) {
    return *reinterpret_cast<const Pack<T, N>*>(p);
}
template <typename T, int N> MPK_DEVICE MPK_INLINE void store_pack(T* p, const Pack<T, N>& x) {
    *reinterpret_cast<Pack<T, N>*>(p) = x;
}

// A hint that this thread reads p soon; no effect on any result. The CPU emulation runs a warp's lanes
// one after another, each over its whole loop, so a lane streaming a weight in steps of the warp's
// 512 bytes misses on every step, in a pattern the hardware prefetcher does not foresee; prefetching
// the step after next took the bf16 GEMV (csrc/tasks/linear.cuh) from 4.2 to 5.8 G multiply-adds/s
// with the weight streamed from memory (benchmarks/gemv_rate.cpp). On a GPU the warp's loads coalesce
// and other warps hide the latency: nvcc gets nothing. A prefetch past the end of an allocation is
// harmless (it never faults).
MPK_DEVICE MPK_INLINE void prefetch_hint(const void* p) {
#if !defined(__CUDACC__)
    __builtin_prefetch(p);
#else
    (void)p;
#endif
}

// True when tile t at p can be read or written in Pack<T, N> units along its rows: unit column
// stride, cols a multiple of N, and every row start N * sizeof(T)-aligned (p aligned and the row
// stride a multiple of N). Checked at run time: a tile may start at any element.
template <int N, typename T> MPK_DEVICE MPK_INLINE bool packable(const T* p, const Tile2D& t) {
    if (N == 1) return true;
    return reinterpret_cast<uintptr_t>(p) % (sizeof(T) * N) == 0 && t.cols % N == 0 &&
           t.col_stride == 1 && (t.rows <= 1 || t.row_stride % N == 0);
}

// Calls f(row, chunk) for this thread's share of a [rows, chunks] grid of work items walked in
// row-major order, blockDim.x items apart (thread t: items t, t + blockDim.x, ...): consecutive
// threads take consecutive chunks of a row, so their accesses coalesce, and short rows still
// keep every thread busy. Steps without a division: (row, chunk) advances by (dr, dc). A thread
// with no item returns at once, and the start and step need a division only when a row is
// narrower than the block, then a 32-bit one (both under 1024): a 64-bit division is a long
// software routine on a GPU and tens of cycles on a CPU, per thread and task.
template <typename F> MPK_DEVICE MPK_INLINE void for_each_chunk(int64_t rows, int64_t chunks, F&& f) {
    const int64_t t = threadIdx.x, step = blockDim.x;
    if (rows <= 0 || chunks <= 0 || t >= rows * chunks) return;
    const uint32_t c32 = static_cast<uint32_t>(chunks);
    int64_t r = 0, c = t, dr = 0, dc = step;
    if (chunks <= t) {
        r = static_cast<uint32_t>(t) / c32;
        c = static_cast<uint32_t>(t) % c32;
    }
    if (chunks <= step) {
        dr = static_cast<uint32_t>(step) / c32;
        dc = static_cast<uint32_t>(step) % c32;
    }
    while (r < rows) {
        f(r, c);
        r += dr;
        c += dc;
        if (c >= chunks) {
            c -= chunks;
            ++r;
        }
    }
}

// ---- a precondition that does not hold (a task table its layer could not have built, a meta tensor
// whose values the kernel cannot follow)

// The view's record (runtime/task_view.h TaskFailure) takes `what` if no thread failed before (the first
// failure of the launch wins); then the caller must NOT do what the check guards, and must keep the
// block together (docs/runtime.md, "A task that fails"):
//   - a failure every thread of the block sees alike (a task parameter, a meta tensor entry that every
//     thread reads): `task_fail(v, "..."); return;` from the task, all threads at the same point;
//   - one that only some threads or lanes see (a page index one lane reads): skip the access and carry
//     on with a harmless value, so every thread still reaches every barrier and warp collective.
// The worker's barrier after the task hears of it (its block reduction, executor.cuh worker_loop), the
// executor stops the pass and the launch reports the first failing task and its message
// (MPK_TASK_FAILED). No trap, no printf, no throw: a CUDA context survives a failed task.
// A view built by hand without a record (a C++ kernel test): the CPU throws std::runtime_error(what),
// nvcc traps.
// The record of the launch, claimed for this thread's task: false when there is none to claim (an
// earlier failure keeps it). A view without a record (a C++ kernel test): the CPU throws
// std::runtime_error(what), nvcc traps.
MPK_DEVICE MPK_NOINLINE inline bool claim_failure(const TaskView& v, const char* what) {
    TaskFailure* f = v.failure;
    if (f == nullptr) {
#if defined(__CUDACC__)
        __trap();
#else
        throw std::runtime_error(what);
#endif
    }
    const uint64_t me = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(v.task));
    if (atomic_cas(&f->owner, uint64_t(0), me) != 0) return false;
    f->thread = static_cast<int32_t>(threadIdx.x);
    return true;
}

MPK_DEVICE MPK_NOINLINE inline void task_fail(const TaskView& v, const char* what) {
    if (claim_failure(v, what)) Text(v.failure->message, kTaskFailureBytes).s(what);
}

// task_fail with a message that names numbers: write(text) appends to a Text (runtime/text.h) built in
// the record itself, so no message buffer lives on the failing thread's stack (a GPU thread's local array
// is a stack frame in the kernel). Without a record, the CPU builds it in a local buffer to throw it.
// Out of line like task_fail (MPK_NOINLINE, runtime/platform.h): the message is built once per launch at
// most, and its text calls stay out of the task's hot code.
template <typename Write>
MPK_DEVICE MPK_NOINLINE void task_fail_text(const TaskView& v, Write write) {
#if !defined(__CUDACC__)
    if (v.failure == nullptr) {
        char msg[kTaskFailureBytes];
        Text t(msg, kTaskFailureBytes);
        write(t);
        claim_failure(v, msg);          // throws
    }
#endif
    if (!claim_failure(v, "task_fail_text")) return;
    Text t(v.failure->message, kTaskFailureBytes);
    write(t);
}

}  // namespace mpk

// Fully unroll the next loop (its trip count is a compile-time constant): nvcc's and GCC's
// spellings; g++ -Wall would warn about nvcc's.
#ifndef MPK_UNROLL
#if defined(__CUDACC__)
#define MPK_UNROLL _Pragma("unroll")
#else
#define MPK_UNROLL _Pragma("GCC unroll 32")
#endif
#endif
