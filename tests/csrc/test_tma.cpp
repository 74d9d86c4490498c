// test_tma.cpp: the tensor memory accelerator of csrc/runtime/ptx.h on the CPU emulation
// (csrc/runtime/simt_cpu_tma.h), against the PTX ISA and the CUDA driver API's tensor maps:
//   - conformance: a box of a 2-D tensor (and of a 3-D one) at coordinates inside, across and outside
//     its edges lands where the swizzle mode puts it, written out below as the modes are documented
//     (16-byte granules permuted within each 32-, 64- or 128-byte span: granule g of a span goes to
//     g XOR (the 128-byte row's index mod the span's granule count)), with zeros outside the tensor;
//   - asynchrony: over seeds the box is seen both landed at its issue and still in flight (the poison)
//     until the wait on its mbarrier; the wait lands it;
//   - make_tensor_map refuses what cuTensorMapEncodeTiled refuses, with the reason;
//   - stores: a tile written by the threads in that layout, fenced, stored as a box inside and across the
//     edges (clipped), whatever the landing moment; no fence, a source reused before its read, an exit
//     with a store pending: named;
//   - every named error, with the call site's line, beside its fixed kernel.
// Run:  bash tests/csrc/run_simt_tests.sh ptx   (plain, TSan and ASan+UBSan builds)
#include "runtime/ptx.h"

#include <stdio.h>
#include <string>
#include <vector>

#include "simt_check.h"

using mpk::ptx::TensorMap;
using namespace mpk::ptx;

#define NEXT_LINE(var) __atomic_store_n(&(var), __LINE__ + 1, __ATOMIC_RELAXED)
static std::string at_line(int line) { return "test_tma.cpp:" + std::to_string(line); }

// The documented swizzle: the byte at offset o of a box whose destination is at shared address `dst`.
static size_t swizzled_offset(uintptr_t dst, size_t o, int mode) {
    if (mode == 0) return o;
    const size_t span = size_t(16) << mode, granules = span / 16;  // 32 / 64 / 128 bytes: 2 / 4 / 8 granules
    const uintptr_t a = dst + o;
    const size_t row = (a / 128) % granules;                        // the 128-byte row, modulo the granules
    const size_t granule = (a % span) / 16;                         // which 16-byte granule of its span
    const uintptr_t moved = a - (a % span) + ((granule ^ row) * 16) + (a % 16);
    return size_t(moved - dst);
}

// A 2-D uint16 tensor [rows][cols] (value 1 + r * cols + c), and a box of bw x bh at (x, y).
static void test_conformance() {
    const int before = g_failures;
    const uint64_t rows = 40, cols = 104;  // rows of 208 bytes: a multiple of 16, as a map requires
    std::vector<uint16_t> t(rows * cols + 8);
    uint16_t* tensor = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(t.data()) + 15) & ~uintptr_t(15));
    for (uint64_t i = 0; i < rows * cols; ++i) tensor[i] = uint16_t(1 + i);
    int cases = 0;
    for (int mode = 0; mode <= 3; ++mode) {
        const uint32_t bw = mode ? 8u << mode : 64, bh = 16;  // the inner extent fills the span
        const uint64_t dims[2] = {cols, rows}, strides[2] = {2, cols * 2};
        const uint32_t box[2] = {bw, bh};
        TensorMap map;
        const std::string why = make_tensor_map(&map, tensor, 2, 2, dims, strides, box, uint32_t(mode));
        CHECK(why.empty(), "mode %d: %s", mode, why.c_str());
        const int32_t coords[][2] = {{0, 0}, {13, 7}, {int32_t(cols) - 5, int32_t(rows) - 3}, {-3, -2}, {200, 1}};
        for (const auto& xy : coords) {
            std::vector<uint16_t> got(bw * bh);
            uintptr_t dst_addr = 0;
            const std::string e = error_of({32, 8192, uint64_t(cases + 1)}, [&] {
                uint64_t* bar = mpk::smem<uint64_t>(4096, 1);
                char* dst = mpk::smem<char>(0, 4096);
                if (threadIdx.x == 0) {
                    mbarrier_init_shared_b64(bar, 1);
                    mbarrier_arrive_expect_tx_shared_b64(bar, bw * bh * 2);
                    cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(dst, &map, xy[0], xy[1], bar);
                }
                __syncthreads();
                mbarrier_wait_parity(bar, 0);
                if (threadIdx.x == 0) {
                    dst_addr = reinterpret_cast<uintptr_t>(dst);
                    memcpy(got.data(), dst, got.size() * 2);
                }
            });
            CHECK(e.empty(), "mode %d at (%d, %d): %s", mode, xy[0], xy[1], e.c_str());
            for (uint32_t r = 0; r < bh; ++r)
                for (uint32_t c = 0; c < bw; ++c) {
                    const int64_t gx = xy[0] + int64_t(c), gy = xy[1] + int64_t(r);
                    const bool inside = gx >= 0 && gx < int64_t(cols) && gy >= 0 && gy < int64_t(rows);
                    const uint16_t want = inside ? tensor[gy * int64_t(cols) + gx] : 0;
                    const size_t at = swizzled_offset(dst_addr, (size_t(r) * bw + c) * 2, mode) / 2;
                    CHECK(got[at] == want, "mode %d box at (%d, %d) element (%u, %u): %u at %zu, want %u", mode, xy[0],
                          xy[1], r, c, got[at], at, want);
                }
            if (mode == 3 && xy[0] == 13) {  // the control: the 64-byte mode's formula must not read this box right
                int wrong = 0;
                for (uint32_t r = 0; r < bh; ++r)
                    for (uint32_t c = 0; c < bw; ++c)
                        wrong += got[swizzled_offset(dst_addr, (size_t(r) * bw + c) * 2, 2) / 2] !=
                                 tensor[(xy[1] + r) * cols + xy[0] + c];
                CHECK(wrong > 0, "the control: the 64-byte formula reads the 128-byte box right");
                printf("  control: the 64-byte swizzle's formula misreads %d of %u elements of a 128-byte box\n", wrong, bw * bh);
            }
            ++cases;
        }
    }
    // 3-D: [4][10][32] uint32, box 8 x 3 x 2 at (28, 8, 2): across two edges, no swizzle
    std::vector<uint32_t> t3(4 * 10 * 32 + 4);
    uint32_t* v = reinterpret_cast<uint32_t*>((reinterpret_cast<uintptr_t>(t3.data()) + 15) & ~uintptr_t(15));
    for (int i = 0; i < 4 * 10 * 32; ++i) v[i] = uint32_t(7 + i);
    const uint64_t dims3[3] = {32, 10, 4}, strides3[3] = {4, 128, 1280};
    const uint32_t box3[3] = {8, 3, 2};
    TensorMap map3;
    CHECK(make_tensor_map(&map3, v, 3, 4, dims3, strides3, box3, 0).empty(), "3-D map");
    std::vector<uint32_t> got3(48);
    const std::string e3 = error_of({32, 1024, 9}, [&] {
        uint64_t* bar = mpk::smem<uint64_t>(512, 1);
        uint32_t* dst = mpk::smem<uint32_t>(0, 48);
        if (threadIdx.x == 0) {
            mbarrier_init_shared_b64(bar, 1);
            mbarrier_arrive_expect_tx_shared_b64(bar, 192);
            cp_async_bulk_tensor_3d_shared_cluster_global_mbarrier_complete_tx_bytes(dst, &map3, 28, 8, 2, bar);
        }
        __syncthreads();
        mbarrier_wait_parity(bar, 0);
        if (threadIdx.x == 0) memcpy(got3.data(), dst, 192);
    });
    CHECK(e3.empty(), "3-D: %s", e3.c_str());
    for (int z = 0; z < 2; ++z)
        for (int y = 0; y < 3; ++y)
            for (int x = 0; x < 8; ++x) {
                const int gx = 28 + x, gy = 8 + y, gz = 2 + z;
                const uint32_t want = gx < 32 && gy < 10 && gz < 4 ? v[(gz * 10 + gy) * 32 + gx] : 0;
                CHECK(got3[(z * 3 + y) * 8 + x] == want, "3-D element (%d, %d, %d)", x, y, z);
            }
    report("TMA boxes: 4 swizzle modes x 5 places, and 3-D", before, std::to_string(cases) + " 2-D boxes");
}

// The calling thread's box: a barrier of count 1 at `bar` expecting `bytes`, and the copy of the box at
// (0, y) into dst (every instruction with the caller's call site).
static void one_box(uint64_t* bar, void* dst, const TensorMap* map, int32_t y, uint32_t bytes,
                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    mbarrier_init_shared_b64(bar, 1, file, line);
    mbarrier_arrive_expect_tx_shared_b64(bar, bytes, file, line);
    cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(dst, map, 0, y, bar, file, line);
}

// Seen right after its issue the box is either landed or still the poison; the wait always lands it.
static void test_asynchrony() {
    const int before = g_failures;
    alignas(16) static uint32_t src[64];
    for (int i = 0; i < 64; ++i) src[i] = 0x01020304u + uint32_t(i);
    const uint64_t dims[2] = {64, 1}, strides[2] = {4, 256};
    const uint32_t box[2] = {64, 1};
    TensorMap map;
    CHECK(make_tensor_map(&map, src, 2, 4, dims, strides, box, 0).empty(), "a one-row map");
    int early = 0, late = 0;
    for (uint64_t seed = 1; seed <= 24; ++seed) {
        uint32_t seen_at_issue = 0, seen_after_wait = 0;
        const std::string e = error_of({32, 1024, seed}, [&] {
            uint64_t* bar = mpk::smem<uint64_t>(512, 1);
            uint32_t* dst = mpk::smem<uint32_t>(0, 64);
            if (threadIdx.x) return;
            one_box(bar, dst, &map, 0, 256);
            seen_at_issue = dst[5];      // a plain read before the wait: the data or the in-flight poison
            mbarrier_wait_parity(bar, 0);
            seen_after_wait = dst[5];
        });
        CHECK(e.empty(), "seed %d: %s", int(seed), e.c_str());
        CHECK(seen_after_wait == src[5], "seed %d: after the wait %08x", int(seed), seen_after_wait);
        CHECK(seen_at_issue == src[5] || seen_at_issue == 0xFFFFFFFFu, "seed %d: at issue %08x", int(seed), seen_at_issue);
        early += seen_at_issue == src[5];
        late += seen_at_issue == 0xFFFFFFFFu;
    }
    CHECK(early > 0 && late > 0, "both orders over 24 seeds: landed at issue %d, in flight %d", early, late);
    report("TMA lands between its issue and the wait", before,
           "24 seeds: landed at issue " + std::to_string(early) + ", in flight until the wait " + std::to_string(late));
}

static void test_errors() {
    const int before = g_failures;
    std::string e;
    int line = 0;
    alignas(16) static uint16_t src[16 * 64];
    for (int i = 0; i < 16 * 64; ++i) src[i] = uint16_t(i + 1);
    const uint64_t dims[2] = {64, 16}, strides[2] = {2, 128};
    const uint32_t box[2] = {64, 8};
    TensorMap map;
    CHECK(make_tensor_map(&map, src, 2, 2, dims, strides, box, 3).empty(), "the map");
    const char* form = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes";
    // an ldmatrix of the box before the wait on its barrier: named on the seeds where it is still in flight
    for (bool wait : {false, true}) {
        int named = 0, clean = 0;
        for (uint64_t seed = 1; seed <= 12; ++seed) {
            e = error_of({32, 2048, seed}, [&] {
                uint64_t* bar = mpk::smem<uint64_t>(1024, 1);
                char* dst = mpk::smem<char>(0, 1024);
                if (threadIdx.x == 0) one_box(bar, dst, &map, 0, 1024);
                __syncthreads();
                if (wait) mbarrier_wait_parity(bar, 0);
                uint32_t r[4];
                NEXT_LINE(line);
                ldmatrix_m8n8_x4_shared_b16(r, dst + threadIdx.x * 16);
                if (!wait) mbarrier_wait_parity(bar, 0);
            });
            named += has(e, "ldmatrix.sync.aligned.m8n8.x4.shared.b16 at " + at_line(line)) && has(e, form) &&
                     has(e, "(completing on its mbarrier)");
            clean += e.empty();
            if (!wait && named == 1 && has(e, "its mbarrier has not been waited on")) printf("  %-34s %s\n", "ldmatrix before the wait", e.c_str());
        }
        if (wait)
            CHECK(clean == 12, "with the wait first: %d of 12 seeds clean", clean);
        else
            CHECK(named > 0 && named + clean == 12, "without the wait: named on %d seeds, clean on %d", named, clean);
    }
    // expect_tx short by one box: two boxes complete on a barrier that expects one. The first box's bytes
    // complete the phase, the wait passes, and the second box's bytes are left over in the next phase:
    // named as the block ends, on every seed (the control, the whole expect_tx, is the ldmatrix case above)
    int short_named = 0;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
        e = error_of({32, 4096, seed}, [&] {
            uint64_t* bar = mpk::smem<uint64_t>(2048, 1);
            char* dst = mpk::smem<char>(0, 2048);
            if (threadIdx.x == 0) {
                NEXT_LINE(line);
                mbarrier_init_shared_b64(bar, 1);
                mbarrier_arrive_expect_tx_shared_b64(bar, 1024);
                cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(dst, &map, 0, 0, bar);
                cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(dst + 1024, &map, 0, 8, bar);
            }
            __syncthreads();
            mbarrier_wait_parity(bar, 0);
        });
        if (seed == 1)
            expect("expect_tx short by one box", e, {"dynamic shared memory + 2048 (mbarrier.init at " + at_line(line),
                                                     "ends its block in phase 1", "-1024 transaction bytes outstanding",
                                                     "more bytes completed on it than expect_tx announced"});
        short_named += has(e, "more bytes completed on it than expect_tx announced");
    }
    CHECK(short_named == 6, "expect_tx short by one box named on %d of 6 seeds", short_named);
    // a thread that exits with its copy in flight (the control: the wait, above, on every seed)
    int exits = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        e = error_of({32, 2048, seed}, [&] {
            uint64_t* bar = mpk::smem<uint64_t>(1024, 1);
            if (threadIdx.x) return;
            NEXT_LINE(line);
            one_box(bar, mpk::smem<char>(0, 1024), &map, 0, 1024);
        });
        if (has(e, "exits with 1 cp.async copy in flight") && has(e, std::string(form) + " 1024 bytes at " + at_line(line)) &&
            has(e, "a wait on its mbarrier must see it land")) {
            if (!exits++) printf("  %-34s %s\n", "exit with a copy in flight", e.c_str());
        } else {
            CHECK(e.empty(), "seed %d: %s", int(seed), e.c_str());
        }
    }
    CHECK(exits > 0, "an exit with the copy in flight was never named over 12 seeds");
    // a store into the box while it is in flight: named as it lands (seed 2 lands it at the wait)
    int stores = 0;
    for (uint64_t seed = 1; seed <= 12; ++seed) {
        e = error_of({32, 2048, seed}, [&] {
            uint64_t* bar = mpk::smem<uint64_t>(1024, 1);
            char* dst = mpk::smem<char>(0, 1024);
            if (threadIdx.x) return;
            one_box(bar, dst, &map, 0, 1024);
            dst[100] = 1;
            mbarrier_wait_parity(bar, 0);
        });
        if (has(e, "was written while the copy was in flight")) {
            if (!stores++) printf("  %-34s %s\n", "a store into the box in flight", e.c_str());
        }
    }
    CHECK(stores > 0, "a store into a box in flight was never named over 12 seeds");
    // the destination, the map, the rank
    e = error_of({32, 2048, 4}, [&] {
        uint64_t* bar = mpk::smem<uint64_t>(1920, 1);
        if (threadIdx.x) return;
        mbarrier_init_shared_b64(bar, 1);
        NEXT_LINE(line);
        cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(mpk::smem<char>(0, 1100) + 64, &map, 0, 0, bar);
    });
    expect("box not 128-byte aligned", e, {at_line(line), "is not 128-byte aligned"});
    TensorMap junk{};
    e = error_of({32, 2048, 5}, [&] {
        uint64_t* bar = mpk::smem<uint64_t>(1920, 1);
        if (threadIdx.x) return;
        mbarrier_init_shared_b64(bar, 1);
        NEXT_LINE(line);
        cp_async_bulk_tensor_2d_shared_cluster_global_mbarrier_complete_tx_bytes(mpk::smem<char>(0, 1024), &junk, 0, 0, bar);
    });
    expect("a map not made", e, {at_line(line), "is not one (build it with mpk::ptx::make_tensor_map)"});
    e = error_of({32, 2048, 6}, [&] {
        uint64_t* bar = mpk::smem<uint64_t>(1920, 1);
        if (threadIdx.x) return;
        mbarrier_init_shared_b64(bar, 1);
        NEXT_LINE(line);
        cp_async_bulk_tensor_3d_shared_cluster_global_mbarrier_complete_tx_bytes(mpk::smem<char>(0, 1024), &map, 0, 0, 0, bar);
    });
    expect("rank mismatch", e, {at_line(line), "the tensor map has rank 2, the instruction 3"});
    // make_tensor_map's refusals (cuTensorMapEncodeTiled's limits)
    TensorMap m;
    const uint64_t wide_dims[2] = {128, 16}, wide_strides[2] = {2, 256}, odd_strides[2] = {2, 136};
    const uint32_t wide_box[2] = {128, 8}, big_box[2] = {64, 300};
    const std::string r1 = make_tensor_map(&m, src, 2, 2, wide_dims, wide_strides, wide_box, 3);
    const std::string r2 = make_tensor_map(&m, src, 2, 2, dims, odd_strides, box, 0);
    const std::string r3 = make_tensor_map(&m, src, 2, 2, dims, strides, big_box, 0);
    const std::string r4 = make_tensor_map(&m, reinterpret_cast<const char*>(src) + 8, 2, 2, dims, strides, box, 0);
    expect("map: box wider than the swizzle", r1, {"the box's inner extent, 256 bytes, is wider than the 128-byte swizzle"});
    expect("map: row stride", r2, {"strides[1] = 136 bytes is not a multiple of 16"});
    expect("map: box too big", r3, {"box[1] = 300 is outside [1, 256]"});
    expect("map: base misaligned", r4, {"the base address is not 16-byte aligned"});
    report("TMA named errors", before);
}

// TMA stores: 128 threads write a tile into shared memory in the swizzled layout written out above, fence,
// and thread 0 stores it as a box at places inside and across the tensor's edges; the tensor must hold the
// tile where the box is inside it and its old values everywhere else, whatever the landing moment.
static void test_stores() {
    const int before = g_failures;
    const uint64_t rows = 24, cols = 72;  // rows of 144 bytes
    std::vector<uint16_t> t(rows * cols + 8);
    uint16_t* out = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(t.data()) + 15) & ~uintptr_t(15));
    int cases = 0;
    for (int mode = 0; mode <= 3; ++mode) {
        const uint32_t bw = mode ? 8u << mode : 64, bh = 8;
        const uint64_t dims[2] = {cols, rows}, strides[2] = {2, cols * 2};
        const uint32_t box[2] = {bw, bh};
        TensorMap map;
        CHECK(make_tensor_map(&map, out, 2, 2, dims, strides, box, uint32_t(mode)).empty(), "store map %d", mode);
        const int32_t coords[][2] = {{0, 0}, {int32_t(cols) - int32_t(bw) / 2, 20}, {-5, -3}};
        for (const auto& xy : coords) {
            for (uint64_t i = 0; i < rows * cols; ++i) out[i] = 0xBEEF;
            const std::string e = error_of({128, 4096, uint64_t(31 + cases)}, [&] {
                char* src = mpk::smem<char>(0, 2048);
                const uintptr_t base = reinterpret_cast<uintptr_t>(src);
                for (uint32_t i = threadIdx.x; i < bw * bh; i += 128) {  // element (r, c) = 1000 r + c + 1
                    const uint16_t v = uint16_t(1000 * (i / bw) + i % bw + 1);
                    memcpy(src + swizzled_offset(base, size_t(i) * 2, mode), &v, 2);
                }
                fence_proxy_async_shared_cta();
                __syncthreads();
                if (threadIdx.x) return;
                cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(&map, xy[0], xy[1], src);
                cp_async_bulk_commit_group();
                cp_async_bulk_wait_group_read<0>();
            });
            CHECK(e.empty(), "store mode %d at (%d, %d): %s", mode, xy[0], xy[1], e.c_str());
            int written = 0;
            for (int64_t y = 0; y < int64_t(rows); ++y)
                for (int64_t x = 0; x < int64_t(cols); ++x) {
                    const int64_t r = y - xy[1], c = x - xy[0];
                    const bool in_box = r >= 0 && r < int64_t(bh) && c >= 0 && c < int64_t(bw);
                    const uint16_t want = in_box ? uint16_t(1000 * r + c + 1) : uint16_t(0xBEEF);
                    written += in_box;
                    CHECK(out[y * int64_t(cols) + x] == want, "store mode %d at (%d, %d): tensor (%d, %d) %u, want %u", mode,
                          xy[0], xy[1], int(y), int(x), out[y * int64_t(cols) + x], want);
                }
            CHECK(written > 0, "some of the box is inside");
            ++cases;
        }
    }
    report("TMA stores: 4 swizzle modes x 3 places", before, std::to_string(cases) + " boxes");
}

static void test_store_errors() {
    const int before = g_failures;
    alignas(16) static uint16_t dst[8 * 64];
    const uint64_t dims[2] = {64, 8}, strides[2] = {2, 128};
    const uint32_t box[2] = {64, 8};
    TensorMap map;
    CHECK(make_tensor_map(&map, dst, 2, 2, dims, strides, box, 3).empty(), "the map");
    int line = 0;
    // the generic proxy's writes with no fence.proxy.async before the store (the control: with it)
    for (bool fence : {false, true}) {
        const std::string e = error_of({128, 2048, 7}, [&] {
            char* src = mpk::smem<char>(0, 1024);
            for (int i = int(threadIdx.x); i < 1024; i += 128) src[i] = char(i);
            if (fence) fence_proxy_async_shared_cta();
            __syncthreads();
            if (threadIdx.x) return;
            NEXT_LINE(line);
            cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(&map, 0, 0, src);
            cp_async_bulk_commit_group();
            cp_async_bulk_wait_group<0>();
        });
        if (fence)
            CHECK(e.empty(), "with the fence: %s", e.c_str());
        else
            expect("store with no fence.proxy.async", e, {"cp.async.bulk.tensor.2d.global.shared::cta.bulk_group at " +
                                                          at_line(line), "was written after the last fence.proxy.async"});
    }
    // the source reused before wait_group.read covered the store: named on the seeds where it lands late
    // (the control: the wait first, on every seed)
    for (bool wait_first : {false, true}) {
        int named = 0, clean = 0;
        for (uint64_t seed = 1; seed <= 12; ++seed) {
            const std::string e = error_of({32, 2048, seed}, [&] {
                char* src = mpk::smem<char>(0, 1024);
                if (threadIdx.x) return;
                fence_proxy_async_shared_cta();
                NEXT_LINE(line);
                cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(&map, 0, 0, src);
                cp_async_bulk_commit_group();
                if (wait_first) cp_async_bulk_wait_group_read<0>();
                src[5] = 1;  // the next tile
                cp_async_bulk_wait_group_read<0>();
            });
            clean += e.empty();
            if (has(e, "was written before the store read it") && has(e, at_line(line)) && !named++)
                printf("  %-34s %s\n", "source reused before the read", e.c_str());
        }
        if (wait_first)
            CHECK(clean == 12, "the wait first: %d of 12 seeds clean", clean);
        else
            CHECK(named > 0 && named + clean == 12, "reused early: named on %d seeds, clean on %d", named, clean);
    }
    // a thread that exits with a store not waited for
    std::string e = error_of({32, 2048, 2}, [&] {
        char* src = mpk::smem<char>(0, 1024);
        if (threadIdx.x) return;
        fence_proxy_async_shared_cta();
        NEXT_LINE(line);
        cp_async_bulk_tensor_2d_global_shared_cta_bulk_group(&map, 0, 0, src);
    });
    expect("exit with a store not waited for", e, {"exits with 1 TMA store not waited for", at_line(line), "(not committed)"});
    report("TMA store named errors", before);
}

int main() {
    setvbuf(stdout, nullptr, _IOLBF, 0);
    test_conformance();
    test_asynchrony();
    test_errors();
    test_stores();
    test_store_errors();
    printf("%s: %d failure(s) of %d checks\n", g_failures ? "FAILED" : "All tma tests passed", g_failures.load(),
           g_checks.load());
    return g_failures ? 1 : 0;
}
