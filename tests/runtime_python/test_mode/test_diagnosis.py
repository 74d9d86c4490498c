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

import os
import re

import pytest
import torch

from mirage.mpk import inspect, testing
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
    assert "\nNaN: " not in str(e.value), "negative control: no NaN, no note"
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
    # it added r to z's output poison before linear_1 wrote z: the quieted payload says so
    assert re.search(r"\nNaN: 72 of the 72 mismatched elements are NaN with the payload of the output "
                     r"poison of tensor 'z', quieted by arithmetic \(0x7FE5[0-9A-F]{4}\): computed from an "
                     r"element of 'z' read before its producer wrote it \(a missing dependency\) or never "
                     r"written\n",
                     str(e.value)), str(e.value)


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


# ---- NaN: which poison (testing.nan_note)

PC = testing.load_reference(__file__, name="test_precision_controls")     # mutated_kernels
RMSNORM = PC.RMSNORM
# Two ways for rmsnorm.cuh to read shared memory that holds the emulation's 0xFF poison: the barrier
# between storing the per-warp partial sums and reading them is gone, or the read is one pass of rows
# past what was stored (slots never written). Found exactly once each (mutated_kernels checks).
NO_BARRIER = ("        __syncthreads();\n        for (int64_t i = 0; i < n; ++i) {\n            float sum_sq",
              "        for (int64_t i = 0; i < n; ++i) {\n            float sum_sq")
UNWRITTEN = ("sum_sq += partial[i * warps + q];", "sum_sq += partial[(i + n) * warps + q];")
SMEM = ("are NaN with the shared-memory poison's payload (0xFF bytes): a read before a barrier, or of "
        "shared memory never written")
NO_PAYLOAD = ("are NaN (fp32 -> bf16 makes every NaN 0xFFFF, so the payload cannot tell): often the "
              "shared-memory poison read before a barrier or never written")


@pytest.mark.parametrize("mutation,dtype,text", [(NO_BARRIER, torch.float32, SMEM),
                                                 (UNWRITTEN, torch.float16, SMEM),
                                                 (NO_BARRIER, torch.bfloat16, NO_PAYLOAD)],
                         ids=["no_barrier-fp32", "unwritten_slot-fp16", "no_barrier-bf16"])
def test_shared_memory_poison_is_named(mutation, dtype, text, tmp_path, monkeypatch):
    monkeypatch.setenv("MPK_FAILURE_DIR", str(tmp_path / "failures"))
    with PC.mutated_kernels(tmp_path, "rmsnorm.cuh", *mutation):
        pk, name, out, expected, tol, inputs, reference = RMSNORM.run(dtype, 6, 384, 3, jitter=3)
    with pytest.raises(AssertionError) as e:
        testing.check_output(name, out, expected, tol, pk.layers[0].checks, inputs, pk=pk,
                             reference_fn=reference)
    message = str(e.value)
    print(message)
    nan_line = next(line for line in message.splitlines() if line.startswith("NaN: "))
    assert re.fullmatch(rf"NaN: \d+ of the \d+ mismatched elements {re.escape(text)}", nan_line), nan_line
    verdict = message.splitlines()[-1]
    assert verdict.startswith("Serial re-run (1 worker, no jitter, tasks in program order): fails serially "
                              "too: ") and text in verdict, verdict
    assert "math or indexing" not in verdict and "eps=0" not in message


def bits_of(values, dtype):
    """Floats of `dtype` with these bit patterns (an int64 narrowed to the dtype's width wraps)."""
    view = torch.int32 if dtype == torch.float32 else torch.int16
    return torch.tensor(values, dtype=torch.int64).to(view).view(dtype)


def test_nan_note_tells_each_poison_from_an_arithmetic_nan():
    """Each bit pattern in its class: with the run's poisons known, whose poison (the tensor's own:
    never written; another tensor's: copied from it), else the poisons' family (mirage/mpk/poisons.py);
    a NaN 0/0 makes is none of the poisons (negative control), and mismatches without a NaN get no note."""
    fp32 = torch.cat([bits_of([0xFFFFFFFF, 0xFFFF0000, 0x7FA5A5A5, 0x7FE5A5A5, 0x7FA51234, 0x7FA50042],
                              torch.float32), torch.zeros(1) / 0, torch.ones(1)])
    note = testing.nan_note(fp32, torch.ones(8, dtype=torch.bool), poisons={0x7FA5A5A5: "y", 0x7FA51234: "x"},
                            own="y")
    print(f"NOTE fp32: {note}")
    copied = ("copied from an element of 'x' never written (read before its producer wrote it, or outside "
              "what any task writes)")
    family = ("hold an output poison (a signalling NaN): never written, or bit-copied from an element never "
              "written")
    quieted = ("are NaN with an output poison's payload quieted by arithmetic: computed from an element read "
               "before its producer wrote it (a missing dependency) or never written")
    assert note == ("1 of the 8 mismatched elements hold the output poison of tensor 'x' (0x7FA51234): "
                    f"{copied}; "
                    "1 of the 8 mismatched elements hold its own output poison (0x7FA5A5A5): never written; "
                    "1 of the 8 mismatched elements are NaN with the payload of its own output poison, "
                    "quieted by arithmetic (0x7FE5A5A5): computed from an element of 'y' read before its "
                    "producer wrote it (a missing dependency) or never written; "
                    f"1 of the 8 mismatched elements {family}; 2 of the 8 mismatched elements {SMEM}; "
                    "1 of the 8 mismatched elements are NaN without a poison's payload: made by the "
                    "arithmetic (0/0, inf - inf, the square root of a negative)"), note
    note = testing.nan_note(fp32[:4], torch.ones(4, dtype=torch.bool))       # no run known: the family
    assert note == (f"1 of the 4 mismatched elements {family}; 2 of the 4 mismatched elements {SMEM}; "
                    f"1 of the 4 mismatched elements {quieted}"), note
    fp16 = torch.cat([bits_of([0xFFFF, 0x7C25, 0x7E25], torch.float16),
                      torch.zeros(1, dtype=torch.float16) / 0])
    assert testing.nan_note(fp16, torch.ones(4, dtype=torch.bool)).count("of the 4 mismatched") == 4
    bf16 = torch.cat([bits_of([0xFFFF, 0x7FA5], torch.bfloat16)])
    assert testing.nan_note(bf16, torch.ones(2, dtype=torch.bool)) == (
        f"1 of the 2 mismatched elements {family}; 1 of the 2 mismatched elements {NO_PAYLOAD}")
    assert testing.nan_note(torch.ones(3), torch.ones(3, dtype=torch.bool)) == ""
    assert testing.nan_note(fp32, torch.zeros(8, dtype=torch.bool)) == "", "only mismatched elements count"


# ---- a failing case keeps its files (testing.keep_failure)

def test_a_failing_case_keeps_its_files(tmp_path, monkeypatch):
    monkeypatch.setenv("MPK_FAILURE_DIR", str(tmp_path))
    check_out(*chain(), "diagnosis.clean")
    assert os.listdir(tmp_path) == [], "negative control: a passing case keeps nothing"
    pk, out, r = chain(Fault("perturb", "elementwise_add_2", (1, 1, 0), amount=1.0, element=5))
    with pytest.raises(AssertionError) as e:
        check_out(pk, out, r, "diagnosis.perturb[float32,6x48]")
    where = str(tmp_path / f"diagnosis.perturb_float32_6x48-{os.getpid()}")
    line = next(ln for ln in str(e.value).splitlines() if ln.startswith("Failure files"))
    print(line)
    assert line == (f"Failure files (source, task graph, module, inputs; README.txt says how to load them): "
                    f"{where} (README.txt, inputs.pt, kernel_metadata_rank0.json, mpk_module_rank0.so, "
                    f"task_graph_rank0.json, test_rank0.cu)"), line
    with open(os.path.join(where, "test_rank0.cu")) as f:
        assert f.read() == pk._source[0], "the source the module was built from (compile wrote none)"
    assert inspect.load(os.path.join(where, "task_graph_rank0.json"))["all_tasks"][1]["layer"] == "rmsnorm_0"
    saved = torch.load(os.path.join(where, "inputs.pt"))
    assert sorted(saved) == ["W", "out", "r", "w", "x"] and torch.equal(saved["r"], r)
    assert torch.equal(saved["out"], out), "the output as the failing run left it"
    with open(os.path.join(where, "README.txt")) as f:
        snippet = f.read().split("Load them (python3):\n\n")[1]
    assert len(snippet.strip().splitlines()) == 5
    exec(compile(snippet, "README.txt", "exec"), {})       # the snippet runs as written


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
