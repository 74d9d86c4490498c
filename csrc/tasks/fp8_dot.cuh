// fp8_dot.cuh: the block-scaled e4m3 dot product the fp8 GEMMs share (moe_w13_fp8.cuh, linear_fp8.cuh),
// and the UE8M0 scale values they read. CUDA device code for both backends (runtime/simt.h).
//   dot = sum_g scale(g) sum_{k in block g} x[k] w[k],  blocks of G codes (64 or 128), scale(g) the
//   product of the two operands' block scales, each a power of two (UE8M0)
// Exactness: a product of two e4m3 values (4-bit significands) is exact in fp32, and so is a multiply by
// a power of two (until it underflows below 2^-126, which normal data does not reach): the only roundings
// are the fp32 additions, K / 32 per lane (its G / 32 products of each block, then the block into its
// accumulator) and 31 across the lanes (warp_sum), so a caller's budget is linear.cuh's, (K + 1) u_fp32
// sum |x~ w~| + u_T |y| with x~ = q 2^(c - 127). Summation order: depends on K and G only.
// Threads: one warp; lane l takes k = G g + l + 32 i, i < G / 32 (a warp reads 32 consecutive codes per
// step). No shared memory, no barrier but the warp's shuffles.
// Test: tests/runtime_python/moe_w13_fp8/, tests/runtime_python/linear_fp8/
#pragma once
#include "common.cuh"

namespace mpk {
namespace fp8 {

// 2^(code - 127), UE8M0's value of a one-byte code; 0 is 2^-127 (subnormal), 0xFF NaN.
MPK_DEVICE MPK_INLINE float ue8m0_value(unsigned code) {
    if (code == 0xFFu) return __uint_as_float(0x7FC00000u);
    return code == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(code << 23);
}

// A float32 scale as the block-scaled MMA reads it (MPK's fp8_group_gemm_sm100.cuh: (bits >> 23) & 0xFF):
// the power of two of its exponent field, the power of two at or below it.
MPK_DEVICE MPK_INLINE float ue8m0(float scale) { return ue8m0_value((__float_as_uint(scale) >> 23) & 0xFFu); }

// Code i of a packed UE8M0 word (four codes, little-endian: byte i).
MPK_DEVICE MPK_INLINE unsigned ue8m0_byte(uint32_t word, int64_t i) { return (word >> (8 * i)) & 0xFFu; }

// The warp's dot product of x and w (K = groups x group codes, strides x_col and w_col), block g weighted
// by scale(g); every lane returns it. All 32 lanes call it.
template <typename S>
MPK_DEVICE float block_dot(const fp8_e4m3_t* x, int64_t x_col, const fp8_e4m3_t* w, int64_t w_col, int64_t groups,
                           int64_t group, const S& scale) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    const int64_t per_lane = group / 32;
    float acc = 0.0f;
    for (int64_t g = 0; g < groups; ++g) {
        float p = 0.0f;
        // a constant trip count, guarded (quantize_fp8.cuh: no run-time-indexed local array)
        MPK_UNROLL
        for (int i = 0; i < 4; ++i) {
            if (i >= per_lane) break;
            const int64_t k = g * group + lane + 32 * i;
            p += to_float(x[k * x_col]) * to_float(w[k * w_col]);
        }
        acc += p * scale(g);
    }
    return warp_sum(acc);
}

}  // namespace fp8
}  // namespace mpk
