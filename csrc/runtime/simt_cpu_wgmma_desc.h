// simt_cpu_wgmma_desc.h: wgmma's shared-memory matrix descriptors on the CPU: where the granules of an
// operand lie, read through a descriptor as the PTX ISA's canonical layouts place them, and the checks on
// what they name. Part of runtime/simt_cpu.h, used by simt_cpu_wgmma.h (docs/simt.md, "wgmma").
//
// The matrix descriptor (PTX ISA, "Matrix Descriptor Format"): start address >> 4 in bits 0-13, leading
// byte offset >> 4 in 16-29, stride byte offset >> 4 in 32-45, base offset in 49-51, layout in 62-63
// (0 no swizzle, 1 128-byte, 2 64-byte, 3 32-byte). The start address is a shared-memory address, here
// an offset into the block's dynamic shared memory (mpk::ptx::shared_address), whose host allocation is
// 1024-byte aligned, so its swizzle bits are the address's as on a GPU and as TMA wrote them.
// The canonical layouts (the PTX ISA's, in the form CUTLASS's make_gmma_desc states them), in bytes: the
// 16-byte granule holding, K-major, k in [8 kc, 8 kc + 8) of row mn; MN-major, mn in [8 mc, 8 mc + 8) at k:
//   K-major,  no swizzle:  (mn / 8) SBO + kc LBO + (mn % 8) 16
//   K-major,  W-byte:      (mn / 8) SBO + (mn % 8) W + kc 16                    (LBO unused)
//   MN-major, no swizzle:  mc SBO + (k / 8) LBO + (k % 8) 16
//   MN-major, W-byte:      (mc / (W / 16)) LBO + (k / 8) SBO + (k % 8) W + (mc % (W / 16)) 16
// then swizzled on the address (bits [4, 4 + b) XOR bits [7, 7 + b), b = 1, 2, 3: TMA's pattern).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_wgmma_desc.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <string>
#include <utility>
#include <vector>
#include "simt_cpu_tma.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

struct WgDesc {
    uint32_t start, lbo, sbo, base_offset, layout;
    uint32_t width() const { return layout == 0 ? 0 : layout == 1 ? 128 : layout == 2 ? 64 : 32; }
};
inline WgDesc wg_desc(uint64_t d) {
    return WgDesc{uint32_t(d & 0x3FFF) << 4, uint32_t((d >> 16) & 0x3FFF) << 4, uint32_t((d >> 32) & 0x3FFF) << 4,
                  uint32_t((d >> 49) & 7), uint32_t(d >> 62)};
}
// The granule's byte offset from the start address, before the swizzle (the table above). K-major:
// i = mn, j = kc; MN-major: i = mc, j = k.
inline uint32_t wg_granule(const WgDesc& d, bool mn_major, uint32_t i, uint32_t j) {
    const uint32_t w = d.width();
    if (!mn_major) return w ? (i / 8) * d.sbo + (i % 8) * w + j * 16 : (i / 8) * d.sbo + j * d.lbo + (i % 8) * 16;
    const uint32_t per = w / 16;
    return w ? (i / per) * d.lbo + (j / 8) * d.sbo + (j % 8) * w + (i % per) * 16 : i * d.sbo + (j / 8) * d.lbo + (j % 8) * 16;
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
// The granules an operand's descriptor names for this warp (A: rows [16 w, 16 w + 16), B: rows [0, N)),
// checked: inside the dynamic shared memory, a layout the emulation knows, not in flight, fenced.
MPK_SIMT_SLOW void wg_operand(Sched& s, Tma& tm, const std::string& where, const char* role, uint64_t raw, bool mn_major,
                              uint32_t row0, uint32_t rows, std::vector<const char*>& at) {
    const WgDesc d = wg_desc(raw);
    const std::string name = where + ": the matrix descriptor of " + role + " (0x" + [&] {
        char b[20];
        snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(raw));
        return std::string(b);
    }() + ")";
    if (!s.smem) fail(s, name + " addresses shared memory, and the block has no dynamic shared memory");
    if (d.base_offset)
        fail(s, name + " sets the matrix base offset (" + std::to_string(d.base_offset) +
                    "); the emulation knows the canonical layouts, base offset 0: align the tile to its swizzle pattern");
    const uint32_t w = d.width();
    if (w && d.start % (8 * w) >= w)
        fail(s, name + ": its start address " + std::to_string(d.start) + " is misaligned for its " + std::to_string(w) +
                    "-byte swizzle (at byte " + std::to_string(d.start % (8 * w)) + " of the pattern's " +
                    std::to_string(8 * w) + "-byte repeat, past its first row): align the tile to " +
                    std::to_string(8 * w) + " bytes");
    const size_t first = at.size();
    auto place = [&](uint32_t i, uint32_t j) {  // every granule inside the shared memory, before what they hold
        const uint64_t off = uint64_t(d.start) + wg_granule(d, mn_major, i, j);
        const char* p = reinterpret_cast<const char*>(tma_swizzled(uintptr_t(s.smem) + off, w ? (w == 32 ? 1 : w == 64 ? 2 : 3) : 0));
        if (p < s.smem || p + 16 > s.smem + s.smem_bytes)
            fail(s, name + " names bytes [" + std::to_string(p - s.smem) + ", " + std::to_string(p - s.smem + 16) +
                        ") of shared memory (" + (mn_major ? "MN-major, granule of rows " + std::to_string(8 * i) + ".." +
                                                                 std::to_string(8 * i + 7) + " at k " + std::to_string(j)
                                                           : "K-major, row " + std::to_string(i) + ", k " +
                                                                 std::to_string(8 * j) + ".." + std::to_string(8 * j + 7)) +
                        "), outside the block's " + std::to_string(s.smem_bytes) + " bytes of dynamic shared memory");
        at.push_back(p);
    };
    if (mn_major)
        for (uint32_t mc = row0 / 8; mc < (row0 + rows) / 8; ++mc)
            for (uint32_t k = 0; k < 16; ++k) place(mc, k);
    else
        for (uint32_t r = row0; r < row0 + rows; ++r)
            for (uint32_t kc = 0; kc < 2; ++kc) place(r, kc);
    static const char kPoison[16] = {-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1};
    for (size_t g = first; g < at.size(); ++g) {
        const char* p = at[g];
        int thread = -1;
        if (const AsyncCopy* c = in_flight(s, p, 16, &thread))
            fail(s, where + " reads bytes of " + role + " that " + copy_text(*c, thread) + " will still write: " +
                        wait_for(*c));
        const size_t at16 = size_t(p - s.smem) / 16;  // (p is 16-byte aligned: the start and the offsets are)
        if (s.smem_fill == 0xFF && memcmp(p, kPoison, 16) == 0 && !tm.landed[at16])
            fail(s, where + " reads shared memory [" + std::to_string(p - s.smem) + ", " + std::to_string(p - s.smem + 16) +
                        ") of " + role + " that nothing wrote in this task (it holds the poison the task began with): its "
                        "data has not arrived (a wait on its mbarrier that passed on the wrong phase parity: a fresh "
                        "barrier's parity-1 wait passes at once; or a read before its copy was issued)");
        const char* base = tm.fenced.data() + (p - s.smem);
        if (memcmp(p, base, 16) != 0) {
            int b = 0;
            while (p[b] == base[b]) ++b;
            fail(s, where + " reads byte " + std::to_string(p - s.smem + b) + " of shared memory (" + role +
                        "), written through the generic proxy after the last fence.proxy.async: wgmma reads through "
                        "the async proxy (fence.proxy.async.shared::cta after the writes, before the wgmma)");
        }
    }
}
// The shared-memory address of p as wgmma's descriptors hold it: its offset in the dynamic shared memory.
MPK_SIMT_SLOW uint32_t shared_address(const void* p, const char* file, int line) {
    Sched& s = issuing_block("mpk::ptx::shared_address");
    const char* c = static_cast<const char*>(p);
    if (!s.smem || c < s.smem || c >= s.smem + s.smem_bytes)
        fail(s, "mpk::ptx::shared_address at " + site(file, line) + ": " + ptr_text(p) + " is not in " + shared_text(s) +
                    " (the emulation's shared addresses, which matrix descriptors hold, are offsets into it)");
    return uint32_t(c - s.smem);
}
// A matrix descriptor's offsets must be what its 14-bit fields hold.
MPK_SIMT_SLOW void descriptor_checked(uint32_t lbo, uint32_t sbo, const char* file, int line) {
    Sched& s = issuing_block("mpk::ptx::wgmma_descriptor");
    const std::pair<const char*, uint32_t> offsets[2] = {{"leading", lbo}, {"stride", sbo}};
    for (const auto& o : offsets)
        if (o.second % 16 || o.second >= (1u << 18))
            fail(s, "mpk::ptx::wgmma_descriptor at " + site(file, line) + ": the " + o.first + " byte offset " +
                        std::to_string(o.second) + " is not a multiple of 16 below 2^18 (a 14-bit field of bytes >> 4)");
}
#else
void wg_operand(Sched& s, Tma& tm, const std::string& where, const char* role, uint64_t raw, bool mn_major, uint32_t row0,
                uint32_t rows, std::vector<const char*>& at);
uint32_t shared_address(const void* p, const char* file, int line);
void descriptor_checked(uint32_t lbo, uint32_t sbo, const char* file, int line);
#endif

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
