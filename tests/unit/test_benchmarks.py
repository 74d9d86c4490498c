"""The benchmarks do not rot: each runs end to end at a tiny size and prints its figures
(benchmarks/README.md has the method and the real runs). Nothing here is timed or compared: a
benchmark that no longer runs against the library (a changed signature, a renamed attribute) fails.

Not run here: soak.py has its own test (test_soak.py); qwen3_mlp_pass.py needs the Qwen3-8B MLP
weights at full size (about 0.6 GB and a minute on 2 cores) and compile_time.py times cold nvcc
builds (about a minute): both are run by hand, as benchmarks/README.md says.
"""
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "benchmarks")

# (script and its tiny arguments, a line its last figures print)
SCRIPTS = [
    (["pertask_overhead.py", "--repeat", "1"], "4 worker(s): pk()"),
    (["profiler_overhead.py", "--rounds", "1"], "export of the trace and CSV"),
    (["compile_scaling.py", "--repeat", "1", "--sizes", "100"], "stage columns"),
    (["csrc_ab.py", os.path.join(ROOT, "csrc"), os.path.join(ROOT, "csrc"), "--rounds", "2", "--side", "8"],
     "B "),
]


def run(cmd: list[str], cwd: str) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    shown = " ".join(os.path.basename(c) if c.startswith(BENCH) else c for c in cmd)
    print(f"$ {shown} -> exit {out.returncode}")
    print(out.stdout)
    return out


@pytest.mark.parametrize("argv,last", SCRIPTS, ids=[s[0][0] for s in SCRIPTS])
def test_benchmark_script_runs(argv, last, tmp_path):
    out = run([sys.executable, os.path.join(BENCH, argv[0]), *argv[1:]], str(tmp_path))
    assert out.returncode == 0, f"{argv[0]} exited {out.returncode}:\n{out.stderr[-3000:]}"
    assert last in out.stdout, f"{argv[0]} ran but did not print {last!r}"


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU backend's compiler is missing")
def test_simt_overhead_builds_and_runs(tmp_path):
    exe = str(tmp_path / "simt_overhead")
    build = run(["g++", "-std=c++17", "-O2", "-I", os.path.join(ROOT, "csrc"),
                 os.path.join(BENCH, "simt_overhead.cpp"), "-o", exe], str(tmp_path))
    assert build.returncode == 0, build.stderr[-3000:]
    out = run([exe], str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "__syncthreads, 128 threads" in out.stdout and "block_sum" in out.stdout
    assert "mma.m16n8k16" in out.stdout and "cp.async.cg" in out.stdout


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU backend's compiler is missing")
def test_gemv_rate_builds_and_runs(tmp_path):
    exe = str(tmp_path / "gemv_rate")
    build = run(["g++", "-std=c++17", "-O2", "-I", os.path.join(ROOT, "csrc"),
                 os.path.join(BENCH, "gemv_rate.cpp"), "-o", exe], str(tmp_path))
    assert build.returncode == 0, build.stderr[-3000:]
    out = run([exe, "2"], str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    assert "W streamed" in out.stdout and "W in cache" in out.stdout
