// gemv_rate.cpp: how fast the CPU emulation runs csrc/tasks/linear.cuh's SIMT GEMV, the kernel of a
// batch-8 bf16 linear (the Qwen3-8B MLP pass of qwen3_mlp_pass.py), in multiply-adds per second of one
// core: one task's tile, 96 W rows x K 4096 x 8 batch rows on a 128-thread block, as the runner runs it.
// Two cases: W streamed from memory (every task its own 96 rows of a 24576-row weight, as in the pass)
// and W in cache (the same 96 rows every time): their ratio is what the lane-by-lane memory order costs.
// Built with the flags the runner uses (-O2), or others to compare (the kernel's bits do not depend on
// them: -ffp-contract=off keeps g++ from fusing the multiply-adds once -march allows fma).
// Median of 5 runs each.
//
// Build and run:
//   g++ -std=c++17 -O2 -Icsrc benchmarks/gemv_rate.cpp -o /tmp/gemv_rate && /tmp/gemv_rate [tasks]
//   g++ -std=c++17 -O2 -march=native -ffp-contract=off -Icsrc benchmarks/gemv_rate.cpp -o /tmp/gemv_rate_n
#include "runtime/simt.h"
#include "tasks/linear.cuh"

#include "median.h"  // benchmarks/: the median of 5 runs

#include <algorithm>
#include <chrono>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

using mpk::bf16_t;
using mpk::Tile2D;
using mpk::simt::Block;
using mpk::simt::run_block;

constexpr int64_t B = 8, K = 4096, ROWS = 96;

int main(int argc, char** argv) {
    // argv[1]: tasks per run (default 32, spread over a 24576-row weight; given, a weight of just those
    // rows: tests/unit/test_benchmarks.py runs it tiny)
    const int64_t TASKS = argc > 1 ? atoll(argv[1]) : 32, N = argc > 1 ? TASKS * ROWS : 24576;
    std::vector<bf16_t> x(B * K), w(N * K), y(B * ROWS);
    uint32_t s = 1;
    auto next = [&] { s = s * 1664525u + 1013904223u; return s >> 9; };
    for (auto& e : x) e = mpk::from_float<bf16_t>(float(next() % 2001) / 1000.0f - 1.0f);
    for (auto& e : w) e = mpk::from_float<bf16_t>(float(next() % 2001) / 64000.0f - 1.0f / 64);
    const Tile2D xt{B, K, K, 1}, wt{ROWS, K, K, 1}, yt{B, ROWS, ROWS, 1};
    const size_t smem = 4 * mpk::linear_detail::SMEM_PER_WARP;
    auto task = [&](int64_t first_row) {
        run_block(Block{128, smem, uint64_t(first_row)}, [&] {
            mpk::linear_rows<bf16_t>(B, K, w.data() + first_row * K, wt, nullptr, Tile2D{},
                                     mpk::linear_detail::PlainX<bf16_t>{x.data(), xt}, true,
                                     mpk::linear_detail::Store<bf16_t>{y.data(), yt});
        });
    };
    const double macs = double(TASKS) * B * K * ROWS;
    const double streamed = median_s([&] { for (int t = 0; t < TASKS; ++t) task(int64_t(t) * (N / TASKS)); });
    const double cached = median_s([&] { for (int t = 0; t < TASKS; ++t) task(0); });
    printf("linear.cuh SIMT GEMV bf16, %lld x %lld x %lld per task, 128 threads, one core\n", (long long)B,
           (long long)K, (long long)ROWS);
    printf("  W streamed  %6.2f ms per task   %5.2f G multiply-adds/s\n", streamed / TASKS * 1e3, macs / streamed / 1e9);
    printf("  W in cache  %6.2f ms per task   %5.2f G multiply-adds/s   (streamed / cached %.2fx)\n",
           cached / TASKS * 1e3, macs / cached / 1e9, streamed / cached);
}
