"""Diagnosis in mirage.mpk.testing (docs/profiler.md): the automatic serial re-run of a failed
comparison, and the degenerate-tiling warning.

The graph (as tests/runtime_python/test_mode/test_negative_controls.py): x [6, 96] -> rmsnorm
(grid 3) -> y -> linear W [48, 96] (grid 4) -> z [6, 48] -> elementwise_add with r (grid 2 x 2) ->
out, on several workers with schedule jitter. Negative controls, each classified by the re-run:

  perturb (math)          -> "fails serially too: the kernel's math or indexing"
  drop_dependency (race)  -> "passes serially: a missing dependency or a race; first divergent layer
                             'elementwise_add_2' ... (0, 0, 0)"
  the same dropped dependency on one worker in event order (no in_order) still fails: the serial
  re-run needs the program's order, not only one worker.

Run: python tests/runtime_python/test_mode/test_diagnosis.py   (or pytest this file)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.faults import Fault
from mirage.mpk.persistent_kernel import PersistentKernel

NC = testing.load_reference(__file__, name="test_negative_controls")   # the graph and its inputs
REF, BLOCK = NC.REF, NC.BLOCK


def chain(fault=None, jitter=5, workers=None):
    """The graph, compiled and run once (finalized, as the layer tests leave it): (pk, out, r)."""
    x, w, W, r = NC.inputs(offset=78)
    extra = {"num_workers": workers} if workers else {}
    pk, out = NC.build(x, w, W, r, **testing.cpu_config(jitter_seed=jitter, **extra), fault=fault)
    pk()
    pk.finalize()
    return pk, out, r


def check_out(pk, out, r, label):
    """The add against its reference on the kernel's own z (a consumer that read z early shows)."""
    z = pk.get_tensor("z")
    tol = testing.tol_elementwise(torch.float32, z.double().abs() + r.double().abs())
    testing.check_output(label, out, REF["elementwise_add"].elementwise_add(z, r), tol, pk=pk)


def test_clean_run_passes_without_a_rerun(capsys):
    check_out(*chain(), "diagnosis.clean")
    assert "SERIAL" not in capsys.readouterr().out


def test_perturbation_is_math():
    pk, out, r = chain(Fault("perturb", "elementwise_add_2", (1, 1, 0), amount=1.0, element=5))
    with pytest.raises(AssertionError) as e:
        check_out(pk, out, r, "diagnosis.perturb")
    print(e.value)
    assert "Serial re-run (1 worker, no jitter, tasks in program order): fails serially too: the kernel's " \
           "math or indexing" in str(e.value)
    assert float(out[3, 29] - pk.get_tensor("z")[3, 29] - r[3, 29]) == pytest.approx(1.0, rel=1e-5), \
        "the failing run's output is put back after the re-run"


def test_dropped_dependency_is_a_race():
    pk, out, r = chain(Fault("drop_dependency", "elementwise_add_2", (0, 0, 0)))
    with pytest.raises(AssertionError) as e:
        check_out(pk, out, r, "diagnosis.drop_dependency")
    print(e.value)
    assert "passes serially: a missing dependency or a race; first divergent layer 'elementwise_add_2' " \
           "(output 'out': " in str(e.value)
    assert "tiles: (0, 0, 0): " in str(e.value), "the task that lost its dependency"


def test_one_worker_in_event_order_is_not_serial_enough():
    """Negative control for in_order: on one worker without it, the task that lost its dependency is a
    first task and runs before linear_1, so the same fault would read as math."""
    pk, out, r = chain(Fault("drop_dependency", "elementwise_add_2", (0, 0, 0)))
    z = pk.get_tensor("z")
    tol = testing.tol_elementwise(torch.float32, z.double().abs() + r.double().abs())
    for in_order, passes in ((1, True), (0, False)):
        pk._rerun(num_workers=1, jitter=0, jitter_seed=0, in_order=in_order)
        c = testing.compare(out, REF["elementwise_add"].elementwise_add(z, r), tol)
        assert c.passed == passes, (in_order, c.n_bad)


def test_a_serial_run_is_not_rerun():
    pk, out, r = chain(Fault("perturb", "elementwise_add_2", (1, 1, 0), amount=1.0), jitter=None, workers=1)
    with pytest.raises(AssertionError) as e:
        check_out(pk, out, r, "diagnosis.already_serial")
    assert "Serial re-run" not in str(e.value)


# ---- degenerate tiling

def add(grid, rows=4, cols=8):
    pk = PersistentKernel(**testing.cpu_config())
    a, b = torch.arange(rows * cols, dtype=torch.float32).view(rows, cols) + 1, torch.ones(rows, cols)
    out = torch.zeros(rows, cols)
    ad, bd, od = (pk.attach_input(t, name=n) for t, n in ((a, "a"), (b, "b"), (out, "out")))
    pk.elementwise_add_layer(input_a=ad, input_b=bd, output=od, grid_dim=grid, block_dim=BLOCK)
    pk.compile()
    pk()
    pk.finalize()
    return pk, out, a.double() + 1


def test_grid_one_is_warned_and_can_fail(capsys):
    pk, out, expected = add((1, 1, 1))
    testing.check_output("tiling.grid1", out, expected, testing.tol_elementwise(torch.float32), pk=pk)
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("EVIDENCE tiling.grid1")][0]
    print(line)
    assert line.endswith(" WARNING[grid (1,1,1): tiling not exercised] PASS"), line
    with pytest.raises(AssertionError, match=r"check 'tiled' failed .*grid \(1,1,1\): tiling not"):
        testing.check_nonvacuous("tiling.grid1", out, pk=pk, tiled=True)


def test_an_unsplit_dimension_is_named(capsys):
    pk, out, expected = add((2, 1, 1))
    testing.check_output("tiling.rows_only", out, expected, testing.tol_elementwise(torch.float32), pk=pk)
    assert "WARNING[grid (2,1,1): 'out' dim 1 (grid.y) never split] PASS" in capsys.readouterr().out
    with pytest.raises(AssertionError, match="never split"):
        testing.check_nonvacuous("tiling.rows_only", out, pk=pk, tiled=True)


def test_a_tiled_layer_is_not_warned(capsys):
    """Negative control: a grid that splits every dim of the output is no warning, and tiled=True passes."""
    pk, out, expected = add((2, 2, 1))
    tol = testing.tol_elementwise(torch.float32)
    testing.check_output("tiling.2x2", out, expected, tol, pk=pk, tiled=True)
    text = capsys.readouterr().out
    assert "WARNING" not in text and "NONVACUOUS tiling.2x2 tiled PASS" in text, text


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
