"""argmax_partial_layer's kernel alone (csrc/tasks/argmax_partial.cuh; testing.run_tasks): each task on
one emulated block, everything outside its tiles poisoned (it writes only its value and index tiles,
reads only its vocabulary range, independently of its threads' order, and writes every element).

Each task's (value, global index) is compared exactly with the reference (testing.assert_equal; values
by their bits): the planted rows of argmax's reference (equal maxima in one task and on both sides of
the first task boundary, the maximum first and last, NaN rows, all -inf, -0 before +0), grid.x = 3 and
5 (non-powers of two) with grid.y splitting the batch, 151,936 (Qwen3) split 8 ways (one row), a strided
view, both worker blocks; a grid.x that does not divide the vocabulary is refused, naming those that do.
Run: python tests/runtime_python/argmax_partial/test_argmax_partial.py   (or pytest this file)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
HERE = os.path.dirname(os.path.abspath(__file__))
ARGMAX = testing.load_reference(os.path.join(HERE, "..", "argmax", "x.py"))

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
BITS = {2: torch.int16, 4: torch.int32}
# (batch, vocab, grid): 3 and 5 vocabulary ranges (non-powers of two; ranges of 500 and 300) with
# grid.y 2 and 4, one-row tiles (grid.y = batch); 151,936 in 8 ranges of 18,992, one row.
SHAPES = [(8, 1500, (3, 2)), (8, 1500, (5, 4)), (4, 1200, (4, 4)), (1, 151936, (8, 1))]
QUICK = (torch.bfloat16, 8, 1500, (3, 2), 90)

block_dim = testing.worker_block_dim


def run_kernel(x, grid, target_cc, value=None, index=None):
    tasks = grid[0]
    value = torch.zeros(x.shape[0], tasks, dtype=x.dtype) if value is None else value
    index = torch.zeros(x.shape[0], tasks, dtype=torch.int64) if index is None else index
    run = testing.run_tasks(
        lambda pk, t: pk.argmax_partial_layer(input=t["x"], output=(t["value"], t["index"]),
                                              grid_dim=(*grid, 1), block_dim=block_dim(target_cc)),
        {"x": x, "value": value, "index": index}, target_cc=target_cc)
    want_value, want_index = ref.argmax_partial(x, tasks)
    name = f"{run.layer.name}[kernel,{str(x.dtype)[6:]},{tuple(x.shape)},grid={grid},cc={target_cc}]"
    testing.assert_equal(f"{name}.index", index, want_index)
    bits = BITS[x.element_size()]
    testing.assert_equal(f"{name}.value[bits]", value.contiguous().view(bits),
                         want_value.contiguous().view(bits))
    return run


@pytest.mark.parametrize("dtype,batch,vocab,grid,target_cc", testing.case_params(
    [(d, *s, cc) for d in DTYPES for s in SHAPES for cc in TARGETS], quick=QUICK))
def test_argmax_partial_kernel(dtype, batch, vocab, grid, target_cc):
    gen = testing.generator(offset=batch * 7 + vocab + grid[0])
    kinds = ["tie_boundary"] if batch == 1 else ARGMAX.KINDS
    run_kernel(ARGMAX.logits(batch, vocab, dtype, gen, chunk=vocab // grid[0], kinds=kinds), grid, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
def test_argmax_partial_kernel_strided(target_cc):
    """x a column block of a wider matrix, value and index columns of wider matrices."""
    gen = testing.generator(offset=9)
    x = testing.randn((4, 3 * 900), torch.float32, gen)[:, 900:1800]
    for b, kind in enumerate(["tie", "tie_boundary", "nan", "last"]):
        ARGMAX.plant(x[b], kind, 300)
    value, index = torch.zeros(4, 7), torch.zeros(4, 8, dtype=torch.int64)
    run_kernel(x, (3, 2), target_cc, value=value[:, 2:5], index=index[:, 4:7])


def test_argmax_partial_refuses_a_split_that_does_not_divide_the_vocabulary():
    """151,936 = 2^7 * 1187: grid.x = 3 (or 96, MPK's demo's worker count) is refused, naming 1 ... 128."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True)
    x = pk.attach_input(torch.zeros(2, 151936, dtype=torch.bfloat16), name="logits")
    for g in (3, 96):
        val = pk.attach_input(torch.zeros(2, g, dtype=torch.bfloat16), name=f"value{g}")
        idx = pk.attach_input(torch.zeros(2, g, dtype=torch.int64), name=f"index{g}")
        with pytest.raises(ValueError, match=(
                rf"layer 'argmax_partial_0': tensor 'logits' \(input\) dim 1 \(151936\) is not divisible by "
                rf"grid_dim.x={g}; grid sizes that divide 151936: 1, 2, 4, 8, 16, 32, 64, 128, 1187, ")) as e:
            pk.argmax_partial_layer(input=x, output=(val, idx), grid_dim=(g, 1, 1), block_dim=(128, 1, 1))
        testing.say(f"REFUSED argmax_partial grid.x={g}: {e.value}")
    val = pk.attach_input(torch.zeros(2, 4, dtype=torch.bfloat16), name="value")
    idx = pk.attach_input(torch.zeros(2, 4, dtype=torch.int64), name="index")
    with pytest.raises(ValueError, match=r"tensor 'value' \(value\) dim 1 is 4, expected 8"):
        pk.argmax_partial_layer(input=x, output=(val, idx), grid_dim=(8, 1, 1), block_dim=(128, 1, 1))
    with pytest.raises(ValueError, match=r"output must be the pair \(value, index\)"):
        pk.argmax_partial_layer(input=x, output=val, grid_dim=(4, 1, 1), block_dim=(128, 1, 1))
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
