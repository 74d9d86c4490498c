// negctl_twice.cuh: a sample task kernel with switchable bugs, for the kernel-level negative
// controls (tests/runtime_python/test_mode/test_kernel_negative_controls.py). It is not one of
// mirage-mpk's layers: kernel_samples.py copies csrc/ into a temporary directory, adds this file
// as tasks/negctl_twice.cuh and registers a layer module for it.
//
// With iparam(0) == NEGCTL_OK it is a correct row-wise op: y[r, j] = 2 * x[r, j] (fp32 math), done
// the long way round so that each bug below has the barrier, shared-memory slot, mask or index it
// needs. Per row, per chunk of blockDim.x columns:
//   stage A (block):  thread t writes x[c0 + t] to stage[t]; __syncthreads; thread t reads
//                     stage[(t - 32) mod B] (one warp further back: a block-wide exchange);
//                     __syncthreads (stage is written again next).
//   stage B (warp):   thread t writes what it read to stage[t]; __syncwarp; it reads the slot of
//                     lane t ^ 1 (a warp-level exchange); __syncwarp.
//   Thread t then writes column c0 + ((t ^ 1) - 32) mod B: the column whose value it holds,
//   multiplied by `two`, a static __shared__ factor thread 0 sets at the start of every task.
// iparam(1): the rows of the whole tensor (to tell the last task, whose tile ends the tensor,
// from the inner ones); fparam(0): alpha, the weight of the halo term of NEGCTL_HALO_READ (0 in
// the tests, so that term never changes a value that is in memory).
// Every line a test names carries a "[marker]" comment; the test finds its line number by it.
#pragma once
#include "common.cuh"

#define NEGCTL_OK 0
#define NEGCTL_SMEM_RACE 1        // no __syncthreads between stage A's write and its read
#define NEGCTL_WARP_RACE 2        // no __syncwarp between stage B's write and its read (lockstep assumed)
#define NEGCTL_DIVERGENT_BARRIER 3  // stage A's __syncthreads inside if (threadIdx.x < 64)
#define NEGCTL_SYNCWARP_MASK 4    // stage B's __syncwarp mask (1u << 31) - 1: lane 31 calls it too
#define NEGCTL_EXITED_LANES 5     // the last 16 threads leave before stage B's full-mask __syncwarp
#define NEGCTL_UNINIT 6           // stage A's read index loses its wrap: slots [B, 2B - 32), never written
#define NEGCTL_STATIC_ONCE 7      // `two` set only by the task whose tile starts at row 0
#define NEGCTL_OUT_OF_TILE 8      // inner tasks also write the neighbour's first row
#define NEGCTL_OUT_OF_TENSOR 9    // the last task also writes the row after the tensor's end
#define NEGCTL_HALO_READ 10       // + alpha * x[r + 1], clamped at the tensor's end, not the tile's

namespace mpk {

template <typename T>
__device__ void negctl_twice_task(const TaskView& v) {
    const int bug = static_cast<int>(v.iparam(0));
    const int64_t total_rows = v.iparam(1);
    const float alpha = static_cast<float>(v.fparam(0));
    const T* x = v.in<const T>(0);
    T* y = v.out<T>(0);
    const Tile2D xt = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));
    // the tile's first row in the tensor: grid.x splits rows of a row-major [rows, cols] tensor
    const int64_t row0 = v.out_tile(0).offset / (static_cast<int64_t>(sizeof(T)) * yt.row_stride);
    const bool last = row0 + yt.rows == total_rows;
    const int B = static_cast<int>(blockDim.x), t = static_cast<int>(threadIdx.x);
    // 2 * B slots: stage A and B use [0, B); NEGCTL_UNINIT reads [B, 2B - 32), which no thread writes
    float* stage = smem<float>(0, 2 * static_cast<size_t>(B));

    // Static shared memory outlives the task on its block (the persistent executor's worker block
    // runs task after task): a value set once by one task is stale garbage for a block that never ran it.
    __shared__ float two;
    if (t == 0 && (bug != NEGCTL_STATIC_ONCE || row0 == 0)) two = 2.0f;  // [static write]
    __syncthreads();

    int64_t rows = yt.rows;
    if ((bug == NEGCTL_OUT_OF_TILE && !last) || (bug == NEGCTL_OUT_OF_TENSOR && last)) ++rows;
    for (int64_t r = 0; r < rows; ++r) {
        // the extra row of the two write bugs: its input clamped to the tile, its output not
        const int64_t rx = r < xt.rows ? r : xt.rows - 1;
        const T* xr = x + rx * xt.row_stride;
        T* yr = y + r * yt.row_stride;
        for (int64_t c0 = 0; c0 < xt.cols; c0 += B) {
            const int64_t c = c0 + t;
            stage[t] = c < xt.cols ? to_float(xr[c * xt.col_stride]) : 0.0f;
            if (bug == NEGCTL_DIVERGENT_BARRIER) {
                if (t < 64) __syncthreads();  // [divergent barrier]
            } else if (bug != NEGCTL_SMEM_RACE) {
                __syncthreads();  // [stage A write-read barrier]
            }
            const int from = bug == NEGCTL_UNINIT ? t + B - 32 : (t + B - 32) % B;
            const float a = stage[from];  // [stage A read]
            __syncthreads();  // [stage A reuse barrier]

            if (bug == NEGCTL_EXITED_LANES && t >= B - 16) return;  // [early exit]
            stage[t] = a;
            if (bug == NEGCTL_SYNCWARP_MASK) {
                __syncwarp((1u << 31) - 1);  // [bad mask]
            } else if (bug != NEGCTL_WARP_RACE) {
                __syncwarp();  // [stage B write-read syncwarp]
            }
            const float b = stage[t ^ 1];  // [stage B read]
            __syncwarp();  // [stage B reuse syncwarp]

            const int64_t col = c0 + ((t ^ 1) + B - 32) % B;
            if (col < xt.cols) {
                float value = two * b;
                // a stencil halo clamped at the tensor's end: an inner task's last row reads the
                // first row of its neighbour's input tile
                if (bug == NEGCTL_HALO_READ && (rx + 1 < xt.rows || !last))
                    value += alpha * to_float(xr[xt.row_stride + col * xt.col_stride]);  // [halo read]
                yr[col * yt.col_stride] = from_float<T>(value);  // [store]
            }
        }
    }
}

}  // namespace mpk
