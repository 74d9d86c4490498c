"""The decode workflow outside test mode (mirage.mpk.models.qwen3.generate) against Hugging Face generate.

The model: test_qwen3_decoder.py's seeded 2-layer fp32 transformers.Qwen3ForCausalLM (4 query heads over 2
KV heads, head_dim 64, q/k norm, RoPE, untied LM head, vocab 256). 3 requests with prompts of 5, 3 and 8
seeded random tokens, pages of 4 (prompts and decoding cross page boundaries: positions 4, 8, 12), 6 new
tokens asked, so max_seq_length = 8 + 6 = 14. One pk() (test_mode=False) runs the runtime's offline loop
until every request ends. Per case:
  1. every token the kernel appended to `tokens` equals hf_model.generate(do_sample=False) on that prompt
     alone (no padding), for every request and step: a request ends at step + 1 >= max_seq_length, so the
     shorter prompts decode past max_new_tokens (14 - 3 = 11 tokens for the 3-token prompt), and all of them
     are compared; generated() returns each request's first max_new_tokens;
  2. `step`, `tokens` and the requests' ends as docs/runtime.md ("Meta tensors") specifies: step[r] is the
     step of the request's last token (max_seq_length - 1, or where it emitted EOS); tokens[r] is the prompt,
     then the emitted tokens up to step[r], then the zero padding untouched; the last preparation scheduled
     nothing (qo indptr 0, num_new_tokens 0, request_ids -1); the number of passes is the one the documented
     admission rule gives (a Python model of it below, `schedule`);
  3. cases: every request in its own slot (`all_slots`, and qwen3.generate itself, the public call); 2 slots
     for 3 requests (`fewer_slots`: request 2 is admitted when request 1 ends); a batch of 4 tokens
     (`chunked`: the 5- and 8-token prompts are prefilled in chunks across passes, next to a decoding
     request); `eos`: eos_token_id set to a token HF emits mid-way for request 0, every request ends at its
     first EOS (HF run with the same eos_token_id).
  4. sampling (sampling_seed: sampling_sm100 draws instead of argmax; the LM head scaled x10 so the draws
     depend on the logits): runs with one seed and different slots, chunking and jitter leave the same
     tokens bit for bit, and every drawn token is the Gumbel-max draw of HF's own logits (teacher-forced on
     the kernel's sequence) under the layer's published generator; controls: another seed, and a reference
     that ignores the logits, reject the run's tokens.
Schedule jitter (random task-to-worker placement and delays) is on in every case.

Run: python tests/runtime_python/test_mode/test_qwen3_generate.py   (or pytest this file)
"""
import copy
import os
import sys
import time

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.models import qwen3

transformers = pytest.importorskip("transformers")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_qwen3_decoder import hf_model  # noqa: E402  (the same seeded model)

PROMPTS, NEW, PAGE = (5, 3, 8), 6, 4
L = max(PROMPTS) + NEW          # generate's default max_seq_length
# name: kernel params beyond generate's defaults (slots = 3, a batch of 16 tokens, 3 x ceil(14 / 4) pages)
CASES = {"all_slots": {}, "fewer_slots": {"max_num_batched_requests": 2},
         "chunked": {"max_num_batched_requests": 2, "max_num_batched_tokens": 4}, "eos": {}}


@pytest.fixture(scope="module")
def model():
    return hf_model(torch.float32)


def prompts():
    gen = testing.generator(offset=2102)
    return [torch.randint(0, 256, (n,), generator=gen).tolist() for n in PROMPTS]


def hf_stream(model, prompt, n, eos=None):
    """HF greedy decode of one prompt alone: up to n new tokens, stopping after eos when given."""
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False, eos_token_id=eos,
                             pad_token_id=0, attention_mask=torch.ones(1, len(prompt), dtype=torch.long))
    return out[0, len(prompt):].tolist()


def schedule(lens, ends, budget, slots):
    """docs/runtime.md's offline rule (prepare_next_batch), in Python: each active request gets its next
    prefill chunk or one decode token (one token kept for every later active slot), then new requests are
    admitted while a slot and a token are left; a request ends once step reaches ends[r]. Returns (passes,
    the pass each request was admitted in)."""
    step, active, admitted, nxt, passes = [0] * len(lens), [], {}, 0, 0
    while True:
        batch, cursor = [], 0
        for i, r in enumerate(active):
            left, rest = budget - cursor - (len(active) - i - 1), lens[r] - step[r]
            batch.append((r, min(rest, left) if rest > 0 else 1))
            cursor += batch[-1][1]
        while nxt < len(lens) and len(batch) < slots and cursor < budget:
            admitted[nxt] = passes
            batch.append((nxt, min(lens[nxt], budget - cursor)))
            cursor, nxt = cursor + batch[-1][1], nxt + 1
        if cursor == 0:
            return passes, admitted
        passes += 1
        for r, c in batch:
            step[r] += c
        active = [r for r, _ in batch if step[r] < ends[r]]


def check_case(model, case, tmp_path=None):
    t0 = time.perf_counter()
    ps, kp = prompts(), dict(CASES[case])
    lens = [len(p) for p in ps]
    # each request's whole stream to max_seq_length, from HF
    full = [hf_stream(model, p, L - n) for p, n in zip(ps, lens)]
    eos = None
    if case == "eos":       # request 0's third token (not emitted before it): request 0 stops there
        eos = next(t for k, t in enumerate(full[0]) if k >= 2 and t not in full[0][:k])
        kp["eos_token_id"] = eos
        full = [hf_stream(model, p, L - n, eos) for p, n in zip(ps, lens)]
    ends = [n + len(s) - 1 for n, s in zip(lens, full)]      # step of each request's last token
    t1 = time.perf_counter()
    pk = qwen3.decode_kernel(model, ps, NEW, output_dir=tmp_path, page_size=PAGE, schedule_jitter=21, **kp)
    p = pk.params
    label = (f"qwen3_generate[{case},fp32,prompts={list(PROMPTS)},max_new_tokens={NEW},"
             f"L={p['max_seq_length']},page={p['page_size']},slots={p['max_num_batched_requests']},"
             f"batch={p['max_num_batched_tokens']},eos={p['eos_token_id']}]")
    assert p["max_seq_length"] == L and not pk.test_mode
    t2 = time.perf_counter()
    pk()
    t3 = time.perf_counter()
    got = qwen3.generated(pk, ps, NEW)
    tokens, step = pk.get_tensor("tokens"), pk.get_tensor("step")
    compared = 0
    for r, (prompt, stream) in enumerate(zip(ps, full)):
        testing.assert_equal(f"{label}.tokens[{r}, {lens[r]}:{ends[r] + 1}] vs HF generate",
                             tokens[r, lens[r]:ends[r] + 1], stream)
        compared += len(stream)
        testing.assert_equal(f"{label}.tokens[{r}, :{lens[r]}] (the prompt)", tokens[r, :lens[r]], prompt)
        testing.assert_equal(f"{label}.tokens[{r}, {ends[r] + 1}:] (untouched padding)",
                             tokens[r, ends[r] + 1:], torch.zeros(L - ends[r] - 1, dtype=torch.int64))
        assert got[r] == stream[:NEW], (r, got[r], stream)
        if eos is None:
            assert len(got[r]) == NEW
    testing.assert_equal(f"{label}.step (each request's last step)", step, ends)
    passes, admitted = schedule(lens, ends, p["max_num_batched_tokens"], p["max_num_batched_requests"])
    assert pk.passes == passes, (pk.passes, passes)
    for k in ("qo_indptr_buffer", "paged_kv_indptr_buffer", "num_new_tokens"):
        assert not pk.get_tensor(k).any(), (k, pk.get_tensor(k))
    assert (pk.get_tensor("request_ids") == -1).all()
    if case == "fewer_slots":
        assert admitted[2] > 0, admitted
    if case == "chunked":
        assert max(lens) > p["max_num_batched_tokens"]
    if case == "eos":
        assert ends[0] < L - 1 and full[0][-1] == eos, (ends, full[0])
    testing.say(f"TOKENS {label}: {compared} generated tokens equal HF generate's ({[len(s) for s in full]} "
                f"per request), ends at steps {ends}, {pk.passes} passes, admitted in passes "
                f"{[admitted[r] for r in range(len(ps))]} PASS")
    pk.finalize()
    testing.say(f"TIMING {label}: HF {t1 - t0:.1f} s, build+compile {t2 - t1:.1f} s, pk() {t3 - t2:.2f} s")
    return got


@pytest.mark.parametrize("case", list(CASES))
def test_qwen3_generate_matches_hf(model, case, tmp_path):
    check_case(model, case, str(tmp_path))


def test_generate_is_the_public_call(model):
    """qwen3.generate itself (its own defaults: pages of 16, one slot per request): each request's
    max_new_tokens tokens equal HF generate's."""
    ps = prompts()
    got = qwen3.generate(model, ps, NEW, schedule_jitter=3)
    want = [hf_stream(model, p, NEW) for p in ps]
    assert got == want, (got, want)
    testing.say(f"TOKENS qwen3.generate(prompts={list(PROMPTS)}, max_new_tokens={NEW}): "
                f"{sum(map(len, got))} tokens equal HF generate's PASS")


# the new K stored into the cache roped at its index in the batch's chunk (i) instead of its absolute
# position (pos): the same in a prefill from step 0, wrong for every decode token after it
ROPE_AT_CHUNK_INDEX = ("o.cos ? o.cos + pos * o.cos_stride : nullptr,\n                               "
                       "o.sin ? o.sin + pos * o.sin_stride")


def test_decode_rope_at_the_wrong_position_is_caught(model, tmp_path):
    """Negative control: paged attention's stored keys roped at the chunk index, not the position (a bug
    only decoding shows): each request's first token (the prefill's) still equals HF's, the decoded ones
    do not all."""
    ps = prompts()
    with testing.mutated_kernel(tmp_path, "paged_attention.cuh", ROPE_AT_CHUNK_INDEX,
                                ROPE_AT_CHUNK_INDEX.replace("pos *", "i *")):
        got = qwen3.generate(model, ps, NEW, page_size=PAGE)
    want = [hf_stream(model, p, NEW) for p in ps]
    assert [g[0] for g in got] == [w[0] for w in want], (got, want)
    wrong = sum(a != b for g, w in zip(got, want) for a, b in zip(g[1:], w[1:]))
    assert wrong > 0, (got, want)
    testing.say(f"CAUGHT decode RoPE at the chunk index: first tokens equal HF's, {wrong} of "
                f"{len(ps) * (NEW - 1)} decoded tokens differ: {got} vs HF {want}")


SAMPLING = testing.load_reference(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                               "sampling_sm100", "x.py"))
SEED = 20261201
# name: (kernel params beyond generate's defaults, schedule jitter) of each sampled run; the same seed in all
SAMPLED_RUNS = {"all_slots": ({}, 5), "all_slots_again": ({}, 9), "chunked": (CASES["chunked"], 17)}


SHARP = 10.0     # the test model's logits have a spread of about 0.2: scaled so the draw depends on them


def sharpened(model):
    """A copy with its LM head scaled: logits x SHARP (temperature 1 / SHARP)."""
    m = copy.deepcopy(model)
    with torch.no_grad():
        m.lm_head.weight.mul_(SHARP)
    return m


def sampled_run(model, ps, seed, kp, jitter, tmp_path):
    pk = qwen3.decode_kernel(model, ps, NEW, output_dir=tmp_path, page_size=PAGE, schedule_jitter=jitter,
                             sampling_seed=seed, **kp)
    assert any(lay.kind == "sampling_sm100" for lay in pk.layers) and not pk.test_mode
    pk()
    got = pk.get_tensor("tokens").clone(), pk.get_tensor("step").clone()
    pk.finalize()
    return got


@torch.no_grad()
def hf_logits_on(model, ps, tokens, step):
    """Per request r, teacher-forced on the kernel's own sequence (one HF forward each): (the ids it drew
    [n, 1], HF's fp32 logits at the positions q they were drawn from [n, vocab], q = len(prompt) - 1 ..
    step[r] - 1)."""
    rows = []
    for r, prompt in enumerate(ps):
        seq = tokens[r, :int(step[r]) + 1]
        q = torch.arange(len(prompt) - 1, int(step[r]))
        rows.append((seq[q + 1].view(-1, 1), model(input_ids=seq[None], use_cache=False).logits[0, q], q))
    return rows


def gumbel_max(rows, seed, logits_of=lambda x: x):
    """The Gumbel-max draw of each row's logits_of(logits) under (seed, request r, position q)
    (tests/runtime_python/sampling_sm100/pytorch_reference.py: Philox4x32-10 and the transform in float64,
    near-ties within its GAP accept either id). Returns (kernel ids, expected ids, near-tie count)."""
    want, near = [], 0
    for r, (ids, logits, q) in enumerate(rows):
        w, n = SAMPLING.expected(ids, logits_of(logits), seed, [r] * len(q), q)
        want, near = want + [w], near + n
    return torch.cat([ids for ids, _, _ in rows]), torch.cat(want), near


def gumbel_max_of_hf(model, ps, tokens, step, seed):
    return gumbel_max(hf_logits_on(model, ps, tokens, step), seed)


def test_sampled_decode_reproduces_bit_for_bit_and_draws_gumbel_max_of_hf_logits(model, tmp_path):
    """generate with sampling_seed (sampling_sm100 as the draw): (1) three runs with one seed (two jitters;
    2 slots and a batch of 4 tokens, so the prompts are chunked and the requests share passes differently)
    leave the same `tokens` and `step` bit for bit: a draw depends on (seed, request, position, token id)
    only; (2) every sampled token (all requests, all steps) is the Gumbel-max draw of HF's own logits on
    the kernel's sequence with the layer's published generator; (3) controls: another seed draws other
    tokens, and the reference under that other seed rejects the first run's tokens; the draws are not the
    greedy ones."""
    ps, model = prompts(), sharpened(model)
    runs = {k: sampled_run(model, ps, SEED, kp, j, str(tmp_path)) for k, (kp, j) in SAMPLED_RUNS.items()}
    tokens, step = runs["all_slots"]
    for k, (tk, st) in runs.items():
        testing.assert_equal(f"qwen3_sampled[{k}].tokens vs all_slots (seed {SEED})", tk, tokens)
        testing.assert_equal(f"qwen3_sampled[{k}].step vs all_slots (seed {SEED})", st, step)
    testing.assert_equal("qwen3_sampled.step (every request to max_seq_length - 1)", step, [L - 1] * len(ps))
    rows = hf_logits_on(model, ps, tokens, step)
    got, want, near = gumbel_max(rows, SEED)
    testing.assert_equal(f"qwen3_sampled[seed={SEED}]: {got.numel()} drawn tokens vs Gumbel-max of HF logits "
                         f"({near} near-ties)", got, want)
    # the draws follow the logits (some are the argmax, not all): HF's argmax on the same prefixes
    argmax = torch.cat([logits.argmax(-1) for _, logits, _ in rows])
    greedy = int((argmax == got.view(-1)).sum())
    assert 0 < greedy < got.numel(), (greedy, got.numel())
    other, _ = sampled_run(model, ps, SEED + 1, {}, 5, str(tmp_path))
    moved = int((other != tokens).sum())
    # a sampler that ignored its logits draws the noise's argmax: every logit 0
    controls = (("another seed", SEED + 1, lambda x: x), ("logits ignored", SEED, torch.zeros_like))
    rejected = {what: int((gumbel_max(rows, seed, logits_of)[1] != got).sum())
                for what, seed, logits_of in controls}
    assert moved > 0 and min(rejected.values()) > got.numel() // 4, (moved, rejected)
    label = f"qwen3_sampled[seed={SEED},prompts={list(PROMPTS)},L={L},page={PAGE},logits x{SHARP}]"
    testing.say(f"TOKENS {label}: "
                f"{len(runs)} runs (slots/batch/jitter {[(kp, j) for kp, j in SAMPLED_RUNS.values()]}) "
                f"identical bit for bit; {got.numel()} drawn tokens equal the Gumbel-max of HF's logits "
                f"({near} near-ties); {greedy} of them are the argmax PASS")
    testing.say(f"CAUGHT {label}: seed {SEED + 1} moves {moved} tokens; of the seed-{SEED} run's "
                f"{got.numel()} tokens the reference rejects {rejected}")


def test_generate_one_new_token(model):
    """max_new_tokens=1: max_seq_length is the longest prompt + 1, so that request ends right after its
    prefill (step + 1 >= max_seq_length); each request's one token is HF's first."""
    ps = prompts()
    got = qwen3.generate(model, ps, 1, page_size=PAGE)
    assert got == [hf_stream(model, p, 1) for p in ps], got
    testing.say(f"TOKENS qwen3.generate(max_new_tokens=1): {got} equal HF generate's PASS")


def test_generate_refuses_empty_prompts(model):
    with pytest.raises(ValueError, match="prompts of at least 1 token"):
        qwen3.generate(model, [[1, 2], []], 2)


if __name__ == "__main__":
    m = hf_model(torch.float32)
    for c in CASES:
        check_case(m, c)
    test_generate_is_the_public_call(m)
    print("All Qwen3 generate cases PASS")
    sys.exit(0)
