"""The representative subset (sanitizer_subset.py) under ThreadSanitizer and AddressSanitizer.

Each run is a child of the real interpreter with the sanitizer runtime preloaded
(mirage.mpk.sanitize, docs/sanitizers.md); it must exit 0 with zero reports in the project's frames.
Negative controls prove the counting: a real race (fault drop_dependency: a consumer reads a
tile while its producer writes it) and a heap overflow in a generated module count as project
reports; a race in a library outside the project counts only as "elsewhere".
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
extern "C" int read_past_end(int n) {
    int* p = new int[n];
    for (int i = 0; i < n; i++) p[i] = i;
    volatile int* q = p;
    int v = q[n];
    delete[] p;
    return v;
}
"""


def _show(result) -> None:
    print(result.summary)
    for report in result.project_reports:
        print(report)


@pytest.mark.parametrize("kind", ["thread", "address"])
def test_subset_under_sanitizer(kind, tmp_path):
    result = run_under_sanitizer(kind, SUBSET, TIMEOUT_S, env={"MPK_OUTPUT_DIR": str(tmp_path)})
    _show(result)
    detail = f"\nstdout tail:\n{result.stdout[-3000:]}\nstderr tail:\n{result.stderr[-3000:]}"
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
    _show(result)
    assert result.returncode == 0, f"{result.summary}\n{result.stderr[-3000:]}"
    assert len(result.project_reports) >= 1, f"{result.summary}: the dropped dependency raced unseen"
    assert any("data race" in r and "csrc/tasks/" in r and ".cuh:" in r for r in result.project_reports), \
        "\n\n".join(result.project_reports)
    assert result.total_reports - len(result.project_reports) >= 1, \
        f"{result.summary}: the race outside the project was not seen (or counted as the project's)"


def test_memory_error_is_counted():
    """Negative control (address): a heap overflow in a module built like the generated ones."""
    so = build.compile_module(OVERFLOW_SRC, "cpu", test_mode=True, sanitize="address").path
    child = "import ctypes, sys; print(ctypes.CDLL(sys.argv[1]).read_past_end(4))"
    result = run_under_sanitizer("address", ["-c", child, so], TIMEOUT_S)
    _show(result)
    assert result.returncode != 0, "ASan halts on the first error"
    assert len(result.project_reports) == 1, f"{result.summary}\n{result.stderr[-3000:]}"
    assert "heap-buffer-overflow" in result.project_reports[0], result.project_reports[0]


def test_runtime_libraries_exist():
    for kind in ("thread", "address"):
        assert os.path.exists(runtime_library(kind))
