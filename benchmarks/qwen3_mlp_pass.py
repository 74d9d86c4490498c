"""One test-mode pass of the Qwen3-8B MLP chain (batch 8): the CUDA kernels under the CPU emulation
beside the former native CPU kernels, as a ratio in one run.

The chain: gate/up linear [8, 4096] x [24576, 4096]^T (a shuffle of W_gate | W_up, 2g tasks) ->
silu_mul (g tasks) -> down linear + residual [8, 12288] x [4096, 12288]^T (64 tasks), g = 128.
"emulated": the module the runner builds (csrc/tasks/*.cuh through csrc/runtime/simt_cpu.h, every
task a 128-thread block of fibers). "native": the same generated dispatcher compiled against the
plain C++ loops that served the CPU backend before the single-source kernels
(benchmarks/native_cpu_kernels/, kept here only for this comparison; the mainline has one kernel
per layer), run by thread 0 of each worker block of the persistent executor. Same graph, workers,
runtime and inputs; the outputs of both are compared too. The same math in eager PyTorch (its CPU
matmuls, same dtype) is timed in the same run for scale.
Prints min-of-N pass times; not a timed test. Run: python benchmarks/qwen3_mlp_pass.py [--repeat 3]
"""
import argparse
import contextlib
import os
import re
import subprocess
import tempfile
import time

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from pertask_overhead import best  # noqa: E402  (this folder: min wall time of N calls)

from mirage.mpk import build, testing  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE = os.path.join(HERE, "native_cpu_kernels")
BATCH, HIDDEN, INTER, GROUPS = 8, 4096, 12288, 128


def native_source(src: str) -> str:
    """The generated dispatcher over the native kernels: their headers, each task's loop called once by
    thread 0 of the executor's worker block (the other emulated threads only pass its barriers)."""
    src = re.sub(r'#include "tasks/(\w+)\.cuh"', r'#include "\1.h"', src)
    head = ['#include "runtime/runtime.h"', '#include "runtime/simt.h"', "#undef MPK_RUN_TASK",
            "#define MPK_RUN_TASK(v, ...) do { if (threadIdx.x == 0) (__VA_ARGS__)(v); } while (0)"]
    return src.replace('#include "runtime/runtime.h"', "\n".join(head), 1)


@contextlib.contextmanager
def native_build(workdir: str):
    """Make compile() build the native variant of its generated source (a benchmark-only swap)."""
    real = build.compile_module

    def compile_native(src, backend="cpu", test_mode=True, sanitize="", fault_injection=False, *_, **__):
        cu, so = os.path.join(workdir, "native.cu"), os.path.join(workdir, "native.so")
        with open(cu, "w") as f:
            f.write(native_source(src))
        cmd = ["g++", *build.flags(backend, test_mode, sanitize, fault_injection), "-I", build.csrc_dir(),
               "-I", NATIVE, cu, "-o", so]
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        return build.BuildResult(so, "native", False, time.perf_counter() - t0, cmd)

    build.compile_module = compile_native
    try:
        yield
    finally:
        build.compile_module = real


def chain(dtype) -> tuple[PersistentKernel, torch.Tensor]:
    gen = testing.generator(offset=8)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None))
    x = pk.attach_input(testing.randn((BATCH, HIDDEN), dtype, gen), name="x")
    wg = pk.attach_input(testing.randn((INTER, HIDDEN), dtype, gen, scale=HIDDEN ** -0.5), name="w_gate")
    wu = pk.attach_input(testing.randn((INTER, HIDDEN), dtype, gen, scale=HIDDEN ** -0.5), name="w_up")
    wd = pk.attach_input(testing.randn((HIDDEN, INTER), dtype, gen, scale=INTER ** -0.5), name="w_down")
    w = pk.shuffle_tensors([wg, wu], 0, GROUPS, name="w_gate_up")
    mid = pk.new_tensor((BATCH, 2 * INTER), dtype=dtype, name="mlp_mid")
    act = pk.new_tensor((BATCH, INTER), dtype=dtype, name="silu_out")
    out = torch.zeros(BATCH, HIDDEN, dtype=dtype)
    pk.linear_layer(x, w, mid, (2 * GROUPS, 1, 1), (128, 1, 1))
    pk.silu_mul_layer(mid, act, (GROUPS, 1, 1), (128, 1, 1))
    pk.linear_with_residual_layer(act, wd, x, pk.attach_input(out, name="mlp_out"), (64, 1, 1), (128, 1, 1))
    return pk, out


def eager(pk: PersistentKernel) -> torch.Tensor:
    """The same math in eager PyTorch, in the kernel's dtype: gate/up, silu * up, down + residual."""
    x, wg, wu, wd = (pk.get_tensor(n) for n in ("x", "w_gate", "w_up", "w_down"))
    return torch.nn.functional.silu(x @ wg.T) * (x @ wu.T) @ wd.T + x


def timed(dtype, repeat: int, native: bool) -> tuple[float, torch.Tensor, float]:
    """(min pass seconds, output, min eager PyTorch seconds of the same math)."""
    pk, out = chain(dtype)
    with tempfile.TemporaryDirectory() as tmp, (native_build(tmp) if native else contextlib.nullcontext()):
        pk.compile()
    seconds = best(pk, repeat)
    torch_seconds = best(lambda: eager(pk), repeat)
    pk.finalize()
    return seconds, out.clone(), torch_seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    workers = testing.cpu_config()["num_workers"]
    print(f"Qwen3-8B MLP chain, batch {BATCH}, one test-mode pass, {workers} workers on "
          f"{os.cpu_count()} cores, min of {args.repeat}")
    for dtype in (torch.bfloat16, torch.float32):
        emulated, out_e, eager_s = timed(dtype, args.repeat, native=False)
        native, out_n, _ = timed(dtype, args.repeat, native=True)
        diff = float((out_e.double() - out_n.double()).abs().max())
        print(f"  {str(dtype)[6:]:9s} emulated {emulated * 1e3:8.1f} ms   native {native * 1e3:7.1f} ms   "
              f"ratio {emulated / native:5.1f}x   max |emulated - native| {diff:.2e}   eager PyTorch "
              f"{eager_s * 1e3:6.1f} ms (emulated / eager {emulated / eager_s:5.1f}x)")


if __name__ == "__main__":
    main()
