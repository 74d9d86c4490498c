"""Negative controls of the argmax layers' tests: a kernel with one of three bugs fails them, with its
message; the unmutated kernels pass the same cases (their own tests).

As in test_embedding_controls.py, each control copies the kernel sources to a temporary directory,
applies ONE exact string replacement (found exactly once, or the control fails: a rewritten kernel must
update it rather than make it vacuous) and builds against the copy (testing.mutated_kernel):

  (a) argmax.cuh's comparison `>=` instead of `>` (argmax_beats: a candidate of equal value beats the
      best so far, so ties go to the later, higher index): the planted tie rows (two maxima 256 apart,
      one thread's scan) fail argmax's kernel-level and test-mode exact comparisons;
  (b) argmax_partial.cuh's index not offset by the task's vocabulary start (iparam(0)): every task past
      the first writes a relative index, and the kernel-level exact comparison of the indices fails;
  (c) argmax_reduce.cuh preferring the later task on equal values (`>=` for its strict `>`): the rows
      whose values tie across tasks fail the reduce's kernel-level exact comparison, and the
      partial -> reduce graph's output_tokens on a tie across the first task boundary.

Run: pytest -s tests/runtime_python/test_mode/test_argmax_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import testing

HERE = os.path.dirname(os.path.abspath(__file__))


def sibling(folder: str, name: str):
    return testing.load_reference(os.path.join(HERE, "..", folder, "x.py"), name=name)


ARGMAX, ARGMAX_TM = sibling("argmax", "test_argmax"), sibling("argmax", "test_argmax_testmode")
PARTIAL, PARTIAL_TM = sibling("argmax_partial", "test_argmax_partial"), \
    sibling("argmax_partial", "test_argmax_partial_testmode")
REDUCE = sibling("argmax_reduce", "test_argmax_reduce")
REF = sibling("argmax", "pytorch_reference")

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="the messages asserted are the CPU emulation's")

TIES_TO_LATER = ("return oa > ob ||", "return oa >= ob ||")
NO_VOCAB_OFFSET = ("v.iparam(0) + c", "c")
REDUCE_LATER_TASK = ("if (o > best) {", "if (o >= best) {")


def caught(control: str, e: BaseException) -> str:
    msg = str(e)
    testing.say(f"CAUGHT argmax control {control}: {msg.splitlines()[0]}")
    return msg


def test_a_ties_to_the_higher_index_fail_the_tie_rows(tmp_path):
    x = REF.logits(4, 1000, torch.float32, testing.generator(offset=21), kinds=["tie"])
    assert bool((REF.argmax(x) == 3).all())
    with testing.mutated_kernel(tmp_path, "argmax.cuh", *TIES_TO_LATER):
        with pytest.raises(AssertionError) as e:
            ARGMAX.run_kernel(x, 80)
        msg = caught("(a) kernel level", e.value)
        assert "'argmax_0.out[kernel,float32,(4, 1000),cc=80]' is not equal:\n  actual   [[259], [259], " \
            "[259], [259]]\n  expected [[3], [3], [3], [3]]" in msg, msg
        with pytest.raises(AssertionError) as e:
            ARGMAX_TM.run_case(torch.bfloat16, *ARGMAX_TM.CASES[0], jitter=8)
        msg = caught("(a) test mode", e.value)
        assert "'argmax[bfloat16,8x1000,prompts=[3, 5],step=[0, 0]].output_tokens' is not equal" in msg, msg


def test_b_a_partial_index_without_its_vocabulary_start_fails(tmp_path):
    x = REF.logits(2, 1500, torch.bfloat16, testing.generator(offset=22), chunk=500, kinds=["last", "first"])
    with testing.mutated_kernel(tmp_path, "argmax_partial.cuh", *NO_VOCAB_OFFSET):
        with pytest.raises(AssertionError) as e:
            PARTIAL.run_kernel(x, (3, 1), 80)
    msg = caught("(b)", e.value)
    # tasks 1 and 2 (ranges [500, 1000) and [1000, 1500)) write their relative index: 500 and 1000 less
    assert "'argmax_partial_0[kernel,bfloat16,(2, 1500),grid=(3, 1),cc=80].index' is not equal:\n" \
        "  actual   [[465, 298, 499], [0, 400, 205]]\n  expected [[465, 798, 1499], [0, 900, 1205]]" \
        in msg, msg


def test_c_the_reduce_preferring_the_later_task_on_ties_fails(tmp_path):
    value, index = REDUCE.partials(8, 6, torch.float32, testing.generator(offset=23))
    with testing.mutated_kernel(tmp_path, "argmax_reduce.cuh", *REDUCE_LATER_TASK):
        with pytest.raises(AssertionError) as e:
            REDUCE.run_kernel(value, index, 2, 80)
        msg = caught("(c) kernel level", e.value)
        assert "'argmax_reduce_0.out[kernel,float32,(8, 6),grid.y=2,cc=80]' is not equal" in msg, msg
        with pytest.raises(AssertionError) as e:
            PARTIAL_TM.run_case(torch.bfloat16, *PARTIAL_TM.CASES[0], jitter=1)
        msg = caught("(c) test mode", e.value)
        assert "'argmax_partial[bfloat16,8x1000,grid=(5, 8),reduce_y=2].output_tokens' is not equal" in msg, \
            msg
