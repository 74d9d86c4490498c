"""The layer recipe (README "How to add a layer"), enforced: a layer with scalar parameters has
tests that exercise them, and every layer declares its tensor parallelism and its test runs as one
N-rank job under mpirun.

A layer module declares its scalar parameters once, as a module-level `SCALARS` (parameter ->
the value a kernel that ignored it would in effect use) that its `Layer(..., scalars=...)` is
built from; a module whose Layer passes float parameters to its kernel (`fparams=`) must declare
them. For each module with a non-empty SCALARS, tests/runtime_python/<stem>/test_<stem>_testmode.py
must define a non-empty SCALAR_CASES that sets every scalar parameter, run it under pytest
(a test parametrized over it) and in the script mode (`run_cases_as_script(..., scalar_cases=
SCALAR_CASES)`), call testing.check_scalars (which raises, for those cases, when a parameter
does not move the result beyond the tolerance), and pass the same reference function to every
testing.check_output as reference_fn= (a failure then says when the output is the reference at a
parameter's ignored value).

Each layer module also declares its tensor parallelism, a module-level `TP` naming a key of
mirage.mpk.testing.TP_KINDS ("replicated", "column", "row", "reduce"), and its test file runs as
one N-rank job under `mpirun -n N`: `__main__` calls run_cases_as_script, run_case takes `world`,
kernels are built with `cpu_config(..., **world.params)`, every role the TP splits goes through
`world.shard(role, tensor)`, and a row-parallel layer adds an `allreduce_layer` (the runs
themselves: tests/runtime_python/test_mode/test_layers_multirank.py). Pure Python: the test files
are parsed, not run.
"""
from __future__ import annotations

import ast
import importlib
import os
import pkgutil

import pytest

import mirage.mpk.layers as layers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEMS = sorted(m.name for m in pkgutil.iter_modules(layers.__path__) if not m.name.startswith("_"))


def layer_calls(tree: ast.AST) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "Layer"]


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def module_assignment(tree: ast.Module, name: str) -> ast.expr | None:
    return next((n.value for n in tree.body if isinstance(n, ast.Assign)
                 and any(getattr(t, "id", None) == name for t in n.targets)), None)


def test_every_layer_module_is_covered():
    assert "rmsnorm" in STEMS and len(STEMS) >= 8, STEMS


@pytest.mark.parametrize("stem", STEMS)
def test_scalar_parameters_are_declared_once(stem):
    module = importlib.import_module(f"mirage.mpk.layers.{stem}")
    scalars = getattr(module, "SCALARS", {})
    with open(module.__file__) as f:
        tree = ast.parse(f.read())
    calls = layer_calls(tree)
    assert calls, f"layers/{stem}.py builds no Layer(...)"
    for call in calls:
        given = keyword(call, "scalars")
        if given is not None:
            names = {n.id for n in ast.walk(given) if isinstance(n, ast.Name)}
            assert "SCALARS" in names, (f"layers/{stem}.py: Layer(scalars=...) must be built from the "
                                        f"module's SCALARS (found {ast.unparse(given)}): the recipe test "
                                        f"reads SCALARS")
        else:
            assert not scalars, f"layers/{stem}.py declares SCALARS but its Layer(...) does not pass them"
        if keyword(call, "fparams") is not None:
            assert scalars, (f"layers/{stem}.py passes float parameters to its kernel (fparams=) but "
                             f"declares no SCALARS: each is a scalar parameter its tests must exercise")
    print(f"RECIPE {stem}: SCALARS={scalars} PASS")


@pytest.mark.parametrize("stem", [s for s in STEMS if getattr(importlib.import_module(
    f"mirage.mpk.layers.{s}"), "SCALARS", {})])
def test_layer_test_exercises_its_scalar_parameters(stem):
    scalars = importlib.import_module(f"mirage.mpk.layers.{stem}").SCALARS
    path = os.path.join(ROOT, "tests", "runtime_python", stem, f"test_{stem}_testmode.py")
    assert os.path.isfile(path), f"layer '{stem}' has scalar parameters {sorted(scalars)} but no {path}"
    with open(path) as f:
        tree = ast.parse(f.read())
    rel = os.path.relpath(path, ROOT)
    cases = module_assignment(tree, "SCALAR_CASES")
    assert isinstance(cases, (ast.List, ast.Tuple)) and cases.elts, \
        f"{rel} must define a non-empty SCALAR_CASES: (dtype, case, {{parameter: value}}) where each matters"
    covered = set()
    for case in cases.elts:
        params = case.elts[-1] if isinstance(case, ast.Tuple) else None
        assert isinstance(params, ast.Dict), f"{rel}: SCALAR_CASES entry {ast.unparse(case)} is not " \
                                             f"(dtype, case, {{parameter: value}})"
        covered |= {ast.literal_eval(k) for k in params.keys}
    assert set(scalars) <= covered, f"{rel}: SCALAR_CASES never sets {sorted(set(scalars) - covered)}"

    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    script = [c for c in calls if getattr(c.func, "attr", None) == "run_cases_as_script"]
    runs_them = all(getattr(keyword(c, "scalar_cases"), "id", None) == "SCALAR_CASES" for c in script)
    assert script and runs_them, \
        f"{rel}: the script mode must run them: run_cases_as_script(..., scalar_cases=SCALAR_CASES)"
    parametrized = [c for c in calls if getattr(c.func, "attr", None) == "parametrize"
                    and any(getattr(a, "id", None) == "SCALAR_CASES" for a in c.args)]
    assert parametrized, f"{rel}: no pytest test is parametrized over SCALAR_CASES"
    assert any(getattr(c.func, "attr", None) == "check_scalars" for c in calls), \
        f"{rel}: never calls testing.check_scalars"
    outputs = [c for c in calls if getattr(c.func, "attr", None) == "check_output"]
    assert outputs and all(keyword(c, "reference_fn") is not None for c in outputs), \
        (f"{rel}: every testing.check_output call must pass reference_fn= (the reference as a function of "
         f"{sorted(scalars)}, check_scalars' own), so that a failure says when the kernel ignores one")
    print(f"RECIPE {rel}: {len(cases.elts)} SCALAR_CASES cover {sorted(scalars)}, run by pytest and by "
          f"the script PASS")


# ---- tensor parallelism (README "How to add a layer", step 4) ---------------------------------

@pytest.mark.parametrize("stem", STEMS)
def test_layer_declares_its_tensor_parallelism(stem):
    """Each layer module says how it is split across ranks: a module-level TP, one of TP_KINDS."""
    from mirage.mpk import testing

    module = importlib.import_module(f"mirage.mpk.layers.{stem}")
    with open(module.__file__) as f:
        tree = ast.parse(f.read())
    tp = module_assignment(tree, "TP")
    assert isinstance(tp, ast.Constant) and tp.value in testing.TP_KINDS, \
        (f"layers/{stem}.py must declare TP = one of {sorted(testing.TP_KINDS)} (a string literal): how "
         f"the layer is split across ranks under tensor parallelism, which `mpirun -n N python "
         f"test_{stem}_testmode.py` tests")
    assert testing.layer_tp(stem) == tp.value
    print(f"RECIPE {stem}: TP={tp.value!r} PASS")


@pytest.mark.parametrize("stem", STEMS)
def test_layer_test_runs_as_a_multirank_job(stem):
    """The layer's test file runs under mpirun as one N-rank job: its __main__ is run_cases_as_script,
    its run_case takes `world`, its kernels are built with **world.params, and it slices each tensor
    role its TP splits with world.shard (a row-parallel layer also adds an allreduce_layer)."""
    from mirage.mpk import testing

    path = os.path.join(ROOT, "tests", "runtime_python", stem, f"test_{stem}_testmode.py")
    rel = os.path.relpath(path, ROOT)
    assert os.path.isfile(path), f"layer '{stem}' has no test file {rel}"
    with open(path) as f:
        tree = ast.parse(f.read())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    script = [c for c in calls if getattr(c.func, "attr", None) == "run_cases_as_script"]
    assert script, f"{rel}: its __main__ must call testing.run_cases_as_script (the mpirun-aware runner)"
    run_case = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run_case"), None)
    args = [a.arg for a in run_case.args.args + run_case.args.kwonlyargs] if run_case else []
    assert "world" in args, \
        f"{rel}: run_case must take `world=testing.ONE_RANK` (run_cases_as_script passes the rank's World)"
    params = [c for c in calls if getattr(c.func, "attr", None) == "cpu_config"
              and any(k.arg is None and ast.unparse(k.value) == "world.params" for k in c.keywords)]
    assert params, \
        f"{rel}: build the kernel with testing.cpu_config(..., **world.params) (rank r writes rank r's files)"
    tp = testing.layer_tp(stem)
    sliced = {c.args[0].value for c in calls if getattr(c.func, "attr", None) == "shard" and c.args
              and isinstance(c.args[0], ast.Constant)}
    needed = set(testing.TP_KINDS[tp])
    assert needed <= sliced, (f"{rel}: layers/{stem}.py declares TP={tp!r}, which splits {sorted(needed)}; "
                              f"the test must slice them with world.shard(role, unsharded_tensor), found "
                              f"{sorted(sliced)}")
    if tp == "row":
        assert any(getattr(c.func, "attr", None) == "allreduce_layer" for c in calls), \
            f"{rel}: a row-parallel layer's partial sums need an allreduce_layer after it (world.size > 1)"
    print(f"RECIPE {rel}: TP={tp!r}, run_case(world), **world.params, world.shard of {sorted(sliced)} PASS")
