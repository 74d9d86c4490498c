"""paged_attention_split_kv_layer then paged_attention_split_kv_merge_layer in one kernel, in test mode: real
generated code, several workers, schedule jitter, the batch laid out by init_kernel + prepare_next_batch from
the meta tensors (prompt_lengths / step overrides, as a user does), as in production.

The split writes each chunk's partial output and lse into intermediate tensors, the merge combines them; the
test-mode graph orders the merge's tasks after the split's by their tiles. Checked: the meta tensors against
the layout prepare_next_batch gives (pytorch_reference.expected_layout), the intermediates per chunk (the
split test's checks: tol_attention / tol_attention_lse, empty chunks exactly), and the merged output against
the UNSPLIT page-walking reference (split == unsplit) within tol_attention_merge, which composes each chunk's
attention budget (its rounding to the dtype included), its lse's budget and the merge's own fp32 sums; the
rows past the batch keep test mode's poison. Every cache slot without a cached token holds noise of std 100.

Run: python \
       tests/runtime_python/paged_attention_split_kv_merge/test_paged_attention_split_kv_merge_testmode.py
     mpirun -n 4 python \
       tests/runtime_python/paged_attention_split_kv_merge/test_paged_attention_split_kv_merge_testmode.py
     (one 4-rank job: TP "heads" for both layers, rank r its KV heads, their partials and its query heads'
     output columns; a case whose KV heads do not split across the ranks is skipped on every rank)
"""

import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
split_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "paged_attention_split_kv", "x.py")
split_test = testing.load_reference(split_dir, name="test_paged_attention_split_kv_testmode")
kernel_test = testing.load_reference(split_dir, name="test_paged_attention_split_kv")

DTYPES = [torch.bfloat16, torch.float16]
local_tol, past, check_meta, check_empty, check_cache = (
    split_test.local_tol,
    split_test.past,
    split_test.check_meta,
    split_test.check_empty,
    split_test.check_cache,
)
NORM_ROPE = True
# (q heads, KV heads, head_dim, page_size, prompt_lengths, step, norm + RoPE, max_seq_length,
#  max_num_batched_tokens, max_num_batched_requests, num_kv_chunks)
CASES = [
    # GQA 4: request 0 has 5 new tokens at 15..19 (S = 20: chunks 2 and 3 of 16 empty), a 6-token prefill, a
    # decode at position 2; norm and RoPE; an unused request slot
    (16, 4, 64, 16, (20, 6, 3), (15, 0, 2), NORM_ROPE, 64, 16, 4, 4),
    # GQA 1, D 128, no norm or RoPE: chunks of 11 across pages of 8; a 12-token prefill (chunk 1 causally
    # empty
    # for its first 11 tokens) beside 10 new tokens over 20 cached
    (2, 2, 128, 8, (30, 12), (20, 0), not NORM_ROPE, 32, 24, 2, 3),
]


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
    gen = testing.generator(offset=1000 * key + d + 7)
    pages, meta, qkv, k_cache, v_cache, options, overrides = ref.split.testmode_inputs(
        dtype, hq, hkv, d, ps, prompts, steps, norm, max_seq, slots, batch, gen, nan=False)
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
    h, g, hq_local = hkv // world.size, hq // hkv, hq // world.size
    lse = torch.zeros(batch, chunks * g, h)
    part = torch.zeros(batch, chunks * g * d, h, dtype=dtype)
    out = torch.zeros(batch, hq_local * d, dtype=dtype)
    dt = {
        n: pk.attach_input(t, name=n)
        for n, t in (("qkv", mine["qkv"]), ("k_cache", mine["k"]), ("v_cache", mine["v"]), ("attn_out", out))
    }
    dt["attn_lse"], dt["attn_part"] = (
        pk.new_tensor(dims=t.shape, dtype=t.dtype, name=n)
        for n, t in (("attn_lse", lse), ("attn_part", part))
    )
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
        attention_params=(hq_local, chunks),
        grid_dim=(slots, h, chunks),
        block_dim=(128, 1, 1),
    )
    pk.paged_attention_split_kv_merge_layer(
        lse=dt["attn_lse"],
        output_tmp=dt["attn_part"],
        output=dt["attn_out"],
        attention_params=(hq_local, d),
        grid_dim=(slots, h, 1),
        block_dim=(128, 1, 1),
    )
    pk.compile(output_dir=output_dir)
    pk()
    lse, part = pk.get_tensor("attn_lse").clone(), pk.get_tensor("attn_part").clone()
    pk.finalize()
    name = (
        f"paged_attention_split_kv_merge[{str(dtype)[6:]},{hq}q{hkv}kv,d={d},ps={ps},chunks={chunks},"
        f"prompts={list(prompts)},step={list(steps)},norm_rope={norm}{world.tag}]"
    )
    check_meta(name, pk, meta)
    rows = int(meta["num_new_tokens"])
    expect = ref.split_attention(qkv, k_cache, v_cache, meta, hq, chunks, max_seq, **options)
    parts = expect["chunks"]
    tc = kernel_test.tc_rows(dtype, meta, hq // hkv, parts)
    tol, tols = kernel_test.split_tol(dtype, d, hkv, parts, tc)
    ltol = kernel_test.split_lse_tol(dtype, d, hkv, parts, tc)
    # the intermediates, this rank's KV heads (dim 2) of them
    want_part, want_lse = (split_test.local(t, world, -1) for t in (expect["output"], expect["lse"]))
    testing.assert_close(f"{name}.partials", part[:rows], want_part[:rows], local_tol(tol, world, -1, rows))
    testing.assert_close(f"{name}.lse", lse[:rows], want_lse[:rows], local_tol(ltol, world, -1, rows))
    check_empty(name, part[:rows], lse[:rows], want_lse[:rows], d)
    # split + merge == unsplit
    whole = world.shard("output", ref.attention(qkv, k_cache, v_cache, meta, hq, **options)["out"])
    mtol = testing.tol_attention_merge(
        dtype,
        d,
        [p["lse"] for p in parts],
        [p["out"] for p in parts],
        tols,
        kernel_test.lse_tols(dtype, d, parts, tc),
    )
    # rows past the batch: nothing writes them, they keep test mode's NaN poison
    testing.assert_close(f"{name}.output", out, past(whole, rows), local_tol(mtol, world, -1, batch), pk=pk)
    testing.check_nonvacuous(f"{name}.output", out[:rows], pk.layers[1].checks, reference=whole[:rows])
    check_cache(name, mine, before, meta, parts[0]["new"], world, d, dtype)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize(
    "case", CASES, ids=[f"{c[0]}q{c[1]}kv-d{c[2]}-ps{c[3]}-{len(c[4])}req-chunks{c[10]}" for c in CASES]
)
def test_paged_attention_split_kv_merge(dtype, case):
    run_case(dtype, *case, jitter=case[4][0])


if __name__ == "__main__":
    testing.run_cases_as_script("paged_attention_split_kv_merge", run_case, DTYPES, CASES)
