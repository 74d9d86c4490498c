"""layernorm: the kernel alone (testing.run_tasks).

Each task runs by itself on one emulated worker block, with no scheduler and everything outside its
declared tiles poisoned, so a wrong index names the task's grid coordinate (testing.MPKFootprintError)
instead of failing a whole graph. Iterate on the kernel here; test_*_testmode.py runs it in a graph.

Run: python -m pytest tests/runtime_python/layernorm/test_layernorm.py
     python tests/runtime_python/layernorm/test_layernorm.py
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
# the budget of the kernel's arithmetic, one definition for both tests
tol_layernorm = testing.load_reference(__file__, "test_layernorm_testmode").tol_layernorm

# TODO: remove once testing.run_tasks is merged (the kernel-level API this file is written against).
NO_RUN_TASKS = "mirage.mpk.testing.run_tasks (the kernel-level runner) is not in this checkout yet"
needs_run_tasks = pytest.mark.skipif(not hasattr(testing, "run_tasks"), reason=NO_RUN_TASKS)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # a 128-thread worker block (sm_80) and MPK's 256 threads from Hopper on (sm_90)
EPS = 1e-5
# No strided-input case: attach_input takes contiguous tensors and grid.x splits whole rows, so every
# tile this layer is given is contiguous (the kernel still honours any column stride).


def run_layer(dtype, batch: int, hidden: int, grid: int, coords=None, target_cc: int = 80):
    """Run the layer's tasks (coords: None = all, "edges" = first and last) and check what they wrote."""
    gen = testing.generator(offset=batch * 1000 + hidden)
    x = (testing.randn((batch, hidden), torch.float32, gen) + 2.0).to(dtype)
    w, b = testing.randn((hidden,), dtype, gen), testing.randn((hidden,), dtype, gen)
    tensors = {"x": x, "w": w, "b": b, "out": torch.zeros(batch, hidden, dtype=dtype)}

    def layer_call(pk, t):
        pk.layernorm_layer(input=t["x"], weight=t["w"], bias=t["b"], output=t["out"], grid_dim=(grid, 1, 1),
                           block_dim=(128, 1, 1), eps=EPS)

    run = testing.run_tasks(layer_call, tensors, coords, target_cc=target_cc)
    run.check("out", ref.layernorm(x, w, b, EPS), tol_layernorm(dtype, x, w, b, EPS))
    return run


@needs_run_tasks
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("target_cc", TARGETS)
def test_whole_grid(dtype, target_cc):
    run_layer(dtype, 16, 4096, 4, target_cc=target_cc)     # 4 rows a task, more columns than threads


@needs_run_tasks
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_edge_tiles_of_a_non_power_of_two_split(dtype):
    run_layer(dtype, 6, 384, 3, coords="edges")     # tasks (0, 0, 0) and (2, 0, 0) of 3 tiles of 2 rows


@needs_run_tasks
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_one_row_tiles(dtype):
    run_layer(dtype, 5, 7, 5)                      # 5 tasks of one row, fewer columns than a warp


if __name__ == "__main__":
    if not hasattr(testing, "run_tasks"):
        print(f"SKIP layernorm kernel-level cases: {NO_RUN_TASKS}")
        sys.exit(0)
    for dtype in DTYPES:
        for target_cc in TARGETS:
            test_whole_grid(dtype, target_cc)
        test_edge_tiles_of_a_non_power_of_two_split(dtype)
        test_one_row_tiles(dtype)
    print("All layernorm kernel-level cases PASS")
