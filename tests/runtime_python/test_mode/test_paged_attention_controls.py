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
The tensor-core form of step 3 (attn_pairs_mma: bf16 / fp16 requests of 16+ (token, query head) pairs;
MIXED's first and third requests, CASES[0]'s one request, so (b) above reaches it too):
  (e) keys and values staged from one page further on: the read outside the task's live input is named;
  (f) the scores' ldmatrix before K's cp.async group is waited for (wait_group<1> dropped): the emulation
      names the ldmatrix that reads bytes still in flight, on the seeds whose copies land late;
  (g) P's two A registers swapped (rows g and g + 8 exchange their probabilities): far outside the budget;
  (h) V's ldmatrix without .trans (B's keys and dims exchanged): far outside the budget;
  (i) under (g), the rows outside the budget are exactly the ones layers/paged_attention.py's
      tensor_core_rows marks (the rule the budgets use is the kernel's).

Run: pytest -s tests/runtime_python/test_mode/test_paged_attention_controls.py
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError, MPKRuntimeError

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
MMA_OTHER_PAGE = ("at >= 0 ? cache + at + 8 * ch : cache,",
                  "at >= 0 ? cache + at + t.strides[0] + 8 * ch : cache,")
MMA_NO_WAIT = ("ptx::cp_async_wait_group<1>();  // K has landed", "// (no wait)")
MMA_P_SWAPPED = ("const uint32_t pa[2] = {attn_pack2<T>(s[0], s[1]), attn_pack2<T>(s[2], s[3])};",
                 "const uint32_t pa[2] = {attn_pack2<T>(s[2], s[3]), attn_pack2<T>(s[0], s[1])};")
MMA_NO_TRANS = ("ptx::ldmatrix_m8n8_x4_trans_shared_b16(vb,", "ptx::ldmatrix_m8n8_x4_shared_b16(vb,")
MIXED = KERNEL.CASES[1]          # four requests, cached and new tokens, permuted pages, an empty slot
DECODE = TESTMODE.CASES[1]       # a decode step over 39 and 20 cached tokens


def mutated(tmp_path, change):
    return testing.mutated_kernel(tmp_path, "paged_attention.cuh", *change)


def control(tmp_path, change, error, label: str, run) -> str:
    """run() against the kernel with `change`: it must raise `error`; its message, said."""
    with mutated(tmp_path, change):
        with pytest.raises(error) as e:
            run()
    msg = str(e.value)
    testing.say(f"CAUGHT paged_attention control {label}: {msg.splitlines()[0]}")
    return msg


def test_a_read_of_a_page_the_request_does_not_own_is_named(tmp_path):
    msg = control(tmp_path, OTHER_PAGE, MPKFootprintError, "(a) another page",
                  lambda: KERNEL.run_case(*MIXED, 80))
    assert "paged_attention_0" in msg and ("reads outside its declared input tiles" in msg or
                                           "outside tensor 'k_cache'" in msg), msg
    assert "'k_cache'" in msg, msg


def test_b_attention_without_the_causal_mask_fails(tmp_path):
    msg = control(tmp_path, NO_CAUSAL, AssertionError, "(b) no causal mask",
                  lambda: KERNEL.run_case(*KERNEL.CASES[0], 80))
    assert "is not close" in msg and "paged_attention_0.out" in msg, msg


def test_c_rope_at_the_relative_position_fails_the_decode_step(tmp_path):
    msg = control(tmp_path, RELATIVE_ROPE, AssertionError, "(c) relative RoPE",
                  lambda: TESTMODE.run_case(torch.bfloat16, *DECODE, jitter=1))
    assert "is not close" in msg and "paged_attention_0" in msg, msg


def test_d_a_store_into_a_slot_the_request_does_not_own_is_named(tmp_path):
    msg = control(tmp_path, NEXT_SLOT, MPKFootprintError, "(d) the next slot",
                  lambda: KERNEL.run_case(*MIXED, 80))
    assert "writes outside its declared output tiles" in msg and "k_cache" in msg, msg


def test_e_the_tensor_core_path_reading_another_page_is_named(tmp_path):
    msg = control(tmp_path, MMA_OTHER_PAGE, MPKFootprintError, "(e) tensor cores, another page",
                  lambda: KERNEL.run_case(*MIXED, 90))
    assert "paged_attention_0" in msg and ("'k_cache'" in msg or "'v_cache'" in msg), msg


def test_f_an_ldmatrix_before_its_cp_async_group_landed_is_named(tmp_path):
    msg = control(tmp_path, MMA_NO_WAIT, MPKRuntimeError, "(f) tensor cores, no wait_group",
                  lambda: KERNEL.run_case(*MIXED, 90))
    assert "ldmatrix" in msg and "will still write: its group has not been waited for" in msg, msg
    assert "paged_attention.cuh" in msg, msg


@pytest.mark.parametrize("change,label", [(MMA_P_SWAPPED, "(g) P's rows swapped"),
                                          (MMA_NO_TRANS, "(h) V without .trans")], ids=["g", "h"])
def test_gh_a_wrong_fragment_fails_the_tensor_core_cases(tmp_path, change, label):
    msg = control(tmp_path, change, AssertionError, label, lambda: KERNEL.run_case(*KERNEL.CASES[0], 80))
    assert "is not close" in msg and "paged_attention_0.out" in msg, msg


def test_i_the_rows_on_the_tensor_cores_are_the_ones_the_rule_names(tmp_path):
    """layers/paged_attention.py tensor_core_rows against the kernel: with P's registers swapped (g) only
    the tensor-core path computes wrong values, so on MIXED (requests of 20, 12, 36 and 4 pairs) the rows
    outside the budget must be exactly the rows the rule puts on the tensor cores, no more, no fewer."""
    with mutated(tmp_path, MMA_P_SWAPPED):
        run, _, _, _, expect, tol, tc = KERNEL.run_unchecked(*MIXED, 90)
    out, want = run.outputs["out"].double(), expect["out"].double()
    bad = ((out - want).abs() > tol.atol + tol.rtol * want.abs()).any(-1) & expect["rows"]
    rows = lambda m: [int(i) for i in torch.nonzero(m).flatten()]  # noqa: E731
    testing.say(f"CAUGHT paged_attention control (i) the path rule: rows outside the budget with P's "
                f"registers swapped {rows(bad)}, rows the rule puts on the tensor cores "
                f"{rows(tc & expect['rows'])} {'PASS' if torch.equal(bad, tc & expect['rows']) else 'FAIL'}")
    assert torch.equal(bad, tc & expect["rows"]), (rows(bad), rows(tc))
