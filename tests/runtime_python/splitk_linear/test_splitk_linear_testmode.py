"""splitk_linear_layer in test mode: y += x @ W^T with K split across grid.y, several workers, schedule
jitter: the grid.y tasks of each column tile add their partials into it atomically, in the schedule's order,
so the output is y_0 + the sum of every partial (a lost partial or an overwrite moves it by a partial's size).

Run: python tests/runtime_python/splitk_linear/test_splitk_linear_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/splitk_linear/test_splitk_linear_testmode.py
     (one 4-rank job: splitk_linear is row-parallel (layers/splitk_linear.py TP), as MPK's qwen3 builder
     uses it for o_proj / down_proj: every rank draws the same unsharded x, W and y_0, keeps columns
     [r*K/W, (r+1)*K/W) of x and W, and adds its partial (split again across grid.y) into its own output,
     which starts at y_0 on rank 0 and at zeros elsewhere (so the sum counts y_0 once); an allreduce layer
     after it sums the ranks' outputs. Checks per rank: its output against its own float64 reference, the
     sum against the gathered outputs, the sum against the unsharded reference (the composed budget), and
     the sum bit-identical across ranks; testing.run_cases_as_script)
"""
import functools
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
ALLREDUCE = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "allreduce", "x.py"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, in_features K, out_features N, (grid.x, grid.y)): grid.x splits N, grid.y splits K (of each rank's
# K / W columns: every K here splits into W * grid.y slices for W = 1, 2, 4)
CASES = [
    (8, 384, 48, (3, 3)),       # a non-power-of-two K split: 3 adds per tile
    (1, 256, 32, (4, 2)),       # one row (decode), 2 adds
    (6, 192, 40, (5, 4)),       # 4 adds into tiles of 8 columns
    (4, 96, 12, (12, 1)),       # no K split: one add, one-column tiles
    (16, 256, 32, (2, 4)),      # 16-bit: the tensor cores' sums, 4 adds into tiles of 16 columns
]


# Contention (docs/runtime.md, "Schedule jitter"): 16 K slices add into one tile of 2 x 4 (bf16: two
# 32-bit CAS words per row), launched LAUNCHES times, each pass checked. Under jitter the emulated atomics
# pause between their load and their compare-and-swap, so the 16 tasks' adds collide: a CAS tried once
# without a retry loses updates (test_splitk_linear_controls.py, control (d)), and these are the cases
# test_shared_tile_races.py runs under ThreadSanitizer (marker `race`), where a plain read-modify-write
# in place of the atomic add is a reported race.
CONTENTION = (2, 1024, 4, (1, 16))
CONTENTION_DTYPES = [torch.bfloat16, torch.float32]
LAUNCHES = 3


def run_case(dtype, batch, k, n, grid, jitter, output_dir=None, world=testing.ONE_RANK, launches=1):
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n + 13)     # the same on every rank
    x_full = testing.randn((batch, k), dtype, gen)
    w_full = testing.randn((n, k), dtype, gen, scale=k ** -0.5)
    y0_full = testing.randn((batch, n), dtype, gen)      # non-zero: an overwrite instead of an add fails
    x, w = world.shard("input", x_full), world.shard("weight", w_full)     # this rank's columns of K
    y0 = y0_full if world.rank == 0 else torch.zeros_like(y0_full)       # counted once by the allreduce
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    out = y0.clone()                     # one rank: y_0 + x @ W^T; several: y_0 (rank 0) + this rank's part
    x_dt, w_dt, out_dt = (pk.attach_input(t, name=nm) for t, nm in ((x, "x"), (w, "w"), (out, "out")))
    pk.splitk_linear_layer(input=x_dt, weight=w_dt, output=out_dt, grid_dim=(grid[0], grid[1], 1),
                           block_dim=(128, 1, 1))
    summed = None
    if world.size > 1:                   # row-parallel: an allreduce sums the ranks' outputs
        summed = torch.zeros(batch, n, dtype=dtype)
        buf = pk.new_tensor((world.size, batch, n), dtype=dtype, name="buf", io_category="nvshmem_tensor")
        pk.allreduce_layer(input=out_dt, buffer=buf, output=pk.attach_input(summed, name="summed"),
                           grid_dim=(grid[0], 1, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)

    def check(tag: str) -> None:
        """One pass's checks: this rank's output; several ranks: the allreduce and the unsharded sum."""
        splits, k_local = grid[1], x.shape[1]
        acc = y0.double().abs() + sum(p.abs() for p in ref.partials(x, w, splits))
        scale = x.double().abs() @ w.double().abs().T
        tc = pk.layers[0].params["tensor_cores"]
        tol = testing.tol_splitk_linear(dtype, k_local // splits, splits, scale, acc, tc)
        name = f"splitk_linear[{str(dtype)[6:]},{batch}x{k}->{n},grid={grid},jitter={jitter}{world.tag}{tag}]"
        testing.check_output(name, out, ref.splitk_linear(x, w, y0), tol, pk.layers[0].checks, (x, w, y0),
                             pk=pk)
        if summed is not None:
            parts = world.gather(out.clone())
            # the allreduce, on the outputs the ranks computed: W terms (the tight per-layer check)
            tol = testing.tolerance(dtype, k=world.size, scale=sum(p.double().abs() for p in parts))
            testing.check_output(f"{name}.allreduce", summed, ALLREDUCE.allreduce(parts), tol,
                                 pk.layers[1].checks, (out,), pk=pk)
            # end to end, the unsharded layer: the ranks' partials over k_local / splits terms each and
            # every rank's `splits` adds (acc summed over the ranks), one more add per rank for its output's
            # rounding, which the allreduce's sum carries, and the allreduce's W fp32 adds and rounding (both
            # <= the acc_scale sum): adds = splits + 1 + W
            accs = world.gather(acc)
            tol = testing.tol_splitk_linear(dtype, k_local // splits, splits + 1 + world.size,
                                            x_full.double().abs() @ w_full.double().abs().T, sum(accs), tc)
            testing.check_output(f"{name}.unsharded", summed, ref.splitk_linear(x_full, w_full, y0_full), tol,
                                 pk.layers[1].checks, (out, y0_full), pk=pk)

    for launch in range(launches):       # each launch from y_0 again: the same sum, another schedule
        if launch:
            out.copy_(y0)
        pk()
        check(f",launch={launch + 1}/{launches}" if launches > 1 else "")
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 3 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-grid{c[3][0]}x{c[3][1]}")
def test_splitk_linear(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


@pytest.mark.race
@pytest.mark.parametrize("dtype", CONTENTION_DTYPES, ids=lambda d: str(d)[6:])
def test_splitk_linear_contention(dtype, tmp_path):
    run_contention(dtype, output_dir=str(tmp_path))


def run_contention(dtype, output_dir=None, world=testing.ONE_RANK):
    """CONTENTION, LAUNCHES passes (several ranks: one, the sharding being what their job checks)."""
    return run_case(dtype, *CONTENTION, jitter=71 + CONTENTION_DTYPES.index(dtype), output_dir=output_dir,
                    world=world, launches=LAUNCHES if world.size == 1 else 1)


if __name__ == "__main__":
    # script mode: each contention dtype its own case (and case directory, as the multi-rank job checks)
    testing.run_cases_as_script("splitk_linear", run_case, DTYPES, CASES, _jitter,
                                after=[functools.partial(run_contention, dtype=d) for d in CONTENTION_DTYPES])
