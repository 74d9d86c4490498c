// test_guard.cpp: csrc/runtime/guard.h alone. A thread with a ThreadScope that touches a guard
// page of its table gets a record (address, tensor, read/write, task, worker) and the page opened
// and filled with MPK_GUARD_RED_BYTE, so the access completes; every other fault (no scope on the
// thread, or an address outside the table) goes to the handler installed before guard.h's.
// Run: bash tests/csrc/run_runtime_tests.sh plain   (builds and runs every test of that script)
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "check.h"
#include "runtime/guard.h"

static volatile uintptr_t g_foreign_addr = 0;
static volatile int g_foreign_hits = 0;

// The "previous" handler (Python's faulthandler in real use): records and opens the page itself.
static void foreign(int, siginfo_t* si, void*) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(si->si_addr), size = uintptr_t(sysconf(_SC_PAGESIZE));
    g_foreign_addr = a;
    g_foreign_hits = g_foreign_hits + 1;
    mprotect(reinterpret_cast<void*>(a & ~(size - 1)), size, PROT_READ | PROT_WRITE);
}

int main() {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_sigaction = foreign;
    a.sa_flags = SA_SIGINFO;
    sigemptyset(&a.sa_mask);
    sigaction(SIGSEGV, &a, nullptr);
    CHECK(mpk::guard::install() && mpk::guard::install(), "install (twice: once per module)");

    // [guard of tensor 0][usable][guard of tensor 1][inaccessible, not in the table]
    char* m = static_cast<char*>(mmap(nullptr, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    mprotect(m, page, PROT_NONE);
    mprotect(m + 2 * page, 2 * page, PROT_NONE);
    const int64_t ranges[] = {int64_t(uintptr_t(m)), int64_t(uintptr_t(m + page)), 0,
                              int64_t(uintptr_t(m + 2 * page)), int64_t(uintptr_t(m + 3 * page)), 1};
    int64_t faults[4 * MPK_GUARD_FAULT_FIELDS] = {0}, count = 0;
    const mpk::guard::Table table{ranges, 2, 4, faults, &count};
    volatile char* p = m;

    p[10] = 1;  // a guard page, but no scope on this thread: not ours
    CHECK(g_foreign_hits == 1 && g_foreign_addr == uintptr_t(m + 10) && count == 0,
          "no scope: chained (hits %d, count %lld)", g_foreign_hits, (long long)count);
    {
        const mpk::guard::ThreadScope scope(table, nullptr, 7, -1);
        p[2 * page + 5] = 42;  // tensor 1's guard page: recorded, opened, completed
        CHECK(count == 1 && faults[0] == int64_t(uintptr_t(m + 2 * page + 5)) && faults[1] == 1 && faults[3] == 7 &&
                  faults[4] == -1, "record: count %lld addr %lld tensor %lld task %lld worker %lld", (long long)count,
              (long long)faults[0], (long long)faults[1], (long long)faults[3], (long long)faults[4]);
#if defined(__x86_64__)
        CHECK(faults[2] == MPK_ACCESS_WRITE, "access %lld, expected write", (long long)faults[2]);
#endif
        CHECK(p[2 * page + 5] == 42 && (unsigned char)p[2 * page + 6] == MPK_GUARD_RED_BYTE &&
                  (unsigned char)p[3 * page - 1] == MPK_GUARD_RED_BYTE, "the write completed inside a red-filled page");
        mprotect(m + 2 * page, page, PROT_NONE);
        const char r = p[2 * page + 100];  // a read: recorded as one
        CHECK(count == 2 && r == char(MPK_GUARD_RED_BYTE), "read record: count %lld", (long long)count);
#if defined(__x86_64__)
        CHECK(faults[MPK_GUARD_FAULT_FIELDS + 2] == MPK_ACCESS_READ, "access %lld, expected read",
              (long long)faults[MPK_GUARD_FAULT_FIELDS + 2]);
#endif
        p[3 * page + 1] = 3;  // inside a scope but outside the table: not ours
        CHECK(g_foreign_hits == 2 && g_foreign_addr == uintptr_t(m + 3 * page + 1) && count == 2,
              "outside the table: chained (hits %d, count %lld)", g_foreign_hits, (long long)count);
    }
    CHECK(mpk::guard::current() == nullptr, "the scope restored the thread's context");
    munmap(m, 4 * page);
    printf("guard.h: guard-page faults recorded and completed, others chained PASS\n");
    printf("%s: %d checks, %d failure(s)\n", g_failures ? "FAILED" : "All guard tests passed", g_checks.load(),
           g_failures.load());
    return g_failures ? 1 : 0;
}
