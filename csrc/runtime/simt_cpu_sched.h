// simt_cpu_sched.h: the emulated block's scheduler: the scheduling policy (greedy within a warp,
// random warps, one fiber drawn ahead), the switch and a fiber's entry and exit (its state:
// simt_cpu_state.h; the per-OS-thread pool of fibers, stacks and the arena: simt_cpu_pool.h). Part of
// runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_sched.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <stdio.h>
#include <string>
#include "simt_cpu_pool.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

// ---- scheduling

inline uint32_t rand32(Sched& s) {  // a 64-bit LCG's high half: one multiply-add on the switch path
    s.rng = s.rng * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(s.rng >> 32);
}
// A random set bit of m (m != 0): a random position if it is set, else the first set bit at or
// after another random position, cyclically. Uniform for a full mask (a warp just released),
// every set bit possible for any mask, and no data-dependent loop.
inline int random_bit(Sched& s, uint32_t m) {
    const uint32_t r = rand32(s);
    const int p = int(r & 31), q = int((r >> 5) & 31);
    if ((m >> p) & 1) return p;
    const uint32_t rot = (m >> q) | (m << ((32 - q) & 31));
    return (q + __builtin_ctz(rot)) & 31;
}

void fiber_main(void* arg);
#if MPK_SIMT_UCONTEXT
void fiber_main_uc();
#endif

inline void make_ready(Sched& s, Fiber* f) {
    const int t = int(f->tid.x);
    f->st = St::Ready;
    s.warps[t >> 5].ready |= 1u << (t & 31);
    s.ready_warps |= 1u << (t >> 5);
}

// A random ready lane of warp w, out of the ready set.
inline Fiber* pick(Sched& s, int w) {
    Warp& wp = s.warps[w];
    const int lane = random_bit(s, wp.ready);
    wp.ready &= ~(1u << lane);
    if (!wp.ready) s.ready_warps &= ~(1u << w);
    return &s.fibers[w * 32 + lane];
}

// The next ready fiber by the policy below, drawn one switch ahead (s.ahead): its saved frames
// are prefetched while the current fiber runs. The 128 fibers' stacks do not fit in L1 together,
// so without it every resume waits on the cache for the frames it returns through.
inline Fiber* pick_ahead(Sched& s) {
    if (s.cur_warp >= 0 && s.warps[s.cur_warp].ready) return pick(s, s.cur_warp);
    if (!s.ready_warps) return nullptr;
    s.cur_warp = random_bit(s, s.ready_warps);
    return pick(s, s.cur_warp);
}
// MPK_SIMT_SERIAL: the lowest ready thread (threadIdx order).
inline Fiber* pick_first(Sched& s) {
    if (!s.ready_warps) return nullptr;
    const int w = __builtin_ctz(s.ready_warps);
    Warp& wp = s.warps[w];
    const int lane = __builtin_ctz(wp.ready);
    wp.ready &= wp.ready - 1;
    if (!wp.ready) s.ready_warps &= ~(1u << w);
    return &s.fibers[w * 32 + lane];
}
inline void prefetch_frames(const Fiber* f) {
    if (!f->started) return;
    const char* sp = static_cast<const char*>(f->sp);
    for (int k = 0; k < 8; ++k) __builtin_prefetch(sp + 64 * k);
}

// f runs next (a fresh stack frame for a thread that never ran).
inline Fiber* take(Fiber* f) {
    f->st = St::Running;
    if (!f->started) {
        f->started = true;
#if MPK_SIMT_UCONTEXT
        getcontext(&f->uc);
        f->uc.uc_stack.ss_sp = f->stack_lo;
        f->uc.uc_stack.ss_size = f->stack_size;
        f->uc.uc_link = nullptr;
        makecontext(&f->uc, reinterpret_cast<void (*)()>(&fiber_main_uc), 0);
#else
        // stagger the stack tops so that the fibers' hot lines do not share L1 sets
        char* top = f->stack_lo + f->stack_size - ((f->tid.x * 5u % 64u) * 64u);
        f->sp = init_frame(top, &fiber_main, f);
#endif
    }
    return f;
}

std::string diagnose(Sched& s);
inline void fail_record(Sched& s, std::string msg) {
    if (s.aborting) return;
    s.aborting = true;
    s.error = std::move(msg);
    for (int i = 0; i < s.nthreads; ++i) {  // never-started threads have nothing to unwind
        Fiber& f = s.fibers[i];
        if (!f.started && f.st != St::Exited) {
            f.st = St::Exited;
            ++s.exited;
        }
    }
}
[[noreturn]] inline void fail(Sched& s, std::string msg) {
    fail_record(s, std::move(msg));
    throw Cancel{};
}

// The write-watch, at the end of a fiber's run segment: the watched bytes changed during it, so
// this fiber wrote them last (so far).
inline int32_t linear_tid(const Sched& s, const Fiber* f) {
    return int32_t(f->tid.x + f->tid.y * s.dim.x + f->tid.z * s.dim.x * s.dim.y);
}
inline void watch_check(Sched& s, const Fiber* self) {
    if (memcmp(s.watch_addr, s.watch_copy, s.watch_bytes) == 0) return;
    *s.watch_thread = linear_tid(s, self);
    memcpy(s.watch_copy, s.watch_addr, s.watch_bytes);
}

// The next fiber to run, or nullptr after recording a deadlock. Greedy within the current warp
// (a random ready lane), else a random warp with a ready lane; __nanosleep'd threads only when
// nothing else is ready; &main once every thread has exited.
// kDebug (MPK_SIMT_SERIAL, the write-watch): the watch at the end of the running fiber's segment,
// and the lowest ready thread instead of the policy; next_fiber picks the variant (one test).
template <bool kDebug> inline Fiber* next_fiber_as(Sched& s) {
    // the end of the running fiber's segment (none when run_block starts the first one)
    if (kDebug && s.watch_addr && s.cur != &s.main) watch_check(s, s.cur);
    for (;;) {
        Fiber* f;
        if (kDebug && s.serial) {
            f = pick_first(s);
        } else {
            f = s.ahead;
            if (!f) f = pick_ahead(s);
            if (f) {
                s.ahead = pick_ahead(s);
                if (s.ahead) prefetch_frames(s.ahead);
            }
        }
        if (f) return take(f);
        if (s.yielded) {
            for (int w = 0; w < s.nwarps; ++w) {
                Warp& wp = s.warps[w];
                if (!wp.yielded) continue;
                wp.ready |= wp.yielded;
                wp.yielded = 0;
                s.ready_warps |= 1u << w;
                for (uint32_t m = wp.ready; m; m &= m - 1) s.fibers[w * 32 + __builtin_ctz(m)].st = St::Ready;
            }
            s.yielded = 0;
            s.cur_warp = -1;
            continue;
        }
        if (s.exited == s.nthreads) return &s.main;
        fail_record(s, diagnose(s));
        return nullptr;
    }
}
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW Fiber* next_fiber(Sched& s) {
    return __builtin_expect(s.debug, 0) ? next_fiber_as<true>(s) : next_fiber_as<false>(s);
}
#else
Fiber* next_fiber(Sched& s);
#endif

// While stopping: a started fiber that still has frames to unwind, else main.
inline Fiber* unwind_next(Sched& s) {
    for (int i = 0; i < s.nthreads; ++i) {
        Fiber& f = s.fibers[i];
        if (f.started && f.st != St::Exited && f.st != St::Running) return &f;
    }
    return &s.main;
}

inline void switch_to(Sched& s, Fiber* from, Fiber* to) {
    s.cur = to;
#if MPK_SIMT_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake, to->stack_lo, to->stack_size);
#endif
    // From here to the switch TSan counts accesses as the target fiber's: read nothing more.
    void* target = to->sp;
    (void)target;
#if MPK_SIMT_TSAN
    __tsan_switch_to_fiber(to->tsan, 1 /* __tsan_switch_to_fiber_no_sync */);
#endif
#if MPK_SIMT_UCONTEXT
    swapcontext(&from->uc, &to->uc);
#else
    mpk_simt_switch_v1(&from->sp, target);
#endif
#if MPK_SIMT_ASAN
    __sanitizer_finish_switch_fiber(from->asan_fake, nullptr, nullptr);
#endif
}

// Block the running fiber (its state already says why) until it is scheduled again.
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void block(Sched& s, Fiber* self) {
    if (s.aborting) {
        self->st = St::Running;
        if (std::uncaught_exceptions()) return;  // a destructor during unwinding: do not switch
        throw Cancel{};
    }
    self->atomics = 0;
    if (__builtin_expect(s.async_pending != 0, 0)) s.async_tick(s, self);  // a moment for copies in flight to land
    Fiber* next = next_fiber(s);
    if (next == nullptr) {  // deadlock: recorded
        self->st = St::Running;
        throw Cancel{};
    }
    if (next != self) switch_to(s, self, next);
    if (s.aborting) {
        self->st = St::Running;
        if (std::uncaught_exceptions()) return;
        throw Cancel{};
    }
}
#else
void block(Sched& s, Fiber* self);
#endif

// A fiber's last switch: its stack is never resumed (ASan drops its fake stack).
[[noreturn]] MPK_SIMT_NO_TSAN inline void exit_to(Sched& s, Fiber* self, Fiber* to) {
    s.cur = to;
#if MPK_SIMT_ASAN
    __sanitizer_start_switch_fiber(nullptr, to->stack_lo, to->stack_size);
#endif
    (void)self;
    void* target = to->sp;
    void* tsan_to = to->tsan;
    (void)target;
    (void)tsan_to;
#if MPK_SIMT_TSAN
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);  // leave the pooled TSan fiber balanced
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    __tsan_switch_to_fiber(tsan_to, 1);
#endif
#if MPK_SIMT_UCONTEXT
    setcontext(&to->uc);
#else
    mpk_simt_switch_v1(&tl.dead_sp, target);
#endif
    __builtin_unreachable();
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
[[noreturn]] MPK_SIMT_NO_TSAN MPK_SIMT_SLOW void on_exit(Sched& s, Fiber* self) {
    const int t = int(self->tid.x), lane = t & 31;
    Warp& w = s.warps[t >> 5];
    self->st = St::Exited;
    ++s.exited;
    w.alive &= ~(1u << lane);
    if (!s.aborting) {
        for (uint32_t m = w.waiting; m; m &= m - 1) {
            Fiber& o = s.fibers[(t & ~31) + __builtin_ctz(m)];
            if (o.mask & (1u << lane)) {
                fail_record(s, thread_name(self) + " exited while " + thread_name(&o) + " waits for it at " +
                                   op_name(o.op) + " " + site(o.file, o.line) + " (mask " + hex(o.mask) + ")");
                break;
            }
        }
    }
    Fiber* next = s.aborting ? unwind_next(s) : next_fiber(s);
    if (next == nullptr) next = unwind_next(s);
    exit_to(s, self, next);
}
#else
[[noreturn]] void on_exit(Sched& s, Fiber* self);
#endif

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_NO_TSAN MPK_SIMT_SLOW void fiber_main(void* arg) {
    Fiber* self = static_cast<Fiber*>(arg);
    Sched* sp;
    {
        TsanIgnore ignore;
#if MPK_SIMT_ASAN
        const void* bottom = nullptr;
        size_t size = 0;
        __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
        if (!tl.s->main.stack_lo) {  // the first fiber of a block starts from run_block's stack
            tl.s->main.stack_lo = static_cast<char*>(const_cast<void*>(bottom));
            tl.s->main.stack_size = size;
        }
#endif
        sp = tl.s;
        tsan_acquire(&sp->cell_start);
    }
    Sched& s = *sp;
    if (!s.aborting) {
        try {
            s.fn(s.arg);
            if (s.async_pending) s.async_done(s, self, "exits");  // an exit with copies in flight is named
        } catch (const Cancel&) {
        } catch (const Error& e) {
            TsanIgnore ignore;
            fail_record(s, e.what());
        } catch (const std::exception& e) {
            TsanIgnore ignore;
            fail_record(s, thread_name(self) + " threw: " + e.what());
        } catch (...) {
            TsanIgnore ignore;
            fail_record(s, thread_name(self) + " threw an exception not derived from std::exception");
        }
    }
#if MPK_SIMT_TSAN
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);  // ended in exit_to
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
    tsan_release(&s.cell_end);
    on_exit(s, self);
}
#endif  // (declared above)
#if MPK_SIMT_UCONTEXT
inline void fiber_main_uc() { fiber_main(tl.s->cur); }
#endif
}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
