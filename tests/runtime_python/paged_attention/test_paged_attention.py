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
from mirage.mpk.errors import MPKRuntimeError
from mirage.mpk.layers.paged_attention import tensor_core_rows

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


def run_unchecked(dtype, hq, hkv, d, ps, new, cached, opts, empty, target_cc):
    """The case's kernel-level run (its footprint checks only) and what it is compared with: (run, tensors,
    tensors before, meta, reference, budget, rows on the tensor cores)."""
    gen = testing.generator(offset=hq * 100 + d + ps + sum(new) + 7 * sum(cached) + opts)
    t, meta, params = inputs(dtype, hq, hkv, d, ps, new, cached, opts, empty, gen)
    before = {k: v.clone() for k, v in t.items()}
    slots = len(new) + empty
    run = testing.run_tasks(lambda pk, dt: call(pk, dt, hkv, slots, target_cc), t, target_cc=target_cc,
                            params=params)
    expect = ref.attention(before["qkv"], before["k_cache"], before["v_cache"], meta, hq,
                           t.get("q_norm"), t.get("k_norm"), t.get("cos"), t.get("sin"))
    assert bool(run.covered["out"].any(-1).eq(expect["rows"]).all()), "the live rows are not the batch's"
    tc = tensor_core_rows(dtype, meta["qo_indptr_buffer"], hq // hkv, t["out"].shape[0])
    tol = testing.tol_attention(dtype, d, expect["keys"], expect["value_scale"], expect["score_scale"],
                                expect["score_var"], tensor_cores=tc[:, None])
    return run, t, before, meta, expect, tol, tc


def run_case(dtype, hq, hkv, d, ps, new, cached, opts, empty, target_cc):
    run, t, before, meta, expect, tol, tc = run_unchecked(dtype, hq, hkv, d, ps, new, cached, opts, empty,
                                                          target_cc)
    live = int(expect["rows"].sum())
    testing.say(f"PATH {run.layer.name}: {int(tc.sum())} of {live} rows on the tensor cores")
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


def setter(key, *values):
    """A change to the meta tensors: key[0..] = values."""
    return lambda m: m[key].__setitem__(slice(0, len(values)), torch.tensor(values, dtype=torch.int32))


# (what breaks the layout of CASES[0] (1 slot, 7 rows of 9, 3 pages), the change, what the check before the
# launch says (mirage/mpk/meta.py; None: values each within bounds), what the task says when the value
# changes after that check (csrc/tasks/paged_attention.cuh)): no layout reads outside the tensors
BAD_LAYOUTS = [
    ("a page index outside the cache", setter("paged_kv_indices_buffer", 99),
     "meta tensor 'paged_kv_indices_buffer'[0] = 99 > max_num_pages - 1 (2)",
     "meta tensor 'paged_kv_indices_buffer'[0] = 99 is a page index outside the KV cache (pages 3)"),
    ("rows past the input", setter("qo_indptr_buffer", 0, 50),
     "meta tensor 'qo_indptr_buffer'[1] = 50 > max_num_batched_tokens (7)",
     "meta tensor 'qo_indptr_buffer'[1] = 50 gives the request rows outside the input tile (rows 9)"),
    ("a page list past the end", setter("paged_kv_indptr_buffer", 0, 4),
     "meta tensor 'paged_kv_indptr_buffer'[1] = 4 > max_num_pages (3)",
     "meta tensor 'paged_kv_indptr_buffer'[1] = 4 leaves the page list (max_num_pages 3)"),
    # issue 31: the process died by SIGSEGV (2^29) or read heap memory (100000)
    ("the page list at 2^29", setter("paged_kv_indptr_buffer", 2**29, 2**29 + 1),
     "meta tensor 'paged_kv_indptr_buffer'[0] = 536870912, expected 0 (an indptr starts at 0)",
     "meta tensor 'paged_kv_indptr_buffer'[0] = 536870912 leaves the page list (max_num_pages 3)"),
    ("the page list at 100000", setter("paged_kv_indptr_buffer", 100000, 100001),
     "meta tensor 'paged_kv_indptr_buffer'[0] = 100000, expected 0",
     "meta tensor 'paged_kv_indptr_buffer'[0] = 100000 leaves the page list (max_num_pages 3)"),
    ("fewer tokens in the pages than new ones", setter("paged_kv_last_page_len_buffer", 3), None,
     "meta tensor 'paged_kv_last_page_len_buffer'[0] = 3 with its pages: the request's pages hold fewer "
     "tokens than it has new ones"),
]
IDS = [b[0].replace(" ", "_") for b in BAD_LAYOUTS]


def run_bad(change, after_check: bool):
    """CASES[0]'s kernel-level run with `change` made before the run (the check sees it) or right after the
    check passed (a value corrupted while the launch is under way: the task must catch it)."""
    from mirage.mpk.testing import kernel

    gen = testing.generator(offset=5)
    t, meta, params = inputs(*CASES[0], gen)
    if not after_check:
        change(meta)
        return testing.run_tasks(lambda pk, dt: call(pk, dt, 2, 1, 80), t, params=params)
    checked = kernel.check_batch

    def check_then_corrupt(p, m):
        checked(p, m)
        change(m)
    kernel.check_batch = check_then_corrupt
    try:
        return testing.run_tasks(lambda pk, dt: call(pk, dt, 2, 1, 80), t, params=params)
    finally:
        kernel.check_batch = checked


@pytest.mark.parametrize("what,change,said,failed", BAD_LAYOUTS, ids=IDS)
def test_paged_attention_kernel_level_meta_checked_before_the_launch(what, change, said, failed):
    """A caller's batch layout (a kernel-level run has no meta pass) with a value out of bounds: ValueError
    naming the meta tensor, the entry, the value and the bound, before any task runs."""
    with pytest.raises(ValueError if said else MPKRuntimeError) as e:
        run_bad(change, after_check=False)
    msg = str(e.value)
    assert (said or failed) in msg, msg
    testing.say(f"BAD_META paged_attention ({what}): {type(e.value).__name__}: {msg.splitlines()[0][:150]} "
                f"PASS")


@pytest.mark.parametrize("what,change,said,failed", BAD_LAYOUTS[:3] + BAD_LAYOUTS[-1:],
                         ids=IDS[:3] + IDS[-1:])
def test_paged_attention_kernel_refuses_a_layout_it_cannot_trust(what, change, said, failed):
    """The value changes after the check (the kernel's own bounds): the task fails with MPKRuntimeError naming
    the task, the meta tensor, the entry and the value; nothing outside the tensors is read (the guard would
    say). The far page lists (2^29, 100000) run in a subprocess: test_..._far_page_list_is_a_task_failure."""
    with pytest.raises(MPKRuntimeError) as e:
        run_bad(change, after_check=True)
    msg = str(e.value)
    assert failed in msg and "paged_attention_0" in msg, msg
    testing.say(f"BAD_LAYOUT paged_attention ({what}): {msg.splitlines()[0][:200]} PASS")


FAR = """
import sys
sys.path.insert(0, {folder!r})
import test_paged_attention as t
for what, change, said, failed in t.BAD_LAYOUTS[4:2:-1]:
    try:
        t.run_bad(change, after_check=True)
        print("NO ERROR", what, flush=True)
    except Exception as e:
        print(type(e).__name__, str(e).splitlines()[0], flush=True)
"""


def far(tmp_path, control: bool):
    """The issue's two page lists, corrupted after the check, in a subprocess (a crash must not end the
    suite); control: against a copy of the kernel without its page-range check."""
    import os
    import subprocess

    code = FAR.format(folder=os.path.dirname(os.path.abspath(__file__)))
    run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,  # noqa: E731
                                 timeout=600)
    if not control:
        return run()
    with testing.mutated_kernel(tmp_path, "paged_attention.cuh",
                                "q.first_page < 0 || q.num_pages < 0 || q.first_page + q.num_pages > pages",
                                "false"):
        return run()            # (MPK_CSRC_DIR names the copy while it runs)


def test_paged_attention_far_page_list_is_a_task_failure(tmp_path):
    """Issue 31's page lists at 2^29 and at 100000, changed after the check: a named task failure each."""
    proc = far(tmp_path, control=False)
    lines = [line for line in proc.stdout.splitlines() if line]
    assert proc.returncode == 0 and len(lines) == 2, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    for line, (what, _, _, failed) in zip(lines, BAD_LAYOUTS[4:2:-1]):
        assert line.startswith("MPKRuntimeError") and failed in line, line
        testing.say(f"BAD_LAYOUT paged_attention ({what}, after the check): {line[:200]} PASS")


def test_paged_attention_far_page_list_control(tmp_path):
    """Negative control: without the kernel's page-range check the same runs read outside the page list.
    At 100000 (400 KB past it) the read lands in a guard page of the meta tensor's guarded copy: named, but
    as a footprint error, not the task's own failure; at 2^29 (2 GiB past) it is beyond any guard page and
    the process dies by SIGSEGV, as in issue 31."""
    proc = far(tmp_path, control=True)
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if "leaves the page list" in line], proc.stdout
    assert lines and lines[0].startswith("MPKFootprintError") and "read outside meta tensor " \
        "'paged_kv_indices_buffer'" in lines[0] and "a guard page trapped it" in lines[0], proc.stdout
    died = proc.returncode == -11 or (len(lines) == 2 and "leaves" not in lines[1])
    assert died, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    testing.say(f"CONTROL paged_attention without the page-range check: 100000: {lines[0][:200]}; 2^29: exit "
                f"{proc.returncode} PASS")


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
