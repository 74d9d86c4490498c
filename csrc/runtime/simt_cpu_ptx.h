// simt_cpu_ptx.h: mma.sync, ldmatrix and stmatrix on the CPU (runtime/ptx.h names the instructions). Each is
// a warp collective of the emulation: the 32 lanes rendezvous at one call site, as for a shuffle
// (a partial warp, an exited lane or lanes at different call sites is the collectives' named error),
// and the last lane to arrive moves the data for all of them exactly as the PTX ISA's fragment
// layouts say. Part of runtime/simt_cpu.h (docs/simt.md, "Tensor cores").
//
// Fragments (g = lane >> 2, t = lane % 4; element i of a fragment counts its registers' elements
// low to high; the conformance test, tests/csrc/test_ptx.cpp, writes the ISA's own formulas):
//   A, m16n8k16 16-bit: row g + 8 ((i >> 1) & 1), col 2t + (i & 1) + 8 (i >> 2)     (8 elements)
//   A, m16n8k8 16-bit:  row g + 8 (i >> 1),       col 2t + (i & 1)                  (4)
//   A, m16n8k32 e4m3:   row g + 8 ((i >> 2) & 1), col 4t + (i & 3) + 16 (i >> 3)    (16)
//   B (col-major K x 8): k 2t + (i & 1) + 8 (i >> 1) | 2t + i | 4t + (i & 3) + 16 (i >> 2); n = g
//   C, D (16 x 8 f32):  row g + 8 (i >> 1),       col 2t + (i & 1)                  (4)
//   ldmatrix .m8n8 .b16: matrix j's row r is at the address of lane 8j + r; lane l's register j holds
//   row l >> 2, columns 2t and 2t + 1 of matrix j (.trans: of its transpose), the lower column low.
// Arithmetic: products of the inputs are exact in fp32; D = C + the products summed in fp32 in
// increasing k, rounded to nearest. A GPU's tensor core adds in an unspecified order and precision
// (truncating on some): kernels' budgets hold for any order (docs/simt.md).
#pragma once
#if defined(__CUDACC__)
#error "runtime/simt_cpu_ptx.h is part of the host compiler's CUDA emulation (runtime/simt_cpu.h)"
#endif
#include <stdint.h>
#include <string>
#include "dtypes.h"
#include "simt_cpu_async.h"
#include "simt_cpu_sync.h"

namespace mpk {
namespace simt {
#pragma GCC visibility push(hidden)  // module-local: direct calls, no PLT, under -fPIC
namespace detail {

// What a lane brings to an mma or an ldmatrix (Fiber::in points at it, on the lane's stack); its first
// member is the function that completes the instruction (simt_cpu_sync.h's complete calls it).
struct MatrixLane {
    void (*complete)(Sched& s, Fiber* lanes, Op op);
    const uint32_t* a;  // mma: the fragments
    const uint32_t* b;
    const float* c;
    float* d;
    const void* row;    // ldmatrix: the row address this lane gives, and its destination registers
    uint32_t* r;
};
inline const MatrixLane& lane_args(const Fiber* lanes, int l) {
    return *reinterpret_cast<const MatrixLane*>(uintptr_t(lanes[l].in));
}

// The element types' decodings (exact in fp32).
struct DecBf16 { static float at(uint32_t b) { return bits_float(b << 16); } };
struct DecF16 { static float at(uint32_t b) { return to_float(fp16_t{uint16_t(b)}); } };
struct DecE4m3 { static float at(uint32_t b) { return to_float(fp8_e4m3_t{uint8_t(b)}); } };

// Every lane's fragments into A (16 x K, row-major), B (K x 8) and D (C, 16 x 8), by the layouts above.
// Element i of a fragment is element i % per of register i / per (low bits first).
template <int K, class Dec> inline void gather(const Fiber* lanes, float (&A)[16][K], float (&B)[K][8], float (&D)[16][8]) {
    constexpr int per = K == 32 ? 4 : 2, bits = 32 / per;
    constexpr uint32_t mask = (1u << bits) - 1u;
    for (int l = 0; l < 32; ++l) {
        const MatrixLane& x = lane_args(lanes, l);
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < K / 2; ++i) {
            const int row = K == 16 ? g + 8 * ((i >> 1) & 1) : K == 8 ? g + 8 * (i >> 1) : g + 8 * ((i >> 2) & 1);
            const int col = K == 16 ? 2 * t + (i & 1) + 8 * (i >> 2) : K == 8 ? 2 * t + (i & 1)
                                                                               : 4 * t + (i & 3) + 16 * (i >> 3);
            A[row][col] = Dec::at((x.a[i / per] >> (bits * (i % per))) & mask);
        }
        for (int i = 0; i < K / 4; ++i) {
            const int k = K == 16 ? 2 * t + (i & 1) + 8 * (i >> 1) : K == 8 ? 2 * t + i : 4 * t + (i & 3) + 16 * (i >> 2);
            B[k][g] = Dec::at((x.b[i / per] >> (bits * (i % per))) & mask);
        }
        for (int i = 0; i < 4; ++i) D[g + 8 * (i >> 1)][2 * t + (i & 1)] = x.c[i];
    }
}

// D = A B + C for one warp: A 16 x K row-major, B K x 8 column-major, C and D 16 x 8 fp32. Each
// element of D adds its K products to C one by one in increasing k (the loop over n innermost, so the
// compiler runs 8 outputs per vector instruction in that same order).
template <int K, class Dec> inline void mma_complete(Fiber* lanes) {
    float A[16][K], B[K][8], D[16][8];
    gather<K, Dec>(lanes, A, B, D);
    for (int m = 0; m < 16; ++m)
        for (int k = 0; k < K; ++k) {
            const float a = A[m][k];
            for (int n = 0; n < 8; ++n) D[m][n] += a * B[k][n];
        }
    for (int l = 0; l < 32; ++l) {  // every lane's C read above: d may alias c
        float* d = lane_args(lanes, l).d;
        const int g = l >> 2, t = l & 3;
        d[0] = D[g][2 * t];
        d[1] = D[g][2 * t + 1];
        d[2] = D[g + 8][2 * t];
        d[3] = D[g + 8][2 * t + 1];
    }
}

// ldmatrix and stmatrix: how many matrices (x1, x2, x4) and whether transposed.
inline int matrices_of(Op op) {
    return op == Op::LdmX1 || op == Op::LdmX1T || op == Op::StmX1 || op == Op::StmX1T   ? 1
           : op == Op::LdmX2 || op == Op::LdmX2T || op == Op::StmX2 || op == Op::StmX2T ? 2 : 4;
}
inline bool transposed(Op op) {
    return op == Op::LdmX1T || op == Op::LdmX2T || op == Op::LdmX4T || op == Op::StmX1T || op == Op::StmX2T ||
           op == Op::StmX4T;
}
// Each 16-bit element the instruction moves: f(lane l's register j, half e, the element's shared address).
// Lane l's register j holds row l >> 2, columns 2t and 2t + 1 of matrix j (.trans: of its transpose), the
// lower column low; matrix j's row r is at the address lane 8 j + r gives.
template <class F> inline void for_each_element(Fiber* lanes, int n, bool trans, F f) {
    for (int l = 0; l < 32; ++l) {
        const int g = l >> 2, t = l & 3;
        for (int j = 0; j < n; ++j)
            for (int e = 0; e < 2; ++e) {
                const int row = trans ? 2 * t + e : g, col = trans ? g : 2 * t + e;
                f(lane_args(lanes, l).r[j], e, static_cast<char*>(const_cast<void*>(lane_args(lanes, 8 * j + row).row)) + 2 * col);
            }
    }
}

#if MPK_SIMT_DEFINE_SLOW_PATHS
// The row addresses of an ldmatrix (store false) or stmatrix (true), checked: 16-byte aligned, in shared
// memory, not in flight; a store's, not read by a wgmma in flight (simt_cpu_wgmma.h).
MPK_SIMT_SLOW void matrix_rows_checked(Sched& s, Fiber* lanes, Op op, bool store) {
    const Fiber& f0 = lanes[0];
    for (int l = 0; l < 8 * matrices_of(op); ++l) {  // the lanes whose row addresses this form uses
        const char* p = static_cast<const char*>(lane_args(lanes, l).row);
        auto where = [&] {
            return std::string(op_name(op)) + " at " + site(f0.file, f0.line) + ": row " + std::to_string(l % 8) +
                   " of matrix " + std::to_string(l / 8) + ", the address " + ptr_text(p) + " of lane " + std::to_string(l);
        };
        if (uintptr_t(p) % 16) fail(s, where() + ", is not 16-byte aligned");
        if (!in_shared(s, p, 16)) fail(s, where() + ", is not in shared memory (" + shared_text(s) + ")");
        int thread = -1;
        if (const AsyncCopy* c = in_flight(s, p, 16, &thread))
            fail(s, where() + (store ? ", writes" : ", reads") + " bytes that " + copy_text(*c, thread) + " will still write: " +
                        wait_for(*c));
        if (store && s.async && s.async->wgmma_reading) {
            const std::string r = s.async->wgmma_reading(s, p, 16);
            if (!r.empty()) fail(s, where() + ", writes bytes that " + r + " still reads (before its wgmma.wait_group)");
        }
    }
}
MPK_SIMT_SLOW void ldmatrix_complete(Sched& s, Fiber* lanes, Op op) {
    matrix_rows_checked(s, lanes, op, false);
    for (int l = 0; l < 32; ++l)
        for (int j = 0; j < matrices_of(op); ++j) lane_args(lanes, l).r[j] = 0;
    for_each_element(lanes, matrices_of(op), transposed(op), [](uint32_t& reg, int e, const char* at) {
        uint16_t h;
        memcpy(&h, at, 2);
        reg |= uint32_t(h) << (16 * e);
    });
}
// stmatrix (sm_90): ldmatrix's layout, the other way.
MPK_SIMT_SLOW void stmatrix_complete(Sched& s, Fiber* lanes, Op op) {
    matrix_rows_checked(s, lanes, op, true);
    for_each_element(lanes, matrices_of(op), transposed(op), [](uint32_t& reg, int e, char* at) {
        const uint16_t h = uint16_t(reg >> (16 * e));
        memcpy(at, &h, 2);
    });
}
#else
void ldmatrix_complete(Sched& s, Fiber* lanes, Op op);
void stmatrix_complete(Sched& s, Fiber* lanes, Op op);
#endif

#if MPK_SIMT_DEFINE_SLOW_PATHS
MPK_SIMT_SLOW void matrix_complete(Sched& s, Fiber* lanes, Op op) {
    switch (op) {
    case Op::MmaK16Bf16: mma_complete<16, DecBf16>(lanes); break;
    case Op::MmaK16F16: mma_complete<16, DecF16>(lanes); break;
    case Op::MmaK8Bf16: mma_complete<8, DecBf16>(lanes); break;
    case Op::MmaK8F16: mma_complete<8, DecF16>(lanes); break;
    case Op::MmaK32E4m3: mma_complete<32, DecE4m3>(lanes); break;
    case Op::StmX1: case Op::StmX2: case Op::StmX4: case Op::StmX1T: case Op::StmX2T: case Op::StmX4T:
        stmatrix_complete(s, lanes, op);
        break;
    default: ldmatrix_complete(s, lanes, op); break;
    }
}
#else
void matrix_complete(Sched& s, Fiber* lanes, Op op);
#endif

// The calling lane's part of an mma or ldmatrix; returns when the warp's instruction completed.
inline void matrix_op(Op op, const MatrixLane& args, const char* file, int line) {
    collective(op, 0xFFFFFFFFu, uint64_t(uintptr_t(&args)), 0, 32, file, line);
}

}  // namespace detail
#pragma GCC visibility pop
}  // namespace simt
}  // namespace mpk
