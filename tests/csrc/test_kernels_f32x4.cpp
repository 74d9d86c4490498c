// test_kernels_f32x4.cpp: csrc/tasks/f32x4.cuh's CPU forms against their definition, bit for bit.
// The SIMT GEMV (csrc/tasks/linear.cuh) reaches its data through load_floats and columns_of and sums
// through f32x4; on the CPU the bf16 and fp32 forms are SSE2 code of their own, so each must give
// exactly the values the generic (GPU) definition gives:
//   load_floats<T, N>(p)      out[i] = to_float(p[i])
//   columns_of<T, N>(row, k)  out[i][c] = to_float(row[c][k + i])
//   a += x * w                a[c] = a[c] + x * w[c], one rounded product and one rounded sum per element
// with the reference written here from the formats' definitions (bf16: the fp32 bits' top half; fp32:
// itself), over random bit patterns, NaNs, infinities, zeros of both signs and subnormals included.
// Negative control: a columns_of that swaps two rows, compared by the same function, must be reported.
// Build and run: bash tests/csrc/run_kernel_tests.sh test_kernels_f32x4
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "tasks/f32x4.cuh"

using namespace mpk;

#include "check.h"

static uint64_t mix(uint64_t x) {  // splitmix64
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

// The formats' definitions, independent of dtypes.h: bf16 is the top half of an fp32's bits.
static float defined_float(bf16_t x) { return float_of(uint32_t(x.bits) << 16); }
static float defined_float(float x) { return x; }

// Every bit pattern class: random bits, then specials placed at seeded positions.
static void fill(bf16_t* p, int n, uint64_t seed) {
    static const uint16_t special[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0x0001, 0x807F, 0x3F80};
    for (int i = 0; i < n; ++i) p[i].bits = uint16_t(mix(seed * 1000 + i));
    for (int i = 0; i < n; i += 5) p[i].bits = special[mix(seed + i) % 9];
}
static void fill(float* p, int n, uint64_t seed) {
    static const uint32_t special[] = {0x0u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x00000001u,
                                       0x807FFFFFu, 0x3F800000u};
    for (int i = 0; i < n; ++i) p[i] = float_of(uint32_t(mix(seed * 1000 + i)));
    for (int i = 0; i < n; i += 5) p[i] = float_of(special[mix(seed + i) % 8]);
}

template <class T> static const char* name();
template <> const char* name<bf16_t>() { return "bf16"; }
template <> const char* name<float>() { return "f32"; }

// columns_of's result against the definition: the number of (i, c) whose bits differ.
template <class T, int N> static int columns_wrong(const T* const (&row)[4], int64_t k, const f32x4 (&got)[N]) {
    int wrong = 0;
    for (int i = 0; i < N; ++i)
        for (int c = 0; c < 4; ++c) wrong += bits_of(got[i][c]) != bits_of(defined_float(row[c][k + i]));
    return wrong;
}

// A broken columns_of (rows 1 and 2 swapped): the negative control of columns_wrong.
template <class T, int N> static void columns_swapped(const T* const (&row)[4], int64_t k, f32x4 (&out)[N]) {
    const T* const swapped[4] = {row[0], row[2], row[1], row[3]};
    columns_of<T, N>(swapped, k, out);
}

template <class T> static void check_forms(uint64_t seed) {
    constexpr int N = PACK16<T>, K = 4 * N;
    alignas(16) T w[4][K];
    for (int c = 0; c < 4; ++c) fill(w[c], K, seed * 4 + c);
    const T* const row[4] = {w[0], w[1], w[2], w[3]};
    int load_wrong = 0, columns_bad = 0, control_bad = 0;
    for (int64_t k = 0; k < K; k += N) {
        float got[N];
        load_floats<T, N>(w[1] + k, got);
        for (int i = 0; i < N; ++i) load_wrong += bits_of(got[i]) != bits_of(defined_float(w[1][k + i]));
        f32x4 cols[N], broken[N];
        columns_of<T, N>(row, k, cols);
        columns_bad += columns_wrong<T, N>(row, k, cols);
        columns_swapped<T, N>(row, k, broken);
        control_bad += columns_wrong<T, N>(row, k, broken);
    }
    CHECK(load_wrong == 0, "load_floats<%s, %d>: %d of %d values differ from the format's definition", name<T>(), N,
          load_wrong, K);
    CHECK(columns_bad == 0, "columns_of<%s, %d>: %d of %d values differ from the definition", name<T>(), N,
          columns_bad, 4 * K);
    CHECK(control_bad > 0, "the control (columns_of with rows 1 and 2 swapped) was not caught for %s", name<T>());
    printf("%s seed %llu: load_floats 0 of %d wrong, columns_of %d of %d wrong, control (rows swapped) %d wrong"
           " -> %s\n", name<T>(), (unsigned long long)seed, K, columns_bad, 4 * K, control_bad,
           load_wrong == 0 && columns_bad == 0 && control_bad > 0 ? "PASS" : "FAIL");
}

// a += x * w, element by element, as the scalar fp32 operations it stands for.
static void check_multiply_add(uint64_t seed) {
    int wrong = 0, n = 0;
    for (int t = 0; t < 2000; ++t, n += 4) {
        float a[4], w[4], x;
        for (int c = 0; c < 4; ++c) {
            a[c] = float_of(uint32_t(mix(seed * 7919 + t * 8 + c)) & 0xBFFFFFFFu);   // finite, |a| < 4
            w[c] = float_of(uint32_t(mix(seed * 7919 + t * 8 + 4 + c)) & 0xBFFFFFFFu);
        }
        x = float_of(uint32_t(mix(seed * 31 + t)) & 0xBFFFFFFFu);
        f32x4 av = make_f32x4(0.0f, 0.0f, 0.0f, 0.0f), wv = make_f32x4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int c = 0; c < 4; ++c) av[c] = a[c], wv[c] = w[c];
        av += x * wv;
        for (int c = 0; c < 4; ++c) {
            volatile float product = x * w[c];   // rounded to fp32 on its own, as the definition says
            wrong += bits_of(av[c]) != bits_of(a[c] + product);
        }
    }
    CHECK(wrong == 0, "f32x4 a += x * w: %d of %d elements differ from a + (x * w) in fp32", wrong, n);
    printf("f32x4 a += x * w, seed %llu: %d of %d elements differ from fp32's a + round(x * w) -> %s\n",
           (unsigned long long)seed, wrong, n, wrong == 0 ? "PASS" : "FAIL");
}

int main() {
    for (uint64_t seed = 1; seed <= 3; ++seed) {
        check_forms<bf16_t>(seed);
        check_forms<float>(seed);
        check_multiply_add(seed);
    }
    if (g_failures) {
        printf("%d of %d kernel checks FAILED\n", g_failures.load(), g_checks.load());
        return 1;
    }
    printf("All kernel checks passed: %d checks\n", g_checks.load());
    return 0;
}
