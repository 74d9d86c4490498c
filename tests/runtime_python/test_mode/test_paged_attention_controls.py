"""Negative controls of paged_attention_layer's tests: a kernel with one of four bugs fails them, with its
message; the unmutated kernel passes the same cases (its own tests).

Each control copies the kernel sources to a temporary directory, applies ONE exact string replacement to
csrc/tasks/paged_attention.cuh (found exactly once, or the control fails: a rewritten kernel must update
it rather than make it vacuous) and builds against the copy (testing.mutated_kernel):

  (a) the scores read the key one page further on (a page the request does not own): the kernel-level run
      names the read outside the task's live input (the cache slot the poison reached), or the guard;
  (b) no causal mask (every new token attends every new key): a prefill's output is far outside its budget;
  (c) q rotated at its position within the chunk, not its absolute position: the decode step over cached
      tokens (test mode) is far outside its budget (the other layers' tests cannot see this);
  (d) the new K/V stored one slot further on: the kernel-level run names the write outside the task's
      live output (a slot it does not own).

Run: pytest -s tests/runtime_python/test_mode/test_paged_attention_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError

HERE = os.path.dirname(os.path.abspath(__file__))
FOLDER = os.path.join(HERE, "..", "paged_attention", "x.py")
KERNEL = testing.load_reference(FOLDER, name="test_paged_attention")
TESTMODE = testing.load_reference(FOLDER, name="test_paged_attention_testmode")

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="the messages asserted are the CPU emulation's")

OTHER_PAGE = ("const T* kr = kc + at;", "const T* kr = kc + at + kt.strides[0];")
NO_CAUSAL = ("const int64_t end = k_hi < pos + 1 ? k_hi : pos + 1;", "const int64_t end = k_hi;")
RELATIVE_ROPE = ("attn_norm_rope<NV>(x, o.q_norm, o.cos ? o.cos + pos * o.cos_stride : nullptr,\n"
                 "                       o.sin ? o.sin + pos * o.sin_stride : nullptr, o.eps);",
                 "attn_norm_rope<NV>(x, o.q_norm, o.cos ? o.cos + i * o.cos_stride : nullptr,\n"
                 "                       o.sin ? o.sin + i * o.sin_stride : nullptr, o.eps);")
NEXT_SLOT = ("T* slot = (is_k ? kc : vc) + at;", "T* slot = (is_k ? kc : vc) + at + t.strides[1];")
MIXED = KERNEL.CASES[1]          # four requests, cached and new tokens, permuted pages, an empty slot
DECODE = TESTMODE.CASES[1]       # a decode step over 39 and 20 cached tokens


def mutated(tmp_path, change):
    return testing.mutated_kernel(tmp_path, "paged_attention.cuh", *change)


def caught(control: str, e: BaseException) -> str:
    msg = str(e)
    testing.say(f"CAUGHT paged_attention control {control}: {msg.splitlines()[0]}")
    return msg


def test_a_read_of_a_page_the_request_does_not_own_is_named(tmp_path):
    with mutated(tmp_path, OTHER_PAGE):
        with pytest.raises(MPKFootprintError) as e:
            KERNEL.run_case(*MIXED, 80)
    msg = caught("(a) another page", e.value)
    assert "paged_attention_0" in msg and ("reads outside its declared input tiles" in msg or
                                           "outside tensor 'k_cache'" in msg), msg
    assert "'k_cache'" in msg, msg


def test_b_attention_without_the_causal_mask_fails(tmp_path):
    with mutated(tmp_path, NO_CAUSAL):
        with pytest.raises(AssertionError) as e:
            KERNEL.run_case(*KERNEL.CASES[0], 80)
    msg = caught("(b) no causal mask", e.value)
    assert "is not close" in msg and "paged_attention_0.out" in msg, msg


def test_c_rope_at_the_relative_position_fails_the_decode_step(tmp_path):
    with mutated(tmp_path, RELATIVE_ROPE):
        with pytest.raises(AssertionError) as e:
            TESTMODE.run_case(torch.bfloat16, *DECODE, jitter=1)
    msg = caught("(c) relative RoPE", e.value)
    assert "is not close" in msg and "paged_attention_0" in msg, msg


def test_d_a_store_into_a_slot_the_request_does_not_own_is_named(tmp_path):
    with mutated(tmp_path, NEXT_SLOT):
        with pytest.raises(MPKFootprintError) as e:
            KERNEL.run_case(*MIXED, 80)
    msg = caught("(d) the next slot", e.value)
    assert "writes outside its declared output tiles" in msg and "k_cache" in msg, msg
