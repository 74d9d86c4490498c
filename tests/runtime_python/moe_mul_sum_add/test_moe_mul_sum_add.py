"""moe_mul_sum_add_layer's kernel alone (csrc/tasks/moe_mul_sum_add.cuh; testing.run_tasks,
docs/kernel_tests.md): each task on one emulated block, nothing else running, everything outside its
tiles poisoned (it writes only its output tiles, reads only its input tiles, does not depend on its
threads' order and writes every output element).

Budget (docs/tolerances.md, "Deriving a budget for a new reduction"): one reduction per output, over
topk + 1 fp32 terms (the residual, then w_k * x_k for k ascending). Each product is rounded once (x is
exact in fp32, w is an fp32 input: no input rounding) and each of the topk adds once, every error
relative to at most scale = sum_k |w_k x_k| + |residual| (pytorch_reference.scale); then one rounding
to the output dtype. That is testing.tolerance(dtype, k=topk + 1, scale=scale, ops=2), tol_linear's
form: atol (topk + 2) u32 * scale, rtol u_T + 2 u32. A slot whose weight is 0 adds an exact 0 and
nothing to scale, so the cases with zero slots get no slack from them.

Covers, for bf16, fp16 and fp32 at 128 threads (target_cc 80) and 256 (target_cc 90):
  - one token with one slot; topk 1, 2 and 8; zero weights for the last slot of every other token;
  - a non-power-of-two split of grid.x (batch, 3 tiles: the edge tasks) and of grid.y (hidden, 3
    tiles of 20 columns), one-row tiles of one column each, hidden wider than the block;
  - strided views: x a hidden block of [B, K, 3H], w every other column of [B, 2K], residual a
    column block of [B, 2H], out rows padded to 2H;
  - negative controls: a kernel that drops the residual or the last slot, or accumulates in bf16,
    fails the comparison;
  - bad input: ValueErrors naming the layer, tensor and sizes.

Run: python tests/runtime_python/moe_mul_sum_add/test_moe_mul_sum_add.py   (or pytest this file)
The integration test is test_moe_mul_sum_add_testmode.py beside it; both use pytorch_reference.py.
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
moe = testing.load_reference(os.path.join(os.path.dirname(__file__), "../test_mode/x.py"), name="moe_inputs")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, topk, hidden, (grid.x, grid.y), coords): input [batch, topk, hidden] -> output [batch, hidden]
SHAPES = [
    (1, 1, 64, (1, 1), None),        # one token, one slot
    (6, 2, 96, (3, 1), "edges"),     # non-power-of-two split of batch: the first and last of 3 tasks
    (2, 8, 60, (1, 3), None),        # topk 8, non-power-of-two split of hidden (3 tiles of 20)
    (3, 8, 5, (3, 5), None),         # one-row tiles of one column
    (2, 1, 300, (2, 1), None),       # topk 1, hidden wider than the block (300 > 256)
]


block_dim = testing.worker_block_dim


def budget(dtype, x, w, residual):
    """The module doc's budget: topk + 1 fp32 terms relative to sum_k |w_k x_k| + |residual|."""
    return testing.tolerance(dtype, k=x.shape[1] + 1, scale=ref.scale(x, w, residual), ops=2)


def draw(dtype, batch, topk, hidden, gen):
    x = testing.randn((batch, topk, hidden), dtype, gen)
    return x, moe.slot_weights(batch, topk, gen), testing.randn((batch, hidden), dtype, gen)


def run_kernel(dtype, x, w, residual, out, grid, coords, target_cc):
    """run_tasks over moe_mul_sum_add's tasks, then the evidence over the tiles of the tasks that ran."""
    run = testing.run_tasks(
        lambda pk, t: pk.moe_mul_sum_add_layer(input=t["x"], weight=t["w"], residual=t["residual"],
                                               output=t["out"], grid_dim=(grid[0], grid[1], 1),
                                               block_dim=block_dim(target_cc)),
        {"x": x, "w": w, "residual": residual, "out": out}, coords=coords, target_cc=target_cc)
    run.check("out", ref.moe_mul_sum_add(x, w, residual), budget(dtype, x, w, residual),
              inputs=(x, w, residual))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,topk,hidden,grid,coords", SHAPES,
                         ids=lambda c: "x".join(map(str, c)) if isinstance(c, tuple) else str(c))
def test_moe_mul_sum_add_kernel(dtype, batch, topk, hidden, grid, coords, target_cc):
    gen = testing.generator(offset=batch * 1009 + topk * 101 + hidden)
    x, w, residual = draw(dtype, batch, topk, hidden, gen)
    run_kernel(dtype, x, w, residual, torch.zeros(batch, hidden, dtype=dtype), grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_moe_mul_sum_add_kernel_strided(dtype, target_cc):
    batch, topk, hidden = 4, 3, 32
    gen = testing.generator(offset=78)
    x = testing.randn((batch, topk, 3 * hidden), dtype, gen)[:, :, hidden:2 * hidden]
    w = torch.zeros(batch, 2 * topk)
    w[:, ::2] = moe.slot_weights(batch, topk, gen)
    residual = testing.randn((batch, 2 * hidden), dtype, gen)[:, hidden:]
    out = torch.zeros(batch, 2 * hidden, dtype=dtype)[:, :hidden]
    run_kernel(dtype, x, w[:, ::2], residual, out, (2, 2), None, target_cc)


CONTROLS = [
    ("residual dropped", "float acc = to_float(res[b * rt.row_stride + j * rt.col_stride]);",
     "float acc = 0.0f;", torch.float32),
    ("last slot dropped", "for (int64_t k = 0; k < kt; ++k)", "for (int64_t k = 0; k < kt - 1; ++k)",
     torch.float32),
    # the budget is no looser than the arithmetic: accumulating in bf16 (a rounding per add) exceeds it
    ("accumulated in T", "acc += to_float(xb[k * xt.strides[1]]) * wb[k * wt.strides[1]];",
     "acc = to_float(from_float<T>(acc + to_float(xb[k * xt.strides[1]]) * wb[k * wt.strides[1]]));",
     torch.bfloat16),
]


@pytest.mark.parametrize("what,old,new,dtype", CONTROLS, ids=[c[0].replace(" ", "_") for c in CONTROLS])
def test_moe_mul_sum_add_controls(tmp_path, what, old, new, dtype):
    """Negative controls: each mutated kernel fails the comparison (topk 8, the last slot nonzero for
    every other token)."""
    with testing.mutated_kernel(tmp_path, "moe_mul_sum_add.cuh", old, new):
        with pytest.raises(AssertionError) as e:
            test_moe_mul_sum_add_kernel(dtype, *SHAPES[2], 80)
    testing.say(f"CAUGHT moe_mul_sum_add control ({what}): {str(e.value).splitlines()[0]}")
    assert "is not close" in str(e.value), str(e.value)


def test_moe_mul_sum_add_rejects_bad_input():
    from mirage.mpk.persistent_kernel import PersistentKernel

    def build(x=(2, 3, 8), w=(2, 3), r=(2, 8), y=(2, 8), grid=(1, 1, 1), w_dtype=torch.float32,
              r_dtype=torch.bfloat16):
        pk = PersistentKernel(**testing.cpu_config())
        t = {n: pk.attach_input(torch.zeros(s, dtype=d), name=n) for n, s, d in
             [("x", x, torch.bfloat16), ("w", w, w_dtype), ("r", r, r_dtype), ("y", y, torch.bfloat16)]}
        pk.moe_mul_sum_add_layer(input=t["x"], weight=t["w"], residual=t["r"], output=t["y"], grid_dim=grid,
                                 block_dim=(128, 1, 1))

    for kwargs, words in [(dict(x=(2, 8)), "'x' \\(input\\) must be 3-D"),
                          (dict(w=(2, 4)), "'w' \\(weight\\) dim 1 is 4, expected 3"),
                          (dict(w=(3, 3)), "'w' \\(weight\\) dim 0 is 3, expected 2"),
                          (dict(w_dtype=torch.bfloat16),
                           "'w' \\(weight\\) has dtype bfloat16, expected float32"),
                          (dict(r=(2, 6)), "'r' \\(residual\\) dim 1 is 6, expected 8"),
                          (dict(r_dtype=torch.float16), "'r' \\(residual\\) has dtype float16"),
                          (dict(y=(2, 3, 8)), "'y' \\(output\\) must be 2-D"),
                          (dict(grid=(1, 3, 1)), "dim 2 \\(8\\) is not divisible by grid_dim.y=3"),
                          (dict(grid=(1, 1, 2)), "grid_dim.z must be 1")]:
        with pytest.raises(ValueError, match=words) as e:
            build(**kwargs)
        assert "moe_mul_sum_add" in str(e.value), str(e.value)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
