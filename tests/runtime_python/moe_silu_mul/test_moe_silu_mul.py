"""moe_silu_mul_layer's kernel alone (csrc/tasks/moe_silu_mul.cuh; testing.run_tasks, docs/kernel_tests.md):
each task on one emulated block, nothing else running, everything outside its tiles poisoned (it writes
only its output tiles, reads only its input tiles, does not depend on its threads' order and writes every
output element).

Covers, for bf16, fp16 and fp32 at 128 threads (target_cc 80) and 256 (target_cc 90):
  - one token with one slot; topk 1, 2 and 8;
  - a non-power-of-two split of grid.x (batch, 3 tiles: the edge tasks) and of grid.y (topk 6 in 3
    tiles of 2 slots, with 2 tokens per tile: the tile's rows are not evenly spaced, so a kernel
    folding (b, k) into one row stride fails);
  - one-row tiles (grid = (batch, topk)), I below a warp and above a block;
  - strided views: x a column block of a wider [B, K, 6I] (its slot stride is not 2I) and y every
    other slot of a [B, 2K, I] buffer;
  - a negative control: a kernel that swaps gate and up fails the comparison.

Run: python tests/runtime_python/moe_silu_mul/test_moe_silu_mul.py   (or pytest this file; -k to pick cases)
The integration test is test_moe_silu_mul_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, topk, intermediate I, (grid.x, grid.y), coords): input [batch, topk, 2I] -> [batch, topk, I]
SHAPES = [
    (1, 1, 24, (1, 1), None),        # one token, one slot
    (6, 2, 40, (3, 1), "edges"),     # non-power-of-two split of batch: the first and last of 3 tasks
    (2, 6, 12, (1, 3), None),        # non-power-of-two split of topk: tiles [2, 2, 2I], rows unevenly spaced
    (3, 8, 5, (3, 8), None),         # topk 8, one-row tiles, I narrower than a warp
    (2, 1, 300, (2, 1), None),       # topk 1, I wider than the block (300 > 256)
]


block_dim = testing.worker_block_dim


def run_kernel(dtype, x, out, grid, coords, target_cc):
    """run_tasks over moe_silu_mul's tasks, then the evidence over the tiles of the tasks that ran."""
    run = testing.run_tasks(
        lambda pk, t: pk.moe_silu_mul_layer(input=t["x"], output=t["out"], grid_dim=(grid[0], grid[1], 1),
                                            block_dim=block_dim(target_cc)),
        {"x": x, "out": out}, coords=coords, target_cc=target_cc)
    run.check("out", ref.moe_silu_mul(x), testing.tol_elementwise(dtype), inputs=(x,))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,topk,inter,grid,coords", SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_moe_silu_mul_kernel(dtype, batch, topk, inter, grid, coords, target_cc):
    gen = testing.generator(offset=batch * 1009 + topk * 101 + inter)
    x = testing.randn((batch, topk, 2 * inter), dtype, gen, scale=2.0)   # gates into silu's curved part
    out = torch.zeros(batch, topk, inter, dtype=dtype)
    run_kernel(dtype, x, out, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_moe_silu_mul_kernel_strided(dtype, target_cc):
    # x columns [2I, 4I) of [B, K, 6I]; y every other slot of [B, 2K, I]: each tensor's own strides
    batch, topk, inter = 4, 4, 16
    gen = testing.generator(offset=77)
    x = testing.randn((batch, topk, 6 * inter), dtype, gen, scale=2.0)[:, :, 2 * inter:4 * inter]
    out = torch.zeros(batch, 2 * topk, inter, dtype=dtype)[:, ::2, :]
    run_kernel(dtype, x, out, (2, 2), None, target_cc)


def test_moe_silu_mul_control_swapped_gate_up(tmp_path):
    """Negative control: silu(up) * gate instead of silu(gate) * up fails the comparison."""
    with testing.mutated_kernel(tmp_path, "moe_silu_mul.cuh", "to_float(g[0]), to_float(g[up])",
                                "to_float(g[up]), to_float(g[0])"):
        with pytest.raises(AssertionError) as e:
            test_moe_silu_mul_kernel(torch.float32, *SHAPES[1], 80)
    testing.say(f"CAUGHT moe_silu_mul control (gate/up swapped): {str(e.value).splitlines()[0]}")
    assert "is not close" in str(e.value), str(e.value)


def test_moe_silu_mul_rejects_bad_shapes():
    from mirage.mpk.persistent_kernel import PersistentKernel

    def build(x_shape, y_shape, grid, y_dtype=torch.bfloat16):
        pk = PersistentKernel(**testing.cpu_config())
        x = pk.attach_input(torch.zeros(x_shape, dtype=torch.bfloat16), name="x")
        y = pk.attach_input(torch.zeros(y_shape, dtype=y_dtype), name="y")
        pk.moe_silu_mul_layer(input=x, output=y, grid_dim=grid, block_dim=(128, 1, 1))

    for args, words in [(((2, 3, 9), (2, 3, 4), (1, 1, 1)), "even"),
                        (((2, 3, 8), (2, 3, 8), (1, 1, 1)), "dim 2 is 8"),
                        (((2, 8), (2, 4), (1, 1, 1)), "3-D"),
                        (((2, 3, 8), (2, 3, 4), (1, 2, 1)), "not divisible by grid_dim.y=2"),
                        (((2, 3, 8), (2, 3, 4), (1, 1, 2)), "grid_dim.z")]:
        with pytest.raises(ValueError, match=words) as e:
            build(*args)
        assert "moe_silu_mul" in str(e.value), str(e.value)
    with pytest.raises(ValueError, match="dtype float32"):
        build((2, 3, 8), (2, 3, 4), (1, 1, 1), torch.float32)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
