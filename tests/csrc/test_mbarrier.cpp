// test_mbarrier.cpp: mbarrier of csrc/runtime/ptx.h on the CPU emulation (csrc/runtime/simt_cpu_mbarrier.h),
// against the PTX ISA ("Parallel Synchronization and Communication Instructions: mbarrier"):
//   - phases: the current phase completes when its pending arrivals and its tx-count are both zero
//     (the count restored, the phase number one more); try_wait.parity p / test_wait.parity p is true
//     exactly when the current phase's parity differs from p; arrive returns the phase it arrived in;
//   - transaction bytes: expect_tx adds, complete_tx subtracts, arrive.expect_tx is both, the tx-count may
//     go below zero before its expect_tx arrives, and an arrival-complete phase waits for its bytes;
//   - a producer / consumer ring (one producer warp, three consumer warps, two stages with a full and an
//     empty barrier each) over seeds: every value arrives, exactly once, in order; its control, a producer
//     that does not wait on the empty barrier, is seen on some seed;
//   - a barrier per task on a persistent worker block (the task barrier ends a task's barriers);
//   - every named error, with the call site's line, each beside the fixed kernel as its control.
// Run:  bash tests/csrc/run_simt_tests.sh ptx   (plain, TSan and ASan+UBSan builds)
#include "runtime/ptx.h"

#include <stdio.h>
#include <string>

#include "simt_check.h"

using mpk::simt::Block;

#define NEXT_LINE(var) __atomic_store_n(&(var), __LINE__ + 1, __ATOMIC_RELAXED)
static std::string at_line(int line) { return "test_mbarrier.cpp:" + std::to_string(line); }

using namespace mpk::ptx;

// One thread walks a barrier through its phases; every step is checked against the ISA's rule above.
static void test_phases() {
    const int before = g_failures;
    std::string e = error_of({32, 64, 1}, [&] {
        if (threadIdx.x) return;
        uint64_t* bar = mpk::smem<uint64_t>(0, 1);
        mbarrier_init_shared_b64(bar, 3);
        for (uint64_t phase = 0; phase < 4; ++phase) {
            const uint32_t p = uint32_t(phase & 1);
            for (int a = 0; a < 3; ++a) {
                CHECK(!mbarrier_test_wait_parity_shared_b64(bar, p), "phase %d incomplete after %d arrivals", int(phase), a);
                CHECK(mbarrier_test_wait_parity_shared_b64(bar, p ^ 1), "the previous parity reads complete");
                CHECK(mbarrier_arrive_shared_b64(bar) == phase, "arrive returns the phase it arrived in");
            }
            CHECK(mbarrier_try_wait_parity_shared_b64(bar, p), "phase %d completes with its 3rd arrival", int(phase));
            CHECK(!mbarrier_try_wait_parity_shared_b64(bar, p ^ 1), "phase %d is the current one", int(phase + 1));
        }
        // transaction bytes: the arrivals are in, the phase waits for its bytes
        mbarrier_expect_tx_shared_b64(bar, 48);
        mbarrier_arrive_shared_b64(bar);
        mbarrier_arrive_shared_b64(bar);
        mbarrier_arrive_expect_tx_shared_b64(bar, 16);
        CHECK(!mbarrier_test_wait_parity_shared_b64(bar, 0), "3 arrivals, 64 bytes outstanding: incomplete");
        mbarrier_complete_tx_shared_b64(bar, 60);
        CHECK(!mbarrier_test_wait_parity_shared_b64(bar, 0), "4 bytes outstanding: incomplete");
        mbarrier_complete_tx_shared_b64(bar, 4);
        CHECK(mbarrier_test_wait_parity_shared_b64(bar, 0), "bytes balanced: phase 4 complete");
        // bytes completed before they are expected (a copy landing before its expect_tx): tx-count below zero
        mbarrier_complete_tx_shared_b64(bar, 32);
        mbarrier_arrive_shared_b64(bar);
        mbarrier_arrive_shared_b64(bar);
        CHECK(!mbarrier_test_wait_parity_shared_b64(bar, 1), "tx-count -32, one arrival to come: incomplete");
        mbarrier_arrive_expect_tx_shared_b64(bar, 32);
        CHECK(mbarrier_test_wait_parity_shared_b64(bar, 1), "the expect_tx balances it: phase 5 complete");
        mbarrier_inval_shared_b64(bar);
        mbarrier_init_shared_b64(bar, 1);  // invalidated bytes may hold a new barrier
        CHECK(mbarrier_arrive_shared_b64(bar) == 0, "a new barrier starts at phase 0");
    });
    CHECK(e.empty(), "phases: %s", e.c_str());
    report("mbarrier phases and transaction bytes", before);
}

// A ring of STAGES slots: warp 0's lane 0 produces N values (each a slot's 32 words, written then
// arrive.expect_tx + complete_tx of its 128 bytes, as a copy engine would), warps 1-3 consume every slot
// (wait full, read, arrive on empty). The empty barriers start "complete" for parity 1: the producer's
// first wait on each passes at once (the ISA's phase-parity idiom).
// skip_empty: the producer does not wait for a slot's consumers (the negative control: some seed must
// show a consumer reading a value overwritten by the next one). Returns the consumers' wrong counts.
static int ring(bool skip_empty) {
    constexpr int STAGES = 2, N = 9, CONSUMERS = 96;
    int wrong = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        long sums[CONSUMERS] = {};
        std::string e = error_of({128, 1024, seed}, [&] {
            uint64_t* full = mpk::smem<uint64_t>(0, STAGES);
            uint64_t* empty = mpk::smem<uint64_t>(64, STAGES);
            int* slot = mpk::smem<int>(128, STAGES * 32);
            if (threadIdx.x == 0)
                for (int s = 0; s < STAGES; ++s) {
                    mbarrier_init_shared_b64(full + s, 1);
                    mbarrier_init_shared_b64(empty + s, CONSUMERS);
                }
            __syncthreads();
            if (threadIdx.x < 32) {
                if (threadIdx.x) return;
                for (int i = 0; i < N; ++i) {
                    const int s = i % STAGES;
                    if (!skip_empty) mbarrier_wait_parity(empty + s, uint32_t((i / STAGES) & 1) ^ 1);
                    for (int w = 0; w < 32; ++w) slot[s * 32 + w] = 1000 * i + w;
                    mbarrier_arrive_expect_tx_shared_b64(full + s, 128);
                    mbarrier_complete_tx_shared_b64(full + s, 128);
                }
                return;
            }
            const int c = int(threadIdx.x) - 32;
            for (int i = 0; i < N; ++i) {
                const int s = i % STAGES;
                mbarrier_wait_parity(full + s, uint32_t((i / STAGES) & 1));
                sums[c] += slot[s * 32 + c % 32] - (1000 * i + c % 32) + 1;  // 1 per value seen as written
                mbarrier_arrive_shared_b64(empty + s);
            }
        });
        if (!skip_empty) CHECK(e.empty(), "ring seed %d: %s", int(seed), e.c_str());
        for (int c = 0; c < CONSUMERS; ++c) {
            if (!skip_empty) CHECK(sums[c] == N, "ring seed %d consumer %d: %ld of %d", int(seed), c, sums[c], N);
            wrong += sums[c] != N || !e.empty();
        }
    }
    return wrong;
}
static void test_ring() {
    const int before = g_failures;
    ring(false);
#if MPK_SIMT_TSAN
    report("producer / consumer ring, 12 seeds", before, "(the control, a real race, runs in the other builds)");
#else
    const int wrong = ring(true);
    CHECK(wrong > 0, "the control: a producer that skips the empty barrier went unseen");
    report("producer / consumer ring, 12 seeds", before,
           "control (no wait on empty): " + std::to_string(wrong) + " of 1152 consumer runs wrong");
#endif
}

// A persistent worker block runs task after task (runtime/executor.cuh): each task may mbarrier.init the
// same bytes, as each block may; the task barrier ends the task's barriers, with or without test mode's
// shared-memory poison. The control: a plain __syncthreads between them is still one task, so the second
// init is over a live barrier.
static void test_tasks_on_one_block() {
    const int before = g_failures;
    for (int task_end : {1, 0}) {
        for (bool poison : {false, true}) {
            int line = 0;
            const std::string e = error_of({64, 64, 21}, [&] {
                mpk::simt::BlockRef blk = mpk::simt::this_block();
                for (int task = 0; task < 3; ++task) {
                    uint64_t* bar = mpk::smem<uint64_t>(0, 1);
                    if (threadIdx.x == 0) {
                        NEXT_LINE(line);
                        mbarrier_init_shared_b64(bar, 64);
                    }
                    __syncthreads();
                    mbarrier_arrive_shared_b64(bar);
                    mbarrier_wait_parity(bar, 0);
                    if (task_end)
                        mpk::simt::task_barrier(blk, poison);
                    else
                        __syncthreads();
                }
            });
            if (task_end)
                CHECK(e.empty(), "3 tasks (poison %d): %s", int(poison), e.c_str());
            else
                CHECK(has(e, "mbarrier.init.shared::cta.b64 at " + at_line(line)) && has(e, "is live"),
                      "the control: got \"%s\"", e.c_str());
        }
    }
    report("a barrier per task on one worker block", before);
}

static void test_errors() {
    const int before = g_failures;
    std::string e;
    int line = 0, line2 = 0;
    // one arrival short: the consumers' wait can never complete (the control: every thread arrives)
    for (int short_by : {1, 0}) {
        e = error_of({64, 64, 3}, [&] {
            uint64_t* bar = mpk::smem<uint64_t>(0, 1);
            if (threadIdx.x == 0) mbarrier_init_shared_b64(bar, 64);
            __syncthreads();
            if (int(threadIdx.x) >= short_by) mbarrier_arrive_shared_b64(bar);
            NEXT_LINE(line);
            mbarrier_wait_parity(bar, 0);
        });
        if (short_by)
            expect("wait that can never complete", e, {"mbarrier wait that can never complete", at_line(line),
                                                       "for parity 0", "1 of 64 arrivals still to come"});
        else
            CHECK(e.empty(), "every thread arrives: %s", e.c_str());
    }
    // the wrong parity: phase 0 completed, the threads wait for parity 0 again (the control: parity 1
    // of the previous phase... the same wait with the phase's own parity, 0, before it completed: above)
    e = error_of({32, 64, 4}, [&] {
        uint64_t* bar = mpk::smem<uint64_t>(0, 1);
        if (threadIdx.x == 0) mbarrier_init_shared_b64(bar, 32);
        __syncthreads();
        mbarrier_arrive_shared_b64(bar);
        mbarrier_wait_parity(bar, 0);
        NEXT_LINE(line);
        mbarrier_wait_parity(bar, 1);  // phase 1: nobody arrives again
    });
    expect("wait on a phase nobody completes", e, {at_line(line), "for parity 1", "in phase 1 (parity 1; phase 0 complete)",
                                                   "32 of 32 arrivals still to come"});
    // transaction bytes that never balance (the control: the whole box completes)
    for (uint32_t landed : {64u, 128u}) {
        e = error_of({32, 64, 5}, [&] {
            uint64_t* bar = mpk::smem<uint64_t>(0, 1);
            if (threadIdx.x == 0) {
                mbarrier_init_shared_b64(bar, 1);
                mbarrier_arrive_expect_tx_shared_b64(bar, 128);
                mbarrier_complete_tx_shared_b64(bar, landed);
            }
            __syncthreads();
            NEXT_LINE(line);
            mbarrier_wait_parity(bar, 0);
        });
        if (landed != 128)
            expect("tx bytes never balance", e, {at_line(line), "64 transaction bytes outstanding (expect_tx 128, complete_tx 64)",
                                                 "the transaction bytes never balance"});
        else
            CHECK(e.empty(), "balanced bytes: %s", e.c_str());
    }
    // spinning threads beside threads at a __syncthreads they will never reach
    e = error_of({64, 64, 6}, [&] {
        uint64_t* bar = mpk::smem<uint64_t>(0, 1);
        if (threadIdx.x == 0) mbarrier_init_shared_b64(bar, 33);
        __syncthreads();
        if (threadIdx.x < 32) {
            mbarrier_arrive_shared_b64(bar);
            NEXT_LINE(line);
            mbarrier_wait_parity(bar, 0);
        }
        NEXT_LINE(line2);
        __syncthreads();
    });
    expect("spin beside a barrier", e, {at_line(line), "32 wait at __syncthreads " + at_line(line2)});
    // an uninitialised barrier: the shared-memory poison (the control is every passing case's init)
    e = error_of({32, 64, 7}, [&] {
        NEXT_LINE(line);
        mbarrier_arrive_shared_b64(mpk::smem<uint64_t>(0, 1));
    });
    expect("barrier never initialised", e, {"mbarrier.arrive.shared::cta.b64 at " + at_line(line),
                                            "no mbarrier.init'ed barrier"});
    // a plain store over a live barrier
    e = error_of({32, 64, 8}, [&] {
        uint64_t* bar = mpk::smem<uint64_t>(0, 1);
        if (threadIdx.x == 0) {
            NEXT_LINE(line2);
            mbarrier_init_shared_b64(bar, 32);
            *bar = 0;
        }
        __syncthreads();
        NEXT_LINE(line);
        mbarrier_arrive_shared_b64(bar);
    });
    expect("barrier overwritten", e, {at_line(line), "(mbarrier.init at " + at_line(line2) + ", count 32) was overwritten"});
    // init over a live barrier (the control, inval first, is in test_phases)
    e = error_of({32, 64, 9}, [&] {
        if (threadIdx.x) return;
        uint64_t* bar = mpk::smem<uint64_t>(0, 1);
        mbarrier_init_shared_b64(bar, 2);
        mbarrier_arrive_shared_b64(bar);
        NEXT_LINE(line);
        mbarrier_init_shared_b64(bar, 2);
    });
    expect("init of a live barrier", e, {"mbarrier.init.shared::cta.b64 at " + at_line(line), "is live",
                                         "1 of 2 arrivals still to come", "mbarrier.inval it"});
    // outside shared memory, misaligned, a count outside the ISA's range
    alignas(8) static uint64_t global_bar;
    e = error_of({32, 64, 10}, [&] {
        NEXT_LINE(line);
        mbarrier_init_shared_b64(&global_bar, 1);
    });
    expect("barrier in global memory", e, {at_line(line), "is not in shared memory"});
    e = error_of({32, 64, 11}, [&] {
        NEXT_LINE(line);
        mbarrier_init_shared_b64(reinterpret_cast<uint64_t*>(mpk::smem<char>(0, 64) + 4), 1);
    });
    expect("barrier misaligned", e, {at_line(line), "is not 8-byte aligned"});
    e = error_of({32, 64, 12}, [&] {
        NEXT_LINE(line);
        mbarrier_init_shared_b64(mpk::smem<uint64_t>(0, 1), 0);
    });
    expect("count 0", e, {at_line(line), "count 0 is outside [1, 1048575]"});
    // an arrival past the count: the arrivals are in, the phase waits for bytes, one more arrives
    e = error_of({32, 64, 13}, [&] {
        if (threadIdx.x) return;
        uint64_t* bar = mpk::smem<uint64_t>(0, 1);
        mbarrier_init_shared_b64(bar, 1);
        mbarrier_arrive_expect_tx_shared_b64(bar, 16);
        NEXT_LINE(line);
        mbarrier_arrive_shared_b64(bar);
    });
    expect("arrival past the count", e, {at_line(line), "one arrival more than the count", "0 of 1 arrivals"});
    // a wait on an invalidated barrier
    e = error_of({32, 64, 14}, [&] {
        if (threadIdx.x) return;
        uint64_t* bar = mpk::smem<uint64_t>(0, 1);
        mbarrier_init_shared_b64(bar, 1);
        mbarrier_inval_shared_b64(bar);
        NEXT_LINE(line);
        mbarrier_try_wait_parity_shared_b64(bar, 0);
    });
    expect("wait on an invalidated barrier", e, {"mbarrier.try_wait.parity.shared::cta.b64 at " + at_line(line),
                                                 "was invalidated"});
    report("mbarrier named errors", before);
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    test_phases();
    test_ring();
    test_tasks_on_one_block();
    test_errors();
    printf("%s: %d failure(s) of %d checks\n", g_failures ? "FAILED" : "All mbarrier tests passed", g_failures.load(),
           g_checks.load());
    return g_failures ? 1 : 0;
}
