"""The representative subset (sanitizer_subset.py) under ThreadSanitizer and AddressSanitizer.

Each run is a child of the real interpreter with the sanitizer runtime preloaded
(mirage.mpk.sanitize, docs/sanitizers.md); it must exit 0 with zero reports in the project's frames.
Negative controls prove the counting: a real race (fault drop_dependency: a consumer reads a
tile while its producer writes it) and a heap overflow in a generated module count as project
reports (the overflow also with the child's fd 2 redirected, as pytest's capture does); a race
in a library outside the project counts only as "elsewhere". A C++ throw in a sanitized module
is caught under ASan (libstdc++ preloaded after libasan), and without that preload its CHECK
failure is a named report, not a silent exit 1.
How to run them by hand: docs/sanitizers.md.
"""
import os
import re
import subprocess

import pytest

from mirage.mpk import build, testing
from mirage.mpk.sanitize import run_under_sanitizer, runtime_library

HERE = os.path.dirname(os.path.abspath(__file__))
SUBSET = os.path.join(HERE, "sanitizer_subset.py")
TIMEOUT_S = 300          # each run takes about 30 s on 2 busy cores (docs/sanitizers.md)

# The fork graph (the same layer kinds as test_fork_point.py, so the same build) with the linear's
# first task waiting on nothing; then a plain two-thread race in a library outside the project.
RACE_CHILD = r"""
import ctypes, os, sys, torch
from mirage.mpk import testing
os.environ.pop("LD_PRELOAD", None)      # loaded already; the compiler need not preload it
from mirage.mpk.faults import Fault
graph = testing.load_reference(sys.argv[1], name="graph_checks")
for seed in range(4):
    pk = graph.new_pk(seed, fault=Fault("drop_dependency", "linear_1", (0, 0, 0)))
    t = graph.attach(pk, torch.float32, testing.generator(offset=1), x=(12, 96), w_norm=(96,),
                     w1=(48, 96), out_h=(12, 96), out_u=(12, 48), out_c=(12, 96))
    pk.rmsnorm_layer(input=t["x"], weight=t["w_norm"], output=t["out_h"], grid_dim=(4, 1, 1),
                     block_dim=graph.BLOCK)
    pk.linear_layer(input=t["out_h"], weight=t["w1"], output=t["out_u"], grid_dim=(6, 2, 1),
                    block_dim=graph.BLOCK)
    pk.elementwise_add_layer(input_a=t["out_h"], input_b=t["x"], output=t["out_c"], grid_dim=(6, 4, 1),
                             block_dim=graph.BLOCK)
    pk.compile()
    pk()
    pk.finalize()
    print(f"GRAPH race_control[seed={seed}] PASS", flush=True)
print("elsewhere:", ctypes.CDLL(sys.argv[2]).race_elsewhere())
"""
ELSEWHERE_SRC = r"""
#include <thread>
static int counter;
extern "C" int race_elsewhere() {
    std::thread a([] { for (int i = 0; i < 1000; i++) counter++; });
    std::thread b([] { for (int i = 0; i < 1000; i++) counter++; });
    a.join();
    b.join();
    return counter;
}
"""
OVERFLOW_SRC = r"""
#include <stdexcept>
extern "C" int read_past_end(int n) {
    int* p = new int[n];
    for (int i = 0; i < n; i++) p[i] = i;
    volatile int* q = p;
    int v = q[n];
    delete[] p;
    return v;
}
// what the SIMT emulation does with a kernel's violation (csrc/runtime/simt_cpu.h), caught here
extern "C" int throw_and_catch(int n) {
    try {
        throw std::runtime_error("thrown");
    } catch (const std::runtime_error&) {
        return n;
    }
}
"""
# fd 2 to a file first, as pytest's capture does for each test not run with -s
CAPTURED_CHILD = ("import ctypes, os, sys; fd = os.open(os.devnull, os.O_WRONLY); os.dup2(fd, 2); "
                  "print(getattr(ctypes.CDLL(sys.argv[1]), sys.argv[2])(4), flush=True)")


@pytest.mark.parametrize("kind", ["thread", "address"])
def test_subset_under_sanitizer(kind, tmp_path):
    result = run_under_sanitizer(kind, SUBSET, TIMEOUT_S, env={"MPK_OUTPUT_DIR": str(tmp_path)})
    result.show()
    detail = result.tails
    assert not result.timed_out, f"{result.summary}: over {TIMEOUT_S} s{detail}"
    assert result.returncode == 0, f"{result.summary}{detail}"
    runtime = {"thread": "libtsan", "address": "libasan"}[kind]
    assert re.search(rf"PASS in .*\(MPK_SANITIZE={kind}, runtime {runtime}", result.stdout), \
        f"the subset did not run sanitized{detail}"
    assert result.project_reports == [], f"{result.summary}:\n" + "\n\n".join(result.project_reports)
    expected = len(testing.load_reference(SUBSET, name="sanitizer_subset").cases(str(tmp_path)))
    assert result.graphs_run == expected, f"{result.summary}: expected {expected} graphs{detail}"


def test_race_is_counted(tmp_path):
    """Negative control (thread): the dropped dependency is a project report, the library race is not."""
    lib = str(tmp_path / "elsewhere.so")
    src = tmp_path / "elsewhere.cpp"
    src.write_text(ELSEWHERE_SRC)
    subprocess.run([os.environ.get("MPK_CXX", "g++"), "-std=c++17", "-O1", "-g", "-fPIC", "-shared",
                    "-pthread", "-fsanitize=thread", str(src), "-o", lib], check=True)
    result = run_under_sanitizer("thread", ["-c", RACE_CHILD, os.path.join(HERE, "graph_checks.py"), lib],
                                 TIMEOUT_S)
    result.show()
    assert result.returncode == 0, f"{result.summary}\n{result.stderr[-3000:]}"
    assert len(result.project_reports) >= 1, f"{result.summary}: the dropped dependency raced unseen"
    assert any("data race" in r and "csrc/tasks/" in r and ".cuh:" in r for r in result.project_reports), \
        "\n\n".join(result.project_reports)
    assert result.total_reports - len(result.project_reports) >= 1, \
        f"{result.summary}: the race outside the project was not seen (or counted as the project's)"


def test_race_is_counted_with_stderr_captured():
    """Negative control (thread): a race in a module built like the generated ones, in a child whose fd 2
    goes to a file (pytest's capture): TSan's exit code is 0, so a report lost with fd 2 would pass."""
    so = build.compile_module(ELSEWHERE_SRC, "cpu", test_mode=True, sanitize="thread").path
    result = run_under_sanitizer("thread", ["-c", CAPTURED_CHILD, so, "race_elsewhere"], TIMEOUT_S)
    result.show()
    assert result.returncode == 0, f"{result.summary}\n{result.stderr[-3000:]}"
    assert any("data race" in r for r in result.project_reports), \
        f"{result.summary}: the race went with fd 2\n{result.stderr[-3000:]}"


@pytest.fixture(scope="module")
def asan_module() -> str:
    """OVERFLOW_SRC built like the generated modules, under ASan (one build for the tests below)."""
    return build.compile_module(OVERFLOW_SRC, "cpu", test_mode=True, sanitize="address").path


def test_memory_error_is_counted(asan_module):
    """Negative control (address): a heap overflow in a module built like the generated ones."""
    child = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).read_past_end(4))"
    result = run_under_sanitizer("address", ["-c", child, asan_module], TIMEOUT_S)
    result.show()
    assert result.returncode != 0, "ASan halts on the first error"
    assert len(result.project_reports) == 1, f"{result.summary}\n{result.stderr[-3000:]}"
    assert "heap-buffer-overflow" in result.project_reports[0], result.project_reports[0]
    assert "heap-buffer-overflow" in result.summary, f"the summary does not name the cause: {result.summary}"


def test_report_is_counted_with_stderr_captured(asan_module):
    """The same overflow in a child whose fd 2 goes to a file, as under pytest without -s: the report is
    still read (from ASan's log_path, not the child's stderr), not lost with a bare exit 1."""
    result = run_under_sanitizer("address", ["-c", CAPTURED_CHILD, asan_module, "read_past_end"], TIMEOUT_S)
    result.show()
    assert result.returncode != 0, "ASan halts on the first error"
    assert len(result.project_reports) == 1, f"{result.summary}: the report went with fd 2\n{result.stderr}"
    assert "heap-buffer-overflow" in result.project_reports[0], result.project_reports[0]


def test_cxx_exception_under_asan(asan_module):
    """A C++ throw in a sanitized module (a SIMT error in a kernel) is caught as usual under ASan: the harness
    preloads libstdc++ after libasan, so ASan's __cxa_throw interceptor finds the real one."""
    result = run_under_sanitizer("address", ["-c", CAPTURED_CHILD, asan_module, "throw_and_catch"], TIMEOUT_S)
    result.show()
    assert result.returncode == 0 and result.total_reports == 0, f"{result.summary}\n{result.stderr}"
    assert result.stdout.strip() == "4", result.stdout


def test_cxx_exception_without_libstdcxx_preloaded_is_named(asan_module):
    """Negative control: with libasan alone preloaded (what the harness did before), the same throw kills
    the child in ASan's interceptor (exit 1, fd 2 captured); the run names that CHECK failure."""
    env = {"LD_PRELOAD": runtime_library("address")}
    result = run_under_sanitizer("address", ["-c", CAPTURED_CHILD, asan_module, "throw_and_catch"], TIMEOUT_S,
                                 env=env)
    result.show()
    assert result.returncode != 0, f"{result.summary}: the throw survived without libstdc++ preloaded"
    assert len(result.project_reports) == 1, f"{result.summary}\n{result.stderr}"
    assert "CHECK failed" in result.project_reports[0] and "throw_and_catch" in result.project_reports[0], \
        result.project_reports[0]
    assert "real___cxa_throw" in result.summary, f"the summary does not name the cause: {result.summary}"


def test_runtime_libraries_exist():
    for kind in ("thread", "address"):
        assert os.path.exists(runtime_library(kind))
