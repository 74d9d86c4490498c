"""The every-variant nvcc build, once per architecture per suite run, shared by the tests that read it.

One source holds what both tests/unit/test_launch_plan.py and tests/unit/test_nvcc.py ask ptxas about:
  - a generated module whose dispatcher has every (layer kind x dtype) kernel the code generator can
    emit: `persistent_kernel` as the largest graph would have it (the launch plan's registers and static
    shared memory), built as compile() builds it but without the one-task launcher
    (-DMPK_NO_ONE_TASK_LAUNCHER: that entry, csrc/runtime/entry_cuda.h, is a second copy of every
    variant; test_nvcc's generated-module tests build it for a real graph);
  - a `__global__` probe per kernel instantiation (probe_<kind>_<dtype>), each compiled by ptxas on its
    own: the per-kernel budget of test_nvcc (no spills, no stack frame beyond its budget).
ptxas on the every-variant persistent kernel is the suite's longest single step (about 115 s of CPU per
architecture), and the two files built it, or the same front end, apart. Now `ptxas_report(arch)` builds
an architecture once under a lock in the suite's cache folder (MPK_SUITE_CACHE_DIR, tests/conftest.py):
the first test to ask builds it, the other reads the report. The two files walk the architectures in
opposite orders (`archs(first=...)`), so on two pytest-xdist workers they build two at once and then
read each other's.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import types

from filelock import FileLock

from mirage.mpk import build, codegen, layers
from mirage.mpk.dtypes import FLOATS

NVCC = shutil.which("nvcc")
ARCHS = ["sm_80", "sm_90a", "sm_100a"]
TIMEOUT_S = 1800        # one architecture: ~115 s of CPU on an idle core; a 2x-busy machine stays inside


def kinds() -> list[str]:
    return layers.layer_stems()


def probe_name(kind: str, dtype) -> str:
    return f"probe_{kind}_{dtype.name}"


def source() -> str:
    """The generated every-variant module, then a __global__ probe per kernel instantiation."""
    fake = [types.SimpleNamespace(kind=k, cpp_function=layers.kernel_function(k, (d,)),
                                  outputs=[types.SimpleNamespace(tensor=types.SimpleNamespace(dtype=d))])
            for k in kinds() for d in FLOATS]
    probes = [f"__global__ void {probe_name(k, d)}(const mpk::TaskView* v) "
              f"{{ {layers.kernel_function(k, (d,))}(*v); }}" for k in kinds() for d in FLOATS]
    return codegen.source(codegen.Variants(fake), "cuda") + "\n// ---- probes\n" + "\n".join(probes) + "\n"


def supported(wanted: list[str] = ARCHS) -> list[str]:
    listed = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    return [a for a in wanted if f"compute_{a[3:].rstrip('a')}" in listed]


def archs(first: str = "sm_80") -> list[str]:
    """The supported architectures, from `first` on round the list: two callers starting apart build
    different ones at once."""
    have = supported()
    i = have.index(first) if first in have else 0
    return have[i:] + have[:i]


def command(arch: str, src: str, out: str) -> list[str]:
    # -fatbin: device code only (ptxas's report is all the tests read; the host compile is ~15 s more)
    return [NVCC, "-std=c++17", "-x", "cu", "-fatbin", "-O3", "-DMPK_BACKEND_CUDA", "-DMPK_TEST_MODE",
            "-DMPK_NO_ONE_TASK_LAUNCHER", "-Xptxas", "-v", "-gencode", f"arch=compute_{arch[3:]},code={arch}",
            "-I", build.csrc_dir(), src, "-o", out]


def ptxas_report(arch: str) -> str:
    """nvcc's and ptxas's output for `arch` (the `-Xptxas -v` lines), built once per suite run."""
    src = source()
    key = hashlib.sha256("\0".join([src, build.headers_digest(build.csrc_dir()), " ".join(
        command(arch, "SRC", "OUT"))]).encode()).hexdigest()[:24]
    folder = os.environ.get("MPK_SUITE_CACHE_DIR") or tempfile.gettempdir()
    report = os.path.join(folder, f"every-variant-{arch}-{key}.txt")
    with FileLock(report + ".lock"):
        if os.path.exists(report):
            with open(report) as f:
                return f.read()
        with tempfile.TemporaryDirectory(prefix=f"every-variant-{arch}-") as d:
            path = os.path.join(d, "test_rank0.cu")
            with open(path, "w") as f:
                f.write(src)
            cmd = command(arch, path, os.path.join(d, "module.fatbin"))
            print("$", " ".join(cmd))
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert proc.returncode == 0, f"nvcc {arch} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
        text = proc.stdout + proc.stderr
        with open(report + ".tmp", "w") as f:
            f.write(text)
        os.replace(report + ".tmp", report)
        return text
