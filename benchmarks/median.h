// median.h: what the C++ benchmarks share (simt_overhead.cpp, gemv_rate.cpp): the median of 5 timed runs.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

// Median over 5 runs of f(), in seconds.
template <class F> static double median_s(F&& f) {
    std::vector<double> t;
    for (int r = 0; r < 5; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        f();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[2];
}
