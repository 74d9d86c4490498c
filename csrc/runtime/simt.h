// simt.h: what a task kernel (csrc/tasks/<stem>.cuh) includes to be CUDA for both backends.
//
// A task kernel is a device function run by every thread of one worker block:
//     template <typename T> __device__ void rmsnorm_task(const mpk::TaskView& v);
// It uses CUDA as written for a GPU: threadIdx.x / blockDim.x (a multiple of 32, the worker
// block's size; blockIdx and gridDim are refused at compile time, below), __syncthreads(), the *_sync warp
// functions, static __shared__ arrays, and the block's dynamic shared memory through ONE
// accessor, mpk::smem<T>(byte_offset, count) (mpk::smem_bytes() in all).
//   nvcc:      the CUDA builtins themselves; MPK_RUN_TASK(v, fn) is fn(v), called by every
//              thread of the worker block.
//   host (CPU backend): runtime/simt_cpu.h emulates the execution model: the block's threads
//              are fibers on the worker's OS thread, switched only at barriers, warp
//              collectives and __nanosleep, in a seeded random order; a divergent barrier, a
//              bad mask, a deadlock or a shared-memory overflow is an mpk::simt::Error naming
//              the call site. MPK_RUN_TASK(v, fn) runs fn(v) as one such block.
// See docs/simt.md for what the emulation guarantees (and what only a GPU can show).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "platform.h"
#include "task_view.h"

#if defined(__CUDACC__)

namespace mpk {
// The worker block's dynamic shared memory (the launch sizes it; MpkConfig::smem_bytes).
MPK_DEVICE MPK_INLINE char* smem_base() {
    extern __shared__ __align__(16) char mpk_dynamic_smem[];
    return mpk_dynamic_smem;
}
MPK_DEVICE MPK_INLINE size_t smem_bytes() {
    uint32_t n;
    asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(n));
    return n;
}
// count elements of T at byte_offset (16-byte aligned offsets keep vector accesses legal).
template <typename T> MPK_DEVICE MPK_INLINE T* smem(size_t byte_offset, size_t /*count*/) {
    return reinterpret_cast<T*>(smem_base() + byte_offset);
}
}  // namespace mpk
// Each task kernel is a function of its own in the persistent kernel, called, not inlined: ptxas then
// allocates every task apart and the dispatcher stays one switch of calls. Inlining all of them made
// nvcc's front end superlinear in the number of (layer, dtype) variants (the every-variant module,
// tests/unit/every_variant.py: cicc for sm_100a 193 s inlined, 13 s called) and gave the kernel a
// larger stack frame (224 B, now 128 B on sm_90a) for the same registers (228, now 226). A call per
// task costs a few cycles against a task's microseconds.
namespace mpk {
template <auto Task> __device__ __noinline__ void call_task(const TaskView& v) { Task(v); }
}  // namespace mpk
#define MPK_RUN_TASK(v, ...) ::mpk::call_task<__VA_ARGS__>(v)
// The generated dispatcher (mirage/mpk/codegen.py) is device code under nvcc.
#define MPK_DISPATCH __device__ inline

#else
#include "simt_cpu.h"
// The CPU build compiles a generated module as two objects (mirage/mpk/build.py): the runtime's,
// built once per flags and cached, and the dispatcher's (MPK_DISPATCHER_OBJECT), whose
// execute_task the runtime's object calls: there it is an ordinary external function.
#if defined(MPK_DISPATCHER_OBJECT)
#define MPK_DISPATCH
#else
#define MPK_DISPATCH inline
#endif
#endif

// blockIdx and gridDim are refused in task kernels, at compile time on both backends: a persistent
// worker block runs many tasks, one after another, so its block index says which worker it is,
// not which tile (an fp8 kernel of MPK once took blockIdx.x as its batch row). A task's work
// is in its view: v.in_tile / v.out_tile, v.iparam. Using either is a static_assert naming this
// reason, with the kernel's line in the compiler's "required from here". Code that is not a task
// kernel and needs the real ones (the CUDA driver's worker id, runtime/host_cuda.h) brackets them
// with #pragma push_macro("blockIdx") / #undef blockIdx / #pragma pop_macro("blockIdx").
namespace mpk {
namespace refused {
template <int kLine> MPK_HOST_DEVICE MPK_INLINE uint3 blockIdx_in_a_task_kernel() {
    static_assert(kLine < 0, "task kernel reads blockIdx: a persistent worker runs many tasks on one block; "
                             "use the task's tiles and iparams (docs/simt.md)");
    return uint3{0, 0, 0};
}
template <int kLine> MPK_HOST_DEVICE MPK_INLINE uint3 gridDim_in_a_task_kernel() {
    static_assert(kLine < 0, "task kernel reads gridDim: a persistent worker runs many tasks on one block; "
                             "use the task's tiles and iparams (docs/simt.md)");
    return uint3{1, 1, 1};
}
}  // namespace refused
}  // namespace mpk
#define blockIdx (::mpk::refused::blockIdx_in_a_task_kernel<__LINE__>())
#define gridDim (::mpk::refused::gridDim_in_a_task_kernel<__LINE__>())
