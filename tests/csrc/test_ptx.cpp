// test_ptx.cpp: the tensor-core and asynchronous-copy instructions of csrc/runtime/ptx.h on the CPU
// emulation (csrc/runtime/simt_cpu_ptx.h, simt_cpu_async.h), against the PTX ISA:
//   - conformance: each mma form's fragments packed and unpacked by the ISA's own formulas, written
//     out below as the ISA states them (section "Matrix Fragments for mma.m16n8k*"), not taken from
//     the emulation; integer-valued inputs, so D must equal the exact product; ldmatrix .x1/.x2/.x4,
//     with and without .trans, against the ISA's ldmatrix fragment (row groupID, columns 2 t, 2 t + 1);
//     a negative control (rows g and g + 8 swapped) that the same comparison fails;
//   - cp.async: groups land between their commit and the wait that covers it (both orders seen over
//     seeds), wait_group N leaves at most the N newest groups in flight, empty groups count,
//     src-size zero-fills, the .ca sizes;
//   - every named error, with the call site's line.
// The GEMM assembled from these against torch.matmul, and the kernel-level negative controls, are
// tests/unit/test_ptx_gemm.py (tests/csrc/ptx_gemm.cpp).
// Run:  bash tests/csrc/run_simt_tests.sh ptx   (plain and ASan+UBSan builds)
#include "runtime/ptx.h"

#include <stdio.h>
#include <string.h>
#include <string>
#include <vector>

#include "simt_check.h"

using mpk::simt::Block;
using mpk::simt::Error;
using mpk::simt::run_block;

// Records the next line from inside a kernel: every thread stores it, so atomically.
#define NEXT_LINE(var) __atomic_store_n(&(var), __LINE__ + 1, __ATOMIC_RELAXED)
static std::string at_line(int line) { return "test_ptx.cpp:" + std::to_string(line); }
static uint64_t next(uint64_t& x) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
}

// ---- the PTX ISA's fragment formulas (groupID = %laneid >> 2, threadID_in_group = %laneid % 4)

struct RowCol { int row, col; };
enum class Form { K16, K8, K32 };

// Multiplicand A, element a_i of the lane's fragment.
static RowCol isa_a(Form f, int laneid, int i) {
    const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
    if (f == Form::K16) {  // .m16n8k16 .f16/.bf16
        const int row = ((0 <= i && i < 2) || (4 <= i && i < 6)) ? groupID : groupID + 8;
        const int col = i < 4 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8;
        return {row, col};
    }
    if (f == Form::K8) {   // .m16n8k8 .f16/.bf16
        const int row = (i == 0 || i == 1) ? groupID : groupID + 8;
        return {row, threadID_in_group * 2 + (i & 0x1)};
    }
    // .m16n8k32 .e4m3
    const int row = ((0 <= i && i < 4) || (8 <= i && i < 12)) ? groupID : groupID + 8;
    const int col = i < 8 ? (threadID_in_group * 4) + (i & 0x3) : (threadID_in_group * 4) + (i & 0x3) + 16;
    return {row, col};
}
// Multiplicand B (K x 8), element b_i: row is k, col is n.
static RowCol isa_b(Form f, int laneid, int i) {
    const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
    if (f == Form::K16) return {i < 2 ? (threadID_in_group * 2) + (i & 0x1) : (threadID_in_group * 2) + (i & 0x1) + 8, groupID};
    if (f == Form::K8) return {(threadID_in_group * 2) + i, groupID};
    return {i < 4 ? (threadID_in_group * 4) + (i & 0x3) : (threadID_in_group * 4) + (i & 0x3) + 16, groupID};
}
// Accumulators C and D (16 x 8 .f32), element c_i.
static RowCol isa_c(int laneid, int i) {
    const int groupID = laneid >> 2, threadID_in_group = laneid % 4;
    return {i < 2 ? groupID : groupID + 8, (threadID_in_group * 2) + (i & 0x1)};
}

static int k_of(Form f) { return f == Form::K16 ? 16 : f == Form::K8 ? 8 : 32; }
enum class Elem { Bf16, F16, E4m3 };
static uint32_t encode(Elem e, float v) {
    if (e == Elem::Bf16) return mpk::from_float<mpk::bf16_t>(v).bits;
    if (e == Elem::F16) return mpk::from_float<mpk::fp16_t>(v).bits;
    return mpk::from_float<mpk::fp8_e4m3_t>(v).bits;
}
// Puts element i of a fragment (per elements per register) into regs.
static void put(uint32_t* regs, int i, int per, uint32_t bits) {
    const int w = 32 / per;
    regs[i / per] |= bits << (w * (i % per));
}

// Runs one mma form on a 32-thread block with integer-valued A (16 x K), B (K x 8), C; returns how
// many of D's 128 elements differ from the exact A B + C. swap_rows: the control, A packed with
// rows g and g + 8 exchanged.
static int mma_mismatches(Form f, Elem e, uint64_t seed, bool swap_rows = false) {
    const int K = k_of(f), per = e == Elem::E4m3 ? 4 : 2;
    std::vector<float> A(16 * K), B(K * 8), C(16 * 8);
    uint64_t x = seed * 0x9E3779B97F4A7C15ull | 1;
    for (float& v : A) v = float(int(next(x) % 9) - 4);
    for (float& v : B) v = float(int(next(x) % 9) - 4);
    for (float& v : C) v = float(int(next(x) % 65) - 32);
    uint32_t a[32][4] = {}, b[32][2] = {};
    float c[32][4], d[32][4];
    for (int l = 0; l < 32; ++l) {
        for (int i = 0; i < K / 2; ++i) {
            RowCol rc = isa_a(f, l, i);
            if (swap_rows) rc.row ^= 8;
            put(a[l], i, per, encode(e, A[rc.row * K + rc.col]));
        }
        for (int i = 0; i < K / 4; ++i) {
            const RowCol rc = isa_b(f, l, i);
            put(b[l], i, per, encode(e, B[rc.row * 8 + rc.col]));
        }
        for (int i = 0; i < 4; ++i) {
            const RowCol rc = isa_c(l, i);
            c[l][i] = C[rc.row * 8 + rc.col];
        }
    }
    const std::string err = error_of({32, 0, seed}, [&] {
        const int l = int(threadIdx.x);
        using namespace mpk::ptx;
        if (f == Form::K16 && e == Elem::Bf16) {
            mma_m16n8k16_row_col_f32_bf16_bf16_f32(d[l], a[l], b[l], c[l]);
        } else if (f == Form::K16) {
            mma_m16n8k16_row_col_f32_f16_f16_f32(d[l], a[l], b[l], c[l]);
        } else if (f == Form::K32) {
            mma_m16n8k32_row_col_f32_e4m3_e4m3_f32(d[l], a[l], b[l], c[l]);
        } else {
            const uint32_t a2[2] = {a[l][0], a[l][1]}, b1[1] = {b[l][0]};
            if (e == Elem::Bf16) mma_m16n8k8_row_col_f32_bf16_bf16_f32(d[l], a2, b1, c[l]);
            else mma_m16n8k8_row_col_f32_f16_f16_f32(d[l], a2, b1, c[l]);
        }
    });
    CHECK(err.empty(), "mma block: %s", err.c_str());
    int bad = 0;
    for (int l = 0; l < 32; ++l)
        for (int i = 0; i < 4; ++i) {
            const RowCol rc = isa_c(l, i);
            float want = C[rc.row * 8 + rc.col];
            for (int k = 0; k < K; ++k) want += A[rc.row * K + k] * B[k * 8 + rc.col];
            bad += d[l][i] != want;
        }
    return bad;
}

static void test_mma_conformance() {
    const int before = g_failures;
    struct { Form f; Elem e; const char* name; } forms[] = {
        {Form::K16, Elem::Bf16, "m16n8k16 bf16"}, {Form::K16, Elem::F16, "m16n8k16 f16"},
        {Form::K8, Elem::Bf16, "m16n8k8 bf16"},   {Form::K8, Elem::F16, "m16n8k8 f16"},
        {Form::K32, Elem::E4m3, "m16n8k32 e4m3"}};
    for (const auto& form : forms)
        for (uint64_t seed = 1; seed <= 3; ++seed) {
            const int bad = mma_mismatches(form.f, form.e, seed);
            CHECK(bad == 0, "%s seed %d: %d of 128 elements of D differ from A B + C", form.name, int(seed), bad);
        }
    // the control: the same comparison fails when A's fragment rows g and g + 8 are exchanged
    for (const auto& form : forms) {
        const int bad = mma_mismatches(form.f, form.e, 7, true);
        CHECK(bad > 64, "%s, rows swapped: only %d of 128 elements differ", form.name, bad);
    }
    report("mma: the ISA's fragments, every form", before);
}

// ldmatrix: four 8x8 matrices of 16-bit values 1000 j + 10 r + c in shared memory, rows 48 bytes apart.
static void test_ldmatrix_conformance() {
    const int before = g_failures;
    constexpr int kPitch = 24;  // elements per row: 48 bytes, 16-byte aligned rows
    for (int n : {1, 2, 4})
        for (int trans = 0; trans < 2; ++trans)
            for (uint64_t seed = 1; seed <= 2; ++seed) {
                uint32_t r[32][4] = {};
                const std::string err = error_of({32, 32 * kPitch * 2, seed}, [&] {
                    uint16_t* m = mpk::smem<uint16_t>(0, 32 * kPitch);
                    const int l = int(threadIdx.x);
                    for (int c = 0; c < 8; ++c) m[l * kPitch + c] = uint16_t(1000 * (l / 8) + 10 * (l % 8) + c);
                    __syncwarp();
                    // lanes past the form's 8 n give an address the instruction must ignore
                    const void* row = l < 8 * n ? static_cast<const void*>(m + l * kPitch) : reinterpret_cast<const void*>(1);
                    using namespace mpk::ptx;
                    if (n == 1) {
                        uint32_t (&d)[1] = *reinterpret_cast<uint32_t (*)[1]>(r[l]);
                        trans ? ldmatrix_m8n8_x1_trans_shared_b16(d, row) : ldmatrix_m8n8_x1_shared_b16(d, row);
                    } else if (n == 2) {
                        uint32_t (&d)[2] = *reinterpret_cast<uint32_t (*)[2]>(r[l]);
                        trans ? ldmatrix_m8n8_x2_trans_shared_b16(d, row) : ldmatrix_m8n8_x2_shared_b16(d, row);
                    } else {
                        trans ? ldmatrix_m8n8_x4_trans_shared_b16(r[l], row) : ldmatrix_m8n8_x4_shared_b16(r[l], row);
                    }
                });
                CHECK(err.empty(), "ldmatrix x%d%s: %s", n, trans ? " trans" : "", err.c_str());
                int bad = 0;
                for (int l = 0; l < 32; ++l)
                    for (int j = 0; j < n; ++j)
                        for (int e = 0; e < 2; ++e) {
                            // the ISA: the thread holds row groupID, columns threadID_in_group * 2 + e of matrix j
                            // (.trans: of its transpose, so element [threadID_in_group * 2 + e][groupID])
                            const int groupID = l >> 2, tig = l % 4;
                            const int row = trans ? tig * 2 + e : groupID, col = trans ? groupID : tig * 2 + e;
                            const uint16_t want = uint16_t(1000 * j + 10 * row + col);
                            bad += uint16_t(r[l][j] >> (16 * e)) != want;
                        }
                CHECK(bad == 0, "ldmatrix x%d%s seed %d: %d elements differ from the ISA's fragment", n,
                      trans ? " trans" : "", int(seed), bad);
            }
    report("ldmatrix: x1 x2 x4, .trans", before);
}

// ---- cp.async

// Thread 0 copies 16 bytes, commits, reads them before waiting (what the bug does), then waits.
// Returns 1 when the early read saw the data, 0 when it saw the in-flight poison.
static int early_read(uint64_t seed) {
    alignas(16) static const uint8_t src[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    int saw = -1;
    const std::string err = error_of({32, 64, seed}, [&] {
        uint8_t* s = mpk::smem<uint8_t>(0, 64);
        if (threadIdx.x == 0) {
            mpk::ptx::cp_async_cg_shared_global<16>(s, src);
            mpk::ptx::cp_async_commit_group();
        }
        __syncwarp();  // a blocking point: a group may land here
        if (threadIdx.x == 0) {
            saw = s[0] == 1 && s[15] == 16 ? 1 : s[0] == 0xFF && s[15] == 0xFF ? 0 : 2;
            mpk::ptx::cp_async_wait_all();
            CHECK(s[0] == 1 && s[15] == 16, "after the wait the data is there");
        }
    });
    CHECK(err.empty(), "early_read seed %d: %s", int(seed), err.c_str());
    return saw;
}

static void test_async_landing() {
    const int before = g_failures;
    int seen[3] = {0, 0, 0};
    for (uint64_t seed = 0; seed < 48; ++seed) {
        const int s = early_read(seed);
        CHECK(s == 0 || s == 1, "seed %d: the early read saw neither the data nor the poison", int(seed));
        if (s >= 0 && s <= 2) ++seen[s];
        CHECK(early_read(seed) == s, "seed %d: the same seed, the same moment", int(seed));
    }
    CHECK(seen[0] > 0 && seen[1] > 0, "over 48 seeds a read before the wait saw the data %d times and the poison %d: "
          "both orders must occur", seen[1], seen[0]);
    report("cp.async: lands between commit and wait", before,
           std::to_string(seen[1]) + " seeds early, " + std::to_string(seen[0]) + " at the wait");
}

// Three groups of one 16-byte copy each; wait_group 1 must have landed groups 0 and 1; the newest
// may be in flight (seen so on some seed); an empty group counts as a group.
static void test_wait_group() {
    const int before = g_failures;
    alignas(16) static uint8_t src[64];
    for (int i = 0; i < 64; ++i) src[i] = uint8_t(i + 1);
    int newest_in_flight = 0;
    for (uint64_t seed = 0; seed < 24; ++seed) {
        const std::string err = error_of({32, 64, seed}, [&] {
            uint8_t* s = mpk::smem<uint8_t>(0, 64);
            if (threadIdx.x != 0) return;
            using namespace mpk::ptx;
            for (int g = 0; g < 3; ++g) {
                cp_async_cg_shared_global<16>(s + 16 * g, src + 16 * g);
                cp_async_commit_group();
            }
            cp_async_wait_group<1>();
            CHECK(s[0] == 1 && s[16] == 17, "seed %d: groups 0 and 1 landed at wait_group 1", int(seed));
            newest_in_flight += s[32] == 0xFF;
            cp_async_commit_group();  // an empty group: now two groups are newer than group 1
            cp_async_cg_shared_global<16>(s + 48, src + 48, 5);  // src-size 5: 11 bytes zero-filled
            cp_async_commit_group();
            cp_async_wait_group<1>();  // group 2 must have landed (groups 3, empty, and 4 are the newer)
            CHECK(s[32] == 33, "seed %d: group 2 landed once two newer groups were committed", int(seed));
            cp_async_wait_group<0>();
            CHECK(s[48] == 49 && s[52] == 53 && s[53] == 0 && s[63] == 0, "seed %d: src-size 5 zero-fills the rest",
                  int(seed));
        });
        CHECK(err.empty(), "wait_group seed %d: %s", int(seed), err.c_str());
    }
    CHECK(newest_in_flight > 0, "the newest group was never in flight after wait_group 1 (24 seeds)");
    // .ca: 4 and 8 bytes
    const std::string err = error_of({32, 64, 3}, [&] {
        uint8_t* s = mpk::smem<uint8_t>(0, 64);
        if (threadIdx.x == 0) {
            mpk::ptx::cp_async_ca_shared_global<4>(s, src);
            mpk::ptx::cp_async_ca_shared_global<8>(s + 8, src + 8);
            mpk::ptx::cp_async_wait_all();
            CHECK(s[3] == 4 && s[4] == 0xFF && s[8] == 9 && s[15] == 16, ".ca 4 and 8 bytes land where they should");
        }
    });
    CHECK(err.empty(), ".ca: %s", err.c_str());
    report("cp.async: wait_group N, empty groups, src-size", before);
}

// ---- the named errors

static void test_errors() {
    const int before = g_failures;
    alignas(16) static uint8_t global[64];
    std::string e;
    int line = 0;
    using namespace mpk::ptx;

    e = error_of({32, 256, 1}, [&] {
        uint32_t r[4];
        NEXT_LINE(line);
        ldmatrix_m8n8_x4_shared_b16(r, mpk::smem<char>(0, 256) + (threadIdx.x % 8) * 16 + 8);
    });
    expect("ldmatrix misaligned", e, {"ldmatrix.sync.aligned.m8n8.x4.shared.b16 at " + at_line(line), "is not 16-byte aligned"});

    e = error_of({32, 256, 1}, [&] {
        uint32_t r[1];
        NEXT_LINE(line);
        ldmatrix_m8n8_x1_shared_b16(r, global + (threadIdx.x % 4) * 16);
    });
    expect("ldmatrix from global", e, {at_line(line), "is not in shared memory"});

    e = error_of({32, 0, 1}, [&] {
        if (threadIdx.x == 31) return;  // one lane has exited
        float d[4], c[4] = {0, 0, 0, 0};
        const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
        NEXT_LINE(line);
        mma_m16n8k16_row_col_f32_bf16_bf16_f32(d, a, b, c);
    });
    expect("mma by a partial warp", e, {"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", at_line(line), "exited"});

    int line2 = 0;
    e = error_of({32, 0, 1}, [&] {
        float d[4], c[4] = {0, 0, 0, 0};
        const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
        if (threadIdx.x < 16) {
            NEXT_LINE(line);
            mma_m16n8k16_row_col_f32_f16_f16_f32(d, a, b, c);
        } else {
            NEXT_LINE(line2);
            mma_m16n8k16_row_col_f32_f16_f16_f32(d, a, b, c);
        }
    });
    expect("mma at two call sites", e, {"mismatched warp collectives", at_line(line), at_line(line2)});

    e = error_of({32, 64, 1}, [&] {
        NEXT_LINE(line);
        if (threadIdx.x == 0) cp_async_cg_shared_global<16>(global, global + 16);
    });
    expect("cp.async to global", e, {"cp.async.cg.shared.global at " + at_line(line), "threadIdx.x 0",
                                     "the destination", "is not in shared memory"});

    e = error_of({32, 64, 1}, [&] {
        char* s = mpk::smem<char>(0, 64);
        NEXT_LINE(line);
        if (threadIdx.x == 0) cp_async_cg_shared_global<16>(s, s + 16);
    });
    expect("cp.async from shared", e, {at_line(line), "is not in global memory (it is in shared memory)"});

    e = error_of({32, 64, 1}, [&] {
        alignas(16) char local[16] = {};
        NEXT_LINE(line);
        if (threadIdx.x == 0) cp_async_cg_shared_global<16>(mpk::smem<char>(0, 64), local);
    });
    expect("cp.async from the stack", e, {at_line(line), "its stack"});

    e = error_of({32, 64, 1}, [&] {
        NEXT_LINE(line);
        if (threadIdx.x == 0) cp_async_ca_shared_global<8>(mpk::smem<char>(0, 64) + 4, global);
    });
    expect("cp.async misaligned", e, {"cp.async.ca.shared.global at " + at_line(line), "is not aligned to the copy's 8 bytes"});

    e = error_of({32, 64, 1}, [&] {
        NEXT_LINE(line);
        if (threadIdx.x == 0) cp_async_cg_shared_global<16>(mpk::smem<char>(0, 64), global, 20);
    });
    expect("cp.async src-size", e, {at_line(line), "src-size 20 exceeds cp-size 16"});

    e = error_of({32, 64, 1}, [&] {
        char* s = mpk::smem<char>(0, 64);
        if (threadIdx.x != 0) return;
        NEXT_LINE(line);
        cp_async_cg_shared_global<16>(s, global);
        NEXT_LINE(line2);
        cp_async_ca_shared_global<4>(s + 8, global);
        cp_async_wait_all();
    });
    expect("cp.async onto bytes in flight", e, {at_line(line2), "overlaps bytes still in flight from",
                                                at_line(line), "(not committed)"});

    e = error_of({32, 64, 1}, [&] {
        char* s = mpk::smem<char>(0, 64);
        if (threadIdx.x != 0) return;
        NEXT_LINE(line);
        cp_async_cg_shared_global<16>(s, global);
        s[3] = 7;  // the thread writes a byte the copy will write
        cp_async_wait_all();
    });
    expect("a write to bytes in flight", e, {at_line(line), "was written while the copy was in flight", "byte 3"});

    e = error_of({32, 256, 1}, [&] {
        char* s = mpk::smem<char>(0, 256);
        if (threadIdx.x == 5) {
            NEXT_LINE(line);
            cp_async_cg_shared_global<16>(s + 48, global);
        }
        __syncwarp();
        uint32_t r[1];
        NEXT_LINE(line2);
        ldmatrix_m8n8_x1_shared_b16(r, s + (threadIdx.x % 8) * 16);
        if (threadIdx.x == 5) cp_async_wait_all();
    });
    expect("ldmatrix of bytes in flight", e, {"ldmatrix.sync.aligned.m8n8.x1.shared.b16 at " + at_line(line2),
                                              "row 3 of matrix 0", at_line(line), "threadIdx.x 5", "will still write"});

    e = error_of({32, 64, 1}, [&] {
        NEXT_LINE(line);
        if (threadIdx.x == 9) cp_async_cg_shared_global<16>(mpk::smem<char>(0, 64), global);
    });
    expect("a thread exits with a copy in flight", e, {"threadIdx.x 9", "exits with 1 cp.async copy in flight", at_line(line)});

    // the executor's worker block: a task that ends with a copy in flight (run_task on the block)
    mpk::TaskView v{};
    v.on_block = 1;
    e = error_of({32, 64, 1}, [&] {
        mpk::simt::run_task(v, [&] {
            NEXT_LINE(line);
            if (threadIdx.x == 2) cp_async_cg_shared_global<16>(mpk::smem<char>(0, 64), global);
        });
    });
    expect("a task ends with a copy in flight", e, {"threadIdx.x 2", "ends its task with 1 cp.async copy in flight",
                                                    at_line(line)});
    report("named errors, with the call site", before);
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    test_mma_conformance();
    test_ldmatrix_conformance();
    test_async_landing();
    test_wait_group();
    test_errors();
    printf("%s: %d failure(s) of %d checks\n", g_failures ? "FAILED" : "All ptx tests passed", g_failures.load(),
           g_checks.load());
    return g_failures ? 1 : 0;
}
