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

// A tensor map's fields (cuTensorMapEncodeTiled's), for the emulation. 64-byte aligned like CUtensorMap.
struct alignas(64) TensorMapCpu {
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
inline void free_bulk(std::vector<BulkCopy>* v) { delete v; }

// The swizzled shared-memory address of byte address p (the hardware's pattern, on the address).
inline uintptr_t tma_swizzled(uintptr_t p, uint32_t mode) {
    return mode ? p ^ (((p >> 7) & ((uintptr_t(1) << mode) - 1)) << 4) : p;
}
inline uint64_t box_bytes(const TensorMapCpu& m) {
    uint64_t n = m.elem_bytes;
    for (uint32_t d = 0; d < m.rank; ++d) n *= m.box[d];
    return n;
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
// The copy lands: the destination must still hold the poison, then the box is written and its bytes
// complete on the barrier.
MPK_SIMT_SLOW void tma_land(Sched& s, Async& a, int thread, const AsyncCopy& c) {
    const BulkCopy& k = (*a.bulk)[size_t(c.bulk)];
    set_flags(s, a, c.dst, c.bytes, 0);
    --s.async_pending;
    for (uint32_t i = 0; i < c.bytes; ++i)
        if (uint8_t(c.dst[i]) != kInFlight)
            fail(s, "shared memory [" + ptr_text(c.dst) + ", " + ptr_text(c.dst + c.bytes) + ") of " + copy_text(c, thread) +
                        " was written while the copy was in flight (seen as it landed: byte " + std::to_string(i) +
                        " no longer holds the in-flight poison); wait on its mbarrier first");
    const TensorMapCpu& m = k.map;
    const uint32_t b0 = m.box[0], b1 = m.rank > 1 ? m.box[1] : 1, b2 = m.rank > 2 ? m.box[2] : 1, e = m.elem_bytes;
    for (uint32_t i2 = 0; i2 < b2; ++i2)
        for (uint32_t i1 = 0; i1 < b1; ++i1)
            for (uint32_t i0 = 0; i0 < b0; ++i0) {
                const int64_t g[3] = {int64_t(k.coord[0]) + i0, int64_t(k.coord[1]) + i1, int64_t(k.coord[2]) + i2};
                bool inside = true;
                for (uint32_t d = 0; d < m.rank; ++d) inside = inside && g[d] >= 0 && uint64_t(g[d]) < m.dims[d];
                const uintptr_t at = tma_swizzled(uintptr_t(c.dst) + (uintptr_t(i2 * b1 + i1) * b0 + i0) * e, m.swizzle);
                char* out = reinterpret_cast<char*>(at);
                if (out < c.dst || out + e > c.dst + c.bytes)
                    fail(s, copy_text(c, thread) + ": the box's swizzled element (" + std::to_string(i0) + ", " +
                                std::to_string(i1) + ", " + std::to_string(i2) + ") falls outside its " +
                                std::to_string(c.bytes) + " bytes: a swizzled box must fill whole rows of the pattern");
                if (inside) {
                    int64_t off = 0;
                    for (uint32_t d = 0; d < m.rank; ++d) off += g[d] * int64_t(m.strides[d]);
                    memcpy(out, m.base + off, e);
                } else {
                    memset(out, 0, e);
                }
            }
    MBars& mb = mbars_of(s);
    MBar& bar = live_mbar(s, mb, k.bar, k.form, c.file, c.line);
    mbar_add_tx(s, bar, -int64_t(c.bytes), copy_text(c, thread) + ", landing");
    mbar_settle(bar);
    mbar_progress(mb);
}

// Lands now every copy in flight that completes on barrier `bar` (a thread waits on it), in issue order.
MPK_SIMT_SLOW void tma_land_on(Sched& s, const char* bar) {
    Async& a = *s.async;
    for (size_t t = 0; t < a.threads.size(); ++t) {
        std::vector<AsyncCopy>& v = a.threads[t].copies;
        size_t out = 0;
        for (size_t i = 0; i < v.size(); ++i) {
            if (v[i].group == kBulk && (*a.bulk)[size_t(v[i].bulk)].bar == bar) {
                const AsyncCopy c = v[i];
                tma_land(s, a, int(t), c);
            } else {
                v[out++] = v[i];
            }
        }
        v.resize(out);
    }
}

// cp.async.bulk.tensor.{2,3}d ... [dst], [map, {coord}], [bar], issued by the calling thread.
MPK_SIMT_SLOW void tma_load(const char* form, uint32_t rank, void* dst, const TensorMapCpu* map, const int32_t* coord,
                            uint64_t* bar, const char* file, int line) {
    Sched& s = issuing_block(form);
    Fiber* self = s.cur;
    TsanIgnore ignore;
    auto where = [&] { return std::string(form) + " at " + site(file, line) + " by " + thread_name(self); };
    if (!map || map->magic != kTensorMapMagic)
        fail(s, where() + ": the tensor map " + ptr_text(map) + " is not one (build it with mpk::ptx::make_tensor_map)");
    if (map->rank != rank)
        fail(s, where() + ": the tensor map has rank " + std::to_string(map->rank) + ", the instruction " + std::to_string(rank));
    const uint64_t bytes = box_bytes(*map);
    char* d = static_cast<char*>(dst);
    if (!in_shared(s, dst, bytes))
        fail(s, where() + ": the destination [" + ptr_text(d) + ", " + ptr_text(d + bytes) + ") is not in shared memory (" +
                    shared_text(s) + ")");
    if (uintptr_t(d) % 128) fail(s, where() + ": the destination " + ptr_text(d) + " is not 128-byte aligned");
    live_mbar(s, mbars_of(s), bar, form, file, line);
    Async& a = async_of(s);
    if (!a.bulk) {
        a.bulk = new std::vector<BulkCopy>;
        a.land_bulk = &tma_land;
        a.land_on = &tma_land_on;
        a.free_bulk = &free_bulk;
    }
    int other = -1;
    if (const AsyncCopy* o = in_flight(s, d, bytes, &other))
        fail(s, where() + ": the destination [" + ptr_text(d) + ", " + ptr_text(d + bytes) +
                    ") overlaps bytes still in flight from " + copy_text(*o, other));
    BulkCopy k{*map, {coord[0], rank > 1 ? coord[1] : 0, rank > 2 ? coord[2] : 0}, reinterpret_cast<char*>(bar), form};
    a.bulk->push_back(k);
    memset(dst, kInFlight, bytes);
    set_flags(s, a, d, bytes, 1);
    AsyncCopy c{d, nullptr, uint32_t(bytes), uint32_t(bytes), kBulk, file, line, form, int32_t(a.bulk->size() - 1)};
    const int t = int(self->tid.x);
    a.threads[size_t(t)].copies.push_back(c);
    ++s.async_pending;
    if (a.mode == 0) land_where(s, t, [&](uint32_t g) { return g != kBulk; });
}
#else
void tma_land(Sched& s, Async& a, int thread, const AsyncCopy& c);
void tma_land_on(Sched& s, const char* bar);
void tma_load(const char* form, uint32_t rank, void* dst, const TensorMapCpu* map, const int32_t* coord, uint64_t* bar,
              const char* file, int line);
#endif

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
