// mma_linear.cuh: y = x @ W^T (+ residual) for 16-bit T on the tensor cores: mma.sync.m16n8k16 with
// ldmatrix operands from cp.async-staged, double-buffered slices (runtime/ptx.h). linear.cuh's
// linear_rows takes this path when its layer asks for it (the layer's tensor_cores iparam: bf16 / fp16
// with a batch of at least 16 rows, mirage/mpk/layers/linear.py) and x's and W's rows are 16-byte aligned
// and contiguous with K % 8 == 0; otherwise its SIMT path. x's elements come as linear_rows' XS gives
// them: plain ones by cp.async, computed ones (silu_mul_linear_with_residual's h, rounded to T as that
// layer states) stored by the lanes; either way x's slice is in T in shared memory for ldmatrix.
//
// The product is computed transposed, y^T = W x^T, so that the batch is the mma's N = 8 and W's rows
// its M = 16: A = 16 W rows x 16 k (row-major: W as stored), B = x^T (column-major: x's rows as stored),
// D = 16 output columns x 8 batch rows, fp32.
// Threads: warp w owns the groups of 16 output columns w, w + warps, ...; for each group and each pass
// of up to 16 batch rows (two mma N-chunks of 8, sharing W's fragments) it streams K in slices of 32
// through its own two staging buffers: per slice 16 W rows and 8 or 16 x rows of 64 bytes, one 16-byte
// cp.async.cg per chunk (rows past n or B and K past its end zero-filled with src-size 0), then per
// N-chunk one ldmatrix.x4 of x (8 rows x 32 k) and per k16 step one ldmatrix.x4 of W and one mma per
// N-chunk. The next slice's copies are in flight while this one is multiplied (commit, wait_group 1,
// __syncwarp). Warps never wait for one another (no block barrier).
// Shared memory: per warp 2 stages x 32 rows x 64 bytes, 4096 bytes at warp x 4096: within the 4224 per
// warp of linear_rows' SIMT path, so a layer's shared-memory need is the same on both paths. No pad:
// the 16-byte chunk c of staged row r sits at chunk c ^ ((r >> 1) & 3) of the row (an XOR swizzle), so
// the 8 rows one ldmatrix matrix reads fall in 8 distinct 16-byte bank groups.
// Summation order of y[b][j]: acc = 0; per k16 step in increasing k, acc = mma(acc + the step's 16
// products), the products in increasing k in the emulation (runtime/simt_cpu_ptx.h), in the tensor
// core's own order and precision on a GPU; then + r[b][j] in fp32 and one rounding to T. It depends on
// K and T only: not on the split into tasks, the block size, the batch pass or the schedule.
// Budget: (2K + 1) u_fp32 sum |x w| + u_T |y| holds for any order of the adds and for a tensor core that
// truncates them (testing.tol_linear counts K twice on this path: docs/simt.md).
// Test: tests/csrc/test_kernels_linear.cpp (bits across seeds, block sizes, splits; both paths), the
//       linear family's tests under tests/runtime_python/ (their batch-16+ cases), tests/unit/test_ptx_gemm.py.
#pragma once
#include <type_traits>
#include "../runtime/ptx.h"
#include "common.cuh"

namespace mpk {
namespace mma_linear_detail {

constexpr int KS = 32;                        // K elements per staged slice: 4 chunks of 16 bytes per row
constexpr int ROW = KS * 2;                   // bytes per staged row (no pad: swizzled)
constexpr int WROWS = 16, XROWS = 16;         // W rows (the mma's M), x rows (two N-chunks of 8)
constexpr int STAGE = (WROWS + XROWS) * ROW;  // 2048 bytes
constexpr int WARP_BYTES = 2 * STAGE;         // two stages per warp

// Where 16-byte chunk c (0..3) of staged row r lives (the swizzle above).
MPK_DEVICE MPK_INLINE int chunk_at(int r, int c) { return r * ROW + 16 * (c ^ ((r >> 1) & 3)); }

// acc += A B on the tensor cores for 16-bit T: m16n8k16 and m16n8k8 (paged_attention.cuh's P V).
template <typename T>
MPK_DEVICE MPK_INLINE void mma16(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    if constexpr (std::is_same<T, bf16_t>::value) ptx::mma_m16n8k16_row_col_f32_bf16_bf16_f32(acc, a, b, acc);
    else ptx::mma_m16n8k16_row_col_f32_f16_f16_f32(acc, a, b, acc);
}
template <typename T>
MPK_DEVICE MPK_INLINE void mma8(float (&acc)[4], const uint32_t (&a)[2], const uint32_t (&b)[1]) {
    if constexpr (std::is_same<T, bf16_t>::value) ptx::mma_m16n8k8_row_col_f32_bf16_bf16_f32(acc, a, b, acc);
    else ptx::mma_m16n8k8_row_col_f32_f16_f16_f32(acc, a, b, acc);
}

// Slice [k0, k0 + KS) of W rows [c0, c0 + 16) and of x rows [b0, b0 + 8 chunks) into `stage`: 64 chunks of
// W, then 32 per x N-chunk; lane l fills chunks l, l + 32, ... W's by cp.async; x's by cp.async when its
// elements are plain (PLAIN), else computed by xs (a fused producer: 8 elements as fp32, rounded to T,
// stored: silu_mul_linear_with_residual.cuh's h).
template <typename T, bool PLAIN, typename XS>
MPK_DEVICE MPK_INLINE void stage_slice(char* stage, const T* w, const Tile2D& wt, int64_t c0, int64_t n, const XS& xs,
                                       int64_t b0, int64_t rows, int chunks, int64_t k0, int64_t k_len) {
    for (int i = threadIdx.x % 32; i < 64 + 32 * chunks; i += 32) {
        const bool is_w = i < 64;
        const int r = (is_w ? i : i - 64) / 4, c = i % 4;
        const int64_t k = k0 + 8 * c;
        const bool in = k < k_len && (is_w ? c0 + r < n : b0 + r < rows);
        char* dst = stage + chunk_at(is_w ? r : WROWS + r, c);
        if (is_w) {
            ptx::cp_async_cg_shared_global<16>(dst, in ? w + (c0 + r) * wt.row_stride + k : w, in ? 16u : 0u);
        } else if constexpr (PLAIN) {
            const T* x = xs.x;
            ptx::cp_async_cg_shared_global<16>(dst, in ? x + (b0 + r) * xs.xt.row_stride + k : x, in ? 16u : 0u);
        } else {
            float f[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
            if (in) xs.template load<8>(b0 + r, k, f);
            Pack<T, 8> q;
            MPK_UNROLL
            for (int e = 0; e < 8; ++e) q.e[e] = from_float<T>(f[e]);
            store_pack<T, 8>(reinterpret_cast<T*>(dst), q);
        }
    }
}

}  // namespace mma_linear_detail

// The tensor-core path of linear_rows (linear.cuh): the same arguments; PLAIN: xs reads x's elements as
// they are (linear.cuh's PlainX: its x and xt), so x is copied by cp.async.
template <typename T, bool PLAIN, typename XS, typename ST>
MPK_DEVICE void mma_linear_rows(int64_t rows, int64_t k_len, const T* w, const Tile2D& wt, const T* residual,
                                const Tile2D& rt, const XS& xs, const ST& st) {
    using namespace mma_linear_detail;
    static_assert(sizeof(T) == 2, "the tensor-core path takes bf16 or fp16");
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    char* bufs = smem<char>(size_t(warp) * WARP_BYTES, WARP_BYTES);
    const int64_t n = wt.rows;
    const int slices = int((k_len + KS - 1) / KS);
    // this lane's ldmatrix rows (ptx.h: lane 8 j + r gives row r of matrix j) and 16-byte chunks
    const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_chunk = lane >> 4;  // W: rows 0-15, k 0-7 | 8-15
    const int b_row = WROWS + (lane & 7), b_chunk = lane >> 3;                    // x: rows 0-7, k chunks 0-3
    for (int64_t c0 = int64_t(warp) * WROWS; c0 < n; c0 += int64_t(warps) * WROWS) {
        for (int64_t b0 = 0; b0 < rows; b0 += XROWS) {
            const int chunks = rows - b0 > 8 ? 2 : 1;
            float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
            stage_slice<T, PLAIN>(bufs, w, wt, c0, n, xs, b0, rows, chunks, 0, k_len);
            ptx::cp_async_commit_group();
            for (int s = 0; s < slices; ++s) {
                if (s + 1 < slices) {
                    stage_slice<T, PLAIN>(bufs + ((s + 1) & 1) * STAGE, w, wt, c0, n, xs, b0, rows, chunks,
                                          int64_t(s + 1) * KS, k_len);
                    ptx::cp_async_commit_group();
                    ptx::cp_async_wait_group<1>();  // slice s has landed, s + 1 may be in flight
                } else {
                    ptx::cp_async_wait_group<0>();
                }
                __syncwarp();  // every lane's copies (and stores) of slice s are visible to the warp
                const char* sg = bufs + (s & 1) * STAGE;
                uint32_t xb[2][4];  // per N-chunk: x's 8 rows x 32 k, registers 2j, 2j + 1 = B of k16 step j
                for (int ch = 0; ch < chunks; ++ch)
                    ptx::ldmatrix_m8n8_x4_shared_b16(xb[ch], sg + chunk_at(b_row + 8 * ch, b_chunk));
                MPK_UNROLL
                for (int j = 0; j < KS / 16; ++j) {
                    uint32_t a[4];
                    ptx::ldmatrix_m8n8_x4_shared_b16(a, sg + chunk_at(a_row, 2 * j + a_chunk));
                    for (int ch = 0; ch < chunks; ++ch) {
                        const uint32_t b[2] = {xb[ch][2 * j], xb[ch][2 * j + 1]};
                        mma16<T>(acc[ch], a, b);
                    }
                }
                __syncwarp();  // every lane has read stage s & 1 before slice s + 2 is copied into it
            }
            // D of N-chunk ch: rows are output columns c0 + g (+ 8), columns batch rows b0 + 8 ch + 2t (+ 1)
            const int g = lane >> 2, t = lane & 3;
            for (int ch = 0; ch < chunks; ++ch)
                MPK_UNROLL
                for (int i = 0; i < 4; ++i) {
                    const int64_t col = c0 + g + 8 * (i >> 1), b = b0 + 8 * ch + 2 * t + (i & 1);
                    if (col >= n || b >= rows) continue;
                    float sum = acc[ch][i];
                    if (residual) sum += to_float(residual[b * rt.row_stride + col * rt.col_stride]);
                    st(b, col, sum);
                }
        }
    }
}

}  // namespace mpk
