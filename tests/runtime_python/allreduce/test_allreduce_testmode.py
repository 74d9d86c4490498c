"""allreduce_layer across MPI ranks: every rank holds a different random input; each gets the sum.

Run: mpirun -n 4 python tests/runtime_python/allreduce/test_allreduce_testmode.py
(testing.run_cases_as_script, as every layer file: the allreduce's TP is "reduce", so after each
case World.verify also checks the output bit-identical across ranks). pytest runs that command
for N = 2 and 4 as a subprocess (test_mode/test_layers_multirank.py, which also calls
check_mpirun_output below) and runs the one-rank cases in process (world_size 1: the sum of one
term); `python test_allreduce_testmode.py` runs every case on one rank.

Per case, on every rank: inputs from a generator seeded per rank (they differ across ranks:
checked), the reference sums the allgathered inputs in float64, the budget is a sum of W
terms (tolerance(dtype, k=W, scale=sum_r |x_r|)), and the output's sha256 is gathered:
every rank's output must be bit-identical. Each case launches twice (pk() twice: the
second pass reuses the buffer slots, so a fast rank must wait for slow readers), several
workers, schedule jitter. The offline case runs 4 passes of allreduce -> copy back into
the input, so each pass sums the previous pass's result (expected W^3 * sum_r x_r): a
slot overwritten before a slow peer read it would show. The shared-buffer case chains two
allreduce layers on one buffer (uses 0 and 1 of each slot in a pass).
"""
import functools

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

# (dtype, batch, hidden, grid.x): all dtypes; a non-power-of-two split; one-row tiles; grid 1
CASES = [(torch.bfloat16, 4, 96, 3), (torch.float16, 2, 64, 4), (torch.float32, 4, 96, 3),
         (torch.float32, 1, 20, 5), (torch.float32, 3, 32, 1)]
LAUNCHES = 2
OFFLINE_PASSES = 4
BLOCK = (128, 1, 1)


def build(world, dtype, batch, hidden, grid, jitter, offline=False, shared=False):
    rank, size = world.rank, world.size
    params = testing.cpu_config(jitter_seed=jitter, **world.params)
    if offline:     # MPK's decode loop: one pass per token after the prompt's
        params.update(test_mode=False, max_seq_length=OFFLINE_PASSES + 1, max_num_pages=OFFLINE_PASSES + 1)
    pk = PersistentKernel(**params)
    gen = testing.generator(offset=1000 * rank + hidden)          # a different input per rank
    x = testing.randn((batch, hidden), dtype, gen)
    out = torch.zeros(batch, hidden, dtype=dtype)
    x_dt, out_dt = pk.attach_input(x, name="x"), pk.attach_input(out, name="out")
    buf = pk.new_tensor((size, batch, hidden), dtype=dtype, name="buf", io_category="nvshmem_tensor")
    if shared:      # two allreduce layers reuse one buffer (as MPK's models do): its slots' uses 0 and 1
        mid = pk.new_tensor((batch, hidden), dtype=dtype, name="mid")
        pk.allreduce_layer(input=x_dt, buffer=buf, output=mid, grid_dim=(grid, 1, 1), block_dim=BLOCK)
        x_dt = mid
    pk.allreduce_layer(input=x_dt, buffer=buf, output=out_dt, grid_dim=(grid, 1, 1), block_dim=BLOCK)
    if offline:     # feed the sum back: the next pass sums it again
        pk.identity_layer(input=out_dt, output=x_dt, grid_dim=(batch, 1, 1), block_dim=BLOCK)
    return pk, x, out


def check_identical(world, name: str, out: torch.Tensor) -> None:
    """Every rank's output has the same bytes (sha256 gathered from all ranks)."""
    digest = testing.digest(out)
    digests = world.gather(digest)
    with testing.on_all_ranks(f"{name} bit-identical across ranks"):
        assert len(set(digests)) == 1, f"{name}: outputs differ across ranks: {digests}"
    testing.say(f"IDENTICAL {name} sha256={digest} on all {len(digests)} rank(s) PASS")


def run_case(dtype, batch, hidden, grid, jitter, output_dir=None, world=testing.ONE_RANK):
    size = world.size
    pk, x, out = build(world, dtype, batch, hidden, grid, jitter)
    pk.compile(output_dir=output_dir)
    inputs = world.gather(x)
    with testing.on_all_ranks("inputs differ across ranks"):
        assert all(not torch.equal(inputs[0], other) for other in inputs[1:]), "ranks drew the same input"
    expected = ref.allreduce(inputs)
    tol = testing.tolerance(dtype, k=size, scale=sum(t.double().abs() for t in inputs))
    name = f"allreduce[{str(dtype)[6:]},W={size},{batch}x{hidden},grid={grid},jitter={jitter}]"
    for launch in range(LAUNCHES):
        pk()
        with testing.on_all_ranks(f"{name} launch {launch}"):
            testing.check_output(f"{name}.launch{launch}", out, expected, tol, pk.layers[0].checks, (x,),
                                 pk=pk)
        check_identical(world, f"{name}.launch{launch}", out)
    pk.finalize()
    return pk


def run_chained(jitter=7, offline=True, output_dir=None, world=testing.ONE_RANK):
    """offline: 4 passes of allreduce -> copy back into x; else one pass of two allreduce layers
    sharing one buffer. Either way each later sum adds W copies of the last result."""
    rank, size = world.rank, world.size
    dtype, batch, hidden, grid = torch.float32, 4, 48, 3
    pk, x, out = build(world, dtype, batch, hidden, grid, jitter, offline, shared=not offline)
    pk.compile(output_dir=output_dir)
    inputs = world.gather(x.clone())
    pk()
    pk.wait()       # on CUDA outside test mode pk() only enqueues the launch (a no-op elsewhere)
    sums = pk.passes if offline else 2
    kind = "offline" if offline else "shared_buffer"
    name = f"allreduce_{kind}[float32,W={size},{batch}x{hidden},grid={grid},passes={pk.passes},sums={sums}]"
    with testing.on_all_ranks(f"{name} pass count"):
        assert pk.passes == (OFFLINE_PASSES if offline else 1), f"{name}: unexpected pass count"
    growth = float(size) ** (sums - 1)
    expected = ref.allreduce(inputs) * growth
    # chained sums compose their budgets: `sums` sums of W terms, relative to the final scale
    scale = sum(t.double().abs() for t in inputs) * growth
    tol = testing.tolerance(dtype, k=size * sums, scale=scale)
    with testing.on_all_ranks(name):
        testing.check_output(name, out, expected, tol, pk.layers[0].checks, (inputs[rank],), pk=pk)
    check_identical(world, name, out)
    pk.finalize()
    return pk


def _jitter(dtype, case) -> int:
    return 11 + CASES.index((dtype, *case))                    # a different schedule per case


CHAINED = [functools.partial(run_chained, offline=True), functools.partial(run_chained, offline=False)]


def check_mpirun_output(out: str, ranks: int) -> None:
    """What the allreduce adds to test_layers_multirank's checks of an `mpirun -n ranks` run: per rank,
    LAUNCHES evidence lines per case and one per chained run, each launch's output bit-identical across
    ranks, the offline run's 4 passes and the shared buffer at W = ranks."""
    for r in range(ranks):
        evidence = testing.rank_lines(out, r, "EVIDENCE ")
        want = LAUNCHES * len(CASES) + len(CHAINED)
        assert len(evidence) == want, f"rank {r}: {len(evidence)} EVIDENCE lines, expected {want}"
        identical = testing.rank_lines(out, r, "IDENTICAL ")
        assert all(f"on all {ranks} rank(s) PASS" in line for line in identical), f"rank {r}: {identical}"
        own = [ln for ln in identical if ".launch" in ln or " allreduce_" in ln]     # not World.verify's
        assert len(own) == len(evidence), f"rank {r}: {len(own)} IDENTICAL lines of the test's own"
        assert any(f"W={ranks}," in ln and "passes=4" in ln for ln in evidence)
        assert any(f"shared_buffer[float32,W={ranks}," in ln for ln in evidence)


@pytest.mark.parametrize("case", CASES[2:4], ids=lambda c: f"{c[1]}x{c[2]}-grid{c[3]}")
def test_allreduce_one_rank(case, tmp_path):
    run_case(*case, jitter=3, output_dir=str(tmp_path))


@pytest.mark.parametrize("offline", [True, False], ids=["offline_4_passes", "shared_buffer"])
def test_allreduce_one_rank_chained(offline):
    run_chained(offline=offline)


if __name__ == "__main__":
    testing.run_cases_as_script("allreduce", run_case, None, CASES, _jitter, after=CHAINED)
