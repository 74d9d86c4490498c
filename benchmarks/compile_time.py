"""Cold vs warm compile as ratios in one run: one layer (rmsnorm) and the Qwen3 MLP chain, with g++
(the CPU backend's module) and nvcc (the CUDA backend's module for sm_90a, built without a GPU).

Cold: an empty MPK_CACHE_DIR, so the compiler runs. Warm: the same source again, a content-hash hit
(no compiler runs). Both through build.compile_module, the call compile() makes; medians of
`--repeat`. Also one test-mode pass of each graph on the CPU backend. Not a timed test.
Run: python benchmarks/compile_time.py [--repeat 3]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from mirage.mpk import build, codegen, testing  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from qwen3_mlp_pass import chain  # noqa: E402


def rmsnorm(dtype=torch.bfloat16) -> PersistentKernel:
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None))
    x = pk.attach_input(torch.randn(16, 4096, dtype=dtype), name="x")
    w = pk.attach_input(torch.randn(4096, dtype=dtype), name="w")
    out = pk.attach_input(torch.zeros(16, 4096, dtype=dtype), name="out")
    pk.rmsnorm_layer(input=x, weight=w, output=out, grid_dim=(16, 1, 1), block_dim=(128, 1, 1))
    return pk


GRAPHS = {"rmsnorm bf16 16x4096 (1 layer)": rmsnorm,
          "Qwen3-8B MLP chain bf16 (3 layers)": lambda: chain(torch.bfloat16)[0]}


def build_times(pk: PersistentKernel, backend: str) -> tuple[float, float]:
    """(cold, warm) seconds of build.compile_module for this graph's module."""
    src = codegen.source(codegen.Variants(pk.layers), backend)
    os.environ["MPK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mpk-bench-")
    cold = build.compile_module(src, backend, True)
    warm = build.compile_module(src, backend, True)
    assert not cold.hit and warm.hit
    return cold.seconds, warm.seconds


def pass_seconds(make) -> float:
    pk = make()
    pk.compile()
    t0 = time.perf_counter()
    pk()
    dt = time.perf_counter() - t0
    pk.finalize()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    backends = ["cpu"] + (["cuda"] if shutil.which(build.compiler_for("cuda")) else [])
    print(f"medians of {args.repeat}; {os.cpu_count()} cores")
    for name, make in GRAPHS.items():
        for backend in backends:
            runs = [build_times(make(), backend) for _ in range(args.repeat)]
            cold, warm = (statistics.median(r[i] for r in runs) for i in (0, 1))
            print(f"  {name:36s} {build.compiler_for(backend):5s} cold {cold:6.2f} s  "
                  f"warm {warm * 1e3:6.2f} ms  cold/warm {cold / warm:6.0f}x")
        os.environ["MPK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mpk-bench-")
        pass_seconds(make)          # builds
        run = statistics.median(pass_seconds(make) for _ in range(args.repeat))
        print(f"  {name:36s} one test-mode pass on the CPU backend {run * 1e3:.1f} ms (after a warm compile)")


if __name__ == "__main__":
    main()
