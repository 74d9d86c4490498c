// ptx.h: tensor-core and asynchronous-copy instructions for task kernels, named after their PTX
// (namespace mpk::ptx), so that an author maps inline asm one to one:
//
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, c
//       -> mma_m16n8k16_row_col_f32_bf16_bf16_f32(d, a, b, c)    float d[4], uint32_t a[4], b[2], float c[4]
//   ... .m16n8k16 .f16, .m16n8k8 .bf16 / .f16 (a[2], b[1]), .m16n8k32 .e4m3 (a[4], b[2]; sm_89 and newer)
//   ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {r0..r3}, [row]
//       -> ldmatrix_m8n8_x4_trans_shared_b16(r, row)             uint32_t r[4], row: this lane's row address
//   cp.async.cg.shared.global [dst], [src], 16, src_size -> cp_async_cg_shared_global<16>(dst, src, src_size)
//   cp.async.ca.shared.global (4, 8 or 16 bytes)          -> cp_async_ca_shared_global<N>(dst, src[, src_size])
//   cp.async.commit_group / wait_group N / wait_all       -> cp_async_commit_group(), cp_async_wait_group<N>(),
//                                                            cp_async_wait_all()
//   mbarrier.init.shared::cta.b64 [bar], count           -> mbarrier_init_shared_b64(bar, count)   uint64_t* bar
//   mbarrier.arrive.shared::cta.b64 state, [bar]          -> state = mbarrier_arrive_shared_b64(bar)
//   mbarrier.test_wait.parity.shared::cta.b64 p, [bar], q -> p = mbarrier_test_wait_parity_shared_b64(bar, q)
//   mbarrier.inval.shared::cta.b64 [bar]                  -> mbarrier_inval_shared_b64(bar)
//   sm_90 and newer: mbarrier.arrive.expect_tx -> mbarrier_arrive_expect_tx_shared_b64(bar, tx),
//   mbarrier.expect_tx / complete_tx.relaxed.cta -> mbarrier_{expect,complete}_tx_shared_b64(bar, tx),
//   mbarrier.try_wait.parity -> mbarrier_try_wait_parity_shared_b64(bar, q), and the blocking loop
//   around it, mbarrier_wait_parity(bar, q)
//   cp.async.bulk.tensor.{2d,3d}.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [map, {c..}], [bar]
//       -> cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(dst, map, c0, c1, bar)
//          (3d: c0, c1, c2), sm_90 and newer; map: a TensorMap made by make_tensor_map (host, below)
//   cp.async.bulk.tensor.{2d,3d}.global.shared::cta.bulk_group [map, {c..}], [src]
//       -> cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(map, c0, c1, src) (3d: c0, c1, c2)
//   cp.async.bulk.commit_group / wait_group N / wait_group.read N -> cp_async_bulk_commit_group(),
//       cp_async_bulk_wait_group<N>(), cp_async_bulk_wait_group_read<N>()
//   fence.proxy.async.shared::cta -> fence_proxy_async_shared_cta()         (all five: sm_90 and newer)
//   wgmma.{fence,commit_group,wait_group,mma_async}, stmatrix, matrix descriptors: runtime/ptx_wgmma.h
// (.sync.aligned is every form's: the whole warp executes it, converged, at one call site.)
//
//   nvcc: each is the inline asm itself, nothing more.
//   host: the emulation runs them (runtime/simt_cpu_ptx.h: mma and ldmatrix as warp collectives
//         moving data as the PTX ISA's fragment layouts say; runtime/simt_cpu_async.h: copies that
//         land at a seeded moment between their commit and the wait that covers it) and names what
//         a GPU would silently get wrong: a partial warp or lanes at different call sites, a row
//         address not 16-byte aligned or not in shared memory, a copy's source not global or its
//         destination not shared or either misaligned, an ldmatrix of bytes still in flight, bytes in
//         flight written by a thread, a task that ends with copies in flight; runtime/simt_cpu_mbarrier.h:
//         barriers with their phases, arrivals and transaction bytes, a wait that can never complete
//         named with each barrier's state, a barrier used uninitialised or overwritten). Each message has the
//         kernel's file:line (the host forms take the call site as default arguments).
// docs/simt.md ("Tensor cores and asynchronous copies") says what only a GPU shows.
#pragma once
#include <stdint.h>
#include <string>
#include "simt.h"
#if !defined(__CUDACC__)
#include "simt_cpu_async.h"
#include "simt_cpu_mbarrier.h"
#include "simt_cpu_ptx.h"
#include "simt_cpu_tma.h"
#endif

namespace mpk {
namespace ptx {

#if defined(__CUDACC__)

#define MPK_PTX_MMA_4x2(NAME, FORM)                                                                         \
    MPK_DEVICE MPK_INLINE void NAME(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],          \
                                    const float (&c)[4]) {                                                  \
        asm volatile(FORM " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};"                      \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                       \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), \
                       "f"(c[2]), "f"(c[3]));                                                               \
    }
#define MPK_PTX_MMA_2x1(NAME, FORM)                                                                         \
    MPK_DEVICE MPK_INLINE void NAME(float (&d)[4], const uint32_t (&a)[2], const uint32_t (&b)[1],          \
                                    const float (&c)[4]) {                                                  \
        asm volatile(FORM " {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"                                  \
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])                                       \
                     : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));        \
    }
MPK_PTX_MMA_4x2(mma_m16n8k16_row_col_f32_bf16_bf16_f32, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32")
MPK_PTX_MMA_4x2(mma_m16n8k16_row_col_f32_f16_f16_f32, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")
MPK_PTX_MMA_2x1(mma_m16n8k8_row_col_f32_bf16_bf16_f32, "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32")
MPK_PTX_MMA_2x1(mma_m16n8k8_row_col_f32_f16_f16_f32, "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32")
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 890
MPK_PTX_MMA_4x2(mma_m16n8k32_row_col_f32_e4m3_e4m3_f32, "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32")
#endif
#undef MPK_PTX_MMA_4x2
#undef MPK_PTX_MMA_2x1

MPK_DEVICE MPK_INLINE uint32_t shared_address(const void* p) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
#define MPK_PTX_LDMATRIX(NAME, FORM, N, REGS, OUTS)                                      \
    MPK_DEVICE MPK_INLINE void NAME(uint32_t (&r)[N], const void* row) {                  \
        asm volatile(FORM " " REGS ", [%" #N "];" : OUTS : "r"(shared_address(row)));    \
    }
#define MPK_LDM_OUT1 "=r"(r[0])
#define MPK_LDM_OUT2 "=r"(r[0]), "=r"(r[1])
#define MPK_LDM_OUT4 "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x1_shared_b16, "ldmatrix.sync.aligned.m8n8.x1.shared.b16", 1, "{%0}", MPK_LDM_OUT1)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x2_shared_b16, "ldmatrix.sync.aligned.m8n8.x2.shared.b16", 2, "{%0,%1}", MPK_LDM_OUT2)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x4_shared_b16, "ldmatrix.sync.aligned.m8n8.x4.shared.b16", 4, "{%0,%1,%2,%3}",
                 MPK_LDM_OUT4)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x1_trans_shared_b16, "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16", 1, "{%0}",
                 MPK_LDM_OUT1)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x2_trans_shared_b16, "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16", 2, "{%0,%1}",
                 MPK_LDM_OUT2)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x4_trans_shared_b16, "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16", 4,
                 "{%0,%1,%2,%3}", MPK_LDM_OUT4)
#undef MPK_PTX_LDMATRIX
#undef MPK_LDM_OUT1
#undef MPK_LDM_OUT2
#undef MPK_LDM_OUT4

// "memory": the compiler must not move shared-memory accesses across the copies and the waits.
template <int N> MPK_DEVICE MPK_INLINE void cp_async_ca_shared_global(void* dst, const void* src, uint32_t src_size = N) {
    static_assert(N == 4 || N == 8 || N == 16, "cp.async.ca copies 4, 8 or 16 bytes");
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(shared_address(dst)), "l"(src), "n"(N),
                 "r"(src_size)
                 : "memory");
}
template <int N> MPK_DEVICE MPK_INLINE void cp_async_cg_shared_global(void* dst, const void* src, uint32_t src_size = N) {
    static_assert(N == 16, "cp.async.cg copies 16 bytes");
    asm volatile("cp.async.cg.shared.global [%0], [%1], %2, %3;" ::"r"(shared_address(dst)), "l"(src), "n"(N),
                 "r"(src_size)
                 : "memory");
}
MPK_DEVICE MPK_INLINE void cp_async_commit_group() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> MPK_DEVICE MPK_INLINE void cp_async_wait_group() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
MPK_DEVICE MPK_INLINE void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

MPK_DEVICE MPK_INLINE void mbarrier_init_shared_b64(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
MPK_DEVICE MPK_INLINE uint64_t mbarrier_arrive_shared_b64(uint64_t* bar) {
    uint64_t state;
    asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(state) : "r"(shared_address(bar)) : "memory");
    return state;
}
MPK_DEVICE MPK_INLINE bool mbarrier_test_wait_parity_shared_b64(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n .reg .pred p;\n mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(shared_address(bar)), "r"(parity) : "memory");
    return done != 0;
}
MPK_DEVICE MPK_INLINE void mbarrier_inval_shared_b64(uint64_t* bar) {
    asm volatile("mbarrier.inval.shared::cta.b64 [%0];" ::"r"(shared_address(bar)) : "memory");
}
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
MPK_DEVICE MPK_INLINE uint64_t mbarrier_arrive_expect_tx_shared_b64(uint64_t* bar, uint32_t tx) {
    uint64_t state;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(state)
                 : "r"(shared_address(bar)), "r"(tx) : "memory");
    return state;
}
MPK_DEVICE MPK_INLINE void mbarrier_expect_tx_shared_b64(uint64_t* bar, uint32_t tx) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(tx)
                 : "memory");
}
MPK_DEVICE MPK_INLINE void mbarrier_complete_tx_shared_b64(uint64_t* bar, uint32_t tx) {
    asm volatile("mbarrier.complete_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(shared_address(bar)), "r"(tx)
                 : "memory");
}
MPK_DEVICE MPK_INLINE bool mbarrier_try_wait_parity_shared_b64(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(shared_address(bar)), "r"(parity) : "memory");
    return done != 0;
}
MPK_DEVICE MPK_INLINE void mbarrier_wait_parity(uint64_t* bar, uint32_t parity) {
    while (!mbarrier_try_wait_parity_shared_b64(bar, parity)) {
    }
}
#endif

// CUtensorMap's size and alignment (cuda.h, not included here: half a second of every nvcc build that
// includes this header; tests/csrc/ptx_probe.cu checks the layout and the enum values below against it).
struct alignas(128) TensorMap {
    uint64_t opaque[16];
};
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
MPK_DEVICE MPK_INLINE void cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(
    void* dst, const TensorMap* map, int32_t c0, int32_t c1, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
                 ::"r"(shared_address(dst)), "l"(map), "r"(c0), "r"(c1), "r"(shared_address(bar)) : "memory");
}
MPK_DEVICE MPK_INLINE void cp_async_bulk_tensor_3d_shared_cluster_global_mbarrier_complete_tx_bytes(
    void* dst, const TensorMap* map, int32_t c0, int32_t c1, int32_t c2, uint64_t* bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];"
                 ::"r"(shared_address(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(shared_address(bar)) : "memory");
}
MPK_DEVICE MPK_INLINE void cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(const TensorMap* map, int32_t c0, int32_t c1,
                                                                               const void* src) {
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
                 ::"l"(map), "r"(shared_address(src)), "r"(c0), "r"(c1) : "memory");
}
MPK_DEVICE MPK_INLINE void cp_async_bulk_tensor_3d_global_shared_cta_bulk_group(const TensorMap* map, int32_t c0, int32_t c1,
                                                                               int32_t c2, const void* src) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];"
                 ::"l"(map), "r"(shared_address(src)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
MPK_DEVICE MPK_INLINE void cp_async_bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
template <int N> MPK_DEVICE MPK_INLINE void cp_async_bulk_wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;" ::"n"(N) : "memory");
}
template <int N> MPK_DEVICE MPK_INLINE void cp_async_bulk_wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" ::"n"(N) : "memory");
}
MPK_DEVICE MPK_INLINE void fence_proxy_async_shared_cta() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
#endif

#else  // the host compiler: runtime/simt_cpu_ptx.h, runtime/simt_cpu_async.h

#define MPK_PTX_MMA(NAME, OP, NA, NB)                                                                    \
    inline void NAME(float (&d)[4], const uint32_t (&a)[NA], const uint32_t (&b)[NB], const float (&c)[4], \
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {                 \
        using namespace ::mpk::simt::detail;                                                             \
        matrix_op(Op::OP, MatrixLane{&matrix_complete, a, b, c, d, nullptr, nullptr}, file, line);       \
    }
MPK_PTX_MMA(mma_m16n8k16_row_col_f32_bf16_bf16_f32, MmaK16Bf16, 4, 2)
MPK_PTX_MMA(mma_m16n8k16_row_col_f32_f16_f16_f32, MmaK16F16, 4, 2)
MPK_PTX_MMA(mma_m16n8k8_row_col_f32_bf16_bf16_f32, MmaK8Bf16, 2, 1)
MPK_PTX_MMA(mma_m16n8k8_row_col_f32_f16_f16_f32, MmaK8F16, 2, 1)
MPK_PTX_MMA(mma_m16n8k32_row_col_f32_e4m3_e4m3_f32, MmaK32E4m3, 4, 2)
#undef MPK_PTX_MMA

#define MPK_PTX_LDMATRIX(NAME, OP, N)                                                                        \
    inline void NAME(uint32_t (&r)[N], const void* row, const char* file = __builtin_FILE(),                 \
                     int line = __builtin_LINE()) {                                                          \
        using namespace ::mpk::simt::detail;                                                                 \
        matrix_op(Op::OP, MatrixLane{&matrix_complete, nullptr, nullptr, nullptr, nullptr, row, r}, file, line); \
    }
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x1_shared_b16, LdmX1, 1)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x2_shared_b16, LdmX2, 2)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x4_shared_b16, LdmX4, 4)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x1_trans_shared_b16, LdmX1T, 1)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x2_trans_shared_b16, LdmX2T, 2)
MPK_PTX_LDMATRIX(ldmatrix_m8n8_x4_trans_shared_b16, LdmX4T, 4)
#undef MPK_PTX_LDMATRIX

template <int N>
inline void cp_async_ca_shared_global(void* dst, const void* src, uint32_t src_size = N,
                                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(N == 4 || N == 8 || N == 16, "cp.async.ca copies 4, 8 or 16 bytes");
    ::mpk::simt::detail::cp_async("cp.async.ca.shared.global", dst, src, N, src_size, file, line);
}
template <int N>
inline void cp_async_cg_shared_global(void* dst, const void* src, uint32_t src_size = N,
                                      const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(N == 16, "cp.async.cg copies 16 bytes");
    ::mpk::simt::detail::cp_async("cp.async.cg.shared.global", dst, src, N, src_size, file, line);
}
inline void cp_async_commit_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::cp_async_commit_group(file, line);
}
template <int N> inline void cp_async_wait_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(N >= 0, "cp.async.wait_group takes a count of groups");
    ::mpk::simt::detail::cp_async_wait_group(N, file, line);
}
// cp.async.wait_all is cp.async.commit_group then cp.async.wait_group 0 (the PTX ISA).
inline void cp_async_wait_all(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::cp_async_commit_group(file, line);
    ::mpk::simt::detail::cp_async_wait_group(0, file, line);
}

inline void mbarrier_init_shared_b64(uint64_t* bar, uint32_t count, const char* file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
    ::mpk::simt::detail::mbarrier_init(bar, count, file, line);
}
inline uint64_t mbarrier_arrive_shared_b64(uint64_t* bar, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    return ::mpk::simt::detail::mbarrier_arrive(bar, false, 0, "mbarrier.arrive.shared::cta.b64", file, line);
}
inline uint64_t mbarrier_arrive_expect_tx_shared_b64(uint64_t* bar, uint32_t tx, const char* file = __builtin_FILE(),
                                                     int line = __builtin_LINE()) {
    return ::mpk::simt::detail::mbarrier_arrive(bar, true, tx, "mbarrier.arrive.expect_tx.shared::cta.b64", file, line);
}
inline void mbarrier_expect_tx_shared_b64(uint64_t* bar, uint32_t tx, const char* file = __builtin_FILE(),
                                          int line = __builtin_LINE()) {
    ::mpk::simt::detail::mbarrier_tx(bar, int64_t(tx), "mbarrier.expect_tx.relaxed.cta.shared::cta.b64", file, line);
}
inline void mbarrier_complete_tx_shared_b64(uint64_t* bar, uint32_t tx, const char* file = __builtin_FILE(),
                                            int line = __builtin_LINE()) {
    ::mpk::simt::detail::mbarrier_tx(bar, -int64_t(tx), "mbarrier.complete_tx.relaxed.cta.shared::cta.b64", file, line);
}
inline bool mbarrier_test_wait_parity_shared_b64(uint64_t* bar, uint32_t parity, const char* file = __builtin_FILE(),
                                                 int line = __builtin_LINE()) {
    return ::mpk::simt::detail::mbarrier_wait_parity(bar, parity, "mbarrier.test_wait.parity.shared::cta.b64", file, line);
}
inline bool mbarrier_try_wait_parity_shared_b64(uint64_t* bar, uint32_t parity, const char* file = __builtin_FILE(),
                                                int line = __builtin_LINE()) {
    return ::mpk::simt::detail::mbarrier_wait_parity(bar, parity, "mbarrier.try_wait.parity.shared::cta.b64", file, line);
}
inline void mbarrier_wait_parity(uint64_t* bar, uint32_t parity, const char* file = __builtin_FILE(),
                                 int line = __builtin_LINE()) {
    while (!mbarrier_try_wait_parity_shared_b64(bar, parity, file, line)) {
    }
}
inline void mbarrier_inval_shared_b64(uint64_t* bar, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::mbarrier_inval(bar, file, line);
}

using TensorMap = ::mpk::simt::TensorMapCpu;
inline void cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(
    void* dst, const TensorMap* map, int32_t c0, int32_t c1, uint64_t* bar, const char* file = __builtin_FILE(),
    int line = __builtin_LINE()) {
    const int32_t c[3] = {c0, c1, 0};
    ::mpk::simt::detail::tma_load("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes", 2, dst,
                                  map, c, bar, file, line);
}
inline void cp_async_bulk_tensor_3d_shared_cluster_global_mbarrier_complete_tx_bytes(
    void* dst, const TensorMap* map, int32_t c0, int32_t c1, int32_t c2, uint64_t* bar,
    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    const int32_t c[3] = {c0, c1, c2};
    ::mpk::simt::detail::tma_load("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes", 3, dst,
                                  map, c, bar, file, line);
}
inline void cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(const TensorMap* map, int32_t c0, int32_t c1,
                                                                const void* src, const char* file = __builtin_FILE(),
                                                                int line = __builtin_LINE()) {
    const int32_t c[3] = {c0, c1, 0};
    ::mpk::simt::detail::tma_store("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group", 2, src, map, c, file, line);
}
inline void cp_async_bulk_tensor_3d_global_shared_cta_bulk_group(const TensorMap* map, int32_t c0, int32_t c1, int32_t c2,
                                                                const void* src, const char* file = __builtin_FILE(),
                                                                int line = __builtin_LINE()) {
    const int32_t c[3] = {c0, c1, c2};
    ::mpk::simt::detail::tma_store("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group", 3, src, map, c, file, line);
}
inline void cp_async_bulk_commit_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::bulk_commit_group(file, line);
}
// (wait_group and wait_group.read are the same here: a store reads its source and writes the tensor as it lands)
template <int N> inline void cp_async_bulk_wait_group(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::bulk_wait_group(N, file, line);
}
template <int N> inline void cp_async_bulk_wait_group_read(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::bulk_wait_group(N, file, line);
}
inline void fence_proxy_async_shared_cta(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    ::mpk::simt::detail::fence_proxy_async(file, line);
}

#endif

// The tensor map of a tensor at `base` (host code): rank 1 to 3, dims[d] elements along dimension d
// (0 contiguous), strides[d] bytes between its consecutive indices (strides[0] = elem_bytes), a box of
// box[d] elements, swizzle 0 (none) or 1, 2, 3 (32-, 64-, 128-byte; CUtensorMapSwizzle's values); tiled,
// no interleave, zero fill. Returns "" when *out is made, else what is wrong with the request (the
// limits cuTensorMapEncodeTiled sets, checked here on both backends; under CUDA also its own refusal).
inline std::string make_tensor_map(TensorMap* out, const void* base, uint32_t rank, uint32_t elem_bytes,
                                   const uint64_t* dims, const uint64_t* strides, const uint32_t* box, uint32_t swizzle) {
    auto n = [](uint64_t v) { return std::to_string(v); };
    if (rank < 1 || rank > 3) return "rank " + n(rank) + " is not 1, 2 or 3";
    if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8)
        return "element size " + n(elem_bytes) + " is not 1, 2, 4 or 8 bytes";
    if (reinterpret_cast<uintptr_t>(base) % 16) return "the base address is not 16-byte aligned";
    if (swizzle > 3) return "swizzle " + n(swizzle) + " is not 0 (none), 1 (32-byte), 2 (64-byte) or 3 (128-byte)";
    if (strides[0] != elem_bytes) return "strides[0] = " + n(strides[0]) + ": dimension 0 must be contiguous";
    for (uint32_t d = 0; d < rank; ++d) {
        if (dims[d] < 1 || dims[d] > (uint64_t(1) << 32)) return "dims[" + n(d) + "] = " + n(dims[d]) + " is outside [1, 2^32]";
        if (box[d] < 1 || box[d] > 256) return "box[" + n(d) + "] = " + n(box[d]) + " is outside [1, 256]";
        if (d && (strides[d] % 16 || strides[d] >= (uint64_t(1) << 40)))
            return "strides[" + n(d) + "] = " + n(strides[d]) + " bytes is not a multiple of 16 below 2^40";
    }
    const uint64_t inner = uint64_t(box[0]) * elem_bytes;
    if (inner % 16) return "the box's inner extent, " + n(inner) + " bytes, is not a multiple of 16";
    if (swizzle && inner > (16u << swizzle))
        return "the box's inner extent, " + n(inner) + " bytes, is wider than the " + n(16u << swizzle) + "-byte swizzle";
#if defined(__CUDACC__)
    // cuTensorMapEncodeTiled (driver API, CUDA 12.0's signature) through the runtime's entry-point lookup, so
    // a module needs no libcuda at link time; its enums as their values (cuda.h: data types UINT8 0,
    // UINT16 1, UINT32 2, UINT64 4; interleave, L2 promotion and OOB fill NONE 0; CUDA_SUCCESS 0).
    using Encode = int (*)(TensorMap*, int, uint32_t, void*, const uint64_t*, const uint64_t*, const uint32_t*,
                           const uint32_t*, int, int, int, int);
    static const Encode encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return reinterpret_cast<Encode>(fn);
    }();
    if (!encode) return "the CUDA driver has no cuTensorMapEncodeTiled";
    const int type = elem_bytes == 1 ? 0 : elem_bytes == 2 ? 1 : elem_bytes == 4 ? 2 : 4;
    const uint32_t ones[3] = {1, 1, 1};
    const int r = encode(out, type, rank, const_cast<void*>(base), dims, strides + 1, box, ones, 0, int(swizzle), 0, 0);
    if (r != 0) return "cuTensorMapEncodeTiled refused it (CUresult " + n(uint64_t(r)) + ")";
#else
    *out = TensorMap{};
    out->magic = ::mpk::simt::kTensorMapMagic;
    out->rank = rank;
    out->elem_bytes = elem_bytes;
    out->swizzle = swizzle;
    out->base = static_cast<const char*>(base);
    for (uint32_t d = 0; d < rank; ++d) {
        out->dims[d] = dims[d];
        out->strides[d] = strides[d];
        out->box[d] = box[d];
    }
#endif
    return "";
}

}  // namespace ptx
}  // namespace mpk

#include "ptx_wgmma.h"  // wgmma, stmatrix, matrix descriptors
