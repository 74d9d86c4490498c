"""paged_attention_layer's kernel alone (csrc/tasks/paged_attention.cuh): each task (request slot, KV head)
on one block, nothing else running, the batch layout given as meta tensors (testing.run_tasks; a
kernel-level run has no meta pass, so the layout is built by hand: pytorch_reference.batch_meta, pages in
a random order).

run_tasks loads only each task's live inputs (layers/paged_attention.py `live`: its request's rows, its
cached slots) and poisons everything else twice, so a task that reads a page it does not own, a slot past
its sequence or another request's rows is named; it must write exactly its rows and its new tokens' slots.
The caches themselves hold NaN (or std-100 noise) outside every request's cached range as well.
Compared: the output rows with tol_attention (the derivation: mirage/mpk/testing/tolerances.py,
"Attention"), the new K slots with tol_qk_norm_rope, the new V slots bit for bit (a copy).
Run: python tests/runtime_python/paged_attention/test_paged_attention.py   (or pytest this file; -k)
The integration test is test_paged_attention_testmode.py beside it; both use pytorch_reference.py.
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
NORM, ROPE = 1, 2
# (dtype, q heads, KV heads, head_dim, page_size, new tokens per request, cached tokens, options, empty slots)
CASES = [
    (torch.bfloat16, 8, 2, 64, 16, (7,), (0,), NORM | ROPE, 0),            # one request, a prefill
    (torch.bfloat16, 8, 2, 64, 16, (5, 3, 9, 1), (11, 0, 30, 40), NORM | ROPE, 1),   # 4 mixed, 1 empty
    (torch.float32, 4, 4, 64, 1, (3, 2), (5, 9), NORM | ROPE, 0),          # MHA (ratio 1), pages of 1
    (torch.float16, 16, 2, 128, 64, (4, 1), (70, 130), NORM | ROPE, 0),     # GQA 8, d 128, pages of 64
    (torch.bfloat16, 8, 2, 128, 16, (1, 1, 1), (37, 100, 15), NORM | ROPE, 0),    # a decode step
    (torch.float32, 8, 2, 64, 16, (6, 2), (10, 21), ROPE, 0),                # RoPE without the norms
    (torch.bfloat16, 8, 2, 64, 16, (6, 2), (10, 21), NORM, 0),               # the norms without RoPE
    (torch.float32, 4, 1, 64, 16, (5, 3), (0, 17), 0, 0),                    # neither
]
QUICK = (CASES[1], 90)

block_dim = testing.worker_block_dim


def case_id(c) -> str:
    dtype, hq, hkv, d, ps, new, cached, opts, empty = c
    return (f"{str(dtype)[6:]}-{hq}q{hkv}kv-d{d}-ps{ps}-new{'_'.join(map(str, new))}-cached"
            f"{'_'.join(map(str, cached))}-opts{opts}{f'-empty{empty}' if empty else ''}")


def inputs(dtype, hq, hkv, d, ps, new, cached, opts, empty, gen, nan=True):
    """Tensors, meta tensors and kernel parameters of a case (pages: enough for every request plus two)."""
    slots = len(new) + empty
    num_pages = sum(-(-(t + c) // ps) for t, c in zip(new, cached)) + 2
    meta = ref.batch_meta(list(new), list(cached), ps, num_pages, slots, gen)
    rows = sum(new) + 2                                  # two rows past the batch: no task may write them
    max_seq = max(t + c for t, c in zip(new, cached)) + 3
    t = {"qkv": testing.randn((rows, (hq + 2 * hkv) * d), dtype, gen),
         "k_cache": ref.poison_outside(testing.randn((num_pages, ps, hkv, d), dtype, gen), meta, gen, nan),
         "v_cache": ref.poison_outside(testing.randn((num_pages, ps, hkv, d), dtype, gen), meta, gen, nan),
         "out": torch.zeros(rows, hq * d, dtype=dtype)}
    if opts & NORM:
        t["q_norm"] = testing.randn((d,), dtype, gen, scale=0.5) + 1.0
        t["k_norm"] = testing.randn((d,), dtype, gen, scale=0.5) + 1.0
    if opts & ROPE:
        t["cos"], t["sin"] = ref.rope_tables(max_seq, d, dtype)
    params = {"max_num_pages": num_pages, "page_size": ps, "max_seq_length": max_seq,
              "max_num_batched_tokens": sum(new), "max_num_batched_requests": slots, "meta_tensors": meta}
    return t, meta, params


def call(pk, t, hkv, slots, target_cc):
    pk.paged_attention_layer(input=t["qkv"], k_cache=t["k_cache"], v_cache=t["v_cache"],
                             q_norm=t.get("q_norm"), k_norm=t.get("k_norm"), cos_pos_embed=t.get("cos"),
                             sin_pos_embed=t.get("sin"),
                             output=t["out"], grid_dim=(slots, hkv, 1), block_dim=block_dim(target_cc))


def check_cache(name, run, given, before, expect, meta, hkv, d):
    """The new tokens' slots: K within tol_qk_norm_rope, V bit for bit; every other slot as it was."""
    kc, vc, k_scale, written = ref.write_cache(before["k_cache"], before["v_cache"], meta, expect["new"])
    dtype = given["k_cache"].dtype
    testing.assert_close(f"{name}.k_cache[new slots]", given["k_cache"][written], kc[written],
                         testing.tol_qk_norm_rope(dtype, d, k_scale[written]))
    testing.assert_equal(f"{name}.v_cache[new slots]", given["v_cache"][written], vc[written].to(dtype))
    for role in ("k_cache", "v_cache"):
        same = torch.equal(given[role][~written].view(torch.uint8), before[role][~written].view(torch.uint8))
        assert same, f"{name}: {role} changed outside the new tokens' slots"


def run_case(dtype, hq, hkv, d, ps, new, cached, opts, empty, target_cc):
    gen = testing.generator(offset=hq * 100 + d + ps + sum(new) + 7 * sum(cached) + opts)
    t, meta, params = inputs(dtype, hq, hkv, d, ps, new, cached, opts, empty, gen)
    before = {k: v.clone() for k, v in t.items()}
    slots = len(new) + empty
    run = testing.run_tasks(lambda pk, dt: call(pk, dt, hkv, slots, target_cc), t, target_cc=target_cc,
                            params=params)
    expect = ref.attention(before["qkv"], before["k_cache"], before["v_cache"], meta, hq,
                           t.get("q_norm"), t.get("k_norm"), t.get("cos"), t.get("sin"))
    assert bool(run.covered["out"].any(-1).eq(expect["rows"]).all()), "the live rows are not the batch's"
    tol = testing.tol_attention(dtype, d, expect["keys"], expect["value_scale"], expect["score_scale"],
                                expect["score_var"])
    run.check("out", expect["out"], tol, checks=run.layer.checks)
    check_cache(run.layer.name, run, t, before, expect, meta, hkv, d)
    return run


PARAMS = [pytest.param(c, cc, id=f"{case_id(c)}-cc{cc}",
                       marks=[pytest.mark.quick] if (c, cc) == QUICK else [])
          for c in CASES for cc in TARGETS]


@pytest.mark.parametrize("case,target_cc", PARAMS)
def test_paged_attention_kernel(case, target_cc):
    run_case(*case, target_cc)


def test_paged_attention_refuses_bad_arguments():
    """Shapes, dtypes, head_dim, GQA ratio, grid and half-given options are refused in Python, naming the
    layer, the tensor and the valid values."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True, max_num_pages=4, page_size=16, max_seq_length=64,
                          max_num_batched_tokens=8, max_num_batched_requests=2)
    names = iter(f"t{i}" for i in range(100))
    z = lambda *s, dt=torch.bfloat16: pk.attach_input(torch.zeros(*s, dtype=dt), name=next(names))  # noqa: E731
    qkv, kc, vc, out = z(8, 12 * 64), z(4, 16, 2, 64), z(4, 16, 2, 64), z(8, 8 * 64)
    norm, cos, sin = z(64), z(64, 64), z(64, 64)
    bad_d, bad_d_v, qkv96 = z(4, 16, 2, 96), z(4, 16, 2, 96), z(8, 12 * 96)
    short_cos, kc_pages, qkv_f = z(32, 64), z(3, 16, 2, 64), z(8, 12 * 64, dt=torch.float32)
    out7 = z(8, 7 * 64)
    cases = [
        (dict(k_cache=bad_d, v_cache=bad_d_v, input=qkv96, output=z(8, 8 * 96)),
         r"head_dim 96 .* the kernel takes head_dim 64, 128"),
        (dict(output=out7), r"7 query heads for 2 KV heads .* positive multiple"),
        (dict(input=qkv_f), r"'t3' \(output\) has dtype bfloat16, expected float32"),
        (dict(k_cache=kc_pages), r"dim 0 is 3, expected 4"),
        (dict(grid_dim=(1, 2, 1)), r"must be \(max_num_batched_requests, num_kv_heads, \.\.\.\) = \(2, 2"),
        (dict(k_norm=None), r"q_norm and k_norm are given together or both None"),
        (dict(cos_pos_embed=short_cos, sin_pos_embed=short_cos), r"32 positions, fewer than max_seq_length"),
        (dict(grid_dim=(2, 2, 2)), r"grid_dim.z must be 1"),
    ]
    for change, message in cases:
        kw = {**dict(input=qkv, k_cache=kc, v_cache=vc, q_norm=norm, k_norm=norm, cos_pos_embed=cos,
                     sin_pos_embed=sin, output=out, grid_dim=(2, 2, 1), block_dim=(128, 1, 1)), **change}
        with pytest.raises(ValueError, match=message):
            pk.paged_attention_layer(**kw)
    testing.say(f"BAD_INPUT paged_attention_layer: {len(cases)} bad calls refused, each naming layer, tensor "
                f"and sizes PASS")
    pk.finalize()


# (what breaks the layout, the change to the meta tensors of CASES[0], the message): a task must refuse a
# layout it cannot trust rather than read outside the tensors
BAD_LAYOUTS = [
    ("a page index outside the cache", lambda m: m["paged_kv_indices_buffer"].__setitem__(0, 99),
     "a page index outside the KV cache"),
    ("rows past the input", lambda m: m["qo_indptr_buffer"].__setitem__(1, 50),
     "rows outside the input tile"),
    ("fewer tokens in the pages than new ones",
     lambda m: m["paged_kv_last_page_len_buffer"].__setitem__(0, 3),
     "hold fewer tokens than it has new ones"),
]


@pytest.mark.parametrize("what,change,message", BAD_LAYOUTS,
                         ids=[b[0].replace(" ", "_") for b in BAD_LAYOUTS])
def test_paged_attention_kernel_refuses_a_layout_it_cannot_trust(what, change, message):
    """A batch layout no prepare_next_batch writes (a caller's meta tensors in a kernel-level run): the task
    fails with its message, naming the task; nothing outside the tensors is read (the guard would say)."""
    gen = testing.generator(offset=5)
    t, meta, params = inputs(*CASES[0], gen)
    change(meta)
    with pytest.raises(Exception) as e:
        testing.run_tasks(lambda pk, dt: call(pk, dt, 2, 1, 80), t, params=params)
    msg = str(e.value)
    assert message in msg and "paged_attention" in msg, msg
    testing.say(f"BAD_LAYOUT paged_attention ({what}): {msg.splitlines()[0][:160]} PASS")


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
