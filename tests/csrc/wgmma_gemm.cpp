// wgmma_gemm.cpp: a Hopper GEMM assembled from TMA, mbarrier and wgmma (runtime/ptx.h), run by the
// emulation, for tests/unit/test_wgmma_gemm.py (which compares it with torch.matmul in fp64 for every
// swizzle mode, and runs issue 33's negative controls). Built as a shared library; one C entry point.
//
//   D [M, N] fp32 = A [M, K] B [N, K]^T, 16-bit A and B (bf16 or fp16), A K-major; B K-major as given [N, K]
//   ("nk", a weight) or MN-major as given [K, N] ("kn", wgmma's imm-trans-b); K % 8 == 0 (and N for "kn").
// One block of 256 threads per 64 x 64 tile of D, warp-specialized: thread 0 produces (TMA into a ring of
// 3 stages, each guarded by a full and an empty mbarrier), warpgroup 1 (threads 128-255) consumes
// (wgmma m64n64k16 per 16 K, one group per stage, wgmma.wait_group 1: a stage is released once the next
// stage's group is issued and its own has retired). A stage holds 64 K of A and of B as slabs of
// swizzle-width columns (8 elements without a swizzle): slab j of an operand is one TMA box of 64 rows,
// at j * 64 * slab-bytes; the descriptors follow (K-major: SBO = 8 rows of the slab, LBO = the next
// slab when unswizzled, else unused; within a swizzled slab the start moves by 32 bytes per 16 K).
// "kn": B's stage is N-slabs instead, box j = 64 K rows of slab-width N columns; MN-major: SBO = 8 K rows
// of a slab (LBO the next slab) when swizzled, LBO = 8 K rows and SBO the next slab when not; the start
// moves by 16 K rows per 16 K.
//
// `bug` plants one of issue 33's defects (0: none):
//   1 the consumers wait on the wrong parity of the full barrier
//   2 expect_tx short by one box
//   3 the descriptors' swizzle differs from the tensor maps'
//   4 a consumer releases its stage before the wgmma reading it is waited for
//   6 the producer refills a stage without waiting on its empty barrier
//   7 ("kn") imm-trans-b forgotten: B's MN-major tile read as K-major
// (5, wgmma reading generic writes with no fence.proxy.async, needs a kernel that writes its operand:
// tests/csrc/test_wgmma.cpp's named errors.)
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <string>
#include "runtime/ptx.h"

namespace {

using mpk::ptx::TensorMap;
constexpr int kTile = 64, kBK = 64, kStages = 3, kThreads = 256;
constexpr int kOperandBytes = kTile * kBK * 2;                // one operand's stage: 8 KB
constexpr int kStageBytes = 2 * kOperandBytes;
constexpr size_t kSmemBytes = size_t(kStages) * kStageBytes + 64;  // then the barriers

struct Gemm {
    const TensorMap* ma;
    const TensorMap* mb;
    float* d;
    int m, n, k, f16, swizzle, kn, bug;
    int m0, n0;
};

int slab_elems(int swizzle) { return swizzle ? swizzle / 2 : 8; }

template <uint32_t W> uint64_t desc(const char* operand, int kk, bool mn_major) {
    constexpr int S = W ? int(W) / 2 : 8;
    if (mn_major) {  // 16 K rows per step: 2 groups of 8 rows
        if (!W) return mpk::ptx::wgmma_descriptor<0>(operand + 2 * kk * 128, 128, kBK * 16);
        return mpk::ptx::wgmma_descriptor<W>(operand + 2 * kk * 8 * int(W), kBK * int(W), 8 * W);
    }
    if (!W) return mpk::ptx::wgmma_descriptor<0>(operand + 2 * kk * kTile * 16, kTile * 16, 128);
    const char* start = operand + (16 * kk / S) * kTile * int(W) + (16 * kk % S) * 2;
    return mpk::ptx::wgmma_descriptor<W>(start, 16, 8 * W);
}
uint64_t desc_for(int swizzle, const char* operand, int kk, bool mn_major = false) {
    switch (swizzle) {
    case 32: return desc<32>(operand, kk, mn_major);
    case 64: return desc<64>(operand, kk, mn_major);
    case 128: return desc<128>(operand, kk, mn_major);
    default: return desc<0>(operand, kk, mn_major);
    }
}

void produce(const Gemm& g, char* smem, uint64_t* full, uint64_t* empty, int kt_count) {
    const int S = slab_elems(g.swizzle), slabs = kBK / S;
    for (int kt = 0; kt < kt_count; ++kt) {
        const int s = kt % kStages, round = kt / kStages;
        if (round > 0 && g.bug != 6) mpk::ptx::mbarrier_wait_parity(&empty[s], uint32_t((round - 1) & 1));
        const uint32_t box = uint32_t(kTile * S * 2);
        mpk::ptx::mbarrier_arrive_expect_tx_shared_b64(&full[s], uint32_t(kStageBytes) - (g.bug == 2 ? box : 0));
        char* a = smem + s * kStageBytes;
        char* b = a + kOperandBytes;
        for (int j = 0; j < slabs; ++j) {
            const int k0 = kt * kBK + j * S;
            mpk::ptx::cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(a + j * box, g.ma, k0, g.m0,
                                                                                                &full[s]);
            // "kn": slab j is N columns [n0 + j S, n0 + j S + S) of K rows [kt BK, kt BK + BK) (box S x BK, as big)
            mpk::ptx::cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(
                b + j * box, g.mb, g.kn ? g.n0 + j * S : k0, g.kn ? kt * kBK : g.n0, &full[s]);
        }
    }
    for (int kt = kt_count > kStages ? kt_count - kStages : 0; kt < kt_count; ++kt)  // its copies land before it exits
        mpk::ptx::mbarrier_wait_parity(&full[kt % kStages], uint32_t((kt / kStages) & 1));
}

template <class Mma> void consume(const Gemm& g, char* smem, uint64_t* full, uint64_t* empty, int kt_count, Mma mma) {
    float d[32];
    for (float& x : d) x = 0.0f;
    const int desc_swizzle = g.bug == 3 ? (g.swizzle == 128 ? 64 : 128) : g.swizzle;
    for (int kt = 0; kt < kt_count; ++kt) {
        const int s = kt % kStages;
        const uint32_t parity = uint32_t((kt / kStages) & 1);
        mpk::ptx::mbarrier_wait_parity(&full[s], g.bug == 1 ? parity ^ 1 : parity);
        const char* a = smem + s * kStageBytes;
        const char* b = a + kOperandBytes;
        mpk::ptx::wgmma_fence();
        for (int kk = 0; kk < kBK / 16; ++kk)
            mma(d, desc_for(desc_swizzle, a, kk), desc_for(desc_swizzle, b, kk, g.kn != 0), g.kn != 0 && g.bug != 7);
        mpk::ptx::wgmma_commit_group();
        if (g.bug == 4) mpk::ptx::mbarrier_arrive_shared_b64(&empty[s]);
        mpk::ptx::wgmma_wait_group<1>();
        if (kt > 0 && g.bug != 4) mpk::ptx::mbarrier_arrive_shared_b64(&empty[(kt - 1) % kStages]);
    }
    mpk::ptx::wgmma_wait_group<0>();
    const int t = int(threadIdx.x) - 128, w = t / 32, l = t % 32, grp = l >> 2, q = l & 3;
    for (int r = 0; r < 32; ++r) {
        const int row = g.m0 + 16 * w + grp + 8 * ((r % 4) >> 1), col = g.n0 + 8 * (r / 4) + 2 * q + (r & 1);
        if (row < g.m && col < g.n) g.d[int64_t(row) * g.n + col] = d[r];
    }
}

void tile_kernel(const Gemm& g) {
    char* smem = mpk::smem<char>(0, kSmemBytes);
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
    uint64_t* empty = full + kStages;
    const int kt_count = (g.k + kBK - 1) / kBK;
    if (threadIdx.x == 0)
        for (int s = 0; s < kStages; ++s) {
            mpk::ptx::mbarrier_init_shared_b64(&full[s], 1);
            mpk::ptx::mbarrier_init_shared_b64(&empty[s], 128);
        }
    __syncthreads();
    if (threadIdx.x == 0) produce(g, smem, full, empty, kt_count);
    if (threadIdx.x < 128) return;
    if (g.f16)
        consume(g, smem, full, empty, kt_count, [](float (&d)[32], uint64_t da, uint64_t db, bool kn) {
            if (kn) mpk::ptx::wgmma_mma_async_m64nNk16_f32_f16_f16<64, 1, 1, 0, 1>(d, da, db, 1);
            else mpk::ptx::wgmma_mma_async_m64nNk16_f32_f16_f16<64>(d, da, db, 1);
        });
    else
        consume(g, smem, full, empty, kt_count, [](float (&d)[32], uint64_t da, uint64_t db, bool kn) {
            if (kn) mpk::ptx::wgmma_mma_async_m64nNk16_f32_bf16_bf16<64, 1, 1, 0, 1>(d, da, db, 1);
            else mpk::ptx::wgmma_mma_async_m64nNk16_f32_bf16_bf16<64>(d, da, db, 1);
        });
}

}  // namespace

extern "C" int wgmma_gemm(const void* a, const void* b, float* d, int m, int n, int k, int f16, int swizzle, int kn,
                          int bug, uint64_t seed, char* err, int err_len) {
    if (m <= 0 || n <= 0 || k <= 0 || k % 8 || (kn && n % 8) ||
        (swizzle != 0 && swizzle != 32 && swizzle != 64 && swizzle != 128)) {
        snprintf(err, size_t(err_len), "wgmma_gemm: M %d, N %d, K %d, swizzle %d: K (and N for kn) must be multiples of 8, "
                 "the swizzle 0, 32, 64 or 128", m, n, k, swizzle);
        return 2;
    }
    const int S = slab_elems(swizzle);
    const uint32_t mode = swizzle == 128 ? 3 : swizzle == 64 ? 2 : swizzle == 32 ? 1 : 0;  // CUtensorMapSwizzle's numbering
    TensorMap ma, mb;
    const uint64_t da[2] = {uint64_t(k), uint64_t(m)}, st[2] = {2, uint64_t(k) * 2};
    const uint64_t db[2] = {uint64_t(kn ? n : k), uint64_t(kn ? k : n)}, sb[2] = {2, uint64_t(kn ? n : k) * 2};
    const uint32_t box[2] = {uint32_t(S), uint32_t(kTile)};  // ("kn": S columns of N by BK = 64 rows of K)
    std::string why = mpk::ptx::make_tensor_map(&ma, a, 2, 2, da, st, box, mode);
    if (why.empty()) why = mpk::ptx::make_tensor_map(&mb, b, 2, 2, db, sb, box, mode);
    if (!why.empty()) {
        snprintf(err, size_t(err_len), "wgmma_gemm: make_tensor_map: %s", why.c_str());
        return 2;
    }
    try {
        for (int m0 = 0; m0 < m; m0 += kTile)
            for (int n0 = 0; n0 < n; n0 += kTile) {
                const Gemm g{&ma, &mb, d, m, n, k, f16, swizzle, kn, bug, m0, n0};
                mpk::simt::run_block({kThreads, kSmemBytes, seed + uint64_t(m0) * 131 + uint64_t(n0)}, [&] { tile_kernel(g); });
            }
    } catch (const mpk::simt::Error& e) {
        snprintf(err, size_t(err_len), "%s", e.what());
        return 1;
    }
    return 0;
}
