// ptx_wgmma.h: Hopper's warpgroup MMA and stmatrix, named after their PTX (part of runtime/ptx.h, which
// includes it; namespace mpk::ptx):
//
//   wgmma.fence.sync.aligned                 -> wgmma_fence()
//   wgmma.commit_group.sync.aligned          -> wgmma_commit_group()
//   wgmma.wait_group.sync.aligned N          -> wgmma_wait_group<N>()
//   wgmma.mma_async.sync.aligned.m64nNk16.f32.bf16.bf16 d, a-desc, b-desc, scale-d, imm-scale-a, imm-scale-b,
//       imm-trans-a, imm-trans-b
//       -> wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, ScaleA, ScaleB, TransA, TransB>(d, desc_a, desc_b, scale_d)
//          float d[N / 2], N = 8 .. 256 in steps of 8; ScaleA, ScaleB 1 or -1 (default 1); TransA, TransB 0
//          (K-major) or 1 (MN-major, default 0); scale_d 0 (D = A B) or not (D = A B + D)
//   ... with A from registers: d, {a0..a3}, b-desc, scale-d, imm-scale-a, imm-scale-b, imm-trans-b
//       -> wgmma_mma_async_m64nNk16_f32_bf16_bf16<N, ScaleA, ScaleB, TransB>(d, a, desc_b, scale_d), uint32_t a[4]
//   ... .f32.f16.f16 the same, wgmma_mma_async_m64nNk16_f32_f16_f16
//   stmatrix.sync.aligned.m8n8.x4[.trans].shared.b16 [row], {r0..r3} -> stmatrix_m8n8_x4[_trans]_shared_b16(row, r)
//       (x1, x2 and x4; row: this lane's row address, as ldmatrix's)
//   the shared-memory address of a pointer (cvta.to.shared) -> shared_address(p)
//   a matrix descriptor -> wgmma_descriptor<SwizzleBytes>(tile, leading_byte_offset, stride_byte_offset):
//       the start address of `tile` in shared memory, the two offsets in bytes (multiples of 16), the layout
//       SwizzleBytes 0 (none), 32, 64 or 128 (the descriptor's own values 0, 3, 2, 1: not TMA's numbering)
// (all sm_90a: wgmma exists on sm_90a only; stmatrix on sm_90 and newer)
//   nvcc: each is the inline asm itself, nothing more.
//   host: runtime/simt_cpu_wgmma.h runs them and names what a GPU gets silently wrong.
#pragma once
#include <stdint.h>
#include "simt.h"
#if !defined(__CUDACC__)
#include "simt_cpu_wgmma.h"
#endif

namespace mpk {
namespace ptx {

#if defined(__CUDACC__)

template <uint32_t SwizzleBytes>
MPK_DEVICE MPK_INLINE uint64_t wgmma_descriptor(const void* tile, uint32_t leading_byte_offset, uint32_t stride_byte_offset) {
    static_assert(SwizzleBytes == 0 || SwizzleBytes == 32 || SwizzleBytes == 64 || SwizzleBytes == 128,
                  "a matrix descriptor's swizzle is 0 (none), 32, 64 or 128 bytes");
    constexpr uint64_t layout = SwizzleBytes == 128 ? 1 : SwizzleBytes == 64 ? 2 : SwizzleBytes == 32 ? 3 : 0;
    return uint64_t((shared_address(tile) & 0x3FFFF) >> 4) | uint64_t((leading_byte_offset >> 4) & 0x3FFF) << 16 |
           uint64_t((stride_byte_offset >> 4) & 0x3FFF) << 32 | layout << 62;
}

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MPK_PTX_STMATRIX(NAME, FORM, N, REGS, INS)                                                     \
    MPK_DEVICE MPK_INLINE void NAME(void* row, const uint32_t (&r)[N]) {                                \
        asm volatile(FORM " [%0], " REGS ";" ::"r"(shared_address(row)), INS \
                     : "memory");                                                                       \
    }
#define MPK_STM_IN1 "r"(r[0])
#define MPK_STM_IN2 "r"(r[0]), "r"(r[1])
#define MPK_STM_IN4 "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
MPK_PTX_STMATRIX(stmatrix_m8n8_x1_shared_b16, "stmatrix.sync.aligned.m8n8.x1.shared.b16", 1, "{%1}", MPK_STM_IN1)
MPK_PTX_STMATRIX(stmatrix_m8n8_x2_shared_b16, "stmatrix.sync.aligned.m8n8.x2.shared.b16", 2, "{%1,%2}", MPK_STM_IN2)
MPK_PTX_STMATRIX(stmatrix_m8n8_x4_shared_b16, "stmatrix.sync.aligned.m8n8.x4.shared.b16", 4, "{%1,%2,%3,%4}", MPK_STM_IN4)
MPK_PTX_STMATRIX(stmatrix_m8n8_x1_trans_shared_b16, "stmatrix.sync.aligned.m8n8.x1.trans.shared.b16", 1, "{%1}",
                 MPK_STM_IN1)
MPK_PTX_STMATRIX(stmatrix_m8n8_x2_trans_shared_b16, "stmatrix.sync.aligned.m8n8.x2.trans.shared.b16", 2, "{%1,%2}",
                 MPK_STM_IN2)
MPK_PTX_STMATRIX(stmatrix_m8n8_x4_trans_shared_b16, "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16", 4,
                 "{%1,%2,%3,%4}", MPK_STM_IN4)
#undef MPK_PTX_STMATRIX
#undef MPK_STM_IN1
#undef MPK_STM_IN2
#undef MPK_STM_IN4
#endif

#if !defined(__CUDA_ARCH__) || (__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL))
MPK_DEVICE MPK_INLINE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
MPK_DEVICE MPK_INLINE void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> MPK_DEVICE MPK_INLINE void wgmma_wait_group() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0 to 7");
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// The accumulators of m64nNk16 as asm operands, "+f"(d[0]) .. "+f"(d[N / 2 - 1]), and their names in the
// instruction, %0 .. %(N / 2 - 1); MPK_WG_SHAPES lists each N with the numbers of the operands that follow
// them (N / 2 onwards: an asm statement numbers its operands in order, and these must be literal text).
#define MPK_WG_D4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define MPK_WG_OUT_8 MPK_WG_D4(0)
#define MPK_WG_OUT_16 MPK_WG_OUT_8, MPK_WG_D4(4)
#define MPK_WG_OUT_24 MPK_WG_OUT_16, MPK_WG_D4(8)
#define MPK_WG_OUT_32 MPK_WG_OUT_24, MPK_WG_D4(12)
#define MPK_WG_OUT_40 MPK_WG_OUT_32, MPK_WG_D4(16)
#define MPK_WG_OUT_48 MPK_WG_OUT_40, MPK_WG_D4(20)
#define MPK_WG_OUT_56 MPK_WG_OUT_48, MPK_WG_D4(24)
#define MPK_WG_OUT_64 MPK_WG_OUT_56, MPK_WG_D4(28)
#define MPK_WG_OUT_72 MPK_WG_OUT_64, MPK_WG_D4(32)
#define MPK_WG_OUT_80 MPK_WG_OUT_72, MPK_WG_D4(36)
#define MPK_WG_OUT_88 MPK_WG_OUT_80, MPK_WG_D4(40)
#define MPK_WG_OUT_96 MPK_WG_OUT_88, MPK_WG_D4(44)
#define MPK_WG_OUT_104 MPK_WG_OUT_96, MPK_WG_D4(48)
#define MPK_WG_OUT_112 MPK_WG_OUT_104, MPK_WG_D4(52)
#define MPK_WG_OUT_120 MPK_WG_OUT_112, MPK_WG_D4(56)
#define MPK_WG_OUT_128 MPK_WG_OUT_120, MPK_WG_D4(60)
#define MPK_WG_OUT_136 MPK_WG_OUT_128, MPK_WG_D4(64)
#define MPK_WG_OUT_144 MPK_WG_OUT_136, MPK_WG_D4(68)
#define MPK_WG_OUT_152 MPK_WG_OUT_144, MPK_WG_D4(72)
#define MPK_WG_OUT_160 MPK_WG_OUT_152, MPK_WG_D4(76)
#define MPK_WG_OUT_168 MPK_WG_OUT_160, MPK_WG_D4(80)
#define MPK_WG_OUT_176 MPK_WG_OUT_168, MPK_WG_D4(84)
#define MPK_WG_OUT_184 MPK_WG_OUT_176, MPK_WG_D4(88)
#define MPK_WG_OUT_192 MPK_WG_OUT_184, MPK_WG_D4(92)
#define MPK_WG_OUT_200 MPK_WG_OUT_192, MPK_WG_D4(96)
#define MPK_WG_OUT_208 MPK_WG_OUT_200, MPK_WG_D4(100)
#define MPK_WG_OUT_216 MPK_WG_OUT_208, MPK_WG_D4(104)
#define MPK_WG_OUT_224 MPK_WG_OUT_216, MPK_WG_D4(108)
#define MPK_WG_OUT_232 MPK_WG_OUT_224, MPK_WG_D4(112)
#define MPK_WG_OUT_240 MPK_WG_OUT_232, MPK_WG_D4(116)
#define MPK_WG_OUT_248 MPK_WG_OUT_240, MPK_WG_D4(120)
#define MPK_WG_OUT_256 MPK_WG_OUT_248, MPK_WG_D4(124)
#define MPK_WG_REG_8 "%0, %1, %2, %3"
#define MPK_WG_REG_16 MPK_WG_REG_8 ", %4, %5, %6, %7"
#define MPK_WG_REG_24 MPK_WG_REG_16 ", %8, %9, %10, %11"
#define MPK_WG_REG_32 MPK_WG_REG_24 ", %12, %13, %14, %15"
#define MPK_WG_REG_40 MPK_WG_REG_32 ", %16, %17, %18, %19"
#define MPK_WG_REG_48 MPK_WG_REG_40 ", %20, %21, %22, %23"
#define MPK_WG_REG_56 MPK_WG_REG_48 ", %24, %25, %26, %27"
#define MPK_WG_REG_64 MPK_WG_REG_56 ", %28, %29, %30, %31"
#define MPK_WG_REG_72 MPK_WG_REG_64 ", %32, %33, %34, %35"
#define MPK_WG_REG_80 MPK_WG_REG_72 ", %36, %37, %38, %39"
#define MPK_WG_REG_88 MPK_WG_REG_80 ", %40, %41, %42, %43"
#define MPK_WG_REG_96 MPK_WG_REG_88 ", %44, %45, %46, %47"
#define MPK_WG_REG_104 MPK_WG_REG_96 ", %48, %49, %50, %51"
#define MPK_WG_REG_112 MPK_WG_REG_104 ", %52, %53, %54, %55"
#define MPK_WG_REG_120 MPK_WG_REG_112 ", %56, %57, %58, %59"
#define MPK_WG_REG_128 MPK_WG_REG_120 ", %60, %61, %62, %63"
#define MPK_WG_REG_136 MPK_WG_REG_128 ", %64, %65, %66, %67"
#define MPK_WG_REG_144 MPK_WG_REG_136 ", %68, %69, %70, %71"
#define MPK_WG_REG_152 MPK_WG_REG_144 ", %72, %73, %74, %75"
#define MPK_WG_REG_160 MPK_WG_REG_152 ", %76, %77, %78, %79"
#define MPK_WG_REG_168 MPK_WG_REG_160 ", %80, %81, %82, %83"
#define MPK_WG_REG_176 MPK_WG_REG_168 ", %84, %85, %86, %87"
#define MPK_WG_REG_184 MPK_WG_REG_176 ", %88, %89, %90, %91"
#define MPK_WG_REG_192 MPK_WG_REG_184 ", %92, %93, %94, %95"
#define MPK_WG_REG_200 MPK_WG_REG_192 ", %96, %97, %98, %99"
#define MPK_WG_REG_208 MPK_WG_REG_200 ", %100, %101, %102, %103"
#define MPK_WG_REG_216 MPK_WG_REG_208 ", %104, %105, %106, %107"
#define MPK_WG_REG_224 MPK_WG_REG_216 ", %108, %109, %110, %111"
#define MPK_WG_REG_232 MPK_WG_REG_224 ", %112, %113, %114, %115"
#define MPK_WG_REG_240 MPK_WG_REG_232 ", %116, %117, %118, %119"
#define MPK_WG_REG_248 MPK_WG_REG_240 ", %120, %121, %122, %123"
#define MPK_WG_REG_256 MPK_WG_REG_248 ", %124, %125, %126, %127"
#define MPK_WG_SHAPES(X) \
    X(8, "4", "5", "6", "7", "8", "9", "10", "11", "12") \
    X(16, "8", "9", "10", "11", "12", "13", "14", "15", "16") \
    X(24, "12", "13", "14", "15", "16", "17", "18", "19", "20") \
    X(32, "16", "17", "18", "19", "20", "21", "22", "23", "24") \
    X(40, "20", "21", "22", "23", "24", "25", "26", "27", "28") \
    X(48, "24", "25", "26", "27", "28", "29", "30", "31", "32") \
    X(56, "28", "29", "30", "31", "32", "33", "34", "35", "36") \
    X(64, "32", "33", "34", "35", "36", "37", "38", "39", "40") \
    X(72, "36", "37", "38", "39", "40", "41", "42", "43", "44") \
    X(80, "40", "41", "42", "43", "44", "45", "46", "47", "48") \
    X(88, "44", "45", "46", "47", "48", "49", "50", "51", "52") \
    X(96, "48", "49", "50", "51", "52", "53", "54", "55", "56") \
    X(104, "52", "53", "54", "55", "56", "57", "58", "59", "60") \
    X(112, "56", "57", "58", "59", "60", "61", "62", "63", "64") \
    X(120, "60", "61", "62", "63", "64", "65", "66", "67", "68") \
    X(128, "64", "65", "66", "67", "68", "69", "70", "71", "72") \
    X(136, "68", "69", "70", "71", "72", "73", "74", "75", "76") \
    X(144, "72", "73", "74", "75", "76", "77", "78", "79", "80") \
    X(152, "76", "77", "78", "79", "80", "81", "82", "83", "84") \
    X(160, "80", "81", "82", "83", "84", "85", "86", "87", "88") \
    X(168, "84", "85", "86", "87", "88", "89", "90", "91", "92") \
    X(176, "88", "89", "90", "91", "92", "93", "94", "95", "96") \
    X(184, "92", "93", "94", "95", "96", "97", "98", "99", "100") \
    X(192, "96", "97", "98", "99", "100", "101", "102", "103", "104") \
    X(200, "100", "101", "102", "103", "104", "105", "106", "107", "108") \
    X(208, "104", "105", "106", "107", "108", "109", "110", "111", "112") \
    X(216, "108", "109", "110", "111", "112", "113", "114", "115", "116") \
    X(224, "112", "113", "114", "115", "116", "117", "118", "119", "120") \
    X(232, "116", "117", "118", "119", "120", "121", "122", "123", "124") \
    X(240, "120", "121", "122", "123", "124", "125", "126", "127", "128") \
    X(248, "124", "125", "126", "127", "128", "129", "130", "131", "132") \
    X(256, "128", "129", "130", "131", "132", "133", "134", "135", "136")


// SS: operands after the accumulators: desc_a, desc_b, scale_d, then the immediates scale-a, scale-b, trans-a, trans-b.
#define MPK_WG_SS(N, R0, R1, R2, R3, R4, R5, R6, R7, R8)                                                           \
    if constexpr (Nn == N) {                                                                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" R2 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." \
                     MPK_WG_TYPE " {" MPK_WG_REG_##N "}, %" R0 ", %" R1 ", p, %" R3 ", %" R4 ", %" R5 ", %" R6 ";\n}\n" \
                     : MPK_WG_OUT_##N                                                                               \
                     : "l"(desc_a), "l"(desc_b), "r"(scale_d), "n"(ScaleA), "n"(ScaleB), "n"(TransA), "n"(TransB)); \
    } else
// RS: a0..a3, desc_b, scale_d, then scale-a, scale-b, trans-b.
#define MPK_WG_RS(N, R0, R1, R2, R3, R4, R5, R6, R7, R8)                                                           \
    if constexpr (Nn == N) {                                                                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" R5 ", 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k16.f32." \
                     MPK_WG_TYPE " {" MPK_WG_REG_##N "}, {%" R0 ", %" R1 ", %" R2 ", %" R3 "}, %" R4 ", p, %" R6   \
                     ", %" R7 ", %" R8 ";\n}\n"                                                                     \
                     : MPK_WG_OUT_##N                                                                               \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d), "n"(ScaleA),          \
                       "n"(ScaleB), "n"(TransB));                                                                   \
    } else
#define MPK_WG_CHECKS                                                                                     \
    static_assert(Nn % 8 == 0 && Nn >= 8 && Nn <= 256, "wgmma m64nNk16: N is 8 to 256 in steps of 8");     \
    static_assert((ScaleA == 1 || ScaleA == -1) && (ScaleB == 1 || ScaleB == -1), "imm-scale is 1 or -1"); \
    static_assert(TransB == 0 || TransB == 1, "imm-trans is 0 or 1")
#define MPK_WG_NONE \
    { static_assert(Nn < 0, "unreachable"); }
// Both forms of one type (MPK_WG_TYPE, expanded where the macro is used).
#define MPK_PTX_WGMMA(NAME)                                                                                  \
    template <int Nn, int ScaleA = 1, int ScaleB = 1, int TransA = 0, int TransB = 0>                        \
    MPK_DEVICE MPK_INLINE void NAME(float (&d)[Nn / 2], uint64_t desc_a, uint64_t desc_b, int scale_d) {      \
        MPK_WG_CHECKS;                                                                                       \
        static_assert(TransA == 0 || TransA == 1, "imm-trans is 0 or 1");                                    \
        MPK_WG_SHAPES(MPK_WG_SS) MPK_WG_NONE                                                                 \
    }                                                                                                        \
    template <int Nn, int ScaleA = 1, int ScaleB = 1, int TransB = 0>                                        \
    MPK_DEVICE MPK_INLINE void NAME(float (&d)[Nn / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) { \
        MPK_WG_CHECKS;                                                                                       \
        MPK_WG_SHAPES(MPK_WG_RS) MPK_WG_NONE                                                                 \
    }
#define MPK_WG_TYPE "bf16.bf16"
MPK_PTX_WGMMA(wgmma_mma_async_m64nNk16_f32_bf16_bf16)
#undef MPK_WG_TYPE
#define MPK_WG_TYPE "f16.f16"
MPK_PTX_WGMMA(wgmma_mma_async_m64nNk16_f32_f16_f16)
#undef MPK_WG_TYPE
#undef MPK_PTX_WGMMA
#undef MPK_WG_SS
#undef MPK_WG_RS
#undef MPK_WG_CHECKS
#undef MPK_WG_NONE
#endif

#else  // the host compiler: runtime/simt_cpu_wgmma.h

// The shared-memory address of p (the emulation's: its offset in the block's dynamic shared memory).
inline uint32_t shared_address(const void* p, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::shared_address(p, file, line);
}
template <uint32_t SwizzleBytes>
inline uint64_t wgmma_descriptor(const void* tile, uint32_t leading_byte_offset, uint32_t stride_byte_offset,
                                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(SwizzleBytes == 0 || SwizzleBytes == 32 || SwizzleBytes == 64 || SwizzleBytes == 128,
                  "a matrix descriptor's swizzle is 0 (none), 32, 64 or 128 bytes");
    ::mpk::simt::detail::descriptor_checked(leading_byte_offset, stride_byte_offset, file, line);
    constexpr uint64_t layout = SwizzleBytes == 128 ? 1 : SwizzleBytes == 64 ? 2 : SwizzleBytes == 32 ? 3 : 0;
    return uint64_t((shared_address(tile, file, line) & 0x3FFFF) >> 4) |
           uint64_t((leading_byte_offset >> 4) & 0x3FFF) << 16 | uint64_t((stride_byte_offset >> 4) & 0x3FFF) << 32 |
           layout << 62;
}

#define MPK_PTX_STMATRIX(NAME, OP, N)                                                                          \
    inline void NAME(void* row, const uint32_t (&r)[N], const char* file = __builtin_FILE(),                   \
                     int line = __builtin_LINE()) {                                                            \
        using namespace ::mpk::simt::detail;                                                                   \
        matrix_op(Op::OP, MatrixLane{&matrix_complete, nullptr, nullptr, nullptr, nullptr, row, const_cast<uint32_t*>(r)}, \
                  file, line);                                                                                 \
    }
MPK_PTX_STMATRIX(stmatrix_m8n8_x1_shared_b16, StmX1, 1)
MPK_PTX_STMATRIX(stmatrix_m8n8_x2_shared_b16, StmX2, 2)
MPK_PTX_STMATRIX(stmatrix_m8n8_x4_shared_b16, StmX4, 4)
MPK_PTX_STMATRIX(stmatrix_m8n8_x1_trans_shared_b16, StmX1T, 1)
MPK_PTX_STMATRIX(stmatrix_m8n8_x2_trans_shared_b16, StmX2T, 2)
MPK_PTX_STMATRIX(stmatrix_m8n8_x4_trans_shared_b16, StmX4T, 4)
#undef MPK_PTX_STMATRIX

inline void wgmma_fence(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    wgmma_op(Op::WgmmaFence, WgmmaLane{&wgmma_complete, 0, 0, 0, 0, nullptr, nullptr}, file, line);
}
inline void wgmma_commit_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    using namespace ::mpk::simt::detail;
    wgmma_op(Op::WgmmaCommit, WgmmaLane{&wgmma_complete, 0, 0, 0, 0, nullptr, nullptr}, file, line);
}
template <int N> inline void wgmma_wait_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0 to 7");
    using namespace ::mpk::simt::detail;
    wgmma_op(Op::WgmmaWait, WgmmaLane{&wgmma_complete, N, 0, 0, 0, nullptr, nullptr}, file, line);
}

namespace wg {  // the flags of an mma_async's form (simt_cpu_wgmma.h)
template <int Nn, int ScaleA, int ScaleB, int TransA, int TransB>
constexpr uint32_t flags(bool f16, bool reg_a) {
    static_assert(Nn % 8 == 0 && Nn >= 8 && Nn <= 256, "wgmma m64nNk16: N is 8 to 256 in steps of 8");
    static_assert((ScaleA == 1 || ScaleA == -1) && (ScaleB == 1 || ScaleB == -1), "imm-scale is 1 or -1");
    static_assert((TransA == 0 || TransA == 1) && (TransB == 0 || TransB == 1), "imm-trans is 0 or 1");
    using namespace ::mpk::simt::detail;
    return (ScaleA < 0 ? kWgNegA : 0) | (ScaleB < 0 ? kWgNegB : 0) | (TransA ? kWgTransA : 0) | (TransB ? kWgTransB : 0) |
           (f16 ? kWgF16 : 0) | (reg_a ? kWgRegA : 0);
}
}  // namespace wg
#define MPK_PTX_WGMMA(NAME, F16)                                                                                    \
    template <int Nn, int ScaleA = 1, int ScaleB = 1, int TransA = 0, int TransB = 0>                               \
    inline void NAME(float (&d)[Nn / 2], uint64_t desc_a, uint64_t desc_b, int scale_d,                             \
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                            \
        using namespace ::mpk::simt::detail;                                                                        \
        const uint32_t f = wg::flags<Nn, ScaleA, ScaleB, TransA, TransB>(F16, false) | (scale_d ? kWgScaleD : 0);    \
        wgmma_op(Op::Wgmma, WgmmaLane{&wgmma_complete, Nn, f, desc_a, desc_b, nullptr, d}, file, line);             \
    }                                                                                                               \
    template <int Nn, int ScaleA = 1, int ScaleB = 1, int TransB = 0>                                               \
    inline void NAME(float (&d)[Nn / 2], const uint32_t (&a)[4], uint64_t desc_b, int scale_d,                      \
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                            \
        using namespace ::mpk::simt::detail;                                                                        \
        const uint32_t f = wg::flags<Nn, ScaleA, ScaleB, 0, TransB>(F16, true) | (scale_d ? kWgScaleD : 0);         \
        wgmma_op(Op::Wgmma, WgmmaLane{&wgmma_complete, Nn, f, 0, desc_b, a, d}, file, line);                       \
    }
MPK_PTX_WGMMA(wgmma_mma_async_m64nNk16_f32_bf16_bf16, false)
MPK_PTX_WGMMA(wgmma_mma_async_m64nNk16_f32_f16_f16, true)
#undef MPK_PTX_WGMMA

#endif

}  // namespace ptx
}  // namespace mpk
