"""Negative controls of rmsnorm_linear_layer's tests: a kernel with one of three bugs fails them, with its
message; the unmutated kernel passes the same cases (its own tests).

As in test_embedding_controls.py, each control copies the kernel sources (build.csrc_dir()) to a temporary
directory, applies ONE exact string replacement to csrc/tasks/rmsnorm_linear.cuh (found exactly once, or the
control fails: a rewritten kernel must update it rather than make it vacuous) and builds against the copy
through MPK_CSRC_DIR (the cache key hashes the headers):

  (a) weight_norm ignored (the normalized row not multiplied by it): test mode's bf16 case, on real
      generated code, fails its comparison;
  (b) the mean of squares divided by K - 1 instead of K (a 1 / (2K) relative bias, 0.5% at K = 96): the
      fp32 kernel-level case fails its comparison;
  (c) output column j computed from W row j + 1: the last column of a tile reads the next task's W row,
      which the kernel-level run names as a read outside the weight tile.

Run: pytest -s tests/runtime_python/test_mode/test_rmsnorm_linear_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = testing.load_reference(os.path.join(HERE, "..", "rmsnorm_linear", "x.py"),
                                name="test_rmsnorm_linear")
TESTMODE = testing.load_reference(os.path.join(HERE, "..", "rmsnorm_linear", "x.py"),
                                  name="test_rmsnorm_linear_testmode")

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="the messages asserted are the CPU emulation's")

NO_WEIGHT_NORM = ("xv * s * to_float(wn[k * wn_stride])", "xv * s")
MEAN_OVER_K_MINUS_1 = ("static_cast<float>(k_len)", "static_cast<float>(k_len - 1)")
NEXT_W_ROW = ("linear_rows<T>(batch, k_len, w, wt,", "linear_rows<T>(batch, k_len, w + wt.row_stride, wt,")


def mutated_kernel(tmp_path, old: str, new: str):
    return testing.mutated_kernel(tmp_path, "rmsnorm_linear.cuh", old, new)


def caught(control: str, e: BaseException) -> str:
    msg = str(e)
    testing.say(f"CAUGHT rmsnorm_linear control {control}: {msg.splitlines()[0]}")
    return msg


def test_a_ignored_weight_norm_fails_test_mode(tmp_path):
    with mutated_kernel(tmp_path, *NO_WEIGHT_NORM):
        with pytest.raises(AssertionError) as e:
            TESTMODE.run_case(torch.bfloat16, *TESTMODE.CASES[0], jitter=1, output_dir=str(tmp_path / "out"))
    msg = caught("(a)", e.value)
    assert "is not close" in msg and "rmsnorm_linear_0" in msg, msg


def test_b_mean_over_k_minus_1_fails_the_fp32_comparison(tmp_path):
    x, wn, w, out = KERNEL.inputs(torch.float32, 13, 96, 10, offset=5)
    with mutated_kernel(tmp_path, *MEAN_OVER_K_MINUS_1):
        with pytest.raises(AssertionError) as e:
            KERNEL.run_kernel(torch.float32, x, wn, w, out, 5, None, 80)
    msg = caught("(b)", e.value)
    assert "is not close" in msg, msg


def test_c_next_weight_row_reads_outside_the_weight_tile(tmp_path):
    x, wn, w, out = KERNEL.inputs(torch.bfloat16, 4, 64, 12, offset=6)
    with mutated_kernel(tmp_path, *NEXT_W_ROW):
        with pytest.raises(MPKFootprintError) as e:
            KERNEL.run_kernel(torch.bfloat16, x, wn, w, out, 3, None, 80)
    msg = caught("(c)", e.value)
    assert "of layer 'rmsnorm_linear_0' (rmsnorm_linear) reads outside" in msg and "'w'" in msg, msg
