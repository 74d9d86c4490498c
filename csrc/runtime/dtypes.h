// dtypes.h: the element types of task kernels and their conversions to and from fp32.
//
// Types: bf16_t and fp16_t (16-bit storage; plain structs on the host, CUDA's
// __nv_bfloat16 / __half under nvcc), fp8_e4m3_t (OCP E4M3, torch.float8_e4m3fn: 1 sign,
// 4 exponent bits with bias 7, 3 mantissa bits, no inf, NaN = S.1111.111; a struct on the
// host, __nv_fp8_e4m3 under nvcc), and float, int32_t, int64_t as they are.
// Kernels load with to_float, do fp32 math, and round once on store:
//     float y = f(to_float(x[i]));  out[i] = from_float<T>(y);
// from_float rounds to nearest, ties to even, like torch's CPU tensor
// .to(torch.bfloat16) / .to(torch.float16), bit for bit: fp16 subnormals, overflow to
// inf (|f| >= 65520 for fp16), and NaN as torch's vectorized (AVX2/AVX-512) path gives it:
//   bf16: every NaN -> 0xFFFF (c10's scalar path gives 0x7FC0; torch disagrees with itself)
//   fp16: sign | 0x7E00 | top 10 payload bits (F16C vcvtps2ph); fp16 -> fp32 sets the quiet bit.
// fp8_e4m3: ties to even as well, but it SATURATES as CUDA's __nv_fp8_e4m3(float) does
// (__NV_SATFINITE): |f| >= 448 (inf too) -> +-448, NaN -> 0x7F. torch's cast gives NaN from
// 480 up; the two agree bit for bit below 480 (a quantizer clamps to +-448 first).
// Under nvcc the CUDA intrinsics are used; they agree except for NaN bits.
// Test: tests/csrc/test_kernels_dtypes.cpp; run: bash tests/csrc/run_kernel_tests.sh test_kernels_dtypes
#pragma once
#include <stdint.h>
#include <string.h>
#include "platform.h"
#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

namespace mpk {

#if defined(__CUDACC__)
using bf16_t = __nv_bfloat16;
using fp16_t = __half;
using fp8_e4m3_t = __nv_fp8_e4m3;
#else
struct bf16_t { uint16_t bits; };  // fp32's top 16 bits: 1 sign, 8 exponent, 7 mantissa
struct fp16_t { uint16_t bits; };  // IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa
struct fp8_e4m3_t { uint8_t bits; };  // OCP E4M3: 1 sign, 4 exponent (bias 7), 3 mantissa
static_assert(sizeof(bf16_t) == 2 && sizeof(fp16_t) == 2 && sizeof(fp8_e4m3_t) == 1, "storage types");
#endif

MPK_HOST_DEVICE MPK_INLINE float to_float(float x) { return x; }
MPK_HOST_DEVICE MPK_INLINE float to_float(int32_t x) { return static_cast<float>(x); }
MPK_HOST_DEVICE MPK_INLINE float to_float(int64_t x) { return static_cast<float>(x); }

template <class T> MPK_HOST_DEVICE T from_float(float f);
template <> MPK_HOST_DEVICE MPK_INLINE float from_float<float>(float f) { return f; }

#if defined(__CUDACC__)
MPK_HOST_DEVICE MPK_INLINE float to_float(bf16_t x) { return __bfloat162float(x); }
MPK_HOST_DEVICE MPK_INLINE float to_float(fp16_t x) { return __half2float(x); }
template <> MPK_HOST_DEVICE MPK_INLINE bf16_t from_float<bf16_t>(float f) { return __float2bfloat16_rn(f); }
template <> MPK_HOST_DEVICE MPK_INLINE fp16_t from_float<fp16_t>(float f) { return __float2half_rn(f); }
MPK_HOST_DEVICE MPK_INLINE float to_float(fp8_e4m3_t x) { return static_cast<float>(x); }
template <> MPK_HOST_DEVICE MPK_INLINE fp8_e4m3_t from_float<fp8_e4m3_t>(float f) { return fp8_e4m3_t(f); }
#else
inline uint32_t float_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// A narrow format's subnormal code of the normal fp32 magnitude a (bits): mant24 * 2^(exp - bias)
// rounded to an integer, ties to even, with shift = bias - exp in 1..31 (the caller's range).
inline uint32_t subnormal_even(uint32_t a, uint32_t bias) {
    const uint32_t mant24 = (a & 0x7FFFFFu) | 0x800000u, shift = bias - (a >> 23);
    const uint32_t rem = mant24 & ((1u << shift) - 1), half = 1u << (shift - 1);
    const uint32_t q = mant24 >> shift;
    return q + ((rem > half || (rem == half && (q & 1))) ? 1 : 0);
}

inline float to_float(bf16_t x) { return bits_float(static_cast<uint32_t>(x.bits) << 16); }

inline float to_float(fp16_t x) {
    const uint32_t sign = static_cast<uint32_t>(x.bits & 0x8000) << 16;
    const uint32_t exp = (x.bits >> 10) & 0x1F, mant = x.bits & 0x3FF;
    if (exp == 0x1F)  // inf, or NaN with its payload kept and the quiet bit set
        return bits_float(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));
    if (exp == 0) {   // zero or subnormal: mant * 2^-24, exact in fp32
        const float v = static_cast<float>(mant) * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 112) << 23) | (mant << 13));  // rebias 15 -> 127
}

template <> inline bf16_t from_float<bf16_t>(float f) {
    const uint32_t u = float_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return bf16_t{0xFFFF};
    // Round the low 16 bits to nearest even; a carry into the exponent is correct,
    // up to inf for |f| >= bf16 max + half an ulp.
    return bf16_t{static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1)) >> 16)};
}

template <> inline fp16_t from_float<fp16_t>(float f) {
    const uint32_t u = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return fp16_t{static_cast<uint16_t>(sign | 0x7E00 | ((a >> 13) & 0x3FF))};
    if (a >= 0x477FF000u) return fp16_t{static_cast<uint16_t>(sign | 0x7C00)};  // >= 65520: inf
    if (a >= 0x38800000u) {  // normal half (>= 2^-14): rebias 127 -> 15, round 13 bits to even
        a -= 112u << 23;
        return fp16_t{static_cast<uint16_t>(sign | ((a + 0xFFFu + ((a >> 13) & 1)) >> 13))};
    }
    if (a <= 0x33000000u) return fp16_t{sign};  // |f| <= 2^-25: the tie goes to even, zero
    // Subnormal half: |f| / 2^-24 = mant24 * 2^(exp - 126), a shift of 14..24 (a carry into 2^-14 is right).
    return fp16_t{static_cast<uint16_t>(sign | subnormal_even(a, 126))};
}

inline float to_float(fp8_e4m3_t x) {
    const uint32_t sign = static_cast<uint32_t>(x.bits & 0x80) << 24;
    const uint32_t exp = (x.bits >> 3) & 0xF, mant = x.bits & 0x7;
    if (exp == 0xF && mant == 0x7) return bits_float(sign | 0x7FC00000u);  // the only NaN
    if (exp == 0) {   // zero or subnormal: mant * 2^-9
        const float v = static_cast<float>(mant) * 0x1p-9f;
        return sign ? -v : v;
    }
    return bits_float(sign | ((exp + 120) << 23) | (mant << 20));  // rebias 7 -> 127
}

template <> inline fp8_e4m3_t from_float<fp8_e4m3_t>(float f) {
    const uint32_t u = float_bits(f);
    const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return fp8_e4m3_t{0x7F};
    if (a >= 0x43E00000u) return fp8_e4m3_t{static_cast<uint8_t>(sign | 0x7E)};  // >= 448, inf: saturate
    if (a >= 0x3C800000u) {  // normal (>= 2^-6): rebias 127 -> 7, round 20 bits to even (448 at most)
        a -= 120u << 23;
        return fp8_e4m3_t{static_cast<uint8_t>(sign | ((a + 0x7FFFFu + ((a >> 20) & 1)) >> 20))};
    }
    if (a <= 0x3A800000u) return fp8_e4m3_t{sign};  // |f| <= 2^-10: the tie goes to even, zero
    // Subnormal: |f| / 2^-9 = mant24 * 2^(exp - 141), a shift of 21..24 (a carry into 2^-6 is right).
    return fp8_e4m3_t{static_cast<uint8_t>(sign | subnormal_even(a, 141))};
}
#endif

}  // namespace mpk
