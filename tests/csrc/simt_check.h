// simt_check.h: what the C++ tests of the SIMT emulation share beside check.h's CHECK: run a block and
// take its error message, find a part of it or all of several (expect), and print one PASS/FAIL line per
// test group.
// (tests/csrc/test_simt.cpp, test_ptx.cpp, test_mbarrier.cpp, test_tma.cpp)
#pragma once
#include <stdio.h>
#include <initializer_list>
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
// A block's error message must hold every part; the message is printed as the evidence, as a user sees it.
inline void expect(const char* what, const std::string& err, std::initializer_list<std::string> parts) {
    bool ok = !err.empty();
    for (const std::string& p : parts) ok = ok && has(err, p);
    CHECK(ok, "%s: got \"%s\"", what, err.c_str());
    printf("  %-34s %s\n", what, err.c_str());
}
static void report(const char* name, int before, const std::string& detail = "") {
    printf("%-44s %s%s%s\n", name, g_failures == before ? "PASS" : "FAIL", detail.empty() ? "" : "  ", detail.c_str());
}
