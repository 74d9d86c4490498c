// test_kernels_linear.cpp: checks the CUDA task kernels linear, linear_with_residual and allreduce
// (csrc/tasks/*.cuh) on the CPU, through the SIMT emulation (runtime/simt.h), then times the
// linear kernel on one task of Qwen3-8B's MLP.
//  1. linear / linear_with_residual, T = float, bf16_t, fp16_t: hand-built MpkTask/TaskView per
//     task of a grid (grid.x splits N: column tiles whose row stride is N; grid.y splits rows),
//     shapes from K = 4096 / 12288 down to K = 3, 37, 200, B = 1, 6, 13, 16, 1-column tiles, the
//     vector path (with a K mod 16-bytes tail where padded row strides allow it) and the scalar
//     one (a misaligned x, a W column stride of 2, an x row stride that is not a multiple of 16
//     bytes). Compared with fp64 loops written here; allowed error
//     per element: u_T * |ref| + (1 + u_T) * (K + 1) * 2^-24 * (sum |x * w| + |residual|) + half
//     T's smallest subnormal ((2K + 1) for the tensor-core path, csrc/tasks/mma_linear.cuh: bf16 / fp16
//     with B >= 16, as mirage/mpk/layers/linear.py chooses). Each task may write only its own tile (checked after every task;
//     guard elements around y). The bits must not depend on the emulation's seed, the block size
//     (128, 256), or the column split; linear_with_residual with add_residual = 0 must give
//     linear's bits.
//  2. allreduce: one rank (y == 0 + x; counters), a bad task table (throws naming it), an
//     aborted wait (the block leaves before writing y or freeing the slot), 2 and 3 ranks on OS threads in one process sharing their
//     staging buffers and counters, several passes with new inputs each pass, two layers sharing
//     a slot, one rank delayed at random: every rank's y is bit-identical to the fp32 rank-order
//     sum ((0 + x_0) + x_1) + x_2 of that pass.
//  3. bench: one gate/up task (x [8, 4096], W [96, 4096], y [8, 96]) and one down task
//     (x [8, 12288], W [64, 12288]) at 128 threads, bf16 and fp32 (the fastest of 10 runs), and a
//     Qwen3-8B MLP pass (256 + 64 such tasks) extrapolated to one core. Printed, not asserted.
// Prints one line per case and ends with "All kernel checks passed: <N> checks"; exits 1 on any
// failure (an emulation error too: a divergent barrier, a bad shared-memory access).
// Emulation seeds: 4 per configuration (2 for K >= 4096); MPK_KERNEL_SEEDS=<n> for more.
// Build and run: bash tests/csrc/run_kernel_tests.sh test_kernels_linear
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include "runtime/atomics.h"
#include "tasks/allreduce.cuh"
#include "tasks/linear.cuh"
#include "tasks/linear_with_residual.cuh"

using namespace mpk;

#include "check.h"

// ---- dtypes, data

template <class T> struct Dt;
template <> struct Dt<float> {
    static constexpr const char* name = "f32";
    static constexpr double u = 0x1p-24, tiny = 0x1p-150;
    static constexpr uint32_t poison = 0x7FC0DEADu;  // a NaN no kernel computes here
};
template <> struct Dt<bf16_t> {
    static constexpr const char* name = "bf16";
    static constexpr double u = 0x1p-8, tiny = 0x1p-134;
    static constexpr uint16_t poison = 0x7FDE;
};
template <> struct Dt<fp16_t> {
    static constexpr const char* name = "fp16";
    static constexpr double u = 0x1p-11, tiny = 0x1p-25;
    static constexpr uint16_t poison = 0x7FDE;
};
constexpr double U32 = 0x1p-24;  // fp32 unit roundoff: the kernels' accumulation precision

template <class T> static T poison() {
    T t;
    const auto p = Dt<T>::poison;
    memcpy(&t, &p, sizeof t);
    return t;
}
template <class T> static bool same_bits(T a, T b) { return memcmp(&a, &b, sizeof(T)) == 0; }

static uint64_t mix(uint64_t x) {  // splitmix64
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
// Uniform in [-scale, scale), rounded to T: the kernel and the reference read the same values.
template <class T> static T random_value(uint64_t seed, uint64_t i, double scale) {
    const double u = double(mix(seed * 0x100000001b3ull + i) >> 11) * 0x1p-53;
    return from_float<T>(float((2 * u - 1) * scale));
}

// Host memory for one tensor: `elems` elements at a 64-byte aligned address plus `shift` elements
// (shift 1 makes every row start misaligned), with `guard` poisoned elements on either side.
template <class T> struct Buffer {
    std::vector<T> raw;
    T* data;
    int64_t elems, guard;
    Buffer(int64_t n, int64_t shift = 0, int64_t g = 16) : raw(size_t(n + shift + 2 * g + 64)), elems(n), guard(g) {
        uintptr_t p = reinterpret_cast<uintptr_t>(raw.data() + g);
        p = (p + 63) / 64 * 64;
        data = reinterpret_cast<T*>(p) + shift;
        for (T& t : raw) t = poison<T>();
    }
    bool guards_intact() const {
        for (int64_t i = 1; i <= guard; ++i)
            if (!same_bits(data[-i], poison<T>()) || !same_bits(data[elems - 1 + i], poison<T>())) return false;
        return true;
    }
};

static MpkTile tile2(int32_t tensor, int64_t offset_elems, size_t elem, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
    MpkTile t{};
    t.tensor = tensor;
    t.ndim = 2;
    t.offset = offset_elems * int64_t(elem);
    t.dims[0] = rows;
    t.dims[1] = cols;
    t.dims[2] = t.dims[3] = 1;
    t.strides[0] = rs;
    t.strides[1] = cs;
    return t;
}

// A TaskView as csrc/runtime/executor.cuh fills it: ptrs = base(tensor) + offset.
static TaskView make_view(const MpkTask& task, void* const* bases, int32_t threads, uint64_t seed) {
    TaskView v{};
    v.task = &task;
    v.meta = nullptr;
    for (int32_t i = 0; i < task.num_inputs + task.num_outputs; ++i)
        v.ptrs[i] = static_cast<char*>(bases[task.tiles[i].tensor]) + task.tiles[i].offset;
    v.iteration = 1;
    v.block_threads = threads;
    v.smem_bytes = 48 * 1024;
    v.simt_seed = seed;
    return v;
}

// ---- linear, linear_with_residual

enum Kernel { LINEAR = 0, RESIDUAL = 1, RESIDUAL_OFF = 2 };  // RESIDUAL_OFF: add_residual = 0
static const char* kernel_name(Kernel k) {
    return k == LINEAR ? "linear" : k == RESIDUAL ? "linear_with_residual" : "linear_with_residual(add=0)";
}

struct LinearCase {
    const char* what;
    int64_t batch, k, n;     // x [B, K], W [N, K], y [B, N]
    int gx, gy;              // grid: gx column tiles of N / gx, gy row tiles of B / gy
    int64_t x_pad = 0;       // x row stride K + x_pad
    int64_t x_shift = 0;     // x's first element this many elements past a 64-byte boundary
    int64_t w_cs = 1;        // W column stride (W = every w_cs-th column of [N, K * w_cs])
    int64_t w_pad = 0;       // W row stride K * w_cs + w_pad
};

// mirage/mpk/layers/linear.py's tensor_cores: bf16 / fp16 layers of at least 16 rows (csrc/tasks/mma_linear.cuh).
template <class T> static int tensor_cores(const LinearCase& c) { return sizeof(T) == 2 && c.batch >= 16; }

template <class T> struct LinearData {
    LinearCase c;
    Buffer<T> x, w, r, y;
    int64_t x_rs, w_rs;
    std::vector<double> ref, scale;  // [B, N] with and without the residual: ref, sum|x w| (+|r|)
    std::vector<double> ref_nr, scale_nr;
    LinearData(const LinearCase& lc, uint64_t seed)
        : c(lc), x(lc.batch * (lc.k + lc.x_pad), lc.x_shift), w(lc.n * (lc.k * lc.w_cs + lc.w_pad)), r(lc.batch * lc.n),
          y(lc.batch * lc.n), x_rs(lc.k + lc.x_pad), w_rs(lc.k * lc.w_cs + lc.w_pad) {
        for (int64_t i = 0; i < x.elems; ++i) x.data[i] = random_value<T>(seed, i, 1.0);
        const double ws = 1.0 / sqrt(double(lc.k));
        for (int64_t i = 0; i < w.elems; ++i) w.data[i] = random_value<T>(seed + 1, i, ws);
        for (int64_t i = 0; i < r.elems; ++i) r.data[i] = random_value<T>(seed + 2, i, 1.0);
        const int64_t B = lc.batch, N = lc.n, K = lc.k;
        ref.resize(B * N), scale.resize(B * N), ref_nr.resize(B * N), scale_nr.resize(B * N);
        for (int64_t b = 0; b < B; ++b)
            for (int64_t j = 0; j < N; ++j) {
                double s = 0, a = 0;
                for (int64_t k = 0; k < K; ++k) {
                    const double p = double(to_float(x.data[b * x_rs + k])) * double(to_float(w.data[j * w_rs + k * lc.w_cs]));
                    s += p;
                    a += fabs(p);
                }
                const double rv = to_float(r.data[b * N + j]);
                ref_nr[b * N + j] = s, scale_nr[b * N + j] = a;
                ref[b * N + j] = s + rv, scale[b * N + j] = a + fabs(rv);
            }
    }
    // The task of cell (ix, iy) of a gx x gy grid: its tiles, as mirage/mpk/layers/linear*.py
    // split them.
    MpkTask task(Kernel kernel, int gx, int gy, int ix, int iy) const {
        const int64_t n = c.n / gx, rows = c.batch / gy;
        MpkTask t{};
        t.task_type = kernel == LINEAR ? 120 : 108;
        t.num_inputs = kernel == LINEAR ? 2 : 3;
        t.num_outputs = 1;
        t.dependent_event = -1;
        // the layers' iparams: linear (tensor_cores), linear_with_residual (add_residual, tensor_cores)
        const int tc = tensor_cores<T>(c);
        if (kernel == LINEAR) t.iparams[0] = tc;
        else t.iparams[0] = kernel == RESIDUAL ? 1 : 0, t.iparams[1] = tc;
        int i = 0;
        t.tiles[i++] = tile2(0, iy * rows * x_rs, sizeof(T), rows, c.k, x_rs, 1);
        t.tiles[i++] = tile2(1, ix * n * w_rs, sizeof(T), n, c.k, w_rs, c.w_cs);
        if (kernel != LINEAR) t.tiles[i++] = tile2(2, iy * rows * c.n + ix * n, sizeof(T), rows, n, c.n, 1);
        t.tiles[i++] = tile2(3, iy * rows * c.n + ix * n, sizeof(T), rows, n, c.n, 1);
        return t;
    }
};

template <class T> static void run_linear_task(Kernel kernel, const TaskView& v) {
    if (kernel == LINEAR) MPK_RUN_TASK(v, (linear_task<T>));
    else MPK_RUN_TASK(v, (linear_with_residual_task<T>));
}

// Runs every task of the grid (or of a 1 x 1 grid when whole) into d.y; returns y's bits.
// Checks after each task that only the tiles of tasks run so far are written.
template <class T>
static std::vector<T> run_grid(LinearData<T>& d, Kernel kernel, int threads, uint64_t seed, bool whole, bool* ok) {
    const LinearCase& c = d.c;
    const int gx = whole ? 1 : c.gx, gy = whole ? 1 : c.gy;
    const int64_t n = c.n / gx, rows = c.batch / gy;
    for (int64_t i = 0; i < d.y.elems; ++i) d.y.data[i] = poison<T>();
    void* bases[4] = {d.x.data, d.w.data, d.r.data, d.y.data};
    int done = 0;
    for (int iy = 0; iy < gy; ++iy)
        for (int ix = 0; ix < gx; ++ix) {
            const MpkTask task = d.task(kernel, gx, gy, ix, iy);
            const TaskView v = make_view(task, bases, threads, seed * 1000 + done);
            run_linear_task<T>(kernel, v);
            ++done;
            int64_t wrong = 0;  // elements whose written state does not match "its task ran"
            for (int64_t b = 0; b < c.batch; ++b)
                for (int64_t j = 0; j < c.n; ++j) {
                    const int owner = int(b / rows) * gx + int(j / n);
                    wrong += (owner < done) == same_bits(d.y.data[b * c.n + j], poison<T>());
                }
            if (wrong) {
                *ok = false;
                printf("  task (%d, %d): %lld elements of y written outside its tile or left unwritten\n", ix, iy,
                       (long long)wrong);
            }
        }
    if (!d.y.guards_intact()) {
        *ok = false;
        printf("  a guard element around y was written\n");
    }
    return std::vector<T>(d.y.data, d.y.data + d.y.elems);
}

template <class T> static void check_linear(const LinearCase& c, Kernel kernel, const std::vector<int>& thread_counts,
                                            const std::vector<uint64_t>& seeds, std::vector<T>* linear_bits) {
    LinearData<T> d(c, 0x1234 + uint64_t(c.k) * 7 + uint64_t(c.n));
    const bool res = kernel == RESIDUAL;
    const std::vector<double>& ref = res ? d.ref : d.ref_nr;
    const std::vector<double>& scale = res ? d.scale : d.scale_nr;
    bool tiles_ok = true;
    std::vector<T> first;
    int64_t bad = 0, differ = 0, worst = -1;
    double max_abs = 0, worst_ratio = 0;
    for (int threads : thread_counts)
        for (uint64_t seed : seeds) {
            const std::vector<T> y = run_grid(d, kernel, threads, seed, false, &tiles_ok);
            if (first.empty()) {
                first = y;
                for (int64_t i = 0; i < d.y.elems; ++i) {
                    const double out = to_float(y[i]);
                    const double err = fabs(out - ref[i]);
                    // the tensor-core path counts K twice: any order, truncating adds (mma_linear.cuh)
                    const double terms = tensor_cores<T>(c) ? 2.0 * double(c.k) + 1 : double(c.k + 1);
                    const double allowed = Dt<T>::u * fabs(ref[i]) + (1 + Dt<T>::u) * terms * U32 * scale[i] +
                                           Dt<T>::tiny / 2;
                    const double ratio = err / allowed;
                    if (!(ratio <= 1)) ++bad;  // NaN counts as bad
                    if (!(ratio <= worst_ratio)) worst_ratio = ratio, worst = i;
                    if (err > max_abs) max_abs = err;
                }
            } else {
                for (int64_t i = 0; i < d.y.elems; ++i) differ += !same_bits(y[i], first[i]);
            }
        }
    int64_t split_differ = 0;
    if (c.gx > 1 || c.gy > 1) {
        const std::vector<T> y = run_grid(d, kernel, thread_counts[0], seeds[0], true, &tiles_ok);
        for (int64_t i = 0; i < d.y.elems; ++i) split_differ += !same_bits(y[i], first[i]);
    }
    int64_t vs_linear = 0;
    if (kernel == LINEAR) *linear_bits = first;
    else if (kernel == RESIDUAL_OFF)
        for (int64_t i = 0; i < d.y.elems; ++i) vs_linear += !same_bits((*linear_bits)[i], first[i]);
    const bool pass = bad == 0 && tiles_ok && differ == 0 && split_differ == 0 && vs_linear == 0;
    printf("%-28s %-4s B=%-2lld K=%-5lld N=%-3lld grid %dx%d %-22s threads/seeds %zux%zu max_abs %.3g worst_ratio "
           "%.3f at (%lld, %lld) %s\n",
           kernel_name(kernel), Dt<T>::name, (long long)c.batch, (long long)c.k, (long long)c.n, c.gx, c.gy, c.what,
           thread_counts.size(), seeds.size(), max_abs, worst_ratio, (long long)(worst < 0 ? -1 : worst / c.n),
           (long long)(worst < 0 ? -1 : worst % c.n), pass ? "PASS" : "FAIL");
    CHECK(bad == 0, "%s %s %s: %lld of %lld outputs outside the error budget", kernel_name(kernel), Dt<T>::name, c.what,
          (long long)bad, (long long)d.y.elems);
    CHECK(tiles_ok, "%s %s %s: a task wrote outside its tile, left it unwritten, or hit a guard", kernel_name(kernel),
          Dt<T>::name, c.what);
    CHECK(differ == 0, "%s %s %s: %lld output bits differ across seeds / block sizes (a race?)", kernel_name(kernel),
          Dt<T>::name, c.what, (long long)differ);
    CHECK(split_differ == 0, "%s %s %s: %lld output bits differ between the %dx%d grid and one task",
          kernel_name(kernel), Dt<T>::name, c.what, (long long)split_differ, c.gx, c.gy);
    CHECK(vs_linear == 0, "%s %s %s: %lld output bits differ from linear's", kernel_name(kernel), Dt<T>::name, c.what,
          (long long)vs_linear);
}

// Emulation seeds per configuration: 4 (small shapes) and 2 (K >= 4096), or MPK_KERNEL_SEEDS
// and half of it.
static std::vector<uint64_t> seeds(bool big) {
    const char* env = getenv("MPK_KERNEL_SEEDS");
    const int n = env ? atoi(env) : 4;
    std::vector<uint64_t> out;
    for (int i = 1; i <= (big ? (n + 1) / 2 : n); ++i) out.push_back(uint64_t(i));
    return out;
}

// Each path sums in its stated order, so the flag decides the bits: with the products 2^24 (k = 0),
// 1 (k = 8..15) and -2^24 (k = 16), the tensor-core path's increasing k loses every 1 against 2^24 and
// gives 0; the SIMT path's lane partials (lane 0: k 0-7, lane 1: k 8-15, lane 2: k 16-23) give
// (2^24 + 8) - 2^24 = 8. (A path that silently fell back would give 8 for both.)
template <class T> static void check_tensor_core_path_taken() {
    const LinearCase c{"paths' orders", 16, 64, 16, 1, 1};
    LinearData<T> d(c, 99);
    for (int64_t b = 0; b < c.batch; ++b)
        for (int64_t k = 0; k < c.k; ++k)
            d.x.data[b * c.k + k] = from_float<T>(k == 0 ? 4096.0f : k == 16 ? -4096.0f : k >= 8 && k < 16 ? 1.0f : 0.0f);
    for (int64_t j = 0; j < c.n; ++j)
        for (int64_t k = 0; k < c.k; ++k) d.w.data[j * c.k + k] = from_float<T>(k == 0 || k == 16 ? 4096.0f : 1.0f);
    void* bases[4] = {d.x.data, d.w.data, d.r.data, d.y.data};
    for (int tc = 0; tc < 2; ++tc) {
        MpkTask task = d.task(LINEAR, 1, 1, 0, 0);
        task.iparams[0] = tc;
        for (int64_t i = 0; i < d.y.elems; ++i) d.y.data[i] = poison<T>();
        MPK_RUN_TASK(make_view(task, bases, 128, 7), (linear_task<T>));
        const float want = tc ? 0.0f : 8.0f;
        int64_t bad = 0;
        for (int64_t i = 0; i < d.y.elems; ++i) bad += to_float(d.y.data[i]) != want;
        CHECK(bad == 0, "%s %s path: %lld of %lld outputs are not %g", Dt<T>::name, tc ? "tensor-core" : "SIMT",
              (long long)bad, (long long)d.y.elems, double(want));
        printf("linear %-4s %-11s path: 2^24 + 8 x 1 - 2^24 sums to %g in its order, every output %s\n", Dt<T>::name,
               tc ? "tensor-core" : "SIMT", double(want), bad ? "FAIL" : "PASS");
    }
}

template <class T> static void check_linear_cases() {
    const std::vector<int> both = {128, 256};
    const std::vector<uint64_t> many = seeds(false), few = seeds(true);
    struct Run {
        LinearCase c;
        bool big;
    };
    const Run runs[] = {
        {{"qwen gate/up-like", 8, 4096, 192, 2, 1}, true},
        {{"qwen down-like", 8, 12288, 64, 2, 1}, true},
        {{"decode B=1", 1, 4096, 40, 5, 1}, true},
        {{"one column, K=4096", 3, 4096, 1, 1, 1}, true},
        {{"odd K, 2-column tiles", 6, 37, 10, 5, 1}, false},
        {{"1-column tiles", 1, 200, 7, 7, 1}, false},
        {{"B=13: 8+4+1 rows", 13, 64, 12, 3, 1}, false},
        {{"rows split (grid.y)", 16, 96, 40, 2, 2}, false},  // 16-bit: tensor cores, one task's 16 rows = 2 x 8
        {{"tensor cores: B=32, K=520", 32, 520, 48, 3, 2}, false},   // 16-bit: a K slice's tail zero-filled
        {{"tensor cores: B=19, N=20", 19, 96, 20, 1, 1}, false},     // 16-bit: a pass of 3 rows, a W group of 4
        {{"tensor cores: misaligned x", 16, 64, 9, 3, 1, 0, 1}, false},  // the SIMT path despite the flag
        {{"K < 16 bytes", 5, 3, 9, 3, 1}, false},
        {{"K=200 tail, B=7", 7, 200, 9, 1, 1}, false},
        {{"scalar: misaligned x", 5, 64, 9, 3, 1, 0, 1}, false},
        {{"scalar: W col stride 2", 3, 50, 6, 2, 1, 0, 0, 2}, false},
        {{"scalar: x row stride K+3", 4, 128, 8, 2, 1, 3}, false},
        {{"vector + tail: strides K+5", 6, 203, 10, 2, 1, 5, 0, 1, 5}, false},
        {{"vector + tail: strides K+3", 9, 37, 8, 4, 1, 3, 0, 1, 3}, false},
    };
    for (const Run& run : runs) {
        std::vector<T> linear_bits;
        for (Kernel k : {LINEAR, RESIDUAL, RESIDUAL_OFF})
            check_linear<T>(run.c, k, both, run.big ? few : many, &linear_bits);
    }
}

// ---- allreduce

// wait / signal as the executor gives them (csrc/runtime/executor.cuh's wait_peer /
// signal_peer), without the worker bookkeeping: spin with acquire loads; give up when `abort`.
// Rank `slow` sleeps 0..300 us after each wait that succeeds, which widens the window between
// "every tile arrived" and the read: a rank that overwrote a slot too early shows there.
struct PeerContext {
    std::atomic<int> abort{0};
    int32_t slow = -1;
};
static bool test_wait(const TaskView& v, const int64_t* counter, int64_t needed, int32_t, int32_t) {
    PeerContext& ctx = *static_cast<PeerContext*>(v.executor);
    while (ld_acquire(counter) < needed) {
        if (ctx.abort.load()) return false;
        std::this_thread::yield();
    }
    if (v.rank == ctx.slow) {
        // (not thread_local: the emulation poisons its module's thread-locals, docs/simt.md)
        static std::atomic<uint64_t> rng{1};
        const uint64_t r = mix(rng.fetch_add(1));
        std::this_thread::sleep_for(std::chrono::microseconds(r % 300));
    }
    return true;
}
static void test_signal(const TaskView&, int64_t* counter, int64_t value, int32_t) { st_release(counter, value); }

// `world` ranks, each with tensors 0..2*layers: input x_l (2 l), output y_l (2 l + 1), and the
// shared staging buffer (last, symmetric) [W, B, H]; the buffer's grid.x tiles are the slots.
template <class T> struct Ranks {
    int32_t world, layers;
    int64_t batch, hidden, grid;
    std::vector<Buffer<T>> tensors;          // [world][2 * layers + 1]
    std::vector<std::vector<int64_t>> sig;   // [world][grid * (world + 1)]
    std::vector<void*> peer_tensors;         // [world * num_tensors]
    std::vector<int64_t*> peer_signals;      // [world]
    PeerContext ctx;
    int32_t num_tensors() const { return 2 * layers + 1; }
    Ranks(int32_t w, int32_t l, int64_t b, int64_t h, int64_t g) : world(w), layers(l), batch(b), hidden(h), grid(g) {
        tensors.reserve(size_t(w * num_tensors()));  // Buffer::data points into its own storage
        for (int32_t r = 0; r < w; ++r)
            for (int32_t t = 0; t < num_tensors(); ++t)
                tensors.emplace_back(t == num_tensors() - 1 ? int64_t(w) * b * h : b * h);
        sig.assign(size_t(w), std::vector<int64_t>(size_t(g * (w + 1)), 0));
        for (int32_t r = 0; r < w; ++r) {
            for (int32_t t = 0; t < num_tensors(); ++t)
                peer_tensors.push_back(t == num_tensors() - 1 ? tensors[r * num_tensors() + t].data : nullptr);
            peer_signals.push_back(sig[r].data());
        }
    }
    Buffer<T>& tensor(int32_t rank, int32_t t) { return tensors[rank * num_tensors() + t]; }
    MpkTask task(int32_t layer, int64_t g) const {
        const int64_t h = hidden / grid;
        MpkTask t{};
        t.task_type = 302;
        t.num_inputs = 1;
        t.num_outputs = 2;
        t.dependent_event = -1;
        t.iparams[0] = g, t.iparams[1] = layer, t.iparams[2] = layers;  // slot, use, uses per pass
        t.tiles[0] = tile2(2 * layer, g * h, sizeof(T), batch, h, hidden, 1);
        t.tiles[1] = tile2(2 * layer + 1, g * h, sizeof(T), batch, h, hidden, 1);
        MpkTile& b = t.tiles[2];
        b.tensor = num_tensors() - 1;
        b.ndim = 3;
        b.offset = g * h * int64_t(sizeof(T));
        b.dims[0] = world, b.dims[1] = batch, b.dims[2] = h, b.dims[3] = 1;
        b.strides[0] = batch * hidden, b.strides[1] = hidden, b.strides[2] = 1;
        return t;
    }
    TaskView view(const MpkTask& task, int32_t rank, int64_t iteration, int threads, uint64_t seed) {
        std::vector<void*> bases;
        for (int32_t t = 0; t < num_tensors(); ++t) bases.push_back(tensor(rank, t).data);
        TaskView v = make_view(task, bases.data(), threads, seed);
        v.iteration = iteration;
        v.rank = rank;
        v.world_size = world;
        v.num_tensors = num_tensors();
        v.peer_tensors = peer_tensors.data();
        v.peer_signals = peer_signals.data();
        v.wait_fn = test_wait;
        v.signal_fn = test_signal;
        v.executor = &ctx;
        return v;
    }
    // Rank r's input of layer l in pass `pass`: new values every pass.
    void fill_inputs(int32_t rank, int64_t pass) {
        for (int32_t l = 0; l < layers; ++l) {
            Buffer<T>& x = tensor(rank, 2 * l);
            for (int64_t i = 0; i < x.elems; ++i) x.data[i] = random_value<T>(uint64_t(pass) * 131 + rank * 17 + l, i, 1.0);
        }
    }
    // The fp32 rank-order sum of layer l's inputs in pass `pass` (the kernel's stated order).
    std::vector<T> expected(int32_t layer, int64_t pass) const {
        std::vector<T> out(size_t(batch * hidden));
        for (int64_t i = 0; i < batch * hidden; ++i) {
            float acc = 0.0f;
            for (int32_t q = 0; q < world; ++q) acc += to_float(random_value<T>(uint64_t(pass) * 131 + q * 17 + layer, i, 1.0));
            out[size_t(i)] = from_float<T>(acc);
        }
        return out;
    }
};

// One rank: y == 0 + x (bitwise), counters at n after each pass, 2 passes x 2 layers.
template <class T> static void check_allreduce_one_rank(int threads, uint64_t seed) {
    Ranks<T> rk(1, 2, 3, 40, 4);
    int64_t bad = 0, bad_sig = 0;
    for (int64_t pass = 1; pass <= 2; ++pass) {
        rk.fill_inputs(0, pass);
        for (int32_t l = 0; l < 2; ++l) {
            for (int64_t g = 0; g < rk.grid; ++g) {
                const MpkTask task = rk.task(l, g);
                const TaskView v = rk.view(task, 0, pass, threads, seed + g);
                MPK_RUN_TASK(v, (allreduce_task<T>));
                const int64_t n = (pass - 1) * 2 + l + 1;
                bad_sig += rk.sig[0][g * 2 + 0] != n || rk.sig[0][g * 2 + 1] != n;
            }
            const std::vector<T> want = rk.expected(l, pass);
            for (int64_t i = 0; i < rk.batch * rk.hidden; ++i) bad += !same_bits(rk.tensor(0, 2 * l + 1).data[i], want[i]);
        }
    }
    printf("allreduce %-4s one rank, 2 passes x 2 layers sharing 4 slots, threads %d seed %llu %s\n", Dt<T>::name,
           threads, (unsigned long long)seed, bad || bad_sig ? "FAIL" : "PASS");
    CHECK(bad == 0, "allreduce one rank %s: %lld outputs differ from 0 + x", Dt<T>::name, (long long)bad);
    CHECK(bad_sig == 0, "allreduce one rank %s: %lld slots' counters not at the use number", Dt<T>::name, (long long)bad_sig);
    CHECK(rk.tensor(0, 1).guards_intact() && rk.tensor(0, 4).guards_intact(), "allreduce wrote outside its tensors");
}

// Two ranks, only rank 0 runs, and its wait for rank 1's tile gives up: the block leaves together,
// y stays unwritten, rank 0 never frees the slot (its put into both ranks did happen).
static void check_allreduce_abort(int threads) {
    Ranks<float> rk(2, 1, 2, 16, 1);
    rk.fill_inputs(0, 1);
    rk.ctx.abort = 1;
    const MpkTask task = rk.task(0, 0);
    const TaskView v = rk.view(task, 0, 1, threads, 5);
    MPK_RUN_TASK(v, (allreduce_task<float>));
    int64_t written = 0;
    for (int64_t i = 0; i < 32; ++i) written += !same_bits(rk.tensor(0, 1).data[i], poison<float>());
    const bool pass = written == 0 && rk.sig[0][0] == 1 && rk.sig[1][0] == 1 && rk.sig[0][2] == 0 && rk.sig[0][1] == 0;
    printf("allreduce f32  aborted wait (rank 1 silent), threads %d: y unwritten, slot not freed %s\n", threads,
           pass ? "PASS" : "FAIL");
    CHECK(written == 0, "allreduce abort: %lld outputs written after the wait gave up", (long long)written);
    CHECK(rk.sig[0][0] == 1 && rk.sig[1][0] == 1, "allreduce abort: puts not signalled (%lld, %lld)",
          (long long)rk.sig[0][0], (long long)rk.sig[1][0]);
    CHECK(rk.sig[0][2] == 0 && rk.sig[0][1] == 0, "allreduce abort: counters moved (consumed %lld, rank 1 %lld)",
          (long long)rk.sig[0][2], (long long)rk.sig[0][1]);
}

// A task table allreduce's layer could not have built (no signal counters; a use past uses): task_fail
// (common.cuh) records the message in the view's record, and every thread leaves the task (nothing is
// signalled); without a record (a view built by hand) it throws, and run_block hands it to the caller.
static void check_allreduce_bad_task() {
    Ranks<float> rk(1, 1, 2, 8, 1);
    MpkTask task = rk.task(0, 0);
    TaskView v = rk.view(task, 0, 1, 128, 1);
    v.peer_signals = nullptr;
    std::string what[3];
    for (int i = 0; i < 2; ++i) {
        TaskFailure failure{};
        v.failure = &failure;
        MPK_RUN_TASK(v, (allreduce_task<float>));
        what[i] = failure.owner == uint64_t(reinterpret_cast<uintptr_t>(v.task)) ? failure.message : "(no record)";
        v.peer_signals = rk.peer_signals.data();
        task.iparams[1] = 1;  // use 1 of 1 use per pass
    }
    v.failure = nullptr;
    try {
        MPK_RUN_TASK(v, (allreduce_task<float>));
    } catch (const std::exception& e) {
        what[2] = e.what();
    }
    const bool pass = what[0].find("allreduce: no signal counters") != std::string::npos &&
                      what[1].find("bad slot use") != std::string::npos && what[2].find("bad slot use") != std::string::npos &&
                      rk.sig[0][0] == 0;
    printf("allreduce f32  a bad task (no counters; use >= uses) records its message, signals nothing; throws "
           "without a record %s\n", pass ? "PASS" : "FAIL");
    CHECK(what[0].find("allreduce: no signal counters") != std::string::npos, "no counters: got \"%s\"",
          what[0].c_str());
    CHECK(what[1].find("bad slot use") != std::string::npos, "use >= uses: got \"%s\"", what[1].c_str());
    CHECK(what[2].find("bad slot use") != std::string::npos, "no record: got \"%s\"", what[2].c_str());
    CHECK(rk.sig[0][0] == 0, "a failed task signalled (%lld)", (long long)rk.sig[0][0]);
}

// `world` ranks on OS threads, `passes` passes of 2 layers sharing the `grid` slots, new inputs
// each pass; rank world-1 sleeps at random before its tasks and after its waits, so the others
// run ahead and must wait for it to free a slot (with one slot, every task reuses it). Every
// rank's y of every pass must be the rank-order fp32 sum.
template <class T> static void check_allreduce_ranks(int32_t world, int64_t grid, int threads, uint64_t seed) {
    const int64_t passes = 4;
    Ranks<T> rk(world, 2, 5, 96, grid);
    rk.ctx.slow = world - 1;
    std::vector<std::vector<std::vector<T>>> got(static_cast<size_t>(world));  // [rank][pass * 2 + layer] = y
    std::vector<std::thread> ranks;
    std::atomic<int> errors{0};
    for (int32_t r = 0; r < world; ++r)
        ranks.emplace_back([&, r] {
            uint64_t rng = mix(seed + r);
            try {
                for (int64_t pass = 1; pass <= passes; ++pass) {
                    rk.fill_inputs(r, pass);  // only this rank reads its own input
                    for (int32_t l = 0; l < 2; ++l) {
                        for (int64_t g = 0; g < rk.grid; ++g) {
                            if (r == world - 1) {
                                rng = mix(rng);
                                std::this_thread::sleep_for(std::chrono::microseconds(rng % 300));
                            }
                            const MpkTask task = rk.task(l, g);
                            const TaskView v = rk.view(task, r, pass, threads, rng + g);
                            MPK_RUN_TASK(v, (allreduce_task<T>));
                        }
                        const Buffer<T>& y = rk.tensor(r, 2 * l + 1);
                        got[size_t(r)].emplace_back(y.data, y.data + y.elems);
                    }
                }
            } catch (const std::exception& e) {
                printf("  rank %d threw: %s\n", r, e.what());
                errors.fetch_add(1);
            }
        });
    for (std::thread& t : ranks) t.join();
    int64_t bad = 0, across = 0;
    for (int64_t pass = 1; pass <= passes && !errors.load(); ++pass)
        for (int32_t l = 0; l < 2; ++l) {
            const std::vector<T> want = rk.expected(l, pass);
            for (int32_t r = 0; r < world; ++r) {
                const std::vector<T>& y = got[size_t(r)][size_t((pass - 1) * 2 + l)];
                for (size_t i = 0; i < want.size(); ++i) {
                    bad += !same_bits(y[i], want[i]);
                    across += !same_bits(y[i], got[0][size_t((pass - 1) * 2 + l)][i]);
                }
            }
        }
    const bool pass = !errors.load() && bad == 0 && across == 0;
    printf("allreduce %-4s %d ranks on threads, %lld passes x 2 layers, %lld slot(s), threads %d seed %llu: "
           "bit-identical rank-order sums %s\n",
           Dt<T>::name, world, (long long)passes, (long long)grid, threads, (unsigned long long)seed,
           pass ? "PASS" : "FAIL");
    CHECK(errors.load() == 0, "allreduce %d ranks: a rank threw", world);
    CHECK(bad == 0, "allreduce %d ranks %s: %lld outputs differ from the fp32 rank-order sum", world, Dt<T>::name,
          (long long)bad);
    CHECK(across == 0, "allreduce %d ranks %s: %lld outputs differ across ranks", world, Dt<T>::name, (long long)across);
}

// ---- bench

template <class T> static double time_task_ms(int64_t k, int64_t n, int reps, int tensor_cores = 0) {
    Buffer<T> x(8 * k), w(n * k), y(8 * n);
    for (int64_t i = 0; i < x.elems; ++i) x.data[i] = random_value<T>(1, i, 1.0);
    for (int64_t i = 0; i < w.elems; ++i) w.data[i] = random_value<T>(2, i, 0.01);
    MpkTask task{};
    task.num_inputs = 2, task.num_outputs = 1, task.dependent_event = -1;
    task.iparams[0] = tensor_cores;
    task.tiles[0] = tile2(0, 0, sizeof(T), 8, k, k, 1);
    task.tiles[1] = tile2(1, 0, sizeof(T), n, k, k, 1);
    task.tiles[2] = tile2(2, 0, sizeof(T), 8, n, n, 1);
    void* bases[3] = {x.data, w.data, y.data};
    const TaskView v = make_view(task, bases, 128, 1);
    MPK_RUN_TASK(v, (linear_task<T>));  // warm up
    double best = 1e30;  // the fastest run: the machine may be shared
    for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        MPK_RUN_TASK(v, (linear_task<T>));
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
}

// tensor_cores: the same tasks on the tensor-core path (csrc/tasks/mma_linear.cuh), which the layers take
// only from 16 rows: what a warp instruction costs the emulation against the SIMT GEMV's long loops.
template <class T> static void bench(int tensor_cores = 0) {
    const double up = time_task_ms<T>(4096, 96, 10, tensor_cores), down = time_task_ms<T>(12288, 64, 10, tensor_cores);
    const double gflop = 2.0 * 8 * (4096.0 * 96 + 12288.0 * 64) * 1e-9 / ((up + down) * 1e-3);
    printf("bench %-4s%s 128 threads, fastest of 10: gate/up task x[8,4096] W[96,4096] %.2f ms, down task x[8,12288] "
           "W[64,12288] %.2f ms (%.2f GFLOP/s); Qwen3-8B MLP pass (256 + 64 tasks) on one core ~ %.2f s\n",
           Dt<T>::name, tensor_cores ? " tensor cores" : "", up, down, gflop, (256 * up + 64 * down) * 1e-3);
}

// ---- main

static void run_all() {
    check_linear_cases<float>();
    check_linear_cases<bf16_t>();
    check_linear_cases<fp16_t>();
    check_tensor_core_path_taken<bf16_t>();
    check_tensor_core_path_taken<fp16_t>();
    for (int threads : {128, 256})
        for (uint64_t seed : seeds(true)) {
            check_allreduce_one_rank<float>(threads, seed);
            check_allreduce_one_rank<bf16_t>(threads, seed);
            check_allreduce_one_rank<fp16_t>(threads, seed);
        }
    check_allreduce_bad_task();
    check_allreduce_abort(128);
    check_allreduce_abort(256);
    for (uint64_t seed : seeds(false)) {
        check_allreduce_ranks<float>(2, 1, 128, seed);
        check_allreduce_ranks<bf16_t>(2, 3, 256, seed);
        check_allreduce_ranks<float>(3, 1, 256, seed);
        check_allreduce_ranks<fp16_t>(3, 3, 128, seed);
    }
    bench<bf16_t>();
    bench<bf16_t>(1);
    bench<float>();
}

int main() {
    try {
        run_all();
    } catch (const std::exception& e) {  // e.g. mpk::simt::Error: a divergent barrier, a bad smem access
        ++g_failures;
        printf("  FAIL: a kernel run threw: %s\n", e.what());
    }
    if (g_failures) {
        printf("%d of %d kernel checks FAILED\n", g_failures.load(), g_checks.load());
        return 1;
    }
    printf("All kernel checks passed: %d checks\n", g_checks.load());
    return 0;
}
