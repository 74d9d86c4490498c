"""Negative controls of silu_mul_linear_with_residual_layer's tests: a kernel with one of three bugs fails
them, with its message; the unmutated kernel passes the same cases (its own tests).

As in test_embedding_controls.py, each control copies the kernel sources (build.csrc_dir()) to a temporary
directory, applies ONE exact string replacement to csrc/tasks/silu_mul_linear_with_residual.cuh (found
exactly once, or the control fails) and builds against the copy through MPK_CSRC_DIR:

  (a) gate and up swapped on the vector path (up * silu(gate) read as gate * silu(up)): the kernel-level
      case's comparison fails;
  (b) the residual never added (iparam 0 ignored the other way): the comparison fails;
  (c) up read one column too far (offset I + 1): the last row reads past the input tile, which the
      kernel-level run names.

Run: pytest -s tests/runtime_python/test_mode/test_silu_mul_linear_with_residual_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError

HERE = os.path.dirname(os.path.abspath(__file__))
STEM = "silu_mul_linear_with_residual"
KERNEL = testing.load_reference(os.path.join(HERE, "..", STEM, "x.py"), name=f"test_{STEM}")

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="the messages asserted are the CPU emulation's")

SWAP_GATE_UP = ("silu_times(to_float(g.e[i]), to_float(u.e[i]))",
                "silu_times(to_float(u.e[i]), to_float(g.e[i]))")
NO_RESIDUAL = ("v.iparam(0) != 0 ? v.in<const T>(2) : nullptr", "nullptr")
UP_PAST_I = ("xs{gate, xt, xt.cols * xt.col_stride}", "xs{gate, xt, (xt.cols + 1) * xt.col_stride}")


def mutated_kernel(tmp_path, old: str, new: str):
    return testing.mutated_kernel(tmp_path, f"{STEM}.cuh", old, new)


def caught(control: str, e: BaseException) -> str:
    msg = str(e)
    testing.say(f"CAUGHT {STEM} control {control}: {msg.splitlines()[0]}")
    return msg


@pytest.mark.parametrize("control,mutation", [("(a)", SWAP_GATE_UP), ("(b)", NO_RESIDUAL)])
def test_a_b_wrong_maths_fails_the_comparison(tmp_path, control, mutation):
    with mutated_kernel(tmp_path, *mutation):
        with pytest.raises(AssertionError) as e:
            KERNEL.test_silu_mul_linear_with_residual_kernel(torch.float32, *KERNEL.SHAPES[0], 80)
    msg = caught(control, e.value)
    assert "is not close" in msg, msg


def test_c_up_past_its_half_reads_outside_the_input(tmp_path):
    with mutated_kernel(tmp_path, *UP_PAST_I):
        with pytest.raises(MPKFootprintError) as e:
            KERNEL.test_silu_mul_linear_with_residual_kernel_strided(torch.bfloat16, 80)
    msg = caught("(c)", e.value)
    assert "reads outside" in msg and "'x'" in msg, msg
