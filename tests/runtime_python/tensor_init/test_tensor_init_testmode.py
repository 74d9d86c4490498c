"""tensor_init_layer in test mode: `input` becomes exactly zero, several workers, schedule jitter.

Run: python tests/runtime_python/tensor_init/test_tensor_init_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/tensor_init/test_tensor_init_testmode.py
     (one 4-rank job: tensor_init is replicated (layers/tensor_init.py TP), so every rank runs every
     case and the ordering check on the same full inputs, and the outputs must be bit-identical
     across ranks; testing.run_cases_as_script)
"""
import functools
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers import NONZERO
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
identity_ref = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "identity", "x.py"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, hidden, (grid.x, grid.y)): grid.x splits rows, grid.y splits columns
CASES = [
    (8, 96, (8, 1)),            # one-row tiles
    (6, 64, (3, 4)),            # 2-D grid, non-power-of-two row split
    (1, 7, (1, 7)),             # one-column tiles
    (5, 3, (5, 3)),             # 1x1 tiles
    (12, 4096, (6, 2)),         # a real hidden size
]


def run_case(dtype, batch, hidden, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    gen = testing.generator(offset=batch * 100003 + hidden * 41 + grid[1])
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = testing.randn((batch, hidden), dtype, gen)            # starts random: zero must be written
    dummy_in = testing.randn((batch, hidden), dtype, gen)
    dummy_out = testing.randn((2, 3), dtype, gen)              # declared, never written
    x_before, dummy_out_before = x.clone(), dummy_out.clone()
    x_dt = pk.attach_input(x, name="x")
    di_dt, do_dt = pk.attach_input(dummy_in, name="dummy_in"), pk.attach_input(dummy_out, name="dummy_out")
    pk.tensor_init_layer(input=x_dt, dummy_input=di_dt, dummy_output=do_dt, grid_dim=(grid[0], grid[1], 1),
                         block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    expected = ref.tensor_init(x_before)
    name = f"tensor_init[{str(dtype)[6:]},{batch}x{hidden},grid={grid},jitter={jitter}{world.tag}]"
    testing.check_nonvacuous(f"{name}.input_before_run", x_before, (NONZERO,))
    testing.assert_close(name, x, expected, testing.tol_elementwise(dtype), pk=pk)  # zero up to tiny/2: exact
    testing.check_nonvacuous(name, x, pk.layers[0].checks, inputs=(x_before,))
    assert torch.equal(dummy_out, dummy_out_before), f"{name}: dummy_output was modified"
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 6 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}x{c[1]}-grid{c[2][0]}x{c[2][1]}")
def test_tensor_init(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


def run_ordering(output_dir=None, init_grid_x=2, world=testing.ONE_RANK):
    """tensor_init waits for exactly the writers of the dummy_input rows its grid.x tile covers (MPK's
    map), or for every writer when grid.x does not divide the dummy's rows; nothing else orders it."""
    dtype = torch.float32
    gen = testing.generator(offset=77 + init_grid_x)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=99, **world.params))
    src = testing.randn((6, 8), dtype, gen)
    mid = torch.zeros(6, 8, dtype=dtype)
    x = testing.randn((4, 5), dtype, gen)
    spare = torch.zeros(1, dtype=dtype)
    src_dt, mid_dt = pk.attach_input(src, name="src"), pk.attach_input(mid, name="mid")
    x_dt, spare_dt = pk.attach_input(x, name="x"), pk.attach_input(spare, name="spare")
    # identity: grid.x splits mid's columns in 2, grid.y its rows in 3 (rows [2y, 2y + 2))
    pk.identity_layer(input=src_dt, output=mid_dt, grid_dim=(2, 3, 1), block_dim=(128, 1, 1))
    pk.tensor_init_layer(input=x_dt, dummy_input=mid_dt, dummy_output=spare_dt, grid_dim=(init_grid_x, 5, 1),
                         block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    writers = pk.graph.layer_tasks(pk.layers[0])
    split = 6 % init_grid_x == 0
    for task in pk.graph.layer_tasks(pk.layers[1]):
        rows = range(task.coord[0] * 6 // init_grid_x, (task.coord[0] + 1) * 6 // init_grid_x) if split \
            else range(6)
        want = {w.id for w in writers if set(rows) & set(range(2 * w.coord[1], 2 * w.coord[1] + 2))}
        waits_for = set(pk.graph.triggers_of(task.event)) if task.event > 0 else set()
        assert waits_for == want, (f"tensor_init task {task.label} waits for tasks {sorted(waits_for)}, "
                                   f"expected the writers of dummy_input rows {rows}: {sorted(want)}")
    testing.say(f"ORDER tensor_init grid.x={init_grid_x}: each of {pk.layers[1].num_tasks} tasks waits for "
                f"exactly the writers of {'its rows' if split else 'all'} of its dummy_input PASS")
    pk()
    tol = testing.tol_elementwise(dtype)
    testing.assert_close("ordering.identity.mid", mid, identity_ref.identity(src), tol, pk=pk)
    testing.assert_close("ordering.tensor_init.x", x, ref.tensor_init(x), tol, pk=pk)
    pk.finalize()
    return pk


@pytest.mark.parametrize("init_grid_x", [2, 4], ids=["dummy-rows-split", "dummy-read-whole"])
def test_tensor_init_orders_after_dummy_input_producer(tmp_path, init_grid_x):
    run_ordering(output_dir=str(tmp_path), init_grid_x=init_grid_x)


if __name__ == "__main__":
    testing.run_cases_as_script("tensor_init", run_case, DTYPES, CASES, _jitter,
                                after=[functools.partial(run_ordering, init_grid_x=4), run_ordering])
