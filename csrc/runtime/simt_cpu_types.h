// simt_cpu_types.h: CUDA's keywords, vector types and 16-bit float types for the host compiler
// (global namespace, as CUDA has them). Part of runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_types.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include "dtypes.h"

#define __device__
#define __host__
#define __global__
#define __constant__
#define __managed__
#define __grid_constant__
#define __launch_bounds__(...)
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
// A block runs on one OS thread and blocks on one OS thread run one after another, so a static
// per-OS-thread variable is exactly per block. Poisoned (0xFF) at every block start and before
// every task of a worker block in test mode, as the dynamic arena is (simt_cpu_tls.h).
// `extern __shared__` arrays are not supported: use mpk::smem.
#define __shared__ static thread_local
// (__noinline__ is left undefined: libstdc++ spells __attribute__((__noinline__)).)

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
inline constexpr int warpSize = 32;
// (blockIdx and gridDim: refused in task kernels, runtime/simt.h)

#define MPK_SIMT_VEC124(T, N1, N2, N4, A2, A4)                                           \
    struct N1 { T x; };                                                                  \
    struct alignas(A2) N2 { T x, y; };                                                   \
    struct alignas(A4) N4 { T x, y, z, w; };                                             \
    inline constexpr N1 make_##N1(T x) { return N1{x}; }                                 \
    inline constexpr N2 make_##N2(T x, T y) { return N2{x, y}; }                         \
    inline constexpr N4 make_##N4(T x, T y, T z, T w) { return N4{x, y, z, w}; }
#define MPK_SIMT_VEC(T, N1, N2, N3, N4, A2, A4)                                          \
    MPK_SIMT_VEC124(T, N1, N2, N4, A2, A4)                                               \
    struct N3 { T x, y, z; };                                                            \
    inline constexpr N3 make_##N3(T x, T y, T z) { return N3{x, y, z}; }
MPK_SIMT_VEC(signed char, char1, char2, char3, char4, 2, 4)
MPK_SIMT_VEC(unsigned char, uchar1, uchar2, uchar3, uchar4, 2, 4)
MPK_SIMT_VEC(short, short1, short2, short3, short4, 4, 8)
MPK_SIMT_VEC(unsigned short, ushort1, ushort2, ushort3, ushort4, 4, 8)
MPK_SIMT_VEC(int, int1, int2, int3, int4, 8, 16)
MPK_SIMT_VEC124(unsigned, uint1, uint2, uint4, 8, 16)
MPK_SIMT_VEC(long long, longlong1, longlong2, longlong3, longlong4, 16, 16)
MPK_SIMT_VEC(unsigned long long, ulonglong1, ulonglong2, ulonglong3, ulonglong4, 16, 16)
MPK_SIMT_VEC(float, float1, float2, float3, float4, 8, 16)
MPK_SIMT_VEC(double, double1, double2, double3, double4, 16, 16)
#undef MPK_SIMT_VEC
#undef MPK_SIMT_VEC124
inline constexpr uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
static_assert(alignof(float4) == 16 && sizeof(float4) == 16 && alignof(float2) == 8, "CUDA's alignment");

// bf16 / fp16 under CUDA's names (mpk::bf16_t / fp16_t; conversions round to nearest even).
using __nv_bfloat16 = mpk::bf16_t;
using __half = mpk::fp16_t;
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
struct alignas(4) __half2 { __half x, y; };
inline float __bfloat162float(__nv_bfloat16 v) { return mpk::to_float(v); }
inline __nv_bfloat16 __float2bfloat16(float f) { return mpk::from_float<mpk::bf16_t>(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return mpk::from_float<mpk::bf16_t>(f); }
inline float __half2float(__half v) { return mpk::to_float(v); }
inline __half __float2half(float f) { return mpk::from_float<mpk::fp16_t>(f); }
inline __half __float2half_rn(float f) { return mpk::from_float<mpk::fp16_t>(f); }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return float2{to_float(v.x), to_float(v.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }
inline float2 __half22float2(__half2 v) { return float2{to_float(v.x), to_float(v.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline __half2 __float22half2_rn(float2 v) { return __floats2half2_rn(v.x, v.y); }
