// test_wgmma.cpp: Hopper's warpgroup MMA and stmatrix of csrc/runtime/ptx.h on the CPU emulation
// (csrc/runtime/simt_cpu_wgmma.h), against the PTX ISA's layouts written out here independently:
//   - conformance: A (64 x 16) and B (N x 16) placed in shared memory by the canonical layouts in the
//     ISA's own notation, a shape and strides per mode, ((8, m), (T, 2)) : ((row stride, SBO), (1, T or LBO))
//     K-major and ((T, w, m), (8, k)) : ((1, T, LBO), (w T, SBO)) MN-major, T = 8 elements per 16 bytes,
//     then Swizzle<B, 4, 3> on the byte address; D read back through the accumulator fragment written as
//     a thread-value layout ((4, 8, 4), (2, 2, N / 8)) : ((128, 1, 16), (64, 8, 512)) over m + 64 n; for
//     each swizzle, both majors of A and B, several N, A from registers, C added, negated A, f16;
//   - asynchrony: the accumulators hold the poison until the wait that covers their group; two wgmma on
//     the same registers chain without a wait; wait_group 1 retires the older group only;
//   - stmatrix against ldmatrix's layout, both ways;
//   - every named error, with the call site's line, beside its fixed kernel.
// Run:  bash tests/csrc/run_simt_tests.sh ptx   (plain, TSan and ASan+UBSan builds)
#include "runtime/ptx.h"

#include <math.h>
#include <atomic>
#include <stdio.h>
#include <string>
#include <vector>

#include "simt_check.h"

using namespace mpk::ptx;

#define NEXT_LINE(var) __atomic_store_n(&(var), __LINE__ + 1, __ATOMIC_RELAXED)
static std::string at_line(int line) { return "test_wgmma.cpp:" + std::to_string(line); }

static uint16_t bf16_of(float v) {  // exact for the small integers used here
    uint32_t b;
    memcpy(&b, &v, 4);
    return uint16_t(b >> 16);
}
static uint16_t f16_of(float v) { return mpk::from_float<mpk::fp16_t>(v).bits; }

// ---- the ISA's canonical layouts, as shapes and strides (elements of 2 bytes; SBO, LBO in bytes)

struct Canon {
    int swizzle;     // 0, 32, 64, 128 bytes
    bool mn_major;
    uint32_t lbo, sbo;
};
// The byte offset of element (mn, k) from the start address, before the swizzle.
static uint32_t canonical(const Canon& c, int mn, int k) {
    const int T = 8;  // elements per 16 bytes
    if (!c.mn_major) {
        // ((8, m), (T, 2)) : ((row, SBO), (1, T)) swizzled, row = swizzle bytes / 2 elements;
        // ((8, m), (T, 2)) : ((T, SBO), (1, LBO)) without
        const int r8 = mn % 8, m = mn / 8, kt = k % T, k2 = k / T;
        if (c.swizzle) return uint32_t(2 * (r8 * (c.swizzle / 2) + kt + k2 * T)) + uint32_t(m) * c.sbo;
        return uint32_t(2 * (r8 * T + kt)) + uint32_t(m) * c.sbo + uint32_t(k2) * c.lbo;
    }
    // ((T, w, m), (8, k)) : ((1, T, LBO), (w T, SBO)) swizzled, w = swizzle bytes / 16;
    // ((T, 1, m), (8, k)) : ((1, T, SBO), (T, LBO)) without
    const int w = c.swizzle ? c.swizzle / 16 : 1, t = mn % T, wi = (mn / T) % w, m = mn / (T * w), k8 = k % 8, kk = k / 8;
    if (c.swizzle) return uint32_t(2 * (t + T * wi + w * T * k8)) + uint32_t(m) * c.lbo + uint32_t(kk) * c.sbo;
    return uint32_t(2 * (t + T * k8)) + uint32_t(m) * c.sbo + uint32_t(kk) * c.lbo;
}
// CuTe's Swizzle<B, 4, 3> on a byte address: bits [7, 7 + B) XORed into bits [4, 4 + B).
static uintptr_t swizzle_443(uintptr_t a, int bytes) {
    const int B = bytes == 32 ? 1 : bytes == 64 ? 2 : bytes == 128 ? 3 : 0;
    const uintptr_t yyy = ((uintptr_t(1) << B) - 1) << 7;
    return a ^ ((a & yyy) >> 3);
}
static Canon canon_for(int swizzle, bool mn_major) {
    if (!mn_major) return swizzle ? Canon{swizzle, false, 16, uint32_t(16 * swizzle)} : Canon{0, false, 128, 256};  // (gaps)
    return swizzle ? Canon{swizzle, true, uint32_t(16 * swizzle), uint32_t(8 * swizzle)} : Canon{0, true, 128, 256};
}
static uint64_t desc_for(const Canon& c, const void* tile) {
    switch (c.swizzle) {
    case 32: return wgmma_descriptor<32>(tile, c.lbo, c.sbo);
    case 64: return wgmma_descriptor<64>(tile, c.lbo, c.sbo);
    case 128: return wgmma_descriptor<128>(tile, c.lbo, c.sbo);
    default: return wgmma_descriptor<0>(tile, c.lbo, c.sbo);
    }
}
// The accumulator fragment: (m, n) of thread t's value v, from the thread-value layout.
static void acc_coord(int t, int v, int* m, int* n) {
    const int idx = (t % 4) * 128 + ((t / 4) % 8) * 1 + (t / 32) * 16 + (v % 2) * 64 + ((v / 2) % 2) * 8 + (v / 4) * 512;
    *m = idx % 64;
    *n = idx / 64;
}

static float a_val(int m, int k) { return float((m * 7 + k * 3) % 11 - 5); }
static float b_val(int n, int k) { return float((n * 5 + k * 2) % 9 - 4); }
static float c_val(int m, int n) { return float((m + 3 * n) % 7 - 3); }

template <int N> struct Case {
    int swizzle;
    bool ta, tb, reg_a, with_c, neg_a, f16;
    int desc_swizzle = -1;  // the descriptors' swizzle, when it is not the one the tiles were placed with
};

// One wgmma (or, reg_a, A from registers) of 64 x N x 16 on a block of 128 threads; returns mismatches.
template <int N> static int run_case(const Case<N>& c, std::string* err) {
    std::vector<float> got(64 * N, -999.0f);
    const Canon ca = canon_for(c.swizzle, c.ta), cb = canon_for(c.swizzle, c.tb);
    const Canon da_c = c.desc_swizzle < 0 ? ca : canon_for(c.desc_swizzle, c.ta), db_c = c.desc_swizzle < 0 ? cb : canon_for(c.desc_swizzle, c.tb);
    *err = error_of({128, 98304, 7}, [&] {
        char* sm = mpk::smem<char>(0, 98304);
        char* A = sm;
        char* B = sm + 32768;
        const int t = threadIdx.x;
        auto put = [&](char* tile, const Canon& cn, int mn, int k, float v) {
            const uintptr_t at = swizzle_443(uintptr_t(tile) + canonical(cn, mn, k), cn.swizzle);
            const uint16_t h = c.f16 ? f16_of(v) : bf16_of(v);
            memcpy(reinterpret_cast<char*>(at), &h, 2);
        };
        if (t == 0) {
            for (int m = 0; m < 64; ++m)
                for (int k = 0; k < 16; ++k) put(A, ca, m, k, a_val(m, k));
            for (int n = 0; n < N; ++n)
                for (int k = 0; k < 16; ++k) put(B, cb, n, k, b_val(n, k));
        }
        __syncthreads();
        fence_proxy_async_shared_cta();
        float d[N / 2];
        for (int v = 0; v < N / 2; ++v) {
            int m, n;
            acc_coord(t, v, &m, &n);
            d[v] = c.with_c ? c_val(m, n) : 12345.0f;  // (ignored without scale-d)
        }
        uint32_t a[4];
        for (int v = 0; v < 8; ++v) {  // the A fragment: ((4, 8, 4), (2, 2, 2)) : ((128, 1, 16), (64, 8, 512)) over m + 64 k
            const int idx = (t % 4) * 128 + ((t / 4) % 8) + (t / 32) * 16 + (v % 2) * 64 + ((v / 2) % 2) * 8 + (v / 4) * 512;
            const float x = a_val(idx % 64, idx / 64);
            const uint32_t h = c.f16 ? f16_of(x) : bf16_of(x);
            a[v / 2] = v % 2 ? (a[v / 2] & 0xFFFFu) | (h << 16) : h;
        }
        const uint64_t da = desc_for(da_c, A), db = desc_for(db_c, B);
        const int sd = c.with_c ? 1 : 0;
        wgmma_fence();
        if (c.f16) {
            if (c.reg_a && c.tb) wgmma_mma_async_m64nNk16_f32_f16_f16<N, 1, 1, 1>(d, a, db, sd);
            else if (c.reg_a) wgmma_mma_async_m64nNk16_f32_f16_f16<N, 1, 1, 0>(d, a, db, sd);
            else if (c.tb) wgmma_mma_async_m64nNk16_f32_f16_f16<N, 1, 1, 0, 1>(d, da, db, sd);
            else wgmma_mma_async_m64nNk16_f32_f16_f16<N>(d, da, db, sd);
        } else if (c.reg_a) {
            if (c.tb) wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, 1, 1, 1>(d, a, db, sd);
            else wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, 1, 1, 0>(d, a, db, sd);
        } else if (c.neg_a) {
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, -1, 1, 0, 0>(d, da, db, sd);
        } else if (c.ta && c.tb) {
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, 1, 1, 1, 1>(d, da, db, sd);
        } else if (c.ta) {
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, 1, 1, 1, 0>(d, da, db, sd);
        } else if (c.tb) {
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, 1, 1, 0, 1>(d, da, db, sd);
        } else {
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<N>(d, da, db, sd);
        }
        wgmma_commit_group();
        wgmma_wait_group<0>();
        for (int v = 0; v < N / 2; ++v) {
            int m, n;
            acc_coord(t, v, &m, &n);
            got[size_t(m) * N + n] = d[v];
        }
    });
    int bad = 0;
    for (int m = 0; m < 64; ++m)
        for (int n = 0; n < N; ++n) {
            double r = c.with_c ? c_val(m, n) : 0.0;
            for (int k = 0; k < 16; ++k) r += (c.neg_a ? -1.0 : 1.0) * a_val(m, k) * b_val(n, k);
            bad += got[size_t(m) * N + n] != float(r);
        }
    return bad;
}

template <int N> static void layouts_for(int* cases) {
    for (int sw : {0, 32, 64, 128})
        for (int ta = 0; ta < 2; ++ta)
            for (int tb = 0; tb < 2; ++tb) {
                std::string err;
                const int bad = run_case<N>({sw, ta != 0, tb != 0, false, (sw + ta + tb) % 2 == 0, false, false}, &err);
                CHECK(err.empty() && bad == 0, "N %d swizzle %d trans-a %d trans-b %d: %d of %d wrong, error \"%s\"", N, sw, ta, tb,
                      bad, 64 * N, err.c_str());
                ++*cases;
            }
    const Case<N> more[] = {{128, false, false, true, true, false, false},   // A from registers
                            {64, false, true, true, false, false, false},    // ... B MN-major
                            {32, false, false, false, true, true, false},    // negated A
                            {128, false, false, false, true, false, true},   // f16
                            {0, false, true, true, false, false, true}};     // f16, A from registers
    for (const Case<N>& c : more) {
        std::string err;
        const int bad = run_case<N>(c, &err);
        CHECK(err.empty() && bad == 0, "N %d swizzle %d reg-a %d neg-a %d f16 %d: %d wrong, error \"%s\"", N, c.swizzle, c.reg_a,
              c.neg_a, c.f16, bad, err.c_str());
        ++*cases;
    }
}

static void test_layouts() {
    const int before = g_failures;
    int cases = 0;
    layouts_for<8>(&cases);
    layouts_for<24>(&cases);
    layouts_for<64>(&cases);
    layouts_for<136>(&cases);
    layouts_for<256>(&cases);
    // control: tiles placed with the 128-byte swizzle, read through 64-byte descriptors
    std::string err;
    const int wrong = run_case<64>({128, false, false, false, false, false, false, 64}, &err);
    CHECK(!err.empty() || wrong > 0, "control: a descriptor swizzle unlike the tile's must misread; %d wrong", wrong);
    printf("  control: 128-byte tiles through 64-byte descriptors: %d of %d elements of D wrong; %s\n", wrong, 64 * 64,
           err.empty() ? "no error" : err.c_str());
    report("wgmma layouts (4 swizzles x majors x N)", before, std::to_string(cases) + " cases, each all 64 x N exact");
}

// ---- asynchrony: poison until the wait, chaining, wait_group 1

static void test_async() {
    const int before = g_failures;
    bool poisoned = false, older_only = false;  // (thread 0's)
    std::atomic<bool> chained_ok{true};
    const std::string e = error_of({128, 8192, 3}, [&] {
        char* sm = mpk::smem<char>(0, 8192);
        const int t = threadIdx.x;
        const Canon cn = canon_for(0, false);
        if (t == 0)
            for (int m = 0; m < 64; ++m)
                for (int k = 0; k < 32; ++k) {  // A: two K slices at 0 and 2048; B (8 x 32) at 4096 and 6144
                    const uint16_t a = bf16_of(a_val(m, k)), b = bf16_of(b_val(m % 8, k));
                    memcpy(sm + 2048 * (k / 16) + canonical(cn, m, k % 16), &a, 2);
                    if (m < 8) memcpy(sm + 4096 + 2048 * (k / 16) + canonical(cn, m, k % 16), &b, 2);
                }
        __syncthreads();
        fence_proxy_async_shared_cta();
        float d[4] = {0, 0, 0, 0}, e1[4] = {0, 0, 0, 0};
        wgmma_fence();
        wgmma_mma_async_m64nNk16_f32_bf16_bf16<8>(d, wgmma_descriptor<0>(sm, 128, 256), wgmma_descriptor<0>(sm + 4096, 128, 256), 0);
        wgmma_mma_async_m64nNk16_f32_bf16_bf16<8>(d, wgmma_descriptor<0>(sm + 2048, 128, 256),
                                                  wgmma_descriptor<0>(sm + 6144, 128, 256), 1);  // chained: D += A1 B1
        wgmma_commit_group();
        wgmma_mma_async_m64nNk16_f32_bf16_bf16<8>(e1, wgmma_descriptor<0>(sm, 128, 256), wgmma_descriptor<0>(sm + 4096, 128, 256), 0);
        wgmma_commit_group();
        uint32_t bits;
        memcpy(&bits, &d[0], 4);
        if (t == 0) poisoned = bits == 0xFFFFFFFFu;
        wgmma_wait_group<1>();  // the first group (both chained ops) lands, e1 is still in flight
        uint32_t ebits;
        memcpy(&ebits, &e1[0], 4);
        if (t == 0) older_only = ebits == 0xFFFFFFFFu;
        for (int i = 0; i < 4; ++i) {
            int m, n;
            acc_coord(t, i, &m, &n);
            double r = 0;
            for (int k = 0; k < 32; ++k) r += a_val(m, k) * b_val(n, k);
            if (d[i] != float(r)) chained_ok = false;
        }
        wgmma_wait_group<0>();
    });
    CHECK(e.empty(), "async: %s", e.c_str());
    CHECK(poisoned, "accumulators before the wait must hold the in-flight poison");
    CHECK(chained_ok, "two wgmma chained on one accumulator must add both K slices");
    CHECK(older_only, "wait_group 1 must leave the newer group in flight");
    report("wgmma async: poison, chain, wait_group 1", before);
}

// ---- stmatrix: ldmatrix's layout the other way (x4 and x4.trans round trip, and the layout itself)

static void test_stmatrix() {
    const int before = g_failures;
    for (int trans = 0; trans < 2; ++trans) {
        std::vector<uint16_t> tile(4 * 64, 0);
        std::atomic<int> misread{0};
        const std::string e = error_of({32, 4096, 5}, [&] {
            uint16_t* sm = mpk::smem<uint16_t>(0, 2048);
            const int l = threadIdx.x, g = l >> 2, q = l & 3;
            uint32_t r[4];
            for (int j = 0; j < 4; ++j) r[j] = uint32_t(1000 * j + 10 * g + 2 * q) | uint32_t(1000 * j + 10 * g + 2 * q + 1) << 16;
            void* row = sm + 64 * (l / 8) + 8 * (l % 8);  // matrix l / 8, row l % 8: 16 bytes
            if (trans) stmatrix_m8n8_x4_trans_shared_b16(row, r);
            else stmatrix_m8n8_x4_shared_b16(row, r);
            __syncwarp();
            uint32_t back[4];
            if (trans) ldmatrix_m8n8_x4_trans_shared_b16(back, row);
            else ldmatrix_m8n8_x4_shared_b16(back, row);
            for (int j = 0; j < 4; ++j) misread += back[j] != r[j];
            if (l == 0) memcpy(tile.data(), sm, tile.size() * 2);
        });
        CHECK(e.empty() && misread == 0, "stmatrix trans %d: error \"%s\", %d registers misread", trans, e.c_str(), misread.load());
        // the ISA's layout: register j of lane 4 g + q holds row g, columns 2q, 2q + 1 of matrix j (.trans: its transpose)
        for (int j = 0; j < 4; ++j)
            for (int r = 0; r < 8; ++r)
                for (int c = 0; c < 8; ++c) {
                    const int g = trans ? c : r, col = trans ? r : c;
                    CHECK(tile[size_t(64 * j + 8 * r + c)] == uint16_t(1000 * j + 10 * g + col), "stmatrix trans %d matrix %d (%d, %d)",
                          trans, j, r, c);
                }
    }
    report("stmatrix x4, x4.trans", before);
}

// ---- named errors: one kernel, each bug planted alone (0: none)

static volatile int g_line = 0;  // the line of the planted bug's instruction, for the message

static std::string planted(int bug, int threads = 128) {
    return error_of({threads, 16384, uint64_t(11 + bug)}, [bug] {
        char* sm = mpk::smem<char>(0, 16384);
        const int t = threadIdx.x, warp = t / 32;
        const Canon cn = canon_for(0, false);
        if (t == 0 && bug != 3)
            for (int m = 0; m < 64; ++m)
                for (int k = 0; k < 16; ++k) {
                    const uint16_t a = bf16_of(a_val(m, k)), b = bf16_of(b_val(m % 8, k));
                    memcpy(sm + canonical(cn, m, k), &a, 2);
                    if (m < 8) memcpy(sm + 4096 + canonical(cn, m, k), &b, 2);
                }
        __syncthreads();
        if (bug != 2) fence_proxy_async_shared_cta();
        uint64_t da = wgmma_descriptor<0>(sm, 128, 256), db = wgmma_descriptor<0>(sm + 4096, 128, 256);
        if (bug == 4) db = wgmma_descriptor<0>(sm + 16384 - 128, 128, 256);            // B past the end
        if (bug == 5) db = wgmma_descriptor<128>(sm + 4096 + 128, 16, 1024);           // row 1 of a 128-byte pattern
        if (bug == 6) db |= uint64_t(3) << 49;                                        // a base offset
        if (bug == 7 && warp == 1) da = wgmma_descriptor<0>(sm + 128, 128, 256);       // warp 1 elsewhere
        if (bug == 8 && t == 37) db = wgmma_descriptor<0>(sm + 4096 + 128, 128, 256);  // one lane elsewhere
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        float (&d)[4] = *reinterpret_cast<float(*)[4]>(acc);
        if (bug == 17 && warp == 3) return;  // warp 3 leaves before the warpgroup's wgmma
        if (bug != 1) wgmma_fence();
        if (bug == 9 && warp == 2) {  // warp 2 skips the instruction
        } else {
            if (bug >= 1 && bug <= 9) NEXT_LINE(g_line);
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<8>(d, da, db, 0);
        }
        if (bug == 10) {
            __syncthreads();  // every warp has issued its wgmma
            if (t == 0) sm[4096 + 2] = 7;  // a thread writes B while the wgmma may read it
        }
        if (bug == 11 && t == 5) d[2] = 1.0f;  // an accumulator written in flight
        if (bug == 16 && t == 0) sm[4096 + 6] = 1;  // a generic write after the fence, before a second wgmma
        if (bug == 16) {
            wgmma_commit_group();
            wgmma_wait_group<0>();
            wgmma_fence();
            NEXT_LINE(g_line);
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<8>(d, da, db, 1);
        }
        if (bug == 12) {  // a second wgmma on overlapping registers of another shape
            NEXT_LINE(g_line);
            wgmma_mma_async_m64nNk16_f32_bf16_bf16<16>(acc, da, wgmma_descriptor<0>(sm + 8192, 128, 256), 1);
        }
        if (bug == 13 && warp == 0) {  // stmatrix onto B's first core matrix while the wgmma reads it
            const uint32_t r[1] = {0};
            NEXT_LINE(g_line);
            stmatrix_m8n8_x1_shared_b16(sm + 4096 + 16 * (t % 8), r);
        }
        if (bug == 14) return;                      // the task ends with the wgmma uncommitted, in flight
        wgmma_commit_group();
        if (bug == 15) return;                      // ... committed, never waited for
        wgmma_wait_group<0>();
    });
}

// B through TMA (two 8 x 8 boxes: the two core matrices of a K-major, unswizzled B) on an mbarrier; warps 0-3
// consume, thread 128 (warp 4) produces. bug 20: the consumers wait on parity 1 of the fresh barrier (it
// passes at once); 21: they issue the wgmma before any wait; 22: the producer refills B while the wgmma reads it.
static std::string tma_fed(int bug, uint64_t seed, bool* right) {
    static uint16_t b_global[8 * 16];
    for (int n = 0; n < 8; ++n)
        for (int k = 0; k < 16; ++k) b_global[16 * n + k] = bf16_of(b_val(n, k));
    TensorMap map;
    const uint64_t dims[2] = {16, 8}, strides[2] = {2, 32};
    const uint32_t box[2] = {8, 8};
    const std::string why = make_tensor_map(&map, b_global, 2, 2, dims, strides, box, 0);
    CHECK(why.empty(), "tma_fed map: %s", why.c_str());
    std::atomic<bool> ok{true};
    const std::string e = error_of({160, 16384, seed}, [&] {
        char* sm = mpk::smem<char>(0, 16384);
        uint64_t* full = reinterpret_cast<uint64_t*>(sm + 8192);
        const int t = threadIdx.x;
        const Canon cn = canon_for(0, false);
        if (t == 0) {
            mbarrier_init_shared_b64(full, 1);
            for (int m = 0; m < 64; ++m)
                for (int k = 0; k < 16; ++k) {
                    const uint16_t a = bf16_of(a_val(m, k));
                    memcpy(sm + canonical(cn, m, k), &a, 2);
                }
        }
        __syncthreads();
        fence_proxy_async_shared_cta();
        if (t == 128) {
            __nanosleep(100);
            mbarrier_arrive_expect_tx_shared_b64(full, 256);
            cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(sm + 4096, &map, 0, 0, full);
            cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(sm + 4096 + 128, &map, 8, 0, full);
            mbarrier_wait_parity(full, 0);  // (its copies land before it exits)
        }
        if (t >= 128) return;
        if (bug != 21) mbarrier_wait_parity(full, bug == 20 ? 1 : 0);
        float d[4] = {0, 0, 0, 0};
        wgmma_fence();
        if (bug >= 20) NEXT_LINE(g_line);
        wgmma_mma_async_m64nNk16_f32_bf16_bf16<8>(d, wgmma_descriptor<0>(sm, 128, 256), wgmma_descriptor<0>(sm + 4096, 128, 256), 0);
        wgmma_commit_group();
        if (bug == 22 && t == 0) {
            mbarrier_arrive_expect_tx_shared_b64(full, 128);
            NEXT_LINE(g_line);
            cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(sm + 4096, &map, 0, 0, full);
        }
        wgmma_wait_group<0>();
        if (bug == 21) mbarrier_wait_parity(full, 0);
        for (int i = 0; i < 4; ++i) {
            int m, n;
            acc_coord(t, i, &m, &n);
            double r = 0;
            for (int k = 0; k < 16; ++k) r += a_val(m, k) * b_val(n, k);
            if (d[i] != float(r)) ok = false;
        }
    });
    *right = ok.load();
    return e;
}

static void test_named() {
    const int before = g_failures;
    CHECK(planted(0).empty(), "the fixed kernel: \"%s\"", planted(0).c_str());
    struct Want { int bug; const char* what; std::vector<std::string> parts; };
    const Want wants[] = {
        {1, "no wgmma.fence", {"no wgmma.fence since the task began", "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 at "}},
        {2, "generic writes not fenced", {"written through the generic proxy after the last fence.proxy.async"}},
        {3, "operands nothing wrote", {"that nothing wrote in this task", "wrong phase parity"}},
        {4, "descriptor past shared memory", {"outside the block's 16384 bytes of dynamic shared memory"}},
        {5, "misaligned for its swizzle", {"misaligned for its 128-byte swizzle", "align the tile to 1024 bytes"}},
        {6, "a base offset", {"sets the matrix base offset (3)"}},
        {7, "warps on other operands", {"with other operands", "the four warps of a warpgroup execute the same wgmma"}},
        {8, "lanes on other operands", {"lane 5 gives B's matrix descriptor than lane 0"}},
        {9, "a warp skips it", {"is wgmma instruction 2 of warp 2 in this task, and warp 0's was wgmma.mma_async"}},
        {10, "operand written in flight", {"read by wgmma.mma_async", "was written before the wgmma.wait_group that covers it"}},
        {11, "accumulator written in flight", {"accumulator register 2 of lane 5", "was written while the wgmma was in flight"}},
        {12, "chained on another shape", {"overlap those of wgmma.mma_async.sync.aligned.m64n8k16", "another shape"}},
        {13, "stmatrix onto its operand", {"stmatrix.sync.aligned.m8n8.x1.shared.b16 at ", "still reads (before its wgmma.wait_group)"}},
        {14, "ends uncommitted", {"exits with 1 wgmma.mma_async in flight", "not committed"}},
        {15, "ends unwaited", {"exits with 1 wgmma.mma_async in flight", "wgmma group 0"}},
        {16, "written after the fence", {"written through the generic proxy after the last fence.proxy.async"}},
        {17, "a warp leaves the warpgroup", {"wgmma reached by a partial warpgroup", "warp 3 0", "the first it missed: wgmma.fence"}},
    };
    for (const Want& w : wants) {
        g_line = 0;
        const std::string err = planted(w.bug);
        std::vector<std::string> parts = w.parts;
        if (g_line) parts.push_back(at_line(g_line));
        bool ok = !err.empty();
        for (const std::string& p : parts) ok = ok && has(err, p);
        CHECK(ok, "%s: got \"%s\"", w.what, err.c_str());
        printf("  %-34s %s\n", w.what, err.c_str());
    }
    expect("a partial warpgroup (96 threads)", planted(0, 96), {"is partial, the block has 96 threads"});
    // fed by TMA: the fixed kernel over seeds; each bug named on some seed, and never silently wrong
    for (uint64_t seed = 1; seed <= 6; ++seed) {
        bool right = false;
        const std::string e = tma_fed(0, seed, &right);
        CHECK(e.empty() && right, "tma_fed fixed, seed %llu: \"%s\" right %d", static_cast<unsigned long long>(seed), e.c_str(),
              int(right));
    }
    struct Fed { int bug; const char* what; std::vector<std::string> any; };
    const Fed feds[] = {
        {20, "wait on the wrong parity", {"that nothing wrote in this task", "will still write: its mbarrier has not been waited on"}},
        {21, "wgmma before the wait", {"that nothing wrote in this task", "will still write: its mbarrier has not been waited on"}},
        {22, "a stage refilled in use", {"is read by wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16"}},
    };
    for (const Fed& f : feds) {
        int named = 0;
        std::string shown;
        for (uint64_t seed = 1; seed <= 6; ++seed) {
            g_line = 0;
            bool right = false;
            const std::string e = tma_fed(f.bug, seed, &right);
            bool hit = false;
            for (const std::string& p : f.any) hit = hit || has(e, p);
            hit = hit && has(e, at_line(g_line));
            CHECK(hit || (e.empty() && right), "%s, seed %llu: neither named nor right: \"%s\"", f.what,
                  static_cast<unsigned long long>(seed), e.c_str());
            named += hit;
            if (hit && shown.empty()) shown = e;
        }
        CHECK(named > 0, "%s: named on no seed", f.what);
        printf("  %-34s named on %d of 6 seeds: %s\n", f.what, named, shown.c_str());
    }
    report("wgmma named errors, with the call site", before);
}

int main() {
    test_layouts();
    test_async();
    test_stmatrix();
    test_named();
    printf("%s: %d failure(s) of %d checks\n", g_failures ? "FAILED" : "All wgmma tests passed", g_failures.load(),
           g_checks.load());
    return g_failures ? 1 : 0;
}
