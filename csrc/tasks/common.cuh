// common.cuh: what several task kernels share: a tile seen as a 2-D strided matrix, and warp /
// block sums. CUDA device code for both backends (runtime/simt.h; docs/simt.md).
// Test: tests/csrc/test_kernels_*.cpp; run: bash tests/csrc/run_kernel_tests.sh
#pragma once
#include <stdio.h>
#include <stdexcept>
#include "../runtime/dtypes.h"
#include "../runtime/simt.h"
#include "../runtime/task_view.h"

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

// ---- a precondition that does not hold (a task table its layer could not have built)

// The CPU backend throws std::runtime_error(what), which the executor reports naming the task;
// under nvcc the thread prints `what` and traps, which fails the launch.
#if defined(__CUDACC__)
MPK_DEVICE MPK_INLINE void task_fail(const char* what) {
    printf("mpk task failed: %s\n", what);
    __trap();
}
#else
[[noreturn]] inline void task_fail(const char* what) { throw std::runtime_error(what); }
#endif

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
