// simt_cpu_block.h: running a block (run_block: set up, switch to the first fiber, rethrow the
// first violation), the dynamic shared memory accessor (mpk::smem), and what the persistent
// executor uses (BlockRef, sync, task_barrier, run_task, MPK_RUN_TASK). Part of runtime/simt_cpu.h.
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_block.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <type_traits>
#include "simt_cpu_sync.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

// ---- the block

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void run(const Block& b, void (*fn)(void*), void* arg) {
    if (b.threads < 32 || b.threads > 1024 || b.threads % 32)
        throw Error("mpk::simt::run_block: " + std::to_string(b.threads) +
                    " threads; a block has a multiple of 32 threads, at most 1024");
    if (tl.s) throw Error("mpk::simt::run_block called inside a running block (blocks do not nest)");
    if (b.smem_bytes > (size_t(1) << 30))
        throw Error("mpk::simt::run_block: " + std::to_string(b.smem_bytes) + " bytes of shared memory (at most 1 GiB)");
    Pool& p = pool();
    p.grow(b.threads);
    Sched& s = p.sched;
    s.nthreads = b.threads;
    s.nwarps = b.threads / 32;
    s.dim = dim3(unsigned(b.threads), 1, 1);
    s.fibers = p.fibers;
    s.cell_lane = p.cells;
    s.fn = fn;
    s.arg = arg;
    s.rng = ::mpk::splitmix64(b.seed) | 1;
    s.contend = b.contend;
    s.cur_warp = -1;
    s.ahead = nullptr;
    s.yielded = s.exited = 0;
    s.at_barrier = 0;
    s.bar_gen = 0;
    s.aborting = false;
    s.error.clear();
    s.async_pending = 0;  // cp.async state (simt_cpu_async.h): none yet in this block
    s.async_ready = false;
    s.mbar_ready = false;  // mbarriers (simt_cpu_mbarrier.h): none yet in this block
    s.main.stack_lo = nullptr;
    s.main.stack_size = 0;
    s.main.st = St::Running;
    for (int w = 0; w < s.nwarps; ++w) s.warps[w] = Warp{0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0};
    s.ready_warps = 0xFFFFFFFFu >> (32 - s.nwarps);
    for (int i = 0; i < s.nthreads; ++i) {
        Fiber& f = s.fibers[i];
        f.tid = uint3{unsigned(i), 0, 0};
        f.st = St::Ready;
        f.started = false;
        f.atomics = 0;
        f.contend_rng = b.contend ? ::mpk::splitmix64(b.seed ^ uint64_t(i + 1) * 0xD1B54A32D192ED03ull) | 1 : 1;
        f.asan_fake = nullptr;
#if MPK_SIMT_ASAN
        // the frames a previous block's fiber never returned from (its exit path)
        const size_t top = f.stack_size < 16384 ? f.stack_size : 16384;
        __asan_unpoison_memory_region(f.stack_lo + f.stack_size - top, top);
#endif
    }
    // MPK_SIMT_SERIAL=1: one thread at a time in threadIdx order (docs/simt.md, Debugging)
    const char* serial = getenv("MPK_SIMT_SERIAL");
    s.serial = serial && serial[0] && strcmp(serial, "0") != 0;
    s.scratch_given = false;
    s.watch_addr = nullptr;
    if (b.watch_addr && b.watch_bytes && b.watch_thread) {
        if (b.watch_bytes > s.watch_cap) {
            free(s.watch_copy);
            s.watch_copy = static_cast<char*>(malloc(b.watch_bytes));
            s.watch_cap = s.watch_copy ? b.watch_bytes : 0;
            if (!s.watch_copy) throw std::bad_alloc();
        }
        s.watch_addr = static_cast<const char*>(b.watch_addr);
        s.watch_bytes = b.watch_bytes;
        s.watch_thread = b.watch_thread;
        *s.watch_thread = -1;
        memcpy(s.watch_copy, s.watch_addr, s.watch_bytes);
    }
    s.debug = s.serial || s.watch_addr;
#if MPK_SIMT_STATIC_POISON
    poison_static_shared(s, b.smem_fill);  // the static __shared__ arrays, as a fresh block finds them
#endif
    s.smem_bytes = b.smem_bytes;
    s.smem = p.arena_for(b.smem_bytes);
    s.smem_touched = false;
    memset(s.smem, b.smem_fill, b.smem_bytes);  // poison: 0xFF, NaN as float, bf16 and fp16
    s.smem_fill = b.smem_fill;
#if !MPK_SIMT_ASAN
    memset(s.smem + b.smem_bytes, 0xA5, 64);  // canary: a raw write just past the end shows
#endif
#if MPK_SIMT_TSAN
    s.main.tsan = __tsan_get_current_fiber();
#endif
    tl.s = &s;
    s.cur = &s.main;
    tsan_release(&s.cell_start);  // everything above happens before every fiber's first step
    {
        TsanIgnore ignore;
        Fiber* first = next_fiber(s);
        switch_to(s, &s.main, first);
    }
    tsan_acquire(&s.cell_end);
    tl.s = nullptr;
    bool clobbered = false;
#if !MPK_SIMT_ASAN
    for (int i = 0; i < 64; ++i) clobbered |= uint8_t(s.smem[b.smem_bytes + size_t(i)]) != 0xA5;
#endif
    // simt_cpu_mbarrier.h: a barrier left with transaction bytes unbalanced (named before the arena goes)
    std::string unbalanced = s.error.empty() && s.mbar_ready ? s.mbar_end(s) : std::string();
    if (unbalanced.empty() && s.error.empty() && s.async_ready && s.async_end) unbalanced = s.async_end(s);  // (wgmma's)
    p.arena_done(s.smem);
    s.smem = nullptr;
    if (!s.error.empty()) throw Error(s.error);
    if (!unbalanced.empty()) throw Error(unbalanced);
    if (clobbered)
        throw Error("a write past the end of the block's " + std::to_string(b.smem_bytes) +
                    " bytes of dynamic shared memory (the canary after it changed)");
}
#else
void run(const Block& b, void (*fn)(void*), void* arg);
#endif

inline Sched& current(const char* what) {
    Sched* s = tl.s;
    if (!s) outside(what);
    return *s;
}

}  // namespace detail
#pragma GCC visibility pop

template <class F> void run_block(const Block& b, F&& body) {
    using Fn = typename std::remove_reference<F>::type;
    detail::run(b, [](void* p) { (*static_cast<Fn*>(p))(); }, const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace simt

// ---- dynamic shared memory (the same accessor as under nvcc: runtime/simt.h)

inline char* smem_base() {
    simt::detail::Sched& s = simt::detail::current("mpk::smem_base");
    simt::detail::TsanIgnore ignore;
    s.smem_touched = true;
    return s.smem;
}
inline size_t smem_bytes() { return simt::detail::current("mpk::smem_bytes").smem_bytes; }
// count elements of T at byte_offset, checked against the block's size and T's alignment.
template <typename T>
inline T* smem(size_t byte_offset, size_t count, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    simt::detail::Sched& s = simt::detail::current("mpk::smem");
    {
        simt::detail::TsanIgnore ignore;
        s.smem_touched = true;
    }
    const size_t end = byte_offset + count * sizeof(T);
    if (byte_offset > s.smem_bytes || count > (s.smem_bytes - byte_offset) / sizeof(T) ||
        byte_offset % alignof(T)) {
        std::string who = s.cur && s.cur != &s.main ? " by " + simt::detail::thread_name(s.cur) : "";
        throw simt::Error("mpk::smem at " + simt::detail::site(file, line) + who + ": offset " +
                          std::to_string(byte_offset) + ", " + std::to_string(count) + " elements of " +
                          std::to_string(sizeof(T)) + " bytes (bytes [" + std::to_string(byte_offset) + ", " +
                          std::to_string(end) + ")) " +
                          (byte_offset % alignof(T) ? "is misaligned for its " + std::to_string(alignof(T)) +
                                                          "-byte alignment"
                                                    : "overflows the block's " + std::to_string(s.smem_bytes) +
                                                          " bytes of dynamic shared memory"));
    }
    return reinterpret_cast<T*>(s.smem + byte_offset);
}

}  // namespace mpk

namespace mpk {
namespace simt {
// For the persistent executor, which runs many tasks on one block (runtime/executor.cuh). In a
// shared module every TLS access is a call (about 3 ns here), so the executor takes the running
// block once per launch (this_block) and passes it to its barriers instead of each thread
// looking it up per task.
using BlockRef = detail::Sched*;
inline BlockRef this_block() { return &detail::current("mpk::simt::this_block"); }
// `bytes` of per-block memory that is not shared memory and never poisoned (64-byte aligned), the
// same for every thread of block b: what the executor keeps across the tasks of its worker block
// (a static __shared__ array is poisoned before every task in test mode). Every thread asks for the
// same size; the first call of a block allocates, so no thread holds the previous block's pointer.
inline void* block_scratch(BlockRef b, size_t bytes, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::Sched& s = *b;
    detail::TsanIgnore ignore;
    if (!s.scratch_given) {
        if (bytes > s.scratch_bytes) {
            free(s.scratch);
            s.scratch = nullptr;
            s.scratch_bytes = 0;
            void* m = nullptr;
            if (posix_memalign(&m, 64, bytes)) throw std::bad_alloc();
            s.scratch = static_cast<char*>(m);
            s.scratch_bytes = bytes;
        }
        s.scratch_given = true;
    } else if (bytes > s.scratch_bytes) {
        throw Error("mpk::simt::block_scratch at " + detail::site(file, line) + ": " + std::to_string(bytes) +
                    " bytes, more than the " + std::to_string(s.scratch_bytes) + " this block's first call took");
    }
    return s.scratch;
}
// __syncthreads() on block b.
inline void sync(BlockRef b, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::barrier_on(*b, detail::Op::SyncThreads, 0, file, line);
}
// __syncthreads() after a task on block b; with poison (test mode), the next task finds the static
// __shared__ arrays filled with 0xFF, and the dynamic shared memory too if a thread of this one
// took it (mpk::smem, mpk::smem_base), as a fresh block does. The fill happens as the barrier
// completes: no second barrier. A task's mbarriers end with it, as a block's do (the next task may
// mbarrier.init the same bytes).
// (a block reduction, as __syncthreads_or: nonzero for every thread when any passed a nonzero `pred`)
inline int task_barrier(BlockRef b, bool poison, int pred = 0, const char* file = __builtin_FILE(),
                        int line = __builtin_LINE()) {
    return detail::barrier_on(*b, detail::Op::SyncOr, pred, file, line, poison, true);
}
// A task on the worker block. Inside a running block (the persistent executor runs the task on
// every thread of its worker block, runtime/executor.cuh, and says so in v.on_block) the calling
// thread runs it, as under nvcc; outside one (a kernel test), one block of block_of(v) runs it.
// A thread that ends its task with cp.async copies in flight is an error (simt_cpu_async.h).
template <class F> void run_task(const TaskView& v, F&& body) {
    if (v.on_block || detail::tl.s) {
        body();
        detail::Sched* s = detail::tl.s;
        if (s && s->async_pending) s->async_done(*s, s->cur, "ends its task");
    } else {
        run_block(block_of(v), body);
    }
}
}  // namespace simt
}  // namespace mpk
#define MPK_RUN_TASK(v, ...) ::mpk::simt::run_task(v, [&] { (__VA_ARGS__)(v); })
