// simt_cpu_sanitizer.h: the ThreadSanitizer and AddressSanitizer hooks the emulation calls (declared
// here: the sanitizer headers need not be installed) and TsanIgnore, which hides the scheduler's
// own bookkeeping from TSan. Part of runtime/simt_cpu.h (docs/simt.md, Sanitizers).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_sanitizer.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stddef.h>
#include "simt_cpu_config.h"
#if MPK_SIMT_TSAN
#include <mutex>
#include <vector>
#endif

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {
#pragma GCC visibility push(default)  // defined by the sanitizer runtime
extern "C" {
#if MPK_SIMT_TSAN
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_set_fiber_name(void* fiber, const char* name);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif
#if MPK_SIMT_ASAN
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#endif
}
#pragma GCC visibility pop

#if MPK_SIMT_TSAN
// The scheduler's own bookkeeping is shared by all fibers with no happens-before between them
// (switches are no_sync, so that user data races stay visible): TSan ignores it.
struct TsanIgnore {
    TsanIgnore() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
    ~TsanIgnore() { AnnotateIgnoreWritesEnd(__FILE__, __LINE__); AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
};
inline void tsan_release(void* a) { __tsan_release(a); }
inline void tsan_acquire(void* a) { __tsan_acquire(a); }

// TSan fibers outlive the OS thread whose pool made them: creating and destroying one costs about
// 0.2 ms (ThreadSanitizer maps and clears a thread state), and every launch's new worker threads made
// one per threadIdx.x, which was 90% of the runtime tests' time under TSan (800 handles x 300 fibers).
// A finished pool gives its fibers back here and the next pool takes them. Sound for race detection:
// the switches are no_sync and every block's fibers acquire the block's start (simt_cpu_block.h), the
// mutex orders a giving thread's exit before the taking thread's blocks (as the join that ends a
// launch does), and a fiber carries only its own history. Per module (hidden) and never freed (a
// sanitizer build's process ends soon; its leak is a few fiber records).
struct TsanFiberCache {
    std::mutex mu;
    std::vector<void*> fibers;
};
inline TsanFiberCache& tsan_fiber_cache() {
    static TsanFiberCache* cache = new TsanFiberCache;
    return *cache;
}
inline void* tsan_fiber_take() {
    TsanFiberCache& c = tsan_fiber_cache();
    {
        std::lock_guard<std::mutex> lock(c.mu);
        if (!c.fibers.empty()) {
            void* f = c.fibers.back();
            c.fibers.pop_back();
            return f;
        }
    }
    return __tsan_create_fiber(0);
}
inline void tsan_fiber_give(void* f) {
    TsanFiberCache& c = tsan_fiber_cache();
    std::lock_guard<std::mutex> lock(c.mu);
    c.fibers.push_back(f);
}
#else
struct TsanIgnore {
    TsanIgnore() {}  // user-provided: no unused-variable warning at the call sites
};
inline void tsan_release(void*) {}
inline void tsan_acquire(void*) {}
#endif
}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
