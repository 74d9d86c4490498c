// simt_cpu_async.h: cp.async on the CPU (runtime/ptx.h names the instructions): copies from global
// to shared memory that really are asynchronous, their groups, and the checks no GPU tool has.
// Part of runtime/simt_cpu.h (docs/simt.md, "Asynchronous copies").
//
// A copy is issued by one thread: its destination bytes are filled with the in-flight poison (0xFF,
// NaN in every float dtype) and marked in flight in a shadow (one flag per 4-byte word of shared
// memory). cp.async.commit_group closes the thread's open copies into its next group; a group lands
// (the source is read, the destination written, zero-filled past src-size, the flags cleared) at a
// moment the block's seed draws between its commit and the cp.async.wait_group that covers it:
//   mode 0, "at commit": every group lands as it is committed;
//   mode 1, "at the wait": no group lands before the wait that covers it;
//   mode 2, "on the way": at each blocking point of its thread (a barrier, a warp collective, a
//           __nanosleep) each of its committed groups lands with probability 1/2, the rest at the wait.
// So a kernel that reads a tile before its wait sees the poison under mode 1 and the data under
// mode 0: its result depends on the seed, which the tests' several seeds show.
// Named errors (mpk::simt::Error, with the call sites): a destination outside shared memory, a
// source in shared memory or on the thread's stack, a misaligned address, src-size > cp-size, a copy
// onto bytes still in flight; an ldmatrix row over bytes in flight (simt_cpu_ptx.h); bytes in flight
// written by a thread (found when the copy lands: they no longer hold the poison); a thread that
// ends its task or exits with copies in flight.
// What cannot be named is a plain C++ load of bytes in flight (it is not instrumented): it reads
// the poison on the seeds that land late, so the result is wrong there (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_async.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <string.h>
#include <string>
#include <vector>
#include "simt_cpu_sync.h"
#include "simt_cpu_tls.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

constexpr unsigned char kInFlight = 0xFF;     // what a destination holds until its copy lands
constexpr uint32_t kOpen = 0xFFFFFFFFu;       // the group of a copy not yet committed
constexpr uint32_t kBulk = 0xFFFFFFFEu;       // a bulk tensor copy (simt_cpu_tma.h): lands on its mbarrier

struct AsyncCopy {
    char* dst;
    const char* src;
    uint32_t bytes, src_bytes;  // cp-size, src-size (the rest of dst is zero-filled)
    uint32_t group;             // the thread's group number, kOpen until committed
    const char* file;           // where it was issued
    int line;
    const char* form;           // "cp.async.cg.shared.global"
    int32_t bulk = -1;          // a bulk tensor copy's record in Async::tma
};
struct AsyncThread {
    std::vector<AsyncCopy> copies;  // in flight, in issue order
    uint32_t committed = 0;         // groups committed so far
};
struct Async {
    std::vector<AsyncThread> threads;
    std::vector<uint8_t> dyn;       // in-flight flag per 4-byte word of the dynamic shared memory
    std::vector<uint8_t> stat;      // ... of the static __shared__ arrays (this module's TLS block)
    int mode = 0;                   // 0 at commit, 1 at the wait, 2 on the way (above)
    uint64_t rng = 1;
    // bulk tensor copies (simt_cpu_tma.h): their state, and its functions (set by the first TMA instruction)
    struct Tma* tma = nullptr;
    void (*land_bulk)(Sched& s, Async& a, int thread, const AsyncCopy& c) = nullptr;  // a load lands
    void (*land_on)(Sched& s, const char* bar) = nullptr;  // every load completing on mbarrier `bar`
    void (*tma_tick)(Sched& s, Fiber* self) = nullptr;      // self's stores at its blocking point (mode 2)
    void (*tma_done)(Sched& s, Fiber* self, const char* what) = nullptr;  // self's stores as it ends
    void (*tma_reset)(struct Tma* t, int threads) = nullptr;  // a new block
    void (*tma_free)(struct Tma* t) = nullptr;
    // wgmma (simt_cpu_wgmma.h): its state and functions (set by the first wgmma instruction)
    struct Wgmma* wgmma = nullptr;
    void (*wgmma_reset)(struct Wgmma* w, int threads) = nullptr;
    void (*wgmma_free)(struct Wgmma* w) = nullptr;
    void (*wgmma_done)(Sched& s, Fiber* self, const char* what) = nullptr;  // self's warp's ops as it ends
    std::string (*wgmma_reading)(Sched& s, const char* p, size_t n) = nullptr;  // the op in flight reading [p, p + n)
    ~Async() {
        if (tma) tma_free(tma);
        if (wgmma) wgmma_free(wgmma);
    }
};
inline void async_free(Async* a) { delete a; }
void async_tick(Sched& s, Fiber* self);  // (defined below, as fiber_main is: simt_cpu_sched.h)
void async_thread_done(Sched& s, Fiber* self, const char* what);

// The block's copy state, set up by its first cp.async instruction. The mode comes from the
// block's schedule stream drawn once more (the stream itself is untouched).
inline Async& async_of(Sched& s) {
    if (!s.async) {
        s.async = new Async;
        s.async_tick = &async_tick;
        s.async_done = &async_thread_done;
        s.async_free = &async_free;
    }
    Async& a = *s.async;
    if (!s.async_ready) {
        s.async_ready = true;
        a.threads.assign(size_t(s.nthreads), AsyncThread{});
        a.dyn.assign(s.smem_bytes / 4 + 1, 0);
        a.stat.clear();
        a.rng = ::mpk::splitmix64(s.rng ^ 0x9E3779B97F4A7C15ull) | 1;
        if (a.tma) a.tma_reset(a.tma, s.nthreads);
        if (a.wgmma) a.wgmma_reset(a.wgmma, s.nthreads);
        a.mode = int((a.rng >> 33) % 3);
    }
    return a;
}
// The in-flight flag of the 4-byte word at p, or null when p is not in the block's shared memory.
inline uint8_t* in_flight_flag(Sched& s, Async& a, const void* p) {
    const char* c = static_cast<const char*>(p);
    if (s.smem && c >= s.smem && c < s.smem + s.smem_bytes) return &a.dyn[size_t(c - s.smem) / 4];
    if (__builtin_expect(!s.tls_lo, 0)) find_tls_block(s);
    const bool in_tls = c >= s.tls_lo && c < s.tls_hi && !(c >= s.tls_skip_lo && c < s.tls_skip_hi);
    if (!in_tls) return nullptr;
    if (a.stat.empty()) a.stat.assign(size_t(s.tls_hi - s.tls_lo) / 4 + 1, 0);
    return &a.stat[size_t(c - s.tls_lo) / 4];
}
// [p, p + n) lies in one shared-memory region (dynamic, or static less the emulation's own state).
inline bool in_shared(Sched& s, const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    if (s.smem && c >= s.smem && n <= s.smem_bytes && c <= s.smem + s.smem_bytes - n) return true;
    if (__builtin_expect(!s.tls_lo, 0)) find_tls_block(s);
    const bool lo = c >= s.tls_lo && c + n <= s.tls_skip_lo, hi = c >= s.tls_skip_hi && c + n <= s.tls_hi;
    return n && (lo || hi);
}
inline std::string ptr_text(const void* p) {
    char b[32];
    snprintf(b, sizeof b, "%p", p);
    return b;
}
inline std::string shared_text(const Sched& s) {
    return "the block's dynamic shared memory is [" + ptr_text(s.smem) + ", " + ptr_text(s.smem + s.smem_bytes) + ")";
}
inline std::string copy_text(const AsyncCopy& c, int thread) {
    return std::string(c.form) + " " + std::to_string(c.bytes) + " bytes at " + site(c.file, c.line) + " by threadIdx.x " +
           std::to_string(thread) +
           (c.group == kOpen   ? " (not committed)"
            : c.group == kBulk ? " (completing on its mbarrier)"
                               : " (group " + std::to_string(c.group) + ")");
}
// What a read of bytes copy c still writes must wait for (the message's end).
inline const char* wait_for(const AsyncCopy& c) {
    return c.group == kBulk ? "its mbarrier has not been waited on (mbarrier.try_wait.parity)"
                            : "its group has not been waited for (cp.async.wait_group)";
}
// The copy in flight (of any thread) that writes the 4-byte word at p; null if none.
inline const AsyncCopy* copy_over(Sched& s, const void* p, int* thread) {
    const char* c = static_cast<const char*>(p);
    for (size_t t = 0; t < s.async->threads.size(); ++t)
        for (const AsyncCopy& k : s.async->threads[t].copies)
            if (c + 4 > k.dst && c < k.dst + k.bytes) {
                *thread = int(t);
                return &k;
            }
    return nullptr;
}
// The copy in flight over any of [p, p + n) (which lies in one shared-memory region), or null.
inline const AsyncCopy* in_flight(Sched& s, const void* p, size_t n, int* thread) {
    if (!s.async_pending) return nullptr;
    const char* c = static_cast<const char*>(p);
    const char* w0 = c - (uintptr_t(c) & 3);
    const uint8_t* f = in_flight_flag(s, *s.async, w0);
    if (!f) return nullptr;
    for (size_t i = 0; w0 + 4 * i < c + n; ++i)
        if (f[i]) return copy_over(s, w0 + 4 * i, thread);
    return nullptr;
}

// [p, p + n): 4-byte aligned, in one shared-memory region (cp.async's destinations are).
inline void set_flags(Sched& s, Async& a, const char* p, size_t n, uint8_t v) {
    memset(in_flight_flag(s, a, p), v, n / 4);
}

// The copy lands: its destination must still hold the poison (a thread wrote it otherwise).
inline void land(Sched& s, Async& a, int thread, const AsyncCopy& c) {
    if (c.group == kBulk) return a.land_bulk(s, a, thread, c);
    set_flags(s, a, c.dst, c.bytes, 0);
    --s.async_pending;
    uint64_t q[2] = {0, 0};
    memcpy(q, c.dst, c.bytes);  // 4, 8 or 16 bytes
    const uint64_t all = ~uint64_t(0) >> (c.bytes >= 8 ? 0 : 32), hi = c.bytes == 16 ? ~uint64_t(0) : 0;
    static_assert(kInFlight == 0xFF, "the check below compares words with all ones");
    if (q[0] != all || q[1] != hi)
        for (uint32_t i = 0; i < c.bytes; ++i)
            if (uint8_t(c.dst[i]) != kInFlight)
                fail(s, "shared memory [" + ptr_text(c.dst) + ", " + ptr_text(c.dst + c.bytes) + ") of " +
                            copy_text(c, thread) + " was written while the copy was in flight (seen as it landed: " +
                            "byte " + std::to_string(i) + " no longer holds the in-flight poison); wait for its group "
                            "first");
    memcpy(c.dst, c.src, c.src_bytes);
    memset(c.dst + c.src_bytes, 0, c.bytes - c.src_bytes);
}
// Lands the copies of `thread` for which keep(copy) is false, in issue order.
template <class Keep> inline void land_where(Sched& s, int thread, Keep keep) {
    Async& a = *s.async;
    std::vector<AsyncCopy>& v = a.threads[size_t(thread)].copies;
    size_t out = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        if (keep(v[i])) {
            v[out++] = v[i];
        } else {
            const AsyncCopy c = v[i];
            land(s, a, thread, c);
        }
    }
    v.resize(out);
}

// ---- the instructions (runtime/ptx.h)

// The block running the calling fiber, for instruction `what` (outside one: the emulation's error).
inline Sched& issuing_block(const char* what) {
    Sched* sp = tl.s;
    if (!sp || sp->cur == &sp->main) outside(what);
    return *sp;
}

// A copy's destination [d, d + n) must not be what a wgmma in flight still reads (simt_cpu_wgmma.h): who()
// names the copy (built only for the message).
template <class Who> inline void refill_checked(Sched& s, Async& a, Who who, const char* d, size_t n) {
    if (!a.wgmma_reading) return;
    const std::string r = a.wgmma_reading(s, d, n);
    if (!r.empty())
        fail(s, who() + ": the destination [" + ptr_text(d) + ", " + ptr_text(d + n) + ") is read by " + r +
                    ", not yet retired: a stage may be refilled only after the wgmma.wait_group that covers its wgmma");
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void cp_async(const char* form, void* dst, const void* src, uint32_t cp_size, uint32_t src_size,
                     const char* file, int line) {
    Sched& s = issuing_block(form);
    Fiber* self = s.cur;
    TsanIgnore ignore;
    const int t = int(self->tid.x);
    auto where = [&] { return std::string(form) + " at " + site(file, line) + " by " + thread_name(self); };
    const char* d = static_cast<const char*>(dst);
    const char* sr = static_cast<const char*>(src);
    if (!in_shared(s, dst, cp_size))
        fail(s, where() + ": the destination [" + ptr_text(d) + ", " + ptr_text(d + cp_size) +
                    ") is not in shared memory (" + shared_text(s) + ")");
    if (in_shared(s, src, 1) || (sr >= self->stack_lo && sr < self->stack_lo + self->stack_size))
        fail(s, where() + ": the source " + ptr_text(sr) + " is not in global memory (it is in " +
                    (in_shared(s, src, 1) ? "shared memory" : "the thread's local memory, its stack") + ")");
    if (uintptr_t(d) % cp_size || uintptr_t(sr) % cp_size)
        fail(s, where() + ": " + (uintptr_t(d) % cp_size ? "the destination " + ptr_text(d) : "the source " + ptr_text(sr)) +
                    " is not aligned to the copy's " + std::to_string(cp_size) + " bytes");
    if (src_size > cp_size)
        fail(s, where() + ": src-size " + std::to_string(src_size) + " exceeds cp-size " + std::to_string(cp_size));
    Async& a = async_of(s);
    int other = -1;
    if (const AsyncCopy* o = in_flight(s, d, cp_size, &other))
        fail(s, where() + ": the destination [" + ptr_text(d) + ", " + ptr_text(d + cp_size) +
                    ") overlaps bytes still in flight from " + copy_text(*o, other));
    refill_checked(s, a, where, d, cp_size);
    memset(dst, kInFlight, cp_size);
    set_flags(s, a, d, cp_size, 1);
    a.threads[size_t(t)].copies.push_back(AsyncCopy{const_cast<char*>(d), sr, cp_size, src_size, kOpen, file, line, form});
    ++s.async_pending;
}
#else
void cp_async(const char* form, void* dst, const void* src, uint32_t cp_size, uint32_t src_size,
              const char* file, int line);
#endif

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void cp_async_commit_group(const char* file, int line) {
    Sched& s = issuing_block("cp.async.commit_group");
    TsanIgnore ignore;
    (void)file;  // (a failure while landing names the copy's own call site)
    (void)line;
    Async& a = async_of(s);  // an empty group counts too (wait_group's n counts groups)
    AsyncThread& th = a.threads[s.cur->tid.x];
    const uint32_t g = th.committed++;
    for (AsyncCopy& c : th.copies)
        if (c.group == kOpen) c.group = g;
    if (a.mode == 0) land_where(s, int(s.cur->tid.x), [&](const AsyncCopy& c) { return c.group != g; });
}
#else
void cp_async_commit_group(const char* file, int line);
#endif

// Every committed group of the thread but the n most recent has landed when it returns.
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void cp_async_wait_group(int n, const char* file, int line) {
    Sched& s = issuing_block("cp.async.wait_group");
    TsanIgnore ignore;
    (void)file;  // (a failure while landing names the copy's own call site)
    (void)line;
    if (!s.async_pending) return;
    Async& a = *s.async;
    const uint32_t committed = a.threads[s.cur->tid.x].committed;
    land_where(s, int(s.cur->tid.x), [&](const AsyncCopy& c) {
        return c.group == kOpen || c.group == kBulk || c.group + uint32_t(n) >= committed;
    });
}
#else
void cp_async_wait_group(int n, const char* file, int line);
#endif

// At a blocking point of `self` (block(), simt_cpu_sched.h), in mode 2: each committed group lands by a draw.
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void async_tick(Sched& s, Fiber* self) {
    if (self == &s.main) return;
    Async& a = *s.async;
    if (a.mode != 2) return;
    if (a.tma) a.tma_tick(s, self);
    AsyncThread& th = a.threads[self->tid.x];
    if (th.copies.empty()) return;
    uint32_t lands = 0;  // bit g % 32: group g lands now (the groups in flight are fewer than 32 apart)
    bool bulk = false;   // the thread's bulk copies: each by a draw of its own, below
    for (const AsyncCopy& c : th.copies) {
        bulk = bulk || c.group == kBulk;
        if (c.group == kOpen || c.group == kBulk) continue;
        a.rng ^= a.rng << 13;
        a.rng ^= a.rng >> 7;
        a.rng ^= a.rng << 17;
        if (a.rng & 1) lands |= 1u << (c.group % 32);
    }
    if (lands)
        land_where(s, int(self->tid.x), [&](const AsyncCopy& c) {
            return c.group == kOpen || c.group == kBulk || !((lands >> (c.group % 32)) & 1);
        });
    if (bulk)
        land_where(s, int(self->tid.x), [&](const AsyncCopy& c) {
            if (c.group != kBulk) return true;
            a.rng ^= a.rng << 13;
            a.rng ^= a.rng >> 7;
            a.rng ^= a.rng << 17;
            return (a.rng & 1) == 0;
        });
}
#endif  // (declared above)

// The thread's task ended (the executor's run_task) or the thread is exiting: nothing may be in flight.
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void async_thread_done(Sched& s, Fiber* self, const char* what) {
    TsanIgnore ignore;
    if (s.async->tma) s.async->tma_done(s, self, what);
    if (s.async->wgmma) s.async->wgmma_done(s, self, what);
    const std::vector<AsyncCopy>& v = s.async->threads[self->tid.x].copies;
    if (v.empty()) return;
    throw Error(thread_name(self) + " " + what + " with " + std::to_string(v.size()) + " cp.async cop" +
                (v.size() == 1 ? "y" : "ies") + " in flight, the first " + copy_text(v[0], int(self->tid.x)) +
                (v[0].group == kBulk ? ": a wait on its mbarrier must see it land before the task ends"
                                     : ": a cp.async.wait_group / wait_all must cover every group before the task ends"));
}
#endif  // (declared above)

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
