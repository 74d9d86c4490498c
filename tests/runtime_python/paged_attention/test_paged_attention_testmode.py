"""paged_attention_layer in test mode: real generated code, several workers, schedule jitter, its batch laid
out by init_kernel + prepare_next_batch from the meta tensors, as in production.

Each case overrides `tokens`, `prompt_lengths` and `step` (meta_tensors, seed 003's multi-request pattern;
step[r] tokens of request r are already in its cache). prepare_next_batch admits the requests in order,
each with prompt - step new
tokens (one when the prompt is done: a decode step), in pages taken from a fresh free list in order; the
test writes that layout down by hand (`layout`) and checks the meta tensors against it exactly, so the
reference walks the pages the kernel was told about. Before the run, every cache slot that holds no cached
token (the pages no request owns, a last page's tail, the new tokens' slots) holds noise of std 100 (the
kernel-level test uses NaN; noise keeps the ranks' cache shards distinct where no token is cached yet):
a read of any of them moves the output far outside its budget. After it: the output's rows of the batch
against the page-walking reference
(tol_attention), the rows past the batch still test mode's poison (no task wrote them), the new slots' K
(tol_qk_norm_rope) and V (bit for bit), and every other cache slot unchanged.

Run: python tests/runtime_python/paged_attention/test_paged_attention_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/paged_attention/test_paged_attention_testmode.py   (one 4-rank
     job: TP "heads", rank r runs its KV heads with their query groups; a case whose KV heads do not split
     across the ranks is skipped on every rank)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.paged_attention import tensor_core_rows
from mirage.mpk.persistent_kernel import PersistentKernel
from mirage.mpk.poisons import is_poison

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
NORM, ROPE = 1, 2
BITS = {2: torch.int16, 4: torch.int32}
# (q heads, KV heads, head_dim, page_size, prompt_lengths, step, options, max_seq_length,
#  max_num_batched_tokens, max_num_batched_requests)
CASES = [
    (8, 4, 64, 16, (16, 8, 32, 4), (0, 0, 0, 0), NORM | ROPE, 40, 64, 4),   # four prefills, 60 of 64 tokens
    (8, 2, 128, 16, (40, 21), (39, 20), NORM | ROPE, 48, 4, 2),             # a decode step over cached tokens
    (4, 4, 64, 1, (7, 30), (0, 29), ROPE, 32, 8, 3),                        # prefill + decode; pages of 1
    (16, 2, 64, 64, (70, 9), (66, 0), NORM, 80, 16, 2),                     # GQA 8, pages of 64, no RoPE
]


def layout(prompts, steps, page_size, slots, num_pages) -> dict:
    """The batch the first prepare_next_batch lays out when every request fits (the cases do): slot r is
    request r with prompt - step new tokens (1 when step == prompt), pages in order from a fresh free list."""
    new = [p - s if p > s else 1 for p, s in zip(prompts, steps)]
    meta = ref.batch_meta(new, list(steps), page_size, num_pages, slots, None, permute=False)
    meta["num_new_tokens"] = torch.tensor([sum(new)], dtype=torch.int32)
    return meta


def run_case(dtype, hq, hkv, d, ps, prompts, steps, opts, max_seq, batch, slots, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    if hkv % world.size:
        raise testing.CaseSkipped(f"{hkv} KV heads do not split across {world.size} ranks")
    key = CASES.index((hq, hkv, d, ps, prompts, steps, opts, max_seq, batch, slots))
    gen = testing.generator(offset=1000 * key + d)
    pages = sum(-(-(max(p - s, 1) + s) // ps) for p, s in zip(prompts, steps)) + 2    # two no request owns
    expect_meta = layout(prompts, steps, ps, slots, pages)
    qkv = testing.randn((batch, (hq + 2 * hkv) * d), dtype, gen)
    k_cache, v_cache = (ref.poison_outside(testing.randn((pages, ps, hkv, d), dtype, gen), expect_meta, gen,
                                           nan=False) for _ in range(2))
    norms = [testing.randn((d,), dtype, gen, scale=0.5) + 1.0 if opts & NORM else None for _ in range(2)]
    cos, sin = ref.rope_tables(max_seq, d, dtype) if opts & ROPE else (None, None)
    i32 = dict(dtype=torch.int32)
    meta = {"tokens": torch.randint(0, 1000, (len(prompts), max_seq), generator=gen, dtype=torch.int64),
            "prompt_lengths": torch.tensor(prompts, **i32), "step": torch.tensor(steps, **i32)}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=jitter, max_seq_length=max_seq, max_num_batched_tokens=batch,
        max_num_batched_requests=slots, max_num_pages=pages, page_size=ps, meta_tensors=meta, **world.params))
    local = {"qkv": world.shard("input", qkv), "k": world.shard("k_cache", k_cache),
             "v": world.shard("v_cache", v_cache)}
    before = {k: v.clone() for k, v in local.items()}
    out = torch.zeros(batch, hq * d // world.size, dtype=dtype)
    dt = {n: pk.attach_input(t, name=n) for n, t in (("qkv", local["qkv"]), ("k_cache", local["k"]),
                                                     ("v_cache", local["v"]), ("attn_out", out))}
    opt = {n: pk.attach_input(t, name=n) if t is not None else None
           for n, t in (("q_norm", norms[0]), ("k_norm", norms[1]), ("cos", cos), ("sin", sin))}
    pk.paged_attention_layer(input=dt["qkv"], k_cache=dt["k_cache"], v_cache=dt["v_cache"],
                             q_norm=opt["q_norm"], k_norm=opt["k_norm"], cos_pos_embed=opt["cos"],
                             sin_pos_embed=opt["sin"], output=dt["attn_out"],
                             grid_dim=(slots, hkv // world.size, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = (f"paged_attention[{str(dtype)[6:]},{hq}q{hkv}kv,d={d},ps={ps},prompts={list(prompts)},"
            f"step={list(steps)},opts={opts}{world.tag}]")
    for k in ("qo_indptr_buffer", "paged_kv_indptr_buffer", "paged_kv_last_page_len_buffer",
              "num_new_tokens"):
        testing.assert_equal(f"{name}.{k}", pk.get_tensor(k), expect_meta[k])
    n_pages = int(expect_meta["paged_kv_indptr_buffer"][-1])
    testing.assert_equal(f"{name}.paged_kv_indices_buffer[:{n_pages}]",
                         pk.get_tensor("paged_kv_indices_buffer")[:n_pages],
                         expect_meta["paged_kv_indices_buffer"][:n_pages])
    full = ref.attention(qkv, k_cache, v_cache, expect_meta, hq, *norms, cos, sin)
    expected, rows = world.shard("output", full["out"]), int(expect_meta["num_new_tokens"])
    lo, hi = world.part(hq * d) if world.size > 1 else (0, hq * d)
    scales = [full[k][:, lo:hi] for k in ("value_scale", "score_scale", "score_var")]
    tc = tensor_core_rows(dtype, expect_meta["qo_indptr_buffer"], hq // hkv, scales[0].shape[0])
    tol = testing.tol_attention(dtype, d, full["keys"], *scales, tensor_cores=tc[:, None])
    # rows past the batch: nothing writes them (they keep test mode's NaN poison, checked below)
    testing.assert_close(name, out, torch.cat([expected[:rows], torch.full_like(expected[rows:], torch.nan)]),
                         tol, pk=pk)
    testing.check_nonvacuous(name, out[:rows], pk.layers[0].checks, reference=expected[:rows])
    untouched = is_poison(out[rows:].view(BITS[out.element_size()]), out.dtype)
    assert bool(untouched.all()), f"{name}: rows {rows}.. of the output (past the batch) were written"
    testing.say(f"UNTOUCHED {name} output rows {rows}..{batch - 1}: still test mode's poison PASS")
    check_cache(name, local, before, expect_meta, hq // world.size, full, world, d, dtype)
    return pk


def check_cache(name, local, before, meta, hq_local, full, world, d, dtype):
    """The new slots: K within tol_qk_norm_rope, V bit for bit; every other slot as it was (NaN bits too)."""
    hkv_local = local["k"].shape[2]
    h0 = world.rank * hkv_local if world.size > 1 else 0
    new = [(r, pos, k[:, h0:h0 + hkv_local], v[:, h0:h0 + hkv_local], s[:, h0:h0 + hkv_local])
           for r, pos, k, v, s in full["new"]]
    kc, vc, k_scale, written = ref.write_cache(before["k"], before["v"], meta, new)
    testing.assert_close(f"{name}.k_cache[new slots]", local["k"][written], kc[written],
                         testing.tol_qk_norm_rope(dtype, d, k_scale[written]))
    testing.assert_equal(f"{name}.v_cache[new slots]", local["v"][written], vc[written].to(dtype))
    for role in ("k", "v"):
        same = torch.equal(local[role][~written].view(torch.uint8), before[role][~written].view(torch.uint8))
        assert same, f"{name}: the {role} cache changed outside the new tokens' slots"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}q{c[1]}kv-d{c[2]}-ps{c[3]}-{len(c[4])}req-opts{c[6]}"
                                             for c in CASES])
def test_paged_attention(dtype, case):
    run_case(dtype, *case, jitter=case[4][0])


# A user's override that production refuses (init_kernel / prepare_next_batch / the meta tensors' own
# checks): refused here too, before any attention task runs; values out of bounds before the launch
# (mirage/mpk/meta.py), as ValueError naming the entry. (change to CASES[1]'s parameters, message)
WRONG_OVERRIDES = [
    (dict(prompts=(40, 0)), r"meta tensor 'prompt_lengths'\[1\] = 0 < 1 \(a prompt has at least one token\)"),
    (dict(steps=(39, 60)), r"meta tensor 'step'\[1\] = 60 > max_seq_length \(48\)"),
    (dict(pages=3), r"prepare_next_batch: request 1 needs 2 KV pages .* no free page is left: max_num_pages"),
    (dict(step_dtype=torch.int64), r"meta tensor 'step' has dtype torch.int64, expected torch.int32"),
]


@pytest.mark.parametrize("change,message", WRONG_OVERRIDES,
                         ids=["prompt0", "step_past_end", "pages", "dtype"])
def test_paged_attention_wrong_meta_override_fails_loudly(change, message):
    hq, hkv, d, ps, prompts, steps, opts, max_seq, batch, slots = CASES[1]
    prompts, steps = change.get("prompts", prompts), change.get("steps", steps)
    meta = {"prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
            "step": torch.tensor(steps, dtype=change.get("step_dtype", torch.int32))}
    pages = change.get("pages", 8)
    gen = testing.generator(offset=3)
    with pytest.raises(Exception, match=message):
        pk = PersistentKernel(**testing.cpu_config(
            max_seq_length=max_seq, max_num_batched_tokens=batch, max_num_batched_requests=slots,
            max_num_pages=pages, page_size=ps, meta_tensors=meta))
        t = [pk.attach_input(x, name=n) for n, x in (
            ("qkv", testing.randn((batch, (hq + 2 * hkv) * d), torch.bfloat16, gen)),
            ("k_cache", testing.randn((pages, ps, hkv, d), torch.bfloat16, gen)),
            ("v_cache", testing.randn((pages, ps, hkv, d), torch.bfloat16, gen)),
            ("out", torch.zeros(batch, hq * d, dtype=torch.bfloat16)))]
        try:
            pk.paged_attention_layer(t[0], t[1], t[2], None, None, None, None, t[3], (slots, hkv, 1),
                                     (128, 1, 1))
            pk.compile()
            pk()
        finally:
            pk.finalize()
    testing.say(f"WRONG_OVERRIDE paged_attention {change}: refused as production refuses it PASS")


if __name__ == "__main__":
    testing.run_cases_as_script("paged_attention", run_case, DTYPES, CASES)
