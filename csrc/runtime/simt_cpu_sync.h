// simt_cpu_sync.h: barriers (__syncthreads and its _count/_and/_or forms, the executor's
// task_barrier) and warp collectives (__syncwarp, shuffles, votes, match, reduce): arrival,
// completion, the checks and their messages, the deadlock diagnosis; __nanosleep's yield and
// the atomics' spin yield. Part of runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_sync.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <string>
#include <type_traits>
#include "simt_cpu_sched.h"
#include "simt_cpu_tls.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {
// ---- barriers

// A barrier completes when every thread arrived, all at one call site. Anything else is found
// when nothing can run (next_fiber -> diagnose). With `poison`, its completion also refills the
// static __shared__ arrays with 0xFF (simt_cpu_tls.h), and the dynamic shared memory if a thread
// took it since the last fill (the executor's barrier
// after each task: no thread runs while the last one to arrive fills it; TSan ignores the fill,
// as it ignores the whole barrier, and the release/acquire per generation orders the rest).
inline int barrier_on(Sched& s, Op op, int pred, const char* file, int line, bool poison = false,
                      bool task_end = false) {
    Fiber* self = s.cur;
    TsanIgnore ignore;
    if (s.aborting) { block(s, self); return 0; }
    const uint64_t gen = s.bar_gen;
    tsan_release(&s.cell_bar[gen & 1]);
    self->st = St::Barrier;
    self->op = op;
    self->file = file;
    self->line = line;
    if (s.at_barrier++ == 0) {
        s.bar_file = file;
        s.bar_line = line;
        s.bar_divergent = false;
        s.bar_true = 0;
    } else if (!same_site(file, line, s.bar_file, s.bar_line)) {
        s.bar_divergent = true;
    }
    s.bar_true += pred != 0;
    if (s.at_barrier == s.nthreads) {
        if (s.bar_divergent) fail(s, diagnose(s));
        s.bar_result = op == Op::SyncCount ? s.bar_true
                     : op == Op::SyncAnd   ? int(s.bar_true == s.nthreads)
                     : op == Op::SyncOr    ? int(s.bar_true > 0) : 0;
        ++s.bar_gen;
        s.at_barrier = 0;
        if (task_end && s.mbar_ready) {  // a task's mbarriers are its own (simt_cpu_mbarrier.h)
            const std::string unbalanced = s.mbar_end(s);
            if (!unbalanced.empty()) fail(s, unbalanced);
            s.mbar_ready = false;
        }
        if (poison) {
            if (s.watch_addr) watch_check(s, self);  // this thread's segment, then the poison, which no thread wrote
#if MPK_SIMT_STATIC_POISON
            poison_static_shared(s);
#endif
            if (s.smem_touched) {
                memset(s.smem, 0xFF, s.smem_bytes);
                s.smem_touched = false;
            }
            if (s.watch_addr) memcpy(s.watch_copy, s.watch_addr, s.watch_bytes);
        }
        if (task_end && s.async_task_end) s.async_task_end(s);
        // (each fiber's st stays Barrier until take() runs it: a store per fiber here would
        // touch 128 cache lines per barrier for nothing; diagnose() only runs when no lane is ready)
        for (int w = 0; w < s.nwarps; ++w) s.warps[w].ready = 0xFFFFFFFFu;
        s.ready_warps = 0xFFFFFFFFu >> (32 - s.nwarps);
        s.cur_warp = -1;  // a random warp goes first
    }
    block(s, self);
    tsan_acquire(&s.cell_bar[gen & 1]);
    return s.bar_result;
}
inline int barrier(Op op, int pred, const char* file, int line) {
    Sched* s = tl.s;
    if (!s) outside(op_name(op));
    return barrier_on(*s, op, pred, file, line);
}

// ---- warp collectives

inline bool same_collective(const Fiber& a, const Fiber& b) {
    return a.op == b.op && a.mask == b.mask && a.width == b.width &&
           (a.op == Op::Syncwarp || same_site(a.file, a.line, b.file, b.line));
}

// Every lane of `mask` has arrived at the same collective: compute each lane's result.
inline void complete(Sched& s, Fiber* lanes, uint32_t mask) {
    const Fiber& f0 = lanes[__builtin_ctz(mask)];
    const Op op = f0.op;
    switch (op) {
    case Op::MmaK16Bf16: case Op::MmaK16F16: case Op::MmaK8Bf16: case Op::MmaK8F16: case Op::MmaK32E4m3:
    case Op::LdmX1: case Op::LdmX2: case Op::LdmX4: case Op::LdmX1T: case Op::LdmX2T: case Op::LdmX4T:
    case Op::StmX1: case Op::StmX2: case Op::StmX4: case Op::StmX1T: case Op::StmX2T: case Op::StmX4T:
    case Op::Wgmma: case Op::WgmmaFence: case Op::WgmmaCommit: case Op::WgmmaWait:
    {   // the whole warp (the wrappers' mask). What a lane brings starts with the function that completes
        // the instruction (simt_cpu_ptx.h's MatrixLane): a module that uses none compiles none of them.
        void (*fn)(Sched&, Fiber*, Op);
        memcpy(&fn, reinterpret_cast<const void*>(uintptr_t(f0.in)), sizeof fn);
        fn(s, lanes, op);
        break;
    }
    case Op::ShflIdx: case Op::ShflUp: case Op::ShflDown: case Op::ShflXor: {
        const int segmask = 32 - f0.width;  // PTX shfl.sync: c[12:8]
        for (uint32_t m = mask; m; m &= m - 1) {
            const int lane = __builtin_ctz(m);
            Fiber& f = lanes[lane];
            const int b = f.arg & 31, lo = lane & segmask, hi = lo | (31 & ~segmask);
            int j;
            bool ok;
            switch (op) {
            case Op::ShflUp: j = lane - b; ok = j >= lo; break;
            case Op::ShflDown: j = lane + b; ok = j <= hi; break;
            case Op::ShflXor: j = lane ^ b; ok = j <= hi; break;
            default: j = lo | (b & ~segmask); ok = true; break;
            }
            if (!ok) j = lane;
            // a lane outside the mask does not take part: its value is undefined (poison)
            f.out = (mask >> j) & 1 ? lanes[j].in : ~uint64_t(0);
        }
        break;
    }
    case Op::MatchAny:
        for (uint32_t m = mask; m; m &= m - 1) {
            Fiber& f = lanes[__builtin_ctz(m)];
            uint32_t r = 0;
            for (uint32_t n = mask; n; n &= n - 1)
                if (lanes[__builtin_ctz(n)].in == f.in) r |= 1u << __builtin_ctz(n);
            f.out = r;
        }
        break;
    default: {
        uint32_t ballot = 0, and_u = ~0u, or_u = 0, xor_u = 0, min_u = ~0u, max_u = 0;
        int32_t min_i = INT32_MAX, max_i = INT32_MIN;
        uint32_t add_u = 0;
        bool all_equal = true;
        for (uint32_t m = mask; m; m &= m - 1) {
            const Fiber& f = lanes[__builtin_ctz(m)];
            const uint32_t v = uint32_t(f.in);
            ballot |= (f.in != 0 ? 1u : 0u) << __builtin_ctz(m);
            and_u &= v; or_u |= v; xor_u ^= v; add_u += v;
            min_u = v < min_u ? v : min_u; max_u = v > max_u ? v : max_u;
            min_i = int32_t(v) < min_i ? int32_t(v) : min_i; max_i = int32_t(v) > max_i ? int32_t(v) : max_i;
            all_equal = all_equal && f.in == f0.in;
        }
        uint64_t r = 0;
        switch (op) {
        case Op::Ballot: r = ballot; break;
        case Op::Any: r = ballot != 0; break;
        case Op::All: r = ballot == mask; break;
        case Op::MatchAll: r = all_equal ? (uint64_t(1) << 32) | mask : 0; break;
        case Op::RedAddU: r = add_u; break;
        case Op::RedMinU: r = min_u; break;
        case Op::RedMaxU: r = max_u; break;
        case Op::RedMinI: r = uint32_t(min_i); break;
        case Op::RedMaxI: r = uint32_t(max_i); break;
        case Op::RedAnd: r = and_u; break;
        case Op::RedOr: r = or_u; break;
        case Op::RedXor: r = xor_u; break;
        default: break;  // __syncwarp
        }
        for (uint32_t m = mask; m; m &= m - 1) lanes[__builtin_ctz(m)].out = r;
    }
    }
    uint32_t par = 0;
    if (op == Op::Syncwarp)
        for (uint32_t m = mask; m; m &= m - 1) par |= (lanes[__builtin_ctz(m)].par & 1u) << __builtin_ctz(m);
    for (uint32_t m = mask; m; m &= m - 1) {
        Fiber& f = lanes[__builtin_ctz(m)];
        f.sync_mask = op == Op::Syncwarp ? mask : 0;
        f.sync_par = par;
        make_ready(s, &f);
    }
}

// The calling lane arrives at collective `op` with `mask`; returns its result once every lane
// of the mask has arrived at the same call site with the same mask (and width).
inline uint64_t collective(Op op, uint32_t mask, uint64_t in, int arg, int width, const char* file, int line) {
    Sched* sp = tl.s;
    if (!sp) outside(op_name(op));
    Sched& s = *sp;
    Fiber* self = s.cur;
    TsanIgnore ignore;
    if (s.aborting) { block(s, self); return 0; }
    const int t = int(self->tid.x), lane = t & 31;
    const uint32_t bit = 1u << lane;
    Warp& w = s.warps[t >> 5];
    Fiber* lanes = &s.fibers[t & ~31];
    auto where = [&] { return std::string(op_name(op)) + " at " + site(file, line); };
    if (!(mask & bit))
        fail(s, where() + ": mask " + hex(mask) + " does not include the calling " + thread_name(self));
    if (mask & ~w.alive)
        fail(s, where() + " by " + thread_name(self) + ": mask " + hex(mask) + " names lanes " +
                    hex(mask & ~w.alive) + " of warp " + std::to_string(t / 32) + " that have exited");
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(s, where() + ": width " + std::to_string(width) + " is not a power of two in [1, 32]");
    self->op = op;
    self->mask = mask;
    self->in = in;
    self->arg = arg;
    self->width = width;
    self->file = file;
    self->line = line;
    if (op == Op::Syncwarp) {
        ++self->par;
        tsan_release(&s.cell_lane[2 * t + (self->par & 1)]);
    }
    if (const uint32_t there = w.waiting & mask) {  // one lane already waiting: the same collective?
        const Fiber& o = lanes[__builtin_ctz(there)];
        if (!same_collective(o, *self) && (o.mask & bit))
            fail(s, "mismatched warp collectives in warp " + std::to_string(t / 32) + ": " + thread_name(self) +
                        " at " + op_name(op) + " " + site(file, line) + " (mask " + hex(mask) + ", width " +
                        std::to_string(width) + "), " + thread_name(&o) + " at " + op_name(o.op) + " " +
                        site(o.file, o.line) + " (mask " + hex(o.mask) + ", width " + std::to_string(o.width) + ")");
    }
    self->st = St::Warp;
    w.waiting |= bit;
    if (!(mask & ~w.waiting)) {
        bool all = true;
        for (uint32_t m = mask; m && all; m &= m - 1) all = same_collective(lanes[__builtin_ctz(m)], *self);
        if (all) {
            w.waiting &= ~mask;
            complete(s, lanes, mask);  // every lane of the mask ready, this one included
        }
    }
    block(s, self);
    if (op == Op::Syncwarp)
        for (uint32_t m = self->sync_mask; m; m &= m - 1) {
            const int l = __builtin_ctz(m);
            tsan_acquire(&s.cell_lane[2 * ((t & ~31) + l) + ((self->sync_par >> l) & 1)]);
        }
    return self->out;
}

// Nothing can run and not every thread has exited: say who waits where.
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW std::string diagnose(Sched& s) {
    struct Group { std::string what; int count; bool barrier; };
    Group groups[64];
    int ngroups = 0, extra = 0;
    bool any_barrier = false;
    for (int i = 0; i < s.nthreads; ++i) {
        const Fiber& f = s.fibers[i];
        std::string what;
        if (f.st == St::Barrier) {
            what = site(f.file, f.line);
            any_barrier = true;
        } else if (f.st == St::Warp) {
            what = std::string(op_name(f.op)) + " " + site(f.file, f.line) + " (warp " + std::to_string(i / 32) +
                   ", mask " + hex(f.mask) + ")";
        } else {
            continue;
        }
        int g = 0;
        while (g < ngroups && groups[g].what != what) ++g;
        if (g == ngroups) {
            if (ngroups == 64) { ++extra; continue; }
            groups[ngroups++] = Group{what, 0, f.st == St::Barrier};
        }
        ++groups[g].count;
    }
    std::string msg = any_barrier ? "divergent __syncthreads: " : "deadlock in warp collectives: ";
    bool first = true;
    for (int k = 0; k < 2 * ngroups; ++k) {  // the barriers first, then the warp collectives
        const int g = k % ngroups;
        const bool bar = groups[g].barrier;
        if (bar != (k < ngroups)) continue;
        if (!first) msg += ", ";
        if (bar && first) {
            msg += groups[g].what + " reached by " + std::to_string(groups[g].count) + " of " + std::to_string(s.nthreads) +
                   " threads";
        } else if (bar) {
            msg += groups[g].what + " by " + std::to_string(groups[g].count);
        } else {
            msg += std::to_string(groups[g].count) + " wait at " + groups[g].what;
        }
        first = false;
    }
    if (extra) msg += ", " + std::to_string(extra) + " more elsewhere";
    if (s.exited) msg += (first ? "" : ", ") + std::to_string(s.exited) + " exited";
    return msg;
}
#else
std::string diagnose(Sched& s);
#endif

template <class T> inline uint64_t to_bits(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "a 1-, 2-, 4- or 8-byte value");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    return u;
}
template <class T> inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof(T));
    return v;
}

inline void yield_now() {
    Sched* sp = tl.s;
    if (!sp) outside("__nanosleep");
    Sched& s = *sp;
    Fiber* self = s.cur;
    TsanIgnore ignore;
    const int t = int(self->tid.x);
    self->st = St::Yielded;
    s.warps[t >> 5].yielded |= 1u << (t & 31);
    ++s.yielded;
    block(s, self);
}
// Atomics are not scheduling points, but a spin on one must not hang the block.
inline void atomic_tick() {
    Sched* s = tl.s;
    if (s && s->cur != &s->main && ++s->cur->atomics >= kSpinAtomics) yield_now();
}
// Between an emulated atomic's load and its compare-and-swap (simt_cpu_cuda.h: atomicCAS, whose load
// is the kernel's previous read of the word, and the CAS loops of the float and min/max RMWs), when
// the block contends (Block::contend: the executor's workers under schedule jitter): about half the
// time a pause of 1 to 64 us, drawn from the thread's own xorshift (seeded from the block's seed).
// The whole OS thread sleeps (its fibers with it), so other workers run and their updates of the
// same word land inside the window: a lost update or a missing retry becomes a wrong value, where
// the collision window of a plain run is a few nanoseconds that the jitter's task delays never hit.
inline void atomic_window() {
    Sched* s = tl.s;
    if (!s || !s->contend || s->cur == &s->main) return;
    uint64_t x = s->cur->contend_rng;  // its own fiber's: no other thread touches it
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s->cur->contend_rng = x;
    if (x & 1) return;
    struct timespec ts = {0, long(1 + (x >> 8) % 64) * 1000};
    nanosleep(&ts, nullptr);
}
}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
