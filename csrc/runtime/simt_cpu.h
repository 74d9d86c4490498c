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
// not lockstep); shared memory, dynamic and static, starts poisoned (0xFF, and before every
// test-mode task of a worker block); blockIdx / gridDim do not compile in a task kernel
// (runtime/simt.h); the order of warps and lanes between blocking points comes from the seed
// (MPK_SIMT_SERIAL=1: threadIdx order, for a debugger). A violation stops the block and throws
// mpk::simt::Error from run_block naming the call site(s), e.g.
//   "divergent __syncthreads: rmsnorm.cuh:41 reached by 64 of 128 threads, rmsnorm.cuh:50 by 64"
// ThreadSanitizer sees every emulated thread as a fiber (a release/acquire per barrier
// generation and per __syncwarp); AddressSanitizer is told about every stack switch.
// docs/simt.md has the guarantees, the scheduling policy, the messages and the costs.
// Test: tests/csrc/test_simt.cpp; run: bash tests/csrc/run_simt_tests.sh
//
// The emulation, in the order each part builds on the previous ones:
//   simt_cpu_config.h     build knobs: sanitizer detection, context switch, fiber stack size
//   simt_cpu_types.h      CUDA keywords (__device__, __shared__, ...), vector and 16-bit float types
//   simt_cpu_sanitizer.h  TSan / ASan hooks, TsanIgnore
//   simt_cpu_switch.h     the hand-written context switch (x86-64, aarch64)
//   simt_cpu_state.h      Block / Error, the fiber records, the block's scheduler state, the thread_local
//   simt_cpu_pool.h       per OS thread: the fibers and their stacks, the shared-memory arena
//   simt_cpu_sched.h      the scheduler, the switch, a fiber's entry and exit
//   simt_cpu_tls.h        the static __shared__ poison (this module's TLS block, less the emulation's)
//   simt_cpu_sync.h       barriers, warp collectives, their checks and the deadlock diagnosis
//   simt_cpu_block.h      run_block, mpk::smem, the executor's BlockRef / task_barrier / MPK_RUN_TASK
//   simt_cpu_cuda.h       the CUDA builtins: threadIdx, __syncthreads, __shfl_*_sync, atomics, math
// and, included by runtime/ptx.h only (a module's dispatcher that uses no tensor-core or cp.async
// instruction does not compile them; their slow paths are the runtime object's, simt_cpu_config.h):
//   simt_cpu_async.h      cp.async: copies in flight, their groups, the seeded landing, their checks
//   simt_cpu_mbarrier.h   mbarrier: phases, arrivals and transaction bytes, waits that can never complete
//   simt_cpu_tma.h        cp.async.bulk.tensor: tensor maps, swizzled boxes landing on their mbarrier
//   simt_cpu_ptx.h        mma.sync, ldmatrix and stmatrix as warp collectives (the PTX ISA's fragment layouts)
//   simt_cpu_wgmma_desc.h wgmma's matrix descriptors: the canonical layouts, the checks on what they name
//   simt_cpu_wgmma.h      wgmma: groups retired at their wait, accumulators, warpgroups
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu.h emulates CUDA for the host compiler; nvcc uses the real builtins (runtime/simt.h)"
#endif

#include "simt_cpu_config.h"
#include "simt_cpu_types.h"
#include "simt_cpu_sanitizer.h"
#include "simt_cpu_switch.h"
#include "simt_cpu_sched.h"
#include "simt_cpu_tls.h"
#include "simt_cpu_sync.h"
#include "simt_cpu_block.h"
#include "simt_cpu_cuda.h"
