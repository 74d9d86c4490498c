// test_kernels_dtypes.cpp: the dtype layer (csrc/runtime/dtypes.h) every task kernel uses:
// from_float/to_float against the bit patterns torch gives (ties to even, max finite, overflow
// to inf, fp16 subnormals, NaN), and every 16-bit pattern round-trips. The kernels themselves:
// tests/csrc/test_kernels_elementwise.cpp and test_kernels_linear.cpp.
// Build and run: bash tests/csrc/run_kernel_tests.sh test_kernels_dtypes
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "runtime/dtypes.h"

using namespace mpk;

static int g_failures = 0;

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

int main() {
    check_dtypes();
    if (g_failures) {
        printf("%d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("All kernel checks passed: dtype conversions\n");
    return 0;
}
