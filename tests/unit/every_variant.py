"""The every-variant nvcc build, once per architecture per run, and the parser of ptxas's report.

tests/unit/test_launch_plan.py (persistent_kernel's registers and static shared memory) and
tests/unit/test_nvcc.py (each task kernel's registers, stack frame and spills) read the same build:
a generated module (codegen.source) whose dispatcher has every (layer kind, dtype) kernel the code
generator can emit, plus one `__global__ probe_<stem>_<dtype>` per variant that runs the task through
MPK_RUN_TASK. Under nvcc MPK_RUN_TASK calls the task as a function of its own (mpk::call_task<F>,
csrc/runtime/simt.h), so ptxas compiles each variant's function once and the persistent kernel and the
probe call that one function: the probe's report is the dispatcher's task, not a copy inlined apart.

One nvcc per architecture, the architectures in parallel (a process each: one report per process, no
interleaving). Each report is kept in the run's compile cache (MPK_CACHE_DIR: tests/conftest.py makes
a fresh one per run and shares it with the pytest-xdist workers) under a file lock and a key over the
source, csrc/ and nvcc, as build.py keys a module: whichever test asks first builds, the others read.
Test mode's and a production build's task code are the same (MPK_TEST_MODE changes the entry points
only, csrc/runtime/entry*.h). The one-task launcher is left out (-DMPK_NO_ONE_TASK_LAUNCHER): ptxas
compiles every callee again for each kernel that calls it, which was 60 s more per architecture.
"""
from __future__ import annotations

import concurrent.futures
import os
import re
import shutil
import subprocess
import types

from filelock import FileLock

from mirage.mpk import build, codegen, layers
from mirage.mpk.dtypes import FLOATS

NVCC = shutil.which("nvcc")
ARCHS = ["sm_80", "sm_90a", "sm_100a"]
# ptxas -v: an entry's header, a function's header (entries too), the stack line under it, and the
# entry's register / shared-memory line
_ENTRY = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
_FUNCTION = re.compile(r"Function properties for (\w+)")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, \d+ bytes cumulative stack size)?"
                   r"(?:, (\d+) bytes smem)?")


def supported_archs() -> list[str]:
    """ARCHS that this nvcc can build."""
    listed = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    return [a for a in ARCHS if f"compute_{a[3:].rstrip('a')}" in listed]


def gencode(archs: list[str]) -> list[str]:
    return [f for a in archs for f in ("-gencode", f"arch=compute_{a[3:]},code={a}")]


def variants() -> list[tuple[str, str, str]]:
    """(layer stem, dtype name, kernel function) for every instantiation the code generator can emit."""
    return [(k, d.name, layers.kernel_function(k, (d,))) for k in layers.layer_stems() for d in FLOATS]


def probe_name(stem: str, dtype: str) -> str:
    return f"probe_{stem}_{dtype}"


def source() -> str:
    fake = [types.SimpleNamespace(kind=k, cpp_function=layers.kernel_function(k, (d,)),
                                  outputs=[types.SimpleNamespace(tensor=types.SimpleNamespace(dtype=d))])
            for k in layers.layer_stems() for d in FLOATS]
    probes = [f'extern "C" __global__ void {probe_name(k, d)}(const mpk::TaskView* v) '
              f"{{ MPK_RUN_TASK(*v, ({fn})); }}" for k, d, fn in variants()]
    return codegen.source(codegen.Variants(fake), "cuda") + "\n" + "\n".join(probes) + "\n"


def demangle(names: list[str]) -> dict[str, str]:
    """Mangled -> C++ names through c++filt (binutils, beside the g++ the CPU backend needs)."""
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True)
    return dict(zip(names, out.stdout.splitlines()))


def _badness(props: dict) -> tuple[int, int]:
    return props["spill_stores"] + props["spill_loads"], props["stack"]


def ptxas_report(text: str) -> dict[str, dict[str, int | str]]:
    """function (demangled) -> stack, spill_stores, spill_loads (every function), registers and smem
    (kernels), from one architecture's `-Xptxas -v`.

    ptxas compiles a called function again for each kernel that calls it and prints its properties under
    that kernel's "Compiling entry function" line, and they differ: before runtime/task_view.h's direct
    calls, paged_attention's task spilled 168 B inside persistent_kernel and none inside its probe.
    A function is reported as the worst of its compilations (most spilled bytes, then largest stack), `kernel`
    naming the entry it was compiled for there, so no order of the report can hide the product's
    kernel behind a probe."""
    out: dict[str, dict[str, int | str]] = {}
    kernel = current = None
    for line in text.splitlines():
        if (m := _ENTRY.search(line)):
            kernel = current = m.group(1)
            out.setdefault(current, {})
        elif (m := _FUNCTION.search(line)):
            current = m.group(1)
        elif current and (m := _PROPS.search(line)):
            props = dict(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            old = out.setdefault(current, {})
            if "stack" not in old or _badness(props) > _badness(old):
                old.update(props, kernel=kernel or current)
        elif current and (m := _USED.search(line)):
            out.setdefault(current, {}).update(registers=int(m.group(1)), smem=int(m.group(2) or 0))
    names = demangle(list(out))
    for props in out.values():
        if "kernel" in props:
            props["kernel"] = names.get(props["kernel"], props["kernel"])
    return {names[f]: props for f, props in out.items()}


def nvcc_ptxas(src_path: str, arch: str, flags: list[str]) -> str:
    """nvcc's device build of `src_path` for one architecture with `-Xptxas -v`; its report's text."""
    cmd = [NVCC, "-std=c++17", "-x", "cu", "-fatbin", "-O3", "-Xptxas", "-v", *gencode([arch]), *flags,
           "-I", build.csrc_dir(), src_path, "-o", os.path.splitext(src_path)[0] + f".{arch}.fatbin"]
    print("$", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, f"nvcc {arch} failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    return proc.stdout + proc.stderr


def per_arch_texts(archs: list[str], build_one) -> dict[str, str]:
    """arch -> build_one(arch) (a ptxas report's text), the architectures built at once (one process each)."""
    with concurrent.futures.ThreadPoolExecutor(len(archs) or 1) as pool:
        return dict(zip(archs, pool.map(build_one, archs)))


def per_arch(archs: list[str], build_one) -> dict[str, dict[str, dict[str, int]]]:
    """arch -> ptxas_report(build_one(arch)), the architectures built at once."""
    return {a: ptxas_report(t) for a, t in per_arch_texts(archs, build_one).items()}


def _one_arch(src: str, arch: str) -> str:
    flags = ["-DMPK_BACKEND_CUDA", "-DMPK_TEST_MODE", "-DMPK_NO_ONE_TASK_LAUNCHER"]
    root = os.path.join(build.cache_dir(), "every_variant")
    os.makedirs(root, exist_ok=True)
    key = build.cache_key(src, NVCC, flags + [arch], build.csrc_dir())[:32]
    report = os.path.join(root, f"{arch}-{key}.ptxas.txt")
    with FileLock(report + ".lock"):
        if not os.path.exists(report):
            cu = os.path.join(root, f"{arch}-{key}.cu")
            with open(cu, "w") as f:
                f.write(src)
            text = nvcc_ptxas(cu, arch, flags)
            with open(report + ".tmp", "w") as f:
                f.write(text)
            os.replace(report + ".tmp", report)      # whole or absent: a killed build is built again
        with open(report) as f:
            return f.read()


def ptxas_texts(archs: list[str]) -> dict[str, str]:
    """arch -> ptxas's `-v` text of the every-variant module, built now or read from this run's cache."""
    src = source()
    return per_arch_texts(archs, lambda arch: _one_arch(src, arch))


def ptxas_reports(archs: list[str]) -> dict[str, dict[str, dict[str, int]]]:
    """arch -> ptxas_report of the every-variant module (ptxas_texts)."""
    return {a: ptxas_report(t) for a, t in ptxas_texts(archs).items()}


# ptxas's "wgmma.mma_async instructions are serialized due to wgmma pipeline crossing function boundary at
# a function call in the function '<mangled>'"
SERIALIZED_WGMMA = "C7510"
_SERIALIZED_IN = re.compile(r"in the function '(\w+)'")


def serialized_wgmma(text: str) -> list[str]:
    """The functions (demangled) in which ptxas serialized the wgmmas under a call: one per C7510 line of
    the report, the whole line where it names none (a format this parser does not know)."""
    found = [(m.group(1) if (m := _SERIALIZED_IN.search(line)) else line.strip())
             for line in text.splitlines() if SERIALIZED_WGMMA in line]
    names = demangle(found) if found else {}
    return [names.get(f, f) for f in found]
