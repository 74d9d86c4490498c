// simt_cpu_sched.h: the emulated block's state and its scheduler: the interface (Block, Error,
// run_block), the fiber records, the per-OS-thread pool of fibers, stacks and the shared-memory
// arena, the scheduling policy (greedy within a warp, random warps, one fiber drawn ahead), the
// switch and a fiber's entry and exit. Part of runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_sched.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cxxabi.h>
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
    LdmX1, LdmX2, LdmX4, LdmX1T, LdmX2T, LdmX4T
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
        "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"};
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

// ---- the stack pool, the scheduler and the shared-memory arena, per OS thread

inline size_t page_size() {
    static const size_t p = size_t(sysconf(_SC_PAGESIZE));
    return p;
}

struct Pool {
    Sched sched;
    Fiber* fibers = nullptr;
    int capacity = 0;
    char* arena = nullptr;  // plain builds: pooled; ASan builds: malloc'd per block
    size_t arena_cap = 0;
    char* cells = nullptr;

    void grow(int n) {
        if (n <= capacity) return;
        Fiber* nf = static_cast<Fiber*>(aligned_alloc(alignof(Fiber), sizeof(Fiber) * size_t(n)));
        char* nc = static_cast<char*>(calloc(size_t(n), 2));
        if (!nf || !nc) { free(nf); free(nc); throw std::bad_alloc(); }
        memset(static_cast<void*>(nf), 0, sizeof(Fiber) * size_t(n));
        if (capacity) memcpy(static_cast<void*>(nf), fibers, sizeof(Fiber) * size_t(capacity));
        free(fibers);
        free(cells);
        fibers = nf;
        cells = nc;
        const size_t guard = page_size(), bytes = (size_t(MPK_SIMT_STACK_BYTES) + guard - 1) / guard * guard;
        for (int i = capacity; i < n; ++i) {
            void* m = mmap(nullptr, bytes + guard, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (m == MAP_FAILED) { capacity = i; throw std::bad_alloc(); }
            mprotect(m, guard, PROT_NONE);  // overflow faults instead of corrupting a neighbor
            fibers[i].stack_lo = static_cast<char*>(m) + guard;
            fibers[i].stack_size = bytes;
#if MPK_SIMT_TSAN
            fibers[i].tsan = tsan_fiber_take();
            char name[48];
            snprintf(name, sizeof name, "simt threadIdx.x %d", i);
            __tsan_set_fiber_name(fibers[i].tsan, name);
#endif
            capacity = i + 1;
        }
    }
    char* arena_for(size_t bytes) {
#if MPK_SIMT_ASAN
        // exactly `bytes`, so a raw access past the end is an ASan heap-buffer-overflow
        void* p = nullptr;
        if (posix_memalign(&p, 1024, bytes ? bytes : 1)) throw std::bad_alloc();
        return static_cast<char*>(p);
#else
        if (bytes + 64 > arena_cap) {
            free(arena);
            arena = nullptr;
            arena_cap = 0;
            void* p = nullptr;
            const size_t cap = (bytes + 64 + 4095) / 4096 * 4096;
            if (posix_memalign(&p, 1024, cap)) throw std::bad_alloc();
            arena = static_cast<char*>(p);
            arena_cap = cap;
        }
        return arena;
#endif
    }
    void arena_done(char* p) {
#if MPK_SIMT_ASAN
        free(p);
#else
        (void)p;
#endif
    }
    ~Pool() {
        if (sched.async) sched.async_free(sched.async);
        free(sched.watch_copy);
        free(sched.scratch);
        for (int i = 0; i < capacity; ++i) {
            const size_t guard = page_size();
#if MPK_SIMT_TSAN
            tsan_fiber_give(fibers[i].tsan);
#endif
#if MPK_SIMT_ASAN
            __asan_unpoison_memory_region(fibers[i].stack_lo, fibers[i].stack_size);
#endif
            munmap(fibers[i].stack_lo - guard, fibers[i].stack_size + guard);
        }
        free(fibers);
        free(cells);
        free(arena);
    }
};
// __dso_handle: this module (crtbegin), which the C++ runtime keeps loaded until the dtor ran.
extern "C" void* __dso_handle;
inline void pool_free(void* p) {
    delete static_cast<Pool*>(p);
    tl.pool = nullptr;
}
// This OS thread's pool: created by its first block, freed when the thread exits (as a
// thread_local with a destructor would be, without putting one in the TLS block).
inline Pool& pool() {
    if (__builtin_expect(!tl.pool, 0)) {
        Pool* p = new Pool;
        if (abi::__cxa_thread_atexit(&pool_free, p, &__dso_handle)) {
            delete p;
            throw std::bad_alloc();
        }
        tl.pool = p;
    }
    return *tl.pool;
}

// ---- scheduling

inline uint32_t rand32(Sched& s) {  // a 64-bit LCG's high half: one multiply-add on the switch path
    s.rng = s.rng * 6364136223846793005ull + 1442695040888963407ull;
    return uint32_t(s.rng >> 32);
}
// A random set bit of m (m != 0): a random position if it is set, else the first set bit at or
// after another random position, cyclically. Uniform for a full mask (a warp just released),
// every set bit possible for any mask, and no data-dependent loop.
inline int random_bit(Sched& s, uint32_t m) {
    const uint32_t r = rand32(s);
    const int p = int(r & 31), q = int((r >> 5) & 31);
    if ((m >> p) & 1) return p;
    const uint32_t rot = (m >> q) | (m << ((32 - q) & 31));
    return (q + __builtin_ctz(rot)) & 31;
}

void fiber_main(void* arg);
#if MPK_SIMT_UCONTEXT
void fiber_main_uc();
#endif

inline void make_ready(Sched& s, Fiber* f) {
    const int t = int(f->tid.x);
    f->st = St::Ready;
    s.warps[t >> 5].ready |= 1u << (t & 31);
    s.ready_warps |= 1u << (t >> 5);
}

// A random ready lane of warp w, out of the ready set.
inline Fiber* pick(Sched& s, int w) {
    Warp& wp = s.warps[w];
    const int lane = random_bit(s, wp.ready);
    wp.ready &= ~(1u << lane);
    if (!wp.ready) s.ready_warps &= ~(1u << w);
    return &s.fibers[w * 32 + lane];
}

// The next ready fiber by the policy below, drawn one switch ahead (s.ahead): its saved frames
// are prefetched while the current fiber runs. The 128 fibers' stacks do not fit in L1 together,
// so without it every resume waits on the cache for the frames it returns through.
inline Fiber* pick_ahead(Sched& s) {
    if (s.cur_warp >= 0 && s.warps[s.cur_warp].ready) return pick(s, s.cur_warp);
    if (!s.ready_warps) return nullptr;
    s.cur_warp = random_bit(s, s.ready_warps);
    return pick(s, s.cur_warp);
}
// MPK_SIMT_SERIAL: the lowest ready thread (threadIdx order).
inline Fiber* pick_first(Sched& s) {
    if (!s.ready_warps) return nullptr;
    const int w = __builtin_ctz(s.ready_warps);
    Warp& wp = s.warps[w];
    const int lane = __builtin_ctz(wp.ready);
    wp.ready &= wp.ready - 1;
    if (!wp.ready) s.ready_warps &= ~(1u << w);
    return &s.fibers[w * 32 + lane];
}
inline void prefetch_frames(const Fiber* f) {
    if (!f->started) return;
    const char* sp = static_cast<const char*>(f->sp);
    for (int k = 0; k < 8; ++k) __builtin_prefetch(sp + 64 * k);
}

// f runs next (a fresh stack frame for a thread that never ran).
inline Fiber* take(Fiber* f) {
    f->st = St::Running;
    if (!f->started) {
        f->started = true;
#if MPK_SIMT_UCONTEXT
        getcontext(&f->uc);
        f->uc.uc_stack.ss_sp = f->stack_lo;
        f->uc.uc_stack.ss_size = f->stack_size;
        f->uc.uc_link = nullptr;
        makecontext(&f->uc, reinterpret_cast<void (*)()>(&fiber_main_uc), 0);
#else
        // stagger the stack tops so that the fibers' hot lines do not share L1 sets
        char* top = f->stack_lo + f->stack_size - ((f->tid.x * 5u % 64u) * 64u);
        f->sp = init_frame(top, &fiber_main, f);
#endif
    }
    return f;
}

std::string diagnose(Sched& s);
inline void fail_record(Sched& s, std::string msg) {
    if (s.aborting) return;
    s.aborting = true;
    s.error = std::move(msg);
    for (int i = 0; i < s.nthreads; ++i) {  // never-started threads have nothing to unwind
        Fiber& f = s.fibers[i];
        if (!f.started && f.st != St::Exited) {
            f.st = St::Exited;
            ++s.exited;
        }
    }
}
[[noreturn]] inline void fail(Sched& s, std::string msg) {
    fail_record(s, std::move(msg));
    throw Cancel{};
}

// The write-watch, at the end of a fiber's run segment: the watched bytes changed during it, so
// this fiber wrote them last (so far).
inline int32_t linear_tid(const Sched& s, const Fiber* f) {
    return int32_t(f->tid.x + f->tid.y * s.dim.x + f->tid.z * s.dim.x * s.dim.y);
}
inline void watch_check(Sched& s, const Fiber* self) {
    if (memcmp(s.watch_addr, s.watch_copy, s.watch_bytes) == 0) return;
    *s.watch_thread = linear_tid(s, self);
    memcpy(s.watch_copy, s.watch_addr, s.watch_bytes);
}

// The next fiber to run, or nullptr after recording a deadlock. Greedy within the current warp
// (a random ready lane), else a random warp with a ready lane; __nanosleep'd threads only when
// nothing else is ready; &main once every thread has exited.
// kDebug (MPK_SIMT_SERIAL, the write-watch): the watch at the end of the running fiber's segment,
// and the lowest ready thread instead of the policy; next_fiber picks the variant (one test).
template <bool kDebug> inline Fiber* next_fiber_as(Sched& s) {
    // the end of the running fiber's segment (none when run_block starts the first one)
    if (kDebug && s.watch_addr && s.cur != &s.main) watch_check(s, s.cur);
    for (;;) {
        Fiber* f;
        if (kDebug && s.serial) {
            f = pick_first(s);
        } else {
            f = s.ahead;
            if (!f) f = pick_ahead(s);
            if (f) {
                s.ahead = pick_ahead(s);
                if (s.ahead) prefetch_frames(s.ahead);
            }
        }
        if (f) return take(f);
        if (s.yielded) {
            for (int w = 0; w < s.nwarps; ++w) {
                Warp& wp = s.warps[w];
                if (!wp.yielded) continue;
                wp.ready |= wp.yielded;
                wp.yielded = 0;
                s.ready_warps |= 1u << w;
                for (uint32_t m = wp.ready; m; m &= m - 1) s.fibers[w * 32 + __builtin_ctz(m)].st = St::Ready;
            }
            s.yielded = 0;
            s.cur_warp = -1;
            continue;
        }
        if (s.exited == s.nthreads) return &s.main;
        fail_record(s, diagnose(s));
        return nullptr;
    }
}
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW Fiber* next_fiber(Sched& s) {
    return __builtin_expect(s.debug, 0) ? next_fiber_as<true>(s) : next_fiber_as<false>(s);
}
#else
Fiber* next_fiber(Sched& s);
#endif

// While stopping: a started fiber that still has frames to unwind, else main.
inline Fiber* unwind_next(Sched& s) {
    for (int i = 0; i < s.nthreads; ++i) {
        Fiber& f = s.fibers[i];
        if (f.started && f.st != St::Exited && f.st != St::Running) return &f;
    }
    return &s.main;
}

inline void switch_to(Sched& s, Fiber* from, Fiber* to) {
    s.cur = to;
#if MPK_SIMT_ASAN
    __sanitizer_start_switch_fiber(&from->asan_fake, to->stack_lo, to->stack_size);
#endif
    // From here to the switch TSan counts accesses as the target fiber's: read nothing more.
    void* target = to->sp;
    (void)target;
#if MPK_SIMT_TSAN
    __tsan_switch_to_fiber(to->tsan, 1 /* __tsan_switch_to_fiber_no_sync */);
#endif
#if MPK_SIMT_UCONTEXT
    swapcontext(&from->uc, &to->uc);
#else
    mpk_simt_switch_v1(&from->sp, target);
#endif
#if MPK_SIMT_ASAN
    __sanitizer_finish_switch_fiber(from->asan_fake, nullptr, nullptr);
#endif
}

// Block the running fiber (its state already says why) until it is scheduled again.
#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void block(Sched& s, Fiber* self) {
    if (s.aborting) {
        self->st = St::Running;
        if (std::uncaught_exceptions()) return;  // a destructor during unwinding: do not switch
        throw Cancel{};
    }
    self->atomics = 0;
    if (__builtin_expect(s.async_pending != 0, 0)) s.async_tick(s, self);  // a moment for copies in flight to land
    Fiber* next = next_fiber(s);
    if (next == nullptr) {  // deadlock: recorded
        self->st = St::Running;
        throw Cancel{};
    }
    if (next != self) switch_to(s, self, next);
    if (s.aborting) {
        self->st = St::Running;
        if (std::uncaught_exceptions()) return;
        throw Cancel{};
    }
}
#else
void block(Sched& s, Fiber* self);
#endif

// A fiber's last switch: its stack is never resumed (ASan drops its fake stack).
[[noreturn]] MPK_SIMT_NO_TSAN inline void exit_to(Sched& s, Fiber* self, Fiber* to) {
    s.cur = to;
#if MPK_SIMT_ASAN
    __sanitizer_start_switch_fiber(nullptr, to->stack_lo, to->stack_size);
#endif
    (void)self;
    void* target = to->sp;
    void* tsan_to = to->tsan;
    (void)target;
    (void)tsan_to;
#if MPK_SIMT_TSAN
    AnnotateIgnoreWritesEnd(__FILE__, __LINE__);  // leave the pooled TSan fiber balanced
    AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
    __tsan_switch_to_fiber(tsan_to, 1);
#endif
#if MPK_SIMT_UCONTEXT
    setcontext(&to->uc);
#else
    mpk_simt_switch_v1(&tl.dead_sp, target);
#endif
    __builtin_unreachable();
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
[[noreturn]] MPK_SIMT_NO_TSAN MPK_SIMT_SLOW void on_exit(Sched& s, Fiber* self) {
    const int t = int(self->tid.x), lane = t & 31;
    Warp& w = s.warps[t >> 5];
    self->st = St::Exited;
    ++s.exited;
    w.alive &= ~(1u << lane);
    if (!s.aborting) {
        for (uint32_t m = w.waiting; m; m &= m - 1) {
            Fiber& o = s.fibers[(t & ~31) + __builtin_ctz(m)];
            if (o.mask & (1u << lane)) {
                fail_record(s, thread_name(self) + " exited while " + thread_name(&o) + " waits for it at " +
                                   op_name(o.op) + " " + site(o.file, o.line) + " (mask " + hex(o.mask) + ")");
                break;
            }
        }
    }
    Fiber* next = s.aborting ? unwind_next(s) : next_fiber(s);
    if (next == nullptr) next = unwind_next(s);
    exit_to(s, self, next);
}
#else
[[noreturn]] void on_exit(Sched& s, Fiber* self);
#endif

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_NO_TSAN MPK_SIMT_SLOW void fiber_main(void* arg) {
    Fiber* self = static_cast<Fiber*>(arg);
    Sched* sp;
    {
        TsanIgnore ignore;
#if MPK_SIMT_ASAN
        const void* bottom = nullptr;
        size_t size = 0;
        __sanitizer_finish_switch_fiber(nullptr, &bottom, &size);
        if (!tl.s->main.stack_lo) {  // the first fiber of a block starts from run_block's stack
            tl.s->main.stack_lo = static_cast<char*>(const_cast<void*>(bottom));
            tl.s->main.stack_size = size;
        }
#endif
        sp = tl.s;
        tsan_acquire(&sp->cell_start);
    }
    Sched& s = *sp;
    if (!s.aborting) {
        try {
            s.fn(s.arg);
            if (s.async_pending) s.async_done(s, self, "exits");  // an exit with copies in flight is named
        } catch (const Cancel&) {
        } catch (const Error& e) {
            TsanIgnore ignore;
            fail_record(s, e.what());
        } catch (const std::exception& e) {
            TsanIgnore ignore;
            fail_record(s, thread_name(self) + " threw: " + e.what());
        } catch (...) {
            TsanIgnore ignore;
            fail_record(s, thread_name(self) + " threw an exception not derived from std::exception");
        }
    }
#if MPK_SIMT_TSAN
    AnnotateIgnoreReadsBegin(__FILE__, __LINE__);  // ended in exit_to
    AnnotateIgnoreWritesBegin(__FILE__, __LINE__);
#endif
    tsan_release(&s.cell_end);
    on_exit(s, self);
}
#else
void fiber_main(void* arg);
#endif
#if MPK_SIMT_UCONTEXT
inline void fiber_main_uc() { fiber_main(tl.s->cur); }
#endif
}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
