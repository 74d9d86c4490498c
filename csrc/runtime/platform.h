// platform.h: the few macros that let one header compile for the host and for CUDA.
#pragma once
#if defined(__CUDACC__)
#define MPK_HOST_DEVICE __host__ __device__
#define MPK_DEVICE __device__
#define MPK_INLINE __forceinline__
#define MPK_NOINLINE __noinline__
#else
#define MPK_HOST_DEVICE
#define MPK_DEVICE
#define MPK_INLINE inline
#define MPK_NOINLINE __attribute__((noinline))
#endif
// MPK_NOINLINE keeps a function out of its callers: the executor's protocol steps (executor.cuh) and the
// cold paths that compose an error message (text.h, tasks/common.cuh task_fail). Under nvcc an inlined
// message is copies of Text's loops in every kernel that can fail, which ptxas then compiles with the
// kernel's hot code, for a path that runs at most once per launch (measured: a persistent kernel with
// paged_attention 22 -> 3.5 s of ptxas once out of line; making Text::i's divisions constant did not help).
