// launch_plan.h: whether the persistent kernel can be launched on a GPU, and how (docs/runtime.md,
// "Launch resources"). Plain host C++ with no CUDA header, so that one decision serves two callers:
// host_cuda.h feeds it the device's attributes and cudaFuncGetAttributes' report before the first
// launch; tests/unit/test_launch_plan.py feeds it ptxas's report of the generated module and a table
// of sm_80 / sm_90a / sm_100a limits, so a launch that could not succeed fails a CI test, not a
// GPU's first minutes.
//
// The rules (CUDA programming guide, compute capabilities table and cudaFuncSetAttribute):
//   - a block gets static + dynamic shared memory up to smem_per_block (48 KiB) by default; above
//     that only after cudaFuncAttributeMaxDynamicSharedMemorySize is raised, up to
//     smem_per_block_optin, and static shared memory alone may never exceed 48 KiB;
//   - an SM holds blocks while shared memory (each block's static + dynamic + the reserved 1 KiB),
//     registers (per warp: registers per thread rounded up to 8, times 32), threads and its block
//     slots last;
//   - every CTA of the cooperative launch must be co-resident: blocks per SM x SMs >= grid.
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

namespace mpk {

struct GpuLimits {
    int sms;
    int smem_per_block;           // without opt-in (cudaDevAttrMaxSharedMemoryPerBlock)
    int smem_per_block_optin;     // cudaDevAttrMaxSharedMemoryPerBlockOptin
    int smem_per_sm;              // cudaDevAttrMaxSharedMemoryPerMultiprocessor
    int smem_reserved_per_block;  // cudaDevAttrReservedSharedMemoryPerBlock
    int regs_per_sm;
    int max_threads_per_sm;
    int max_blocks_per_sm;
};

struct KernelResources {
    int static_smem;              // cudaFuncAttributes::sharedSizeBytes (ptxas: "bytes smem")
    int registers;                // per thread
    int threads;                  // per block
    size_t dynamic_smem;          // the launch's
};

struct LaunchPlan {
    bool fits = false;            // every CTA can be co-resident
    bool opt_in = false;          // raise MaxDynamicSharedMemorySize to dynamic_smem before the launch
    int blocks_per_sm = 0;        // by these limits (host_cuda.h also asks the occupancy API)
    const char* bound = "";       // what limits blocks_per_sm
    char why[400] = {0};          // when !fits
};

inline LaunchPlan plan_launch(const KernelResources& k, const GpuLimits& g, int grid) {
    LaunchPlan p;
    const size_t block_smem = size_t(k.static_smem) + k.dynamic_smem;
    // static + dynamic counts against the default, not the dynamic part alone (the executor's batch is
    // static: 48 KiB dynamic + the batch needs the opt-in)
    p.opt_in = block_smem > size_t(g.smem_per_block);
    const size_t allowed = p.opt_in ? size_t(g.smem_per_block_optin) : size_t(g.smem_per_block);
    if (block_smem > allowed || k.static_smem > g.smem_per_block) {
        snprintf(p.why, sizeof p.why, "the worker block needs %zu bytes of shared memory (%d static + %zu "
                 "dynamic), over the %zu a block may have with opt-in (static alone at most %d)", block_smem,
                 k.static_smem, k.dynamic_smem, allowed, g.smem_per_block);
        return p;
    }
    const int warps = (k.threads + 31) / 32;
    const int regs_per_warp = (k.registers + 7) / 8 * 8 * 32;
    const size_t smem_per_block = block_smem + size_t(g.smem_reserved_per_block);
    const int by[] = {g.max_blocks_per_sm, g.max_threads_per_sm / k.threads,
                      regs_per_warp ? g.regs_per_sm / regs_per_warp / warps : g.max_blocks_per_sm,
                      int(size_t(g.smem_per_sm) / smem_per_block)};
    const char* names[] = {"block slots", "threads", "registers", "shared memory"};
    p.blocks_per_sm = by[0];
    p.bound = names[0];
    for (int i = 1; i < 4; ++i)
        if (by[i] < p.blocks_per_sm) {
            p.blocks_per_sm = by[i];
            p.bound = names[i];
        }
    p.fits = int64_t(p.blocks_per_sm) * g.sms >= grid;
    if (!p.fits)
        snprintf(p.why, sizeof p.why, "the persistent kernel needs %d co-resident CTAs but the GPU holds %d "
                 "(%d per SM, bound by %s: %d threads x %d registers, %zu bytes of shared memory per block; %d "
                 "SMs): lower num_workers or num_local_schedulers", grid, p.blocks_per_sm * g.sms,
                 p.blocks_per_sm, p.bound, k.threads, k.registers, smem_per_block, g.sms);
    return p;
}

}  // namespace mpk
