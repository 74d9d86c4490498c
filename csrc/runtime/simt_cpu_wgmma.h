// simt_cpu_wgmma.h: Hopper's warpgroup MMA on the CPU (runtime/ptx.h names the instructions):
// wgmma.fence, wgmma.commit_group, wgmma.wait_group N and wgmma.mma_async.sync.aligned.m64nNk16.f32
// .{bf16,f16}.{bf16,f16}, A and B read from shared memory through matrix descriptors (or A from
// registers). Part of runtime/simt_cpu.h (docs/simt.md, "wgmma"); the descriptors are simt_cpu_wgmma_desc.h's.
//
// Each instruction is a warp collective of the emulation (the 32 lanes rendezvous at one call site) and
// each warp does its own part: a warpgroup's four warps own rows 16 w .. 16 w + 15 of the 64-row D, so
// nothing crosses warps but the checks, which compare the four warps' instruction streams (a warpgroup
// log): every warp of a warpgroup must execute the same wgmma instructions with the same operands.
// An mma_async reads its shared memory at issue (the 16-byte granules its descriptors name, snapshotted)
// and its accumulators land at the wgmma.wait_group that covers its group, not before: until then each
// lane's registers hold the in-flight poison (all ones, a NaN). At that wait the granules must still hold
// what they held at issue, the A fragment (register form) what it held, the accumulators the poison;
// anything else was written while the wgmma could still read it and is named. Before retiring, each lane
// yields once (the wait takes time on a GPU: other warps run, and a producer that refills a stage the
// wgmma still reads meets the pending read: cp.async.bulk.tensor and cp.async name it at their issue).
// Consecutive mma_async on the same accumulators chain without a wait (the ISA's implicit ordering for
// one shape): the later one's C is the earlier one's D.
//
// Fragments (lane l, g = l >> 2, t = l % 4, warp w of the warpgroup): D register r = 4 j + i holds row
// 16 w + g + 8 (i >> 1), column 8 j + 2 t + (i & 1); the register A fragment is mma.m16n8k16's (rows
// offset by 16 w). Arithmetic as mma's: exact products, D = C + the sum in increasing k in fp32.
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_wgmma.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <string.h>
#include <string>
#include <vector>
#include "simt_cpu_ptx.h"
#include "simt_cpu_tma.h"
#include "simt_cpu_wgmma_desc.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

constexpr uint32_t kAccInFlight = 0xFFFFFFFFu;  // an accumulator register while its wgmma is in flight

// Flags of an mma_async (its immediates and form), one word so that the warps' streams compare.
constexpr uint32_t kWgScaleD = 1, kWgNegA = 2, kWgNegB = 4, kWgTransA = 8, kWgTransB = 16, kWgF16 = 32, kWgRegA = 64;

// What a lane brings to a wgmma instruction (Fiber::in points at it); its first member is the function
// that completes the instruction (simt_cpu_sync.h's complete calls it).
struct WgmmaLane {
    void (*complete)(Sched& s, Fiber* lanes, Op op);
    int n;                // N of mma_async; the count of wait_group
    uint32_t flags;
    uint64_t desc_a, desc_b;
    const uint32_t* a;    // the register form's A fragment (4 registers)
    float* d;             // N / 2 accumulator registers
};
inline const WgmmaLane& wg_lane(const Fiber* lanes, int l) {
    return *reinterpret_cast<const WgmmaLane*>(uintptr_t(lanes[l].in));
}

struct WgOp {                        // an mma_async of one warp, issued and not yet retired
    int n;
    uint32_t flags;
    const char* file;
    int line;
    uint32_t group;                  // kOpen until wgmma.commit_group
    bool chained;                    // on the registers of an earlier op still in flight: its D is this C
    float* d[32];                    // each lane's accumulators
    std::vector<float> acc;          // 16 x N: C (captured at issue, or handed on), then D
    std::vector<const char*> at;     // the granules read: A's (16 rows x 2, or 2 x 16 MN-major) then B's
    std::vector<char> seen;          // ... and their bytes at issue
    const uint32_t* a[32];           // the register form's A fragment, each lane's
    uint32_t regs[32][4];            // ... as it was at issue
};
struct WgWarp {
    std::vector<WgOp> ops;
    uint32_t committed = 0;
    bool fenced = false;             // wgmma.fence since the task began or the last wgmma.wait_group
    const char* wait_file = nullptr; // that wait (null: the task's start)
    int wait_line = 0;
    uint32_t issued = 0;             // wgmma instructions of this task (the warpgroup's streams compare)
};
struct WgSig {                       // one instruction of a warpgroup's stream
    Op op;
    int n;
    uint32_t flags;
    uint64_t desc_a, desc_b;
    const char* file;
    int line;
    int warp;                        // the first warp that executed it
};
struct Wgmma {
    std::vector<WgWarp> warps;
    std::vector<std::vector<WgSig>> log;  // per warpgroup, from log_base[g]
    std::vector<uint32_t> log_base;
};
inline void wgmma_reset(Wgmma* w, int threads) {
    const int warps = (threads + 31) / 32;
    w->warps.assign(size_t(warps), WgWarp{});
    w->log.assign(size_t((warps + 3) / 4), {});
    w->log_base.assign(size_t((warps + 3) / 4), 0);
}
inline void wgmma_free(Wgmma* w) { delete w; }
void wgmma_done(Sched& s, Fiber* self, const char* what);                  // (defined below)
std::string wgmma_reading(Sched& s, const char* p, size_t n);
std::string wgmma_end(Sched& s);
void wgmma_task_end(Sched& s);

// The block's wgmma state, set up by its first wgmma instruction (with TMA's: the fence baseline).
inline Wgmma& wgmma_of(Sched& s) {
    tma_of(s);
    Async& a = *s.async;
    if (!a.wgmma) {
        a.wgmma = new Wgmma;
        a.wgmma_reset = &wgmma_reset;
        a.wgmma_free = &wgmma_free;
        a.wgmma_done = &wgmma_done;
        a.wgmma_reading = &wgmma_reading;
        wgmma_reset(a.wgmma, s.nthreads);
    }
    s.async_task_end = &wgmma_task_end;
    s.async_end = &wgmma_end;
    return *a.wgmma;
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW std::string wg_form(Op op, int n, uint32_t flags) {
    if (op != Op::Wgmma) return op_name(op);
    const char* t = flags & kWgF16 ? "f16" : "bf16";
    return "wgmma.mma_async.sync.aligned.m64n" + std::to_string(n) + "k16.f32." + t + "." + t;
}
MPK_SIMT_SLOW std::string op_text(const WgOp& o, int warp) {
    return wg_form(Op::Wgmma, o.n, o.flags) + " at " + site(o.file, o.line) + " (warp " + std::to_string(warp) +
           (o.group == kOpen ? ", not committed)" : ", wgmma group " + std::to_string(o.group) + ")");
}

// Element (r, k) of an operand whose granules start at at[first] (rows as wg_operand took them, from 0).
inline float wg_element(const WgOp& o, size_t first, bool mn_major, uint32_t r, uint32_t k) {
    const size_t g = first + (mn_major ? size_t(r / 8) * 16 + k : size_t(r) * 2 + k / 8);
    const char* p = o.seen.data() + 16 * g + 2 * (mn_major ? r % 8 : k % 8);
    uint16_t h;
    memcpy(&h, p, 2);
    return o.flags & kWgF16 ? DecF16::at(h) : DecBf16::at(h);
}

MPK_SIMT_SLOW void wg_issue(Sched& s, Wgmma& wg, Fiber* lanes, int warp, const std::string& where) {
    const WgmmaLane& x = wg_lane(lanes, 0);
    WgWarp& me = wg.warps[size_t(warp)];
    if (!me.fenced)
        fail(s, where + ": no wgmma.fence since " +
                    (me.wait_file ? "the wgmma.wait_group at " + site(me.wait_file, me.wait_line) : std::string("the task began")) +
                    ": the warpgroup executes wgmma.fence before its first wgmma.mma_async and between its own accesses "
                    "to the registers and a wgmma.mma_async that uses them");
    Tma& tm = *s.async->tma;
    WgOp o;
    o.n = x.n;
    o.flags = x.flags;
    o.file = lanes[0].file;
    o.line = lanes[0].line;
    o.group = kOpen;
    o.chained = false;
    for (int l = 0; l < 32; ++l) o.d[l] = wg_lane(lanes, l).d;
    const size_t regs = size_t(x.n / 2);
    for (const WgOp& p : me.ops) {  // the registers of an op in flight: the same shape, chained
        const bool overlap = o.d[0] < p.d[0] + p.n / 2 && p.d[0] < o.d[0] + regs;
        if (!overlap) continue;
        if (p.d[0] != o.d[0] || p.n != o.n)
            fail(s, where + ": its accumulators overlap those of " + op_text(p, warp) +
                        ", still in flight with another shape (chaining without a wait needs the same registers and shape)");
        o.chained = true;
    }
    const uint32_t w = uint32_t(warp % 4);
    if (!(x.flags & kWgRegA)) wg_operand(s, tm, where, "A", x.desc_a, x.flags & kWgTransA, 16 * w, 16, o.at);
    wg_operand(s, tm, where, "B", x.desc_b, x.flags & kWgTransB, 0, uint32_t(x.n), o.at);
    o.seen.resize(16 * o.at.size());
    for (size_t i = 0; i < o.at.size(); ++i) memcpy(&o.seen[16 * i], o.at[i], 16);
    if (x.flags & kWgRegA)
        for (int l = 0; l < 32; ++l) {
            o.a[l] = wg_lane(lanes, l).a;
            memcpy(o.regs[l], o.a[l], sizeof o.regs[l]);
        }
    o.acc.assign(size_t(16) * size_t(x.n), 0.0f);
    for (int l = 0; l < 32; ++l) {
        float* d = o.d[l];
        const int g = l >> 2, t = l & 3;
        for (size_t r = 0; r < regs; ++r) {
            const size_t j = r / 4, i = r % 4;
            if ((x.flags & kWgScaleD) && !o.chained) o.acc[size_t(g + 8 * (i >> 1)) * x.n + 8 * j + 2 * t + (i & 1)] = d[r];
            memcpy(&d[r], &kAccInFlight, 4);
        }
    }
    me.ops.push_back(std::move(o));
    ++s.async_pending;
}

// An op retires (wgmma.wait_group covered it): what it read and its registers are checked, D computed and
// handed to the next op on the same registers, or written to them.
MPK_SIMT_SLOW void wg_retire(Sched& s, WgWarp& me, int warp, size_t k) {
    WgOp& o = me.ops[k];
    --s.async_pending;
    for (size_t i = 0; i < o.at.size(); ++i)
        if (memcmp(o.at[i], &o.seen[16 * i], 16) != 0)
            fail(s, "shared memory [" + ptr_text(o.at[i]) + ", " + ptr_text(o.at[i] + 16) + ") read by " + op_text(o, warp) +
                        " was written before the wgmma.wait_group that covers it: a stage may be refilled only after "
                        "the wait on the wgmma that reads it");
    const bool mn_a = o.flags & kWgTransA, mn_b = o.flags & kWgTransB, reg_a = o.flags & kWgRegA;
    for (int l = 0; l < 32 && reg_a; ++l)
        if (memcmp(o.regs[l], o.a[l], sizeof o.regs[l]) != 0)
            fail(s, "the A fragment registers of lane " + std::to_string(l) + " of " + op_text(o, warp) +
                        " were written while it was in flight (before the wgmma.wait_group that covers it)");
    float A[16][16];
    for (uint32_t m = 0; m < 16; ++m)
        for (uint32_t kk = 0; kk < 16; ++kk) {
            if (!reg_a) {
                A[m][kk] = wg_element(o, 0, mn_a, m, kk);
                continue;
            }
            const int g = int(m % 8), half = int(m / 8);  // the mma.m16n8k16 A fragment, element i of lane 4 g + t
            const int t = int(kk % 8) / 2, i = int(kk % 2) + 2 * half + 4 * int(kk / 8);
            uint16_t h = uint16_t(o.regs[4 * g + t][i / 2] >> (16 * (i % 2)));
            A[m][kk] = o.flags & kWgF16 ? DecF16::at(h) : DecBf16::at(h);
        }
    const size_t b0 = reg_a ? 0 : 32, n = size_t(o.n);
    const float sa = o.flags & kWgNegA ? -1.0f : 1.0f, sb = o.flags & kWgNegB ? -1.0f : 1.0f;
    std::vector<float> B(n * 16);
    for (uint32_t r = 0; r < n; ++r)
        for (uint32_t kk = 0; kk < 16; ++kk) B[kk * n + r] = sb * wg_element(o, b0, mn_b, r, kk);
    for (uint32_t m = 0; m < 16; ++m)
        for (uint32_t kk = 0; kk < 16; ++kk) {
            const float a = sa * A[m][kk];
            float* row = &o.acc[m * n];
            const float* b = &B[kk * n];
            for (size_t c = 0; c < n; ++c) row[c] += a * b[c];
        }
    for (size_t later = k + 1; later < me.ops.size(); ++later) {
        WgOp& next = me.ops[later];
        if (next.d[0] != o.d[0]) continue;
        if (next.flags & kWgScaleD) next.acc = o.acc;  // its C (else it ignores C: D = A B)
        return;
    }
    for (int l = 0; l < 32; ++l) {
        float* d = o.d[l];
        const int g = l >> 2, t = l & 3;
        for (size_t r = 0; r < n / 2; ++r) {
            uint32_t bits;
            memcpy(&bits, &d[r], 4);
            if (bits != kAccInFlight)
                fail(s, "accumulator register " + std::to_string(r) + " of lane " + std::to_string(l) + " of " + op_text(o, warp) +
                            " was written while the wgmma was in flight (before the wgmma.wait_group that covers it)");
            const size_t j = r / 4, i = r % 4;
            d[r] = o.acc[size_t(g + 8 * (i >> 1)) * n + 8 * j + 2 * t + (i & 1)];
        }
    }
}
#endif

#if MPK_SIMT_DEFINE_SLOW_PATHS
// The last lane of a warp arrived at a wgmma instruction: its lanes agree on the operands, its warpgroup is
// whole and runs one stream of wgmma instructions; then the instruction's part for this warp.
MPK_SIMT_SLOW void wgmma_complete(Sched& s, Fiber* lanes, Op op) {
    const int warp = int(lanes[0].tid.x) / 32, grp = warp / 4;
    const WgmmaLane& x = wg_lane(lanes, 0);
    const std::string where = wg_form(op, x.n, x.flags) + " at " + site(lanes[0].file, lanes[0].line) + " by warp " +
                              std::to_string(warp);
    for (int l = 1; l < 32; ++l) {
        const WgmmaLane& y = wg_lane(lanes, l);
        const char* what = y.desc_a != x.desc_a ? "A's matrix descriptor" : y.desc_b != x.desc_b ? "B's matrix descriptor"
                         : y.n != x.n || y.flags != x.flags ? "another form" : nullptr;
        if (what)
            fail(s, where + ": lane " + std::to_string(l) + " gives " + what + " than lane 0 (the operands are the "
                        "warpgroup's: every thread gives the same)");
    }
    Wgmma& wg = wgmma_of(s);
    if (4 * grp + 4 > s.nwarps)
        fail(s, where + ": its warpgroup (warps " + std::to_string(4 * grp) + " to " + std::to_string(4 * grp + 3) +
                    ") is partial, the block has " + std::to_string(s.nthreads) +
                    " threads: a wgmma instruction is executed by the 128 threads of a warpgroup");
    // (a warp of the warpgroup that exits or ends its task having executed fewer is named then: wg_partial)
    WgWarp& me = wg.warps[size_t(warp)];
    std::vector<WgSig>& log = wg.log[size_t(grp)];
    const bool mma = op == Op::Wgmma;
    const WgSig sig{op, mma || op == Op::WgmmaWait ? x.n : 0, mma ? x.flags : 0, mma ? x.desc_a : 0, mma ? x.desc_b : 0,
                    lanes[0].file, lanes[0].line, warp};
    const size_t idx = me.issued - wg.log_base[size_t(grp)];
    if (idx == log.size()) {
        log.push_back(sig);
    } else {
        const WgSig& o = log[idx];
        if (o.op != sig.op || o.n != sig.n || o.flags != sig.flags || o.desc_a != sig.desc_a || o.desc_b != sig.desc_b ||
            !same_site(o.file, o.line, sig.file, sig.line))
            fail(s, where + " is wgmma instruction " + std::to_string(me.issued + 1) + " of warp " + std::to_string(warp) +
                        " in this task, and warp " + std::to_string(o.warp) + "'s was " + wg_form(o.op, o.n, o.flags) + " at " +
                        site(o.file, o.line) +
                        (o.op == sig.op && same_site(o.file, o.line, sig.file, sig.line) ? " with other operands" : "") +
                        ": the four warps of a warpgroup execute the same wgmma instructions, on the same operands, in order");
    }
    ++me.issued;
    if (log.size() > 512) {  // entries every warp of the warpgroup has passed
        uint32_t low = me.issued;
        for (int v = 4 * grp; v < 4 * grp + 4; ++v) low = wg.warps[size_t(v)].issued < low ? wg.warps[size_t(v)].issued : low;
        const size_t drop = low - wg.log_base[size_t(grp)];
        log.erase(log.begin(), log.begin() + ptrdiff_t(drop));
        wg.log_base[size_t(grp)] = low;
    }
    switch (op) {
    case Op::WgmmaFence: me.fenced = true; break;
    case Op::WgmmaCommit: {
        const uint32_t g = me.committed++;
        for (WgOp& o : me.ops)
            if (o.group == kOpen) o.group = g;
        break;
    }
    case Op::WgmmaWait: {
        size_t k = 0;  // the covered ops are a prefix: groups retire in order, the open ones come last
        while (k < me.ops.size() && me.ops[k].group != kOpen && me.ops[k].group + uint32_t(x.n) < me.committed)
            wg_retire(s, me, warp, k++);
        me.ops.erase(me.ops.begin(), me.ops.begin() + ptrdiff_t(k));
        me.fenced = false;
        me.wait_file = lanes[0].file;
        me.wait_line = lanes[0].line;
        break;
    }
    default: wg_issue(s, wg, lanes, warp, where); break;
    }
}

// The warpgroups whose warps executed different numbers of wgmma instructions ("": none).
MPK_SIMT_SLOW std::string wg_partial(Sched& s, const Wgmma& wg) {
    for (size_t g = 0; g < wg.log.size(); ++g) {
        const size_t w0 = 4 * g;
        for (size_t v = w0 + 1; v < w0 + 4 && v < wg.warps.size(); ++v) {
            const uint32_t a = wg.warps[w0].issued, b = wg.warps[v].issued;
            if (a == b) continue;
            const size_t behind = a < b ? w0 : v, ahead = a < b ? v : w0, i = (a < b ? a : b) - wg.log_base[g];
            const WgSig* miss = i < wg.log[g].size() ? &wg.log[g][i] : nullptr;
            return "wgmma reached by a partial warpgroup: warp " + std::to_string(ahead) + " executed " +
                   std::to_string(a < b ? b : a) + " wgmma instructions, warp " + std::to_string(behind) + " " +
                   std::to_string(a < b ? a : b) +
                   (miss ? " (the first it missed: " + wg_form(miss->op, miss->n, miss->flags) + " at " +
                               site(miss->file, miss->line) + ")"
                         : std::string()) +
                   ": the four warps of a warpgroup (threads " + std::to_string(128 * g) + " to " +
                   std::to_string(128 * g + 127) + ") execute every wgmma instruction together";
        }
    }
    (void)s;
    return "";
}
// A task of a worker block ended (every thread at the task barrier): the warpgroups' streams must agree;
// the next task starts afresh (fence needed, no groups). Then TMA's fence baseline.
MPK_SIMT_SLOW void wgmma_task_end(Sched& s) {
    Async* a = s.async;
    if (a && a->wgmma && s.async_ready) {
        const std::string partial = wg_partial(s, *a->wgmma);
        if (!partial.empty()) fail(s, partial);
        wgmma_reset(a->wgmma, s.nthreads);
    }
    if (a && a->tma) tma_task_end(s);
}
// The block ends: what its wgmma instructions leave inconsistent ("": nothing).
MPK_SIMT_SLOW std::string wgmma_end(Sched& s) {
    return s.async && s.async->wgmma ? wg_partial(s, *s.async->wgmma) : std::string();
}
// The thread's task ends or it exits: its warp's wgmma must all be retired.
MPK_SIMT_SLOW void wgmma_done(Sched& s, Fiber* self, const char* what) {
    const WgWarp& me = s.async->wgmma->warps[self->tid.x / 32];
    if (me.ops.empty()) return;
    throw Error(thread_name(self) + " " + what + " with " + std::to_string(me.ops.size()) + " wgmma.mma_async in flight, the first " +
                op_text(me.ops[0], int(self->tid.x / 32)) +
                ": wgmma.commit_group and a wgmma.wait_group that covers it must come before the task ends");
}
// The op in flight (any warp's) that reads shared memory [p, p + n), as text ("": none).
MPK_SIMT_SLOW std::string wgmma_reading(Sched& s, const char* p, size_t n) {
    const Wgmma& wg = *s.async->wgmma;
    for (size_t w = 0; w < wg.warps.size(); ++w)
        for (const WgOp& o : wg.warps[w].ops)
            for (const char* g : o.at)
                if (g < p + n && p < g + 16) return op_text(o, int(w));
    return "";
}

#else
void wgmma_complete(Sched& s, Fiber* lanes, Op op);
#endif

// The calling lane's part of a wgmma instruction; returns when its warp's part is done. A wait first
// yields (other warps run while the warpgroup waits on its MMAs).
inline void wgmma_op(Op op, const WgmmaLane& args, const char* file, int line) {
    if (op == Op::WgmmaWait) yield_now();
    collective(op, 0xFFFFFFFFu, uint64_t(uintptr_t(&args)), 0, 32, file, line);
}

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
