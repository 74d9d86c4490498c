"""Negative controls of embed_layer's tests: a kernel with one of three bugs fails them, with its message;
the unmutated kernel passes the same cases (its own tests).

As in test_precision_controls.py, each control copies the kernel sources (build.csrc_dir()) to a
temporary directory, applies ONE exact string replacement to csrc/tasks/embedding.cuh (found exactly
once, or the control fails: a rewritten kernel must update it rather than make it vacuous) and builds
against the copy through MPK_CSRC_DIR (the cache key hashes the headers):

  (a) the kernel ignores input_source (always reads the input tensor): test mode's source-0 case at
      step 3 (input_tokens holds 2 ids, tokens[0, 3..7) 4) fails its exact comparison, and so does the
      kernel-level source-0 case;
  (b) an off-by-one row (row r takes row r + 1's id): the kernel-level run's exact comparison fails in
      every task (a tile's last row reads the next tile's id, which the run poisons: both poisons are
      ids outside the vocabulary, so that row is zeros with either, and the mismatch, not the
      two-poison check, is what catches it);
  (c) the vocabulary bound dropped (only negative ids give zeros, as in MPK): an id of vocab or just
      past it reads outside the weight tile, which the kernel-level run names.

Run: pytest -s tests/runtime_python/test_mode/test_embedding_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = testing.load_reference(os.path.join(HERE, "..", "embedding", "x.py"), name="test_embedding")
TESTMODE = testing.load_reference(os.path.join(HERE, "..", "embedding", "x.py"),
                                  name="test_embedding_testmode")

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="the messages asserted are the CPU emulation's")

IGNORE_SOURCE = ("if (v.iparam(0) == 1) return", "if (true) return")
OFF_BY_ONE = ("v.in<const int64_t>(0)[r * row_stride]", "v.in<const int64_t>(0)[(r + 1) * row_stride]")
NO_VOCAB_BOUND = ("if (id >= 0 && id < wt.rows)", "if (id >= 0)")


def mutated_kernel(tmp_path, old: str, new: str):
    return testing.mutated_kernel(tmp_path, "embedding.cuh", old, new)


def caught(control: str, e: BaseException) -> str:
    msg = str(e)
    testing.say(f"CAUGHT embedding control {control}: {msg.splitlines()[0]}")
    return msg


def test_a_kernel_ignoring_input_source_fails_test_mode_and_kernel_level(tmp_path):
    case = TESTMODE.CASES[3]
    assert case[4] == 0 and case[6] == (3,), case          # source 0, one request at step 3
    with mutated_kernel(tmp_path, *IGNORE_SOURCE):
        with pytest.raises(AssertionError) as e:
            TESTMODE.run_case(torch.bfloat16, *case, jitter=3)
        msg = caught("(a) test mode", e.value)
        assert "is not close" in msg and "embed_0" in msg, msg
        with pytest.raises(AssertionError) as e:
            KERNEL.test_embedding_kernel_source0_reads_tokens_at_step(5, 80)
        msg = caught("(a) kernel level", e.value)
        assert "is not close" in msg, msg


def test_b_off_by_one_row_fails_the_exact_comparison(tmp_path):
    gen = testing.generator(offset=11)
    w = testing.randn((30, 96), torch.float32, gen)
    ids = torch.randint(0, 30, (6, 1), generator=gen, dtype=torch.int64)
    with mutated_kernel(tmp_path, *OFF_BY_ONE):
        with pytest.raises(AssertionError) as e:
            KERNEL.run_kernel(ids, w, (1, 3, 1), None, 80)
    msg = caught("(b)", e.value)
    assert "is not close" in msg and "Tasks with bad elements (grid coordinate): (0, 0, 0), (0, 1, 0), " \
        "(0, 2, 0)" in msg, msg


def test_c_no_vocabulary_bound_reads_outside_the_weight(tmp_path):
    gen = testing.generator(offset=12)
    vocab = 20
    w = testing.randn((vocab, 64), torch.bfloat16, gen)
    ids = torch.tensor([[3], [vocab], [0], [vocab + 1]])
    with mutated_kernel(tmp_path, *NO_VOCAB_BOUND):
        with pytest.raises(MPKFootprintError) as e:
            KERNEL.run_kernel(ids, w, (2, 2, 1), None, 80)
    msg = caught("(c)", e.value)
    assert "of layer 'embed_0' (embedding) reads outside" in msg and "'w'" in msg, msg
