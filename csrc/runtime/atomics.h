// atomics.h: the few atomic operations the runtime protocol needs, on int32_t/int64_t.
//
//   ld_acquire / ld_relaxed           read a counter, a queue index, a flag
//   st_release / st_relaxed           publish a queue index, a state, a flag
//   atomic_add_release / _relaxed     count progress; return the old value
//   atomic_add_acq_rel                trigger an event: the trigger that completes it also
//                                     acquires every earlier trigger's writes (it dispatches)
//   atomic_cas                        first-failure-wins status words; returns the old value
//   *_sys                             memory another device or the host reads or writes while a
//                                     kernel runs (host-mapped slots and stop request, peer ranks' signal
//                                     counters): system scope on the GPU, the same as above on the host
//
// Host: GCC/Clang __atomic builtins (ThreadSanitizer understands them).
// CUDA: cuda::atomic_ref at device scope, usable from host and device code in a .cu.
// The operands are plain integers in plain buffers (no std::atomic), so the same buffers
// can live in device memory or be read by Python after a launch.
#pragma once
#include <stdint.h>
#include "platform.h"

#if defined(__CUDACC__)
#include <cuda/atomic>
#endif

namespace mpk {

template <typename T> struct is_atomic_word {
    static constexpr bool value = sizeof(T) == 4 || sizeof(T) == 8;
};

#if defined(__CUDACC__)
// ---- CUDA: device-scope atomic_ref (event counters are shared by all CTAs of one GPU)

template <typename T> using device_ref = cuda::atomic_ref<T, cuda::thread_scope_device>;

template <typename T> MPK_HOST_DEVICE MPK_INLINE T ld_acquire(const T* p) {
    static_assert(is_atomic_word<T>::value, "32- or 64-bit integers only");
    return device_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_acquire);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE T ld_relaxed(const T* p) {
    return device_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_relaxed);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE void st_release(T* p, T v) {
    device_ref<T>(*p).store(v, cuda::memory_order_release);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE void st_relaxed(T* p, T v) {
    device_ref<T>(*p).store(v, cuda::memory_order_relaxed);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE T atomic_add_release(T* p, T v) {
    return device_ref<T>(*p).fetch_add(v, cuda::memory_order_release);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE T atomic_add_relaxed(T* p, T v) {
    return device_ref<T>(*p).fetch_add(v, cuda::memory_order_relaxed);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE T atomic_add_acq_rel(T* p, T v) {
    return device_ref<T>(*p).fetch_add(v, cuda::memory_order_acq_rel);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE T atomic_cas(T* p, T expected, T desired) {
    device_ref<T>(*p).compare_exchange_strong(expected, desired, cuda::memory_order_acq_rel);
    return expected;  // the old value: compare_exchange wrote it back on failure
}

template <typename T> using system_ref = cuda::atomic_ref<T, cuda::thread_scope_system>;
template <typename T> MPK_HOST_DEVICE MPK_INLINE T ld_acquire_sys(const T* p) {
    return system_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_acquire);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE T ld_relaxed_sys(const T* p) {
    return system_ref<T>(*const_cast<T*>(p)).load(cuda::memory_order_relaxed);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE void st_release_sys(T* p, T v) {
    system_ref<T>(*p).store(v, cuda::memory_order_release);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE void st_relaxed_sys(T* p, T v) {
    system_ref<T>(*p).store(v, cuda::memory_order_relaxed);
}
template <typename T> MPK_HOST_DEVICE MPK_INLINE T atomic_cas_sys(T* p, T expected, T desired) {
    system_ref<T>(*p).compare_exchange_strong(expected, desired, cuda::memory_order_acq_rel);
    return expected;
}

#else
// ---- host: compiler builtins

template <typename T> inline T ld_acquire(const T* p) {
    static_assert(is_atomic_word<T>::value, "32- or 64-bit integers only");
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
template <typename T> inline T ld_relaxed(const T* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
template <typename T> inline void st_release(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
template <typename T> inline void st_relaxed(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
template <typename T> inline T atomic_add_release(T* p, T v) {
    static_assert(is_atomic_word<T>::value, "32- or 64-bit integers only");
    return __atomic_fetch_add(p, v, __ATOMIC_RELEASE);
}
template <typename T> inline T atomic_add_relaxed(T* p, T v) {
    return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
template <typename T> inline T atomic_add_acq_rel(T* p, T v) {
    static_assert(is_atomic_word<T>::value, "32- or 64-bit integers only");
    return __atomic_fetch_add(p, v, __ATOMIC_ACQ_REL);
}
template <typename T> inline T atomic_cas(T* p, T expected, T desired) {
    static_assert(is_atomic_word<T>::value, "32- or 64-bit integers only");
    __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    return expected;  // the old value: written back on failure
}
// One address space and one coherence domain on the host: system scope is the same.
template <typename T> inline T ld_acquire_sys(const T* p) { return ld_acquire(p); }
template <typename T> inline T ld_relaxed_sys(const T* p) { return ld_relaxed(p); }
template <typename T> inline void st_release_sys(T* p, T v) { st_release(p, v); }
template <typename T> inline void st_relaxed_sys(T* p, T v) { st_relaxed(p, v); }
template <typename T> inline T atomic_cas_sys(T* p, T expected, T desired) { return atomic_cas(p, expected, desired); }
#endif

// Host only: one spin-wait hint to the core (frees the sibling hyperthread, saves power).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

}  // namespace mpk
