// text.h: building a message into a fixed char buffer from host or device code, where neither
// std::string nor snprintf exists (device code: the request manager in meta.h and the executor in
// executor.cuh compose their errors on the GPU too; docs/runtime.md). Truncates silently at the
// buffer's end, always NUL-terminated.
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
    MPK_HOST_DEVICE Text& s(const char* str) {
        if (!buf || cap <= 0) return *this;
        while (str && *str && len + 1 < cap) buf[len++] = *str++;
        buf[len] = 0;
        return *this;
    }
    // Appends `v` in decimal.
    MPK_HOST_DEVICE Text& i(int64_t v) {
        char digits[24];
        int n = 0;
        uint64_t u = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
        do {
            digits[n++] = char('0' + u % 10);
            u /= 10;
        } while (u);
        if (v < 0) digits[n++] = '-';
        char out[24];
        for (int k = 0; k < n; ++k) out[k] = digits[n - 1 - k];
        out[n] = 0;
        return s(out);
    }
};

}  // namespace mpk
