"""Meta tensors after a run: init_kernel + prepare_next_batch (csrc/runtime/meta.h, docs/runtime.md).

Every expected value below is worked out by hand from the rules, with the arithmetic in a
comment; nothing re-implements prepare_next_batch. The rules used:
  admission (first batch): requests r = 0, 1, ... enter slots while a slot is free and
    tokens are left; chunk = min(prompt_lengths[r] - step[r], budget left), or 1 (a decode
    token) when the prompt is already in the cache; input_tokens gets tokens[r, step .. step+chunk).
  pages: a slot holds ceil((step + chunk) / page_size) pages, taken from the free pages
    0, 1, 2, ... in order; last_page_len = (step + chunk) % page_size, or page_size when 0.
  layout: qo_indptr / paged_kv_indptr are prefix sums over the slots; unused slots repeat
    the last value and get last_page_len 0; num_new_tokens = tokens scheduled.
  finalize (the next END_OF_TASK_GRAPH): step[r] += chunk; once step >= prompt_lengths[r],
    tokens[r, step] = output_tokens[qo_indptr[slot + 1] - 1]; a request is done when
    step + 1 >= max_seq_length.
In test mode the second END_OF_TASK_GRAPH only finalizes: exactly one pass.

Run: pytest tests/runtime_python/test_mode/test_meta_tensors.py
"""
import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKRuntimeError
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)
I32, I64 = torch.int32, torch.int64
OUT = [900, 901, 902, 903, 904, 905]      # output_tokens override: shows which one is appended


def kernel(test_mode=True, meta=None, **params) -> PersistentKernel:
    """acc += one, in place: a cheap layer whose result counts the passes of the graph."""
    p = PersistentKernel.get_default_init_parameters()
    p.update(num_workers=3, num_local_schedulers=2, test_mode=test_mode)
    p.update(params)
    p["meta_tensors"] = meta or {}
    pk = PersistentKernel(**p)
    acc = pk.attach_input(torch.zeros(2, 4), name="acc")
    one = pk.attach_input(torch.ones(2, 4), name="one")
    pk.elementwise_add_layer(input_a=acc, input_b=one, output=acc, grid_dim=(2, 1, 1), block_dim=BLOCK)
    pk.compile()
    return pk


def run(**kw) -> PersistentKernel:
    pk = kernel(**kw)
    pk()
    return pk


def values(pk) -> dict:
    return {k: pk.get_tensor(k).tolist() for k in pk.meta_tensors}


def prompt_tokens(requests: int, max_seq_length: int) -> torch.Tensor:
    """tokens[r, j] = 100 * (r + 1) + j: every position distinct."""
    return torch.tensor([[100 * (r + 1) + j for j in range(max_seq_length)] for r in range(requests)],
                        dtype=I64)


def passes(pk) -> int:
    acc = pk.get_tensor("acc")
    assert torch.equal(acc, torch.full_like(acc, acc[0, 0].item())), acc
    return int(acc[0, 0].item())


# ---- defaults ----------------------------------------------------------------------------------

def test_defaults_every_param_one():
    pk = run()
    assert {k: (tuple(t.shape), t.dtype) for k, t in pk.meta_tensors.items()} == {
        "tokens": ((1, 1), I64), "step": ((1,), I32), "prompt_lengths": ((1,), I32),
        "input_tokens": ((1,), I64), "output_tokens": ((1,), I64), "num_new_tokens": ((1,), I32),
        "qo_indptr_buffer": ((2,), I32), "paged_kv_indptr_buffer": ((2,), I32),
        "paged_kv_indices_buffer": ((1,), I32), "paged_kv_last_page_len_buffer": ((1,), I32),
        "request_ids": ((1,), I32),
        "paged_kv_indices_snapshot": ((1,), I32)}      # MPK allocates it too; the runtime does not use it
    assert values(pk) == {
        "tokens": [[0]],
        "step": [1],                              # 0 + the one token of the pass (finalize)
        "prompt_lengths": [1],                    # default: max_num_batched_tokens = 1
        "input_tokens": [0],                      # tokens[0, 0]
        "output_tokens": [0],
        "num_new_tokens": [1],
        "qo_indptr_buffer": [0, 1],               # one request of one token
        "paged_kv_indptr_buffer": [0, 1],         # ceil(1 / 1) = 1 page
        "paged_kv_indices_buffer": [0],           # the first free page
        "paged_kv_last_page_len_buffer": [1],     # 1 % 1 = 0 -> page_size = 1
        "request_ids": [0],                       # slot 0 serves request 0
        "paged_kv_indices_snapshot": [0],         # allocated, untouched
    }
    assert pk.get_tensor("step") is pk.meta_tensors["step"]
    assert passes(pk) == 1
    pk.finalize()


def test_default_input_token_is_tokens_0_0():
    pk = run(meta={"tokens": torch.tensor([[7]], dtype=I64)})
    assert pk.get_tensor("input_tokens").tolist() == [7]
    # step 1 == max_seq_length 1: nothing is appended, tokens keeps its value
    assert pk.get_tensor("tokens").tolist() == [[7]] and pk.get_tensor("step").tolist() == [1]
    pk.finalize()


def test_default_prompt_length_is_max_num_batched_tokens():
    tokens = prompt_tokens(1, 5)                  # [[100, 101, 102, 103, 104]]
    pk = run(max_seq_length=5, max_num_batched_tokens=3, max_num_pages=3, meta={"tokens": tokens})
    v = values(pk)
    # default: max_num_batched_tokens
    testing.assert_equal("prompt_lengths", v["prompt_lengths"], [3])
    testing.assert_equal("input_tokens", v["input_tokens"], [100, 101, 102])   # chunk = min(3 - 0, 3) = 3
    testing.assert_equal("qo_indptr_buffer", v["qo_indptr_buffer"], [0, 3])
    # ceil(3 / 1) = 3 pages
    testing.assert_equal("paged_kv_indptr_buffer", v["paged_kv_indptr_buffer"], [0, 3])
    testing.assert_equal("paged_kv_indices_buffer", v["paged_kv_indices_buffer"], [0, 1, 2])
    testing.assert_equal("paged_kv_last_page_len_buffer", v["paged_kv_last_page_len_buffer"], [1])
    testing.assert_equal("num_new_tokens", v["num_new_tokens"], [3])
    testing.assert_equal("step", v["step"], [3])
    # step 3 >= prompt 3: tokens[0, 3] = output_tokens[qo[1] - 1 = 2] = 0 (the default output)
    assert v["tokens"] == [[100, 101, 102, 0, 104]]
    pk.finalize()


# ---- overrides: three requests -------------------------------------------------------------------

# prompt_lengths [3, 2, 4], max_seq_length 8, max_num_batched_tokens 6, max_num_pages 8.
# Admission: r0 chunk min(3, 6) = 3 (tokens left 3); r1 chunk min(2, 3) = 2 (left 1);
# r2 (if a third slot exists) chunk min(4, 1) = 1 (left 0).
# Finalize: step r0 = 3 >= 3: tokens[0, 3] = out[qo[1] - 1] = out[2] = 902;
#           step r1 = 2 >= 2: tokens[1, 2] = out[qo[2] - 1] = out[4] = 904;
#           step r2 = 1 < 4: nothing appended.
THREE_REQUESTS = {
    # (max_num_batched_requests, page_size): expected values
    (2, 2): dict(
        input_tokens=[100, 101, 102, 200, 201, 0],        # r2 not admitted (2 slots); last entry unused
        num_new_tokens=[5],
        qo_indptr_buffer=[0, 3, 5],
        paged_kv_indptr_buffer=[0, 2, 3],                 # r0 ceil(3/2) = 2 pages, r1 ceil(2/2) = 1
        paged_kv_indices_buffer=[0, 1, 2, 0, 0, 0, 0, 0],
        paged_kv_last_page_len_buffer=[1, 2],             # 3 % 2 = 1; 2 % 2 = 0 -> 2
        request_ids=[0, 1],
        step=[3, 2, 0]),
    (2, 4): dict(
        input_tokens=[100, 101, 102, 200, 201, 0],
        num_new_tokens=[5],
        qo_indptr_buffer=[0, 3, 5],
        paged_kv_indptr_buffer=[0, 1, 2],                 # ceil(3/4) = 1, ceil(2/4) = 1
        paged_kv_indices_buffer=[0, 1, 0, 0, 0, 0, 0, 0],
        paged_kv_last_page_len_buffer=[3, 2],             # 3 % 4, 2 % 4
        request_ids=[0, 1],
        step=[3, 2, 0]),
    (3, 2): dict(
        input_tokens=[100, 101, 102, 200, 201, 300],
        num_new_tokens=[6],
        qo_indptr_buffer=[0, 3, 5, 6],
        paged_kv_indptr_buffer=[0, 2, 3, 4],              # + r2 ceil(1/2) = 1 page
        paged_kv_indices_buffer=[0, 1, 2, 3, 0, 0, 0, 0],
        paged_kv_last_page_len_buffer=[1, 2, 1],          # ..., 1 % 2 = 1
        request_ids=[0, 1, 2],
        step=[3, 2, 1]),
    (3, 4): dict(
        input_tokens=[100, 101, 102, 200, 201, 300],
        num_new_tokens=[6],
        qo_indptr_buffer=[0, 3, 5, 6],
        paged_kv_indptr_buffer=[0, 1, 2, 3],
        paged_kv_indices_buffer=[0, 1, 2, 0, 0, 0, 0, 0],
        paged_kv_last_page_len_buffer=[3, 2, 1],
        request_ids=[0, 1, 2],
        step=[3, 2, 1]),
    (4, 2): dict(
        input_tokens=[100, 101, 102, 200, 201, 300],
        num_new_tokens=[6],
        qo_indptr_buffer=[0, 3, 5, 6, 6],                 # slot 3 unused: repeats 6
        paged_kv_indptr_buffer=[0, 2, 3, 4, 4],
        paged_kv_indices_buffer=[0, 1, 2, 3, 0, 0, 0, 0],
        paged_kv_last_page_len_buffer=[1, 2, 1, 0],       # unused slot: 0
        request_ids=[0, 1, 2, -1],                    # slot 3 unused: -1
        step=[3, 2, 1]),
    (4, 4): dict(
        input_tokens=[100, 101, 102, 200, 201, 300],
        num_new_tokens=[6],
        qo_indptr_buffer=[0, 3, 5, 6, 6],
        paged_kv_indptr_buffer=[0, 1, 2, 3, 3],
        paged_kv_indices_buffer=[0, 1, 2, 0, 0, 0, 0, 0],
        paged_kv_last_page_len_buffer=[3, 2, 1, 0],
        request_ids=[0, 1, 2, -1],                    # slot 3 unused: -1
        step=[3, 2, 1]),
}


@pytest.mark.parametrize("requests,page_size", sorted(THREE_REQUESTS), ids=lambda v: str(v))
def test_three_requests(requests, page_size):
    L = 8
    pk = run(max_seq_length=L, max_num_batched_tokens=6, max_num_batched_requests=requests,
             page_size=page_size, max_num_pages=8,
             meta={"tokens": prompt_tokens(3, L), "prompt_lengths": torch.tensor([3, 2, 4], dtype=I32),
                   "output_tokens": torch.tensor(OUT, dtype=I64)})
    v = values(pk)
    for key, want in THREE_REQUESTS[(requests, page_size)].items():
        testing.assert_equal(key, v[key], want)
    tokens = prompt_tokens(3, L)
    tokens[0, 3] = 902                                    # see the finalize comment above
    tokens[1, 2] = 904
    assert v["tokens"] == tokens.tolist()
    assert v["prompt_lengths"] == [3, 2, 4] and v["output_tokens"] == OUT
    assert passes(pk) == 1
    pk.finalize()


def test_prefilled_step_counts_as_cached():
    # step [2, 0, 1]: r0 has 2 tokens cached, r2 has 1. prompt_lengths [3, 2, 4], page_size 2.
    L = 8
    pk = run(max_seq_length=L, max_num_batched_tokens=6, max_num_batched_requests=3, page_size=2,
             max_num_pages=8,
             meta={"tokens": prompt_tokens(3, L), "prompt_lengths": torch.tensor([3, 2, 4], dtype=I32),
                   "step": torch.tensor([2, 0, 1], dtype=I32), "output_tokens": torch.tensor(OUT, dtype=I64)})
    v = values(pk)
    # r0: chunk min(3 - 2, 6) = 1 -> tokens[0, 2]; r1: min(2 - 0, 5) = 2 -> tokens[1, 0:2];
    # r2: min(4 - 1, 3) = 3 -> tokens[2, 1:4]
    testing.assert_equal("input_tokens", v["input_tokens"], [102, 200, 201, 301, 302, 303])
    testing.assert_equal("qo_indptr_buffer", v["qo_indptr_buffer"], [0, 1, 3, 6])
    # pages cover step + chunk: r0 ceil(3/2) = 2 -> [0, 1]; r1 ceil(2/2) = 1 -> [2];
    # r2 ceil(4/2) = 2 -> [3, 4]
    testing.assert_equal("paged_kv_indptr_buffer", v["paged_kv_indptr_buffer"], [0, 2, 3, 5])
    testing.assert_equal("paged_kv_indices_buffer", v["paged_kv_indices_buffer"], [0, 1, 2, 3, 4, 0, 0, 0])
    # (2 + 1) % 2 = 1; 2 % 2 = 0 -> 2; (1 + 3) % 2 = 0 -> 2
    testing.assert_equal("paged_kv_last_page_len_buffer", v["paged_kv_last_page_len_buffer"], [1, 2, 2])
    testing.assert_equal("num_new_tokens", v["num_new_tokens"], [6])
    testing.assert_equal("step", v["step"], [3, 2, 4])                         # 2 + 1, 0 + 2, 1 + 3
    # all three prompts complete: tokens[r, step] = out[qo[r + 1] - 1] = out[0], out[2], out[5]
    tokens = prompt_tokens(3, L)
    tokens[0, 3], tokens[1, 2], tokens[2, 4] = 900, 902, 905
    assert v["tokens"] == tokens.tolist()
    pk.finalize()


def test_one_decode_step_over_a_prefilled_cache():
    # step == prompt_lengths [3, 2, 4]: every prompt is in the cache, so each gets one decode token
    L = 8
    pk = run(max_seq_length=L, max_num_batched_tokens=6, max_num_batched_requests=3, page_size=2,
             max_num_pages=8,
             meta={"tokens": prompt_tokens(3, L), "prompt_lengths": torch.tensor([3, 2, 4], dtype=I32),
                   "step": torch.tensor([3, 2, 4], dtype=I32), "output_tokens": torch.tensor(OUT, dtype=I64)})
    v = values(pk)
    # tokens[r, step[r]]
    testing.assert_equal("input_tokens", v["input_tokens"], [103, 202, 304, 0, 0, 0])
    testing.assert_equal("qo_indptr_buffer", v["qo_indptr_buffer"], [0, 1, 2, 3])
    # ceil(4/2) = 2 -> [0, 1]; ceil(3/2) = 2 -> [2, 3]; ceil(5/2) = 3 -> [4, 5, 6]
    testing.assert_equal("paged_kv_indptr_buffer", v["paged_kv_indptr_buffer"], [0, 2, 4, 7])
    testing.assert_equal("paged_kv_indices_buffer", v["paged_kv_indices_buffer"], [0, 1, 2, 3, 4, 5, 6, 0])
    # 4 % 2 -> 2, 3 % 2, 5 % 2
    testing.assert_equal("paged_kv_last_page_len_buffer", v["paged_kv_last_page_len_buffer"], [2, 1, 1])
    testing.assert_equal("num_new_tokens", v["num_new_tokens"], [3])
    testing.assert_equal("step", v["step"], [4, 3, 5])
    tokens = prompt_tokens(3, L)
    tokens[0, 4], tokens[1, 3], tokens[2, 5] = 900, 901, 902      # out[qo[s + 1] - 1] = out[s]
    assert v["tokens"] == tokens.tolist()
    pk.finalize()


def test_prompt_lengths_override_sizes_default_tokens():
    # 3 prompt lengths, no tokens: tokens defaults to zeros of (3, max_seq_length)
    pk = run(max_seq_length=4, max_num_batched_tokens=6, max_num_batched_requests=3, max_num_pages=8,
             meta={"prompt_lengths": torch.tensor([2, 1, 3], dtype=I32),
                   "output_tokens": torch.tensor(OUT, dtype=I64)})
    v = values(pk)
    assert pk.get_tensor("tokens").shape == (3, 4) and pk.get_tensor("step").shape == (3,)
    # chunks 2, 1, 3
    testing.assert_equal("qo_indptr_buffer", v["qo_indptr_buffer"], [0, 2, 3, 6])
    # page_size 1: a page per token
    testing.assert_equal("paged_kv_indptr_buffer", v["paged_kv_indptr_buffer"], [0, 2, 3, 6])
    testing.assert_equal("paged_kv_indices_buffer", v["paged_kv_indices_buffer"], [0, 1, 2, 3, 4, 5, 0, 0])
    testing.assert_equal("paged_kv_last_page_len_buffer", v["paged_kv_last_page_len_buffer"], [1, 1, 1])
    testing.assert_equal("step", v["step"], [2, 1, 3])
    # tokens[0, 2] = out[1]; tokens[1, 1] = out[2]; tokens[2, 3] = out[5]
    assert v["tokens"] == [[0, 0, 901, 0], [0, 902, 0, 0], [0, 0, 0, 905]]
    pk.finalize()


def test_request_ids_name_the_request_not_the_slot():
    """request 0's cache is full (step == max_seq_length): it is skipped, so slot 0 serves request 1."""
    pk = run(max_seq_length=2, max_num_batched_tokens=2, max_num_batched_requests=2, max_num_pages=4,
             meta={"step": torch.tensor([2, 0], dtype=I32),
                   "prompt_lengths": torch.tensor([1, 1], dtype=I32)})
    v = values(pk)
    testing.assert_equal("request_ids", v["request_ids"], [1, -1])
    testing.assert_equal("qo_indptr_buffer", v["qo_indptr_buffer"], [0, 1, 1])
    pk.finalize()


# ---- failures ----------------------------------------------------------------------------------

def test_first_batch_with_no_token_is_an_error():
    # step 2 == max_seq_length 2: the cache is full, the request is skipped, nothing is scheduled
    pk = kernel(max_seq_length=2, meta={"step": torch.tensor([2], dtype=I32)})
    with pytest.raises(MPKRuntimeError) as e:
        pk()
    msg = str(e.value)
    assert "the first prepare_next_batch scheduled no token: total_num_requests=1, prompt_lengths=[1], " \
           "step=[2], max_num_batched_tokens=1, max_num_batched_requests=1, max_seq_length=2" in msg, msg
    assert msg.endswith("hint: every request has step == max_seq_length (cache full)"), msg
    assert passes(pk) == 0                                # not even a zero-pass "success"
    pk.finalize()


def test_too_few_pages_is_an_error():
    # page_size 2 and chunks 3, 2, 1 need 2 + 1 + 1 = 4 pages; there are 3
    pk = kernel(max_seq_length=8, max_num_batched_tokens=6, max_num_batched_requests=3, page_size=2,
                max_num_pages=3, meta={"prompt_lengths": torch.tensor([3, 2, 4], dtype=I32)})
    with pytest.raises(MPKRuntimeError) as e:
        pk()
    assert ("request 2 needs 1 KV pages (1 tokens, page_size 2) but no free page is left: max_num_pages = 3; "
            "hint: raise max_num_pages") in str(e.value)
    pk.finalize()


def test_test_mode_runs_exactly_one_pass():
    # the same requests outside test mode take 5 passes (below); test mode stops after one
    L = 6
    pk = run(max_seq_length=L, max_num_batched_tokens=6, max_num_batched_requests=2, page_size=2,
             max_num_pages=6, meta={"prompt_lengths": torch.tensor([3, 2, 4], dtype=I32)})
    assert passes(pk) == 1
    assert pk._runtime.lib.mpk_iterations(pk._runtime.handle) == 1
    assert set(pk._runtime.task_progress()[1:]) == {1}   # every task ran in iteration 1 only
    pk.finalize()


def test_test_mode_relaunch_starts_from_the_same_meta_tensors():
    # the first pass advanced step to [3, 2, 4] and appended tokens; a second pk() must start
    # again from step [2, 0, 1] and the original tokens, so it lays out the same batch
    L = 8
    step = torch.tensor([2, 0, 1], dtype=I32)
    pk = run(max_seq_length=L, max_num_batched_tokens=6, max_num_batched_requests=3, page_size=2,
             max_num_pages=8,
             meta={"tokens": prompt_tokens(3, L), "prompt_lengths": torch.tensor([3, 2, 4], dtype=I32),
                   "step": step, "output_tokens": torch.tensor(OUT, dtype=I64)})
    first = values(pk)
    assert first["step"] == [3, 2, 4]
    pk()
    assert values(pk) == first
    assert passes(pk) == 2                                # one more pass, not zero and not several
    pk.finalize()


# ---- outside test mode: the offline decode loop ---------------------------------------------------

@pytest.mark.parametrize("output_tokens", [None, OUT], ids=["zero_outputs", "distinct_outputs"])
def test_offline_run_until_every_request_is_done(output_tokens):
    # prompt_lengths [3, 2, 4], max_seq_length 6, budget 6 tokens, 2 slots, page_size 2, 6 pages.
    # A request is done when step + 1 >= 6, i.e. at step 5.
    # pass 1: r0 3 tokens, r1 2 tokens (2 slots full)   qo [0, 3, 5]
    #   -> r0 step 3: tokens[0, 3] = out[2]; r1 step 2: tokens[1, 2] = out[4]
    # pass 2: r0 1, r1 1 (decode)                        qo [0, 1, 2]
    #   -> r0 step 4: tokens[0, 4] = out[0]; r1 step 3: tokens[1, 3] = out[1]
    # pass 3: r0 1, r1 1                                 qo [0, 1, 2]
    #   -> r0 step 5: tokens[0, 5] = out[0], done; r1 step 4: tokens[1, 4] = out[1]
    # pass 4: r1 1 (slot 0), r2 admitted with min(4, 5) = 4   qo [0, 1, 5]
    #   -> r1 step 5: tokens[1, 5] = out[0], done; r2 step 4: tokens[2, 4] = out[4]
    # pass 5: r2 1                                       qo [0, 1, 1]
    #   -> r2 step 5: tokens[2, 5] = out[0], done; nothing left: terminate
    L = 6
    meta = {"tokens": prompt_tokens(3, L), "prompt_lengths": torch.tensor([3, 2, 4], dtype=I32)}
    if output_tokens is not None:
        meta["output_tokens"] = torch.tensor(output_tokens, dtype=I64)
    out = output_tokens or [0] * 6
    pk = run(test_mode=False, max_seq_length=L, max_num_batched_tokens=6, max_num_batched_requests=2,
             page_size=2, max_num_pages=6, meta=meta)
    assert passes(pk) == 5
    v = values(pk)
    testing.assert_equal("step", v["step"], [5, 5, 5])
    assert v["tokens"] == [[100, 101, 102, out[2], out[0], out[0]],
                           [200, 201, out[4], out[1], out[1], out[0]],
                           [300, 301, 302, 303, out[4], out[0]]]
    # the last preparation scheduled nothing: an empty layout
    assert v["qo_indptr_buffer"] == [0, 0, 0] and v["paged_kv_indptr_buffer"] == [0, 0, 0]
    assert v["paged_kv_last_page_len_buffer"] == [0, 0] and v["num_new_tokens"] == [0]
    assert v["request_ids"] == [-1, -1]
    pk.finalize()
