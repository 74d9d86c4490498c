// simt_cpu_tma.h: the tensor memory accelerator on the CPU (runtime/ptx.h names the instruction):
// cp.async.bulk.tensor.{2d,3d}.shared::cluster.global.mbarrier::complete_tx::bytes, a box of a tensor
// described by a tensor map, copied into shared memory with the map's swizzle and zero fill outside
// the tensor, completing the box's bytes on an mbarrier. Part of runtime/simt_cpu.h (docs/simt.md, "TMA").
//
// The tensor map: what cuTensorMapEncodeTiled encodes (tiled mode, no interleave, zero fill), as a plain
// struct (TensorMapCpu); mpk::ptx::make_tensor_map builds and checks either form.
// The copy: issued by one thread. Its destination is filled with the in-flight poison and marked in
// flight in cp.async's shadow (simt_cpu_async.h), so an ldmatrix or a cp.async over it is named as for a
// cp.async, and a thread's store into it is found when it lands. It lands (the box written, then
// complete_tx of the whole box's bytes on the barrier) at a moment the block's seed draws, the modes of
// cp.async: at its issue; or only when a thread waits on its barrier (try_wait / test_wait land every
// copy completing there first); or at a blocking point of its thread by a draw, the rest at the wait.
// A thread that ends its task or exits with a copy in flight is named.
// The layout in shared memory: element (e0, e1, e2) of the box (e0 innermost) at byte
// ((e2 box1 + e1) box0 + e0) elem from the destination, then swizzled as the hardware does, on the
// shared-memory address: bits [4, 4 + b) XOR bits [7, 7 + b), b = 1, 2, 3 for the 32-, 64- and 128-byte
// modes (so a destination that is not aligned to the pattern's 256, 512 or 1024 bytes sees it shifted,
// as a GPU would show it). Elements whose coordinate is outside the tensor are written as zeros.
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_tma.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <string.h>
#include <string>
#include <vector>
#include "simt_cpu_async.h"
#include "simt_cpu_mbarrier.h"

namespace mpk {
namespace simt {

constexpr uint32_t kTensorMapMagic = 0x544D4150u;  // "TMAP": made by mpk::ptx::make_tensor_map

// A tensor map's fields (cuTensorMapEncodeTiled's), for the emulation. 128-byte aligned like CUtensorMap.
struct alignas(128) TensorMapCpu {
    uint32_t magic;
    uint32_t rank;           // 1 to 3
    uint32_t elem_bytes;     // 1, 2, 4 or 8
    uint32_t swizzle;        // 0 none, 1 32-byte, 2 64-byte, 3 128-byte (CUtensorMapSwizzle's values)
    const char* base;        // 16-byte aligned
    uint64_t dims[3];        // elements per dimension, dimension 0 contiguous
    uint64_t strides[3];     // bytes between consecutive indices of each dimension (strides[0] = elem_bytes)
    uint32_t box[3];         // the box's elements per dimension, each 1 to 256
};

#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

struct BulkCopy {
    TensorMapCpu map;        // copied at issue (the instruction reads the map then)
    int32_t coord[3];
    char* bar;
    const char* form;
};
struct BulkStore {           // a TMA store: shared memory to the tensor, in a bulk group of its thread
    TensorMapCpu map;
    int32_t coord[3];
    const char* src;
    std::vector<char> seen;  // the source as it was at issue (the store reads it before its wait)
    uint32_t group;          // kOpen until cp.async.bulk.commit_group
    const char* file;
    int line;
};
struct Tma {
    std::vector<BulkCopy> loads;
    std::vector<std::vector<BulkStore>> stores;  // per thread, in issue order
    std::vector<uint32_t> committed;             // per thread: bulk groups committed
    std::vector<char> fenced;  // the dynamic shared memory as the async proxy may see it: at the last
                               // fence.proxy.async, or as the task began, plus what TMA loads wrote since
    std::vector<uint8_t> landed;  // per 16 bytes of it: a TMA load wrote them in this task (simt_cpu_wgmma.h)
};
inline void tma_reset(Tma* t, int threads) {
    t->loads.clear();
    t->stores.assign(size_t(threads), {});
    t->committed.assign(size_t(threads), 0);
    t->fenced.clear();  // (tma_of refills it for the new block)
    t->landed.clear();
}
inline void tma_free(Tma* t) { delete t; }
void tma_land(Sched& s, Async& a, int thread, const AsyncCopy& c);  // (defined below)
void tma_land_on(Sched& s, const char* bar);
void tma_tick(Sched& s, Fiber* self);
void tma_done(Sched& s, Fiber* self, const char* what);
// The fence baseline as a task starts: the shared memory the task finds (test mode's poison, or what the
// previous task left), which its own writes must be fenced against before a TMA store reads them.
inline void tma_task_end(Sched& s) {
    Tma& t = *s.async->tma;
    if (s.smem) t.fenced.assign(s.smem, s.smem + s.smem_bytes);
    t.landed.assign(s.smem_bytes / 16 + 1, 0);
}
// The block's TMA state, set up by its first TMA instruction.
inline Tma& tma_of(Sched& s) {
    Async& a = async_of(s);
    if (!a.tma) {
        a.tma = new Tma;
        a.land_bulk = &tma_land;
        a.land_on = &tma_land_on;
        a.tma_tick = &tma_tick;
        a.tma_done = &tma_done;
        a.tma_reset = &tma_reset;
        a.tma_free = &tma_free;
        tma_reset(a.tma, s.nthreads);
        if (!s.async_task_end) s.async_task_end = &tma_task_end;  // (wgmma's calls it)
    }
    if (a.tma->fenced.size() != s.smem_bytes) {  // a new block
        a.tma->fenced.assign(s.smem_bytes, char(s.smem_fill));
        a.tma->landed.assign(s.smem_bytes / 16 + 1, 0);
    }
    return *a.tma;
}

// The swizzled shared-memory address of byte address p (the hardware's pattern, on the address).
inline uintptr_t tma_swizzled(uintptr_t p, uint32_t mode) {
    return mode ? p ^ (((p >> 7) & ((uintptr_t(1) << mode) - 1)) << 4) : p;
}
inline uint64_t box_bytes(const TensorMapCpu& m) {
    uint64_t n = m.elem_bytes;
    for (uint32_t d = 0; d < m.rank; ++d) n *= m.box[d];
    return n;
}
// Every element of the box at `coord` staged at smem (its bytes): f(its shared-memory bytes, its bytes in
// the tensor or null outside it). Returns false when a swizzled element falls outside the box's bytes.
template <class F> inline bool for_box(const TensorMapCpu& m, const int32_t* coord, char* smem, uint64_t bytes, F f) {
    const uint32_t b0 = m.box[0], b1 = m.rank > 1 ? m.box[1] : 1, b2 = m.rank > 2 ? m.box[2] : 1, e = m.elem_bytes;
    for (uint32_t i2 = 0; i2 < b2; ++i2)
        for (uint32_t i1 = 0; i1 < b1; ++i1)
            for (uint32_t i0 = 0; i0 < b0; ++i0) {
                const int64_t g[3] = {int64_t(coord[0]) + i0, int64_t(coord[1]) + i1, int64_t(coord[2]) + i2};
                bool inside = true;
                int64_t off = 0;
                for (uint32_t d = 0; d < m.rank; ++d) {
                    inside = inside && g[d] >= 0 && uint64_t(g[d]) < m.dims[d];
                    off += g[d] * int64_t(m.strides[d]);
                }
                char* at = reinterpret_cast<char*>(
                    tma_swizzled(uintptr_t(smem) + (uintptr_t(i2 * b1 + i1) * b0 + i0) * e, m.swizzle));
                if (at < smem || at + e > smem + bytes) return false;
                f(at, inside ? const_cast<char*>(m.base) + off : nullptr);
            }
    return true;
}
// The fence baseline follows what the async proxy writes (a load's box): those bytes need no fence.
inline void fence_follows(Sched& s, Tma& tm, const char* p, size_t n) {
    if (s.smem && p >= s.smem && p + n <= s.smem + s.smem_bytes && tm.fenced.size() == s.smem_bytes) {
        memcpy(tm.fenced.data() + (p - s.smem), p, n);
        for (size_t g = size_t(p - s.smem) / 16; g * 16 < size_t(p - s.smem) + n; ++g) tm.landed[g] = 1;
    }
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
// The copy lands: the destination must still hold the poison, then the box is written and its bytes
// complete on the barrier.
MPK_SIMT_SLOW void tma_land(Sched& s, Async& a, int thread, const AsyncCopy& c) {
    const BulkCopy& k = a.tma->loads[size_t(c.bulk)];
    set_flags(s, a, c.dst, c.bytes, 0);
    --s.async_pending;
    for (uint32_t i = 0; i < c.bytes; ++i)
        if (uint8_t(c.dst[i]) != kInFlight)
            fail(s, "shared memory [" + ptr_text(c.dst) + ", " + ptr_text(c.dst + c.bytes) + ") of " + copy_text(c, thread) +
                        " was written while the copy was in flight (seen as it landed: byte " + std::to_string(i) +
                        " no longer holds the in-flight poison); wait on its mbarrier first");
    const uint32_t e = k.map.elem_bytes;
    if (!for_box(k.map, k.coord, c.dst, c.bytes, [&](char* at, const char* g) { g ? memcpy(at, g, e) : memset(at, 0, e); }))
        fail(s, copy_text(c, thread) + ": a swizzled element of the box falls outside its " + std::to_string(c.bytes) +
                    " bytes: a swizzled box must fill whole rows of the pattern");
    fence_follows(s, *a.tma, c.dst, c.bytes);
    MBars& mb = mbars_of(s);
    MBar& bar = live_mbar(s, mb, k.bar, k.form, c.file, c.line);
    mbar_add_tx(s, bar, -int64_t(c.bytes), copy_text(c, thread) + ", landing");
    mbar_settle(bar);
    mbar_progress(mb);
}

// Lands now every copy in flight that completes on barrier `bar` (a thread waits on it), in issue order.
MPK_SIMT_SLOW void tma_land_on(Sched& s, const char* bar) {
    Async& a = *s.async;
    for (int t = 0; t < int(a.threads.size()); ++t)
        land_where(s, t, [&](const AsyncCopy& c) { return c.group != kBulk || a.tma->loads[size_t(c.bulk)].bar != bar; });
}

// The checks a TMA load or store makes at its issue, on the tensor map and on its box's `role` ("destination"
// or "source") in shared memory; returns the box's bytes.
MPK_SIMT_SLOW uint64_t tma_box_checked(Sched& s, const char* form, uint32_t rank, const TensorMapCpu* map, const char* p,
                                      const char* role, const char* file, int line) {
    auto where = [&] { return std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur); };
    if (!map || map->magic != kTensorMapMagic)
        fail(s, where() + ": the tensor map " + ptr_text(map) + " is not one (build it with mpk::ptx::make_tensor_map)");
    if (map->rank != rank)
        fail(s, where() + ": the tensor map has rank " + std::to_string(map->rank) + ", the instruction " + std::to_string(rank));
    const uint64_t bytes = box_bytes(*map);
    if (!in_shared(s, p, bytes))
        fail(s, where() + ": the " + role + " [" + ptr_text(p) + ", " + ptr_text(p + bytes) + ") is not in shared memory (" +
                    shared_text(s) + ")");
    if (uintptr_t(p) % 128) fail(s, where() + ": the " + role + " " + ptr_text(p) + " is not 128-byte aligned");
    int other = -1;
    if (const AsyncCopy* o = in_flight(s, p, bytes, &other))
        fail(s, where() + ": the " + role + " [" + ptr_text(p) + ", " + ptr_text(p + bytes) +
                    ") overlaps bytes still in flight from " + copy_text(*o, other));
    return bytes;
}

// cp.async.bulk.tensor.{2,3}d ... [dst], [map, {coord}], [bar], issued by the calling thread (coord: 3 entries,
// those past the rank 0, as runtime/ptx.h passes them).
MPK_SIMT_SLOW void tma_load(const char* form, uint32_t rank, void* dst, const TensorMapCpu* map, const int32_t* coord,
                            uint64_t* bar, const char* file, int line) {
    Sched& s = issuing_block(form);
    TsanIgnore ignore;
    char* d = static_cast<char*>(dst);
    const uint64_t bytes = tma_box_checked(s, form, rank, map, d, "destination", file, line);
    live_mbar(s, mbars_of(s), bar, form, file, line);
    Tma& tm = tma_of(s);
    Async& a = *s.async;
    refill_checked(s, a, [&] { return std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur); }, d, bytes);
    tm.loads.push_back(BulkCopy{*map, {coord[0], coord[1], coord[2]}, reinterpret_cast<char*>(bar), form});
    memset(dst, kInFlight, bytes);
    set_flags(s, a, d, bytes, 1);
    AsyncCopy c{d, nullptr, uint32_t(bytes), uint32_t(bytes), kBulk, file, line, form, int32_t(tm.loads.size() - 1)};
    const int t = int(s.cur->tid.x);
    a.threads[size_t(t)].copies.push_back(c);
    ++s.async_pending;
    if (a.mode == 0) land_where(s, t, [&](const AsyncCopy& k) { return k.group != kBulk; });
}
// fence.proxy.async.shared::cta: the generic proxy's writes to shared memory so far are ordered before
// what the async proxy (a TMA store, a wgmma) reads next.
MPK_SIMT_SLOW void fence_proxy_async(const char* file, int line) {
    Sched& s = issuing_block("fence.proxy.async.shared::cta");
    TsanIgnore ignore;
    (void)file;
    (void)line;
    Tma& tm = tma_of(s);
    if (s.smem) tm.fenced.assign(s.smem, s.smem + s.smem_bytes);
}

MPK_SIMT_SLOW std::string store_text(const BulkStore& k, int thread) {
    return std::string("cp.async.bulk.tensor.") + std::to_string(k.map.rank) + "d.global.shared::cta.bulk_group at " +
           site(k.file, k.line) + " by threadIdx.x " + std::to_string(thread) +
           (k.group == kOpen ? " (not committed)" : " (bulk group " + std::to_string(k.group) + ")");
}

// A store lands: its source must still be what it was at issue, then the box goes to the tensor (elements
// outside it are not written).
MPK_SIMT_SLOW void store_land(Sched& s, int thread, const BulkStore& k) {
    --s.async_pending;
    const uint64_t bytes = k.seen.size();
    for (uint64_t i = 0; i < bytes; ++i)
        if (k.src[i] != k.seen[i])
            fail(s, "shared memory [" + ptr_text(k.src) + ", " + ptr_text(k.src + bytes) + ") read by " + store_text(k, thread) +
                        " was written before the store read it (byte " + std::to_string(i) +
                        "): cp.async.bulk.wait_group.read must cover its group before the source is reused");
    const uint32_t e = k.map.elem_bytes;
    for_box(k.map, k.coord, const_cast<char*>(k.src), bytes, [&](char* at, char* g) { if (g) memcpy(g, at, e); });
}

// Lands the stores of `thread` whose group satisfies keep(group) == false, in issue order.
template <class Keep> inline void stores_where(Sched& s, int thread, Keep keep) {
    std::vector<BulkStore>& v = s.async->tma->stores[size_t(thread)];
    size_t out = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        if (keep(v[i].group)) {
            if (out != i) v[out] = std::move(v[i]);
            ++out;
        } else {
            store_land(s, thread, v[i]);
        }
    }
    v.resize(out);
}

// cp.async.bulk.tensor.{2,3}d.global.shared::cta.bulk_group [map, {coord}], [src], by the calling thread (coord
// as tma_load's).
MPK_SIMT_SLOW void tma_store(const char* form, uint32_t rank, const void* src, const TensorMapCpu* map, const int32_t* coord,
                             const char* file, int line) {
    Sched& s = issuing_block(form);
    TsanIgnore ignore;
    auto where = [&] { return std::string(form) + " at " + site(file, line) + " by " + thread_name(s.cur); };
    const char* p = static_cast<const char*>(src);
    const uint64_t bytes = tma_box_checked(s, form, rank, map, p, "source", file, line);
    Tma& tm = tma_of(s);
    if (s.smem && p >= s.smem && p + bytes <= s.smem + s.smem_bytes) {  // the generic proxy's writes: fenced?
        const char* base = tm.fenced.data() + (p - s.smem);
        for (uint64_t i = 0; i < bytes; ++i)
            if (p[i] != base[i])
                fail(s, where() + ": byte " + std::to_string(i) + " of its source [" + ptr_text(p) + ", " +
                            ptr_text(p + bytes) + ") was written after the last fence.proxy.async (the store reads "
                            "through the async proxy: fence.proxy.async.shared::cta after the writes, before the copy)");
    }
    const int t = int(s.cur->tid.x);
    tm.stores[size_t(t)].push_back(BulkStore{*map, {coord[0], coord[1], coord[2]}, p, std::vector<char>(p, p + bytes),
                                             kOpen, file, line});
    ++s.async_pending;
}

MPK_SIMT_SLOW void bulk_commit_group(const char* file, int line) {
    Sched& s = issuing_block("cp.async.bulk.commit_group");
    TsanIgnore ignore;
    (void)file;
    (void)line;
    Tma& tm = tma_of(s);
    const int t = int(s.cur->tid.x);
    const uint32_t g = tm.committed[size_t(t)]++;
    for (BulkStore& k : tm.stores[size_t(t)])
        if (k.group == kOpen) k.group = g;
    if (s.async->mode == 0) stores_where(s, t, [&](uint32_t grp) { return grp != g; });
}

// cp.async.bulk.wait_group[.read] n: every committed bulk group of the thread but the n most recent is done.
MPK_SIMT_SLOW void bulk_wait_group(int n, const char* file, int line) {
    Sched& s = issuing_block("cp.async.bulk.wait_group");
    TsanIgnore ignore;
    (void)file;
    (void)line;
    Tma& tm = tma_of(s);
    const int t = int(s.cur->tid.x);
    const uint32_t committed = tm.committed[size_t(t)];
    stores_where(s, t, [&](uint32_t g) { return g == kOpen || g + uint32_t(n) >= committed; });
}

// At a blocking point of self, in mode 2: each committed store lands by a draw.
MPK_SIMT_SLOW void tma_tick(Sched& s, Fiber* self) {
    Async& a = *s.async;
    stores_where(s, int(self->tid.x), [&](uint32_t g) {
        if (g == kOpen) return true;
        a.rng ^= a.rng << 13;
        a.rng ^= a.rng >> 7;
        a.rng ^= a.rng << 17;
        return (a.rng & 1) == 0;
    });
}

MPK_SIMT_SLOW void tma_done(Sched& s, Fiber* self, const char* what) {
    const std::vector<BulkStore>& v = s.async->tma->stores[self->tid.x];
    if (v.empty()) return;
    throw Error(thread_name(self) + " " + what + " with " + std::to_string(v.size()) + " TMA store" + (v.size() == 1 ? "" : "s") +
                " not waited for, the first " + store_text(v[0], int(self->tid.x)) +
                ": cp.async.bulk.commit_group and cp.async.bulk.wait_group must cover every store before the task ends");
}
#else
void fence_proxy_async(const char* file, int line);
void tma_store(const char* form, uint32_t rank, const void* src, const TensorMapCpu* map, const int32_t* coord,
               const char* file, int line);
void bulk_commit_group(const char* file, int line);
void bulk_wait_group(int n, const char* file, int line);
void tma_land(Sched& s, Async& a, int thread, const AsyncCopy& c);
void tma_land_on(Sched& s, const char* bar);
uint64_t tma_box_checked(Sched& s, const char* form, uint32_t rank, const TensorMapCpu* map, const char* p,
                         const char* role, const char* file, int line);
void tma_load(const char* form, uint32_t rank, void* dst, const TensorMapCpu* map, const int32_t* coord, uint64_t* bar,
              const char* file, int line);
#endif

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
