// simt_cpu_config.h: the emulation's build knobs: which sanitizer (MPK_SIMT_TSAN, MPK_SIMT_ASAN),
// which context switch (MPK_SIMT_UCONTEXT) and the fiber stack size (MPK_SIMT_STACK_BYTES).
// Part of runtime/simt_cpu.h (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_config.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif


// The emulation's slow paths (a block's start and end, a fiber switch, the deadlock diagnosis, thread
// and site names) are defined in one object of a two-object CPU module, the runtime's, compiled once
// per flags and cached (mirage/mpk/build.py). The dispatcher's object (MPK_DISPATCHER_OBJECT, one per
// generated module) only declares them and calls them: it compiles its task kernels and the inline
// fast paths, not the scheduler again (0.3-0.6 s of g++ per module; one copy ends up in the module
// either way). Every other build defines them here. MPK_SIMT_SLOW: one out-of-line copy, emitted
// even where this object does not call it, for the other object's calls.
// The cp.async, ldmatrix and mma emulation's (runtime/ptx.h) are among them: the runtime's object
// includes ptx.h (runtime_object.h) for them. A declaration without `inline` in one object and an inline
// definition in the other name the same hidden symbol (GCC and Clang on ELF); were a definition ever
// missing, the module would fail to load (ctypes loads with RTLD_NOW) rather than run.
#if defined(MPK_DISPATCHER_OBJECT)
#define MPK_SIMT_DEFINE_SLOW_PATHS 0
#else
#define MPK_SIMT_DEFINE_SLOW_PATHS 1
#endif
#define MPK_SIMT_SLOW inline __attribute__((noinline, used))

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

// The static __shared__ poison (simt_cpu_tls.h). 0 only for the negative control of its test
// (tests/csrc/run_simt_tests.sh, static-poison-off): a kernel then reads the previous task's values.
#ifndef MPK_SIMT_STATIC_POISON
#define MPK_SIMT_STATIC_POISON 1
#endif
