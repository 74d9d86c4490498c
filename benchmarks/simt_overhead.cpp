// simt_overhead.cpp: what the CPU emulation of a CUDA thread block costs (csrc/runtime/simt_cpu.h;
// docs/simt.md): fiber switches per second, one __syncthreads over 128 threads, one full-warp
// __shfl_xor_sync, one empty 128-thread run_block (without and with 48 KiB of dynamic shared
// memory to poison), csrc/tasks/common.cuh's block_sum, and the warp instructions of
// csrc/runtime/ptx.h: mma.m16n8k16, ldmatrix.x4, and a 16-byte cp.async with its group's wait.
// Median of 5 runs each.
//
// Build and run:
//   g++ -std=c++17 -O2 -Icsrc benchmarks/simt_overhead.cpp -o /tmp/simt_overhead && /tmp/simt_overhead
#include "runtime/ptx.h"
#include "runtime/simt.h"
#include "tasks/common.cuh"

#include "median.h"  // benchmarks/: the median of 5 runs

#include <algorithm>
#include <chrono>
#include <stdio.h>
#include <vector>

using mpk::simt::Block;
using mpk::simt::run_block;

int main() {
    volatile float sink = 0;
    // 1. switches: 128 threads each yield K times; every yield switches to another thread
    const int K = 20000;
    const double t_yield = median_s([&] {
        run_block(Block{128, 0, 1}, [&] {
            for (int i = 0; i < K; ++i) __nanosleep(0);
        });
    });
    const double switches = 128.0 * K;
    printf("fiber switch (__nanosleep yield)         %7.1f ns   %6.1f M switches/s\n", t_yield / switches * 1e9,
           switches / t_yield / 1e6);

    // 2. __syncthreads over 128 threads
    const int B = 20000;
    const double t_bar = median_s([&] {
        run_block(Block{128, 0, 2}, [&] {
            for (int i = 0; i < B; ++i) __syncthreads();
        });
    });
    printf("__syncthreads, 128 threads               %7.2f us   (%.1f ns per thread)\n", t_bar / B * 1e6,
           t_bar / B / 128 * 1e9);

    // 3. one full-warp __shfl_xor_sync (32 lanes), in a 32-thread block and per warp of 128
    const int S = 50000;
    const double t_shfl = median_s([&] {
        run_block(Block{32, 0, 3}, [&] {
            float x = float(threadIdx.x);
            for (int i = 0; i < S; ++i) x += __shfl_xor_sync(0xFFFFFFFFu, x, 1 + (i & 15));
            if (x == 1.0f) sink = x;
        });
    });
    const double t_shfl4 = median_s([&] {
        run_block(Block{128, 0, 3}, [&] {
            float x = float(threadIdx.x);
            for (int i = 0; i < S / 4; ++i) x += __shfl_xor_sync(0xFFFFFFFFu, x, 1 + (i & 15));
            if (x == 1.0f) sink = x;
        });
    });
    printf("__shfl_xor_sync, one full warp           %7.2f us   (%.1f ns per lane; %.2f us per warp in 128 threads)\n",
           t_shfl / S * 1e6, t_shfl / S / 32 * 1e9, t_shfl4 / (S / 4) / 4 * 1e6);

    // 4. an empty block of 128 threads: start, run and exit every fiber
    const int E = 20000;
    const double t_empty = median_s([&] {
        for (int i = 0; i < E; ++i) run_block(Block{128, 0, uint64_t(i)}, [] {});
    });
    const double t_empty48 = median_s([&] {
        for (int i = 0; i < E; ++i) run_block(Block{128, 48 * 1024, uint64_t(i)}, [] {});
    });
    printf("empty run_block, 128 threads             %7.2f us   (%.2f us with 48 KiB smem poisoned)\n",
           t_empty / E * 1e6, t_empty48 / E * 1e6);

    // 5. common.cuh's block_sum (5 shuffles per warp + 2 barriers) in a 128-thread block
    const int R = 5000;
    const double t_sum = median_s([&] {
        run_block(Block{128, 1024, 5}, [&] {
            float acc = 0;
            for (int i = 0; i < R; ++i) acc += mpk::block_sum(1.0f, 0);
            if (threadIdx.x == 0) sink = acc;
        });
    });
    printf("block_sum (common.cuh), 128 threads      %7.2f us\n", t_sum / R * 1e6);

    // 6. the tensor-core instructions (runtime/ptx.h), one warp: each a rendezvous of its 32 lanes
    const int M = 20000;
    const double t_mma = median_s([&] {
        run_block(Block{32, 0, 6}, [&] {
            float d[4] = {0, 0, 0, 0};
            const uint32_t a[4] = {0x3f803f80u, 0x3f803f80u, 0x3f803f80u, 0x3f803f80u}, b[2] = {0x3f803f80u, 0u};
            for (int i = 0; i < M; ++i) mpk::ptx::mma_m16n8k16_row_col_f32_bf16_bf16_f32(d, a, b, d);
            if (threadIdx.x == 0) sink = d[0];
        });
    });
    const double t_ldm = median_s([&] {
        run_block(Block{32, 1024, 7}, [&] {
            uint32_t r[4];
            char* s = mpk::smem<char>(0, 1024);
            for (int i = 0; i < M; ++i) mpk::ptx::ldmatrix_m8n8_x4_shared_b16(r, s + threadIdx.x * 16);
            if (threadIdx.x == 0) sink = float(r[0]);
        });
    });
    alignas(16) static char global[32 * 16];
    const double t_cp = median_s([&] {
        run_block(Block{32, 1024, 8}, [&] {
            char* s = mpk::smem<char>(0, 1024);
            for (int i = 0; i < M; ++i) {
                mpk::ptx::cp_async_cg_shared_global<16>(s + threadIdx.x * 16, global + threadIdx.x * 16);
                mpk::ptx::cp_async_wait_all();
            }
        });
    });
    printf("mma.m16n8k16 bf16, one warp              %7.2f us   (2048 multiply-adds)\n", t_mma / M * 1e6);
    printf("ldmatrix.x4, one warp                    %7.2f us\n", t_ldm / M * 1e6);
    printf("cp.async.cg 16 B + wait_all, per lane    %7.1f ns\n", t_cp / M / 32 * 1e9);
    return sink == -1.0f;
}
