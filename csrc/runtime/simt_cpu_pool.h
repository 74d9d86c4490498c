// simt_cpu_pool.h: per OS thread, the pool of fibers with their guarded stacks, the block's scheduler
// record and the shared-memory arena, reused block after block and freed when the thread exits.
// Part of runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_pool.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cxxabi.h>
#include <new>
#include "simt_cpu_state.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

// ---- the stack pool, the scheduler and the shared-memory arena, per OS thread

inline size_t page_size() {
    static const size_t p = size_t(sysconf(_SC_PAGESIZE));
    return p;
}

struct Pool {
    Sched sched;
    Fiber* fibers = nullptr;
    int capacity = 0;
    char* arena = nullptr;  // plain builds: pooled; ASan builds: malloc'd per block
    size_t arena_cap = 0;
    char* cells = nullptr;

    void grow(int n) {
        if (n <= capacity) return;
        Fiber* nf = static_cast<Fiber*>(aligned_alloc(alignof(Fiber), sizeof(Fiber) * size_t(n)));
        char* nc = static_cast<char*>(calloc(size_t(n), 2));
        if (!nf || !nc) { free(nf); free(nc); throw std::bad_alloc(); }
        memset(static_cast<void*>(nf), 0, sizeof(Fiber) * size_t(n));
        if (capacity) memcpy(static_cast<void*>(nf), fibers, sizeof(Fiber) * size_t(capacity));
        free(fibers);
        free(cells);
        fibers = nf;
        cells = nc;
        const size_t guard = page_size(), bytes = (size_t(MPK_SIMT_STACK_BYTES) + guard - 1) / guard * guard;
        for (int i = capacity; i < n; ++i) {
            void* m = mmap(nullptr, bytes + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) { capacity = i; throw std::bad_alloc(); }
            mprotect(m, guard, PROT_NONE);  // overflow faults instead of corrupting a neighbor
            fibers[i].stack_lo = static_cast<char*>(m) + guard;
            fibers[i].stack_size = bytes;
#if MPK_SIMT_TSAN
            fibers[i].tsan = tsan_fiber_take();
            char name[48];
            snprintf(name, sizeof name, "simt threadIdx.x %d", i);
            __tsan_set_fiber_name(fibers[i].tsan, name);
#endif
            capacity = i + 1;
        }
    }
    char* arena_for(size_t bytes) {
#if MPK_SIMT_ASAN
        // exactly `bytes`, so a raw access past the end is an ASan heap-buffer-overflow
        void* p = nullptr;
        if (posix_memalign(&p, 1024, bytes ? bytes : 1)) throw std::bad_alloc();
        return static_cast<char*>(p);
#else
        if (bytes + 64 > arena_cap) {
            free(arena);
            arena = nullptr;
            arena_cap = 0;
            void* p = nullptr;
            const size_t cap = (bytes + 64 + 4095) / 4096 * 4096;
            if (posix_memalign(&p, 1024, cap)) throw std::bad_alloc();
            arena = static_cast<char*>(p);
            arena_cap = cap;
        }
        return arena;
#endif
    }
    void arena_done(char* p) {
#if MPK_SIMT_ASAN
        free(p);
#else
        (void)p;
#endif
    }
    ~Pool() {
        if (sched.async) sched.async_free(sched.async);
        if (sched.mbar) sched.mbar_free(sched.mbar);
        free(sched.watch_copy);
        free(sched.scratch);
        for (int i = 0; i < capacity; ++i) {
            const size_t guard = page_size();
#if MPK_SIMT_TSAN
            tsan_fiber_give(fibers[i].tsan);
#endif
#if MPK_SIMT_ASAN
            __asan_unpoison_memory_region(fibers[i].stack_lo, fibers[i].stack_size);
#endif
            munmap(fibers[i].stack_lo - guard, fibers[i].stack_size + guard);
        }
        free(fibers);
        free(cells);
        free(arena);
    }
};
// __dso_handle: this module (crtbegin), which the C++ runtime keeps loaded until the dtor ran.
extern "C" void* __dso_handle;
inline void pool_free(void* p) {
    delete static_cast<Pool*>(p);
    tl.pool = nullptr;
}
// This OS thread's pool: created by its first block, freed when the thread exits (as a
// thread_local with a destructor would be, without putting one in the TLS block).
inline Pool& pool() {
    if (__builtin_expect(!tl.pool, 0)) {
        Pool* p = new Pool;
        if (abi::__cxa_thread_atexit(&pool_free, p, &__dso_handle)) {
            delete p;
            throw std::bad_alloc();
        }
        tl.pool = p;
    }
    return *tl.pool;
}

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
