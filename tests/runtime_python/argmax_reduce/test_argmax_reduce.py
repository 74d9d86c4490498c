"""argmax_reduce_layer's kernel alone (csrc/tasks/argmax_reduce.cuh; testing.run_tasks): each task on
one emulated block, everything outside its tiles poisoned.

The ids are compared exactly with the reference (testing.assert_equal). The partials are argmax_partial's
reference of argmax's planted rows (equal maxima across a task boundary, NaN rows, all -inf, -0 before +0)
and hand-made rows whose values tie across tasks: every task equal, the maximum in tasks 2 and 4, NaN in
tasks 3 and 5 with +inf in task 0, the maximum in the last task only; 6 and 5 (non-powers of two) and 1
tasks, grid.y splitting the batch (one-row tiles too), a strided view, both worker blocks.
Run: python tests/runtime_python/argmax_reduce/test_argmax_reduce.py   (or pytest this file)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
HERE = os.path.dirname(os.path.abspath(__file__))
ARGMAX = testing.load_reference(os.path.join(HERE, "..", "argmax", "x.py"))
PARTIAL = testing.load_reference(os.path.join(HERE, "..", "argmax_partial", "x.py"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, tasks, grid.y): planted partials of 8 rows, 6 and 5 tasks, grid.y 2 and 8 (one-row tiles);
# one task per row.
SHAPES = [(8, 6, 2), (8, 5, 8), (4, 1, 1)]
QUICK = (torch.bfloat16, 8, 6, 2, 90)
INF, NAN, CHUNK = float("inf"), float("nan"), 100

block_dim = testing.worker_block_dim


def partials(batch, tasks, dtype, gen):
    """Row b: argmax_partial's reference of a planted logits row ([batch, tasks * CHUNK]); rows past the
    first four then hand-made ties across tasks (values in `dtype`, indices t * CHUNK + something)."""
    value, index = PARTIAL.argmax_partial(ARGMAX.logits(batch, tasks * CHUNK, dtype, gen,
                                                             chunk=CHUNK if tasks > 1 else CHUNK // 2), tasks)
    if tasks >= 6:
        rows = [[1.5] * tasks, [0, 1, 7, 0, 7, 2], [INF, 0, 0, NAN, 1, NAN], [0, 0, 0, 0, 0, 3],
                [-INF] * tasks, [-INF, 0.0, -0.0, 0.0, -INF, 1.0][:tasks]]
        for b, row in zip(range(2, batch), rows):
            value[b] = torch.tensor(row[:tasks] + [0.0] * (tasks - len(row)), dtype=torch.float32).to(dtype)
    return value, index


def run_kernel(value, index, grid_y, target_cc, out=None, name="out"):
    out = torch.zeros(value.shape[0], 1, dtype=torch.int64) if out is None else out
    run = testing.run_tasks(
        lambda pk, t: pk.argmax_reduce_layer(input=(t["value"], t["index"]), output=t["out"],
                                             grid_dim=(1, grid_y, 1), block_dim=block_dim(target_cc)),
        {"value": value, "index": index, "out": out}, target_cc=target_cc)
    testing.assert_equal(f"{run.layer.name}.{name}[kernel,{str(value.dtype)[6:]},{tuple(value.shape)},"
                         f"grid.y={grid_y},cc={target_cc}]", out, ref.argmax_reduce(value, index))
    return run


@pytest.mark.parametrize("dtype,batch,tasks,grid_y,target_cc", testing.case_params(
    [(d, *s, cc) for d in DTYPES for s in SHAPES for cc in TARGETS], quick=QUICK))
def test_argmax_reduce_kernel(dtype, batch, tasks, grid_y, target_cc):
    value, index = partials(batch, tasks, dtype, testing.generator(offset=batch * 7 + tasks))
    run_kernel(value, index, grid_y, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
def test_argmax_reduce_kernel_strided(target_cc):
    """value and index column blocks of wider matrices (different row strides), the ids a column."""
    value, index = partials(8, 6, torch.float32, testing.generator(offset=3))
    wide_v, wide_i = torch.zeros(8, 9), torch.zeros(8, 14, dtype=torch.int64)
    wide_v[:, 2:8], wide_i[:, 7:13] = value, index
    out = torch.zeros(8, 2, dtype=torch.int64)
    run_kernel(wide_v[:, 2:8], wide_i[:, 7:13], 4, target_cc, out=out[:, 1:2], name="out[strided]")


def test_argmax_reduce_refuses_bad_arguments():
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True)
    val = pk.attach_input(torch.zeros(4, 6), name="val")
    idx = pk.attach_input(torch.zeros(4, 6, dtype=torch.int64), name="idx")
    idx5 = pk.attach_input(torch.zeros(4, 5, dtype=torch.int64), name="idx5")
    ids = pk.attach_input(torch.zeros(4, 1, dtype=torch.int64), name="ids")
    cases = [
        (dict(grid_dim=(2, 1, 1)), r"grid_dim.x must be 1 \(one task reduces a row's 6 partials"),
        (dict(input=(val, idx5)), r"tensor 'idx5' \(index\) dim 1 is 5, expected 6"),
        (dict(input=val), r"input must be the pair \(value, index\)"),
        (dict(grid_dim=(1, 3, 1)), r"tensor 'val' \(value\) dim 0 \(4\) is not divisible by grid_dim.y=3"),
    ]
    for change, message in cases:
        kw = {**dict(input=(val, idx), output=ids, grid_dim=(1, 2, 1), block_dim=(128, 1, 1)), **change}
        with pytest.raises(ValueError, match=f"layer 'argmax_reduce_0': {message}"):
            pk.argmax_reduce_layer(**kw)
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
