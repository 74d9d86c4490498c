// text.h: building a message into a fixed char buffer from host or device code, where neither
// std::string nor snprintf exists (device code: the request manager in meta.h and the executor in
// executor.cuh compose their errors on the GPU too; docs/runtime.md). Truncates silently at the
// buffer's end, always NUL-terminated. Its appends are functions of their own (MPK_NOINLINE,
// platform.h): a message is a cold path, and inlined its loops would be compiled into every caller.
//     char buf[128];
//     Text(buf, sizeof buf).s("request ").i(r).s(" needs ").i(n).s(" pages");
// A Text over (nullptr, 0) drops everything (a message that lost to an earlier one).
#pragma once
#include <stdint.h>
#include "platform.h"

namespace mpk {

struct Text {
    char* buf;
    int32_t cap, len;
    MPK_HOST_DEVICE Text(char* b, int32_t c) : buf(b), cap(c), len(0) {
        if (buf && cap > 0) buf[0] = 0;
    }
    // Appends the NUL-terminated string `str`.
    MPK_HOST_DEVICE MPK_NOINLINE Text& s(const char* str) {
        if (!buf || cap <= 0) return *this;
        while (str && *str && len + 1 < cap) buf[len++] = *str++;
        buf[len] = 0;
        return *this;
    }
    // Appends `v` in decimal, most significant digit first, straight into buf: no local array (on the
    // GPU a thread's array indexed at run time is local memory, a stack frame in every kernel that can
    // fail a task with a number in its message; tests/unit/test_nvcc.py holds kernels to none).
    MPK_HOST_DEVICE MPK_NOINLINE Text& i(int64_t v) {
        if (!buf || cap <= 0) return *this;
        if (v < 0) s("-");
        const uint64_t u = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
        uint64_t p = 1;
        while (u / p >= 10) p *= 10;
        for (; p > 0; p /= 10)
            if (len + 1 < cap) buf[len++] = char('0' + (u / p) % 10);
        buf[len] = 0;
        return *this;
    }
};

}  // namespace mpk
