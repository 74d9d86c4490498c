// guard.h: test mode's guard pages on the CPU backend (docs/runtime.md, "Memory safety in test
// mode"). Python hands every kernel a guarded copy of each tensor (mirage/mpk/guard.py: red zones,
// then PROT_NONE guard pages on both sides) and, through MpkConfig, the table of guard ranges and a
// buffer for fault records. A kernel that reaches a guard page raises SIGSEGV; this handler, when
// the address lies in a range of the table of the thread that faulted, records the fault (address,
// tensor, read or write where the CPU says, the task the worker shows, the worker), opens that page
// (mprotect, filled with MPK_GUARD_RED_BYTE so Python reads back what was written) and returns: the
// access completes inside our own mapping and the launch goes on. Python closes the pages again
// before the next launch and raises MPKMemoryError from the records (mirage/mpk/memcheck.py).
//
// State: the table reaches the handler through one thread_local pointer, set by a ThreadScope on
// each thread that runs task code (a launch's worker threads, host_cpu.h; mpk_run_task's caller,
// entry.h) and cleared when it ends. The handler is installed once per loaded module, at its first
// launch with a guard table, and chains: any other fault (not ours: another address, no scope on
// the thread, or not raised by the kernel) goes to the handler that was installed before it
// (Python's faulthandler under pytest), with the default action (the process dies by the signal)
// when there was none. Apart from that one installation, the module keeps no global mutable state.
// A handler installed after ours that does not chain takes guard faults first (the process then
// dies as it would without guards). Test: tests/runtime_python/test_mode/test_memory_safety.py
#pragma once
#if defined(__CUDACC__)
#error "runtime/guard.h is the CPU backend's (the GPU has red zones only: docs/runtime.md)"
#endif
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>
#include <mutex>
#include "abi.h"
#include "simt_cpu.h"

namespace mpk {
namespace guard {

struct Table {
    const int64_t* ranges = nullptr;  // MPK_GUARD_RANGE_FIELDS per range: lo, hi (addresses), tensor
    int32_t num_ranges = 0;
    int32_t max_faults = 0;
    int64_t* faults = nullptr;        // MPK_GUARD_FAULT_FIELDS per record (abi.h)
    int64_t* count = nullptr;         // every fault, also those past max_faults
};

// What the thread running task code is doing, for the handler.
struct Context {
    const Table* table;
    const int64_t* shown;   // where the worker shows its running task (exec::WorkerSlot::task), or null
    int64_t task;           // the task when shown is null (mpk_run_task)
    int32_t worker;         // -1: not a worker (mpk_run_task's caller)
};

// The calling thread's context: a field of the emulation's one thread_local struct (simt_cpu_state.h
// Tls), since the emulation poisons every other thread_local of the module at each task start as a
// static __shared__ array (simt_cpu_tls.h). The default TLS model: static TLS ("initial-exec") is too
// scarce for a dlopen'ed module (the load fails with "cannot allocate memory in static TLS block").
// So a foreign fault on a thread that never touched this module's TLS makes glibc allocate its block
// inside the handler; that thread dies by the fault either way, unless the fault was inside malloc
// (glibc bug 16133).
inline Context* current() { return static_cast<Context*>(simt::detail::tl.guard); }
inline void set_current(Context* c) { simt::detail::tl.guard = c; }

// Sets the calling thread's context for its lifetime (nothing when the table is empty).
class ThreadScope {
  public:
    ThreadScope(const Table& t, const int64_t* shown, int64_t task, int32_t worker)
        : ctx_{&t, shown, task, worker}, saved_(current()) {
        if (t.num_ranges > 0) set_current(&ctx_);
    }
    ~ThreadScope() { set_current(saved_); }
    ThreadScope(const ThreadScope&) = delete;
    ThreadScope& operator=(const ThreadScope&) = delete;

  private:
    Context ctx_;
    Context* saved_;
};

#pragma GCC visibility push(hidden)
struct Installed {
    std::mutex mu;
    bool on = false;
    struct sigaction prev_segv, prev_bus;
};
inline Installed& installed() {
    static Installed i;
    return i;
}

inline int32_t access_of(void* uc) {
#if defined(__x86_64__)
    const greg_t err = static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_ERR];  // page-fault error code
    return (err & 2) ? MPK_ACCESS_WRITE : MPK_ACCESS_READ;
#else
    (void)uc;
    return MPK_ACCESS_UNKNOWN;
#endif
}

// Ours if the kernel raised it (si_code > 0) at an address in a guard range of this thread's table.
inline bool claim(const Context& c, const siginfo_t* si, void* uc) {
    if (si->si_code <= 0) return false;  // sent by kill/raise: not an access
    const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr);
    const Table& t = *c.table;
    for (int32_t i = 0; i < t.num_ranges; ++i) {
        const int64_t* r = t.ranges + int64_t(i) * MPK_GUARD_RANGE_FIELDS;
        if (a < uintptr_t(r[0]) || a >= uintptr_t(r[1])) continue;
        const uintptr_t size = uintptr_t(sysconf(_SC_PAGESIZE));
        void* page = reinterpret_cast<void*>(a & ~(size - 1));
        if (mprotect(page, size, PROT_READ | PROT_WRITE) != 0) return false;
        memset(page, MPK_GUARD_RED_BYTE, size);
        const int64_t n = __atomic_fetch_add(t.count, int64_t(1), __ATOMIC_RELAXED);
        if (n < t.max_faults) {
            int64_t* f = t.faults + n * MPK_GUARD_FAULT_FIELDS;
            f[0] = int64_t(a);
            f[1] = r[2];
            f[2] = access_of(uc);
            f[3] = c.shown ? __atomic_load_n(c.shown, __ATOMIC_RELAXED) : c.task;
            f[4] = c.worker;
        }
        return true;
    }
    return false;
}

inline void on_fault(int sig, siginfo_t* si, void* uc) {
    const Context* c = current();
    if (c && claim(*c, si, uc)) return;  // the access is retried on the open page
    Installed& in = installed();
    const struct sigaction& prev = sig == SIGBUS ? in.prev_bus : in.prev_segv;
    if (prev.sa_flags & SA_SIGINFO) {
        if (prev.sa_sigaction) prev.sa_sigaction(sig, si, uc);
        return;
    }
    if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
        prev.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);  // no handler before ours: the default action, as without guards
    raise(sig);
}

// Installs on_fault for SIGSEGV and SIGBUS, once per loaded module. Returns false if sigaction failed.
inline bool install() {
    Installed& in = installed();
    std::lock_guard<std::mutex> lock(in.mu);
    if (in.on) return true;
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_sigaction = on_fault;
    a.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&a.sa_mask);
    if (sigaction(SIGSEGV, &a, &in.prev_segv) != 0) return false;
    if (sigaction(SIGBUS, &a, &in.prev_bus) != 0) {
        sigaction(SIGSEGV, &in.prev_segv, nullptr);
        return false;
    }
    in.on = true;
    return true;
}

#pragma GCC visibility pop
}  // namespace guard
}  // namespace mpk
