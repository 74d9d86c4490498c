"""embed_layer's kernel alone (csrc/tasks/embedding.cuh): each task on one block, nothing else running,
every byte around its tiles poisoned (testing.run_tasks: writes only its output tiles, reads only its
input tiles, independent of its threads' order, every output element written).

The layer is a copy, so every comparison is exact: the evidence line at a zero tolerance over the tiles
that ran, then the output's bits against the reference's (testing.assert_equal on the integer view).
Run: python tests/runtime_python/embedding/test_embedding.py   (or pytest this file; -k to pick cases)
The integration test is test_embedding_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
EXACT = testing.Tolerance(0.0, 0.0, "a copy: bit-exact")
BITS = {2: torch.int16, 4: torch.int32}
# (batch, vocab, hidden, grid, coords): every task of an even 2-D split; the edge tasks of a
# non-power-of-two hidden split (3 column blocks of 128) with 3 row tiles; one-row tiles (grid.y =
# batch); a hidden size that is no multiple of the 16-byte pack (the scalar path), narrower than a warp.
SHAPES = [(8, 50, 256, (2, 4, 1), None), (6, 40, 384, (3, 3, 1), "edges"), (5, 30, 96, (2, 5, 1), None),
          (3, 11, 7, (1, 3, 1), None)]

block_dim = testing.worker_block_dim


def check_exact(run, name, actual, expected):
    """The evidence line at a zero tolerance, then the bits of the tiles that ran."""
    run.check(name, expected, EXACT, checks=run.layer.checks)
    cover = run.covered[name]
    bits = BITS[actual.element_size()]
    testing.assert_equal(f"{run.layer.name}.{name}[kernel,bits]", actual[cover].view(bits),
                         expected[cover].contiguous().view(bits))


def run_kernel(ids, w, grid, coords, target_cc, input_source=1, params=None, out=None, expected=None):
    """run_tasks over embed_layer's tasks; ids [batch, 1] int64 (any strides), w [vocab, hidden]."""
    out = torch.zeros(ids.shape[0], w.shape[1], dtype=w.dtype) if out is None else out
    run = testing.run_tasks(
        lambda pk, t: pk.embed_layer(input=t["ids"], weight=t["w"], output=t["out"], grid_dim=grid,
                                     block_dim=block_dim(target_cc), input_source=input_source),
        {"ids": ids, "w": w, "out": out}, coords=coords, target_cc=target_cc, params=params)
    check_exact(run, "out", out, ref.embedding(ids, w) if expected is None else expected)
    return run


def random_ids(batch, vocab, gen):
    return torch.randint(0, vocab, (batch, 1), generator=gen, dtype=torch.int64)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,vocab,hidden,grid,coords", SHAPES)
def test_embedding_kernel(dtype, batch, vocab, hidden, grid, coords, target_cc):
    gen = testing.generator(offset=batch * 1000 + hidden)
    w = testing.randn((vocab, hidden), dtype, gen)
    run_kernel(random_ids(batch, vocab, gen), w, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=lambda d: str(d)[6:])
def test_embedding_kernel_out_of_range_ids_give_zeros(dtype, target_cc):
    """Negative ids and ids >= vocab (up to 2^40) write zero rows and read nothing outside the table
    (run_tasks would name a read past the weight tile); the in-range rows are the table's."""
    vocab, hidden = 20, 64
    gen = testing.generator(offset=31)
    w = testing.randn((vocab, hidden), dtype, gen)
    ids = torch.tensor([[3], [-1], [vocab], [0], [-(2 ** 40)], [vocab - 1], [vocab + 100], [2 ** 40]])
    out = torch.full((ids.shape[0], hidden), 7.0, dtype=dtype)
    run = run_kernel(ids, w, (2, 4, 1), None, target_cc, out=out)
    bad = [1, 2, 4, 6, 7]
    assert bool((out[bad] == 0).all()) and bool((out[[0, 3, 5]] == w[[3, 0, vocab - 1]]).all())
    testing.say(f"OUT_OF_RANGE {run.layer.name}: ids {ids.flatten().tolist()} -> rows {bad} zero, the others "
                f"the table's PASS")


# Strided views the kernel accepts: w a column block of a wider table (row stride 3 * hidden), the ids a
# column of an int64 matrix (row stride 3), the output a column block of a wider matrix (row stride
# 2 * hidden + 8), so a kernel that takes one tensor's strides for another's fails.
STRIDED = [(torch.bfloat16, 6, 24, 256, (2, 3, 1)), (torch.float32, 4, 9, 96, (3, 2, 1))]
QUICK = (torch.bfloat16, 6, 24, 256, (2, 3, 1), 90)


@pytest.mark.parametrize("dtype,batch,vocab,hidden,grid,target_cc", testing.case_params(
    [(*s, cc) for s in STRIDED for cc in TARGETS], quick=QUICK))
def test_embedding_kernel_strided(dtype, batch, vocab, hidden, grid, target_cc):
    gen = testing.generator(offset=7 * hidden)
    w = testing.randn((vocab, 3 * hidden), dtype, gen)[:, hidden:2 * hidden]
    ids = torch.randint(0, vocab, (batch, 3), generator=gen, dtype=torch.int64)[:, 1:2]
    out = testing.strided_view((batch, hidden), (2 * hidden + 8, 1), dtype, gen, zeros=True)
    assert not w.is_contiguous() and ids.stride() == (3, 1) and not out.is_contiguous()
    run_kernel(ids, w, grid, None, target_cc, out=out)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("step", [0, 5])
def test_embedding_kernel_source0_reads_tokens_at_step(step, target_cc):
    """input_source=0: row b looks up tokens[0, step + b] (the tokens meta tensor as given: a
    kernel-level run has no meta pass); positions past max_seq_length give zeros; the input tensor
    holds other ids, so a kernel that read it instead fails; request 1's row is never read."""
    batch, vocab, hidden, max_seq = 8, 64, 128, 10
    gen = testing.generator(offset=step)
    w = testing.randn((vocab, hidden), torch.bfloat16, gen)
    tokens = torch.randint(0, vocab, (2, max_seq), generator=gen, dtype=torch.int64)
    meta = {"tokens": tokens, "step": torch.tensor([step, 0], dtype=torch.int32)}
    ids = (tokens[0, :batch, None] + 1) % vocab           # what input_source=1 would read
    expected = ref.embedding(ref.source_ids(0, ids, tokens, step, batch), w)
    run_kernel(ids, w, (2, 4, 1), None, target_cc, input_source=0, expected=expected,
               params={"max_seq_length": max_seq, "meta_tensors": meta})


def test_embedding_refuses_bad_arguments():
    """Shapes, dtypes, grids and input_source are checked in Python, naming layer, tensor and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True)
    ids = pk.attach_input(torch.zeros(4, 1, dtype=torch.int64), name="ids")
    ids2 = pk.attach_input(torch.zeros(4, 2, dtype=torch.int64), name="ids2")
    ids32 = pk.attach_input(torch.zeros(4, 1, dtype=torch.int32), name="ids32")
    w = pk.attach_input(torch.zeros(10, 6), name="w")
    out = pk.attach_input(torch.zeros(4, 6), name="out")
    out_bf = pk.attach_input(torch.zeros(4, 6, dtype=torch.bfloat16), name="out_bf")
    out5 = pk.attach_input(torch.zeros(5, 6), name="out5")
    cases = [
        (dict(input=ids32), r"tensor 'ids32' \(input\) has dtype int32, expected int64"),
        (dict(input=ids2), r"tensor 'ids2' \(input\) must be \[batch, 1\].*\(4, 2\)"),
        (dict(output=out5), r"tensor 'out5' \(output\) dim 0 is 5, expected 4"),
        (dict(output=out_bf), r"tensor 'out_bf' \(output\) has dtype bfloat16, expected float32"),
        (dict(grid_dim=(4, 1, 1)), r"tensor 'w' \(weight\) dim 1 \(6\) is not divisible by grid_dim.x=4"),
        (dict(grid_dim=(1, 3, 1)), r"tensor 'ids' \(input\) dim 0 \(4\) is not divisible by grid_dim.y=3"),
        (dict(grid_dim=(1, 1, 2)), r"grid_dim.z must be 1"),
        (dict(input_source=2), r"input_source must be 0 .* or 1 .*got 2"),
        (dict(input_source=True), r"input_source must be 0 .* or 1 .*got True"),
    ]
    for change, message in cases:
        kw = {**dict(input=ids, weight=w, output=out, grid_dim=(2, 2, 1), block_dim=(128, 1, 1)), **change}
        with pytest.raises(ValueError, match=f"layer 'embed_0': {message}"):
            pk.embed_layer(**kw)
    testing.say(f"BAD_INPUT embed_layer: {len(cases)} bad calls refused, each naming layer, tensor and "
                f"sizes PASS")
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
