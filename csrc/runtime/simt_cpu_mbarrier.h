// simt_cpu_mbarrier.h: mbarrier on the CPU (runtime/ptx.h names the instructions): the barrier object in
// shared memory that counts arrivals and transaction bytes and completes phase after phase, and the
// checks no GPU tool has. Part of runtime/simt_cpu.h (docs/simt.md, "mbarrier").
//
// State, per barrier (the PTX ISA, "Parallel Synchronization and Communication Instructions: mbarrier"):
// the arrival count C given to mbarrier.init, the pending arrivals of the current phase, the tx-count
// (expect_tx adds bytes, complete_tx takes them away) and the phase number, from 0. The current phase
// completes when its pending arrivals and its tx-count are both zero: the phase number grows by one,
// pending goes back to C. try_wait.parity p returns true when the phase of parity p that precedes the
// current one has completed, i.e. when the current phase's parity is not p; a false return is a
// scheduling point (the thread yields), so a wait loop lets the other threads run.
// The 8 bytes of the object hold a tag the emulation checks at every instruction, so an instruction
// on bytes that were never initialised (the shared-memory poison) or that a plain store overwrote is
// named, as is an address outside shared memory or not 8-byte aligned, an init over a live barrier,
// an arrival past the count, a counter outside the ISA's range, and a wait on an invalidated barrier.
// A wait that can never complete: when every live thread of the block is either blocked (a barrier, a
// warp collective) or has failed the same wait kMbarSpins times with no barrier changing, the block stops
// with the waits and each barrier's state (its phase, the arrivals and transaction bytes still to come;
// arrivals done but bytes outstanding are named as bytes that never balance), instead of spinning.
// ThreadSanitizer sees an arrive-on (and an expect_tx / complete_tx) as a release on the barrier and a wait
// that returns true as an acquire (the instructions' default .release / .acquire semantics).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_mbarrier.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <string.h>
#include <string>
#include <vector>
#include "simt_cpu_async.h"
#include "simt_cpu_sync.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

constexpr uint64_t kMbarTag = 0x4D504B4D42000000ull;  // "MPKMB" and the barrier's index in the low 24 bits
constexpr int64_t kMbarMax = (int64_t(1) << 20) - 1;  // the ISA's range of counts and tx-counts
// A thread is stuck when it has failed the same wait (barrier, parity, call site) this many times in a row
// with no barrier changing: a wait loop, not a probe (one false test_wait, then other work, is legal).
constexpr int kMbarSpins = 64;

struct MBar {
    const char* addr;
    uint32_t count;       // arrivals per phase (mbarrier.init)
    uint32_t pending;     // arrivals still to come in the current phase
    int64_t tx;           // transaction bytes outstanding in the current phase
    int64_t expected, completed;  // the current phase's expect_tx and complete_tx totals (for messages)
    uint64_t phase;       // the current phase, from 0
    bool valid;           // initialised, not invalidated
    const char* file;     // where it was initialised
    int line;
};
struct MWait {             // a thread's last failed wait
    uint64_t progress;     // MBars::progress + 1 at that wait (0: none)
    int fails;             // failed in a row at that progress, at this barrier, parity and site
    int bar;               // which barrier, which parity, where
    uint32_t parity;
    const char* form;
    const char* file;
    int line;
};
struct MBars {
    std::vector<MBar> bars;
    std::vector<MWait> waits;  // per thread
    uint64_t progress = 0;     // bumped by every change of any barrier
    int stuck = 0;             // threads that failed kMbarSpins times at the current progress
};
inline void mbar_free(MBars* m) { delete m; }
std::string mbar_end(Sched& s);  // (defined below)

// The block's barrier state, set up by its first mbarrier instruction.
inline MBars& mbars_of(Sched& s) {
    if (!s.mbar) {
        s.mbar = new MBars;
        s.mbar_free = &mbar_free;
        s.mbar_end = &mbar_end;
    }
    MBars& m = *s.mbar;
    if (!s.mbar_ready) {
        s.mbar_ready = true;
        m.bars.clear();
        m.waits.assign(size_t(s.nthreads), MWait{0, 0, -1, 0, nullptr, nullptr, 0});
        m.progress = 0;
        m.stuck = 0;
    }
    return m;
}
inline void mbar_progress(MBars& m) {
    ++m.progress;
    m.stuck = 0;
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW std::string mbar_text(Sched& s, const MBar& b) {
    const std::string where = s.smem && b.addr >= s.smem && b.addr < s.smem + s.smem_bytes
                                  ? "dynamic shared memory + " + std::to_string(b.addr - s.smem)
                                  : "static __shared__ " + ptr_text(b.addr);
    return "the mbarrier at " + where + " (mbarrier.init at " + site(b.file, b.line) + ", count " +
           std::to_string(b.count) + ")";
}
MPK_SIMT_SLOW std::string mbar_state(const MBar& b) {
    const std::string done = b.phase > 1 ? "phases 0-" + std::to_string(b.phase - 1) + " complete"
                             : b.phase ? "phase 0 complete" : "no phase complete yet";
    std::string r = "in phase " + std::to_string(b.phase) + " (parity " + std::to_string(b.phase & 1) + "; " + done +
                    "): " + std::to_string(b.pending) + " of " + std::to_string(b.count) +
                    " arrivals still to come, " + std::to_string(b.tx) + " transaction bytes outstanding (expect_tx " +
                    std::to_string(b.expected) + ", complete_tx " + std::to_string(b.completed) + ")";
    if (b.pending == 0 && b.tx != 0) r += ": every arrival is in, the transaction bytes never balance";
    return r;
}

// The barrier the 8 bytes at p are, for instruction `form` at file:line; a named error otherwise.
MPK_SIMT_SLOW MBar& mbar_at(Sched& s, MBars& m, const void* p, const char* form, const char* file, int line) {
    auto where = [&] { return std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur); };
    const char* c = static_cast<const char*>(p);
    if (!in_shared(s, p, 8))
        fail(s, where() + ": the barrier " + ptr_text(c) + " is not in shared memory (" + shared_text(s) + ")");
    if (uintptr_t(c) % 8) fail(s, where() + ": the barrier " + ptr_text(c) + " is not 8-byte aligned");
    uint64_t tag;
    memcpy(&tag, c, 8);
    const size_t i = size_t(tag & 0xFFFFFF);
    if ((tag & ~uint64_t(0xFFFFFF)) == kMbarTag && i < m.bars.size() && m.bars[i].addr == c) return m.bars[i];
    for (const MBar& b : m.bars)
        if (b.addr == c)
            fail(s, where() + ": " + mbar_text(s, b) + " was overwritten since (its 8 bytes were written by a plain "
                                                       "store: the barrier object is opaque)");
    fail(s, where() + ": no mbarrier.init'ed barrier at " + ptr_text(c) + " (its 8 bytes are not one)");
}
#else
std::string mbar_text(Sched& s, const MBar& b);
std::string mbar_state(const MBar& b);
MBar& mbar_at(Sched& s, MBars& m, const void* p, const char* form, const char* file, int line);
#endif

#if MPK_SIMT_DEFINE_SLOW_PATHS
// As the block or a task ends: a barrier whose phase holds transaction bytes (completed without an
// expect_tx, or announced and never completed) had its bytes miscounted, even when no wait hung on it.
MPK_SIMT_SLOW std::string mbar_end(Sched& s) {
    if (!s.mbar_ready) return "";
    for (const MBar& b : s.mbar->bars)
        if (b.valid && b.tx != 0)
            return mbar_text(s, b) + " ends " + (s.exited == s.nthreads ? "its block" : "its task") + " " + mbar_state(b) +
                   (b.tx < 0 ? ": more bytes completed on it than expect_tx announced" : ": bytes announced never came");
    return "";
}
#endif

// The current phase completes when nothing is left of it.
inline void mbar_settle(MBar& b) {
    if (b.pending == 0 && b.tx == 0) {
        ++b.phase;
        b.pending = b.count;
        b.expected = b.completed = 0;
    }
}

// ---- the instructions (runtime/ptx.h)

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void mbarrier_init(void* bar, uint32_t count, const char* file, int line) {
    const char* form = "mbarrier.init.shared::cta.b64";
    Sched& s = issuing_block(form);
    TsanIgnore ignore;
    MBars& m = mbars_of(s);
    auto where = [&] { return std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur); };
    const char* c = static_cast<const char*>(bar);
    if (!in_shared(s, bar, 8))
        fail(s, where() + ": the barrier " + ptr_text(c) + " is not in shared memory (" + shared_text(s) + ")");
    if (uintptr_t(c) % 8) fail(s, where() + ": the barrier " + ptr_text(c) + " is not 8-byte aligned");
    if (count < 1 || count > kMbarMax)
        fail(s, where() + ": count " + std::to_string(count) + " is outside [1, " + std::to_string(kMbarMax) + "]");
    size_t i = 0;
    while (i < m.bars.size() && m.bars[i].addr != c) ++i;
    if (i < m.bars.size() && m.bars[i].valid)
        fail(s, where() + ": " + mbar_text(s, m.bars[i]) + " is live, " + mbar_state(m.bars[i]) +
                    "; mbarrier.inval it before the bytes are initialised again");
    if (i == m.bars.size()) m.bars.push_back(MBar{});
    m.bars[i] = MBar{c, count, count, 0, 0, 0, 0, true, file, line};
    const uint64_t tag = kMbarTag | i;
    memcpy(bar, &tag, 8);
    mbar_progress(m);
}

// The barrier at `bar` for instruction `form` (mbar_at), which must not have been invalidated.
MPK_SIMT_SLOW MBar& live_mbar(Sched& s, MBars& m, void* bar, const char* form, const char* file, int line) {
    MBar& b = mbar_at(s, m, bar, form, file, line);
    if (!b.valid)
        fail(s, std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur) + ": " + mbar_text(s, b) +
                    " was invalidated (mbarrier.inval)");
    return b;
}

// delta transaction bytes on the current phase (expect_tx: > 0, complete_tx: < 0), within the ISA's range;
// `who` names the instruction or the copy for the message. A release, as an arrive-on is.
MPK_SIMT_SLOW void mbar_add_tx(Sched& s, MBar& b, int64_t delta, const std::string& who) {
    if (delta > kMbarMax || -delta > kMbarMax || b.tx + delta > kMbarMax || b.tx + delta < -kMbarMax)
        fail(s, who + ": " + std::to_string(delta < 0 ? -delta : delta) + " bytes take the tx-count outside [-" +
                    std::to_string(kMbarMax) + ", " + std::to_string(kMbarMax) + "] (" + mbar_text(s, b) + ", " +
                    mbar_state(b) + ")");
    tsan_release(const_cast<char*>(b.addr));
    b.tx += delta;
    (delta > 0 ? b.expected : b.completed) += delta > 0 ? delta : -delta;
}

// An arrive-on operation (after an expect-tx of `tx` bytes when expect): returns the phase it arrived in.
MPK_SIMT_SLOW uint64_t mbarrier_arrive(void* bar, bool expect, uint32_t tx, const char* form, const char* file,
                                       int line) {
    Sched& s = issuing_block(form);
    TsanIgnore ignore;
    MBars& m = mbars_of(s);
    MBar& b = live_mbar(s, m, bar, form, file, line);
    const std::string who = std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur);
    if (expect) mbar_add_tx(s, b, int64_t(tx), who);
    if (b.pending == 0) fail(s, who + ": one arrival more than the count: " + mbar_text(s, b) + " is " + mbar_state(b));
    const uint64_t phase = b.phase;
    tsan_release(const_cast<char*>(b.addr));  // arrive has .release semantics: a wait that sees the phase acquires
    --b.pending;
    mbar_settle(b);
    mbar_progress(m);
    return phase;
}

// expect_tx (delta > 0) or complete_tx (delta < 0) of |delta| bytes on the current phase.
MPK_SIMT_SLOW void mbarrier_tx(void* bar, int64_t delta, const char* form, const char* file, int line) {
    Sched& s = issuing_block(form);
    TsanIgnore ignore;
    MBars& m = mbars_of(s);
    MBar& b = live_mbar(s, m, bar, form, file, line);
    mbar_add_tx(s, b, delta, std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur));
    mbar_settle(b);
    mbar_progress(m);
}

MPK_SIMT_SLOW void mbarrier_inval(void* bar, const char* file, int line) {
    const char* form = "mbarrier.inval.shared::cta.b64";
    Sched& s = issuing_block(form);
    TsanIgnore ignore;
    MBars& m = mbars_of(s);
    MBar& b = mbar_at(s, m, bar, form, file, line);
    b.valid = false;
    mbar_progress(m);
}

// Every live thread blocked or stuck in a try_wait with nothing changing: the waits and the barriers.
MPK_SIMT_SLOW void mbarrier_deadlock(Sched& s, MBars& m) {
    struct Group { int bar; uint32_t parity; const char* form; const char* file; int line; int count; uint32_t warps; };
    std::vector<Group> groups;
    int at_barrier = 0, at_warp = 0;
    const Fiber* warp_one = nullptr;
    for (int t = 0; t < s.nthreads; ++t) {
        const Fiber& f = s.fibers[t];
        const MWait& w = m.waits[size_t(t)];
        if (f.st == St::Exited) continue;
        if (f.st == St::Barrier) { ++at_barrier; continue; }
        if (f.st == St::Warp) { ++at_warp; warp_one = &f; continue; }
        if (w.progress != m.progress + 1 || w.fails < kMbarSpins) return;  // this one may still change something
        size_t g = 0;
        while (g < groups.size() && !(groups[g].bar == w.bar && groups[g].parity == w.parity &&
                                      same_site(groups[g].file, groups[g].line, w.file, w.line))) ++g;
        if (g == groups.size()) groups.push_back(Group{w.bar, w.parity, w.form, w.file, w.line, 0, 0});
        ++groups[g].count;
        groups[g].warps |= 1u << (t / 32);
    }
    if (groups.empty()) return;
    std::string msg = "mbarrier wait that can never complete: ";
    for (size_t g = 0; g < groups.size(); ++g) {
        const MBar& b = m.bars[size_t(groups[g].bar)];
        msg += (g ? "; " : "") + std::to_string(groups[g].count) + " thread(s) (warps mask " + hex(groups[g].warps) +
               ") spin in " + groups[g].form + " at " + site(groups[g].file, groups[g].line) + " for parity " +
               std::to_string(groups[g].parity) + " on " + mbar_text(s, b) + ", which is " + mbar_state(b);
    }
    if (at_barrier) msg += "; " + std::to_string(at_barrier) + " wait at __syncthreads " + site(s.bar_file, s.bar_line);
    if (at_warp) msg += "; " + std::to_string(at_warp) + " wait at warp collectives (one at " + op_name(warp_one->op) +
                        " " + site(warp_one->file, warp_one->line) + ")";
    if (s.exited) msg += "; " + std::to_string(s.exited) + " exited";
    fail(s, msg);
}

// try_wait.parity / test_wait.parity (form): true when the phase of `parity` before the current one completed; false (after a yield,
// so the other threads run) when not, and a named error when no thread can change that any more.
MPK_SIMT_SLOW bool mbarrier_wait_parity(void* bar, uint32_t parity, const char* form, const char* file, int line) {
    Sched& s = issuing_block(form);
    Fiber* self = s.cur;
    {
        TsanIgnore ignore;
        MBars& m = mbars_of(s);
        MBar& b = live_mbar(s, m, bar, form, file, line);
        // bulk tensor copies completing here land first, at the latest (simt_cpu_tma.h; landing adds no barrier)
        if (s.async_pending && s.async->land_on) s.async->land_on(s, b.addr);
        if ((b.phase & 1) != (parity & 1)) {
            tsan_acquire(const_cast<char*>(b.addr));
            return true;
        }
        MWait& w = m.waits[self->tid.x];
        const int which = int(&b - m.bars.data());
        if (w.progress != m.progress + 1 || w.bar != which || w.parity != (parity & 1) || !same_site(w.file, w.line, file, line))
            w = MWait{m.progress + 1, 0, which, parity & 1, form, file, line};
        if (++w.fails == kMbarSpins) {
            int blocked = s.at_barrier + s.exited;
            for (int i = 0; i < s.nwarps; ++i) blocked += __builtin_popcount(s.warps[i].waiting);
            if (++m.stuck + blocked >= s.nthreads) mbarrier_deadlock(s, m);  // (it returns unless it is one)
        }
    }
    yield_now();
    TsanIgnore ignore;
    MBars& m = mbars_of(s);
    if (s.async_pending && s.async->land_on) s.async->land_on(s, mbar_at(s, m, bar, form, file, line).addr);
    const MBar& b = mbar_at(s, m, bar, form, file, line);
    const bool done = (b.phase & 1) != (parity & 1);
    if (done) tsan_acquire(const_cast<char*>(b.addr));
    return done;
}
#else
void mbarrier_init(void* bar, uint32_t count, const char* file, int line);
MBar& live_mbar(Sched& s, MBars& m, void* bar, const char* form, const char* file, int line);
void mbar_add_tx(Sched& s, MBar& b, int64_t delta, const std::string& who);
uint64_t mbarrier_arrive(void* bar, bool expect, uint32_t tx, const char* form, const char* file, int line);
void mbarrier_tx(void* bar, int64_t delta, const char* form, const char* file, int line);
void mbarrier_inval(void* bar, const char* file, int line);
void mbarrier_deadlock(Sched& s, MBars& m);
bool mbarrier_wait_parity(void* bar, uint32_t parity, const char* form, const char* file, int line);
#endif

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
