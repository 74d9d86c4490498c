// ptx_gemm.cpp: a GEMM assembled from the tensor-core instructions of runtime/ptx.h, run by the
// emulation, for tests/unit/test_ptx_gemm.py (which compares it with torch.matmul in fp64, and runs
// its negative controls). Built as a shared library; one C entry point.
//
//   D [M, N] fp32 = A [M, K] (row-major) x B, B given as [N, K] ("nk": a weight, y = x W^T) or as
//   [K, N] ("kn": loaded with ldmatrix .trans); 16-bit A and B (bf16 or fp16); K % 8 == 0.
// One block of 128 threads per 32 x 32 tile of D; warp w owns rows 16 (w / 2) and columns 16 (w % 2)
// of it: per k16 step one ldmatrix.x4 of A, one ldmatrix.x4 (.trans for "kn") of B, two
// mma.m16n8k16. A and B go through shared memory in 32-wide K slices, two stages, by cp.async.cg
// (16 bytes per thread and operand per slice; rows past M or N and K past its end are zero-filled
// with src-size 0). Row pitch 80 bytes (32 elements + 16 bytes of pad: rows stay 16-byte aligned).
//
// `bug` plants one of the defects the emulation must catch (0: none):
//   1 a fragment index off by one: A's registers 0 and 1 swapped (rows g and g + 8)
//   2 .trans forgotten for "kn"
//   3 no cp.async.wait_group at all
//   4 every wait one group short: wait_group 2 where 1 is needed, 1 where 0 is
//   5 an ldmatrix row address 8 bytes off 16-byte alignment
//   6 the mma inside a branch only half of the warp takes
//   7 one more slice prefetched past the end and never waited for (the task ends with it in flight)
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "runtime/ptx.h"

namespace {

constexpr int kTile = 32, kThreads = 128, kPitch = 40;  // kPitch: elements per shared row (80 bytes)
constexpr int kStageElems = 2 * kTile * kPitch;          // A's slice, then B's
constexpr size_t kSmemBytes = 2 * kStageElems * sizeof(uint16_t);

struct Gemm {
    const uint16_t* a;
    const uint16_t* b;
    float* d;
    int m, n, k, kn, f16, bug;
    int m0, n0;  // the tile
};

// Slice `s` (K columns [32 s, 32 s + 32)) of A's and B's tile into stage `stage`: one 16-byte copy
// per thread and operand.
void load_slice(const Gemm& g, uint16_t* smem, int stage, int s) {
    const int tid = threadIdx.x, r = tid / 4, c = (tid % 4) * 8;  // row and column of this thread's chunk
    uint16_t* sa = smem + stage * kStageElems;
    uint16_t* sb = sa + kTile * kPitch;
    const int k0 = s * kTile;
    {   // A: row m0 + r, K columns k0 + c .. + 8
        const int m = g.m0 + r, k = k0 + c;
        const bool in = m < g.m && k < g.k;
        mpk::ptx::cp_async_cg_shared_global<16>(sa + r * kPitch + c, in ? g.a + int64_t(m) * g.k + k : g.a, in ? 16 : 0);
    }
    if (!g.kn) {  // B as [N, K]: row n0 + r
        const int n = g.n0 + r, k = k0 + c;
        const bool in = n < g.n && k < g.k;
        mpk::ptx::cp_async_cg_shared_global<16>(sb + r * kPitch + c, in ? g.b + int64_t(n) * g.k + k : g.b, in ? 16 : 0);
    } else {      // B as [K, N]: row k0 + r, N columns n0 + c .. + 8 (N % 8 == 0)
        const int k = k0 + r, n = g.n0 + c;
        const bool in = k < g.k && n < g.n;
        mpk::ptx::cp_async_cg_shared_global<16>(sb + r * kPitch + c, in ? g.b + int64_t(k) * g.n + n : g.b, in ? 16 : 0);
    }
}

void mma(const Gemm& g, float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    if (g.f16) mpk::ptx::mma_m16n8k16_row_col_f32_f16_f16_f32(acc, a, b, acc);
    else mpk::ptx::mma_m16n8k16_row_col_f32_bf16_bf16_f32(acc, a, b, acc);
}

void tile_kernel(const Gemm& g) {
    uint16_t* smem = mpk::smem<uint16_t>(0, kSmemBytes / 2);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = 16 * (warp / 2), wn = 16 * (warp % 2);
    const int slices = (g.k + kTile - 1) / kTile;
    float acc[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};

    load_slice(g, smem, 0, 0);
    mpk::ptx::cp_async_commit_group();
    for (int s = 0; s < slices; ++s) {
        if (s + 1 < slices || g.bug == 7) {
            load_slice(g, smem, (s + 1) % 2, s + 1);  // (bug 7: a slice past the end, all zero-filled)
            mpk::ptx::cp_async_commit_group();
            if (g.bug == 4) mpk::ptx::cp_async_wait_group<2>();
            else if (g.bug != 3) mpk::ptx::cp_async_wait_group<1>();
        } else if (g.bug == 4) {
            mpk::ptx::cp_async_wait_group<1>();
        } else if (g.bug != 3) {
            mpk::ptx::cp_async_wait_group<0>();
        }
        __syncthreads();
        const uint16_t* sa = smem + (s % 2) * kStageElems;
        const uint16_t* sb = sa + kTile * kPitch;
        for (int kk = 0; kk < kTile; kk += 16) {
            uint32_t a[4], b[4];
            // A's four 8x8 matrices: rows 0-7 / 8-15 of the warp's 16, K 0-7 / 8-15 (registers a0..a3)
            const int ar = wm + (lane & 7) + 8 * ((lane >> 3) & 1), ac = kk + 8 * (lane >> 4);
            const char* arow = reinterpret_cast<const char*>(sa + ar * kPitch + ac) + (g.bug == 5 ? 8 : 0);
            mpk::ptx::ldmatrix_m8n8_x4_shared_b16(a, arow);
            if (g.bug == 1) {
                const uint32_t t = a[0];
                a[0] = a[1];
                a[1] = t;
            }
            if (!g.kn) {  // [N, K]: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
                const int br = wn + (lane & 7) + 8 * (lane >> 4), bc = kk + 8 * ((lane >> 3) & 1);
                mpk::ptx::ldmatrix_m8n8_x4_shared_b16(b, sb + br * kPitch + bc);
            } else {      // [K, N]: the same four, transposed on the way (rows are k)
                const int br = kk + (lane & 7) + 8 * ((lane >> 3) & 1), bc = wn + 8 * (lane >> 4);
                if (g.bug == 2) mpk::ptx::ldmatrix_m8n8_x4_shared_b16(b, sb + br * kPitch + bc);
                else mpk::ptx::ldmatrix_m8n8_x4_trans_shared_b16(b, sb + br * kPitch + bc);
            }
            for (int nb = 0; nb < 2; ++nb) {
                const uint32_t bn[2] = {b[2 * nb], b[2 * nb + 1]};
                if (g.bug == 6) {
                    if (lane < 16) mma(g, acc[nb], a, bn);
                } else {
                    mma(g, acc[nb], a, bn);
                }
            }
        }
        __syncthreads();  // every warp has read the stage before the next slice overwrites it
    }
    const int gr = lane >> 2, tc = 2 * (lane & 3);
    for (int nb = 0; nb < 2; ++nb)
        for (int i = 0; i < 4; ++i) {
            const int m = g.m0 + wm + gr + 8 * (i >> 1), n = g.n0 + wn + 8 * nb + tc + (i & 1);
            if (m < g.m && n < g.n) g.d[int64_t(m) * g.n + n] = acc[nb][i];
        }
}

}  // namespace

// Returns 0, or 1 with the emulation's error in err (a named violation), or 2 for bad arguments.
extern "C" int ptx_gemm(const void* a, const void* b, float* d, int m, int n, int k, int kn, int f16, int bug,
                        uint64_t seed, char* err, int err_len) {
    if (m <= 0 || n <= 0 || k <= 0 || k % 8 || (kn && n % 8)) {
        snprintf(err, size_t(err_len), "ptx_gemm: M %d, N %d, K %d: K (and N for kn) must be multiples of 8", m, n, k);
        return 2;
    }
    try {
        for (int m0 = 0; m0 < m; m0 += kTile)
            for (int n0 = 0; n0 < n; n0 += kTile) {
                const Gemm g{static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), d, m, n, k, kn, f16, bug,
                             m0, n0};
                mpk::simt::run_block({kThreads, kSmemBytes, seed + uint64_t(m0) * 131 + uint64_t(n0)},
                                     [&] { tile_kernel(g); });
            }
    } catch (const mpk::simt::Error& e) {
        snprintf(err, size_t(err_len), "%s", e.what());
        return 1;
    }
    return 0;
}
