// simt_cpu.h: the CUDA execution model on the CPU, for the host compiler only (runtime/simt.h
// includes it when not under nvcc). A task kernel written in CUDA runs unchanged: one thread
// block = N user-space fibers on the calling OS thread, switched only at barriers, warp
// collectives, __nanosleep and thread exit, in a seeded random order.
//
//   mpk::simt::run_block({threads, smem_bytes, seed}, body)   runs body() on `threads` fibers
//   MPK_RUN_TASK(v, fn)                                        fn(v) as one block (block_of(v)), or
//                                                              on the calling thread inside a block
//                                                              (the executor's worker block)
//   mpk::smem<T>(byte_offset, count)                           the block's dynamic shared memory
//
// It guarantees what the hardware guarantees and no more: a barrier needs every live thread at
// the same call site; a warp collective rendezvouses exactly the lanes of its mask (warps are
// not lockstep); shared memory starts poisoned (0xFF); the order of warps and lanes between
// blocking points comes from the seed. A violation stops the block and throws
// mpk::simt::Error from run_block naming the call site(s), e.g.
//   "divergent __syncthreads: rmsnorm.cuh:41 reached by 64 of 128 threads, rmsnorm.cuh:50 by 64"
// ThreadSanitizer sees every emulated thread as a fiber (a release/acquire per barrier
// generation and per __syncwarp); AddressSanitizer is told about every stack switch.
// docs/simt.md has the guarantees, the scheduling policy, the messages and the costs.
// Test: tests/csrc/test_simt.cpp; run: bash tests/csrc/run_simt_tests.sh
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu.h emulates CUDA for the host compiler; nvcc uses the real builtins (runtime/simt.h)"
#endif

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include "dtypes.h"
#include "platform.h"
#include "random.h"
#include "task_view.h"

// ---- which sanitizer, which context switch

#if defined(__SANITIZE_THREAD__)
#define MPK_SIMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MPK_SIMT_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define MPK_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MPK_SIMT_ASAN 1
#endif
#endif
#ifndef MPK_SIMT_TSAN
#define MPK_SIMT_TSAN 0
#endif
// A fiber's entry and exit path never return; TSan must not record them as calls (its shadow
// stack of a pooled fiber would grow by them at every block).
#if MPK_SIMT_TSAN
#define MPK_SIMT_NO_TSAN __attribute__((no_sanitize_thread))
#else
#define MPK_SIMT_NO_TSAN
#endif
#ifndef MPK_SIMT_ASAN
#define MPK_SIMT_ASAN 0
#endif

// A hand-written switch (callee-saved registers and the stack pointer) on x86-64 SysV and
// aarch64; ucontext elsewhere or with -DMPK_SIMT_UCONTEXT=1 (swapcontext makes a syscall per
// switch: about 22x slower).
#ifndef MPK_SIMT_UCONTEXT
#if (defined(__x86_64__) || defined(__aarch64__)) && defined(__linux__)
#define MPK_SIMT_UCONTEXT 0
#else
#define MPK_SIMT_UCONTEXT 1
#endif
#endif
#if MPK_SIMT_UCONTEXT
#include <ucontext.h>
#endif

// Fiber stack size (a guard page below each). Sanitizers need bigger frames.
#ifndef MPK_SIMT_STACK_BYTES
#if MPK_SIMT_TSAN || MPK_SIMT_ASAN
#define MPK_SIMT_STACK_BYTES (256 * 1024)
#else
#define MPK_SIMT_STACK_BYTES (64 * 1024)
#endif
#endif

// ---- CUDA's keywords and vector types (global namespace, as CUDA has them)

#define __device__
#define __host__
#define __global__
#define __constant__
#define __managed__
#define __grid_constant__
#define __launch_bounds__(...)
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
// A block runs on one OS thread and blocks on one OS thread run one after another, so a static
// per-OS-thread variable is exactly per block. NOT poisoned (only the dynamic arena is).
// `extern __shared__` arrays are not supported: use mpk::smem.
#define __shared__ static thread_local
// (__noinline__ is left undefined: libstdc++ spells __attribute__((__noinline__)).)

struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};
inline constexpr int warpSize = 32;
inline constexpr uint3 blockIdx{0, 0, 0};  // a task is always block 0 of a 1-block grid
inline constexpr dim3 gridDim{1, 1, 1};

#define MPK_SIMT_VEC124(T, N1, N2, N4, A2, A4)                                           \
    struct N1 { T x; };                                                                  \
    struct alignas(A2) N2 { T x, y; };                                                   \
    struct alignas(A4) N4 { T x, y, z, w; };                                             \
    inline constexpr N1 make_##N1(T x) { return N1{x}; }                                 \
    inline constexpr N2 make_##N2(T x, T y) { return N2{x, y}; }                         \
    inline constexpr N4 make_##N4(T x, T y, T z, T w) { return N4{x, y, z, w}; }
#define MPK_SIMT_VEC(T, N1, N2, N3, N4, A2, A4)                                          \
    MPK_SIMT_VEC124(T, N1, N2, N4, A2, A4)                                               \
    struct N3 { T x, y, z; };                                                            \
    inline constexpr N3 make_##N3(T x, T y, T z) { return N3{x, y, z}; }
MPK_SIMT_VEC(signed char, char1, char2, char3, char4, 2, 4)
MPK_SIMT_VEC(unsigned char, uchar1, uchar2, uchar3, uchar4, 2, 4)
MPK_SIMT_VEC(short, short1, short2, short3, short4, 4, 8)
MPK_SIMT_VEC(unsigned short, ushort1, ushort2, ushort3, ushort4, 4, 8)
MPK_SIMT_VEC(int, int1, int2, int3, int4, 8, 16)
MPK_SIMT_VEC124(unsigned, uint1, uint2, uint4, 8, 16)
MPK_SIMT_VEC(long long, longlong1, longlong2, longlong3, longlong4, 16, 16)
MPK_SIMT_VEC(unsigned long long, ulonglong1, ulonglong2, ulonglong3, ulonglong4, 16, 16)
MPK_SIMT_VEC(float, float1, float2, float3, float4, 8, 16)
MPK_SIMT_VEC(double, double1, double2, double3, double4, 16, 16)
#undef MPK_SIMT_VEC
#undef MPK_SIMT_VEC124
inline constexpr uint3 make_uint3(unsigned x, unsigned y, unsigned z) { return uint3{x, y, z}; }
static_assert(alignof(float4) == 16 && sizeof(float4) == 16 && alignof(float2) == 8, "CUDA's alignment");

// bf16 / fp16 under CUDA's names (mpk::bf16_t / fp16_t; conversions round to nearest even).
using __nv_bfloat16 = mpk::bf16_t;
using __half = mpk::fp16_t;
struct alignas(4) __nv_bfloat162 { __nv_bfloat16 x, y; };
struct alignas(4) __half2 { __half x, y; };
inline float __bfloat162float(__nv_bfloat16 v) { return mpk::to_float(v); }
inline __nv_bfloat16 __float2bfloat16(float f) { return mpk::from_float<mpk::bf16_t>(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return mpk::from_float<mpk::bf16_t>(f); }
inline float __half2float(__half v) { return mpk::to_float(v); }
inline __half __float2half(float f) { return mpk::from_float<mpk::fp16_t>(f); }
inline __half __float2half_rn(float f) { return mpk::from_float<mpk::fp16_t>(f); }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return float2{to_float(v.x), to_float(v.y)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__float2bfloat16(a), __float2bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __floats2bfloat162_rn(v.x, v.y); }
inline float2 __half22float2(__half2 v) { return float2{to_float(v.x), to_float(v.y)}; }
inline __half2 __floats2half2_rn(float a, float b) { return {__float2half(a), __float2half(b)}; }
inline __half2 __float22half2_rn(float2 v) { return __floats2half2_rn(v.x, v.y); }

namespace mpk {
namespace simt {

// ---- the interface

struct Block {
    int threads;        // a multiple of 32, at most 1024
    size_t smem_bytes;  // dynamic shared memory (mpk::smem)
    uint64_t seed;      // the schedule: the same seed, the same interleaving
};

// Any SIMT violation in a block, thrown by run_block on the caller's stack.
class Error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

template <class F> void run_block(const Block& b, F&& body);
inline Block block_of(const TaskView& v) {
    return Block{v.block_threads, size_t(v.smem_bytes < 0 ? 0 : v.smem_bytes), v.simt_seed};
}

#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

// ---- sanitizer hooks (declared here: the sanitizer headers need not be installed)

#pragma GCC visibility push(default)  // defined by the sanitizer runtime
extern "C" {
#if MPK_SIMT_TSAN
void* __tsan_get_current_fiber(void);
void* __tsan_create_fiber(unsigned flags);
void __tsan_destroy_fiber(void* fiber);
void __tsan_switch_to_fiber(void* fiber, unsigned flags);
void __tsan_set_fiber_name(void* fiber, const char* name);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
void AnnotateIgnoreReadsBegin(const char* file, int line);
void AnnotateIgnoreReadsEnd(const char* file, int line);
void AnnotateIgnoreWritesBegin(const char* file, int line);
void AnnotateIgnoreWritesEnd(const char* file, int line);
#endif
#if MPK_SIMT_ASAN
void __sanitizer_start_switch_fiber(void** fake_stack_save, const void* bottom, size_t size);
void __sanitizer_finish_switch_fiber(void* fake_stack_save, const void** bottom_old, size_t* size_old);
void __asan_unpoison_memory_region(void const volatile* addr, size_t size);
#endif
}
#pragma GCC visibility pop

#if MPK_SIMT_TSAN
// The scheduler's own bookkeeping is shared by all fibers with no happens-before between them
// (switches are no_sync, so that user data races stay visible): TSan ignores it.
struct TsanIgnore {
    TsanIgnore() { AnnotateIgnoreReadsBegin(__FILE__, __LINE__); AnnotateIgnoreWritesBegin(__FILE__, __LINE__); }
    ~TsanIgnore() { AnnotateIgnoreWritesEnd(__FILE__, __LINE__); AnnotateIgnoreReadsEnd(__FILE__, __LINE__); }
};
inline void tsan_release(void* a) { __tsan_release(a); }
inline void tsan_acquire(void* a) { __tsan_acquire(a); }
#else
struct TsanIgnore {
    TsanIgnore() {}  // user-provided: no unused-variable warning at the call sites
};
inline void tsan_release(void*) {}
inline void tsan_acquire(void*) {}
#endif

// ---- context switch: mpk_simt_switch_v1(&save_sp, load_sp) saves the callee-saved state on
// the current stack, stores sp, loads the other sp, restores, returns there. A new fiber's
// stack holds a frame whose return address is mpk_simt_entry_v1, which calls entry(arg).
// Each object file carries a copy in a COMDAT group; the linker keeps one.

#if !MPK_SIMT_UCONTEXT
extern "C" __attribute__((visibility("hidden"))) void mpk_simt_switch_v1(void** save_sp, void* load_sp);
extern "C" __attribute__((visibility("hidden"))) void mpk_simt_entry_v1();
#if defined(__x86_64__)
// Frame (low to high): r15 | r14 | r13 | r12 | rbx | rbp | return address. The floating-point
// control state (MXCSR, x87 control word) is not switched: every fiber of a block runs with the
// caller's (saving it doubled the cost of a switch); a kernel must not change rounding modes.
asm(R"(
    .pushsection .text.mpk_simt_switch_v1,"axG",@progbits,mpk_simt_switch_v1,comdat
    .weak mpk_simt_switch_v1
    .hidden mpk_simt_switch_v1
    .type mpk_simt_switch_v1,@function
    .p2align 4
mpk_simt_switch_v1:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size mpk_simt_switch_v1,.-mpk_simt_switch_v1
    .weak mpk_simt_entry_v1
    .hidden mpk_simt_entry_v1
    .type mpk_simt_entry_v1,@function
mpk_simt_entry_v1:
    movq %r12, %rdi
    callq *%r13
    ud2
    .size mpk_simt_entry_v1,.-mpk_simt_entry_v1
    .popsection
)");
inline void* init_frame(char* top, void (*entry)(void*), void* arg) {
    // After `ret` sp = top - 16 (16-aligned), so entry() sees sp = 8 mod 16 after the call.
    void** f = reinterpret_cast<void**>(top - 16) - 7;
    f[0] = nullptr;                                     // r15
    f[1] = nullptr;                                     // r14
    f[2] = reinterpret_cast<void*>(entry);              // r13
    f[3] = arg;                                         // r12
    f[4] = nullptr;                                     // rbx
    f[5] = nullptr;                                     // rbp: frame-pointer walks stop here
    f[6] = reinterpret_cast<void*>(&mpk_simt_entry_v1);  // return address
    return f;
}
#elif defined(__aarch64__)
// Frame (low to high): x19..x28, x29, x30 (return address), d8..d15: 160 bytes. FPCR is not
// switched (as on x86-64: every fiber runs with the caller's floating-point control state).
asm(R"(
    .pushsection .text.mpk_simt_switch_v1,"axG",%progbits,mpk_simt_switch_v1,comdat
    .weak mpk_simt_switch_v1
    .hidden mpk_simt_switch_v1
    .type mpk_simt_switch_v1,%function
    .p2align 4
mpk_simt_switch_v1:
    sub sp, sp, #160
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #160
    ret
    .size mpk_simt_switch_v1,.-mpk_simt_switch_v1
    .weak mpk_simt_entry_v1
    .hidden mpk_simt_entry_v1
    .type mpk_simt_entry_v1,%function
mpk_simt_entry_v1:
    mov x0, x19
    blr x20
    brk #0
    .size mpk_simt_entry_v1,.-mpk_simt_entry_v1
    .popsection
)");
inline void* init_frame(char* top, void (*entry)(void*), void* arg) {
    void** f = reinterpret_cast<void**>(top - 160);
    memset(f, 0, 160);
    f[0] = arg;                                          // x19
    f[1] = reinterpret_cast<void*>(entry);               // x20
    f[11] = reinterpret_cast<void*>(&mpk_simt_entry_v1);  // x30 (x29 = 0: frame walks stop)
    return f;
}
#endif
#endif  // !MPK_SIMT_UCONTEXT

// ---- state

enum class St : uint8_t { Ready, Running, Barrier, Warp, Yielded, Exited };
enum class Op : uint8_t {
    Syncwarp, ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, MatchAny, MatchAll,
    RedAddU, RedMinU, RedMaxU, RedMinI, RedMaxI, RedAnd, RedOr, RedXor,
    SyncThreads, SyncCount, SyncAnd, SyncOr
};
inline const char* op_name(Op op) {
    static const char* const names[] = {
        "__syncwarp", "__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
        "__ballot_sync", "__any_sync", "__all_sync", "__match_any_sync", "__match_all_sync",
        "__reduce_add_sync", "__reduce_min_sync", "__reduce_max_sync", "__reduce_min_sync",
        "__reduce_max_sync", "__reduce_and_sync", "__reduce_or_sync", "__reduce_xor_sync",
        "__syncthreads", "__syncthreads_count", "__syncthreads_and", "__syncthreads_or"};
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
    int yielded = 0, exited = 0;
    uint64_t rng = 1;
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
};

// The block running on this OS thread (its running fiber is s->cur): constant-initialized,
// trivially destructible, so access is a plain TLS load. One pointer, written when a block
// starts and ends, never per switch: in a shared module every TLS access is a call.
struct Tls {
    Sched* s;
};
inline thread_local Tls tl{nullptr};

// ---- messages

inline const char* base_name(const char* path) {
    const char* b = path;
    for (const char* p = path; *p; ++p)
        if (*p == '/' || *p == '\\') b = p + 1;
    return b;
}
inline std::string site(const char* file, int line) {
    return std::string(base_name(file)) + ":" + std::to_string(line);
}
inline std::string hex(uint32_t m) {
    char b[16];
    snprintf(b, sizeof b, "0x%08x", m);
    return b;
}
inline std::string thread_name(const Fiber* f) {
    return "threadIdx.x " + std::to_string(f->tid.x) + " (warp " + std::to_string(f->tid.x / 32) +
           ", lane " + std::to_string(f->tid.x % 32) + ")";
}
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
            fibers[i].tsan = __tsan_create_fiber(0);
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
        for (int i = 0; i < capacity; ++i) {
            const size_t guard = page_size();
#if MPK_SIMT_TSAN
            __tsan_destroy_fiber(fibers[i].tsan);
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
inline Pool& pool() {
    static thread_local Pool p;
    return p;
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

// The next fiber to run, or nullptr after recording a deadlock. Greedy within the current warp
// (a random ready lane), else a random warp with a ready lane; __nanosleep'd threads only when
// nothing else is ready; &main once every thread has exited.
inline Fiber* next_fiber(Sched& s) {
    for (;;) {
        Fiber* f = s.ahead;
        if (!f) f = pick_ahead(s);
        if (f) {
            s.ahead = pick_ahead(s);
            if (s.ahead) prefetch_frames(s.ahead);
            return take(f);
        }
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
inline void block(Sched& s, Fiber* self) {
    if (s.aborting) {
        self->st = St::Running;
        if (std::uncaught_exceptions()) return;  // a destructor during unwinding: do not switch
        throw Cancel{};
    }
    self->atomics = 0;
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
    static thread_local void* dead_sp;
    mpk_simt_switch_v1(&dead_sp, target);
#endif
    __builtin_unreachable();
}

[[noreturn]] MPK_SIMT_NO_TSAN inline void on_exit(Sched& s, Fiber* self) {
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

MPK_SIMT_NO_TSAN inline void fiber_main(void* arg) {
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
#if MPK_SIMT_UCONTEXT
inline void fiber_main_uc() { fiber_main(tl.s->cur); }
#endif

// ---- barriers

// A barrier completes when every thread arrived, all at one call site. Anything else is found
// when nothing can run (next_fiber -> diagnose). With `poison`, its completion also refills the
// dynamic shared memory with 0xFF if a thread took it since the last fill (the executor's barrier
// after each task: no thread runs while the last one to arrive fills it; TSan ignores the fill,
// as it ignores the whole barrier, and the release/acquire per generation orders the rest).
inline int barrier_on(Sched& s, Op op, int pred, const char* file, int line, bool poison = false) {
    Fiber* self = s.cur;
    TsanIgnore ignore;
    if (s.aborting) { block(s, self); return 0; }
    const uint64_t gen = s.bar_gen;
    tsan_release(&s.cell_bar[gen & 1]);
    self->st = St::Barrier;
    self->op = op;
    self->file = file;
    self->line = line;
    if (s.at_barrier++ == 0) {
        s.bar_file = file;
        s.bar_line = line;
        s.bar_divergent = false;
        s.bar_true = 0;
    } else if (!same_site(file, line, s.bar_file, s.bar_line)) {
        s.bar_divergent = true;
    }
    s.bar_true += pred != 0;
    if (s.at_barrier == s.nthreads) {
        if (s.bar_divergent) fail(s, diagnose(s));
        s.bar_result = op == Op::SyncCount ? s.bar_true
                     : op == Op::SyncAnd   ? int(s.bar_true == s.nthreads)
                     : op == Op::SyncOr    ? int(s.bar_true > 0) : 0;
        ++s.bar_gen;
        s.at_barrier = 0;
        if (poison && s.smem_touched) {
            memset(s.smem, 0xFF, s.smem_bytes);
            s.smem_touched = false;
        }
        // (each fiber's st stays Barrier until take() runs it: a store per fiber here would
        // touch 128 cache lines per barrier for nothing; diagnose() only runs when no lane is ready)
        for (int w = 0; w < s.nwarps; ++w) s.warps[w].ready = 0xFFFFFFFFu;
        s.ready_warps = 0xFFFFFFFFu >> (32 - s.nwarps);
        s.cur_warp = -1;  // a random warp goes first
    }
    block(s, self);
    tsan_acquire(&s.cell_bar[gen & 1]);
    return s.bar_result;
}
inline int barrier(Op op, int pred, const char* file, int line) {
    Sched* s = tl.s;
    if (!s) outside(op_name(op));
    return barrier_on(*s, op, pred, file, line);
}

// ---- warp collectives

inline bool same_collective(const Fiber& a, const Fiber& b) {
    return a.op == b.op && a.mask == b.mask && a.width == b.width &&
           (a.op == Op::Syncwarp || same_site(a.file, a.line, b.file, b.line));
}

// Every lane of `mask` has arrived at the same collective: compute each lane's result.
inline void complete(Sched& s, Fiber* lanes, uint32_t mask) {
    const Fiber& f0 = lanes[__builtin_ctz(mask)];
    const Op op = f0.op;
    switch (op) {
    case Op::ShflIdx: case Op::ShflUp: case Op::ShflDown: case Op::ShflXor: {
        const int segmask = 32 - f0.width;  // PTX shfl.sync: c[12:8]
        for (uint32_t m = mask; m; m &= m - 1) {
            const int lane = __builtin_ctz(m);
            Fiber& f = lanes[lane];
            const int b = f.arg & 31, lo = lane & segmask, hi = lo | (31 & ~segmask);
            int j;
            bool ok;
            switch (op) {
            case Op::ShflUp: j = lane - b; ok = j >= lo; break;
            case Op::ShflDown: j = lane + b; ok = j <= hi; break;
            case Op::ShflXor: j = lane ^ b; ok = j <= hi; break;
            default: j = lo | (b & ~segmask); ok = true; break;
            }
            if (!ok) j = lane;
            // a lane outside the mask does not take part: its value is undefined (poison)
            f.out = (mask >> j) & 1 ? lanes[j].in : ~uint64_t(0);
        }
        break;
    }
    case Op::MatchAny:
        for (uint32_t m = mask; m; m &= m - 1) {
            Fiber& f = lanes[__builtin_ctz(m)];
            uint32_t r = 0;
            for (uint32_t n = mask; n; n &= n - 1)
                if (lanes[__builtin_ctz(n)].in == f.in) r |= 1u << __builtin_ctz(n);
            f.out = r;
        }
        break;
    default: {
        uint32_t ballot = 0, and_u = ~0u, or_u = 0, xor_u = 0, min_u = ~0u, max_u = 0;
        int32_t min_i = INT32_MAX, max_i = INT32_MIN;
        uint32_t add_u = 0;
        bool all_equal = true;
        for (uint32_t m = mask; m; m &= m - 1) {
            const Fiber& f = lanes[__builtin_ctz(m)];
            const uint32_t v = uint32_t(f.in);
            ballot |= (f.in != 0 ? 1u : 0u) << __builtin_ctz(m);
            and_u &= v; or_u |= v; xor_u ^= v; add_u += v;
            min_u = v < min_u ? v : min_u; max_u = v > max_u ? v : max_u;
            min_i = int32_t(v) < min_i ? int32_t(v) : min_i; max_i = int32_t(v) > max_i ? int32_t(v) : max_i;
            all_equal = all_equal && f.in == f0.in;
        }
        uint64_t r = 0;
        switch (op) {
        case Op::Ballot: r = ballot; break;
        case Op::Any: r = ballot != 0; break;
        case Op::All: r = ballot == mask; break;
        case Op::MatchAll: r = all_equal ? (uint64_t(1) << 32) | mask : 0; break;
        case Op::RedAddU: r = add_u; break;
        case Op::RedMinU: r = min_u; break;
        case Op::RedMaxU: r = max_u; break;
        case Op::RedMinI: r = uint32_t(min_i); break;
        case Op::RedMaxI: r = uint32_t(max_i); break;
        case Op::RedAnd: r = and_u; break;
        case Op::RedOr: r = or_u; break;
        case Op::RedXor: r = xor_u; break;
        default: break;  // __syncwarp
        }
        for (uint32_t m = mask; m; m &= m - 1) lanes[__builtin_ctz(m)].out = r;
    }
    }
    uint32_t par = 0;
    if (op == Op::Syncwarp)
        for (uint32_t m = mask; m; m &= m - 1) par |= (lanes[__builtin_ctz(m)].par & 1u) << __builtin_ctz(m);
    for (uint32_t m = mask; m; m &= m - 1) {
        Fiber& f = lanes[__builtin_ctz(m)];
        f.sync_mask = op == Op::Syncwarp ? mask : 0;
        f.sync_par = par;
        make_ready(s, &f);
    }
}

// The calling lane arrives at collective `op` with `mask`; returns its result once every lane
// of the mask has arrived at the same call site with the same mask (and width).
inline uint64_t collective(Op op, uint32_t mask, uint64_t in, int arg, int width, const char* file, int line) {
    Sched* sp = tl.s;
    if (!sp) outside(op_name(op));
    Sched& s = *sp;
    Fiber* self = s.cur;
    TsanIgnore ignore;
    if (s.aborting) { block(s, self); return 0; }
    const int t = int(self->tid.x), lane = t & 31;
    const uint32_t bit = 1u << lane;
    Warp& w = s.warps[t >> 5];
    Fiber* lanes = &s.fibers[t & ~31];
    auto where = [&] { return std::string(op_name(op)) + " at " + site(file, line); };
    if (!(mask & bit))
        fail(s, where() + ": mask " + hex(mask) + " does not include the calling " + thread_name(self));
    if (mask & ~w.alive)
        fail(s, where() + " by " + thread_name(self) + ": mask " + hex(mask) + " names lanes " +
                    hex(mask & ~w.alive) + " of warp " + std::to_string(t / 32) + " that have exited");
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(s, where() + ": width " + std::to_string(width) + " is not a power of two in [1, 32]");
    self->op = op;
    self->mask = mask;
    self->in = in;
    self->arg = arg;
    self->width = width;
    self->file = file;
    self->line = line;
    if (op == Op::Syncwarp) {
        ++self->par;
        tsan_release(&s.cell_lane[2 * t + (self->par & 1)]);
    }
    if (const uint32_t there = w.waiting & mask) {  // one lane already waiting: the same collective?
        const Fiber& o = lanes[__builtin_ctz(there)];
        if (!same_collective(o, *self) && (o.mask & bit))
            fail(s, "mismatched warp collectives in warp " + std::to_string(t / 32) + ": " + thread_name(self) +
                        " at " + op_name(op) + " " + site(file, line) + " (mask " + hex(mask) + ", width " +
                        std::to_string(width) + "), " + thread_name(&o) + " at " + op_name(o.op) + " " +
                        site(o.file, o.line) + " (mask " + hex(o.mask) + ", width " + std::to_string(o.width) + ")");
    }
    self->st = St::Warp;
    w.waiting |= bit;
    if (!(mask & ~w.waiting)) {
        bool all = true;
        for (uint32_t m = mask; m && all; m &= m - 1) all = same_collective(lanes[__builtin_ctz(m)], *self);
        if (all) {
            w.waiting &= ~mask;
            complete(s, lanes, mask);  // every lane of the mask ready, this one included
        }
    }
    block(s, self);
    if (op == Op::Syncwarp)
        for (uint32_t m = self->sync_mask; m; m &= m - 1) {
            const int l = __builtin_ctz(m);
            tsan_acquire(&s.cell_lane[2 * ((t & ~31) + l) + ((self->sync_par >> l) & 1)]);
        }
    return self->out;
}

// Nothing can run and not every thread has exited: say who waits where.
inline std::string diagnose(Sched& s) {
    struct Group { std::string what; int count; bool barrier; };
    Group groups[64];
    int ngroups = 0, extra = 0;
    bool any_barrier = false;
    for (int i = 0; i < s.nthreads; ++i) {
        const Fiber& f = s.fibers[i];
        std::string what;
        if (f.st == St::Barrier) {
            what = site(f.file, f.line);
            any_barrier = true;
        } else if (f.st == St::Warp) {
            what = std::string(op_name(f.op)) + " " + site(f.file, f.line) + " (warp " + std::to_string(i / 32) +
                   ", mask " + hex(f.mask) + ")";
        } else {
            continue;
        }
        int g = 0;
        while (g < ngroups && groups[g].what != what) ++g;
        if (g == ngroups) {
            if (ngroups == 64) { ++extra; continue; }
            groups[ngroups++] = Group{what, 0, f.st == St::Barrier};
        }
        ++groups[g].count;
    }
    std::string msg = any_barrier ? "divergent __syncthreads: " : "deadlock in warp collectives: ";
    bool first = true;
    for (int k = 0; k < 2 * ngroups; ++k) {  // the barriers first, then the warp collectives
        const int g = k % ngroups;
        const bool bar = groups[g].barrier;
        if (bar != (k < ngroups)) continue;
        if (!first) msg += ", ";
        if (bar && first) {
            msg += groups[g].what + " reached by " + std::to_string(groups[g].count) + " of " + std::to_string(s.nthreads) +
                   " threads";
        } else if (bar) {
            msg += groups[g].what + " by " + std::to_string(groups[g].count);
        } else {
            msg += std::to_string(groups[g].count) + " wait at " + groups[g].what;
        }
        first = false;
    }
    if (extra) msg += ", " + std::to_string(extra) + " more elsewhere";
    if (s.exited) msg += (first ? "" : ", ") + std::to_string(s.exited) + " exited";
    return msg;
}

template <class T> inline uint64_t to_bits(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "a 1-, 2-, 4- or 8-byte value");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof(T));
    return u;
}
template <class T> inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof(T));
    return v;
}

inline void yield_now() {
    Sched* sp = tl.s;
    if (!sp) outside("__nanosleep");
    Sched& s = *sp;
    Fiber* self = s.cur;
    TsanIgnore ignore;
    const int t = int(self->tid.x);
    self->st = St::Yielded;
    s.warps[t >> 5].yielded |= 1u << (t & 31);
    ++s.yielded;
    block(s, self);
}
// Atomics are not scheduling points, but a spin on one must not hang the block.
inline void atomic_tick() {
    Sched* s = tl.s;
    if (s && s->cur != &s->main && ++s->cur->atomics >= kSpinAtomics) yield_now();
}

// ---- the block

inline void run(const Block& b, void (*fn)(void*), void* arg) {
    if (b.threads < 32 || b.threads > 1024 || b.threads % 32)
        throw Error("mpk::simt::run_block: " + std::to_string(b.threads) +
                    " threads; a block has a multiple of 32 threads, at most 1024");
    if (tl.s) throw Error("mpk::simt::run_block called inside a running block (blocks do not nest)");
    if (b.smem_bytes > (size_t(1) << 30))
        throw Error("mpk::simt::run_block: " + std::to_string(b.smem_bytes) + " bytes of shared memory (at most 1 GiB)");
    Pool& p = pool();
    p.grow(b.threads);
    Sched& s = p.sched;
    s.nthreads = b.threads;
    s.nwarps = b.threads / 32;
    s.dim = dim3(unsigned(b.threads), 1, 1);
    s.fibers = p.fibers;
    s.cell_lane = p.cells;
    s.fn = fn;
    s.arg = arg;
    s.rng = ::mpk::splitmix64(b.seed) | 1;
    s.cur_warp = -1;
    s.ahead = nullptr;
    s.yielded = s.exited = 0;
    s.at_barrier = 0;
    s.bar_gen = 0;
    s.aborting = false;
    s.error.clear();
    s.main.stack_lo = nullptr;
    s.main.stack_size = 0;
    s.main.st = St::Running;
    for (int w = 0; w < s.nwarps; ++w) s.warps[w] = Warp{0xFFFFFFFFu, 0xFFFFFFFFu, 0, 0};
    s.ready_warps = 0xFFFFFFFFu >> (32 - s.nwarps);
    for (int i = 0; i < s.nthreads; ++i) {
        Fiber& f = s.fibers[i];
        f.tid = uint3{unsigned(i), 0, 0};
        f.st = St::Ready;
        f.started = false;
        f.atomics = 0;
        f.asan_fake = nullptr;
#if MPK_SIMT_ASAN
        // the frames a previous block's fiber never returned from (its exit path)
        const size_t top = f.stack_size < 16384 ? f.stack_size : 16384;
        __asan_unpoison_memory_region(f.stack_lo + f.stack_size - top, top);
#endif
    }
    s.smem_bytes = b.smem_bytes;
    s.smem = p.arena_for(b.smem_bytes);
    s.smem_touched = false;
    memset(s.smem, 0xFF, b.smem_bytes);  // poison: NaN as float, bf16 and fp16
#if !MPK_SIMT_ASAN
    memset(s.smem + b.smem_bytes, 0xA5, 64);  // canary: a raw write just past the end shows
#endif
#if MPK_SIMT_TSAN
    s.main.tsan = __tsan_get_current_fiber();
#endif
    tl.s = &s;
    s.cur = &s.main;
    tsan_release(&s.cell_start);  // everything above happens before every fiber's first step
    {
        TsanIgnore ignore;
        Fiber* first = next_fiber(s);
        switch_to(s, &s.main, first);
    }
    tsan_acquire(&s.cell_end);
    tl.s = nullptr;
    bool clobbered = false;
#if !MPK_SIMT_ASAN
    for (int i = 0; i < 64; ++i) clobbered |= uint8_t(s.smem[b.smem_bytes + size_t(i)]) != 0xA5;
#endif
    p.arena_done(s.smem);
    s.smem = nullptr;
    if (!s.error.empty()) throw Error(s.error);
    if (clobbered)
        throw Error("a write past the end of the block's " + std::to_string(b.smem_bytes) +
                    " bytes of dynamic shared memory (the canary after it changed)");
}

inline Sched& current(const char* what) {
    Sched* s = tl.s;
    if (!s) outside(what);
    return *s;
}

}  // namespace detail
#pragma GCC visibility pop

template <class F> void run_block(const Block& b, F&& body) {
    using Fn = typename std::remove_reference<F>::type;
    detail::run(b, [](void* p) { (*static_cast<Fn*>(p))(); }, const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace simt

// ---- dynamic shared memory (the same accessor as under nvcc: runtime/simt.h)

inline char* smem_base() {
    simt::detail::Sched& s = simt::detail::current("mpk::smem_base");
    simt::detail::TsanIgnore ignore;
    s.smem_touched = true;
    return s.smem;
}
inline size_t smem_bytes() { return simt::detail::current("mpk::smem_bytes").smem_bytes; }
// count elements of T at byte_offset, checked against the block's size and T's alignment.
template <typename T>
inline T* smem(size_t byte_offset, size_t count, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    simt::detail::Sched& s = simt::detail::current("mpk::smem");
    {
        simt::detail::TsanIgnore ignore;
        s.smem_touched = true;
    }
    const size_t end = byte_offset + count * sizeof(T);
    if (byte_offset > s.smem_bytes || count > (s.smem_bytes - byte_offset) / sizeof(T) ||
        byte_offset % alignof(T)) {
        std::string who = s.cur && s.cur != &s.main ? " by " + simt::detail::thread_name(s.cur) : "";
        throw simt::Error("mpk::smem at " + simt::detail::site(file, line) + who + ": offset " +
                          std::to_string(byte_offset) + ", " + std::to_string(count) + " elements of " +
                          std::to_string(sizeof(T)) + " bytes (bytes [" + std::to_string(byte_offset) + ", " +
                          std::to_string(end) + ")) " +
                          (byte_offset % alignof(T) ? "is misaligned for its " + std::to_string(alignof(T)) +
                                                          "-byte alignment"
                                                    : "overflows the block's " + std::to_string(s.smem_bytes) +
                                                          " bytes of dynamic shared memory"));
    }
    return reinterpret_cast<T*>(s.smem + byte_offset);
}

}  // namespace mpk

namespace mpk {
namespace simt {
// For the persistent executor, which runs many tasks on one block (runtime/executor.cuh). In a
// shared module every TLS access is a call (about 3 ns here), so the executor takes the running
// block once per launch (this_block) and passes it to its barriers instead of each thread
// looking it up per task.
using BlockRef = detail::Sched*;
inline BlockRef this_block() { return &detail::current("mpk::simt::this_block"); }
// __syncthreads() on block b.
inline void sync(BlockRef b, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::barrier_on(*b, detail::Op::SyncThreads, 0, file, line);
}
// __syncthreads() after a task on block b; with poison (test mode), the next task finds the dynamic
// shared memory filled with 0xFF, as a fresh block does, if a thread of this one took it
// (mpk::smem, mpk::smem_base). The fill happens as the barrier completes: no second barrier.
inline void task_barrier(BlockRef b, bool poison, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    detail::barrier_on(*b, detail::Op::SyncThreads, 0, file, line, poison);
}
// A task on the worker block. Inside a running block (the persistent executor runs the task on
// every thread of its worker block, runtime/executor.cuh, and says so in v.on_block) the calling
// thread runs it, as under nvcc; outside one (a kernel test), one block of block_of(v) runs it.
template <class F> void run_task(const TaskView& v, F&& body) {
    if (v.on_block || detail::tl.s) body();
    else run_block(block_of(v), body);
}
}  // namespace simt
}  // namespace mpk
#define MPK_RUN_TASK(v, ...) ::mpk::simt::run_task(v, [&] { (__VA_ARGS__)(v); })

// ---- CUDA builtins (global namespace). Barriers and collectives take their call site as
// default arguments (__builtin_FILE/__builtin_LINE are the caller's), so messages name it.

#define threadIdx (::mpk::simt::detail::thread_idx())
#define blockDim (::mpk::simt::detail::block_dim())
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace mpk { namespace simt { namespace detail {
inline const uint3& thread_idx() {
    Sched* s = tl.s;
    if (__builtin_expect(!s || s->cur == &s->main, 0)) outside("threadIdx");
    return s->cur->tid;
}
inline const dim3& block_dim() {
    Sched* s = tl.s;
    if (__builtin_expect(!s, 0)) outside("blockDim");
    return s->dim;
}
}}}  // namespace mpk::simt::detail
#pragma GCC visibility pop

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncThreads, 0, file, line);
}
inline int __syncthreads_count(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncCount, pred, file, line);
}
inline int __syncthreads_and(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncAnd, pred, file, line);
}
inline int __syncthreads_or(int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::barrier(::mpk::simt::detail::Op::SyncOr, pred, file, line);
}
inline void __syncwarp(unsigned mask = 0xFFFFFFFFu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::collective(::mpk::simt::detail::Op::Syncwarp, mask, 0, 0, 32, file, line);
}

#define MPK_SIMT_SHFL(name, OP)                                                                          \
    template <class T>                                                                                   \
    inline T name(unsigned mask, T var, int arg, int width = warpSize, const char* file = __builtin_FILE(), \
                  int line = __builtin_LINE()) {                                                         \
        using namespace ::mpk::simt::detail;                                                             \
        return from_bits<T>(collective(Op::OP, mask, to_bits(var), arg, width, file, line));             \
    }
MPK_SIMT_SHFL(__shfl_sync, ShflIdx)
MPK_SIMT_SHFL(__shfl_up_sync, ShflUp)
MPK_SIMT_SHFL(__shfl_down_sync, ShflDown)
MPK_SIMT_SHFL(__shfl_xor_sync, ShflXor)
#undef MPK_SIMT_SHFL

inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return unsigned(collective(Op::Ballot, mask, pred != 0, 0, 32, file, line));
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return int(collective(Op::Any, mask, pred != 0, 0, 32, file, line));
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return int(collective(Op::All, mask, pred != 0, 0, 32, file, line));
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    return unsigned(collective(Op::MatchAny, mask, to_bits(value), 0, 32, file, line));
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    const uint64_t r = collective(Op::MatchAll, mask, to_bits(value), 0, 32, file, line);
    *pred = int(r >> 32);
    return unsigned(r);
}
#define MPK_SIMT_REDUCE(name, T, OP)                                                                          \
    inline T name(unsigned mask, T value, const char* file = __builtin_FILE(), int line = __builtin_LINE()) { \
        using namespace ::mpk::simt::detail;                                                                  \
        return T(uint32_t(collective(Op::OP, mask, uint32_t(value), 0, 32, file, line)));                     \
    }
MPK_SIMT_REDUCE(__reduce_add_sync, unsigned, RedAddU)
MPK_SIMT_REDUCE(__reduce_add_sync, int, RedAddU)
MPK_SIMT_REDUCE(__reduce_min_sync, unsigned, RedMinU)
MPK_SIMT_REDUCE(__reduce_min_sync, int, RedMinI)
MPK_SIMT_REDUCE(__reduce_max_sync, unsigned, RedMaxU)
MPK_SIMT_REDUCE(__reduce_max_sync, int, RedMaxI)
MPK_SIMT_REDUCE(__reduce_and_sync, unsigned, RedAnd)
MPK_SIMT_REDUCE(__reduce_or_sync, unsigned, RedOr)
MPK_SIMT_REDUCE(__reduce_xor_sync, unsigned, RedXor)
#undef MPK_SIMT_REDUCE

// The lanes of the caller's warp that have not exited (on a GPU: the lanes converged here).
inline unsigned __activemask() {
    using namespace ::mpk::simt::detail;
    const uint3& t = thread_idx();
    return tl.s->warps[t.x >> 5].alive;
}
// A yield: the next ready thread runs; this one runs again after every ready thread has.
inline void __nanosleep(unsigned) { ::mpk::simt::detail::yield_now(); }
// Raise an error in the block (a GPU traps the whole grid).
[[noreturn]] inline void __trap(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    throw ::mpk::simt::Error("__trap() at " + ::mpk::simt::detail::site(file, line));
}

inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }  // one OS thread per block
inline long long clock64() {
#if defined(__x86_64__)
    return (long long)__builtin_ia32_rdtsc();
#elif defined(__aarch64__)
    long long t;
    asm volatile("mrs %0, cntvct_el0" : "=r"(t));
    return t;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000ll + ts.tv_nsec;
#endif
}

// Cache-hinted loads and stores: plain accesses on the host.
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---- atomics: relaxed, device scope, as CUDA's atomic* are (host: GCC/Clang __atomic, which
// TSan understands). _block and _system variants are the same operation here.

#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace mpk { namespace simt { namespace detail {
template <class T> inline T atomic_update(T* p, T (*f)(T, T), T v) {
    atomic_tick();
    T old = __atomic_load_n(p, __ATOMIC_RELAXED), want;
    do {
        want = f(old, v);
    } while (!__atomic_compare_exchange(p, &old, &want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
template <class T> inline T atomic_update_fp(T* p, T v) {  // float / double add through CAS
    atomic_tick();
    T old, want;
    __atomic_load(p, &old, __ATOMIC_RELAXED);
    do {
        want = old + v;
    } while (!__atomic_compare_exchange(p, &old, &want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return old;
}
template <class T> using if_int = typename std::enable_if<std::is_integral<T>::value, T>::type;
}}}  // namespace mpk::simt::detail
#pragma GCC visibility pop

#define MPK_SIMT_ATOMIC_INT(name, body)                                                                    \
    template <class T> inline ::mpk::simt::detail::if_int<T> name(T* p, ::mpk::simt::detail::if_int<T> v) { \
        ::mpk::simt::detail::atomic_tick();                                                                \
        return body;                                                                                       \
    }                                                                                                      \
    template <class T> inline ::mpk::simt::detail::if_int<T> name##_block(T* p, ::mpk::simt::detail::if_int<T> v) { \
        return name(p, v);                                                                                 \
    }                                                                                                      \
    template <class T> inline ::mpk::simt::detail::if_int<T> name##_system(T* p, ::mpk::simt::detail::if_int<T> v) { \
        return name(p, v);                                                                                 \
    }
MPK_SIMT_ATOMIC_INT(atomicAdd, __atomic_fetch_add(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicSub, __atomic_fetch_sub(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicAnd, __atomic_fetch_and(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicOr, __atomic_fetch_or(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicXor, __atomic_fetch_xor(p, v, __ATOMIC_RELAXED))
MPK_SIMT_ATOMIC_INT(atomicExch, __atomic_exchange_n(p, v, __ATOMIC_RELAXED))
#undef MPK_SIMT_ATOMIC_INT
template <class T> inline ::mpk::simt::detail::if_int<T> atomicMin(T* p, T v) {
    return ::mpk::simt::detail::atomic_update<T>(p, [](T a, T b) { return b < a ? b : a; }, v);
}
template <class T> inline ::mpk::simt::detail::if_int<T> atomicMax(T* p, T v) {
    return ::mpk::simt::detail::atomic_update<T>(p, [](T a, T b) { return b > a ? b : a; }, v);
}
// ((old >= v) ? 0 : old + 1) and (((old == 0) || (old > v)) ? v : old - 1), as CUDA defines them.
inline unsigned atomicInc(unsigned* p, unsigned v) {
    return ::mpk::simt::detail::atomic_update<unsigned>(p, [](unsigned a, unsigned b) { return a >= b ? 0u : a + 1; }, v);
}
inline unsigned atomicDec(unsigned* p, unsigned v) {
    return ::mpk::simt::detail::atomic_update<unsigned>(p, [](unsigned a, unsigned b) { return (a == 0 || a > b) ? b : a - 1; }, v);
}
template <class T> inline ::mpk::simt::detail::if_int<T> atomicCAS(T* p, T compare, T v) {
    ::mpk::simt::detail::atomic_tick();
    __atomic_compare_exchange_n(p, &compare, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
    return compare;  // the old value either way
}
inline float atomicAdd(float* p, float v) { return ::mpk::simt::detail::atomic_update_fp(p, v); }
inline double atomicAdd(double* p, double v) { return ::mpk::simt::detail::atomic_update_fp(p, v); }
inline float atomicAdd_block(float* p, float v) { return atomicAdd(p, v); }
inline float atomicAdd_system(float* p, float v) { return atomicAdd(p, v); }
inline float atomicExch(float* p, float v) {
    ::mpk::simt::detail::atomic_tick();
    float old;
    __atomic_exchange(p, &v, &old, __ATOMIC_RELAXED);
    return old;
}

// ---- a few device math and bit intrinsics under their CUDA names

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x == x ? x : 0.0f; }
inline int __float_as_int(float x) { int i; memcpy(&i, &x, 4); return i; }
inline unsigned __float_as_uint(float x) { unsigned i; memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; memcpy(&x, &i, 4); return x; }
inline float __uint_as_float(unsigned i) { float x; memcpy(&x, &i, 4); return x; }
inline long long __double_as_longlong(double x) { long long i; memcpy(&i, &x, 8); return i; }
inline double __longlong_as_double(long long i) { double x; memcpy(&x, &i, 8); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x ? __builtin_clz(unsigned(x)) : 32; }
inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0F0F0F0Fu) | ((x & 0x0F0F0F0Fu) << 4);
    x = ((x >> 8) & 0x00FF00FFu) | ((x & 0x00FF00FFu) << 8);
    return (x >> 16) | (x << 16);
}
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned((unsigned long long)a * b >> 32); }
inline int __mulhi(int a, int b) { return int((long long)a * b >> 32); }
// CUDA's device min/max for one type (mixed types: cast first).
inline int min(int a, int b) { return b < a ? b : a; }
inline int max(int a, int b) { return b > a ? b : a; }
inline unsigned min(unsigned a, unsigned b) { return b < a ? b : a; }
inline unsigned max(unsigned a, unsigned b) { return b > a ? b : a; }
inline long long min(long long a, long long b) { return b < a ? b : a; }
inline long long max(long long a, long long b) { return b > a ? b : a; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return b < a ? b : a; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return b > a ? b : a; }
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
