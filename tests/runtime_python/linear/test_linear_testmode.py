"""linear_layer in test mode: y = x @ W^T on real generated code, several workers, schedule jitter.

Run: python tests/runtime_python/linear/test_linear_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/linear/test_linear_testmode.py   (one 4-rank job: linear is
     column-parallel (layers/linear.py TP): every rank draws the same unsharded x and W, keeps rows
     [r*N/W, (r+1)*N/W) of W, computes those columns of y, and compares them with the same columns
     of the unsharded float64 reference; grid.x becomes the largest divisor of the local N not above
     the case's; testing.run_cases_as_script)
"""

import functools

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKRuntimeError
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, in_features K, out_features N, (grid.x, grid.y)): grid.x splits N, grid.y splits rows
CASES = [
    (8, 256, 96, (6, 1)),       # non-power-of-two column split: 6 tiles of 16 columns
    (6, 200, 64, (4, 3)),       # 2-D grid, 3 row tiles of 2 rows; K not a multiple of 8
    (1, 64, 7, (7, 1)),         # one-row, one-column tiles
    (4, 37, 12, (12, 4)),       # 1x1 output tiles, odd K
    (16, 4096, 128, (8, 2)),    # a real hidden size as the reduction length
]


def run(dtype, batch, k, n, grid, jitter, output_dir=None, world=testing.ONE_RANK, target_cc=None):
    """Build, compile and run one case: (pk, name, out, expected, tol, inputs).

    world (several ranks): x whole, this rank's rows of W, its columns of y and of the reference.
    target_cc 90: the 256-thread worker block, where a bf16 / fp16 batch of 16+ takes the Hopper path."""
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n)      # the same on every rank
    x = testing.randn((batch, k), dtype, gen)
    w_full = testing.randn((n, k), dtype, gen, scale=k ** -0.5)   # random, not zeros: a skipped row shows
    w = world.shard("weight", w_full)
    grid = (max(g for g in range(1, grid[0] + 1) if w.shape[0] % g == 0), grid[1])   # divides the local N
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params, target_cc=target_cc))
    out = torch.zeros(batch, w.shape[0], dtype=dtype)
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    out_dt = pk.attach_input(out, name="out")
    pk.linear_layer(input=x_dt, weight=w_dt, output=out_dt, grid_dim=(grid[0], grid[1], 1),
                    block_dim=testing.worker_block_dim(target_cc or 0))
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    expected = world.shard("output", ref.linear(x, w_full))
    scale = x.double().abs() @ w.double().abs().T            # sum_k |x_bk * w_nk| per output
    name = (f"linear[{str(dtype)[6:]},{batch}x{k}->{n},grid={grid},jitter={jitter}{world.tag},"
            f"{pk.layers[0].params['path']}]")
    tol = testing.tol_linear(dtype, k, scale, tensor_cores=pk.layers[0].params["tensor_cores"])
    return pk, name, out, expected, tol, (x, w)


def run_case(dtype, batch, k, n, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    pk, name, out, expected, tol, inputs = run(dtype, batch, k, n, grid, jitter, output_dir, world)
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk)
    return pk


def _jitter(dtype, case) -> int:
    return 1 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-grid{c[3][0]}x{c[3][1]}")
def test_linear(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


# The Hopper path (csrc/tasks/wgmma_linear.cuh: TMA into a ring of stages, wgmma; the tensor maps of x's and
# W's tiles built by the runtime) at target_cc 90: 2 row tiles of 12 rows (a 16-row chunk, partly past the
# tile: TMA's zero fill), 3 column tiles of 32 (a 64-row W group, half past the tile), K = 520 (a partial last
# step of 64), through the persistent executor with its workers and jitter.
HOPPER_CASES = [(24, 520, 96, (3, 2))]


def run_hopper_case(dtype, case=HOPPER_CASES[0], output_dir=None, world=testing.ONE_RANK):
    """One Hopper-path case, as pytest, the script and its multi-rank job run it (the script's after)."""
    pk, name, out, expected, tol, inputs = run(dtype, *case, jitter=7, output_dir=output_dir, world=world,
                                               target_cc=90)
    assert pk.layers[0].params["path"] == "tma+wgmma", pk.layers[0].params
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk)
    return pk


@pytest.mark.parametrize("dtype", DTYPES[:2], ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", HOPPER_CASES, ids=lambda c: f"{c[0]}x{c[1]}->{c[2]}-grid{c[3][0]}x{c[3][1]}")
def test_linear_hopper_path(dtype, case, tmp_path):
    run_hopper_case(dtype, case, output_dir=str(tmp_path))


def test_linear_hopper_path_names_a_tile_tma_cannot_read():
    """A tile whose tensor map the driver would refuse (x two bytes past 16-byte alignment; outside test
    mode, whose guarded copies are aligned) fails the launch naming the task, the tile, its tensor and why."""
    storage = torch.randn(16 * 96 + 1).to(torch.bfloat16)
    x = storage[1:].view(16, 96)                      # contiguous, its base 2 bytes off
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=1, target_cc=90, test_mode=False))
    out = torch.zeros(16, 40, dtype=torch.bfloat16)
    w = torch.randn(40, 96).to(x.dtype)
    pk.linear_layer(input=pk.attach_input(x, name="x"), weight=pk.attach_input(w, name="w"),
                    output=pk.attach_input(out, name="out"), grid_dim=(2, 1, 1), block_dim=(256, 1, 1))
    assert pk.layers[0].params["path"] == "tma+wgmma"
    with pytest.raises(MPKRuntimeError) as e:
        pk.compile()
        pk()
    print(e.value)
    for part in ("task 1 = 'linear_0'(0, 0, 0) tile 0 (input 0, 'input': tensor 'x' [16, 96] of [16, 96])",
                 "its tensor map (box 16 x 64, swizzle 128): the base address is not 16-byte aligned"):
        assert part in str(e.value), str(e.value)


if __name__ == "__main__":
    testing.run_cases_as_script("linear", run_case, DTYPES, CASES, _jitter,
                                after=[functools.partial(run_hopper_case, torch.bfloat16)])
