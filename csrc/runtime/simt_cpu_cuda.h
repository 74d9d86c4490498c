// simt_cpu_cuda.h: the CUDA builtins for task kernels (global namespace): threadIdx/blockDim,
// barriers and warp collectives with their call sites, __activemask, __nanosleep, __trap,
// fences, clock64, cache-hinted loads and stores, atomics, and a few math and bit intrinsics.
// Part of runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_cuda.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <math.h>
#include <string.h>
#include <time.h>
#include "simt_cpu_block.h"

// ---- CUDA builtins (global namespace). Barriers and collectives take their call site as
// default arguments (__builtin_FILE/__builtin_LINE are the caller's), so messages name it.

#define threadIdx (::mpk::simt::detail::thread_idx())
#define blockDim (::mpk::simt::detail::block_dim())
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace mpk { namespace simt { namespace detail {
inline const uint3& thread_idx() {
    Sched* s = tl.s;
    if (__builtin_expect(!s || s->cur == &s->main, 0)) outside("threadIdx");
    return s->cur->tid;
}
inline const dim3& block_dim() {
    Sched* s = tl.s;
    if (__builtin_expect(!s, 0)) outside("blockDim");
    return s->dim;
}
}}}  // namespace mpk::simt::detail
#pragma GCC visibility pop

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncThreads, 0, file, line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncCount, pred, file, line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncAnd, pred, file, line);
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncOr, pred, file, line);
}
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::collective(::mpk::simt::detail::Op::Syncwarp, mask, 0, 0, 32, file, line);
}

#define MPK_SIMT_SHFL(name, OP)                                                                          \
    template <class T>                                                                                   \
    inline T name(unsigned mask, T var, int arg, int width = warpSize, const char* file = __builtin_FILE(), \
                  int line = __builtin_LINE()) {                                                         \
        using namespace ::mpk::simt::detail;                                                             \
        return from_bits<T>(collective(Op::OP, mask, to_bits(var), arg, width, file, line));             \
    }
MPK_SIMT_SHFL(__shfl_sync, ShflIdx)
MPK_SIMT_SHFL(__shfl_up_sync, ShflUp)
MPK_SIMT_SHFL(__shfl_down_sync, ShflDown)
MPK_SIMT_SHFL(__shfl_xor_sync, ShflXor)
#undef MPK_SIMT_SHFL

inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return unsigned(collective(Op::Ballot, mask, pred != 0, 0, 32, file, line));
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return int(collective(Op::Any, mask, pred != 0, 0, 32, file, line));
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return int(collective(Op::All, mask, pred != 0, 0, 32, file, line));
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return unsigned(collective(Op::MatchAny, mask, to_bits(value), 0, 32, file, line));
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    const uint64_t r = collective(Op::MatchAll, mask, to_bits(value), 0, 32, file, line);
    *pred = int(r >> 32);
    return unsigned(r);
}
#define MPK_SIMT_REDUCE(name, T, OP)                                                                          \
    inline T name(unsigned mask, T value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) { \
        using namespace ::mpk::simt::detail;                                                                  \
        return T(uint32_t(collective(Op::OP, mask, uint32_t(value), 0, 32, file, line)));                     \
    }
MPK_SIMT_REDUCE(__reduce_add_sync, unsigned, RedAddU)
MPK_SIMT_REDUCE(__reduce_add_sync, int, RedAddU)
MPK_SIMT_REDUCE(__reduce_min_sync, unsigned, RedMinU)
MPK_SIMT_REDUCE(__reduce_min_sync, int, RedMinI)
MPK_SIMT_REDUCE(__reduce_max_sync, unsigned, RedMaxU)
MPK_SIMT_REDUCE(__reduce_max_sync, int, RedMaxI)
MPK_SIMT_REDUCE(__reduce_and_sync, unsigned, RedAnd)
MPK_SIMT_REDUCE(__reduce_or_sync, unsigned, RedOr)
MPK_SIMT_REDUCE(__reduce_xor_sync, unsigned, RedXor)
#undef MPK_SIMT_REDUCE

// The lanes of the caller's warp that have not exited (on a GPU: the lanes converged here).
inline unsigned __activemask() {
    using namespace ::mpk::simt::detail;
    const uint3& t = thread_idx();
    return tl.s->warps[t.x >> 5].alive;
}
// A yield: the next ready thread runs; this one runs again after every ready thread has.
inline void __nanosleep(unsigned) { ::mpk::simt::detail::yield_now(); }
// Raise an error in the block (a GPU traps the whole grid).
[[noreturn]] inline void __trap(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    throw ::mpk::simt::Error("__trap() at " + ::mpk::simt::detail::site(file, line));
}

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }  // one OS thread per block
inline long long clock64() {
#if defined(__x86_64__)
    return (long long)__builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    long long t;
    asm volatile("mrs %0, cntvct_el0" : "=r"(t));
    return t;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
#endif
}

// Cache-hinted loads and stores: plain accesses on the host.
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---- atomics: relaxed, device scope, as CUDA's atomic* are (host: GCC/Clang __atomic, which
// TSan understands). _block and _system variants are the same operation here.

#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace mpk { namespace simt { namespace detail {
template <class T> inline T atomic_update(T* p, T (*f)(T, T), T v) {
    atomic_tick();
    T old = __atomic_load_n(p, __ATOMIC_RELAXED), want;
    do {
        want = f(old, v);
        atomic_window();
    } while (!__atomic_compare_exchange(p, &old, &want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
template <class T> inline T atomic_update_fp(T* p, T v) {  // float / double add through CAS
    atomic_tick();
    T old, want;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
        want = old + v;
        atomic_window();
    } while (!__atomic_compare_exchange(p, &old, &want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
template <class T> using if_int = typename std::enable_if<std::is_integral<T>::value, T>::type;
}}}  // namespace mpk::simt::detail
#pragma GCC visibility pop

#define MPK_SIMT_ATOMIC_INT(name, body)                                                                    \
    template <class T> inline ::mpk::simt::detail::if_int<T> name(T* p, ::mpk::simt::detail::if_int<T> v) { \
        ::mpk::simt::detail::atomic_tick();                                                                \
        return body;                                                                                       \
    }                                                                                                      \
    template <class T> inline ::mpk::simt::detail::if_int<T> name##_block(T* p, ::mpk::simt::detail::if_int<T> v) { \
        return name(p, v);                                                                                 \
    }                                                                                                      \
    template <class T> inline ::mpk::simt::detail::if_int<T> name##_system(T* p, ::mpk::simt::detail::if_int<T> v) { \
        return name(p, v);                                                                                 \
    }
MPK_SIMT_ATOMIC_INT(atomicAdd, __atomic_fetch_add(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicSub, __atomic_fetch_sub(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicAnd, __atomic_fetch_and(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicOr, __atomic_fetch_or(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicXor, __atomic_fetch_xor(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicExch, __atomic_exchange_n(p, v, __ATOMIC_RELAXED))
#undef MPK_SIMT_ATOMIC_INT
template <class T> inline ::mpk::simt::detail::if_int<T> atomicMin(T* p, T v) {
    return ::mpk::simt::detail::atomic_update<T>(p, [](T a, T b) { return b < a ? b : a; }, v);
}
template <class T> inline ::mpk::simt::detail::if_int<T> atomicMax(T* p, T v) {
    return ::mpk::simt::detail::atomic_update<T>(p, [](T a, T b) { return b > a ? b : a; }, v);
}
// ((old >= v) ? 0 : old + 1) and (((old == 0) || (old > v)) ? v : old - 1), as CUDA defines them.
inline unsigned atomicInc(unsigned* p, unsigned v) {
    return ::mpk::simt::detail::atomic_update<unsigned>(p, [](unsigned a, unsigned b) { return a >= b ? 0u : a + 1; }, v);
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
    return ::mpk::simt::detail::atomic_update<unsigned>(p, [](unsigned a, unsigned b) { return (a == 0 || a > b) ? b : a - 1; }, v);
}
template <class T> inline ::mpk::simt::detail::if_int<T> atomicCAS(T* p, T compare, T v) {
    ::mpk::simt::detail::atomic_tick();
    ::mpk::simt::detail::atomic_window();  // after the kernel's read of *p, before the swap
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;  // the old value either way
}
inline float atomicAdd(float* p, float v) { return ::mpk::simt::detail::atomic_update_fp(p, v); }
inline double atomicAdd(double* p, double v) { return ::mpk::simt::detail::atomic_update_fp(p, v); }
inline float atomicAdd_block(float* p, float v) { return atomicAdd(p, v); }
inline float atomicAdd_system(float* p, float v) { return atomicAdd(p, v); }
inline float atomicExch(float* p, float v) {
    ::mpk::simt::detail::atomic_tick();
    float old;
    __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED);
    return old;
}

// ---- a few device math and bit intrinsics under their CUDA names

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x == x ? x : 0.0f; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((unsigned long long)a * b >> 32); }
inline int __mulhi(int a, int b) { return int((long long)a * b >> 32); }
// CUDA's device min/max for one type (mixed types: cast first).
inline int min(int a, int b) { return b < a ? b : a; }
inline int max(int a, int b) { return b > a ? b : a; }
inline unsigned min(unsigned a, unsigned b) { return b < a ? b : a; }
inline unsigned max(unsigned a, unsigned b) { return b > a ? b : a; }
inline long long min(long long a, long long b) { return b < a ? b : a; }
inline long long max(long long a, long long b) { return b > a ? b : a; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return b < a ? b : a; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return b > a ? b : a; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
