// linear.cuh: y = x @ W^T (+ residual) for one task's tile: fp32 accumulation, one rounding to T
// per output. CUDA device code for both backends (runtime/simt.h); linear_with_residual.cuh is
// the residual variant's entry point into the same kernel, splitk_linear.cuh the accumulating one
// (its store policy adds each sum into y atomically).
//
// Shapes (2-D tiles, any strides; tile2d in common.cuh):
//   in(0)  x [B, K]  the whole input rows of this task (the layer never splits K)
//   in(1)  W [n, K]  this task's rows of the [N, K] weight
//   out(0) y [B, n]  this task's columns of [B, N]: row stride N when column-split
//   (residual variant) in(2) r [B, n], added in fp32 before the rounding.
//
// Threads: a small-batch GEMV. Warp w of the block owns the column groups w, w + warps, ... of
// COLS = 4 consecutive output columns (W rows); the warp's 32 lanes split K. Batch rows go in
// chunks of 8, then 4, 2, 1 (B = 6: 4 + 2; B = 13: 8 + 4 + 1), each a compile-time size, so a
// lane holds chunk x COLS fp32 partial sums in registers and the inner loop is plain fp32
// multiply-adds. A last group past n repeats W row n - 1 and stores nothing for it.
// Loads: the vector path, when x and W have column stride 1 and every row starts 16-byte aligned
// (pointers and row strides, checked at run time): lane l loads 16 bytes (V = 16 / sizeof(T)
// elements: 4 fp32, 8 bf16/fp16) of each W row and each x row at k = 32 V j + V l, j = 0, 1, ...
// (a warp reads 512 contiguous bytes per row per step); the K mod V tail goes one element per
// lane (k = Kv + l, Kv = K - K mod V). Otherwise the scalar path: lane l reads k = l, l + 32, ...
// with the tiles' strides.
// Reduction, per column group: every lane writes its partials to its warp's shared-memory array
// red[32 outputs][33] (the pad makes both the writes and the reads conflict-free), __syncwarp,
// lane o < chunk x COLS sums the 32 partials of output o (b = o / COLS, column c0 + o % COLS),
// adds the residual, rounds once and stores; __syncwarp before the array is reused. So a column
// group costs 2 warp barriers and no shuffles; warps never wait for one another (no block barrier).
// Per lane, the four columns' partial sums of a batch row are one f32x4 (f32x4.cuh: four registers on a GPU,
// one SSE vector on the CPU, the same per-element arithmetic) and W's four 16-byte loads become V such
// vectors (columns_of); the lane prefetches its step after next (prefetch_hint: the CPU only).
// Summation order of y[b][j]:
//   p_l = lane l's partial: its k in increasing order (vector path: the V elements of each load
//         in order, then its tail element if any), starting from 0;
//   y   = round_T((((p_0 + p_1) + p_2) + ... + p_31) + r[b][j]).
// It depends on K, T and the path only: not on how N or B is split into tasks, not on the block
// size, not on the emulation's thread order (tests/csrc/test_kernels_linear.cpp checks the bits).
// nvcc contracts each multiply-add into an fma (one rounding, not two); g++ -std=c++17 does not:
// GPU and CPU bits may differ, both within the budget (K + 1) u_fp32 sum |x w| + u_T |y|.
// Shared memory: (blockDim.x / 32) x 32 x 33 floats at offset 0 of the dynamic shared memory
// (16.5 KiB for 128 threads, 33 KiB for 256).
// Other paths, the layer's choice (tensor_cores iparam, mirage/mpk/layers/linear.py): the tensor cores by
// mma.sync with cp.async staging (mma_linear.cuh), and on sm_90a TMA + wgmma (wgmma_linear.cuh).
// Test: tests/csrc/test_kernels_linear.cpp (against fp64 loops; bits across seeds, block sizes
//       and splits), tests/runtime_python/linear/ and tests/runtime_python/test_mode/test_qwen3_mlp.py
// Run:  bash tests/csrc/run_kernel_tests.sh test_kernels_linear
#pragma once
#include <type_traits>
#include "common.cuh"
#include "f32x4.cuh"
#include "mma_linear.cuh"
#include "wgmma_linear.cuh"

namespace mpk {

// ---- kernel
namespace linear_detail {

constexpr int COLS = 4;                       // output columns (W rows) per warp per group
static_assert(COLS == 4, "a lane's partial sums of one batch row are one f32x4 (f32x4.cuh)");
constexpr int RED_STRIDE = 33;                // floats per output in the reduction array
constexpr int RED_FLOATS = 32 * RED_STRIDE;   // per warp: up to 32 outputs x 32 lanes, padded
// Shared memory per warp on either path (a fused kernel keeps its own data after warps x this).
constexpr size_t SMEM_PER_WARP = RED_FLOATS * sizeof(float);
static_assert(mma_linear_detail::WARP_BYTES <= SMEM_PER_WARP, "the tensor-core path fits the SIMT path's need");
static_assert(wgmma_linear_detail::SMEM_BYTES <= wgmma_linear_detail::THREADS / 32 * SMEM_PER_WARP,
              "the Hopper path fits the SIMT path's need at its 256 threads");

// How x's elements become the GEMM's fp32 operand, by row b and column k of x's tile: PlainX reads
// them; a fused variant computes them (silu_mul_linear_with_residual.cuh from two elements,
// rmsnorm_linear.cuh from an element, its row's 1/rms and a norm weight). load<N>: the N elements
// from k (the vector path: k a multiple of N, a 16-byte-aligned row of unit column stride); at: one.
template <typename T> struct PlainX {
    const T* x;
    Tile2D xt;
    template <int N> MPK_DEVICE MPK_INLINE void load(int64_t b, int64_t k, float* out) const {
        load_floats<T, N>(x + b * xt.row_stride + k, out);
    }
    MPK_DEVICE MPK_INLINE float at(int64_t b, int64_t k) const {
        return to_float(x[b * xt.row_stride + k * xt.col_stride]);
    }
};

// How the fp32 sum of output (b, col) reaches y: Store rounds it once to T and stores it at y's tile;
// splitk_linear.cuh adds it into y atomically instead (its own rounding per add); moe_w13_linear.cuh
// stores row b at its token's row and slot.
template <typename T> struct Store {
    T* y;
    Tile2D yt;
    MPK_DEVICE MPK_INLINE void operator()(int64_t b, int64_t col, float sum) const {
        y[b * yt.row_stride + col * yt.col_stride] = from_float<T>(sum);
    }
};

// One chunk of ROWS batch rows from row b0, every column of the tile (W's rows); x [B, k_len].
template <typename T, int ROWS, bool VEC, typename XS, typename ST>
MPK_DEVICE void rows_chunk(int64_t b0, int64_t k_len, const T* w, const Tile2D& wt, const T* r, const Tile2D& rt,
                           float* red, const XS& xs, const ST& st) {
    constexpr int V = PACK16<T>;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const int64_t n = wt.rows;
    const int64_t k_vec = VEC ? k_len / V * V : 0;  // [0, k_vec): 16-byte loads
    for (int64_t c0 = int64_t(warp) * COLS; c0 < n; c0 += int64_t(warps) * COLS) {
        const T* wr[COLS];
        MPK_UNROLL
        for (int c = 0; c < COLS; ++c) wr[c] = w + (c0 + c < n ? c0 + c : n - 1) * wt.row_stride;
        f32x4 acc[ROWS];  // [batch row]: the four columns' partial sums
        MPK_UNROLL
        for (int b = 0; b < ROWS; ++b) acc[b] = make_f32x4(0.0f, 0.0f, 0.0f, 0.0f);

        if constexpr (VEC) {
            for (int64_t k = int64_t(lane) * V; k < k_vec; k += 32 * V) {
                f32x4 wf[V];  // [element]: the four columns' W at k + element
                MPK_UNROLL
                for (int c = 0; c < COLS; ++c) prefetch_hint(wr[c] + k + 2 * 32 * V);  // this lane's step after next
                columns_of<T, V>(wr, k, wf);
                // x one row at a time: the chunk's ROWS x V x's at once held 64 more registers, and at 255
                // the MoE linears spilled inside the persistent kernel on sm_90a / sm_100a
                // (tests/unit/test_nvcc.py). Each sum's order is the one below either way.
                MPK_UNROLL
                for (int b = 0; b < ROWS; ++b) {
                    float xf[V];
                    xs.template load<V>(b0 + b, k, xf);
                    MPK_UNROLL
                    for (int i = 0; i < V; ++i) acc[b] += xf[i] * wf[i];
                }
            }
        }
        // the scalar path, or the vector path's tail (fewer than V elements)
        for (int64_t k = k_vec + lane; k < k_len; k += 32) {
            float wf[COLS];
            MPK_UNROLL
            for (int c = 0; c < COLS; ++c) wf[c] = to_float(wr[c][k * wt.col_stride]);
            MPK_UNROLL
            for (int b = 0; b < ROWS; ++b) {
                const float xv = xs.at(b0 + b, k);
                for (int c = 0; c < COLS; ++c) acc[b][c] += xv * wf[c];
            }
        }

        MPK_UNROLL
        for (int b = 0; b < ROWS; ++b)
            MPK_UNROLL
            for (int c = 0; c < COLS; ++c) red[(b * COLS + c) * RED_STRIDE + lane] = acc[b][c];
        __syncwarp();
        if (lane < ROWS * COLS && c0 + lane % COLS < n) {
            const int64_t b = b0 + lane / COLS, col = c0 + lane % COLS;
            const float* p = red + lane * RED_STRIDE;
            float sum = p[0];
            for (int l = 1; l < 32; ++l) sum += p[l];  // lane order
            if (r) sum += to_float(r[b * rt.row_stride + col * rt.col_stride]);
            st(b, col, sum);
        }
        __syncwarp();  // every lane has read red before the next group overwrites it
    }
}

template <typename T, bool VEC, typename XS, typename ST>
MPK_DEVICE void all_rows(int64_t rows, int64_t k_len, const T* w, const Tile2D& wt, const T* r, const Tile2D& rt,
                         float* red, const XS& xs, const ST& st) {
    // Chunks of 8, then 4, 2, 1 rows; every thread takes the same branches (uniform).
    for (int64_t b0 = 0; b0 < rows;) {
        const int64_t left = rows - b0;
        if (left >= 8) {
            rows_chunk<T, 8, VEC>(b0, k_len, w, wt, r, rt, red, xs, st);
            b0 += 8;
        } else if (left >= 4) {
            rows_chunk<T, 4, VEC>(b0, k_len, w, wt, r, rt, red, xs, st);
            b0 += 4;
        } else if (left >= 2) {
            rows_chunk<T, 2, VEC>(b0, k_len, w, wt, r, rt, red, xs, st);
            b0 += 2;
        } else {
            rows_chunk<T, 1, VEC>(b0, k_len, w, wt, r, rt, red, xs, st);
            b0 += 1;
        }
    }
}

// Every row of a 2-D tile starts 16-byte aligned and its elements are contiguous.
// (common.cuh's packable also wants cols % V == 0; here the K mod V tail goes element-wise.)
template <typename T> MPK_DEVICE MPK_INLINE bool rows_aligned16(const T* p, const Tile2D& t) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0 && t.col_stride == 1 &&
           (t.rows <= 1 || t.row_stride % PACK16<T> == 0);
}

}  // namespace linear_detail

// y = x @ W^T (+ residual [rows, n] when `residual` is not null) for x [rows, k_len] and W's tile [n, K]
// (n = wt.rows); x's elements as xs gives them; vec: x's rows allow the vector path (the caller checks
// every pointer xs reads through: PlainX's x rows, rows_aligned16); st: how output (b, col)'s fp32 sum
// reaches y (Store: rounded once and stored); tensor_cores: the layer asks for the tensor-core path
// (mma_linear.cuh), taken for bf16 / fp16 when x's rows (vec) and W's are 16-byte aligned and contiguous
// with K % 8 == 0.
// Shared memory: [0, warps x linear_detail::SMEM_PER_WARP) of the dynamic shared memory.
template <typename T, typename XS, typename ST>
MPK_DEVICE void linear_rows(int64_t rows, int64_t k_len, const T* w, const Tile2D& wt, const T* residual,
                            const Tile2D& rt, const XS& xs, bool vec, const ST& st, bool tensor_cores = false) {
    using namespace linear_detail;
    if constexpr (sizeof(T) == 2) {
        if (tensor_cores && vec && rows_aligned16(w, wt) && k_len % 8 == 0) {
            mma_linear_rows<T, std::is_same<XS, PlainX<T>>::value>(rows, k_len, w, wt, residual, rt, xs, st);
            return;
        }
    }
    float* red = smem<float>(size_t(threadIdx.x / 32) * RED_FLOATS * sizeof(float), RED_FLOATS);
    if (vec && rows_aligned16(w, wt))
        all_rows<T, true>(rows, k_len, w, wt, residual, rt, red, xs, st);
    else
        all_rows<T, false>(rows, k_len, w, wt, residual, rt, red, xs, st);
}

// The kernel of linear_task and linear_with_residual_task. Every thread of the block calls it. path: the
// layer's tensor_cores (mirage/mpk/layers/linear.py): 0 SIMT, 1 mma.sync (mma_linear.cuh), 2 TMA + wgmma
// (wgmma_linear.cuh, through the tensor maps of x's and W's tiles).
template <typename T>
MPK_DEVICE void linear_tile(const TaskView& v, const T* residual, const Tile2D& rt, int path) {
    const Tile2D xt = tile2d(v.in_tile(0)), wt = tile2d(v.in_tile(1)), yt = tile2d(v.out_tile(0));
    const T* x = v.in<const T>(0);
    if constexpr (sizeof(T) == 2) {
        if (path == 2) {
            wgmma_linear_rows<T>(v, yt.rows, xt.cols, wt.rows, residual, rt, linear_detail::Store<T>{v.out<T>(0), yt});
            return;
        }
    }
    linear_rows<T>(yt.rows, xt.cols, v.in<const T>(1), wt, residual, rt, linear_detail::PlainX<T>{x, xt},
                   linear_detail::rows_aligned16(x, xt), linear_detail::Store<T>{v.out<T>(0), yt}, path != 0);
}

// ---- dispatch
// iparam(0): the path (linear_tile).
template <typename T> MPK_DEVICE void linear_task(const TaskView& v) {
    linear_tile<T>(v, nullptr, Tile2D{}, int(v.iparam(0)));
}

}  // namespace mpk
