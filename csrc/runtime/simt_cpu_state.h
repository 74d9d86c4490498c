// simt_cpu_state.h: the emulated block's interface (Block, Error, run_block's declaration) and its
// state: the collective ops, the fiber records, a warp's and the block's scheduler state, the one
// thread_local object, and the helpers messages are made of. Part of runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_state.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include "random.h"
#include "task_view.h"
#include "simt_cpu_config.h"
#include "simt_cpu_types.h"
#include "simt_cpu_sanitizer.h"
#include "simt_cpu_switch.h"
#if MPK_SIMT_UCONTEXT
#include <ucontext.h>
#endif

namespace mpk {
namespace simt {

// ---- the interface

struct Block {
    int threads;        // a multiple of 32, at most 1024
    size_t smem_bytes;  // dynamic shared memory (mpk::smem)
    uint64_t seed;      // the schedule: the same seed, the same interleaving
    // The write-watch (TaskView::watch_addr): after every fiber's run segment the emulation
    // compares these bytes and stores into *watch_thread the linear thread index of the last
    // fiber during whose segment they changed (-1: none did).
    const void* watch_addr = nullptr;
    size_t watch_bytes = 0;
    int32_t* watch_thread = nullptr;
    // The byte a fresh block finds in its shared memory, static and dynamic: 0xFF (NaN in every float
    // dtype); a kernel-level run's second poison uses another, so a read of shared memory the block
    // never wrote changes the result (mirage/mpk/testing/kernel.py).
    unsigned char smem_fill = 0xFF;
    // Forced contention on the emulated atomics (the executor's worker blocks under schedule jitter,
    // host_cpu.h): a thread pauses, by a seeded draw, between an atomic's load and its compare-and-swap
    // (atomic_window, simt_cpu_sync.h), so another worker's update of the same word lands in between and
    // a kernel's compare-and-swap that does not retry loses an update (docs/simt.md, "Atomics under
    // contention").
    bool contend = false;
};

// Any SIMT violation in a block, thrown by run_block on the caller's stack.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <class F> void run_block(const Block& b, F&& body);
inline Block block_of(const TaskView& v) {
    return Block{v.block_threads, size_t(v.smem_bytes < 0 ? 0 : v.smem_bytes), v.simt_seed,
                 v.watch_addr, v.watch_bytes, v.watch_thread, v.smem_fill};
}

#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

// ---- state

enum class St : uint8_t { Ready, Running, Barrier, Warp, Yielded, Exited };
enum class Op : uint8_t {
    Syncwarp, ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, MatchAny, MatchAll,
    RedAddU, RedMinU, RedMaxU, RedMinI, RedMaxI, RedAnd, RedOr, RedXor,
    SyncThreads, SyncCount, SyncAnd, SyncOr,
    // the tensor-core warp collectives (runtime/ptx.h; simt_cpu_ptx.h): one per PTX form, so a message names it
    MmaK16Bf16, MmaK16F16, MmaK8Bf16, MmaK8F16, MmaK32E4m3,
    LdmX1, LdmX2, LdmX4, LdmX1T, LdmX2T, LdmX4T,
    StmX1, StmX2, StmX4, StmX1T, StmX2T, StmX4T,
    Wgmma, WgmmaFence, WgmmaCommit, WgmmaWait  // (simt_cpu_wgmma.h: their messages name the shape)
};
inline const char* op_name(Op op) {
    static const char* const names[] = {
        "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
        "__ballot_sync", "__any_sync", "__all_sync", "__match_any_sync", "__match_all_sync",
        "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync",
        "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
        "__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or",
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32", "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32",
        "ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
        "stmatrix.sync.aligned.m8n8.x1.shared.b16", "stmatrix.sync.aligned.m8n8.x2.shared.b16",
        "stmatrix.sync.aligned.m8n8.x4.shared.b16", "stmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
        "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
        "wgmma.mma_async.sync.aligned", "wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned",
        "wgmma.wait_group.sync.aligned"};
    return names[int(op)];
}

// The first 64 bytes are what a switch, a barrier and a collective's arrival touch (one cache
// line per fiber and switch: the 128 fibers of a worker block do not fit in L1 together).
struct alignas(64) Fiber {
    void* sp;            // saved stack pointer (hand-written switch)
    uint3 tid;           // threadIdx
    St st;
    Op op;               // the barrier or collective it waits at
    bool started;
    int atomics;         // atomics since it last blocked (a spin yields every kSpinAtomics)
    int line;            // call site of the wait
    const char* file;
    uint32_t mask;       // the collective's mask
    int32_t arg, width;  // lane / delta / laneMask, segment width
    uint64_t in;         // the value it contributed
    // -- second line
    uint64_t out;        // the result it receives
    char* stack_lo;      // the stack [stack_lo, stack_lo + stack_size), guard page below
    size_t stack_size;
    void* tsan;          // TSan fiber
    void* asan_fake;     // ASan fake stack while switched out
    uint32_t sync_mask, sync_par, par;  // TSan __syncwarp: lanes and their cell parities
    uint64_t contend_rng;  // its atomics' pauses (Block::contend; atomic_window)
#if MPK_SIMT_UCONTEXT
    ucontext_t uc;
#endif
};
static_assert(offsetof(Fiber, in) + sizeof(uint64_t) <= 64, "a fiber's hot fields share one cache line");

struct Warp {
    uint32_t alive;    // lanes not exited
    uint32_t ready;    // runnable, not running
    uint32_t yielded;  // runnable after every ready thread has run (__nanosleep)
    uint32_t waiting;  // at a warp collective
};

struct Cancel {};  // unwinds a fiber's stack when the block stops; never leaves the fiber
struct Async;      // the block's cp.async copies in flight (simt_cpu_async.h)
struct MBars;      // the block's mbarriers (simt_cpu_mbarrier.h)
constexpr int kSpinAtomics = 256;

struct Sched {
    int nthreads = 0, nwarps = 0;
    dim3 dim;
    Fiber* fibers = nullptr;
    Fiber main{};                // the run_block caller
    Fiber* cur = nullptr;
    void (*fn)(void*) = nullptr;
    void* arg = nullptr;
    Warp warps[32];
    uint32_t ready_warps = 0;    // warps with a ready lane
    int cur_warp = -1;           // greedy: run this warp until none of its lanes is ready
    Fiber* ahead = nullptr;      // the next to run, drawn already (out of the ready masks)
    // serial or watching: next_fiber takes its slow path (one test per switch, beside the
    // switch path's other fields)
    bool debug = false;
    // MPK_SIMT_SERIAL=1 (read at each block start): the lowest ready thread runs next, nothing
    // drawn ahead: thread 0 until it blocks, then thread 1, ... (docs/simt.md, Debugging)
    bool serial = false;
    int yielded = 0, exited = 0;
    uint64_t rng = 1;
    bool contend = false;        // Block::contend
    // barrier
    int at_barrier = 0, bar_true = 0;
    bool bar_divergent = false;
    const char* bar_file = nullptr;
    int bar_line = 0;
    uint64_t bar_gen = 0;
    int bar_result = 0;
    // shared memory
    char* smem = nullptr;
    size_t smem_bytes = 0;
    bool smem_touched = false;   // mpk::smem / smem_base handed out since the last poison
    unsigned char smem_fill = 0xFF;  // what the block found in its shared memory (Block::smem_fill)
    // the first violation; then every started fiber unwinds and run_block throws
    bool aborting = false;
    std::string error;
    // TSan synchronization cells (only their addresses matter)
    char cell_start = 0, cell_end = 0, cell_bar[2] = {0, 0};
    char* cell_lane = nullptr;  // [nthreads][2]
    // the write-watch (Block::watch_addr, null: off); watch_copy holds the bytes as last seen
    const char* watch_addr = nullptr;
    size_t watch_bytes = 0;
    int32_t* watch_thread = nullptr;
    char* watch_copy = nullptr;
    size_t watch_cap = 0;
    // static __shared__ poison: the OS thread's instance of this module's TLS block, less the
    // emulation's own state (tl), as [tls_lo, tls_skip_lo) and [tls_skip_hi, tls_hi)
    char *tls_lo = nullptr, *tls_skip_lo = nullptr, *tls_skip_hi = nullptr, *tls_hi = nullptr;
    // cp.async (simt_cpu_async.h): the copies in flight, created by the block's first; async_pending
    // counts them (block() lands some of the running thread's on the way, when the block's draw says so)
    Async* async = nullptr;
    int async_pending = 0;
    bool async_ready = false;   // async set up for the running block (run() clears it)
    // ... its functions, set with it: a module that never issues a cp.async compiles none of them
    void (*async_tick)(Sched& s, Fiber* self) = nullptr;                   // a blocking point of self
    void (*async_done)(Sched& s, Fiber* self, const char* what) = nullptr; // self's task ends or it exits
    void (*async_free)(Async* a) = nullptr;
    void (*async_task_end)(Sched& s) = nullptr;  // a task of a worker block ended (simt_cpu_tma.h's fence baseline)
    std::string (*async_end)(Sched& s) = nullptr;  // the block ended: what is left inconsistent ("": nothing)
    // mbarrier (simt_cpu_mbarrier.h): the block's barriers, set up by its first mbarrier instruction
    MBars* mbar = nullptr;
    bool mbar_ready = false;    // set up for the running block (run() clears it)
    void (*mbar_free)(MBars* m) = nullptr;
    std::string (*mbar_end)(Sched& s) = nullptr;  // what is unbalanced as the block or a task ends ("": nothing)
    // the executor's per-block state (block_scratch): not shared memory, never poisoned
    char* scratch = nullptr;
    size_t scratch_bytes = 0;
    bool scratch_given = false;  // handed out in this block
};

struct Pool;
// Every thread_local of the emulation, in one object: the poison of static __shared__ arrays
// (`static thread_local` here, simt_cpu_types.h) fills the module's whole TLS block except this
// (simt_cpu_block.h, poison_static_shared). s is the block running on this OS thread (its
// running fiber is s->cur). Constant-initialized, trivially destructible, so access is a plain
// TLS load; s is written when a block starts and ends, never per switch: in a shared module
// every TLS access is a call. The pool is heap-allocated and freed at thread exit.
struct Tls {
    Sched* s;
    Pool* pool;
    void* dead_sp;  // where an exiting fiber's last switch stores its stack pointer
    void* guard;    // test mode's guard-page context of this thread (guard.h ThreadScope), or null
};
inline thread_local Tls tl{nullptr, nullptr, nullptr, nullptr};

// ---- messages

inline const char* base_name(const char* path) {
    const char* b = path;
    for (const char* p = path; *p; ++p)
        if (*p == '/' || *p == '\\') b = p + 1;
    return b;
}
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW std::string site(const char* file, int line) {
    return std::string(base_name(file)) + ":" + std::to_string(line);
}
#else
std::string site(const char* file, int line);
#endif
inline std::string hex(uint32_t m) {
    char b[16];
    snprintf(b, sizeof b, "0x%08x", m);
    return b;
}
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW std::string thread_name(const Fiber* f) {
    return "threadIdx.x " + std::to_string(f->tid.x) + " (warp " + std::to_string(f->tid.x / 32) +
           ", lane " + std::to_string(f->tid.x % 32) + ")";
}
#else
std::string thread_name(const Fiber* f);
#endif
inline bool same_site(const char* f1, int l1, const char* f2, int l2) {
    return l1 == l2 && (f1 == f2 || strcmp(f1, f2) == 0);
}

[[noreturn]] inline void outside(const char* what) {
    throw Error(std::string(what) + " called outside mpk::simt::run_block (no thread block is running "
                                    "on this OS thread)");
}

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
