// test_kernels.cpp: checks the CPU task kernels (csrc/tasks/cpu/*.h) and the dtype layer
// (csrc/runtime/dtypes.h), then times the fast linear kernel.
//  1. dtype: from_float/to_float against bit patterns torch gives (ties to even, max finite,
//     overflow to inf, fp16 subnormals, NaN), and every 16-bit pattern round-trips.
//  2. kernels: for T = float, bf16_t, fp16_t each task runs through a hand-built
//     MpkTask/TaskView on small odd shapes (rows 3 x hidden 7, column-split output tiles whose
//     row stride != n, column strides of 2, a 3-D tile, 1x1) and is compared with plain fp64
//     loops written here. Allowed error per element: the rounding to T (u_T * |ref|), a bound
//     on the kernel's fp32 error (e.g. (K + 4) * u_fp32 * sum|x * w| for linear), and half
//     T's smallest subnormal. Elements outside the output tile must keep their sentinel.
//  3. linear: the fast path against the plain-loop reference, then GFLOP/s on one task's tile
//     of Qwen3-8B's MLP (B=8, K=4096, n=24576/8 and K=12288, n=4096/8), single thread.
// Prints one line per check: kernel dtype shape max_abs worst_ratio worst_index PASS|FAIL;
// exits 1 on any failure.
// Build and run: bash tests/csrc/run_kernel_tests.sh   (g++ -std=c++17 -O2 -Icsrc)
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <chrono>
#include <vector>
#include "runtime/dtypes.h"
#include "tasks/cpu/elementwise_add.h"
#include "tasks/cpu/identity.h"
#include "tasks/cpu/linear.h"
#include "tasks/cpu/linear_with_residual.h"
#include "tasks/cpu/rmsnorm.h"
#include "tasks/cpu/silu_mul.h"
#include "tasks/cpu/tensor_init.h"

using namespace mpk;

static int g_failures = 0;

// ---- dtype helpers
template <class T> struct Dt;
template <> struct Dt<float> { static constexpr const char* name = "f32"; static constexpr double u = 0x1p-24, tiny = 0x1p-150; };
template <> struct Dt<bf16_t> { static constexpr const char* name = "bf16"; static constexpr double u = 0x1p-8, tiny = 0x1p-134; };
template <> struct Dt<fp16_t> { static constexpr const char* name = "fp16"; static constexpr double u = 0x1p-11, tiny = 0x1p-25; };
constexpr double U32 = 0x1p-24;  // fp32 unit roundoff: the kernels' accumulation precision

template <class T> static bool same_bits(T a, T b) { return memcmp(&a, &b, sizeof(T)) == 0; }

static void check_dtypes() {
    // float bits -> bf16 bits, fp16 bits, as torch.tensor([...]).to(dtype) gives them (AVX2 CPU).
    struct Case { uint32_t f; uint16_t bf, h; const char* what; };
    const Case cases[] = {
        {0x3F800000, 0x3F80, 0x3C00, "1.0"},
        {0x80000000, 0x8000, 0x8000, "-0.0"},
        {0x3F808000, 0x3F80, 0x3C04, "bf16 tie, even below"},
        {0x3F818000, 0x3F82, 0x3C0C, "bf16 tie, even above"},
        {0x3F808001, 0x3F81, 0x3C04, "bf16 just past the tie"},
        {0x3F801000, 0x3F80, 0x3C00, "fp16 tie 1 + 2^-11, even below"},
        {0x3F803000, 0x3F80, 0x3C02, "fp16 tie 1 + 3*2^-11, even above"},
        {0x7F7F7FFF, 0x7F7F, 0x7C00, "bf16 max finite (fp16: inf)"},
        {0x7F7F8000, 0x7F80, 0x7C00, "bf16 max + half ulp -> inf"},
        {0x7F7FFFFF, 0x7F80, 0x7C00, "fp32 max -> inf"},
        {0x477FE000, 0x4780, 0x7BFF, "65504, fp16 max finite"},
        {0x477FEFFF, 0x4780, 0x7BFF, "just under 65520"},
        {0x477FF000, 0x4780, 0x7C00, "65520 -> fp16 inf"},
        {0xC77FF000, 0xC780, 0xFC00, "-65520 -> fp16 -inf"},
        {0x7F800000, 0x7F80, 0x7C00, "inf"},
        {0xFF800000, 0xFF80, 0xFC00, "-inf"},
        {0x38800000, 0x3880, 0x0400, "2^-14, fp16 min normal"},
        {0x387FC000, 0x3880, 0x03FF, "fp16 max subnormal"},
        {0x387FF000, 0x3880, 0x0400, "rounds up to fp16 min normal"},
        {0x33800000, 0x3380, 0x0001, "2^-24, fp16 min subnormal"},
        {0x33000000, 0x3300, 0x0000, "2^-25, tie -> 0"},
        {0x33000001, 0x3300, 0x0001, "just over 2^-25 -> min subnormal"},
        {0x33C00000, 0x33C0, 0x0002, "1.5 * 2^-24, tie -> 2"},
        {0x34200000, 0x3420, 0x0002, "2.5 * 2^-24, tie -> 2"},
        {0xB3C00000, 0xB3C0, 0x8002, "-1.5 * 2^-24"},
        {0x00000001, 0x0000, 0x0000, "fp32 min subnormal"},
        {0x00018000, 0x0002, 0x0000, "fp32 subnormal bf16 tie -> even"},
        {0x7FC00000, 0xFFFF, 0x7E00, "NaN"},
        {0xFFC00000, 0xFFFF, 0xFE00, "-NaN"},
        {0x7FA00000, 0xFFFF, 0x7F00, "NaN payload"},
        {0xFF812345, 0xFFFF, 0xFE09, "-NaN payload"},
    };
    int bad = 0;
    for (const Case& c : cases) {
        const float f = bits_float(c.f);
        const uint16_t bf = from_float<bf16_t>(f).bits, h = from_float<fp16_t>(f).bits;
        if (bf != c.bf || h != c.h) {
            printf("  dtype: %s (0x%08X): bf16 0x%04X (want 0x%04X), fp16 0x%04X (want 0x%04X)\n",
                   c.what, c.f, bf, c.bf, h, c.h);
            ++bad;
        }
    }
    // 16-bit -> fp32, as torch's .float() gives it; fp16 NaNs get the quiet bit.
    const struct { uint16_t h; uint32_t f; bool is_bf16; } widen[] = {
        {0x0001, 0x33800000, false}, {0x83FF, 0xB87FC000, false}, {0x7C00, 0x7F800000, false},
        {0xFC00, 0xFF800000, false}, {0x7C01, 0x7FC02000, false}, {0xFD55, 0xFFEAA000, false},
        {0x7BFF, 0x477FE000, false}, {0x0001, 0x00010000, true},  {0x7F81, 0x7F810000, true},
    };
    for (const auto& c : widen) {
        const uint32_t got = float_bits(c.is_bf16 ? to_float(bf16_t{c.h}) : to_float(fp16_t{c.h}));
        if (got != c.f) {
            printf("  dtype: %s 0x%04X -> 0x%08X, want 0x%08X\n", c.is_bf16 ? "bf16" : "fp16", c.h, got, c.f);
            ++bad;
        }
    }
    // Every non-NaN 16-bit pattern survives 16 -> 32 -> 16 bits.
    int roundtrip_bad = 0;
    for (uint32_t p = 0; p < 65536; ++p) {
        const uint16_t b = static_cast<uint16_t>(p);
        if ((b & 0x7FFF) <= 0x7F80 && from_float<bf16_t>(to_float(bf16_t{b})).bits != b) ++roundtrip_bad;
        if ((b & 0x7FFF) <= 0x7C00 && from_float<fp16_t>(to_float(fp16_t{b})).bits != b) ++roundtrip_bad;
    }
    bad += roundtrip_bad;
    printf("dtype conversions: %zu edge cases, %zu widenings, 2 x 65536 round trips (%d bad)  %s\n",
           sizeof cases / sizeof cases[0], sizeof widen / sizeof widen[0], roundtrip_bad,
           bad ? "FAIL" : "PASS");
    g_failures += bad ? 1 : 0;
}

// ---- tensors, tasks, comparison
static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static double uniform(double lo, double hi) {  // xorshift64*, seeded: same inputs every run
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return lo + (hi - lo) * static_cast<double>((g_rng * 0x2545F4914F6CDD1Dull) >> 11) * 0x1p-53;
}

// A buffer and one 2-D tile of it (ndim 3 folds a leading 1: [1, rows, cols]).
template <class T> struct Tensor {
    std::vector<T> buf;
    int64_t offset, rows, cols, row_stride, col_stride;
    MpkTile tile;
    int64_t index(int64_t r, int64_t c) const { return offset + r * row_stride + c * col_stride; }
    double at(int64_t r, int64_t c) const { return to_float(buf[index(r, c)]); }
    T* ptr() { return buf.data() + offset; }
};

// Inputs are random in [lo, hi) everywhere (inside and outside the tile); outputs hold a sentinel.
template <class T>
static Tensor<T> make(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride = 1,
                      int64_t offset = 0, int ndim = 2, double lo = -1, double hi = 1, bool sentinel = false) {
    Tensor<T> t{{}, offset, rows, cols, row_stride, col_stride, MpkTile{}};
    t.buf.resize(offset + (rows - 1) * row_stride + (cols - 1) * col_stride + 3);
    for (T& e : t.buf) e = from_float<T>(sentinel ? 777.0f : static_cast<float>(uniform(lo, hi)));
    MpkTile& m = t.tile;
    m.ndim = ndim;
    for (int i = 0; i < MPK_MAX_DIMS; ++i) { m.dims[i] = 1; m.strides[i] = 0; }
    if (ndim == 1) { m.dims[0] = cols; m.strides[0] = col_stride; }
    if (ndim == 2) { m.dims[0] = rows; m.dims[1] = cols; m.strides[0] = row_stride; m.strides[1] = col_stride; }
    if (ndim == 3) { m.dims[1] = rows; m.dims[2] = cols; m.strides[0] = rows * row_stride;
                     m.strides[1] = row_stride; m.strides[2] = col_stride; }
    return t;
}
template <class T> static Tensor<T> make_out(int64_t rows, int64_t cols, int64_t row_stride,
                                             int64_t col_stride = 1, int64_t offset = 0, int ndim = 2) {
    return make<T>(rows, cols, row_stride, col_stride, offset, ndim, 0, 0, true);
}

struct Task {  // one MpkTask and the TaskView a worker would build for it
    MpkTask task{};
    TaskView view{};
    Task() { view.task = &task; view.meta = nullptr; }
    template <class T> Task& in(Tensor<T>& t) { return add(t, true); }
    template <class T> Task& out(Tensor<T>& t) { return add(t, false); }
    template <class T> Task& add(Tensor<T>& t, bool is_input) {
        const int slot = task.num_inputs + task.num_outputs;
        task.tiles[slot] = t.tile;
        view.ptrs[slot] = t.ptr();
        (is_input ? task.num_inputs : task.num_outputs) += 1;
        return *this;
    }
};

// Passes when |got - ref| <= u_T * |ref| + err + tiny_T everywhere in the tile (err: the
// kernel's fp32 error bound, per element; NaN only where ref is NaN) and nothing outside
// the tile changed.
template <class T>
static void compare(const char* kernel, const Tensor<T>& out, const std::vector<double>& ref,
                    const std::vector<double>& err, double u = Dt<T>::u) {
    double max_abs = 0, worst = 0;
    int64_t worst_r = 0, worst_c = 0, bad = 0;
    std::vector<char> in_tile(out.buf.size(), 0);
    for (int64_t r = 0; r < out.rows; ++r)
        for (int64_t c = 0; c < out.cols; ++c) {
            const int64_t i = r * out.cols + c;
            in_tile[out.index(r, c)] = 1;
            const double got = out.at(r, c);
            const bool both_nan = isnan(got) && isnan(ref[i]);
            const double diff = both_nan ? 0.0 : fabs(got - ref[i]);
            const double allowed = u * fabs(ref[i]) + err[i] + Dt<T>::tiny;
            const double ratio = both_nan ? 0.0 : isnan(diff) ? INFINITY : diff / allowed;
            if (diff > max_abs) max_abs = diff;
            if (ratio > worst) { worst = ratio; worst_r = r; worst_c = c; }
            if (!(ratio <= 1.0)) ++bad;
        }
    int64_t stray = 0;
    for (size_t i = 0; i < out.buf.size(); ++i)
        if (!in_tile[i] && !same_bits(out.buf[i], from_float<T>(777.0f))) ++stray;
    const bool ok = bad == 0 && stray == 0;
    printf("%-28s %-4s [%lldx%lld rs=%lld cs=%lld] max_abs=%.3g worst=%.2f of allowed at (%lld,%lld)"
           " mismatched=%lld outside_tile_written=%lld  %s\n",
           kernel, Dt<T>::name, (long long)out.rows, (long long)out.cols, (long long)out.row_stride,
           (long long)out.col_stride, max_abs, worst, (long long)worst_r, (long long)worst_c,
           (long long)bad, (long long)stray, ok ? "PASS" : "FAIL");
    if (!ok) ++g_failures;
}

// ---- kernel checks
template <class T> static void test_rmsnorm(int64_t rows, int64_t hidden, int64_t xrs, int64_t xcs, int64_t yrs) {
    auto x = make<T>(rows, hidden, xrs, xcs, 2, 2, -2, 2);
    auto w = make<T>(1, hidden, 0, 1, 1, 1, 0.5, 1.5);
    auto y = make_out<T>(rows, hidden, yrs);
    Task t; t.in(x).in(w).out(y); t.task.fparams[0] = 1e-6;
    rmsnorm_task<T>(t.view);
    std::vector<double> ref(rows * hidden), err(rows * hidden);
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t j = 0; j < hidden; ++j) ss += x.at(r, j) * x.at(r, j);
        const double inv = 1.0 / sqrt(ss / hidden + 1e-6);
        for (int64_t j = 0; j < hidden; ++j) {
            ref[r * hidden + j] = x.at(r, j) * inv * w.at(0, j);  // fp32 sum of squares: (hidden+8) u32
            err[r * hidden + j] = (hidden + 8) * U32 * fabs(ref[r * hidden + j]);
        }
    }
    compare("rmsnorm", y, ref, err);
}

// y [B, n] is columns col0.. of a [B, N] output (row stride N); W has column stride wcs.
template <class T> static void test_linear(int64_t B, int64_t K, int64_t n, int64_t N, int64_t col0,
                                          int64_t wcs, bool residual, int64_t add_flag) {
    auto x = make<T>(B, K, K + 3, 1);
    auto w = make<T>(n, K, K * wcs + 1, wcs);
    auto r = make<T>(B, n, N, 1, col0);
    auto y = make_out<T>(B, n, N, 1, col0);
    Task t; t.in(x).in(w);
    if (residual) { t.in(r); t.task.iparams[0] = add_flag; }
    t.out(y);
    if (residual) linear_with_residual_task<T>(t.view); else linear_task<T>(t.view);
    std::vector<double> ref(B * n), err(B * n);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < n; ++j) {
            double s = 0, mag = 0;
            for (int64_t k = 0; k < K; ++k) { s += x.at(b, k) * w.at(j, k); mag += fabs(x.at(b, k) * w.at(j, k)); }
            if (residual && add_flag) { s += r.at(b, j); mag += fabs(r.at(b, j)); }
            ref[b * n + j] = s;
            err[b * n + j] = (K + 4) * U32 * mag;
        }
    compare(residual ? (add_flag ? "linear_with_residual" : "linear_with_residual(off)") : "linear", y, ref, err);
}

// The fast path against the plain-loop reference: both sum in fp32, in different orders.
template <class T> static void test_linear_fast_vs_reference(int64_t B, int64_t K, int64_t n) {
    auto x = make<T>(B, K, K, 1);
    auto w = make<T>(n, K, K, 1);
    auto r = make<T>(B, n, n, 1);
    auto y_fast = make_out<T>(B, n, n), y_ref = make_out<T>(B, n, n);
    const Tile2D xt{B, K, K, 1}, wt{n, K, K, 1}, yt{B, n, n, 1};
    linear_fast<T>(x.ptr(), xt, w.ptr(), wt, r.ptr(), yt, y_fast.ptr(), yt);
    linear_reference<T>(x.ptr(), xt, w.ptr(), wt, r.ptr(), yt, y_ref.ptr(), yt);
    std::vector<double> ref(B * n), err(B * n);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < n; ++j) {
            double mag = fabs(r.at(b, j));
            for (int64_t k = 0; k < K; ++k) mag += fabs(x.at(b, k) * w.at(j, k));
            ref[b * n + j] = y_ref.at(b, j);
            err[b * n + j] = 2 * (K + 4) * U32 * mag;  // both paths' fp32 error
        }
    compare("linear fast vs reference", y_fast, ref, err, 2 * Dt<T>::u);  // both rounded to T
}

template <class T> static void test_silu_mul(int64_t B, int64_t m, int64_t xrs, int64_t yrs, int64_t ycs) {
    auto x = make<T>(B, 2 * m, xrs, 1, 0, 2, -6, 6);
    auto y = make_out<T>(B, m, yrs, ycs, 1);
    Task t; t.in(x).out(y);
    silu_mul_task<T>(t.view);
    std::vector<double> ref(B * m), err(B * m);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < m; ++j) {
            const double g = x.at(b, j), up = x.at(b, m + j);
            ref[b * m + j] = g / (1 + exp(-g)) * up;
            err[b * m + j] = 16 * U32 * fabs(ref[b * m + j]);  // expf, +, /, *: a few ulps each
        }
    compare("silu_mul", y, ref, err);
}

template <class T> static void test_elementwise_add(int64_t rows, int64_t cols, int ndim, int64_t ycs) {
    auto a = make<T>(rows, cols, cols + 2, 1, 0, ndim);
    auto b = make<T>(rows, cols, 2 * cols, 2, 1, ndim);
    auto y = make_out<T>(rows, cols, cols * ycs + 5, ycs, 3, ndim);
    Task t; t.in(a).in(b).out(y);
    elementwise_add_task<T>(t.view);
    std::vector<double> ref(rows * cols), err(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            ref[r * cols + c] = a.at(r, c) + b.at(r, c);
            err[r * cols + c] = U32 * fabs(ref[r * cols + c]);  // fp32 add, then the rounding to T
        }
    compare("elementwise_add", y, ref, err);
}

template <class T> static void test_identity(int64_t rows, int64_t cols) {
    auto x = make<T>(rows, cols, cols + 1, 2);
    if (sizeof(T) == 2) memcpy(&x.buf[x.index(0, 0)], "\x81\x7F", 2);  // a NaN: copied bit for bit
    auto y = make_out<T>(rows, cols, cols + 4, 1, 2);
    Task t; t.in(x).out(y);
    identity_task<T>(t.view);
    std::vector<double> ref(rows * cols), err(rows * cols, 0.0);
    int64_t bits_differ = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            ref[r * cols + c] = x.at(r, c);
            bits_differ += !same_bits(x.buf[x.index(r, c)], y.buf[y.index(r, c)]);
        }
    if (sizeof(T) == 2) ref[0] = y.at(0, 0);  // the NaN is checked by bits instead
    if (bits_differ) { printf("identity %s: %lld elements not bit-identical\n", Dt<T>::name, (long long)bits_differ); ++g_failures; }
    compare("identity", y, ref, err, 0.0);
}

template <class T> static void test_tensor_init(int64_t rows, int64_t cols, int64_t rs) {
    auto dummy = make<T>(1, 1, 1);
    auto y = make_out<T>(rows, cols, rs, 1, 1);
    Task t; t.in(dummy).in(dummy).out(y);
    tensor_init_task<T>(t.view);
    int64_t nonzero_bits = 0;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            uint8_t zero[sizeof(T)] = {};
            nonzero_bits += memcmp(&y.buf[y.index(r, c)], zero, sizeof(T)) != 0;
        }
    if (nonzero_bits) { printf("tensor_init %s: %lld elements not +0\n", Dt<T>::name, (long long)nonzero_bits); ++g_failures; }
    compare("tensor_init", y, std::vector<double>(rows * cols, 0.0), std::vector<double>(rows * cols, 0.0), 0.0);
}

template <class T> static void test_all() {
    test_rmsnorm<T>(3, 7, 9, 1, 8);       // padded rows in and out
    test_rmsnorm<T>(2, 5, 11, 2, 5);      // input column stride 2
    test_rmsnorm<T>(1, 1, 1, 1, 1);
    test_rmsnorm<T>(4, 256, 256, 1, 256);
    test_linear<T>(3, 13, 5, 11, 4, 1, false, 0);   // column-split output: row stride 11 != n 5
    test_linear<T>(4, 37, 6, 6, 0, 2, false, 0);    // W column stride 2
    test_linear<T>(1, 1, 1, 1, 0, 1, false, 0);
    test_linear<T>(8, 200, 16, 48, 32, 1, false, 0);
    test_linear<T>(3, 13, 5, 11, 4, 1, true, 1);
    test_linear<T>(5, 40, 7, 9, 2, 1, true, 1);
    test_linear<T>(3, 13, 5, 11, 4, 1, true, 0);    // flag 0: residual ignored (rank != 0)
    test_linear_fast_vs_reference<T>(5, 1003, 9);
    test_linear_fast_vs_reference<T>(8, 4096, 6);
    test_silu_mul<T>(3, 5, 12, 11, 1);    // output columns 1.. of a [3, 11] buffer
    test_silu_mul<T>(2, 4, 8, 9, 2);      // output column stride 2
    test_silu_mul<T>(1, 1, 2, 1, 1);
    test_elementwise_add<T>(3, 7, 2, 1);
    test_elementwise_add<T>(3, 7, 3, 2);  // 3-D tiles [1, 3, 7], output column stride 2
    test_elementwise_add<T>(1, 1, 2, 1);
    test_identity<T>(3, 7);
    test_identity<T>(1, 1);
    test_tensor_init<T>(3, 7, 10);
    test_tensor_init<T>(1, 1, 1);
}

// ---- benchmark
// One linear task's tile, single thread. FLOPs = 2*B*K*n; the W tile (n*K*2 bytes in bf16)
// streams from memory once per task, x stays in cache.
template <class T> static double bench_linear(int64_t B, int64_t K, int64_t n, bool fast, int reps) {
    auto x = make<T>(B, K, K);
    auto w = make<T>(n, K, K);
    auto y = make_out<T>(B, n, n);
    const Tile2D xt{B, K, K, 1}, wt{n, K, K, 1}, yt{B, n, n, 1};
    double best = 1e30;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (fast) linear_fast<T>(x.ptr(), xt, w.ptr(), wt, nullptr, Tile2D{}, y.ptr(), yt);
        else linear_reference<T>(x.ptr(), xt, w.ptr(), wt, nullptr, Tile2D{}, y.ptr(), yt);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    const double gflops = 2.0 * B * K * n / best * 1e-9;
    printf("bench linear %-9s %-4s B=%lld K=%lld n=%lld: %.2f ms, %.2f GFLOP/s, W %.1f GB/s\n",
           fast ? "fast" : "reference", Dt<T>::name, (long long)B, (long long)K, (long long)n, best * 1e3,
           gflops, double(n) * K * sizeof(T) / best * 1e-9);
    return gflops;
}

int main() {
    check_dtypes();
    test_all<float>();
    test_all<bf16_t>();
    test_all<fp16_t>();
    if (g_failures) {
        printf("%d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("All kernel checks passed\n");
    // Qwen3-8B MLP, one task's tile with 8 tasks per layer: gate/up K=4096 N=24576, down K=12288 N=4096.
    const double g1 = bench_linear<bf16_t>(8, 4096, 24576 / 8, true, 5);
    const double g2 = bench_linear<bf16_t>(8, 12288, 4096 / 8, true, 5);
    bench_linear<bf16_t>(8, 4096, 24576 / 8, false, 1);
    bench_linear<fp16_t>(8, 4096, 24576 / 8, true, 3);
    bench_linear<float>(8, 4096, 24576 / 8, true, 3);
    printf("Qwen3-8B MLP linears at B=8 (%.2f GFLOP) on one thread: about %.0f ms\n",
           2.0 * 8 * (4096.0 * 24576 + 12288.0 * 4096) * 1e-9,
           (2.0 * 8 * 4096 * 24576 / g1 + 2.0 * 8 * 12288 * 4096 / g2) * 1e-6);
    return 0;
}
