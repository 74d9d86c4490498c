// simt_cpu_tls.h: the poison of static __shared__ arrays. They are `static thread_local` on the
// host (simt_cpu_types.h), so they live in this module's TLS block (its PT_TLS segment), whose
// instance for the calling OS thread dl_iterate_phdr gives (dlpi_tls_data). The emulation keeps
// every thread_local of its own in one object (tl, simt_cpu_state.h), so the poison is the whole
// block less tl: at every block start and, in test mode, as the task barrier completes (the
// executor's state that must outlive a task is in block_scratch, not in a __shared__ array).
// So a code base that includes simt_cpu.h keeps no other thread_local (docs/simt.md).
// Part of runtime/simt_cpu.h.
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_tls.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <link.h>
#include <stdint.h>
#include <string.h>
#include <string>
#include "simt_cpu_sched.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

struct TlsQuery {
    uintptr_t addr;     // an address in this module's code
    bool found;         // the module holding it
    char* data;         // the calling thread's instance of its TLS block (null: none)
    size_t bytes;       // the block's size (PT_TLS p_memsz)
};
inline int tls_of_module(struct dl_phdr_info* info, size_t, void* arg) {
    TlsQuery& q = *static_cast<TlsQuery*>(arg);
    bool mine = false;
    size_t bytes = 0;
    for (int i = 0; i < int(info->dlpi_phnum); ++i) {
        const ElfW(Phdr)& ph = info->dlpi_phdr[i];
        const uintptr_t lo = uintptr_t(info->dlpi_addr + ph.p_vaddr);
        if (ph.p_type == PT_LOAD && q.addr >= lo && q.addr - lo < ph.p_memsz) mine = true;
        if (ph.p_type == PT_TLS) bytes = ph.p_memsz;
    }
    if (!mine) return 0;
    q.found = true;
    q.data = static_cast<char*>(info->dlpi_tls_data);
    q.bytes = bytes;
    return 1;
}

// The layout the poison relies on: this module found, with a TLS block that holds all of tl.
// "" if so, else why not (tested with wrong layouts in tests/csrc/test_simt.cpp).
inline std::string tls_layout_error(const TlsQuery& q, const char* me, size_t me_bytes) {
    if (q.found && q.data && me >= q.data && size_t(me - q.data) + me_bytes <= q.bytes) return "";
    char b[256];
    snprintf(b, sizeof b, "module %s, TLS block %p of %zu bytes, the emulation's state at %p (%zu bytes)",
             q.found ? "found" : "not found", static_cast<void*>(q.data), q.bytes, static_cast<const void*>(me),
             me_bytes);
    return std::string("mpk::simt: the static __shared__ poison cannot find this module's thread-local storage "
                       "as it expects (") + b + "); " + site(__FILE__, __LINE__);
}

// Once per OS thread (the pool's Sched keeps it): where this thread's TLS block of this module is,
// checked to hold tl, the emulation's own state; anything else is refused, loudly.
inline void find_tls_block(Sched& s) {
    TlsQuery q{reinterpret_cast<uintptr_t>(&tls_of_module), false, nullptr, 0};
    dl_iterate_phdr(&tls_of_module, &q);
    char* const me = reinterpret_cast<char*>(&tl);
    const std::string why = tls_layout_error(q, me, sizeof(Tls));
    if (!why.empty()) throw Error(why);
    s.tls_lo = q.data;
    s.tls_skip_lo = me;
    s.tls_skip_hi = me + sizeof(Tls);
    s.tls_hi = q.data + q.bytes;
}

// Every static __shared__ array of the module (every byte of its TLS block but tl) := fill (0xFF).
inline void poison_static_shared(Sched& s, unsigned char fill = 0xFF) {
    if (__builtin_expect(!s.tls_lo, 0)) find_tls_block(s);
    // (a module without static __shared__ arrays: both empty, no call)
    if (s.tls_skip_lo != s.tls_lo) memset(s.tls_lo, fill, size_t(s.tls_skip_lo - s.tls_lo));
    if (s.tls_hi != s.tls_skip_hi) memset(s.tls_skip_hi, fill, size_t(s.tls_hi - s.tls_skip_hi));
}

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
