"""paged_attention_split_kv_merge_layer's kernel alone (csrc/tasks/paged_attention_split_kv_merge.cuh): each
task
(request, KV head) on one block, nothing else running, with the meta tensors given (requests of different
lengths, an empty request slot). testing.run_tasks loads only each task's live rows of lse and output_tmp and
poisons the rest: a read of another request's rows or a write outside its own is named.

The inputs are made by hand: random partials (already in the dtype) and random lse in log2 units with -inf
chunks (a chunk with no key), among them rows whose every chunk is -inf (which a real split cannot make,
chunk 0 holding key 0) that must give exactly 0, not NaN; and, in one case, what the split makes of a real
paged batch (split_inputs: the split's float64 reference, rounded as the split stores it) with logits far
beyond exp2f's range, the last chunk holding keys. The float64 reference (pytorch_reference.merge) of the
very same inputs, so the budget is the merge's own (tol_attention_merge, exact chunks). Negative control
(tests/runtime_python/test_mode/test_paged_attention_split_kv_controls.py (a)): a merge that forgets to
subtract the max fails the split's case.
Run: python tests/runtime_python/paged_attention_split_kv_merge/test_paged_attention_split_kv_merge.py
The integration test (the split and the merge in one graph) is
test_paged_attention_split_kv_merge_testmode.py.
"""

import math
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

TARGETS = [80, 90]


def meta_rows(new, slots):
    qo = [0]
    for t in new:
        qo.append(qo[-1] + t)
    qo += [qo[-1]] * (slots + 1 - len(qo))
    return {"qo_indptr_buffer": torch.tensor(qo, dtype=torch.int32)}


def make_inputs(dtype, hq, hkv, d, chunks, rows, gen):
    g = hq // hkv
    lse = (torch.randn(rows, chunks * g, hkv, generator=gen) * 3).float()
    drop = torch.rand(rows, chunks * g, hkv, generator=gen) < 0.3
    drop[:, :g] = False  # chunk 0 holds key 0 for every row ...
    lse[drop] = -math.inf
    lse[1, :, 0] = -math.inf  # ... but row 1 of head 0 has no key at all: o = 0
    x = testing.randn((rows, chunks * g * d, hkv), dtype, gen)
    return lse, x


# (dtype, Hq, Hkv, D, chunks, new tokens per request, request slots, target_cc)
CASES = [(dt, 8, 2, 64, 4, (5, 3), 3, cc) for dt in (torch.bfloat16, torch.float32) for cc in TARGETS] + [
    (torch.float16, 2, 2, 128, 3, (6,), 2, 80),
    (torch.bfloat16, 4, 1, 128, 2, (2, 1, 4), 3, 90),
]
QUICK = CASES[0]


def split_inputs(dtype, hq, hkv, d, chunks, new, cached, slots, max_seq, q_scale, gen):
    """lse and partials as the split layer makes them: the float64 split reference (pytorch_reference's
    split_attention, per chunk the attention over its keys of a paged batch, new tokens after `cached` ones)
    rounded as the split kernel stores them (lse float32, the partials in `dtype`). q_scale multiplies the
    queries: logits of standard deviation 1.44 q_scale in log2 units, so lse beyond exp2f's range at
    q_scale 100 (a chunk's weight then needs the max subtracted)."""
    ps, rows = 16, sum(new) + 1
    pages = sum(-(-(t + c) // ps) for t, c in zip(new, cached)) + 2
    meta = ref.split.batch_meta(list(new), list(cached), ps, pages, slots, gen)
    qkv = testing.randn((rows, (hq + 2 * hkv) * d), torch.float32, gen)
    qkv.view(rows, hkv, hq // hkv + 2, d)[:, :, : hq // hkv] *= q_scale     # per KV head: its queries, k, v
    kc, vc = (testing.randn((pages, ps, hkv, d), dtype, gen) for _ in range(2))
    expect = ref.split_attention(qkv.to(dtype), kc, vc, meta, hq, chunks, max_seq)
    return expect["lse"].float(), expect["output"].to(dtype)


def run_merge(dtype, hq, hkv, d, chunks, new, slots, target_cc, lse=None, x=None):
    """The merge's tasks alone on hand-made inputs (make_inputs, with rows whose every chunk is -inf) or on
    the given lse and partials (split_inputs: no such row); the evidence against pytorch_reference.merge."""
    gen = testing.generator(offset=31 * d + hq + chunks)
    rows = sum(new) + 1  # one row past the batch: never read or written
    hand_made = lse is None
    if hand_made:
        lse, x = make_inputs(dtype, hq, hkv, d, chunks, rows, gen)
    out = torch.zeros(rows, hq * d, dtype=dtype)
    run = testing.run_tasks(
        lambda pk, t: pk.paged_attention_split_kv_merge_layer(
            lse=t["lse"],
            output_tmp=t["x"],
            output=t["out"],
            attention_params=(hq, d),
            grid_dim=(slots, hkv, 1),
            block_dim=testing.worker_block_dim(target_cc),
        ),
        {"lse": lse, "x": x, "out": out},
        target_cc=target_cc,
        params={
            "max_num_batched_tokens": rows,
            "max_num_batched_requests": slots,
            "meta_tensors": meta_rows(new, slots),
        },
    )
    expected = ref.merge(lse, x, hq, d)
    tol = testing.tol_attention_merge(
        dtype, d, ref.from_split(lse, chunks), ref.from_split(x, chunks), [None] * chunks, [None] * chunks
    )
    run.check("out", expected, tol)
    empty = torch.stack(ref.from_split(lse, chunks)).isinf().all(0).repeat_interleave(d, dim=1)
    empty[sum(new) :] = False
    ok = bool((run.outputs["out"][empty] == 0).all())
    testing.say(
        f"EMPTY {run.layer.name}[kernel,{str(dtype)[6:]}]: {int(empty.sum())} outputs whose every chunk is "
        f"-inf: exactly 0 {'PASS' if ok else 'FAIL'}"
    )
    assert ok and (int(empty.sum()) > 0 or not hand_made), "a row whose every chunk is -inf must give 0"
    return run


# (dtype, Hq, Hkv, D, chunks, new tokens, cached tokens, request slots, max_seq, q_scale, target_cc): chunks
# of 16 keys; request 0's 60 keys fill all four chunks (the last one 12), request 1's 13 only chunk 0
SPLIT_CASE = (torch.bfloat16, 8, 2, 64, 4, (5, 3), (55, 10), 3, 64, 100.0, 80)


def run_merge_of_split(dtype, hq, hkv, d, chunks, new, cached, slots, max_seq, q_scale, target_cc):
    """The merge on what the split makes of a real batch, with logits far beyond exp2f's range."""
    gen = testing.generator(offset=7 * d + hq + chunks)
    lse, x = split_inputs(dtype, hq, hkv, d, chunks, new, cached, slots, max_seq, q_scale, gen)
    live = lse[: sum(new)]
    whole = int(torch.stack(ref.from_split(live, chunks)).isinf().all(0).sum())     # the split cannot: 0
    finite = live[live > -math.inf]
    testing.say(f"SPLIT_INPUTS merge[{str(dtype)[6:]}]: lse of {live.numel()} (row, chunk, head) from the "
                f"split reference in [{float(finite.min()):.1f}, {float(finite.max()):.1f}] log2 units, "
                f"{int((live == -math.inf).sum())} empty chunks, {whole} rows with every chunk empty")
    assert whole == 0 and float(finite.max()) > 128, "not the intended inputs: an empty row or small lse"
    return run_merge(dtype, hq, hkv, d, chunks, new, slots, target_cc, lse=lse, x=x)


def test_paged_attention_split_kv_merge_of_the_splits_outputs():
    run_merge_of_split(*SPLIT_CASE)


@pytest.mark.parametrize("dtype,hq,hkv,d,chunks,new,slots,target_cc", testing.case_params(CASES, quick=QUICK))
def test_paged_attention_split_kv_merge_kernel(dtype, hq, hkv, d, chunks, new, slots, target_cc):
    run_merge(dtype, hq, hkv, d, chunks, new, slots, target_cc)


def test_paged_attention_split_kv_merge_bad_rows(monkeypatch):
    """Request rows past the batch (qo_indptr_buffer [0, 5, 12, 12], 9 rows): a ValueError naming the entry
    before the launch (mirage/mpk/meta.py); written after that check, a task failure naming the entry and
    its value (the kernel's own bound), never an access outside the tiles."""
    from mirage.mpk.errors import MPKRuntimeError
    from mirage.mpk.testing import kernel

    bad = torch.tensor([0, 5, 12, 12], dtype=torch.int32)
    monkeypatch.setattr(kernel, "check_batch", lambda p, m, checked=kernel.check_batch: checked(p, {
        **m, "qo_indptr_buffer": bad}))
    with pytest.raises(ValueError, match=r"meta tensor 'qo_indptr_buffer'\[2\] = 12 > max_num_batched_tokens "
                                         r"\(9\)"):
        run_merge(*QUICK)
    monkeypatch.undo()
    checked = kernel.check_batch
    monkeypatch.setattr(kernel, "check_batch", lambda p, m: (checked(p, m), m["qo_indptr_buffer"].copy_(bad)))
    with pytest.raises(MPKRuntimeError) as e:
        run_merge(*QUICK)
    msg = str(e.value)
    assert "paged_attention_split_kv_merge: meta tensor 'qo_indptr_buffer'[2] = 12 gives the request rows " \
           "outside the tiles (rows 9)" in msg, msg
    testing.say(f"BAD_LAYOUT paged_attention_split_kv_merge (rows past the batch, after the check): "
                f"{msg.splitlines()[0][:200]} PASS")


def test_paged_attention_split_kv_merge_refuses_bad_arguments():
    """Shapes, dtypes, head counts and grids are checked in Python, naming layer, tensor and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True, max_num_batched_tokens=8, max_num_batched_requests=2)
    a = lambda shape, dtype=torch.bfloat16, n=[0]: pk.attach_input(  # noqa: E731
        torch.zeros(shape, dtype=dtype), name=f"t{n.append(0) or len(n)}"
    )
    lse, x, out = a((8, 16, 2), torch.float32), a((8, 16 * 64, 2)), a((8, 8 * 64))
    base = dict(
        lse=lse, output_tmp=x, output=out, attention_params=(8, 64), grid_dim=(2, 2, 1), block_dim=(128, 1, 1)
    )
    cases = [
        (dict(lse=a((8, 16, 2))), r"tensor 't\d+' \(lse\) has dtype bfloat16, expected float32"),
        (dict(lse=a((8, 15, 2), torch.float32)), r"lse 't\d+' dim 1 is 15, not num_kv_chunks \* 4"),
        (dict(output_tmp=a((8, 8 * 64, 2))), r"tensor 't\d+' \(output_tmp\) dim 1 is 512, expected 1024"),
        (dict(output=a((8, 8 * 64), torch.float16)), r"\(output\) has dtype float16, expected bfloat16"),
        (dict(output=a((8, 4 * 64))), r"\(output\) dim 1 is 256, expected 512"),
        (
            dict(attention_params=(8, 96)),
            r"head_dim 96 \(attention_params\[1\]\) is not supported; the kernel takes "
            r"head_dim 64, 128",
        ),
        (dict(attention_params=(5, 64)), r"5 query heads for 2 KV heads"),
        (dict(attention_params=(8,)), r"attention_params must be \(num_q_heads, head_dim\)"),
        (
            dict(grid_dim=(2, 2, 2)),
            r"grid_dim must be \(max_num_batched_requests, num_kv_heads, 1\) = \(2, 2, 1\)",
        ),
        (
            dict(lse=a((4, 16, 2), torch.float32)),
            r"lse 't\d+' has 4 rows, fewer than max_num_batched_tokens=8",
        ),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=f"layer 'paged_attention_split_kv_merge_0': .*{message}"):
            pk.paged_attention_split_kv_merge_layer(**{**base, **change})
    testing.say(
        f"BAD_INPUT paged_attention_split_kv_merge_layer: {len(cases)} bad calls refused, each naming "
        f"layer, tensor and sizes PASS"
    )
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
