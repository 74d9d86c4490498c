"""rmsnorm_linear_layer's kernel alone (csrc/tasks/rmsnorm_linear.cuh; testing.run_tasks,
docs/kernel_tests.md).

Each task runs by itself on one emulated worker block, everything outside its declared tiles poisoned: a
task that writes outside its output columns, reads outside its W rows, races with itself or leaves an output
element unwritten is a testing.MPKFootprintError. Covers bf16, fp16, fp32 at 128 threads (target_cc 80) and
256 (target_cc 90): every task of a non-power-of-two split of N, the edge tasks of a split, a single-row
batch (decode), more rows than warps, odd K (no multiple of 32 lanes), one-column tiles, 19 rows (bf16 /
fp16 on the tensor cores, csrc/tasks/mma_linear.cuh), and strided views (x a column block of a wider matrix,
W every other column, y a column block).

Run: python tests/runtime_python/rmsnorm_linear/test_rmsnorm_linear.py   (or pytest it; -k to pick cases)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, K, N, grid.x, coords): grid.x splits N (W rows, y columns)
SHAPES = [
    (8, 512, 48, 3, None),       # every task of a non-power-of-two split: 3 tiles of 16 columns
    (1, 384, 20, 5, None),       # decode: a single-row batch, 4-column tiles
    (13, 96, 10, 5, "edges"),    # more rows than warps; the first and last task
    (5, 37, 7, 7, None),         # odd K, one-column tiles
    (19, 96, 24, 3, None),       # 16-bit types on the tensor cores (a 16-row pass, then 3), 8-column tiles
]
# (what, batch, K, N, grid.x, x layout, W layout, y layout): (row stride, column stride), None = contiguous
STRIDED = [
    ("x column block", 6, 128, 12, 3, (384, 1), None, None),
    ("W column stride 2, y column block", 4, 64, 9, 3, None, (128, 2), (27, 1)),
]

block_dim = testing.worker_block_dim
strided = testing.strided_view


def inputs(dtype, batch, k, n, offset, x_layout=None, w_layout=None, y_layout=None):
    gen = testing.generator(offset=offset)
    x = strided((batch, k), x_layout, dtype, gen)
    wn = testing.randn((k,), dtype, gen)
    w = strided((n, k), w_layout, dtype, gen, scale=k ** -0.5)   # random, not zeros: a skipped row shows
    out = strided((batch, n), y_layout, dtype, gen, zeros=True)
    return x, wn, w, out


def run_kernel(dtype, x, wn, w, out, grid, coords, target_cc):
    """run_tasks over the layer's tasks, then the evidence over the tiles of the tasks that ran."""
    def layer_call(pk, t):
        pk.rmsnorm_linear_layer(input=t["x"], weight_norm=t["wn"], weight_linear=t["w"], output=t["out"],
                                grid_dim=(grid, 1, 1), block_dim=block_dim(target_cc))

    run = testing.run_tasks(layer_call, {"x": x, "wn": wn, "w": w, "out": out}, coords, target_cc=target_cc)
    tol = testing.tol_rmsnorm_linear(dtype, x.shape[1], ref.normed_scale(x, wn, w),
                                     tensor_cores=run.layer.params["tensor_cores"])
    run.check("out", ref.rmsnorm_linear(x, wn, w), tol, inputs=(x, wn, w))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,grid,coords", SHAPES, ids=lambda c: str(c))
def test_kernel(dtype, batch, k, n, grid, coords, target_cc):
    x, wn, w, out = inputs(dtype, batch, k, n, offset=batch * 100003 + k * 1009 + n)
    run_kernel(dtype, x, wn, w, out, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("what,batch,k,n,grid,x_layout,w_layout,y_layout", STRIDED,
                         ids=[c[0].replace(" ", "_").replace(",", "") for c in STRIDED])
def test_kernel_strided(dtype, what, batch, k, n, grid, x_layout, w_layout, y_layout, target_cc):
    x, wn, w, out = inputs(dtype, batch, k, n, 7 * k + n, x_layout, w_layout, y_layout)
    assert not (x.is_contiguous() and w.is_contiguous() and out.is_contiguous()), what
    run_kernel(dtype, x, wn, w, out, grid, None, target_cc)


@pytest.mark.quick
def test_kernel_quick():
    """The quick subset's case (pytest -m quick): x a column block at 256 threads, bf16."""
    test_kernel_strided(torch.bfloat16, *STRIDED[0], 90)


def test_rmsnorm_linear_refuses_bad_arguments():
    """Shapes, dtypes, grids, eps and the batch bound are checked in Python, naming layer, tensor
    and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True)
    t = {name: pk.attach_input(v, name=name) for name, v in [
        ("x", torch.zeros(4, 8)), ("wn", torch.zeros(8)), ("w", torch.zeros(6, 8)),
        ("out", torch.zeros(4, 6)),
        ("x3", torch.zeros(4, 8, 1)), ("wn7", torch.zeros(7)), ("w7", torch.zeros(6, 7)),
        ("out5", torch.zeros(4, 5)), ("x_bf", torch.zeros(4, 8, dtype=torch.bfloat16)),
        ("big", torch.zeros(1025, 8)), ("out_big", torch.zeros(1025, 6))]}
    cases = [
        (dict(input=t["x3"]), r"tensor 'x3' \(input\) must be 2-D, got shape \(4, 8, 1\)"),
        (dict(weight_norm=t["wn7"]), r"tensor 'wn7' \(weight_norm\) dim 0 is 7, expected 8"),
        (dict(weight_linear=t["w7"]), r"weight_linear 'w7' is \(6, 7\) but input 'x' is \(4, 8\)"),
        (dict(output=t["out5"]), r"tensor 'out5' \(output\) dim 1 is 5, expected 6"),
        (dict(input=t["x_bf"]), r"tensor 'wn' \(weight_norm\) has dtype float32, expected bfloat16"),
        (dict(grid_dim=(4, 1, 1)), r"tensor 'w' \(weight_linear\) dim 0 \(6\) is not divisible by "
                                   r"grid_dim.x=4"),
        (dict(grid_dim=(2, 2, 1)), r"rmsnorm_linear splits only the output features, so grid_dim must be "
                                   r"\(n_split, 1, 1\); got \(2, 2, 1\)"),
        (dict(grid_dim=(1, 1, 2)), r"rmsnorm_linear splits only the output features, so grid_dim must be "
                                   r"\(n_split, 1, 1\); got \(1, 1, 2\)"),
        (dict(eps=0.0), r"eps must be a positive number, got 0.0"),
        (dict(eps=True), r"eps must be a positive number, got True"),
        (dict(input=t["big"], output=t["out_big"]), r"batch 1025 is over 1024"),
    ]
    for change, message in cases:
        kw = {**dict(input=t["x"], weight_norm=t["wn"], weight_linear=t["w"], output=t["out"],
                     grid_dim=(2, 1, 1), block_dim=(128, 1, 1)), **change}
        with pytest.raises(ValueError, match=f"layer 'rmsnorm_linear_0': {message}"):
            pk.rmsnorm_linear_layer(**kw)
    testing.say(f"BAD_INPUT rmsnorm_linear_layer: {len(cases)} bad calls refused, each naming layer, tensor "
                f"and sizes PASS")
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
