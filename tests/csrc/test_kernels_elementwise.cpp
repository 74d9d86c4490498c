// test_kernels_elementwise.cpp: checks the SIMT task kernels rmsnorm, silu_mul, elementwise_add,
// identity and tensor_init (csrc/tasks/<stem>.cuh) on the CPU, where each runs as one emulated
// worker block (csrc/runtime/simt_cpu.h), then times them there.
//  1. Every case builds its tiles by hand (an MpkTask, and a TaskView filled as
//     csrc/runtime/executor.cuh fills one: pointer = buffer + tile offset), for T = float,
//     bf16_t and fp16_t, and runs the kernel with 128 and 256 threads under three schedule
//     seeds. Shapes: contiguous tiles, column tiles of a wider tensor (row stride != cols),
//     odd sizes (3 x 7, 1 x 1, widths that are no multiple of the 16-byte pack), tiles at odd
//     element offsets, 3-D identity tiles, rows much longer than the block (4096), and special
//     values where a kernel's behaviour is specified (NaN, inf, subnormals, -0, silu's far tail).
//  2. Each result is compared with a plain float64 loop written here, per element, with the
//     budget of mirage/mpk/testing.py: |out - ref| <= rtol * |ref| + atol, rtol = u_T + ops *
//     u_fp32 (ops: 8 elementwise, hidden / 2 + 6 rmsnorm), atol = half T's smallest subnormal
//     (+ 2 u_fp32 (|a| + |b|) for a sum). identity must be bit-exact, tensor_init all +0 bits.
//     Elements outside the output tile must keep their sentinel bits.
// Prints one line per case (all its runs): kernel dtype shape path runs max_abs worst PASS|FAIL,
// then "All kernel checks passed: <N> checks" (N: compared runs and explicit checks) and the
// timings; exits 1 on any failure.
// Build and run: bash tests/csrc/run_kernel_tests.sh test_kernels_elementwise
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <algorithm>
#include <chrono>
#include <exception>
#include <vector>
#include "tasks/elementwise_add.cuh"
#include "tasks/identity.cuh"
#include "tasks/rmsnorm.cuh"
#include "tasks/silu_mul.cuh"
#include "tasks/tensor_init.cuh"

using namespace mpk;

// ---- harness
#include "check.h"

template <class T> struct Dt;  // u: unit roundoff; tiny: half the smallest subnormal
template <> struct Dt<float> { static constexpr const char* name = "f32"; static constexpr double u = 0x1p-24, tiny = 0x1p-150; };
template <> struct Dt<bf16_t> { static constexpr const char* name = "bf16"; static constexpr double u = 0x1p-8, tiny = 0x1p-134; };
template <> struct Dt<fp16_t> { static constexpr const char* name = "fp16"; static constexpr double u = 0x1p-11, tiny = 0x1p-25; };
constexpr double U32 = 0x1p-24;  // fp32 unit roundoff: the kernels' arithmetic

template <class T> static uint32_t bits_of(T x) { uint32_t b = 0; memcpy(&b, &x, sizeof(T)); return b; }
template <class T> static T from_bits(uint32_t b) { T x; memcpy(&x, &b, sizeof(T)); return x; }
template <class T> static T sentinel() { return from_float<T>(777.0f); }

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint64_t next_u64() {  // xorshift64*, seeded: the same inputs every run
    g_rng ^= g_rng >> 12; g_rng ^= g_rng << 25; g_rng ^= g_rng >> 27;
    return g_rng * 0x2545F4914F6CDD1Dull;
}
static double uniform(double lo, double hi) { return lo + (hi - lo) * static_cast<double>(next_u64() >> 11) * 0x1p-53; }

// The runs every case makes: worker blocks of 128 (Ampere) and 256 (Hopper) threads, each under
// three schedule seeds, with the 48 KiB of shared memory a worker block has.
static const int kThreads[] = {128, 256};
static const uint64_t kSeeds[] = {1, 0x5EED5EEDull, 0xC0FFEE1234ull};
constexpr int kRuns = 6;

// ---- tensors and tasks
// A buffer and one tile of it: element (r, c) at offset + r * row_stride + c * col_stride.
// The MpkTile is 1-D (one row), 2-D, or 3-D [lead, rows / lead, cols] with packed leading dims.
template <class T> struct Tensor {
    std::vector<T> buf;
    int64_t offset = 0, rows = 1, cols = 1, row_stride = 0, col_stride = 1;
    MpkTile tile{};
    int64_t index(int64_t r, int64_t c) const { return offset + r * row_stride + c * col_stride; }
    double at(int64_t r, int64_t c) const { return to_float(buf[index(r, c)]); }
    T& el(int64_t r, int64_t c) { return buf[index(r, c)]; }
    T* ptr() { return buf.data() + offset; }
};

struct Layout {
    int64_t rows, cols, row_stride, col_stride = 1, offset = 0;
    int ndim = 2;
    int64_t lead = 1;  // ndim 3: the leading dim
};

// Every element of the buffer (inside the tile and out) is uniform in [lo, hi), or the sentinel.
template <class T> static Tensor<T> make(const Layout& l, double lo, double hi, bool as_sentinel = false) {
    Tensor<T> t;
    t.offset = l.offset; t.rows = l.rows; t.cols = l.cols; t.row_stride = l.row_stride; t.col_stride = l.col_stride;
    t.buf.resize(l.offset + (l.rows - 1) * l.row_stride + (l.cols - 1) * l.col_stride + 5);
    for (T& e : t.buf) e = as_sentinel ? sentinel<T>() : from_float<T>(static_cast<float>(uniform(lo, hi)));
    MpkTile& m = t.tile;
    m.ndim = l.ndim;
    for (int i = 0; i < MPK_MAX_DIMS; ++i) { m.dims[i] = 1; m.strides[i] = 0; }
    if (l.ndim == 1) { m.dims[0] = l.cols; m.strides[0] = l.col_stride; }
    if (l.ndim == 2) {
        m.dims[0] = l.rows; m.dims[1] = l.cols;
        m.strides[0] = l.row_stride; m.strides[1] = l.col_stride;
    }
    if (l.ndim == 3) {
        m.dims[0] = l.lead; m.dims[1] = l.rows / l.lead; m.dims[2] = l.cols;
        m.strides[0] = (l.rows / l.lead) * l.row_stride; m.strides[1] = l.row_stride; m.strides[2] = l.col_stride;
    }
    return t;
}
template <class T> static Tensor<T> make_out(const Layout& l) { return make<T>(l, 0, 0, true); }

struct Task {  // one MpkTask and the TaskView a worker builds for it
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

// Runs fn as one worker block of `threads` threads under schedule `seed`; false (and a line) if
// the emulation reports an error.
template <void (*Fn)(const TaskView&)>
static bool run_task(Task& t, int threads, uint64_t seed, int smem = 48 * 1024) {
    t.view.block_threads = threads;
    t.view.smem_bytes = smem;
    t.view.simt_seed = seed;
    try {
        MPK_RUN_TASK(t.view, Fn);
        return true;
    } catch (const std::exception& e) {
        printf("  FAIL emulation error (threads %d, seed %llx): %s\n", threads, (unsigned long long)seed, e.what());
        return false;
    }
}

// The worst of a case's runs.
struct Outcome {
    int64_t bad = 0, stray = 0, worst_r = 0, worst_c = 0;
    double max_abs = 0, worst = 0;
    int runs = 0;
    bool error = false;
};

// One run against the float64 reference: NaN must meet NaN, an infinite reference the same inf,
// anything else |got - ref| <= rtol * |ref| + atol[i]. Elements outside the tile keep the sentinel.
template <class T>
static void compare(Outcome& o, const Tensor<T>& out, const std::vector<double>& ref, double rtol,
                    const std::vector<double>& atol) {
    std::vector<char> in_tile(out.buf.size(), 0);
    for (int64_t r = 0; r < out.rows; ++r)
        for (int64_t c = 0; c < out.cols; ++c) {
            const int64_t i = r * out.cols + c;
            in_tile[out.index(r, c)] = 1;
            const double got = out.at(r, c), want = ref[i];
            double diff, ratio;
            if (isnan(want) || isnan(got)) { diff = isnan(want) && isnan(got) ? 0.0 : INFINITY; ratio = diff; }
            else if (isinf(want) || isinf(got)) { diff = got == want ? 0.0 : INFINITY; ratio = diff; }
            else { diff = fabs(got - want); ratio = diff / (rtol * fabs(want) + atol[i]); }
            if (diff > o.max_abs) o.max_abs = diff;
            if (ratio > o.worst) { o.worst = ratio; o.worst_r = r; o.worst_c = c; }
            if (!(ratio <= 1.0)) ++o.bad;
        }
    for (size_t i = 0; i < out.buf.size(); ++i)
        if (!in_tile[i] && bits_of(out.buf[i]) != bits_of(sentinel<T>())) ++o.stray;
}

// Bit-exact comparison: want[i] holds the expected bits of element i of the tile.
template <class T> static void compare_bits(Outcome& o, const Tensor<T>& out, const std::vector<uint32_t>& want) {
    std::vector<char> in_tile(out.buf.size(), 0);
    for (int64_t r = 0; r < out.rows; ++r)
        for (int64_t c = 0; c < out.cols; ++c) {
            in_tile[out.index(r, c)] = 1;
            if (bits_of(out.buf[out.index(r, c)]) != want[r * out.cols + c]) {
                if (o.bad++ == 0) { o.worst_r = r; o.worst_c = c; o.worst = INFINITY; }
            }
        }
    for (size_t i = 0; i < out.buf.size(); ++i)
        if (!in_tile[i] && bits_of(out.buf[i]) != bits_of(sentinel<T>())) ++o.stray;
}

template <class T> static void reset(Tensor<T>& out) { for (T& e : out.buf) e = sentinel<T>(); }

// One line per case; every run counts as a check.
template <class T> static void report(const char* kernel, const char* what, const Tensor<T>& out, bool packed,
                                      const Outcome& o) {
    const bool ok = !o.error && o.bad == 0 && o.stray == 0 && o.runs == kRuns;
    g_checks += o.runs;
    if (!ok) ++g_failures;
    printf("%-16s %-4s %-26s [%lldx%lld rs=%lld cs=%lld] %-6s runs=%d max_abs=%.3g worst=%.3g of allowed"
           " at (%lld,%lld) mismatched=%lld outside_tile_written=%lld  %s\n",
           kernel, Dt<T>::name, what, (long long)out.rows, (long long)out.cols, (long long)out.row_stride,
           (long long)out.col_stride, packed ? "packed" : "scalar", o.runs, o.max_abs, o.worst, (long long)o.worst_r,
           (long long)o.worst_c, (long long)o.bad, (long long)o.stray, ok ? "PASS" : "FAIL");
}

// Runs a case under every (threads, seed), comparing each run with check(o).
template <void (*Fn)(const TaskView&), class T, class Check>
static Outcome run_all(Task& t, Tensor<T>& out, Check check, int smem = 48 * 1024) {
    Outcome o;
    for (int threads : kThreads)
        for (uint64_t seed : kSeeds) {
            reset(out);
            if (!run_task<Fn>(t, threads, seed, smem)) { o.error = true; continue; }
            check(o);
            ++o.runs;
        }
    return o;
}

// ---- rmsnorm
struct RmsCase { const char* what; Layout x, y; int64_t w_stride; double eps, lo, hi; bool specials; int smem; };

template <class T> static void test_rmsnorm(const RmsCase& k) {
    auto x = make<T>(k.x, k.lo, k.hi);
    auto w = make<T>(Layout{1, k.x.cols, 0, k.w_stride, 0, 1}, 0.5, 1.5);
    auto y = make_out<T>(k.y);
    const int64_t rows = k.x.rows, hidden = k.x.cols;
    if (k.specials) {  // row 0: a NaN; row 1: an inf; row 2: T's subnormals and -0; row 3: -0 only
        x.el(0, hidden / 2) = from_float<T>(NAN);
        x.el(1, hidden - 1) = from_float<T>(-INFINITY);
        const uint32_t sub = sizeof(T) == 4 ? 0x00000101u : 0x0003u;
        for (int64_t j = 0; j < hidden; ++j) x.el(2, j) = from_bits<T>(j % 3 == 0 ? sub * (uint32_t)(j + 1) : 0);
        x.el(2, 1) = from_bits<T>(sizeof(T) == 4 ? 0x80000000u : 0x8000u);
        for (int64_t j = 0; j < hidden; ++j) x.el(3, j) = from_bits<T>(sizeof(T) == 4 ? 0x80000000u : 0x8000u);
    }
    Task t; t.in(x).in(w).out(y); t.task.fparams[0] = k.eps;
    std::vector<double> ref(rows * hidden), atol(rows * hidden, Dt<T>::tiny);
    for (int64_t r = 0; r < rows; ++r) {
        double ss = 0;
        for (int64_t j = 0; j < hidden; ++j) ss += x.at(r, j) * x.at(r, j);
        const double inv = 1.0 / sqrt(ss / hidden + k.eps);
        for (int64_t j = 0; j < hidden; ++j) ref[r * hidden + j] = x.at(r, j) * inv * w.at(0, j);
    }
    const double rtol = Dt<T>::u + (hidden / 2.0 + 6) * U32;  // testing.tol_rmsnorm
    Outcome o = run_all<rmsnorm_task<T>>(t, y, [&](Outcome& oc) { compare(oc, y, ref, rtol, atol); }, k.smem);
    constexpr int N = PACK16<T>;
    const bool packed = packable<N>(x.ptr(), tile2d(x.tile)) && packable<N>(w.ptr(), tile2d(w.tile)) &&
                        packable<N>(y.ptr(), tile2d(y.tile));
    report("rmsnorm", k.what, y, packed, o);
}

template <class T> static void rmsnorm_cases() {
    const int S = 48 * 1024;
    const RmsCase cases[] = {
        {"padded rows", {3, 7, 9}, {3, 7, 8}, 1, 1e-6, -2, 2, false, S},
        {"x col stride 2", {2, 5, 11, 2}, {2, 5, 5}, 1, 1e-6, -2, 2, false, S},
        {"1x1", {1, 1, 1}, {1, 1, 1}, 1, 1e-6, -2, 2, false, S},
        {"contiguous", {4, 256, 256}, {4, 256, 256}, 1, 1e-6, -2, 2, false, S},
        {"16x4096", {16, 4096, 4096}, {16, 4096, 4096}, 1, 1e-6, -2, 2, false, S},
        {"odd offsets", {5, 4096, 4096, 1, 1}, {5, 4096, 4096, 1, 3}, 1, 1e-6, -2, 2, false, S},
        {"hidden 4100", {3, 4100, 4100}, {3, 4100, 4100}, 1, 1e-6, -2, 2, false, S},
        {"x row stride 4098", {3, 4096, 4098}, {3, 4096, 4096}, 1, 1e-6, -2, 2, false, S},
        {"rows 2.. of a tensor", {4, 512, 512, 1, 1024}, {4, 512, 512, 1, 1024}, 1, 1e-6, -2, 2, false, S},
        {"w stride 2", {8, 64, 64}, {8, 64, 64}, 2, 1e-6, -2, 2, false, S},
        {"eps 0.1 dominates", {6, 384, 384}, {6, 384, 384}, 1, 0.1, -0.01, 0.01, false, S},
        {"NaN inf subnormal -0", {5, 64, 64}, {5, 64, 64}, 1, 1e-6, -2, 2, true, S},
        // 512 bytes of shared memory: passes of 32 rows (128 threads) or 16 (256); every warp has
        // columns, so a pass that overwrote partials still being read would change results
        {"passes (512 B smem)", {100, 2048, 2048}, {100, 2048, 2048}, 1, 1e-6, -2, 2, false, 512},
    };
    for (const RmsCase& k : cases) test_rmsnorm<T>(k);
}

// ---- silu_mul
struct SiluCase { const char* what; Layout x, y; bool specials; };

template <class T> static void test_silu_mul(const SiluCase& k) {
    auto x = make<T>(k.x, -6, 6);  // the tile is [B, 2m]: gate columns 0..m-1, up m..2m-1
    auto y = make_out<T>(k.y);
    const int64_t B = k.y.rows, m = k.y.cols;
    // Gates through silu's tails: exp(-g) overflows below -88.7, exp(g) is an fp32 subnormal
    // below -87.3 and 0 below -104; ups of 1 keep the tiny results in T's range.
    const float gates[] = {-200, -150, -120, -112, -110, -108, -105, -104, -103, -100, -95, -90, -88.8f,
                           -88.5f, -87.5f, -87, -85, -80.5f, -80, -79.5f, -50, -20, -1, -1e-30f, -0.0f, 0.0f,
                           1e-30f, 1, 20, 80, 88.8f, 100, INFINITY, -INFINITY, NAN};
    const int n_gates = sizeof gates / sizeof gates[0];
    if (k.specials)
        for (int i = 0; i < n_gates && i < m; ++i)
            for (int64_t b = 0; b < B; ++b) {
                x.el(b, i) = from_float<T>(gates[i]);
                x.el(b, m + i) = from_float<T>(b == 0 ? 1.0f : b == 1 ? -0.75f : 3.0f);
            }
    Task t; t.in(x).out(y);
    std::vector<double> ref(B * m), atol(B * m, Dt<T>::tiny);
    for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < m; ++j) {
            const double g = x.at(b, j), up = x.at(b, m + j);
            ref[b * m + j] = g / (1 + exp(-g)) * up;
        }
    const double rtol = Dt<T>::u + 8 * U32;  // testing.tol_elementwise
    int64_t zeros = 0;  // silu's tail: a result that T can hold must not come out as -0
    Outcome o = run_all<silu_mul_task<T>>(t, y, [&](Outcome& oc) {
        compare(oc, y, ref, rtol, atol);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 0; j < m; ++j)
                if (fabs(ref[b * m + j]) > 2 * Dt<T>::tiny && fabs(ref[b * m + j]) < 1e-30 && y.at(b, j) == 0) ++zeros;
    });
    if (k.specials) CHECK(zeros == 0, "silu_mul %s: %lld tail results came out as zero", Dt<T>::name, (long long)zeros);
    constexpr int N = PACK16<T>;
    const Tile2D gt{B, m, x.row_stride, x.col_stride};
    const bool packed = packable<N>(x.ptr(), gt) && packable<N>(x.ptr() + m * x.col_stride, gt) &&
                        packable<N>(y.ptr(), tile2d(y.tile));
    report("silu_mul", k.what, y, packed, o);
}

template <class T> static void silu_mul_cases() {
    const SiluCase cases[] = {
        {"column tile of [3,11]", {3, 10, 12}, {3, 5, 11, 1, 1}, false},
        {"y col stride 2", {2, 8, 8}, {2, 4, 9, 2}, false},
        {"1x1", {1, 2, 2}, {1, 1, 1}, false},
        // task j = 2 of g = 4 on [4, 2 * 512]: x columns 512..767, y columns 256..383
        {"task 2 of 4, I=512", {4, 256, 1024, 1, 512}, {4, 128, 512, 1, 256}, false},
        {"64x4096", {64, 8192, 8192}, {64, 4096, 4096}, false},
        {"odd offset", {3, 128, 128, 1, 1}, {3, 64, 64}, false},
        {"m=36", {5, 72, 72}, {5, 36, 36}, false},
        {"x row stride 130", {3, 128, 130}, {3, 64, 64}, false},
        {"tails", {3, 80, 80}, {3, 40, 40}, true},
        {"tails, scalar", {3, 74, 75}, {3, 37, 37, 1, 1}, true},
    };
    for (const SiluCase& k : cases) test_silu_mul<T>(k);
}

// ---- elementwise_add
struct AddCase { const char* what; Layout a, b, y; bool specials; };

template <class T> static void test_elementwise_add(const AddCase& k) {
    auto a = make<T>(k.a, -1, 1);
    auto b = make<T>(k.b, -1, 1);
    auto y = make_out<T>(k.y);
    const int64_t rows = k.y.rows, cols = k.y.cols;
    if (k.specials) {  // row 0: inf + 1, inf + -inf, NaN + 1, -0 + -0, -0 + +0, subnormal + subnormal
        const uint32_t neg0 = sizeof(T) == 4 ? 0x80000000u : 0x8000u, sub = sizeof(T) == 4 ? 0x00000003u : 0x0005u;
        const T av[] = {from_float<T>(INFINITY), from_float<T>(INFINITY), from_float<T>(NAN), from_bits<T>(neg0),
                        from_bits<T>(neg0), from_bits<T>(sub), from_bits<T>(sub | neg0)};
        const T bv[] = {from_float<T>(1), from_float<T>(-INFINITY), from_float<T>(1), from_bits<T>(neg0),
                        from_bits<T>(0), from_bits<T>(sub * 2), from_bits<T>(sub)};
        for (int i = 0; i < 7 && i < cols; ++i) { a.el(0, i) = av[i]; b.el(0, i) = bv[i]; }
    }
    Task t; t.in(a).in(b).out(y);
    std::vector<double> ref(rows * cols), atol(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            ref[r * cols + c] = a.at(r, c) + b.at(r, c);
            atol[r * cols + c] = 2 * U32 * (fabs(a.at(r, c)) + fabs(b.at(r, c))) + Dt<T>::tiny;
        }
    const double rtol = Dt<T>::u + 8 * U32;  // testing.tol_elementwise with scale |a| + |b|
    int64_t sign_wrong = 0;
    Outcome o = run_all<elementwise_add_task<T>>(t, y, [&](Outcome& oc) {
        compare(oc, y, ref, rtol, atol);
        if (k.specials) sign_wrong += !signbit(y.at(0, 3)) + signbit(y.at(0, 4));  // -0 + -0 = -0; -0 + 0 = +0
    });
    if (k.specials)
        CHECK(sign_wrong == 0, "elementwise_add %s: signed zeros wrong in %lld runs", Dt<T>::name, (long long)sign_wrong);
    constexpr int N = PACK16<T>;
    const bool packed = packable<N>(a.ptr(), tile2d(a.tile)) && packable<N>(b.ptr(), tile2d(b.tile)) &&
                        packable<N>(y.ptr(), tile2d(y.tile));
    report("elementwise_add", k.what, y, packed, o);
}

template <class T> static void elementwise_add_cases() {
    const AddCase cases[] = {
        {"mixed strides", {3, 7, 9}, {3, 7, 14, 2, 1}, {3, 7, 12, 1, 3}, false},
        {"3-D [1,3,7], y cs 2", {3, 7, 7, 1, 0, 3}, {3, 7, 8, 1, 2, 3}, {3, 7, 15, 2, 1, 3}, false},
        {"3-D [2,3,8]", {6, 8, 8, 1, 0, 3, 2}, {6, 8, 8, 1, 0, 3, 2}, {6, 8, 8, 1, 0, 3, 2}, false},
        {"1x1", {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, false},
        {"64x4096", {64, 4096, 4096}, {64, 4096, 4096}, {64, 4096, 4096}, false},
        {"column tile of [4,384]", {4, 96, 384, 1, 192}, {4, 96, 384, 1, 192}, {4, 96, 384, 1, 192}, false},
        {"y at odd offset", {5, 64, 64}, {5, 64, 64}, {5, 64, 64, 1, 1}, false},
        {"b row stride 66", {5, 64, 64}, {5, 64, 66}, {5, 64, 64}, false},
        {"specials", {4, 16, 16}, {4, 16, 16}, {4, 16, 16}, true},
    };
    for (const AddCase& k : cases) test_elementwise_add<T>(k);
}

// ---- identity
struct CopyCase { const char* what; Layout x, y; bool all_bits; };

template <class T> static void test_identity(const CopyCase& k) {
    auto x = make<T>(k.x, -1, 1);
    auto y = make_out<T>(k.y);
    const int64_t rows = k.y.rows, cols = k.y.cols;
    if (k.all_bits) {  // 16-bit T: every bit pattern once; float: random bits and the specials
        const uint32_t specials[] = {0x7F800001u, 0xFFBFFFFFu, 0x7FC12345u, 0xFFFFFFFFu, 0x80000000u,
                                     0x00000001u, 0x807FFFFFu, 0x7F800000u, 0xFF800000u};
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                const int64_t i = r * cols + c;
                uint32_t bits = sizeof(T) == 2 ? static_cast<uint32_t>(i & 0xFFFF)
                                               : static_cast<uint32_t>(next_u64() >> 32);
                if (sizeof(T) == 4 && i < 9) bits = specials[i];
                x.el(r, c) = from_bits<T>(bits);
            }
    } else if (sizeof(T) == 2) {
        x.el(0, 0) = from_bits<T>(0x7F81);  // a NaN with a payload, copied bit for bit
    }
    Task t; t.in(x).out(y);
    std::vector<uint32_t> want(rows * cols);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) want[r * cols + c] = bits_of(x.buf[x.index(r, c)]);
    Outcome o = run_all<identity_task<T>>(t, y, [&](Outcome& oc) { compare_bits(oc, y, want); });
    constexpr int N = PACK16<T>;
    const bool packed = packable<N>(x.ptr(), tile2d(x.tile)) && packable<N>(y.ptr(), tile2d(y.tile));
    report("identity", k.what, y, packed, o);
}

template <class T> static void identity_cases() {
    const CopyCase cases[] = {
        {"x cs 2, y padded", {3, 7, 15, 2}, {3, 7, 11, 1, 2}, false},
        {"1x1", {1, 1, 1}, {1, 1, 1}, false},
        // [2, 3, 40] tensors, tile = columns 16..23: dims [2, 3, 8], strides [120, 40, 1]
        {"3-D [2,3,8] of [2,3,40]", {6, 8, 40, 1, 16, 3, 2}, {6, 8, 40, 1, 16, 3, 2}, false},
        {"3-D [1,3,5] of [1,3,7]", {3, 5, 7, 1, 1, 3}, {3, 5, 7, 1, 1, 3}, false},
        {"64x4096", {64, 4096, 4096}, {64, 4096, 4096}, false},
        {"column tile of [4,384]", {4, 96, 384, 1, 96}, {4, 96, 384, 1, 96}, false},
        {"odd offsets", {5, 64, 64, 1, 1}, {5, 64, 64, 1, 1}, false},
        {"y row stride 66", {5, 64, 64}, {5, 64, 66}, false},
        {"all bit patterns", {256, 256, 256}, {256, 256, 256}, true},
    };
    for (const CopyCase& k : cases) test_identity<T>(k);
}

// ---- tensor_init
struct InitCase { const char* what; Layout y; };

template <class T> static void test_tensor_init(const InitCase& k) {
    // The layer's task: in(0) dummy_input (ordering only), out(0) the tile to zero, out(1)
    // dummy_output (never written).
    auto dummy_in = make<T>(Layout{2, 3, 3}, -1, 1);
    auto y = make_out<T>(k.y);
    auto dummy_out = make_out<T>(Layout{2, 3, 3});
    const std::vector<T> dummy_in_before = dummy_in.buf;
    Task t; t.in(dummy_in).out(y).out(dummy_out);
    const int64_t rows = k.y.rows, cols = k.y.cols;
    const uint32_t garbage[] = {0x7FC00000u, 0x80000000u, 0xFFFFFFFFu, 0x00000001u};  // NaN, -0, ...
    Outcome o;
    for (int threads : kThreads)
        for (uint64_t seed : kSeeds) {
            reset(y);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c)
                    y.el(r, c) = from_bits<T>(garbage[(r + c) % 4] & (sizeof(T) == 2 ? 0xFFFFu : ~0u));
            if (!run_task<tensor_init_task<T>>(t, threads, seed)) { o.error = true; continue; }
            compare_bits(o, y, std::vector<uint32_t>(rows * cols, 0u));
            ++o.runs;
        }
    bool dummies_kept = memcmp(dummy_in.buf.data(), dummy_in_before.data(), dummy_in.buf.size() * sizeof(T)) == 0;
    for (const T& e : dummy_out.buf) dummies_kept = dummies_kept && bits_of(e) == bits_of(sentinel<T>());
    CHECK(dummies_kept, "tensor_init %s %s: a dummy tile changed", Dt<T>::name, k.what);
    constexpr int N = PACK16<T>;
    report("tensor_init", k.what, y, packable<N>(y.ptr(), tile2d(y.tile)), o);
}

template <class T> static void tensor_init_cases() {
    const InitCase cases[] = {
        {"padded, odd offset", {3, 7, 10, 1, 1}},
        {"1x1", {1, 1, 1}},
        {"64x4096", {64, 4096, 4096}},
        {"column tile of [4,384]", {4, 96, 384, 1, 96}},
        {"odd offset", {5, 64, 64, 1, 1}},
        {"col stride 3", {4, 8, 30, 3}},
        {"row stride 66", {5, 64, 66}},
    };
    for (const InitCase& k : cases) test_tensor_init<T>(k);
}

// ---- the packed-access rule (common.cuh: packable): a wrong "yes" is a misaligned 16-byte
// access, which the CPU tolerates and a GPU faults on, so it is checked directly.
template <class T> static void packable_cases() {
    constexpr int N = PACK16<T>;
    alignas(16) static T buf[64];
    struct { const char* what; const T* p; Tile2D t; bool want; } cases[] = {
        {"aligned rows", buf, {3, 2 * N, 2 * N, 1}, true},
        {"padded aligned rows", buf, {3, N, 3 * N, 1}, true},
        {"one row, any row stride", buf, {1, N, 7, 1}, true},
        {"row stride not a multiple", buf, {3, N, N + 2, 1}, false},
        {"cols not a multiple", buf, {3, N + 2, 2 * N, 1}, false},
        {"column stride 2", buf, {3, N, 2 * N, 2}, false},
        {"pointer one element off", buf + 1, {1, N, N, 1}, false},
        {"pointer half a pack off", buf + N / 2, {1, N, N, 1}, false},
    };
    for (const auto& c : cases)
        CHECK(packable<N>(c.p, c.t) == c.want, "packable<%d> %s %s: got %d", N, Dt<T>::name, c.what, !c.want);
}

template <class T> static void test_all() {
    packable_cases<T>();
    rmsnorm_cases<T>();
    silu_mul_cases<T>();
    elementwise_add_cases<T>();
    identity_cases<T>();
    tensor_init_cases<T>();
}

// ---- timings under the emulation
// Milliseconds per task (best and mean of reps) for one task's tile, one worker block of
// `threads` fibers on one OS thread. Bytes: what a GPU would move (inputs read + output written).
template <void (*Fn)(const TaskView&)>
static void bench(const char* what, Task& t, int threads, double bytes, int reps) {
    double best = 1e30, total = 0;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        if (!run_task<Fn>(t, threads, 1 + i)) { ++g_failures; return; }
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        best = std::min(best, s);
        total += s;
    }
    printf("bench %-36s %d threads: %.3f ms per task (mean %.3f ms over %d), %.2f GB/s\n", what, threads,
           best * 1e3, total / reps * 1e3, reps, bytes / best * 1e-9);
}

static void benchmarks() {
    const int64_t R = 64, H = 4096;
    auto x16 = make<bf16_t>(Layout{16, H, H}, -2, 2);
    auto w = make<bf16_t>(Layout{1, H, 0, 1, 0, 1}, 0.5, 1.5);
    auto y16 = make_out<bf16_t>(Layout{16, H, H});
    Task rms; rms.in(x16).in(w).out(y16); rms.task.fparams[0] = 1e-6;
    bench<rmsnorm_task<bf16_t>>("rmsnorm bf16 16x4096", rms, 128, 2.0 * (2 * 16 * H + H), 20);
    bench<rmsnorm_task<bf16_t>>("rmsnorm bf16 16x4096", rms, 256, 2.0 * (2 * 16 * H + H), 20);

    auto a = make<bf16_t>(Layout{R, H, H}, -1, 1), b = make<bf16_t>(Layout{R, H, H}, -1, 1);
    auto x2 = make<bf16_t>(Layout{R, 2 * H, 2 * H}, -6, 6);
    auto y = make_out<bf16_t>(Layout{R, H, H});
    Task add; add.in(a).in(b).out(y);
    Task silu; silu.in(x2).out(y);
    Task copy; copy.in(a).out(y);
    Task init; init.in(a).out(y).out(b);
    const double e = 2.0 * R * H;  // bytes of one bf16 [64, 4096] tile
    bench<elementwise_add_task<bf16_t>>("elementwise_add bf16 64x4096", add, 128, 3 * e, 10);
    bench<silu_mul_task<bf16_t>>("silu_mul bf16 64x8192 -> 64x4096", silu, 128, 3 * e, 10);
    bench<identity_task<bf16_t>>("identity bf16 64x4096", copy, 128, 2 * e, 10);
    bench<tensor_init_task<bf16_t>>("tensor_init bf16 64x4096", init, 128, e, 10);
}

int main() {
    test_all<float>();
    test_all<bf16_t>();
    test_all<fp16_t>();
    if (g_failures) {
        printf("%d of %d check(s) FAILED\n", g_failures.load(), g_checks.load());
        return 1;
    }
    printf("All kernel checks passed: %d checks\n", g_checks.load());
    benchmarks();
    return g_failures ? 1 : 0;
}
