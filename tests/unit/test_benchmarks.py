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


# (a C++ benchmark, its arguments, what its output must hold)
CPP = [("simt_overhead", [], ["__syncthreads, 128 threads", "block_sum", "mma.m16n8k16", "cp.async.cg"]),
       ("gemv_rate", ["2"], ["W streamed", "W in cache"])]


@pytest.mark.skipif(shutil.which("g++") is None, reason="no g++: the CPU backend's compiler is missing")
@pytest.mark.parametrize("name,args,lines", CPP, ids=[c[0] for c in CPP])
def test_cpp_benchmark_builds_and_runs(name, args, lines, tmp_path):
    exe = str(tmp_path / name)
    build = run(["g++", "-std=c++17", "-O2", "-I", os.path.join(ROOT, "csrc"),
                 os.path.join(BENCH, f"{name}.cpp"), "-o", exe], str(tmp_path))
    assert build.returncode == 0, build.stderr[-3000:]
    out = run([exe, *args], str(tmp_path))
    assert out.returncode == 0, out.stderr[-3000:]
    missing = [line for line in lines if line not in out.stdout]
    assert missing == [], f"{name} ran but did not print {missing}"
