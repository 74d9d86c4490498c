"""paged_attention_split_kv_layer's kernel alone (csrc/tasks/paged_attention_split_kv.cuh): each task
(request,
KV head, key chunk) on one block, nothing else running, with the meta tensors given (a hand-made batch
layout: several requests, permuted pages, unused request slots). testing.run_tasks loads only each task's
live inputs (its rows, its chunk's cached slots) and poisons everything else, twice: a read of a key outside
the chunk, of a slot of another request or of a new token no task of this chunk stored is named; a write
outside its chunk's new slots or its rows is named.

Checks: the partial outputs and lse of every chunk against the float64 reference restricted to the chunk
(pytorch_reference.split_attention) within tol_attention / tol_attention_lse; the empty chunks (beyond a
sequence, or causally empty for a prefill's early tokens) o == 0 and lse == -inf exactly; the chunks merged
(pytorch_reference.merge) against the unsplit reference within tol_attention_merge; the cache slots written.
Run: python tests/runtime_python/paged_attention_split_kv/test_paged_attention_split_kv.py   (or pytest)
The integration test is test_paged_attention_split_kv_testmode.py beside it.
"""

import math
import sys

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.layers.paged_attention import tensor_core_rows

ref = testing.load_reference(__file__)

TARGETS = [80, 90]  # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)


def tc_rows(dtype, meta, group, parts):
    """[rows, 1]: the rows whose chunks ran on the tensor cores (layers/paged_attention.py
    tensor_core_rows)."""
    return tensor_core_rows(dtype, meta["qo_indptr_buffer"], group, parts[0]["value_scale"].shape[0])[:, None]


def split_tol(dtype, d, hkv, parts, tc=False):
    """The partial outputs' budget in the split layout: each chunk's tol_attention, side by side; tc: the
    rows on the tensor cores (tc_rows)."""
    tols = [
        testing.tol_attention(dtype, d, max(p["keys"], 1), p["value_scale"], p["score_scale"], p["score_var"],
                              tensor_cores=tc)
        for p in parts
    ]
    cat = lambda xs: torch.cat([ref.to_split(x, hkv) for x in xs], dim=1)  # noqa: E731
    return testing.Tolerance(
        cat([t.atol for t in tols]),
        tols[0].rtol,
        tols[0].why,
        cat([t.var_abs for t in tols]),
        tols[0].var_rel,
    ), tols


def lse_tols(dtype, d, parts, tc=False):
    return [testing.tol_attention_lse(dtype, d, max(p["keys"], 1), p["sigma"], tensor_cores=tc)
            for p in parts]


def split_lse_tol(dtype, d, hkv, parts, tc=False):
    tols = lse_tols(dtype, d, parts, tc)
    cat = lambda xs: torch.cat([ref.to_split(x, hkv) for x in xs], dim=1)  # noqa: E731
    return testing.Tolerance(
        cat([t.atol for t in tols]),
        tols[0].rtol,
        tols[0].why,
        cat([t.var_abs for t in tols]),
        tols[0].var_rel,
    )


def check_split(name, out, lse, expect, dtype, d, hkv, q_heads, rows, run=None, cover=None):
    """The partials and lse (run.check when a kernel-level run, else check_output over the live rows), the
    empty chunks exactly, the merge of the chunks against the unsplit reference. Returns the largest
    error / budget ratios."""
    parts, chunks = expect["chunks"], len(expect["chunks"])
    tc = tc_rows(dtype, expect["args"][3], q_heads // hkv, parts)
    testing.say(f"PATH {name}: {int(tc.sum())} rows on the tensor cores")
    tol, tols = split_tol(dtype, d, hkv, parts, tc)
    ltol = split_lse_tol(dtype, d, hkv, parts, tc)
    if run is not None:
        run.check(out, expect["output"], tol)
        run.check(lse, expect["lse"], ltol, checks=())  # -inf where a chunk holds no key: EMPTY below
        out, lse = run.outputs[out], run.outputs[lse]
    else:
        sub = lambda t: testing.Tolerance(t.atol[rows], t.rtol, t.why, t.var_abs[rows], t.var_rel)  # noqa: E731
        testing.check_output(
            f"{name}.output", out[rows], expect["output"][rows], sub(tol), ("finite", "nonzero")
        )
        testing.assert_close(f"{name}.lse", lse[rows], expect["lse"][rows], sub(ltol))
    empty = torch.isinf(expect["lse"]) & rows[:, None, None]
    wide = empty.repeat_interleave(d, dim=1)
    ok = bool((lse[empty] == -math.inf).all()) and bool((out[wide] == 0).all())
    full = [int((p["lse"][rows] == -math.inf).all(-1).sum()) for p in parts]
    testing.say(
        f"EMPTY {name}: {int(empty.sum())} (row, chunk, head) partials hold no key (rows with no key per "
        f"chunk {full}): lse == -inf and o == 0 exactly {'PASS' if ok else 'FAIL'}"
    )
    assert ok, f"{name}: an empty chunk's lse is not -inf or its o not 0 exactly"
    merged = ref.merge(lse, out, q_heads, d)
    whole = ref.attention(*expect["args"], **expect["options"])
    mtol = testing.tol_attention_merge(
        dtype, d, [p["lse"] for p in parts], [p["out"] for p in parts], tols, lse_tols(dtype, d, parts, tc)
    )
    sub = lambda t: testing.Tolerance(t.atol[rows], t.rtol, t.why, t.var_abs[rows], t.var_rel)  # noqa: E731
    testing.assert_close(
        f"{name}.merged_vs_unsplit[{chunks} chunks]", merged[rows].to(dtype), whole["out"][rows], sub(mtol)
    )


def reference(qkv, kc, vc, meta, hq, chunks, max_seq, options):
    expect = ref.split_attention(qkv, kc, vc, meta, hq, chunks, max_seq, **options)
    expect["args"], expect["options"] = (qkv, kc, vc, meta, hq), options
    return expect


# (dtype, Hq, Hkv, D, new tokens, cached tokens, request slots, max_seq, chunks, norm+rope, target_cc)
# case 0: S = 20 in chunks of 16: request 0's chunks 2 and 3 empty (beyond its sequence), request 1 (3 tokens)
# only in chunk 0; GQA 4, D 64, norm and RoPE on. case 1: a 20-token prefill in chunks of 16: chunk 1 is
# causally empty for its first 16 tokens; GQA 1, D 128, no norm or RoPE; a third, empty request slot.
CASES = (
    [(torch.bfloat16, 8, 2, 64, (5, 3), (15, 0), 2, 64, 4, True, cc) for cc in TARGETS]
    + [(dt, 2, 2, 128, (20,), (0,), 2, 40, 3, False, 80) for dt in (torch.float16, torch.float32)]
    + [(torch.float32, 4, 1, 64, (4, 2), (30, 9), 3, 48, 2, True, 90)]
)
QUICK = CASES[0]


def run_split(dtype, hq, hkv, d, new, cached, slots, max_seq, chunks, norm, target_cc, seed=0):
    gen = testing.generator(offset=seed + 97 * d + hq)
    ps = 16
    pages = sum(-(-(t + c) // ps) for t, c in zip(new, cached)) + 2
    meta = ref.batch_meta(list(new), list(cached), ps, pages, slots, gen)  # permuted pages
    rows = sum(new) + 1  # one row beyond the batch: never read or written
    qkv = testing.randn((rows, (hq + 2 * hkv) * d), dtype, gen)
    # NaN in every slot outside the requests' cached ranges (run_tasks poisons outside each task's chunk too)
    kc, vc = (ref.poison_outside(testing.randn((pages, ps, hkv, d), dtype, gen), meta, gen) for _ in range(2))
    t = {"qkv": qkv, "kc": kc, "vc": vc}
    options = {}
    if norm:
        t["qn"], t["kn"] = testing.randn((d,), dtype, gen), testing.randn((d,), dtype, gen)
        t["cos"], t["sin"] = ref.rope_tables(max_seq, d, dtype)
        options = {"q_norm": t["qn"], "k_norm": t["kn"], "cos": t["cos"], "sin": t["sin"]}
    expect = reference(qkv, kc.clone(), vc.clone(), meta, hq, chunks, max_seq, options)
    kc_want, vc_want, ks, written = ref.write_cache(kc, vc, meta, expect["chunks"][0]["new"])
    t["lse"] = torch.zeros(rows, chunks * (hq // hkv), hkv)
    t["out"] = torch.zeros(rows, chunks * (hq // hkv) * d, hkv, dtype=dtype)
    run = testing.run_tasks(
        lambda pk, x: pk.paged_attention_split_kv_layer(
            input=x["qkv"],
            k_cache=x["kc"],
            v_cache=x["vc"],
            q_norm=x.get("qn"),
            k_norm=x.get("kn"),
            cos_pos_embed=x.get("cos"),
            sin_pos_embed=x.get("sin"),
            lse=x["lse"],
            output=x["out"],
            attention_params=(hq, chunks),
            grid_dim=(slots, hkv, chunks),
            block_dim=testing.worker_block_dim(target_cc),
        ),
        t,
        target_cc=target_cc,
        params={
            "max_num_pages": pages,
            "page_size": ps,
            "max_seq_length": max_seq,
            "max_num_batched_tokens": rows,
            "max_num_batched_requests": slots,
            "meta_tensors": meta,
        },
    )
    name = f"{run.layer.name}[kernel,{str(dtype)[6:]},{hq}/{hkv}x{d},new={list(new)},cached={list(cached)}]"
    live = expect["chunks"][0]["rows"]
    check_split(name, "out", "lse", expect, dtype, d, hkv, hq, live, run=run)
    run.check("kc", kc_want, testing.tol_qk_norm_rope(dtype, d, ks))
    run.check("vc", vc_want, testing.tolerance(dtype))
    assert int(run.covered["kc"].sum()) == int(written.sum()) * hkv * d
    return run


@pytest.mark.parametrize(
    "dtype,hq,hkv,d,new,cached,slots,max_seq,chunks,norm,target_cc", testing.case_params(CASES, quick=QUICK)
)
def test_paged_attention_split_kv_kernel(
    dtype, hq, hkv, d, new, cached, slots, max_seq, chunks, norm, target_cc
):
    run_split(dtype, hq, hkv, d, new, cached, slots, max_seq, chunks, norm, target_cc)


def test_paged_attention_split_kv_refuses_bad_arguments():
    """Shapes, dtypes, chunk counts and grids are checked in Python, naming layer, tensor and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(
        test_mode=True,
        max_num_pages=4,
        page_size=16,
        max_seq_length=64,
        max_num_batched_tokens=8,
        max_num_batched_requests=2,
    )
    a = lambda shape, dtype=torch.bfloat16, n=[0]: pk.attach_input(  # noqa: E731
        torch.zeros(shape, dtype=dtype), name=f"t{n.append(0) or len(n)}"
    )
    qkv, kc, vc = a((8, 12 * 64)), a((4, 16, 2, 64)), a((4, 16, 2, 64))
    lse, out = a((8, 16, 2), torch.float32), a((8, 16 * 64, 2))
    base = dict(
        input=qkv,
        k_cache=kc,
        v_cache=vc,
        q_norm=None,
        k_norm=None,
        cos_pos_embed=None,
        sin_pos_embed=None,
        lse=lse,
        output=out,
        attention_params=(8, 4),
        grid_dim=(2, 2, 4),
        block_dim=(128, 1, 1),
    )
    cases = [
        (dict(lse=a((8, 16, 2))), r"tensor 't\d+' \(lse\) has dtype bfloat16, expected float32"),
        (dict(lse=a((8, 12, 2), torch.float32)), r"\(lse\) dim 1 is 12, expected 16"),
        (dict(output=a((8, 16 * 64, 2), torch.float16)), r"\(output\) has dtype float16, expected bfloat16"),
        (dict(output=a((8, 8 * 64, 2))), r"\(output\) dim 1 is 512, expected 1024"),
        (
            dict(grid_dim=(2, 2, 2)),
            r"grid_dim must be \(max_num_batched_requests, num_kv_heads, num_kv_chunks\) "
            r"= \(2, 2, 4\), got \(2, 2, 2\)",
        ),
        (dict(grid_dim=(3, 2, 4)), r"grid_dim must be \(max_num_batched_requests, num_kv_heads, \.\.\.\)"),
        (dict(attention_params=(8,)), r"attention_params must be \(num_q_heads, num_kv_chunks\)"),
        (dict(attention_params=(5, 4)), r"5 query heads for 2 KV heads"),
        (
            dict(attention_params=(6, 4)),
            r"input 't\d+' is \(8, 768\); 6 query heads, 2 KV heads of head_dim 64 "
            r"pack into \[tokens, 640\]",
        ),
        (
            dict(attention_params=(8, 48), grid_dim=(2, 2, 48)),
            r"num_kv_chunks=48 leaves chunk 47 beyond "
            r"max_seq_length=64 \(chunks of 2 positions\)",
        ),
        (dict(q_norm=a((64,))), r"q_norm and k_norm are given together or both None"),
    ]
    for change, message in cases:
        with pytest.raises(
            ValueError, match=f"layer 'paged_attention_split_kv_0': (tensor 't\\d+' )?{message}"
        ):
            pk.paged_attention_split_kv_layer(**{**base, **change})
    testing.say(
        f"BAD_INPUT paged_attention_split_kv_layer: {len(cases)} bad calls refused, each naming layer, "
        f"tensor and sizes PASS"
    )
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
