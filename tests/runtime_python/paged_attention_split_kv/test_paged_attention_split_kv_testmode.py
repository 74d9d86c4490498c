"""paged_attention_split_kv_layer in test mode: real generated code, several workers, schedule jitter, its
batch
laid out by init_kernel + prepare_next_batch from the meta tensors, as in production.

Each case overrides `prompt_lengths` and `step` (meta_tensors, as a user does: step[r] tokens of request r are
already in its cache); the test writes down the layout prepare_next_batch gives (pytorch_reference.
expected_layout: requests in slot order, pages in order from a fresh free list) and checks the meta tensors
against it exactly. Before the run every cache slot that holds no cached token holds noise of std 100. After
it, per chunk: the partial outputs and lse of the batch's rows against the reference restricted to the chunk
(tol_attention, tol_attention_lse), the empty chunks exactly (o == 0, lse == -inf: a request's chunks beyond
its sequence, a prefill's causally empty ones); the chunks merged in float64 (pytorch_reference.merge) against
the unsplit reference (tol_attention_merge); the new cache slots' K (tol_qk_norm_rope) and V (bit for bit),
every other slot unchanged.

Run: python tests/runtime_python/paged_attention_split_kv/test_paged_attention_split_kv_testmode.py
     mpirun -n 4 python \
       tests/runtime_python/paged_attention_split_kv/test_paged_attention_split_kv_testmode.py
     (one 4-rank job: TP "heads", rank r runs its KV heads, their query groups and their partials; a case
     whose KV heads do not split across the ranks is skipped on every rank)
"""

import math

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
kernel_test = testing.load_reference(__file__, name="test_paged_attention_split_kv")

DTYPES = [torch.bfloat16, torch.float32]
NORM_ROPE = True
# (q heads, KV heads, head_dim, page_size, prompt_lengths, step, norm + RoPE, max_seq_length,
#  max_num_batched_tokens, max_num_batched_requests, num_kv_chunks)
CASES = [
    # request 0: 5 new tokens at 15..19 (S = 20: chunks 2 and 3 of 16 empty), a 6-token prefill, a decode at
    # position 2; GQA 2, norm and RoPE; an unused request slot
    (8, 4, 64, 16, (20, 6, 3), (15, 0, 2), NORM_ROPE, 64, 16, 4, 4),
    # chunks of 11 across pages of 8 (chunk edges inside pages); a 12-token prefill: chunk 1 causally empty
    # for
    # its first 11 tokens; GQA 1, D 128, no norm or RoPE
    (2, 2, 128, 8, (30, 12), (20, 0), not NORM_ROPE, 32, 24, 2, 3),
]


def local(t: torch.Tensor, world, dim: int) -> torch.Tensor:
    """This rank's part of a tolerance tensor along `dim` (as world.shard splits the compared tensor)."""
    if world.size == 1:
        return t
    lo, hi = world.part(t.shape[dim])
    return t.narrow(dim, lo, hi - lo)


def local_tol(tol, world, dim: int, rows: int):
    return testing.Tolerance(
        local(tol.atol, world, dim)[:rows],
        tol.rtol,
        tol.why,
        local(tol.var_abs, world, dim)[:rows],
        tol.var_rel,
    )


def run_case(
    dtype,
    hq,
    hkv,
    d,
    ps,
    prompts,
    steps,
    norm,
    max_seq,
    batch,
    slots,
    chunks,
    jitter=0,
    output_dir=None,
    world=testing.ONE_RANK,
):
    if hkv % world.size:
        raise testing.CaseSkipped(f"{hkv} KV heads do not split across {world.size} ranks")
    key = CASES.index((hq, hkv, d, ps, prompts, steps, norm, max_seq, batch, slots, chunks))
    gen = testing.generator(offset=1000 * key + d)
    pages, meta, qkv, k_cache, v_cache, options, overrides = ref.testmode_inputs(
        dtype, hq, hkv, d, ps, prompts, steps, norm, max_seq, slots, batch, gen)
    pk = PersistentKernel(
        **testing.cpu_config(
            jitter_seed=jitter,
            max_seq_length=max_seq,
            max_num_batched_tokens=batch,
            max_num_batched_requests=slots,
            max_num_pages=pages,
            page_size=ps,
            meta_tensors=overrides,
            **world.params,
        )
    )
    mine = {
        "qkv": world.shard("input", qkv),
        "k": world.shard("k_cache", k_cache),
        "v": world.shard("v_cache", v_cache),
    }
    before = {k: v.clone() for k, v in mine.items()}
    h = hkv // world.size
    g = hq // hkv
    lse = torch.zeros(batch, chunks * g, h)
    out = torch.zeros(batch, chunks * g * d, h, dtype=dtype)
    dt = {
        n: pk.attach_input(t, name=n)
        for n, t in (
            ("qkv", mine["qkv"]),
            ("k_cache", mine["k"]),
            ("v_cache", mine["v"]),
            ("attn_lse", lse),
            ("attn_part", out),
        )
    }
    opt = {
        n: pk.attach_input(options[n], name=n) if norm else None for n in ("q_norm", "k_norm", "cos", "sin")
    }
    pk.paged_attention_split_kv_layer(
        input=dt["qkv"],
        k_cache=dt["k_cache"],
        v_cache=dt["v_cache"],
        q_norm=opt["q_norm"],
        k_norm=opt["k_norm"],
        cos_pos_embed=opt["cos"],
        sin_pos_embed=opt["sin"],
        lse=dt["attn_lse"],
        output=dt["attn_part"],
        attention_params=(hq // world.size, chunks),
        grid_dim=(slots, h, chunks),
        block_dim=(128, 1, 1),
    )
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = (
        f"paged_attention_split_kv[{str(dtype)[6:]},{hq}q{hkv}kv,d={d},ps={ps},chunks={chunks},"
        f"prompts={list(prompts)},step={list(steps)},norm_rope={norm}{world.tag}]"
    )
    check_meta(name, pk, meta)
    rows = int(meta["num_new_tokens"])
    expect = ref.split_attention(qkv, k_cache, v_cache, meta, hq, chunks, max_seq, **options)
    parts = expect["chunks"]
    tc = kernel_test.tc_rows(dtype, meta, hq // hkv, parts)
    tol, tols = kernel_test.split_tol(dtype, d, hkv, parts, tc)
    ltol = kernel_test.split_lse_tol(dtype, d, hkv, parts, tc)
    # this rank's KV heads (dim 2) of the partials and lse; the unsplit output goes through world.shard
    want_out, want_lse = (local(t, world, -1) for t in (expect["output"], expect["lse"]))
    # rows past the batch: nothing writes them, they keep test mode's NaN poison
    testing.assert_close(f"{name}.output", out, past(want_out, rows), local_tol(tol, world, -1, batch), pk=pk)
    testing.check_nonvacuous(f"{name}.output", out[:rows], ("finite", "nonzero"))
    testing.assert_close(f"{name}.lse", lse, past(want_lse, rows), local_tol(ltol, world, -1, batch), pk=pk)
    check_empty(name, out[:rows], lse[:rows], want_lse[:rows], d)
    # the chunks merged (float64) against the unsplit reference: split == unsplit
    whole = world.shard("output", ref.attention(qkv, k_cache, v_cache, meta, hq, **options)["out"])
    mtol = testing.tol_attention_merge(
        dtype,
        d,
        [p["lse"] for p in parts],
        [p["out"] for p in parts],
        tols,
        kernel_test.lse_tols(dtype, d, parts, tc),
    )
    merged = ref.merge(lse[:rows], out[:rows], hq // world.size, d).to(dtype)
    testing.assert_close(f"{name}.merged_vs_unsplit", merged, whole[:rows], local_tol(mtol, world, -1, rows))
    check_cache(name, mine, before, meta, parts[0]["new"], world, d, dtype)
    return pk


def past(expected: torch.Tensor, rows: int) -> torch.Tensor:
    """expected with the rows past the batch NaN: what test mode's poison leaves there."""
    return torch.cat([expected[:rows], torch.full_like(expected[rows:], torch.nan)])


def check_meta(name, pk, meta):
    for k in (
        "qo_indptr_buffer",
        "paged_kv_indptr_buffer",
        "paged_kv_last_page_len_buffer",
        "num_new_tokens",
    ):
        testing.assert_equal(f"{name}.{k}", pk.get_tensor(k), meta[k])
    n = int(meta["paged_kv_indptr_buffer"][-1])
    testing.assert_equal(
        f"{name}.paged_kv_indices_buffer[:{n}]",
        pk.get_tensor("paged_kv_indices_buffer")[:n],
        meta["paged_kv_indices_buffer"][:n],
    )


def check_empty(name, out, lse, want_lse, d):
    """Every (row, chunk, head) partial whose chunk holds no key: lse == -inf and o == 0, exactly."""
    empty = torch.isinf(want_lse)
    ok = bool((lse[empty] == -math.inf).all()) and bool((out[empty.repeat_interleave(d, dim=1)] == 0).all())
    testing.say(
        f"EMPTY {name}: {int(empty.sum())} of {empty.numel()} partials hold no key: lse == -inf and o == 0 "
        f"exactly {'PASS' if ok else 'FAIL'}"
    )
    assert ok and bool(empty.any()), (
        f"{name}: an empty chunk's lse is not -inf or its o not 0 (or none is empty)"
    )


def check_cache(name, mine, before, meta, new, world, d, dtype):
    """The new slots: K within tol_qk_norm_rope, V bit for bit; every other slot as it was."""
    h = mine["k"].shape[2]
    h0 = world.rank * h if world.size > 1 else 0
    new = [(r, pos, k[:, h0 : h0 + h], v[:, h0 : h0 + h], s[:, h0 : h0 + h]) for r, pos, k, v, s in new]
    kc, vc, k_scale, written = ref.write_cache(before["k"], before["v"], meta, new)
    testing.assert_close(
        f"{name}.k_cache[new slots]",
        mine["k"][written],
        kc[written],
        testing.tol_qk_norm_rope(dtype, d, k_scale[written]),
    )
    testing.assert_equal(f"{name}.v_cache[new slots]", mine["v"][written], vc[written].to(dtype))
    for role in ("k", "v"):
        same = torch.equal(mine[role][~written].view(torch.uint8), before[role][~written].view(torch.uint8))
        assert same, f"{name}: the {role} cache changed outside the new tokens' slots"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c[0]}q{c[1]}kv-d{c[2]}-ps{c[3]}-{len(c[4])}req-chunks{c[10]}" for c in CASES]
)
def test_paged_attention_split_kv(dtype, case):
    run_case(dtype, *case, jitter=case[4][0])


if __name__ == "__main__":
    testing.run_cases_as_script("paged_attention_split_kv", run_case, DTYPES, CASES)
