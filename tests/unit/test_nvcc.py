"""nvcc builds the task kernels for the GPU: every instantiation the code generator can emit, and a
generated module (the Qwen3 MLP chain: the dispatcher, the persistent executor of
csrc/runtime/executor.cuh as one cooperative kernel, its CUDA host driver csrc/runtime/host_cuda.h,
and the entry points), for sm_80, sm_90a and sm_100a (where this nvcc has it); and that module
linked as a .so with the static CUDA runtime loads through ctypes without a GPU, where mpk_init
fails with the CUDA error named.

The same .cuh files run on the CPU through the SIMT emulation in every other test; this one proves
they are CUDA that nvcc accepts, and holds each kernel to a resource budget read from
`-Xptxas -v`: no register spills, no local memory beyond STACK_BUDGET (a stack frame means
local-memory traffic in a hot loop), and it prints registers and shared memory per kernel.
Skips, saying so, where nvcc is absent. Run: pytest tests/unit/test_nvcc.py -s
"""
import os
import re
import shutil
import subprocess

import pytest
import torch

from mirage.mpk import build, codegen, layers, memcheck
from mirage.mpk.dtypes import FLOATS
from mirage.mpk.errors import MPKRuntimeError
from mirage.mpk.persistent_kernel import PersistentKernel

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the CUDA build of the "
                                "kernels cannot be checked here (the CPU emulation still runs them)")
ARCHS = ["sm_80", "sm_90a", "sm_100a"]
# Bytes of stack frame (local memory) a kernel may use: none. (It was 16 for the kernels that can fail a
# task, the printf argument buffer of common.cuh task_fail's error path; task_fail now records its message
# in the view's record without printf, and task_fail_text writes a message with numbers straight into it.)
STACK_BUDGET = 0

_FUNC = re.compile(r"Compiling entry function '(\w+)' for '(sm_\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:, used \d+ barriers)?(?:, (\d+) bytes smem)?")


def supported_archs() -> list[str]:
    listed = subprocess.run([NVCC, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
    return [a for a in ARCHS if f"compute_{a[3:].rstrip('a')}" in listed]


def gencode(archs: list[str]) -> list[str]:
    return [f for a in archs for f in ("-gencode", f"arch=compute_{a[3:]},code={a}")]


def kinds() -> list[str]:
    import pkgutil
    return sorted(m.name for m in pkgutil.iter_modules(layers.__path__) if not m.name.startswith("_"))


def probe_source() -> str:
    """A __global__ wrapper per kernel instantiation the code generator can emit (kind x dtype)."""
    lines = ['#include "runtime/runtime.h"']
    lines += [f'#include "tasks/{k}.cuh"' for k in kinds()]
    for k in kinds():
        for d in FLOATS:
            fn = layers.kernel_function(k, (d,))
            lines.append(f"__global__ void probe_{k}_{d.name}(const mpk::TaskView* v) {{ {fn}(*v); }}")
    return "\n".join(lines) + "\n"


def ptxas_report(text: str) -> dict[tuple[str, str], dict]:
    """(mangled function, arch) -> registers, smem, stack, spill stores/loads from -Xptxas -v."""
    out, current = {}, None
    for line in text.splitlines():
        m = _FUNC.search(line)
        if m:
            current = (m.group(1), m.group(2))
            out[current] = {}
            continue
        if current is None:
            continue
        if (m := _PROPS.search(line)):
            out[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                spill_loads=int(m.group(3)))
        elif (m := _USED.search(line)):
            out[current].update(registers=int(m.group(1)), smem=int(m.group(2) or 0))
    return out


def nvcc(src_path: str, archs: list[str], out: str) -> str:
    """The device code only (-fatbin: ptxas's report is what these tests read; the host side is built by
    test_generated_module_links_and_names_the_missing_gpu), which saved the host compile's ~15 s."""
    cmd = [NVCC, "-std=c++17", "-x", "cu", "-fatbin", "-O3", "--threads", "0", "-Xptxas", "-v",
           *gencode(archs), "-I", build.csrc_dir(), src_path, "-o", out]
    print("$", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"nvcc failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    return proc.stdout + proc.stderr


def test_every_kernel_instantiation_builds_within_budget(tmp_path):
    """Each kernel instantiation in a translation unit of probes, not inside the every-variant module of
    test_launch_plan.py: nvcc's inliner decides per unit, and there the same kernel can measure other
    than a graph's module builds it (allreduce<float> had a 0 B stack frame here and 72 B of spills
    among every variant, where task_fail was no longer inlined)."""
    archs = supported_archs()
    src = tmp_path / "probe.cu"
    src.write_text(probe_source())
    report = ptxas_report(nvcc(str(src), archs, str(tmp_path / "probe.fatbin")))
    problems = []
    for k in kinds():
        for d in FLOATS:
            for arch in archs:
                key = next(((f, a) for f, a in report if a == arch and f"probe_{k}_{d.name}" in f), None)
                assert key is not None, f"no ptxas report for probe_{k}_{d.name} on {arch}"
                r = report[key]
                print(f"NVCC {arch} {k}<{d.name}>: {r.get('registers')} registers, {r.get('smem', 0)} B "
                      f"static smem, {r['stack']} B stack, {r['spill_stores']}/{r['spill_loads']} B "
                      f"spill st/ld")
                if r["spill_stores"] or r["spill_loads"]:
                    problems.append(f"{k}<{d.name}> {arch}: spills {r['spill_stores']}/{r['spill_loads']} B")
                if r["stack"] > STACK_BUDGET:
                    problems.append(f"{k}<{d.name}> {arch}: {r['stack']} B stack frame > budget "
                                    f"{STACK_BUDGET} B")
    assert not problems, "\n".join(problems)


def qwen3_mlp_kernel() -> PersistentKernel:
    """The gate/up -> silu_mul -> down+residual chain (not compiled)."""
    pk = PersistentKernel(test_mode=True, num_workers=2)
    b, h, i, g = 8, 64, 96, 2
    x = pk.attach_input(torch.zeros(b, h, dtype=torch.bfloat16), name="x")
    wg = pk.attach_input(torch.zeros(i, h, dtype=torch.bfloat16), name="w_gate")
    wu = pk.attach_input(torch.zeros(i, h, dtype=torch.bfloat16), name="w_up")
    wd = pk.attach_input(torch.zeros(h, i, dtype=torch.bfloat16), name="w_down")
    w = pk.shuffle_tensors([wg, wu], 0, g, name="w_gate_up")
    mid = pk.new_tensor((b, 2 * i), dtype=torch.bfloat16, name="mlp_mid")
    act = pk.new_tensor((b, i), dtype=torch.bfloat16, name="silu_out")
    out = pk.attach_input(torch.zeros(b, h, dtype=torch.bfloat16), name="mlp_out")
    pk.linear_layer(x, w, mid, (2 * g, 1, 1), (128, 1, 1))
    pk.silu_mul_layer(mid, act, (g, 1, 1), (128, 1, 1))
    pk.linear_with_residual_layer(act, wd, x, out, (4, 1, 1), (128, 1, 1))
    return pk


def test_generated_qwen3_mlp_module_builds(tmp_path):
    """The generated test_rank0.cu of the gate/up -> silu_mul -> down+residual chain, as nvcc sees it:
    the one-task launcher and the persistent kernel, without register spills."""
    pk = qwen3_mlp_kernel()
    src = codegen.source(codegen.Variants(pk.layers), "cpu")
    path = tmp_path / "test_rank0.cu"
    path.write_text(src)
    text = nvcc(str(path), supported_archs(), str(tmp_path / "module.fatbin"))
    report = ptxas_report(text)
    launcher = [key for key in report if "mpk_execute_one" in key[0]]
    assert sorted(a for _, a in launcher) == sorted(supported_archs()), launcher
    persistent = [key for key in report if "persistent_kernel" in key[0]]
    assert sorted(a for _, a in persistent) == sorted(supported_archs()), persistent
    for (fn, arch), r in sorted(report.items()):
        print(f"NVCC generated {arch} {fn}: {r.get('registers')} registers, {r['stack']} B stack, "
              f"{r['spill_stores']} B spill stores")
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (fn, arch, r)


def test_generated_module_links_and_names_the_missing_gpu(tmp_path):
    """The full generated module for sm_90a as a shared object with the static CUDA runtime (a module
    built on a machine without a GPU for one that has it): it links, loads through ctypes with the ABI
    check, and where no GPU (or no driver) exists mpk_init fails with the CUDA call, its file:line and
    the error's name, raised as MPKRuntimeError, instead of crashing the process."""
    pk = qwen3_mlp_kernel()
    graph, variants, src, _ = pk._prepare()
    path, so = tmp_path / "test_rank0.cu", tmp_path / "module.so"
    path.write_text(src)
    cmd = [NVCC, "-std=c++17", "-x", "cu", "-O3", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static",
           *gencode(["sm_90a"]), "-I", build.csrc_dir(), str(path), "-o", str(so)]
    print("$", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"nvcc failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: mpk_init would succeed here (this checks the no-GPU path)")
    want = r"the runtime rejected the kernel: mpk_init: .*host_cuda\.h:\d+: cudaMalloc\(.*\): cuda\w+ \("
    # this kernel's tensors are on the CPU, so test mode would guard them with guard pages, which a CUDA
    # module refuses (a CUDA kernel's tensors get red zones only: memcheck.Fences(pages=False))
    pk._fences = memcheck.Fences(pk._table(), graph, pages=False)
    with pytest.raises(MPKRuntimeError, match=want) as e:
        pk._start(str(so), graph, variants)
    print(f"NVCC module.so ({so.stat().st_size} bytes) without a GPU: {e.value}")


@pytest.mark.parametrize("read, name, line", [(1, "blockIdx", 15), (2, "gridDim", 17)])
def test_task_kernel_reading_block_index_is_refused(tmp_path, read, name, line):
    """A task kernel reading blockIdx / gridDim does not compile under nvcc either (runtime/simt.h): the
    static_assert's reason and the kernel's line (tests/csrc/refuse_blockidx.cu). The control, the same
    kernel without the read, compiles, and so does the executor's own blockIdx (runtime/host_cuda.h,
    in the generated-module tests above)."""
    src = "tests/csrc/refuse_blockidx.cu"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def compile_with(value: int) -> subprocess.CompletedProcess:
        cmd = [NVCC, "-std=c++17", "-x", "cu", "-c", *gencode(["sm_90a"]), "-I", build.csrc_dir(),
               f"-DMPK_READ={value}", f"{root}/{src}", "-o", str(tmp_path / "refused.o")]
        print("$", " ".join(cmd))
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    bad = compile_with(read)
    assert bad.returncode != 0, f"nvcc compiled a task kernel that reads {name}"
    text = bad.stdout + bad.stderr
    assert (f'static assertion failed with "task kernel reads {name}: a persistent worker runs many tasks '
            f"on one block; use the task's tiles and iparams (docs/simt.md)\"") in text, text[-3000:]
    assert f"at line {line} of {root}/{src}" in text, text[-3000:]
    good = compile_with(0)
    assert good.returncode == 0, f"the control did not compile:\n{good.stderr[-3000:]}"
