"""Negative controls: each injected fault is caught by the check that exists for it.

The graph: x [6, 96] -> rmsnorm (grid 3: 2-row tiles) -> y -> linear W [48, 96] (grid 4)
-> z [6, 48] -> elementwise_add with r (grid 2 x 2) -> out [6, 48]. Every test runs the
same graph with the fault off first and shows it passes, then with the fault on:

  skip             -> the unwritten-element check (pk() raises MPKUnwrittenError)
  perturb          -> assert_close, for an amount a few times the fp32 budget, which a loose
                      absolute threshold like MPK's atol=0.05 would let through
  no_trigger       -> the watchdog (MPKHangError naming the starved layer and event)
  wrong_tile       -> the unwritten-element check, naming the vacated tile
  drop_dependency  -> a mismatch under schedule jitter within a bounded number of seeds

Run: python tests/runtime_python/test_mode/test_negative_controls.py   (or pytest this file)
"""
import os
import re
import time

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKHangError, MPKUnwrittenError
from mirage.mpk.faults import Fault
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
REF = {name: testing.load_reference(os.path.join(HERE, "..", name, "pytorch_reference.py"))
       for name in ("rmsnorm", "linear", "elementwise_add")}
BLOCK = (128, 1, 1)
ROWS, HIDDEN, OUT = 6, 96, 48


def inputs(offset: int = 77):
    gen = testing.generator(offset=offset)
    return (testing.randn((ROWS, HIDDEN), torch.float32, gen), testing.randn((HIDDEN,), torch.float32, gen),
            testing.randn((OUT, HIDDEN), torch.float32, gen, scale=HIDDEN ** -0.5),
            testing.randn((ROWS, OUT), torch.float32, gen))


def build(x, w, W, r, **params) -> tuple[PersistentKernel, torch.Tensor]:
    """The graph on these inputs, compiled (not run): (pk, out). Also used by test_diagnosis.py."""
    pk = PersistentKernel(**params)
    out = torch.zeros(ROWS, OUT)
    xd, wd, Wd, rd = (pk.attach_input(t, name=n) for t, n in ((x, "x"), (w, "w"), (W, "W"), (r, "r")))
    yd = pk.new_tensor((ROWS, HIDDEN), dtype=torch.float32, name="y")
    zd = pk.new_tensor((ROWS, OUT), dtype=torch.float32, name="z")
    od = pk.attach_input(out, name="out")
    pk.rmsnorm_layer(input=xd, weight=wd, output=yd, grid_dim=(3, 1, 1), block_dim=BLOCK)
    pk.linear_layer(input=yd, weight=Wd, output=zd, grid_dim=(4, 1, 1), block_dim=BLOCK)
    pk.elementwise_add_layer(input_a=zd, input_b=rd, output=od, grid_dim=(2, 2, 1), block_dim=BLOCK)
    pk.compile()
    return pk, out


def run(fault=None, jitter=0, watchdog_s=30.0):
    """Build, compile and run the graph; return {tensor name: (kernel value, expected, budget)}.

    Each layer is checked against its reference applied to the kernel's own inputs, with that
    layer's budget: tight, and a consumer that read its input too early cannot hide."""
    x, w, W, r = inputs()
    pk, out = build(x, w, W, r, **testing.cpu_config(jitter_seed=jitter), watchdog_s=watchdog_s, fault=fault)
    try:
        pk()
    finally:
        pk.finalize()
    y, z = pk.get_tensor("y"), pk.get_tensor("z")
    return {
        "y": (y, REF["rmsnorm"].rmsnorm(x, w), testing.tol_rmsnorm(torch.float32, HIDDEN)),
        "z": (z, REF["linear"].linear(y, W),
              testing.tol_linear(torch.float32, HIDDEN, y.double().abs() @ W.double().abs().T)),
        "out": (out, REF["elementwise_add"].elementwise_add(z, r),
                testing.tol_elementwise(torch.float32, z.double().abs() + r.double().abs())),
    }


def check(results, label):
    for name, (actual, expected, tol) in results.items():
        testing.assert_close(f"{label}.{name}", actual, expected, tol)


def clean_run():
    results = run()
    for name, (actual, expected, tol) in results.items():
        testing.check_output(f"negative_controls.clean.{name}", actual, expected, tol)
    return results


def test_skip_is_caught_by_the_unwritten_check():
    clean_run()
    with pytest.raises(MPKUnwrittenError) as e:
        run(Fault("skip", "rmsnorm_0", (1, 0, 0)))
    print(f"CAUGHT skip: {e.value}")
    assert "layer 'rmsnorm_0' task (1, 0, 0): 192 of 192 elements of 'y'[2:4, 0:96] unwritten" in str(e.value)


def test_perturbation_at_the_edge_of_the_budget_is_caught():
    out, expected, tol = clean_run()["out"]
    c = testing.compare(out, expected, tol)
    # output tile (1, 1, 0) of the add is out[3:6, 24:48]; its element 5 is out[3, 29]
    allowed = float(c.allowed[3, 29])
    amount = 4 * allowed
    assert amount < 0.05, "the point: MPK's atol=0.05 would not see this"
    small = run(Fault("perturb", "elementwise_add_2", (1, 1, 0), amount=allowed / 4, element=5))
    check(small, "perturbed_below_budget")                               # inside the budget: passes
    fault = Fault("perturb", "elementwise_add_2", (1, 1, 0), amount=amount, element=5)
    bad, expected, tol = run(fault)["out"]
    assert torch.allclose(bad.double(), expected, atol=0.05, rtol=0), "MPK's check misses it"
    with pytest.raises(AssertionError, match=r"Mismatched elements: 1 / 288") as e:
        testing.assert_close("perturbed", bad, expected, tol)
    assert "First mismatch at (3, 29)" in str(e.value)
    print(f"CAUGHT perturb by {amount:.3g} (4x the {allowed:.3g} allowed at (3, 29); MPK atol 0.05)")


def test_perturbed_token_id_is_caught_exactly():
    """An int64 output (argmax's token ids) takes a perturb fault too, moved by the whole amount: the fault
    used not to link for integer outputs (csrc/runtime/fault.h had no from_float<int64_t>)."""
    x = testing.randn((4, 50), torch.float32, testing.generator(offset=3))
    want = torch.argmax(x, dim=-1, keepdim=True)
    pk = PersistentKernel(**testing.cpu_config(), fault=Fault("perturb", "argmax_0", amount=1, element=2))
    ids = torch.zeros(4, 1, dtype=torch.int64)
    pk.argmax_layer(input=pk.attach_input(x, name="x"), output=pk.attach_input(ids, name="ids"),
                    grid_dim=(1, 1, 1), block_dim=(128, 1, 1))
    pk.compile()
    pk()
    pk.finalize()
    assert (ids - want).flatten().tolist() == [0, 0, 1, 0], (ids, want)
    with pytest.raises(AssertionError, match="is not equal"):
        testing.assert_equal("perturbed_ids", ids, want)
    print("CAUGHT perturb of token id row 2 by 1: exact comparison")


def test_lost_trigger_is_caught_by_the_watchdog():
    clean_run()
    # Timed from the last progress (the task record), as the watchdog counts: the clock started
    # before the compile of this variant, with 5 s for it, which a loaded machine exceeds.
    x, w, W, r = inputs()
    pk, _ = build(x, w, W, r, **testing.cpu_config(jitter_seed=0), watchdog_s=1.0, profile=True,
                  fault=Fault("no_trigger", "rmsnorm_0", (1, 0, 0)))
    t0 = time.perf_counter()
    try:
        with pytest.raises(MPKHangError) as e:
            pk()
        returned_ns, elapsed = time.monotonic_ns(), time.perf_counter() - t0
        idle = (returned_ns - testing.last_progress_ns(pk)) / 1e9
    finally:
        pk.finalize()
    report = str(e.value)
    print(f"CAUGHT no_trigger {idle:.2f} s after the last progress ({elapsed:.2f} s after pk()):\n{report}")
    assert 1.0 <= elapsed and 1.0 <= idle < 1.0 + 1.0, f"watchdog_s + 1 s: {idle:.2f} s"
    # the starved layer (every linear task waits on the rmsnorm event), its event, the counts
    starved = [ln for ln in report.splitlines() if "not started in layer 'linear_1'" in ln]
    assert starved, report
    assert re.search(r"'linear_1' \(0, 0, 0\), \(1, 0, 0\), \(2, 0, 0\), \(3, 0, 0\): event \d+ never fired "
                     r"\(counter 2, needs 3\); all 3 producers finished "
                     r"\('rmsnorm_0'\(0, 0, 0\), 'rmsnorm_0'\(1, 0, 0\), 'rmsnorm_0'\(2, 0, 0\)\) but a "
                     r"trigger never arrived", starved[0]), starved[0]


def test_wrong_tile_is_caught_naming_the_vacated_tile():
    clean_run()
    with pytest.raises(MPKUnwrittenError) as e:
        run(Fault("wrong_tile", "rmsnorm_0", (2, 0, 0)))      # the last tile writes the previous one
    print(f"CAUGHT wrong_tile: {e.value}")
    assert "layer 'rmsnorm_0' task (2, 0, 0): 192 of 192 elements of 'y'[4:6, 0:96] unwritten" in str(e.value)


def test_wrong_tile_is_refused_for_a_grid_of_one():
    pk = PersistentKernel(**testing.cpu_config(), fault=Fault("wrong_tile", "identity_0"))
    a = pk.attach_input(torch.ones(2, 2), name="a")
    b = pk.attach_input(torch.zeros(2, 2), name="b")
    pk.identity_layer(input=a, output=b, grid_dim=(1, 1, 1), block_dim=BLOCK)
    with pytest.raises(ValueError, match="layer 'identity_0' has a grid of 1"):
        pk.compile()


SEEDS = range(1, 21)


def test_dropped_dependency_is_caught_under_jitter():
    clean_run()
    caught = None
    for seed in SEEDS:
        results = run(Fault("drop_dependency", "linear_1", (0, 0, 0)), jitter=seed)
        try:
            check(results, f"drop_dependency[jitter={seed}]")
        except AssertionError as e:
            caught = (seed, e)
            break
    assert caught, f"a dropped dependency went unnoticed in {len(SEEDS)} jittered runs"
    print(f"CAUGHT drop_dependency at jitter seed {caught[0]} (bound {len(SEEDS)}): {str(caught[1])[:200]}")
    assert "'drop_dependency" in str(caught[1]) and ".z' is not close" in str(caught[1])


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
