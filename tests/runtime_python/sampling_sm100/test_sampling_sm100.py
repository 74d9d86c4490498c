"""sampling_sm100_layer's kernel alone (csrc/tasks/sampling_sm100.cuh; testing.run_tasks,
docs/kernel_tests.md): each task on one emulated block, everything outside its tiles poisoned (it writes
only its output tile, reads only its input tiles, independently of its threads' order, and writes every
id).

The ids are compared exactly with the reference's draw (pytorch_reference.py: Philox4x32-10, checked
against Random123's known answers, and the Gumbel transform in float64), row by row keyed by its request
and position from a hand-made batch layout (qo_indptr_buffer, request_ids, step: slot 0 serves request
2, so a kernel keyed by the slot fails; a padding row past the batch). A row whose two best
scores differ by less than 1e-4 accepts either id (reference.expected: fp32 rounding could swap them).
Rows: random logits, masked ones (all but 3 tokens -inf: the draw is one of the 3), all -inf (id 0), a
NaN (the first NaN), +inf (that token). Two seeds, one above 2^32 (the key's high word), must draw
different ids; the grid splits the rows (3 tasks of 2, and one-row tiles); the vocabularies real models
use (151,936, 153,600); a strided view; both worker blocks (128 and 256 threads).
Run: python tests/runtime_python/sampling_sm100/test_sampling_sm100.py   (or pytest this file)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
SEEDS = (42, (1 << 40) + 7)
# (batch, vocab, grid.x, chunks (request, first position, count) in slot order, requests, slots)
SHAPES = [(8, 1000, 1, [(2, 5, 3), (0, 0, 4)], 3, 3),      # slot 0 is request 2; row 7 past the batch
          (6, 100, 3, [(1, 9, 2), (0, 0, 4)], 2, 2),       # 3 tasks of 2 rows, vocab below the block
          (6, 100, 6, [(0, 30, 6)], 1, 1),                 # one-row tiles
          (1, 151936, 1, [(0, 17, 1)], 1, 1),              # Qwen3's vocabulary
          (2, 153600, 2, [(1, 3, 1), (0, 8, 1)], 2, 2)]    # padded, a row per task
KINDS = ["random", "masked", "random", "neg_inf", "nan", "pos_inf", "random", "random"]
QUICK = (torch.bfloat16, 0, 90)

block_dim = testing.worker_block_dim


def logits(batch, vocab, dtype, gen):
    x = testing.randn((batch, vocab), dtype, gen, scale=2.0)
    for b in range(batch if batch > 2 else 0):
        kind = KINDS[b % len(KINDS)]
        if kind == "masked":       # all but 3 tokens masked: a draw outside them is a bug
            keep = x[b, [5, vocab // 2, vocab - 1]].clone()
            x[b] = -float("inf")
            x[b, [5, vocab // 2, vocab - 1]] = keep
        elif kind == "neg_inf":
            x[b] = -float("inf")
        elif kind == "nan":
            x[b, [vocab // 3, vocab - 2]] = float("nan")
        elif kind == "pos_inf":
            x[b, vocab // 4] = float("inf")
    return x


def batch_meta(chunks, requests, slots, batch, max_seq=64):
    """The meta tensors the tasks read, laid out by hand: qo_indptr_buffer, request_ids, step."""
    qo, ids, step = [0], [], [0] * requests
    for r, p, n in chunks:
        qo.append(qo[-1] + n)
        ids.append(r)
        step[r] = p
    qo += [qo[-1]] * (slots + 1 - len(qo))
    ids += [-1] * (slots - len(ids))
    meta = {"qo_indptr_buffer": torch.tensor(qo, dtype=torch.int32),
            "request_ids": torch.tensor(ids, dtype=torch.int32),
            "step": torch.tensor(step, dtype=torch.int32),
            "prompt_lengths": torch.ones(requests, dtype=torch.int32)}
    return {"max_seq_length": max_seq, "max_num_batched_tokens": batch, "max_num_batched_requests": slots,
            "max_num_pages": 4 * slots, "meta_tensors": meta}


def run_kernel(x, seed, grid, params, target_cc, out=None, name="out"):
    out = torch.zeros(x.shape[0], 1, dtype=torch.int64) if out is None else out
    run = testing.run_tasks(lambda pk, t: pk.sampling_sm100_layer(
        logits=t["x"], output=t["out"], grid_dim=(grid, 1, 1), block_dim=block_dim(target_cc), seed=seed),
        {"x": x, "out": out}, target_cc=target_cc, params=params)
    return run, out


def check_draw(name, got, x, seed, keys):
    want, near = ref.expected(got, x, seed, *keys)
    if near:
        testing.say(f"NEAR_TIE {name}: {near} row(s) with the two best scores within {ref.GAP}: either id "
                    f"accepted")
    testing.assert_equal(name, got, want)


@pytest.mark.parametrize("dtype,shape,target_cc", testing.case_params(
    [(d, s, cc) for d in DTYPES for s in range(len(SHAPES)) for cc in TARGETS], quick=QUICK))
def test_sampling_sm100_kernel(dtype, shape, target_cc):
    batch, vocab, grid, chunks, requests, slots = SHAPES[shape]
    x = logits(batch, vocab, dtype, testing.generator(offset=batch * 7 + vocab + grid))
    params, keys = batch_meta(chunks, requests, slots, batch), ref.batch_keys(chunks, batch)
    draws = []
    for seed in SEEDS:
        run, out = run_kernel(x, seed, grid, params, target_cc)
        check_draw(f"{run.layer.name}.out[kernel,{str(dtype)[6:]},{batch}x{vocab},grid={grid},seed={seed},"
                   f"cc={target_cc}]", out, x, seed, keys)
        draws.append(out)
    finite = ~torch.isinf(x).all(-1) & ~torch.isnan(x).any(-1) & ~torch.isposinf(x).any(-1)
    assert vocab > 1000 or not torch.equal(draws[0][finite], draws[1][finite]), \
        "two seeds drew the same ids in every random row: the seed is ignored"
    if batch > 2:
        assert int(draws[0][1]) in (5, vocab // 2, vocab - 1), "a masked token was drawn"
        assert int(draws[0][3]) == 0 and int(draws[0][4]) == vocab // 3 and int(draws[0][5]) == vocab // 4


@pytest.mark.parametrize("target_cc", TARGETS)
def test_sampling_sm100_kernel_strided(target_cc):
    """x a column block of a wider matrix (row stride 3 * vocab), the ids a column of an int64 matrix:
    a kernel taking one tensor's strides for the other's fails."""
    wide = testing.randn((4, 3 * 300), torch.float32, testing.generator(offset=5), scale=2.0)
    x = wide[:, 300:600]
    chunks = [(0, 2, 4)]
    out = torch.zeros(4, 3, dtype=torch.int64)
    run, _ = run_kernel(x, 7, 2, batch_meta(chunks, 1, 1, 4), target_cc, out=out[:, 1:2])
    check_draw(f"{run.layer.name}.out[strided,cc={target_cc}]", out[:, 1:2], x, 7, ref.batch_keys(chunks, 4))
    assert bool((out[:, [0, 2]] == 0).all())


def test_sampling_sm100_generator_is_philox4x32_10():
    """The reference's generator gives Random123's known answers (so the kernel, equal to it on every
    compared row, draws from the published Philox4x32-10), and the transform is finite at both ends:
    32 zero bits and 32 one bits give g = -3.13 and 22.87 (a transform taking u = w / 2^32 gives inf
    there)."""
    ref.check_kat()
    g = ref.gumbel(torch.tensor([0, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1]))
    assert bool(torch.isfinite(g).all())
    assert abs(float(g[0]) + 3.1300) < 1e-3 and abs(float(g[3]) - 22.8739) < 1e-3
    testing.say(f"KAT sampling_sm100 generator: {len(ref.KAT)} Random123 philox4x32-10 vectors PASS; "
                f"gumbel(0) = {float(g[0]):.4f}, gumbel(2^32 - 1) = {float(g[3]):.4f} finite PASS")


def test_sampling_sm100_bad_request_id_fails_the_task(monkeypatch):
    """A request_ids entry past the step meta tensor: refused before the launch (ValueError naming the
    entry, mirage/mpk/meta.py); set after that check, it fails the task with its message, naming the entry
    and its value (never a read outside step)."""
    from mirage.mpk.errors import MPKRuntimeError
    from mirage.mpk.testing import kernel

    params = batch_meta([(0, 0, 2)], 1, 1, 2)
    params["meta_tensors"]["request_ids"][0] = 5
    x = testing.randn((2, 50), torch.float32, testing.generator(offset=9))
    said = r"meta tensor 'request_ids'\[0\] = 5 > total_num_requests - 1 \(0\)"
    with pytest.raises(ValueError, match=said):
        run_kernel(x, 1, 1, params, 80)
    params["meta_tensors"]["request_ids"][0] = 0
    checked = kernel.check_batch
    monkeypatch.setattr(kernel, "check_batch", lambda p, m: (checked(p, m), m["request_ids"].fill_(5)))
    failed = (r"sampling_sm100: meta tensor 'request_ids'\[0\] = 5 names a request outside the step meta "
              r"tensor \(total_num_requests 1\)")
    with pytest.raises(MPKRuntimeError, match=failed):
        run_kernel(x, 1, 1, params, 80)


def test_sampling_sm100_refuses_bad_arguments():
    """Shapes, dtypes, grids and seeds are checked in Python, naming layer, tensor and sizes."""
    from mirage.mpk.persistent_kernel import PersistentKernel

    pk = PersistentKernel(test_mode=True, max_num_batched_tokens=4)
    x = pk.attach_input(torch.zeros(4, 10), name="x")
    xi = pk.attach_input(torch.zeros(4, 10, dtype=torch.int32), name="xi")
    ids = pk.attach_input(torch.zeros(4, 1, dtype=torch.int64), name="ids")
    ids32 = pk.attach_input(torch.zeros(4, 1, dtype=torch.int32), name="ids32")
    seed32 = pk.attach_input(torch.zeros(1, dtype=torch.int32), name="seed32")
    seed2 = pk.attach_input(torch.zeros(2, dtype=torch.int64), name="seed2")
    cases = [
        (dict(logits=xi), r"tensor 'xi' \(logits\) has dtype int32, expected bfloat16 or float16 or float32"),
        (dict(output=ids32), r"tensor 'ids32' \(output\) has dtype int32, expected int64"),
        (dict(grid_dim=(3, 1, 1)),
         r"tensor 'x' \(logits\) dim 0 \(4\) is not divisible by grid_dim.x=3; grid sizes that divide 4: "
         r"1, 2, 4"),
        (dict(grid_dim=(1, 2, 1)), r"grid_dim.y=2 does not split output 'ids'"),
        (dict(seed=-1), r"seed must be an int in \[0, 2\^63\) or an attached one-element int64 tensor, "
                        r"got -1"),
        (dict(seed=True), r"seed must be an int in \[0, 2\^63\) .* got True"),
        (dict(seed=seed32), r"tensor 'seed32' \(seed\) has dtype int32, expected int64"),
        (dict(seed=seed2), r"tensor 'seed2' \(seed\) dim 0 is 2, expected 1"),
    ]
    for change, message in cases:
        kw = {**dict(logits=x, output=ids, grid_dim=(1, 1, 1), block_dim=(128, 1, 1)), **change}
        with pytest.raises(ValueError, match=f"layer 'sampling_sm100_0': {message}"):
            pk.sampling_sm100_layer(**kw)
    testing.say(f"BAD_INPUT sampling_sm100_layer: {len(cases)} bad calls refused, each naming layer, "
                f"tensor and sizes PASS")
    pk.finalize()


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
