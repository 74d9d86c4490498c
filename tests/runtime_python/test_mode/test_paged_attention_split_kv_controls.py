"""Negative controls of the split-KV attention layers' tests: a kernel with one of three bugs fails them, with
its message; the unmutated kernels pass the same cases (their own tests).

Each control builds against a copy of the kernel sources with ONE exact string replacement
(testing.mutated_kernel: found exactly once, or the control fails, so a rewritten kernel must update it):

  (a) the merge forgets to subtract the max lse before exp2 (w = exp2(l), not exp2(l - m)): on what the split
      makes of a real batch (the merge's split_inputs case: logits beyond exp2f's range, every row with keys,
      as the split always gives) the weights overflow to inf, and the comparison fails naming the NaN. (The
      control it replaces removed the skip of a -inf chunk, which only a row whose every chunk is -inf needs:
      an input the split cannot make.);
  (b) a split task reads keys beyond its chunk (its key range's end one chunk further): those slots are
      outside the task's live input (the next chunk's cached tokens, or new tokens its own chunk does not
      store), which the kernel-level run poisons, so it names the read outside its declared input;
  (c) a split task stores every new token's K/V, not only its chunk's: the chunks' tasks of one request then
      write the same slots (a race on a GPU); the kernel-level run names the write outside its live output.

Run: pytest -s tests/runtime_python/test_mode/test_paged_attention_split_kv_controls.py
"""
import os

import pytest

from mirage.mpk import testing
from mirage.mpk.errors import MPKFootprintError

HERE = os.path.dirname(os.path.abspath(__file__))
SPLIT = testing.load_reference(os.path.join(HERE, "..", "paged_attention_split_kv", "x.py"),
                               name="test_paged_attention_split_kv")
MERGE = testing.load_reference(os.path.join(HERE, "..", "paged_attention_split_kv_merge", "x.py"),
                               name="test_paged_attention_split_kv_merge")

pytestmark = pytest.mark.skipif(os.environ.get("MPK_TEST_DEVICE", "cpu") != "cpu",
                                reason="the messages asserted are the CPU emulation's")

NO_MAX = ("const float w = exp2f(l - m);", "const float w = exp2f(l);")
READ_PAST_CHUNK = ("const int64_t keys_hi = hi;", "const int64_t keys_hi = hi + (hi - lo);")  # both paths
STORE_ALL = ("attn_store_kv<T, NV>(v, q, o, s_lo, s_hi)", "attn_store_kv<T, NV>(v, q, o, start, q.seq_len)")
# S = 20 in chunks of 16, GQA 4, norm + RoPE: chunk 0's tokens at positions 16..19 would read chunk 1's keys
CASE = SPLIT.CASES[0]


def caught(control: str, e: BaseException) -> str:
    msg = str(e)
    testing.say(f"CAUGHT paged_attention_split_kv control {control}: {msg.splitlines()[0]}")
    return msg


def test_a_merge_without_the_max_subtraction_fails_on_the_splits_outputs(tmp_path):
    with testing.mutated_kernel(tmp_path, "paged_attention_split_kv_merge.cuh", *NO_MAX):
        with pytest.raises(AssertionError) as e:
            MERGE.run_merge_of_split(*MERGE.SPLIT_CASE)
    msg = caught("(a)", e.value)
    assert "is not close" in msg and "actual nan" in msg and "NaN:" in msg, msg


def test_b_split_reading_keys_beyond_its_chunk_is_named(tmp_path):
    with testing.mutated_kernel(tmp_path, "paged_attention_split_kv.cuh", *READ_PAST_CHUNK):
        with pytest.raises(MPKFootprintError) as e:
            SPLIT.run_split(*CASE)
    msg = caught("(b)", e.value)
    assert "reads outside its declared input tiles" in msg and "paged_attention_split_kv_0" in msg, msg
    assert "tensor 'kc'" in msg or "tensor 'vc'" in msg, msg


def test_c_split_storing_other_chunks_tokens_is_named(tmp_path):
    with testing.mutated_kernel(tmp_path, "paged_attention_split_kv.cuh", *STORE_ALL):
        with pytest.raises(MPKFootprintError) as e:
            SPLIT.run_split(*CASE)
    msg = caught("(c)", e.value)
    assert "writes outside its declared output tiles" in msg and "tensor 'kc'" in msg, msg
