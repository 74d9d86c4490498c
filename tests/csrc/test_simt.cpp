// test_simt.cpp: the CPU emulation of the CUDA execution model (csrc/runtime/simt_cpu.h) against
// what CUDA defines: thread and block indices, barriers over many generations, the four shuffles
// (widths 32/16/8/4/2/1, out-of-range lanes, 32- and 64-bit values), votes with partial masks,
// __syncwarp, match/reduce, atomics, __nanosleep, dynamic shared memory (poison, bounds), static
// __shared__, seeded schedules, csrc/tasks/common.cuh's warp_sum/block_sum on 128 and 256
// threads, the errors, and the negative controls (docs/simt.md): each broken kernel fails, its
// fixed version passes.
//
// Run:  bash tests/csrc/run_simt_tests.sh                 (plain, TSan, ASan+UBSan, ucontext)
// One:  g++ -std=c++17 -O2 -pthread -Icsrc tests/csrc/test_simt.cpp -o /tmp/t && /tmp/t
// Modes for the sanitizer controls (one kernel, then exit): /tmp/t tsan-race | tsan-race2 |
//       tsan-clean | static-poison | asan-smem | asan-global
#include "runtime/simt.h"
#include "tasks/common.cuh"

#include <atomic>
#include <chrono>
#include <functional>
#include <stdio.h>
#include <string>
#include <thread>
#include <vector>

// ---- harness

#include "simt_check.h"

#if defined(__SANITIZE_THREAD__)
constexpr bool kTsan = true;
#else
constexpr bool kTsan = false;
#endif
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

using mpk::simt::Block;
using mpk::simt::Error;
using mpk::simt::run_block;

// Records the current line from inside a kernel: many threads store it, so atomically.
#define HERE(var) __atomic_store_n(&(var), __LINE__, __ATOMIC_RELAXED)
static std::string at_line(int line) { return "test_simt.cpp:" + std::to_string(line); }

// ---- indices, barriers

static void test_indices() {
    const int before = g_failures;
    for (int threads : {32, 128, 1024}) {
        std::vector<int> seen(threads, 0);
        std::vector<unsigned> dims(threads, 0);
        run_block(Block{threads, 0, 3}, [&] {
            seen[threadIdx.x] += 1 + int(threadIdx.y + threadIdx.z);
            dims[threadIdx.x] = blockDim.x * 1000000 + blockDim.y * 10000 + blockDim.z * 100 + 3 + unsigned(warpSize) - 32;
        });
        for (int t = 0; t < threads; ++t) {
            CHECK(seen[t] == 1, "threads %d: thread %d ran %d times (or y/z nonzero)", threads, t, seen[t]);
            CHECK(dims[t] == unsigned(threads) * 1000000 + 10000 + 100 + 3, "threads %d: dims %u", threads, dims[t]);
        }
    }
    report("indices: threadIdx/blockDim (blockIdx/gridDim: refused)", before);
}

static void test_barriers() {
    const int before = g_failures;
    for (const int n : {128, 256}) {
    const int gens = 500;
    std::vector<int> bad(n, 0), counts(n), ands(n), ors(n);
    run_block(Block{n, n * sizeof(int), 11}, [&] {
        int* s = mpk::smem<int>(0, n);
        const int t = threadIdx.x;
        for (int g = 0; g < gens; ++g) {
            s[t] = g * 1000 + t;
            __syncthreads();
            const int u = (t * 7 + g) % n;
            bad[t] += s[u] != g * 1000 + u;
            __syncthreads();
        }
        counts[t] = __syncthreads_count(t % 3 == 0);
        ands[t] = __syncthreads_and(t >= 0) * 2 + __syncthreads_and(t != 5);
        ors[t] = __syncthreads_or(t == n - 56) * 2 + __syncthreads_or(0);
    });
    int wrong = 0;
    for (int t = 0; t < n; ++t) wrong += bad[t];
    CHECK(wrong == 0, "%d threads: %d stale reads over %d barrier generations", n, wrong, gens);
    for (int t = 0; t < n; ++t) {
        CHECK(counts[t] == (n + 2) / 3, "%d threads: __syncthreads_count = %d, expected %d", n, counts[t], (n + 2) / 3);
        CHECK(ands[t] == 2, "%d threads: __syncthreads_and pair = %d, expected 2", n, ands[t]);
        CHECK(ors[t] == 2, "%d threads: __syncthreads_or pair = %d, expected 2", n, ors[t]);
    }
    }
    report("barriers: 1000 generations, _count/_and/_or, 128 and 256", before);
}

// ---- shuffles against CUDA's definitions (CUDA C++ Programming Guide, warp shuffle functions)

static int ref_idx(int lane, int src, int w) { return lane - lane % w + ((src % w) + w) % w; }
static int ref_up(int lane, int d, int w) { return lane % w >= d ? lane - d : lane; }
static int ref_down(int lane, int d, int w) { return lane % w + d < w ? lane + d : lane; }
static int ref_xor(int lane, int m, int w) { return (lane ^ m) / w > lane / w ? lane : lane ^ m; }

template <class T> static T value_of(int lane) {
    if (sizeof(T) == 8) return T((0x100000000ull * (lane + 3)) | unsigned(lane * 7 + 1));  // high bits matter
    return T(lane * 7 + 1);
}

template <class T> static int check_shuffles(const char* tname) {
    int wrong = 0;
    for (int width : {32, 16, 8, 4, 2, 1}) {
        for (int arg : {0, 1, 2, 3, 5, 8, 13, 16, 31, 33, -1, 40}) {
            std::vector<T> got(4 * 32);
            run_block(Block{32, 0, uint64_t(width * 100 + arg + 1000)}, [&] {
                const int lane = threadIdx.x;
                const T v = value_of<T>(lane);
                got[lane] = __shfl_sync(0xFFFFFFFFu, v, arg, width);
                if (arg >= 0 && arg < 32) {
                    got[32 + lane] = __shfl_up_sync(0xFFFFFFFFu, v, unsigned(arg), width);
                    got[64 + lane] = __shfl_down_sync(0xFFFFFFFFu, v, unsigned(arg), width);
                    got[96 + lane] = __shfl_xor_sync(0xFFFFFFFFu, v, arg, width);
                }
            });
            for (int lane = 0; lane < 32; ++lane) {
                const T want_idx = value_of<T>(ref_idx(lane, arg, width));
                if (got[lane] != want_idx) {
                    ++wrong;
                    CHECK(false, "%s __shfl_sync width %d srcLane %d lane %d", tname, width, arg, lane);
                }
                if (arg < 0 || arg >= 32) continue;
                const int want[3] = {ref_up(lane, arg, width), ref_down(lane, arg, width), ref_xor(lane, arg, width)};
                for (int k = 0; k < 3; ++k)
                    if (got[32 * (k + 1) + lane] != value_of<T>(want[k])) {
                        ++wrong;
                        CHECK(false, "%s %s width %d arg %d lane %d: got lane value %lld", tname,
                              k == 0 ? "__shfl_up_sync" : k == 1 ? "__shfl_down_sync" : "__shfl_xor_sync", width, arg,
                              lane, (long long)got[32 * (k + 1) + lane]);
                    }
            }
        }
    }
    return wrong;
}

static void test_shuffles() {
    const int before = g_failures;
    check_shuffles<int>("int");
    check_shuffles<unsigned>("unsigned");
    check_shuffles<float>("float");
    check_shuffles<long long>("long long");
    check_shuffles<unsigned long long>("unsigned long long");
    check_shuffles<double>("double");
    // 16-bit values (CUDA has __half / __nv_bfloat16 overloads)
    std::vector<uint16_t> bits(32);
    run_block(Block{32, 0, 5}, [&] {
        __nv_bfloat16 v = __float2bfloat16(float(threadIdx.x));
        bits[threadIdx.x] = __shfl_xor_sync(0xFFFFFFFFu, v, 1).bits;
    });
    for (int l = 0; l < 32; ++l) CHECK(bits[l] == __float2bfloat16(float(l ^ 1)).bits, "bf16 shuffle lane %d", l);
    report("shuffles: 4 kinds x 6 widths x 6 types", before);
}

// Partial masks: only the mask's lanes call; a lane outside the mask is undefined (poison here).
static void test_partial_masks() {
    const int before = g_failures;
    std::vector<int> shfl(64, -7);
    std::vector<int> ex(64, -7);
    std::vector<unsigned> ballot(64), any(64), all(64), active(64);
    run_block(Block{64, 0, 9}, [&] {
        const int lane = threadIdx.x % 32;
        __syncwarp();
        active[threadIdx.x] = __activemask();  // no lane can have exited yet
        __syncwarp();
        if (lane < 16) shfl[threadIdx.x] = __shfl_xor_sync(0x0000FFFFu, lane * 10, 1, 16);
        if (lane % 2 == 0) {
            ballot[threadIdx.x] = __ballot_sync(0x55555555u, lane % 4 == 0);
            any[threadIdx.x] = __any_sync(0x55555555u, lane == 6) * 2 + __any_sync(0x55555555u, lane == 7);
            all[threadIdx.x] = __all_sync(0x55555555u, lane < 40) * 2 + __all_sync(0x55555555u, lane < 30);
        }
        if (lane == 0 || lane == 31)  // lanes 0 and 31 only
            ex[threadIdx.x] = __shfl_sync(0x80000001u, lane == 0 ? 5 : lane, lane == 0 ? 31 : 0);
        if (lane == 3 || lane == 4)  // 3 reads lane 2, 4 reads lane 5: neither takes part
            ex[threadIdx.x] = __shfl_xor_sync(0x00000018u, lane, 1);
    });
    for (int w = 0; w < 2; ++w)
        for (int lane = 0; lane < 32; ++lane) {
            const int t = w * 32 + lane;
            if (lane < 16)
                CHECK(shfl[t] == (lane ^ 1) * 10, "partial xor lane %d: %d", lane, shfl[t]);
            if (lane % 2 == 0) {
                CHECK(ballot[t] == 0x11111111u, "ballot lane %d: %08x", lane, ballot[t]);
                CHECK(any[t] == 2, "any lane %d: %u", lane, any[t]);
                CHECK(all[t] == 2, "all lane %d: %u", lane, all[t]);
            }
            CHECK(active[t] == 0xFFFFFFFFu, "activemask %08x", active[t]);
        }
    CHECK(ex[0] == 31 && ex[31] == 5 && ex[32] == 31 && ex[63] == 5, "lanes 0/31 exchange: %d %d", ex[0], ex[31]);
    CHECK(ex[3] == -1 && ex[4] == -1 && ex[35] == -1, "reading a lane outside the mask gives poison: %d %d", ex[3], ex[4]);
    report("partial masks: shfl/ballot/any/all/activemask", before);
}

static void test_syncwarp_match_reduce() {
    const int before = g_failures;
    std::vector<int> got(128, 0);
    std::vector<unsigned> many(128), mall(128), red(128 * 6);
    std::vector<int> pred(128), redi(128 * 2);
    run_block(Block{128, 128 * sizeof(int), 21}, [&] {
        int* s = mpk::smem<int>(0, 128);
        const int t = threadIdx.x, lane = t % 32;
        s[t] = t * 3;
        __syncwarp();
        got[t] = s[(t & ~31) + (lane + 5) % 32];
        __syncwarp();
        if (lane < 8) {  // a partial __syncwarp
            s[t] = -t;
            __syncwarp(0xFFu);
            got[t] += s[(t & ~31) + (lane + 1) % 8] == -((t & ~31) + (lane + 1) % 8) ? 1000 : 0;
        }
        many[t] = __match_any_sync(0xFFFFFFFFu, lane / 4);
        mall[t] = __match_all_sync(0xFFFFFFFFu, lane < 32 ? 42ull : 0ull, &pred[t]);
        red[6 * t + 0] = __reduce_add_sync(0xFFFFFFFFu, unsigned(lane));
        red[6 * t + 1] = __reduce_min_sync(0xFFFFFFFFu, unsigned(lane + 3));
        red[6 * t + 2] = __reduce_max_sync(0xFFFFFFFFu, unsigned(lane + 3));
        red[6 * t + 3] = __reduce_and_sync(0xFFFFFFFFu, ~(1u << lane));
        red[6 * t + 4] = __reduce_or_sync(0xFFFFFFFFu, 1u << lane);
        red[6 * t + 5] = __reduce_xor_sync(0xFFFFFFFFu, 1u);
        redi[2 * t] = __reduce_min_sync(0xFFFFFFFFu, lane - 20);
        redi[2 * t + 1] = __reduce_max_sync(0xFFFFFFFFu, lane - 20);
    });
    for (int t = 0; t < 128; ++t) {
        const int lane = t % 32, w = t & ~31;
        CHECK(got[t] % 1000 == (w + (lane + 5) % 32) * 3, "__syncwarp exchange t %d: %d", t, got[t]);
        CHECK((got[t] >= 1000) == (lane < 8), "partial __syncwarp t %d", t);
        CHECK(many[t] == 0xFu << (lane / 4 * 4), "match_any t %d: %08x", t, many[t]);
        CHECK(mall[t] == 0xFFFFFFFFu && pred[t] == 1, "match_all t %d", t);
        const unsigned want[6] = {496u, 3u, 34u, 0u, 0xFFFFFFFFu, 0u};
        for (int k = 0; k < 6; ++k) CHECK(red[6 * t + k] == want[k], "reduce %d t %d: %u", k, t, red[6 * t + k]);
        CHECK(redi[2 * t] == -20 && redi[2 * t + 1] == 11, "signed reduce %d %d", redi[2 * t], redi[2 * t + 1]);
    }
    report("__syncwarp (full, partial), match, reduce", before);
}

// ---- schedules

static std::vector<int> order_of(uint64_t seed, int threads) {
    std::vector<int> log(threads, -1);
    int next = 0;
    run_block(Block{threads, 0, seed}, [&] { log[atomicAdd(&next, 1)] = int(threadIdx.x); });
    return log;
}

static void test_seeds() {
    const int before = g_failures;
    const std::vector<int> a = order_of(1, 128), a2 = order_of(1, 128), b = order_of(2, 128);
    CHECK(a == a2, "the same seed gave two different schedules");
    CHECK(a != b, "seeds 1 and 2 gave the same schedule");
    // greedy within a warp: each run of 32 is one warp; lanes in a random order; warps too
    bool grouped = true, lane_sorted = true, warp_sorted = true;
    for (int i = 0; i < 128; ++i) {
        grouped = grouped && a[i] / 32 == a[i / 32 * 32] / 32;
        if (i % 32) lane_sorted = lane_sorted && a[i] > a[i - 1];
        if (i % 32 == 0 && i) warp_sorted = warp_sorted && a[i] / 32 > a[i - 32] / 32;
    }
    CHECK(grouped, "a warp did not run greedily until its threads blocked");
    CHECK(!lane_sorted, "lanes ran in index order");
    int distinct_first = 0;
    std::vector<int> firsts;
    for (uint64_t seed = 0; seed < 16; ++seed) {
        const int f = order_of(seed, 128)[0] / 32;
        bool seen = false;
        for (int x : firsts) seen = seen || x == f;
        if (!seen) firsts.push_back(f), ++distinct_first;
    }
    CHECK(distinct_first >= 3, "only %d distinct first warps over 16 seeds", distinct_first);
    char detail[96];
    snprintf(detail, sizeof detail, "seed 1 starts %d %d %d, seed 2 starts %d %d %d", a[0], a[1], a[2], b[0], b[1], b[2]);
    report("seeds: same seed same order, others differ", before, detail);
}

// ---- csrc/tasks/common.cuh

static void test_common_sums() {
    const int before = g_failures;
    for (int threads : {128, 256})
        for (uint64_t seed = 0; seed < 10; ++seed) {
            std::vector<float> ws(threads), b1(threads), b2(threads);
            run_block(Block{threads, 1024, seed}, [&] {
                const int t = threadIdx.x;
                ws[t] = mpk::warp_sum(float(t));
                b1[t] = mpk::block_sum(float(t), 0);
                b2[t] = mpk::block_sum(float(2 * t + 1), 0);  // the same partials reused at once
            });
            for (int t = 0; t < threads; ++t) {
                const int w0 = t / 32 * 32;
                CHECK(ws[t] == float(32 * w0 + 496), "warp_sum threads %d t %d: %f", threads, t, ws[t]);
                CHECK(b1[t] == float(threads * (threads - 1) / 2), "block_sum threads %d t %d: %f", threads, t, b1[t]);
                CHECK(b2[t] == float(threads * threads), "second block_sum threads %d t %d: %f", threads, t, b2[t]);
            }
        }
    report("common.cuh warp_sum/block_sum, 128 and 256", before);
}

// ---- shared memory

static void test_smem() {
    const int before = g_failures;
    std::vector<uint32_t> first(64);
    std::vector<uint16_t> bf(64);
    std::vector<int> aligned(64), size(64);
    for (int round = 0; round < 2; ++round)  // poisoned again at every block start
        run_block(Block{64, 1000, uint64_t(round)}, [&] {
            const int t = threadIdx.x;
            uint32_t* u = mpk::smem<uint32_t>(0, 250);
            first[t] = u[t];
            bf[t] = mpk::smem<mpk::bf16_t>(600, 200)[t].bits;
            aligned[t] = reinterpret_cast<uintptr_t>(mpk::smem_base()) % 1024 == 0;
            size[t] = int(mpk::smem_bytes());
            __syncthreads();
            u[t] = 7;
        });
    for (int t = 0; t < 64; ++t) {
        CHECK(first[t] == 0xFFFFFFFFu && bf[t] == 0xFFFF, "poison t %d: %08x %04x", t, first[t], bf[t]);
        CHECK(aligned[t] && size[t] == 1000, "base alignment / size %d", size[t]);
    }
    float f = 0;
    const uint32_t poison = 0xFFFFFFFFu;
    memcpy(&f, &poison, 4);
    CHECK(f != f && mpk::to_float(mpk::bf16_t{0xFFFF}) != mpk::to_float(mpk::bf16_t{0xFFFF}) &&
              mpk::to_float(mpk::fp16_t{0xFFFF}) != mpk::to_float(mpk::fp16_t{0xFFFF}),
          "the poison is NaN as float, bf16 and fp16");
    // bounds: count past the end, offset past the end, misalignment; the call site is named
    int line_a = 0, line_b = 0, line_c = 0;
    std::string e1 = error_of(Block{64, 256, 1}, [&] {
        HERE(line_a); float* p = mpk::smem<float>(0, 65);
        p[0] = 1;
    });
    CHECK(has(e1, at_line(line_a).c_str()) && has(e1, "overflows the block's 256 bytes") && has(e1, "[0, 260)"),
          "count overflow: '%s'", e1.c_str());
    std::string e2 = error_of(Block{64, 256, 1}, [&] { HERE(line_b); mpk::smem<char>(300, 0); });
    CHECK(has(e2, at_line(line_b).c_str()) && has(e2, "overflows"), "offset past the end: '%s'", e2.c_str());
    std::string e3 = error_of(Block{64, 256, 1}, [&] { HERE(line_c); mpk::smem<float4>(8, 1); });
    CHECK(has(e3, at_line(line_c).c_str()) && has(e3, "misaligned"), "misaligned float4: '%s'", e3.c_str());
    std::string e4 = error_of(Block{64, 256, 1}, [&] { mpk::smem<float>(0, 64)[threadIdx.x] = 1; });
    CHECK(e4.empty(), "exactly the whole arena is fine: '%s'", e4.c_str());
    std::string e5;
    try {
        mpk::smem<float>(0, 1);
    } catch (const Error& e) {
        e5 = e.what();
    }
    CHECK(has(e5, "outside mpk::simt::run_block"), "smem outside a block: '%s'", e5.c_str());
    report("dynamic smem: poison, alignment, bounds", before);
}

__device__ float static_shared_rotate(float x) {
    __shared__ float buf[128];
    buf[threadIdx.x] = x;
    __syncthreads();
    const float r = buf[(threadIdx.x + 1) % blockDim.x];
    __syncthreads();
    return r;
}

static void test_static_shared_and_types() {
    const int before = g_failures;
    std::vector<float> got(128);
    run_block(Block{128, 0, 4}, [&] { got[threadIdx.x] = static_shared_rotate(float(threadIdx.x)); });
    for (int t = 0; t < 128; ++t) CHECK(got[t] == float((t + 1) % 128), "static __shared__ t %d: %f", t, got[t]);
    CHECK(alignof(float4) == 16 && alignof(int4) == 16 && alignof(uint4) == 16 && alignof(float2) == 8 &&
              alignof(int2) == 8 && alignof(double2) == 16 && alignof(char4) == 4 && alignof(short2) == 4 &&
              sizeof(float3) == 12 && alignof(float3) == 4,
          "vector type alignment");
    CHECK(__float2bfloat16(1.0f).bits == 0x3F80 && __bfloat162float(__nv_bfloat16{0x4049}) == 3.140625f &&
              __float2half(1.0f).bits == 0x3C00 && __half2float(__half{0xC000}) == -2.0f,
          "bf16/fp16 conversions");
    const float4 v = make_float4(1, 2, 3, 4);
    CHECK(v.w == 4 && make_int2(3, 4).y == 4, "make_*");
    report("static __shared__, vector types, bf16/fp16", before);
}


// ---- every block size: 32 to 1024 threads in steps of 32

static void test_block_sizes() {
    const int before = g_failures;
    for (int n = 32; n <= 1024; n += 32) {
        std::vector<int> ran(n, 0), counts(n);
        std::vector<float> xs(n), sums(n);
        std::vector<unsigned> ballots(n), reds(n);
        run_block(Block{n, 1024 * sizeof(float), uint64_t(n)}, [&] {
            const int t = threadIdx.x;
            ran[t] += 1;
            xs[t] = __shfl_xor_sync(0xFFFFFFFFu, float(t), 1);
            ballots[t] = __ballot_sync(0xFFFFFFFFu, t & 1);
            reds[t] = __reduce_add_sync(0xFFFFFFFFu, unsigned(t));
            counts[t] = __syncthreads_count(t % 5 == 0);
            sums[t] = mpk::block_sum(float(t), 0);  // barriers, shuffles and blockDim.x / 32 partials
        });
        int bad = 0;
        for (int t = 0; t < n; ++t) {
            const unsigned w0 = unsigned(t / 32 * 32);
            bad += ran[t] != 1 || xs[t] != float(t ^ 1) || ballots[t] != 0xAAAAAAAAu || reds[t] != 32 * w0 + 496 ||
                   counts[t] != (n + 4) / 5 || sums[t] != float(n * (n - 1) / 2);
        }
        CHECK(bad == 0, "%d threads: %d threads saw a wrong index, shuffle, ballot, reduce, count or block_sum", n, bad);
    }
    // the checks name the block's size at 256 as at 128
    const std::string e = error_of(Block{256, 0, 1}, [] {
        if (threadIdx.x < 128) __syncthreads();
    });
    CHECK(has(e, "reached by 128 of 256 threads, 128 exited"), "divergent barrier at 256: '%s'", e.c_str());
    const std::string e2 = error_of(Block{1056, 0, 1}, [] {});
    CHECK(has(e2, "1056 threads; a block has a multiple of 32 threads, at most 1024"), "1056 threads: '%s'", e2.c_str());
    report("block sizes 32..1024 step 32; 256's messages", before);
}

// ---- static __shared__ poison

// Task 1 (write) fills a static __shared__ array; task 2 (read) reads it without writing.
__device__ void static_slot_task(bool write, uint32_t* out) {
    __shared__ uint32_t slot[1024];
    const int t = threadIdx.x;
    if (write) slot[t] = 1000u + unsigned(t);
    __syncthreads();
    if (!write) out[t] = slot[t];
    __syncthreads();
}

// Returns the failures. The executor's way (runtime/executor.cuh): tasks one after another on one
// worker block, task_barrier(blk, poison) between them, its own state in block_scratch.
static int check_static_poison() {
    const int before = g_failures;
    for (const int n : {128, 256}) {
        std::vector<uint32_t> out(n, 0), kept(n, 0), plain(n, 0), fresh(n, 0);
        run_block(Block{n, 256, 7}, [&] {
            const mpk::simt::BlockRef blk = mpk::simt::this_block();
            uint32_t* keep = static_cast<uint32_t*>(mpk::simt::block_scratch(blk, 64));
            if (threadIdx.x == 0) *keep = 42;
            static_slot_task(true, out.data());
            mpk::simt::task_barrier(blk, true);
            static_slot_task(false, out.data());
            mpk::simt::task_barrier(blk, true);
            kept[threadIdx.x] = *keep;
            static_slot_task(true, plain.data());  // without the poison: the block keeps its values
            mpk::simt::task_barrier(blk, false);
            static_slot_task(false, plain.data());
        });
        run_block(Block{n, 0, 8}, [&] { static_slot_task(true, fresh.data()); });
        run_block(Block{n, 0, 9}, [&] { static_slot_task(false, fresh.data()); });
        for (int t = 0; t < n; ++t) {
            CHECK(out[t] == 0xFFFFFFFFu,
                  "%d threads: static __shared__ read in task 2 of a worker block: threadIdx.x %d saw 0x%08x "
                  "(task 1 wrote 0x%08x), not the poison 0xffffffff",
                  n, t, out[t], 1000u + unsigned(t));
            CHECK(fresh[t] == 0xFFFFFFFFu,
                  "%d threads: static __shared__ read in a new block: threadIdx.x %d saw 0x%08x, not the poison", n, t,
                  fresh[t]);
            CHECK(kept[t] == 42, "%d threads: block_scratch lost its value across a poisoning task_barrier: %u", n, kept[t]);
            CHECK(plain[t] == 1000u + unsigned(t), "%d threads: without poison, task 2 saw 0x%08x", n, plain[t]);
        }
    }
    return g_failures - before;
}
static void test_static_poison() {
    const int before = g_failures;
    check_static_poison();
    // the assumption itself: a static __shared__ array lies inside the TLS block the poison fills,
    // outside the emulation's own state
    uintptr_t lo = 0, hi = 0, arr = 0, skip_lo = 0, skip_hi = 0;
    run_block(Block{32, 0, 1}, [&] {
        __shared__ float probe[300];
        const mpk::simt::BlockRef blk = mpk::simt::this_block();
        if (threadIdx.x == 0) {
            lo = uintptr_t(blk->tls_lo), hi = uintptr_t(blk->tls_hi), arr = uintptr_t(probe);
            skip_lo = uintptr_t(blk->tls_skip_lo), skip_hi = uintptr_t(blk->tls_skip_hi);
        }
    });
    CHECK(lo && arr >= lo && arr + sizeof(float) * 300 <= hi && (arr + sizeof(float) * 300 <= skip_lo || arr >= skip_hi),
          "a static __shared__ array at %#lx..%#lx is not in the poisoned TLS block [%#lx, %#lx) less [%#lx, %#lx)",
          (unsigned long)arr, (unsigned long)(arr + 1200), (unsigned long)lo, (unsigned long)hi,
          (unsigned long)skip_lo, (unsigned long)skip_hi);
    // the layout check refuses what the poison cannot handle (and accepts the real one)
    using mpk::simt::detail::TlsQuery;
    using mpk::simt::detail::tls_layout_error;
    alignas(64) static char fake[256];
    CHECK(tls_layout_error(TlsQuery{0, true, fake, 256}, fake + 64, 24).empty(), "a good layout refused");
    const std::string e1 = tls_layout_error(TlsQuery{0, true, fake, 64}, fake + 48, 24);
    const std::string e2 = tls_layout_error(TlsQuery{0, false, nullptr, 0}, fake, 24);
    const std::string e3 = tls_layout_error(TlsQuery{0, true, fake + 128, 64}, fake, 24);
    CHECK(has(e1, "cannot find this module's thread-local storage as it expects (module found, TLS block") &&
              has(e1, "of 64 bytes") && has(e1, "simt_cpu_tls.h:"),
          "state past the block's end: '%s'", e1.c_str());
    CHECK(has(e2, "(module not found"), "module not found: '%s'", e2.c_str());
    CHECK(!e3.empty(), "state before the block accepted");
    report("static __shared__ poison: task and block start", before);
}

// ---- MPK_SIMT_SERIAL=1: one thread at a time, in threadIdx order

static void test_serial() {
    const int before = g_failures;
    for (const int n : {128, 256}) {
        auto run = [n](uint64_t seed) {
            std::vector<int> log(3 * n, -1);
            int next[3] = {0, 0, 0};
            run_block(Block{n, 0, seed}, [&] {
                const int t = threadIdx.x;
                log[atomicAdd(&next[0], 1)] = t;  // until the shuffle
                const int x = __shfl_xor_sync(0xFFFFFFFFu, t, 1);
                log[n + atomicAdd(&next[1], 1)] = x ^ 1;  // until the barrier
                __syncthreads();
                log[2 * n + atomicAdd(&next[2], 1)] = t;
            });
            return log;
        };
        std::vector<int> in_order(3 * n);
        for (int i = 0; i < 3 * n; ++i) in_order[i] = i % n;
        const std::vector<int> random = run(3);
        setenv("MPK_SIMT_SERIAL", "1", 1);
        const std::vector<int> a = run(3), b = run(4);
        unsetenv("MPK_SIMT_SERIAL");
        CHECK(a == in_order && b == in_order, "%d threads, MPK_SIMT_SERIAL=1: not thread order (seed 3 starts %d %d %d)", n,
              a[0], a[1], a[2]);
        CHECK(random != in_order, "%d threads without MPK_SIMT_SERIAL: thread order (the check proves nothing)", n);
    }
    report("MPK_SIMT_SERIAL=1: threadIdx order, 128 and 256", before);
}

// ---- the write-watch (Block::watch_addr, TaskView::watch_addr)

__device__ void watch_task(const mpk::TaskView& v) {
    float* o = static_cast<float*>(v.ptrs[0]);
    const int t = threadIdx.x;
    o[t] = float(t);   // every thread its own element
    __syncthreads();
    if (t == 37) o[200] = -1.0f;  // element 200, written by thread 200 above, then by 37
}

static void test_watch() {
    const int before = g_failures;
    for (const int n : {128, 256}) {
        const int last = n == 128 ? 37 : 200;
        float target = 0;
        int32_t who = -2;
        run_block(Block{n, 0, 5, &target, sizeof target, &who}, [&] {
            const int t = threadIdx.x;
            if (t == 5) target = 1;
            __syncthreads();
            if (t == last) target = 2;
            __syncthreads();
            if (t == 9) target = 2;  // the same value: no change, not a write the watch sees
        });
        CHECK(who == last, "%d threads: the watch says thread %d wrote last, not %d", n, who, last);
        float untouched = 0;
        who = -2;
        run_block(Block{n, 0, 5, &untouched, sizeof untouched, &who}, [&] { __syncthreads(); });
        CHECK(who == -1, "%d threads: nothing written, the watch says %d", n, who);
    }
    // through a task view and MPK_RUN_TASK (the kernel-level harness's way)
    std::vector<float> out(256, 0);
    int32_t who = -2;
    mpk::TaskView v{};
    v.ptrs[0] = out.data();
    v.block_threads = 256;
    v.simt_seed = 11;
    v.watch_addr = &out[200];
    v.watch_bytes = sizeof(float);
    v.watch_thread = &who;
    MPK_RUN_TASK(v, watch_task);
    CHECK(who == 37 && out[200] == -1.0f, "MPK_RUN_TASK watch: thread %d (warp %d lane %d), value %f", who, who / 32,
          who % 32, out[200]);
    out.assign(256, 0.0f);  // (a write of the value already there is no change)
    v.watch_addr = &out[100];
    MPK_RUN_TASK(v, watch_task);
    CHECK(who == 100, "MPK_RUN_TASK watch of element 100: thread %d", who);
    report("write-watch: the last writer's thread, 128 and 256", before);
}

// ---- atomics, __nanosleep

static void test_atomics_and_yield() {
    const int before = g_failures;
    int isum = 0, imax = -1, imin = 1000, cas_winner = -1;
    unsigned usum = 0, inc = 0;
    unsigned long long usum64 = 0;
    float fsum = 0;
    double dsum = 0;
    int lock = 0, in_lock = 0, overlaps = 0;
    int flag = 0, waited = 0;
    run_block(Block{256, 0, 8}, [&] {
        const int t = threadIdx.x;
        atomicAdd(&isum, t);
        atomicAdd(&usum, unsigned(t));
        atomicAdd(&usum64, 1ull << 33);
        atomicAdd(&fsum, 0.5f);
        atomicAdd(&dsum, 0.25);
        atomicMax(&imax, t);
        atomicMin(&imin, t + 3);
        atomicCAS(&cas_winner, -1, t);
        atomicInc(&inc, 99u);
        // a spin lock: the waiting threads yield through __nanosleep
        while (atomicCAS(&lock, 0, 1) != 0) __nanosleep(100);
        // (relaxed atomics: CUDA's lock orders nothing without __threadfence, nor does TSan)
        __atomic_fetch_add(&overlaps, __atomic_fetch_add(&in_lock, 1, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
        __nanosleep(10);  // other threads run while the lock is held
        __atomic_fetch_sub(&in_lock, 1, __ATOMIC_RELAXED);
        atomicExch(&lock, 0);
        // thread 0 waits for a flag the last thread sets
        if (t == 0)
            while (__atomic_load_n(&flag, __ATOMIC_ACQUIRE) == 0) {
                ++waited;
                __nanosleep(1000);
            }
        if (t == 255) __atomic_store_n(&flag, 1, __ATOMIC_RELEASE);
    });
    CHECK(isum == 255 * 128 && usum == 255u * 128u && usum64 == 256ull << 33, "integer atomicAdd %d", isum);
    CHECK(fsum == 128.0f && dsum == 64.0, "float/double atomicAdd %f %f", fsum, dsum);
    CHECK(imax == 255 && imin == 3 && cas_winner >= 0 && inc == 256 % 100, "max %d min %d cas %d inc %u", imax, imin,
          cas_winner, inc);
    CHECK(overlaps == 0, "the spin lock let %d threads in together", overlaps);
    char detail[64];
    snprintf(detail, sizeof detail, "thread 0 yielded %d times for the flag", waited);
    report("atomics, spin lock, __nanosleep", before, detail);
}

// ---- errors

struct Counted {
    static std::atomic<int> live;
    Counted() { ++live; }
    ~Counted() { --live; }
};
std::atomic<int> Counted::live{0};

static void test_errors() {
    const int before = g_failures;
    std::string e;
    e = error_of(Block{100, 0, 0}, [] {});
    CHECK(has(e, "100 threads") && has(e, "multiple of 32"), "bad size: '%s'", e.c_str());
    e = error_of(Block{64, 0, 0}, [] { run_block(Block{32, 0, 0}, [] {}); });
    CHECK(has(e, "do not nest"), "nested: '%s'", e.c_str());
    // an exception in a thread; every other thread's frames unwind (destructors run)
    Counted::live = 0;
    e = error_of(Block{128, 0, 0}, [] {
        Counted c;
        __syncthreads();
        if (threadIdx.x == 77) throw std::runtime_error("boom");
        __syncthreads();
    });
    CHECK(has(e, "threadIdx.x 77 (warp 2, lane 13) threw: boom"), "exception: '%s'", e.c_str());
    CHECK(Counted::live == 0, "%d kernel objects not destroyed after the block stopped", Counted::live.load());
    int line = 0;
    e = error_of(Block{64, 0, 0}, [&] {
        if (threadIdx.x == 3) { HERE(line); __trap(); }
    });
    CHECK(has(e, "__trap() at") && has(e, at_line(line).c_str()), "trap: '%s'", e.c_str());
    // a mask without the caller, two collectives at different sites that wait on each other, a deadlock
    e = error_of(Block{32, 0, 0}, [&] { HERE(line); __ballot_sync(0xFFFFFFFEu, 1); });
    CHECK(has(e, "does not include the calling threadIdx.x 0") && has(e, at_line(line).c_str()), "mask: '%s'", e.c_str());
    int l1 = 0, l2 = 0;
    e = error_of(Block{32, 0, 0}, [&] {
        if (threadIdx.x % 2) { HERE(l1); __shfl_xor_sync(0xFFFFFFFFu, 1, 1); }
        else { HERE(l2); __shfl_down_sync(0xFFFFFFFFu, 1, 1); }
    });
    CHECK(has(e, "mismatched warp collectives in warp 0") && has(e, at_line(l1).c_str()) && has(e, at_line(l2).c_str()),
          "mismatch: '%s'", e.c_str());
    e = error_of(Block{64, 0, 0}, [&] {
        if (threadIdx.x == 0) { HERE(l1); __syncwarp(); }  // lanes 1..31 wait at the barrier
        else { HERE(l2); __syncthreads(); }
    });
    CHECK(has(e, "divergent __syncthreads: " + at_line(l2) + " reached by 63 of 64 threads") &&
              has(e, "1 wait at __syncwarp " + at_line(l1)),
          "deadlock: '%s'", e.c_str());
    // a cycle of partial-mask collectives: lane 0 waits for 1, 1 for 2, 2 for 0
    int l3 = 0;
    e = error_of(Block{32, 0, 0}, [&] {
        const int lane = threadIdx.x;
        if (lane == 0) { HERE(l1); __syncwarp(0x3u); }
        if (lane == 1) { HERE(l2); __shfl_sync(0x6u, 1, 2); }
        if (lane == 2) { HERE(l3); __ballot_sync(0x5u, 1); }
    });
    CHECK(has(e, "deadlock in warp collectives: ") && has(e, "1 wait at __syncwarp " + at_line(l1) + " (warp 0, mask 0x00000003)") &&
              has(e, "1 wait at __shfl_sync " + at_line(l2)) && has(e, "1 wait at __ballot_sync " + at_line(l3)) &&
              has(e, "29 exited"),
          "collective deadlock: '%s'", e.c_str());
    e = error_of(Block{32, 0, 0}, [&] { __shfl_sync(0xFFFFFFFFu, 1, 0, 12); });
    CHECK(has(e, "width 12"), "width: '%s'", e.c_str());
    // the block after a failed one starts clean
    e = error_of(Block{128, 64, 3}, [] { __syncthreads(); __shfl_xor_sync(0xFFFFFFFFu, 1, 3); __syncthreads(); });
    CHECK(e.empty(), "a clean block after failures: '%s'", e.c_str());
    std::string outside;
    try {
        __syncthreads();
    } catch (const Error& x) {
        outside = x.what();
    }
    CHECK(has(outside, "__syncthreads called outside"), "barrier outside a block: '%s'", outside.c_str());
    report("errors: messages name call sites and counts", before);
}

// Blocks on several OS threads at once share nothing.
static void test_os_threads() {
    const int before = g_failures;
    std::atomic<int> wrong{0};
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k)
        threads.emplace_back([&, k] {
            for (int i = 0; i < 40; ++i) {
                const int n = 32 * (1 + (k + i) % 8);
                std::vector<float> got(n);
                run_block(Block{n, 512, uint64_t(k * 1000 + i)}, [&] { got[threadIdx.x] = mpk::block_sum(1.0f, 0); });
                for (float g : got) wrong += g != float(n);
            }
        });
    for (auto& t : threads) t.join();
    CHECK(wrong == 0, "%d wrong sums across 4 OS threads", wrong.load());
    report("4 OS threads x 40 blocks, independent", before);
}

// ---- contention (Block::contend; docs/simt.md, "Atomics under contention")

// Two OS threads' blocks add 1 to one word, 8 times per thread, through atomicCAS: kRetry the usual
// loop, else one try (a lost update whenever the other block's swap lands between the read and ours).
template <bool kRetry> static unsigned contended_count(bool contend, uint64_t seed) {
    unsigned word = 0;
    std::vector<std::thread> threads;
    for (int k = 0; k < 2; ++k)
        threads.emplace_back([&, k] {
            Block b{32, 0, seed * 2 + uint64_t(k)};
            b.contend = contend;
            run_block(b, [&] {
                for (int i = 0; i < 8; ++i) {
                    unsigned old = atomicCAS(&word, 0u, 0u), assumed;
                    do {
                        assumed = old;
                        old = atomicCAS(&word, assumed, assumed + 1);
                    } while (kRetry && old != assumed);
                }
            });
        });
    for (auto& t : threads) t.join();
    return word;
}
static void test_contended_atomics() {
    const int before = g_failures;
    const unsigned want = 2 * 32 * 8;
    const unsigned loop = contended_count<true>(true, 1), once = contended_count<false>(true, 1);
    CHECK(loop == want, "the CAS loop under contention counted %u of %u", loop, want);
    CHECK(once < want, "one CAS try lost no update under contention (%u of %u): the pause is off", once, want);
    printf("  contention: the CAS loop %u of %u, one try %u of %u\n", loop, want, once, want);
    report("atomics under contention: the CAS loop exact, one try loses updates", before);
}

// ---- negative controls (docs/simt.md): each broken kernel fails, its fixed version passes

// (1) a missing barrier between a shared-memory write and a read of another thread's value
template <bool kFixed> static void rotate_kernel(float* out) {
    float* s = mpk::smem<float>(0, blockDim.x);
    const int t = threadIdx.x;
    s[t] = float(t + 1);
    if (kFixed) __syncthreads();
    out[t] = s[(t + 37) % blockDim.x];
}
// (1b) the subtler one: block_sum without its second barrier, called twice in a row
__device__ float block_sum_one_barrier(float x) {
    const int warps = int(blockDim.x) / 32;
    float* partial = mpk::smem<float>(0, warps);
    x = mpk::warp_sum(x);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = x;
    __syncthreads();
    float total = 0;
    for (int w = 0; w < warps; ++w) total += partial[w];
    return total;
}
template <bool kFixed> static void two_sums_kernel(float* out) {
    const int t = threadIdx.x;
    const float a = kFixed ? mpk::block_sum(float(t), 0) : block_sum_one_barrier(float(t));
    const float b = kFixed ? mpk::block_sum(1.0f, 0) : block_sum_one_barrier(1.0f);
    out[t] = a + b;
}
template <class K> static int wrong_seeds(K kernel, float (*want)(int, int), int seeds, int threads = 128) {
    int wrong = 0;
    for (int seed = 0; seed < seeds; ++seed) {
        std::vector<float> out(threads);
        run_block(Block{threads, size_t(threads) * 4, uint64_t(seed)}, [&] { kernel(out.data()); });
        bool bad = false;
        for (int t = 0; t < threads; ++t) bad = bad || out[t] != want(t, threads);
        wrong += bad;
    }
    return wrong;
}
static float rotate_want(int t, int n) { return float((t + 37) % n + 1); }
static float two_sums_want(int, int n) { return float(n * (n - 1) / 2 + n); }

static void test_control_missing_barrier() {
    const int before = g_failures;
    const int broken = wrong_seeds(rotate_kernel<false>, rotate_want, 20);
    const int fixed = wrong_seeds(rotate_kernel<true>, rotate_want, 20);
    const int broken2 = wrong_seeds(two_sums_kernel<false>, two_sums_want, 20);
    const int fixed2 = wrong_seeds(two_sums_kernel<true>, two_sums_want, 20);
    CHECK(broken >= 1 && fixed == 0, "missing barrier: broken wrong on %d/20 seeds, fixed on %d/20", broken, fixed);
    CHECK(broken2 >= 1 && fixed2 == 0, "block_sum without its 2nd barrier: broken %d/20, fixed %d/20", broken2, fixed2);
    char detail[128];
    snprintf(detail, sizeof detail, "write/read: broken wrong on %d/20 seeds, fixed %d/20; reused partials: %d/20, %d/20",
             broken, fixed, broken2, fixed2);
    report("control: missing __syncthreads", before, detail);
}

// (2) a barrier inside a branch only some threads take
static void test_control_barrier_in_branch() {
    const int before = g_failures;
    int line = 0, la = 0, lb = 0;
    std::string broken = error_of(Block{128, 0, 1}, [&] {
        if (threadIdx.x < 64) { HERE(line); __syncthreads(); }
    });
    std::string fixed = error_of(Block{128, 0, 1}, [&] {
        if (threadIdx.x < 64) { /* work */ }
        __syncthreads();
    });
    CHECK(broken == "divergent __syncthreads: " + at_line(line) + " reached by 64 of 128 threads, 64 exited",
          "broken: '%s'", broken.c_str());
    CHECK(fixed.empty(), "fixed: '%s'", fixed.c_str());
    std::string two_sites = error_of(Block{128, 0, 2}, [&] {
        if (threadIdx.x < 64) { HERE(la); __syncthreads(); }
        else { HERE(lb); __syncthreads(); }
    });
    const std::string want_a = at_line(la) + " reached by 64 of 128 threads, " + at_line(lb) + " by 64";
    const std::string want_b = at_line(lb) + " reached by 64 of 128 threads, " + at_line(la) + " by 64";
    CHECK(two_sites == "divergent __syncthreads: " + want_a || two_sites == "divergent __syncthreads: " + want_b,
          "two sites: '%s'", two_sites.c_str());
    report("control: __syncthreads in a branch", before, "'" + broken + "'");
}

// (3) a full-mask shuffle inside a divergent branch
static void test_control_divergent_shuffle() {
    const int before = g_failures;
    std::vector<int> out(64);
    int line = 0;
    std::string broken = error_of(Block{64, 0, 1}, [&] {
        int v = int(threadIdx.x);
        if (threadIdx.x % 32 < 16) { HERE(line); v = __shfl_xor_sync(0xFFFFFFFFu, v, 1); }
        out[threadIdx.x] = v;
    });
    std::string fixed = error_of(Block{64, 0, 1}, [&] {
        int v = int(threadIdx.x);
        if (threadIdx.x % 32 < 16) v = __shfl_xor_sync(0x0000FFFFu, v, 1);
        out[threadIdx.x] = v;
    });
    CHECK(has(broken, ("__shfl_xor_sync " + at_line(line)).c_str()) || has(broken, ("__shfl_xor_sync at " + at_line(line)).c_str()),
          "broken: '%s'", broken.c_str());
    CHECK(fixed.empty() && out[0] == 1 && out[1] == 0 && out[16] == 16 && out[33] == 32, "fixed: '%s'", fixed.c_str());
    // the lanes outside the branch reach a barrier instead of exiting
    std::string broken2 = error_of(Block{64, 0, 1}, [&] {
        int v = int(threadIdx.x);
        if (threadIdx.x % 32 < 16) { HERE(line); v = __shfl_xor_sync(0xFFFFFFFFu, v, 1); }
        __syncthreads();
        out[threadIdx.x] = v;
    });
    CHECK(has(broken2, "divergent __syncthreads") && has(broken2, ("wait at __shfl_xor_sync " + at_line(line)).c_str()),
          "broken, then a barrier: '%s'", broken2.c_str());
    report("control: full-mask shuffle in a branch", before, "'" + broken + "'");
}

// (4) a shared-memory overflow: through mpk::smem (bounds check) and by raw indexing (canary; ASan)
static void test_control_smem_overflow() {
    const int before = g_failures;
    int line = 0;
    std::string broken = error_of(Block{128, 128 * 4, 1}, [&] {
        HERE(line); float* s = mpk::smem<float>(0, blockDim.x + 1);  // one too many
        s[threadIdx.x] = 1;
    });
    std::string fixed = error_of(Block{128, 128 * 4, 1}, [&] {
        float* s = mpk::smem<float>(0, blockDim.x);
        s[threadIdx.x] = 1;
    });
    CHECK(has(broken, at_line(line).c_str()) && has(broken, "overflows the block's 512 bytes"), "broken: '%s'", broken.c_str());
    CHECK(fixed.empty(), "fixed: '%s'", fixed.c_str());
    std::string raw;
    if (!kAsan) {  // under ASan the same write is a heap-buffer-overflow report (mode asan-smem)
        raw = error_of(Block{128, 128 * 4, 1}, [&] {
            float* s = mpk::smem<float>(0, blockDim.x);
            s[threadIdx.x + 1] = 1;  // thread 127 writes one past the end
        });
        CHECK(has(raw, "write past the end of the block's 512 bytes"), "raw overflow: '%s'", raw.c_str());
    }
    report("control: shared-memory overflow", before, "'" + broken + "'");
}

// (5) reading shared memory the kernel never wrote: the poison (NaN) reaches the result
template <bool kFixed> static void sum_smem_kernel(float* out) {
    float* s = mpk::smem<float>(0, blockDim.x);
    if (kFixed) s[threadIdx.x] = 1.0f;
    __syncthreads();
    float acc = 0;
    for (unsigned i = 0; i < blockDim.x; ++i) acc += s[i];
    out[threadIdx.x] = acc;
}
static float sum_want(int, int n) { return float(n); }
static void test_control_unwritten_smem() {
    const int before = g_failures;
    const int broken = wrong_seeds(sum_smem_kernel<false>, sum_want, 3);
    const int fixed = wrong_seeds(sum_smem_kernel<true>, sum_want, 3);
    CHECK(broken == 3 && fixed == 0, "unwritten smem: broken wrong on %d/3, fixed on %d/3", broken, fixed);
    report("control: reading never-written smem", before);
}

// ---- sanitizer modes: one kernel, then exit (the script checks the sanitizer's report)

static int sanitizer_mode(const std::string& mode) {
    std::vector<float> out(128);
    // tsan-race: the write/read kernel without its barrier; tsan-race2: block_sum without its
    // second barrier; tsan-clean: both fixed. Separate processes: TSan reports a race once.
    if (mode == "tsan-race" || mode == "tsan-race2" || mode == "tsan-clean") {
        for (int seed = 0; seed < 3; ++seed)
            for (int k = 0; k < 2; ++k)  // one kernel per block (two in one block would race)
                run_block(Block{128, 512, uint64_t(seed)}, [&] {
                    if (mode == "tsan-race") rotate_kernel<false>(out.data());
                    else if (mode == "tsan-race2") two_sums_kernel<false>(out.data());
                    else if (k == 0) rotate_kernel<true>(out.data());
                    else two_sums_kernel<true>(out.data());
                });
        printf("%s: ran\n", mode.c_str());
        return 0;
    }
    // the static __shared__ poison alone; built with -DMPK_SIMT_STATIC_POISON=0 it must fail
    if (mode == "static-poison") {
        const int failures = check_static_poison();
        printf("static-poison: %d failure(s)\n", failures);
        return failures ? 1 : 0;
    }
    if (mode == "asan-smem") {
        run_block(Block{128, 512, 1}, [&] {
            float* s = mpk::smem<float>(0, blockDim.x);
            s[threadIdx.x + 1] = 1;  // thread 127 writes one past the block's shared memory
        });
        printf("asan-smem: no report\n");
        return 0;
    }
    if (mode == "asan-global") {
        std::vector<float> small(127);
        float* p = small.data();
        run_block(Block{128, 0, 1}, [&] { p[threadIdx.x] = 1; });  // thread 127 writes past the buffer
        printf("asan-global: no report\n");
        return 0;
    }
    fprintf(stderr, "unknown mode %s (tsan-race|tsan-race2|tsan-clean|static-poison|asan-smem|asan-global)\n", mode.c_str());
    return 2;
}

int main(int argc, char** argv) {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    if (argc > 1) return sanitizer_mode(argv[1]);
    const auto t0 = std::chrono::steady_clock::now();
    test_indices();
    test_barriers();
    test_shuffles();
    test_partial_masks();
    test_syncwarp_match_reduce();
    test_seeds();
    test_common_sums();
    test_smem();
    test_static_shared_and_types();
    test_block_sizes();
    test_static_poison();
    test_serial();
    test_watch();
    test_atomics_and_yield();
    test_errors();
    test_os_threads();
    test_contended_atomics();
    if (!kTsan) test_control_missing_barrier();  // racy by design: run as `tsan-race` under TSan
    test_control_barrier_in_branch();
    test_control_divergent_shuffle();
    test_control_smem_overflow();
    test_control_unwritten_smem();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("%s: %d failure(s), %.2f s\n", g_failures ? "FAILED" : "All simt tests passed", g_failures.load(), s);
    return g_failures ? 1 : 0;
}
