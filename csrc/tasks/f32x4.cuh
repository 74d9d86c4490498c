// f32x4.cuh: four fp32 values that one thread adds and multiplies element by element, and the load that
// fills them from four rows of a 16-bit or fp32 tile (the SIMT GEMV's four output columns,
// csrc/tasks/linear.cuh).
//
// Why a type: the GEMV's lane keeps, per batch row, the partial sums of four output columns and adds
// x[b][k] * (w_0[k], w_1[k], w_2[k], w_3[k]) into them. On a GPU these are four registers and nvcc
// schedules the four multiply-adds as it likes. On the CPU the emulation runs one lane at a time, and
// g++ -O2 turned the scalar form into scalar loads, one conversion per element and accumulators on the
// stack (about 3.7 instructions per multiply-add; benchmarks/gemv_rate.cpp). As a GCC vector the same
// four operations are one mulps and one addps on the four columns.
//
// Semantics, the same on both backends: every element is its own fp32 computation, in the order the
// kernel writes (a += x * w is a rounded product, then a rounded sum, per element; nvcc may contract the
// pair into one fma, as it does for scalars). columns_of only moves and widens values exactly (bf16 and
// fp16 to fp32 are exact), so no result depends on which form ran.
#pragma once
#include "common.cuh"
#if !defined(__CUDACC__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace mpk {

#if defined(__CUDACC__)
struct f32x4 {
    float e[4];
    MPK_DEVICE MPK_INLINE float& operator[](int i) { return e[i]; }
    MPK_DEVICE MPK_INLINE float operator[](int i) const { return e[i]; }
};
MPK_DEVICE MPK_INLINE f32x4 operator*(float a, const f32x4& b) {
    return f32x4{{a * b.e[0], a * b.e[1], a * b.e[2], a * b.e[3]}};
}
MPK_DEVICE MPK_INLINE f32x4& operator+=(f32x4& a, const f32x4& b) {
    a.e[0] += b.e[0], a.e[1] += b.e[1], a.e[2] += b.e[2], a.e[3] += b.e[3];
    return a;
}
MPK_DEVICE MPK_INLINE f32x4 make_f32x4(float a, float b, float c, float d) { return f32x4{{a, b, c, d}}; }
#else
typedef float f32x4 __attribute__((vector_size(16)));   // GCC's and Clang's: a * v, v += w, v[i]
inline f32x4 make_f32x4(float a, float b, float c, float d) { return f32x4{a, b, c, d}; }
#endif

// out[i] = p[i] as fp32 for i < N (N * sizeof(T) = 16 bytes, p 16-byte aligned): one row's pack, widened.
template <typename T, int N> MPK_DEVICE MPK_INLINE void load_floats(const T* p, float* out) {
    const Pack<T, N> q = load_pack<T, N>(p);
    MPK_UNROLL
    for (int i = 0; i < N; ++i) out[i] = to_float(q.e[i]);
}

// out[i] = (row0[i], row1[i], row2[i], row3[i]) as fp32 for i < N: four rows' N consecutive elements
// (N * sizeof(T) = 16 bytes, each row 16-byte aligned), transposed. The generic form is the definition;
// the CPU's SSE2 forms below are the same values.
template <typename T, int N>
MPK_DEVICE MPK_INLINE void columns_of(const T* const (&row)[4], int64_t k, f32x4 (&out)[N]) {
    Pack<T, N> q[4];
    MPK_UNROLL
    for (int c = 0; c < 4; ++c) q[c] = load_pack<T, N>(row[c] + k);   // one 16-byte load per row
    MPK_UNROLL
    for (int i = 0; i < N; ++i)
        out[i] = make_f32x4(to_float(q[0].e[i]), to_float(q[1].e[i]), to_float(q[2].e[i]), to_float(q[3].e[i]));
}

#if !defined(__CUDACC__) && defined(__SSE2__)
// The 4 x 4 transpose of rows a, b, c, d (the unpack network of _MM_TRANSPOSE4_PS).
inline void transpose4(__m128& a, __m128& b, __m128& c, __m128& d) {
    const __m128 t0 = _mm_unpacklo_ps(a, b), t1 = _mm_unpacklo_ps(c, d);
    const __m128 t2 = _mm_unpackhi_ps(a, b), t3 = _mm_unpackhi_ps(c, d);
    a = _mm_movelh_ps(t0, t1), b = _mm_movehl_ps(t1, t0);
    c = _mm_movelh_ps(t2, t3), d = _mm_movehl_ps(t3, t2);
}

template <> inline void columns_of<float, 4>(const float* const (&row)[4], int64_t k, f32x4 (&out)[4]) {
    __m128 a = _mm_load_ps(row[0] + k), b = _mm_load_ps(row[1] + k);
    __m128 c = _mm_load_ps(row[2] + k), d = _mm_load_ps(row[3] + k);
    transpose4(a, b, c, d);
    out[0] = f32x4(a), out[1] = f32x4(b), out[2] = f32x4(c), out[3] = f32x4(d);
}

// bf16 is fp32's top half: interleaving zeros below each 16-bit element widens it exactly. lo gets
// elements 0-3 of the pack, hi 4-7.
inline void widen_bf16(const bf16_t* p, __m128& lo, __m128& hi) {
    const __m128i q = _mm_load_si128(reinterpret_cast<const __m128i*>(p));
    lo = _mm_castsi128_ps(_mm_unpacklo_epi16(_mm_setzero_si128(), q));
    hi = _mm_castsi128_ps(_mm_unpackhi_epi16(_mm_setzero_si128(), q));
}

template <> inline void load_floats<bf16_t, 8>(const bf16_t* p, float* out) {
    __m128 lo, hi;
    widen_bf16(p, lo, hi);
    _mm_storeu_ps(out, lo);
    _mm_storeu_ps(out + 4, hi);
}

template <> inline void columns_of<bf16_t, 8>(const bf16_t* const (&row)[4], int64_t k, f32x4 (&out)[8]) {
    __m128 lo[4], hi[4];
    for (int c = 0; c < 4; ++c) widen_bf16(row[c] + k, lo[c], hi[c]);
    transpose4(lo[0], lo[1], lo[2], lo[3]);
    transpose4(hi[0], hi[1], hi[2], hi[3]);
    for (int i = 0; i < 4; ++i) out[i] = f32x4(lo[i]), out[4 + i] = f32x4(hi[i]);
}
#endif

}  // namespace mpk
