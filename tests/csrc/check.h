// check.h: the C++ tests' one assertion. CHECK(cond, fmt, ...) counts a check; when cond is false
// it prints file:line, the condition and the message, and counts a failure (each test's main
// exits non-zero when g_failures > 0). Atomic: some tests check from several threads. Test
// harness only: the runtime and kernels have no globals.
#pragma once
#include <stdio.h>
#include <atomic>

static std::atomic<int> g_checks{0}, g_failures{0};
#define CHECK(cond, ...)                                                \
    do {                                                                \
        ++g_checks;                                                     \
        if (!(cond)) {                                                  \
            ++g_failures;                                               \
            printf("  FAIL %s:%d: %s -- ", __FILE__, __LINE__, #cond);  \
            printf(__VA_ARGS__);                                        \
            printf("\n");                                               \
        }                                                               \
    } while (0)
