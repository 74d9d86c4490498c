"""One test-mode pass of the Qwen3-8B MLP chain (batch 8): the CUDA kernels under the CPU emulation
beside the same math in eager PyTorch (its CPU matmuls, same dtype), as a ratio in one run.

The chain: gate/up linear [8, 4096] x [24576, 4096]^T (a shuffle of W_gate | W_up, 2g tasks) ->
silu_mul (g tasks) -> down linear + residual [8, 12288] x [4096, 12288]^T (64 tasks), g = 128.
"emulated": the module the runner builds (csrc/tasks/*.cuh through csrc/runtime/simt_cpu.h, every
task a 128-thread block of fibers). (Until issue 18 it also ran a "native" build against a second
set of plain C++ CPU kernels; that set is gone: the mainline has one kernel per layer.
benchmarks/README.md keeps its last figures.)
--batch 16 (or more) puts the bf16 linears on the tensor cores (csrc/tasks/mma_linear.cuh; batch 8 is the
SIMT GEMV: mirage/mpk/layers/linear.py, TENSOR_CORE_MIN_ROWS).
Prints min-of-N pass times; not a timed test.
Run: python benchmarks/qwen3_mlp_pass.py [--repeat 3] [--batch 8]
"""
import argparse
import os

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from pertask_overhead import best  # noqa: E402  (this folder: min wall time of N calls)

from mirage.mpk import testing  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

HIDDEN, INTER, GROUPS = 4096, 12288, 128


def chain(dtype, batch: int) -> tuple[PersistentKernel, torch.Tensor]:
    gen = testing.generator(offset=8)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None))
    x = pk.attach_input(testing.randn((batch, HIDDEN), dtype, gen), name="x")
    wg = pk.attach_input(testing.randn((INTER, HIDDEN), dtype, gen, scale=HIDDEN ** -0.5), name="w_gate")
    wu = pk.attach_input(testing.randn((INTER, HIDDEN), dtype, gen, scale=HIDDEN ** -0.5), name="w_up")
    wd = pk.attach_input(testing.randn((HIDDEN, INTER), dtype, gen, scale=INTER ** -0.5), name="w_down")
    w = pk.shuffle_tensors([wg, wu], 0, GROUPS, name="w_gate_up")
    mid = pk.new_tensor((batch, 2 * INTER), dtype=dtype, name="mlp_mid")
    act = pk.new_tensor((batch, INTER), dtype=dtype, name="silu_out")
    out = torch.zeros(batch, HIDDEN, dtype=dtype)
    pk.linear_layer(x, w, mid, (2 * GROUPS, 1, 1), (128, 1, 1))
    pk.silu_mul_layer(mid, act, (GROUPS, 1, 1), (128, 1, 1))
    pk.linear_with_residual_layer(act, wd, x, pk.attach_input(out, name="mlp_out"), (64, 1, 1), (128, 1, 1))
    return pk, out


def eager(pk: PersistentKernel) -> torch.Tensor:
    """The same math in eager PyTorch, in the kernel's dtype: gate/up, silu * up, down + residual."""
    x, wg, wu, wd = (pk.get_tensor(n) for n in ("x", "w_gate", "w_up", "w_down"))
    return torch.nn.functional.silu(x @ wg.T) * (x @ wu.T) @ wd.T + x


def timed(dtype, repeat: int, batch: int) -> tuple[float, float, float]:
    """(min pass seconds, min eager PyTorch seconds of the same math, max |difference| of their outputs)."""
    pk, out = chain(dtype, batch)
    pk.compile()
    seconds = best(pk, repeat)
    torch_seconds = best(lambda: eager(pk), repeat)
    diff = float((out.double() - eager(pk).double()).abs().max())
    pk.finalize()
    return seconds, torch_seconds, diff


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    args = ap.parse_args()
    workers = testing.cpu_config()["num_workers"]
    print(f"Qwen3-8B MLP chain, batch {args.batch}, one test-mode pass, {workers} workers on "
          f"{os.cpu_count()} cores, min of {args.repeat}")
    for dtype in (torch.bfloat16, torch.float32):
        emulated, eager_s, diff = timed(dtype, args.repeat, args.batch)
        print(f"  {str(dtype)[6:]:9s} emulated {emulated * 1e3:8.1f} ms   eager PyTorch {eager_s * 1e3:6.1f} "
              f"ms (emulated / eager {emulated / eager_s:5.1f}x)   max |emulated - eager| {diff:.2e}")


if __name__ == "__main__":
    main()
