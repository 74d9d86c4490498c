// simt_check.h: what the C++ tests of the SIMT emulation share beside check.h's CHECK: run a block and
// take its error message, find a part of it, and print one PASS/FAIL line per test group.
// (tests/csrc/test_simt.cpp, tests/csrc/test_ptx.cpp)
#pragma once
#include <stdio.h>
#include <string>
#include "check.h"
#include "runtime/simt.h"

// Runs a block and returns its error message ("" when it finished cleanly).
template <class F> static std::string error_of(const mpk::simt::Block& b, F&& body) {
    try {
        mpk::simt::run_block(b, body);
    } catch (const mpk::simt::Error& e) {
        return e.what();
    }
    return "";
}
static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }
static void report(const char* name, int before, const std::string& detail = "") {
    printf("%-44s %s%s%s\n", name, g_failures == before ? "PASS" : "FAIL", detail.empty() ? "" : "  ", detail.c_str());
}
