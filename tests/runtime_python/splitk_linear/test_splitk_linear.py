"""splitk_linear_layer's kernel alone (csrc/tasks/splitk_linear.cuh: linear.cuh's GEMV over one K slice, its
sums added into the output atomically): each task on one block, nothing else running, every byte around its
tiles poisoned (testing.run_tasks: writes only its output tiles, reads only its input tiles, which include the
output tile's initial value, independent of its threads' order, every output element written).

A task run alone adds only its own partial: its result is y_0 + x[:, slice j] @ W[:, slice j]^T, one add
(the sum over all the slices is test mode's, test_splitk_linear_testmode.py). So each case runs the tasks of
one K slice j at a time (every column tile i of that slice: disjoint tiles) from the random, non-zero y_0,
and checks that slice's reference (a kernel that overwrites instead of adding, or reads another slice, fails);
run.check prints one EVIDENCE line per slice.

Covers, for bf16, fp16 and fp32 at 128 threads (target_cc 80) and 256 (target_cc 90): K split 3 ways (a
non-power-of-two split), 4 ways with a single-row batch, 2 ways, 1 way (the whole K in one add); column tiles
of one column (each bf16/fp16 element's CAS word shared with the next tile, or past the tensor's end) and a
K slice that is not a multiple of the 16-byte load (the scalar tail).

Run: python tests/runtime_python/splitk_linear/test_splitk_linear.py   (or pytest this file; -k to pick cases)
The integration test is test_splitk_linear_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, (grid.x, grid.y)): grid.x splits N, grid.y splits K
SHAPES = [
    (8, 384, 48, (3, 3)),    # a non-power-of-two K split: 3 slices of 128, 3 tiles of 16 columns
    (1, 512, 32, (2, 4)),    # one row (decode), 4 slices
    (6, 256, 40, (5, 2)),    # 2 slices, tiles of 8 columns
    (5, 200, 12, (3, 1)),    # no split: y_0 + x @ W^T in one add
    (3, 60, 7, (7, 2)),      # one-column tiles; slices of 30: not a multiple of a 16-byte load
    (24, 320, 40, (2, 2)),   # 16-bit: the tensor cores (24 rows: passes of 16 + 8); slices of 160
]
ROWS = [(d, *s, cc) for s in SHAPES for d in DTYPES for cc in TARGETS]
QUICK = (torch.bfloat16, *SHAPES[0], 90)


def inputs(dtype, batch, k, n):
    gen = testing.generator(offset=batch * 100003 + k * 1009 + n + 11)
    x = testing.randn((batch, k), dtype, gen)
    w = testing.randn((n, k), dtype, gen, scale=k ** -0.5)
    y0 = testing.randn((batch, n), dtype, gen)         # non-zero: an overwrite instead of an add fails
    return x, w, y0


def run_slice(dtype, x, w, y0, grid, j, target_cc):
    """The tasks (i, j) of K slice j, alone, from y_0; checks y_0 + that slice's partial (one add)."""
    splits = grid[1]
    out = y0.clone()
    run = testing.run_tasks(
        lambda pk, t: pk.splitk_linear_layer(input=t["x"], weight=t["w"], output=t["out"],
                                             grid_dim=(grid[0], splits, 1),
                                             block_dim=testing.worker_block_dim(target_cc)),
        {"x": x, "w": w, "out": out}, coords=[(i, j, 0) for i in range(grid[0])], target_cc=target_cc)
    xs, ws = x.chunk(splits, dim=1)[j], w.chunk(splits, dim=1)[j]
    part = ref.partials(x, w, splits)[j]
    tol = testing.tol_splitk_linear(dtype, xs.shape[1], 1, xs.double().abs() @ ws.double().abs().T,
                                    y0.double().abs() + part.abs(), run.layer.params["tensor_cores"])
    run.check("out", y0.double() + part, tol, inputs=(x, w, y0))
    return run


@pytest.mark.parametrize("dtype,batch,k,n,grid,target_cc", testing.case_params(ROWS, quick=QUICK))
def test_splitk_linear_kernel(dtype, batch, k, n, grid, target_cc):
    x, w, y0 = inputs(dtype, batch, k, n)
    for j in range(grid[1]):
        run_slice(dtype, x, w, y0, grid, j, target_cc)


BAD = [  # (what, batch, K, N, grid, dtypes (x, w, y), out shape, message parts)
    ("K not divisible by grid.y", 4, 100, 16, (2, 3), None, None,
     ["'x' (input) dim 1 (100) is not divisible by grid_dim.y=3", "grid sizes that divide 100: 1, 2, 4, 5"]),
    ("N not divisible by grid.x", 4, 96, 10, (3, 2), None, None,
     ["(weight) dim 0 (10) is not divisible by grid_dim.x=3", "grid sizes that divide 10: 1, 2, 5, 10"]),
    ("weight K differs", 4, 96, 16, (1, 1), None, (16, 64), ["weight 'w' is (16, 64)", "[out_features, 96]"]),
    ("output shape", 4, 96, 16, (1, 1), None, "out", ["tensor 'out' (output) dim 1 is 8, expected 16"]),
    ("dtype mismatch", 4, 96, 16, (1, 1), torch.float16, None, ["tensor 'w' (weight) has dtype float16"]),
]


@pytest.mark.parametrize("what,batch,k,n,grid,w_dtype,w_shape,parts", BAD, ids=[b[0] for b in BAD])
def test_splitk_linear_bad_input(what, batch, k, n, grid, w_dtype, w_shape, parts):
    """Bad shapes, splits and dtypes: a ValueError naming the layer, the tensor and the valid sizes, before
    any code is generated."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(**testing.cpu_config())
    x = pk.attach_input(torch.zeros(batch, k, dtype=torch.bfloat16), name="x")
    shape = w_shape if isinstance(w_shape, tuple) else (n, k)
    w = pk.attach_input(torch.zeros(*shape, dtype=w_dtype or torch.bfloat16), name="w")
    out = pk.attach_input(torch.zeros(batch, n // 2 if w_shape == "out" else n, dtype=torch.bfloat16),
                          name="out")
    with pytest.raises(ValueError) as e:
        pk.splitk_linear_layer(input=x, weight=w, output=out, grid_dim=(*grid, 1), block_dim=(128, 1, 1))
    msg = str(e.value)
    testing.say(f"REJECTED splitk_linear {what}: {msg}")
    assert "layer 'splitk_linear_0'" in msg and all(p in msg for p in parts), msg
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
