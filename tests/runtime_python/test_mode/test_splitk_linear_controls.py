"""Negative controls of splitk_linear_layer's tests: a kernel with one of three bugs fails them, with its
message; the unmutated kernel passes the same cases (its own tests).

As in test_embedding_controls.py, each control builds against a copy of the kernel sources in which
csrc/tasks/splitk_linear.cuh has ONE exact string replaced (testing.mutated_kernel: found exactly once, or
the control fails, so a rewritten kernel must update it rather than make it vacuous):

  (a) a plain store instead of the atomic add (y = round(p_j): the initial value and the other slices'
      partials lost): test mode's 3-way split fails its comparison (only the last partial to land
      survives), and so does a kernel-level task alone (y_0 lost);
  (b) the K offset of the slice wrong (x read one slice further on, W at its own slice): the kernel-level
      run names the read outside its declared input tile of x;
  (c) the wrong half of the 32-bit word in the bf16/fp16 CAS loop (the add lands on the neighbouring
      column): with one-column tiles the kernel-level run names the write outside the task's output tile.
  (d) the bf16/fp16 CAS tried once, without its retry (a lost update whenever another task's add lands
      between the word's read and the swap): test mode's contention case (16 K slices into one 2 x 4 tile,
      3 launches; the emulated atomics pause between load and swap under jitter, docs/runtime.md) fails
      its comparison. Measured: every one of 40 seeds failed on the first launch (0 of 40 with the pause
      switched off: two tasks' adds then collide only within nanoseconds). The other race, a plain
      read-modify-write in place of the fp32 atomicAdd, loses nothing a value check sees (0 of 40 seeds):
      ThreadSanitizer names it (test_shared_tile_races.py).

Run: pytest -s tests/runtime_python/test_mode/test_splitk_linear_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "..", "splitk_linear")
KERNEL = testing.load_reference(os.path.join(FOLDER, "x.py"), name="test_splitk_linear")
TESTMODE = testing.load_reference(os.path.join(FOLDER, "x.py"), name="test_splitk_linear_testmode")

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="the messages asserted are the CPU emulation's")

PLAIN_STORE = ("T* p = y + b * yt.row_stride + col * yt.col_stride;",
               "T* p = y + b * yt.row_stride + col * yt.col_stride; *p = from_float<T>(sum); return;")
WRONG_K_OFFSET = ("const T* x = v.in<const T>(0);", "const T* x = v.in<const T>(0) + xt.cols;")
NO_RETRY = ("} while (old != assumed);", "} while (false);  // one try, no retry")
WRONG_HALF = ("const unsigned int shift = unsigned(a & 2) * 8;",
              "const unsigned int shift = unsigned(2 - (a & 2)) * 8;")


def mutated_kernel(tmp_path, old: str, new: str):
    return testing.mutated_kernel(tmp_path, "splitk_linear.cuh", old, new)


def caught(control: str, e: BaseException) -> str:
    msg = str(e)
    testing.say(f"CAUGHT splitk_linear control {control}: {msg.splitlines()[0]}")
    return msg


def test_a_plain_store_loses_partials_in_test_mode_and_the_initial_value_at_kernel_level(tmp_path):
    case = TESTMODE.CASES[0]
    assert case[3][1] == 3, case                          # 3 partials per tile
    with mutated_kernel(tmp_path, *PLAIN_STORE):
        with pytest.raises(AssertionError) as e:
            TESTMODE.run_case(torch.float32, *case, jitter=3)
        msg = caught("(a) test mode", e.value)
        assert "is not close" in msg and "splitk_linear_0" in msg, msg
        x, w, y0 = KERNEL.inputs(torch.bfloat16, 8, 384, 48)
        with pytest.raises(AssertionError) as e:
            KERNEL.run_slice(torch.bfloat16, x, w, y0, (3, 3), 1, 80)
        msg = caught("(a) kernel level", e.value)
        assert "is not close" in msg, msg


def test_b_wrong_k_offset_reads_outside_the_input_tile(tmp_path):
    x, w, y0 = KERNEL.inputs(torch.float32, 8, 384, 48)
    with mutated_kernel(tmp_path, *WRONG_K_OFFSET):
        with pytest.raises(MPKFootprintError) as e:
            KERNEL.run_slice(torch.float32, x, w, y0, (3, 3), 0, 80)
    msg = caught("(b)", e.value)
    assert "reads outside its declared input tiles" in msg and "tensor 'x'" in msg, msg


def test_c_wrong_half_word_writes_the_neighbouring_tile(tmp_path):
    x, w, y0 = KERNEL.inputs(torch.bfloat16, 3, 60, 7)
    with mutated_kernel(tmp_path, *WRONG_HALF):
        with pytest.raises(MPKFootprintError) as e:
            KERNEL.run_slice(torch.bfloat16, x, w, y0, (7, 2), 0, 80)
    msg = caught("(c)", e.value)
    assert "writes outside its declared output tiles" in msg and "tensor 'out'" in msg, msg


def test_d_cas_without_retry_loses_updates_under_contention(tmp_path):
    with mutated_kernel(tmp_path, *NO_RETRY):
        with pytest.raises(AssertionError) as e:
            TESTMODE.run_contention(torch.bfloat16)
    msg = caught("(d) contention", e.value)
    assert "is not close" in msg and "splitk_linear_0" in msg, msg
