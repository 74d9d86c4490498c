"""argmax_layer's kernel alone (csrc/tasks/argmax.cuh; testing.run_tasks, docs/kernel_tests.md): the
task on one emulated block, everything outside its tiles poisoned (it writes only its output tile,
reads only its input tile, independently of its threads' order, and writes every id).

The ids are compared exactly with torch.argmax (testing.assert_equal): planted rows (reference
KINDS: equal maxima in one thread's scan and across a partial boundary, the maximum first and last,
NaN rows, all -inf, -0 before +0), random rows, the vocabularies real models use (151,936 Qwen3,
153,600 padded; one row each), a strided view, both worker blocks (128 and 256 threads).
Run: python tests/runtime_python/argmax/test_argmax.py   (or pytest this file; -k to pick cases)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
# (batch, vocab): every planted kind once, a vocabulary narrower than the block, one row each of the
# real vocabularies (its rows: a random one; a planted tie across the middle).
SHAPES = [(8, 1000), (8, 100), (1, 151936), (2, 153600)]
QUICK = (torch.bfloat16, 8, 1000, 90)

block_dim = testing.worker_block_dim


def run_kernel(x, target_cc, out=None, name="out"):
    out = torch.zeros(x.shape[0], 1, dtype=torch.int64) if out is None else out
    run = testing.run_tasks(lambda pk, t: pk.argmax_layer(input=t["x"], output=t["out"], grid_dim=(1, 1, 1),
                                                          block_dim=block_dim(target_cc)),
                            {"x": x, "out": out}, target_cc=target_cc)
    testing.assert_equal(f"{run.layer.name}.{name}[kernel,{str(x.dtype)[6:]},{tuple(x.shape)},cc={target_cc}]",
                         out, ref.argmax(x))
    return run


@pytest.mark.parametrize("dtype,batch,vocab,target_cc", testing.case_params(
    [(d, *s, cc) for d in DTYPES for s in SHAPES for cc in TARGETS], quick=QUICK))
def test_argmax_kernel(dtype, batch, vocab, target_cc):
    gen = testing.generator(offset=batch * 7 + vocab)
    kinds = ["random", "tie_boundary"] if batch <= 2 else ref.KINDS
    run_kernel(ref.logits(batch, vocab, dtype, gen, kinds=kinds), target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
def test_argmax_kernel_strided(target_cc):
    """x a column block of a wider matrix (row stride 3 * vocab), the ids a column of an int64 matrix:
    a kernel taking one tensor's strides for the other's fails."""
    gen = testing.generator(offset=5)
    wide = testing.randn((6, 3 * 300), torch.float32, gen)
    x = wide[:, 300:600]
    for b, kind in enumerate(["tie", "first", "last", "nan", "random", "tie_boundary"]):
        ref.plant(x[b], kind, 150)
    out = torch.zeros(6, 3, dtype=torch.int64)
    run_kernel(x, target_cc, out=out[:, 1:2], name="out[strided]")
    assert bool((out[:, [0, 2]] == 0).all())


def test_argmax_refuses_bad_arguments():
    """Shapes, dtypes and grids are checked in Python, naming layer, tensor and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True)
    x = pk.attach_input(torch.zeros(4, 10), name="x")
    xi = pk.attach_input(torch.zeros(4, 10, dtype=torch.int32), name="xi")
    ids = pk.attach_input(torch.zeros(4, 1, dtype=torch.int64), name="ids")
    ids32 = pk.attach_input(torch.zeros(4, 1, dtype=torch.int32), name="ids32")
    ids2 = pk.attach_input(torch.zeros(4, 2, dtype=torch.int64), name="ids2")
    cases = [
        (dict(input=xi), r"tensor 'xi' \(input\) has dtype int32, expected bfloat16 or float16 or float32"),
        (dict(output=ids32), r"tensor 'ids32' \(output\) has dtype int32, expected int64"),
        (dict(output=ids2), r"tensor 'ids2' \(output\) dim 1 is 2, expected 1"),
        (dict(grid_dim=(2, 1, 1)), r"grid_dim.x=2 does not split output 'ids'"),
    ]
    for change, message in cases:
        kw = {**dict(input=x, output=ids, grid_dim=(1, 1, 1), block_dim=(128, 1, 1)), **change}
        with pytest.raises(ValueError, match=f"layer 'argmax_0': {message}"):
            pk.argmax_layer(**kw)
    testing.say(f"BAD_INPUT argmax_layer: {len(cases)} bad calls refused, each naming layer, tensor and "
                f"sizes PASS")
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
