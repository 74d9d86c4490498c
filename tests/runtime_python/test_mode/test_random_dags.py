"""Seeded random DAGs compiled and run in test mode, every tensor compared with a sequential model.

The DAGs come from tests/unit/test_random_graphs.py (random_dag(seed, all_kinds=True): every
one of the 7 layer kinds at least once, plus up to 4 more; random grids including
non-power-of-two ones; fan-in, fan-out, buffer reuse and in-place layers). All are float32, so
the generated source (which depends only on the set of (layer kind, dtype) variants) is the
same for every DAG: the suite compiles once. Each DAG runs with 2 to 6 workers and schedule
jitter seeded with the DAG's seed; tensors are random (torch.Generator seeded with the seed),
linear weights scaled by 1/sqrt(in_features); intermediates are a mix of new_tensor() and
attached buffers.

The model: the layers' pytorch_reference.py functions applied in program order, each on the
float32-rounded values of its inputs (as the kernel reads rounded intermediates), in float64.
Every tensor's final value is compared (an intermediate that a later layer overwrites is gone
after the run; it is checked through the layers that read it). Graph inputs nothing writes must
come back bit-identical. The tolerance of a layer's output is testing.tol_* (with
input_rounding=float32 where the layer reads an intermediate) plus the upstream error carried
forward: if the kernel's input may sit D from the model's rounded input (D = the producer's
allowed error + one fp32 rounding of it), the output may move by
    identity: D;  add: Da + Db;  linear: Dx|W|^T + |x|Dw^T + Dx Dw^T (+ Dr);
    silu_mul: 1.1 Dg (|u| + Du) + |silu(g)| Du   (1.1 >= max |silu'|);
    rmsnorm: (Dx|w| + |x|Dw + Dx Dw) / r_lo + |x||w| (|Dx|_2 / sqrt(H)) / (r r_lo),
             r = sqrt(mean x^2 + eps), r_lo = r - |Dx|_2 / sqrt(H)   (rms is 1/sqrt(H)-Lipschitz);
    tensor_init: 0.
These are worst-case bounds, not fitted; the carried term is scaled by 1 + 2^-10 for the own
budget's rtol/scale applied to the moved result (about 1e-6 relative, so 2^-10 is ample).
A dropped dependency or a wrong tile gives errors the size of the values themselves.

Run: pytest tests/runtime_python/test_mode/test_random_dags.py -s
     python tests/runtime_python/test_mode/test_random_dags.py [seed ...]   (default: all 50)
A failure names the seed and prints the DAG (python this_file.py SEED reruns just that one).
"""
from __future__ import annotations

import math
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKUnwrittenError
from mirage.mpk.faults import Fault
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
dags = testing.load_reference(os.path.join(HERE, "..", "..", "unit", "x.py"), name="test_random_graphs")
REFS = {kind: testing.load_reference(os.path.join(HERE, "..", kind, "x.py")) for kind in dags.KINDS}
F32 = torch.float32
U32 = testing.U32
TINY32 = 2.0**-150                # half the smallest fp32 subnormal: the rounding floor
SILU_LIPSCHITZ = 1.1              # max |d/dg g * sigmoid(g)| = 1.0998...
CARRY = 1 + 2.0**-10
NUM_DAGS = 50
SEEDS = list(range(NUM_DAGS))


@dataclass
class Model:
    """What the sequential model knows of one tensor."""
    ref: torch.Tensor             # float64, unrounded output of its last writer (or the given data)
    bound: torch.Tensor           # allowed |kernel - ref|, elementwise
    tol: testing.Tolerance | None = None      # None: never written, must be bit-identical
    writer: str = ""

    def rounded(self) -> torch.Tensor:
        return self.ref.to(F32)

    def deviation(self) -> torch.Tensor:
        """Bound on |kernel value - float32-rounded model value| as a later layer reads it."""
        if self.tol is None:
            return torch.zeros_like(self.ref)
        return self.bound + U32 * self.ref.abs() + TINY32


# ---- the DAG as a kernel ---------------------------------------------------------------------

def make_pk(dag, gen: torch.Generator, buffer_rng: random.Random,
            fault: Fault | None = None, dispatch: str = "event") -> tuple[PersistentKernel, dict]:
    workers = 2 + dag.seed % 5                  # 2..6 workers (more than the 2 cores of CI), jittered
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=dag.seed, num_workers=workers, dispatch=dispatch),
                          fault=fault)
    data = {}

    def make_tensor(pk, name, dims, given):
        if given:
            scale = dims[1] ** -0.5 if name.startswith("w") else 1.0
            data[name] = t = testing.randn(dims, F32, gen, scale=scale)
            return pk.attach_input(t, name=name)
        if buffer_rng.random() < 0.5:
            return pk.new_tensor(dims=dims, dtype=F32, name=name)
        data[name] = t = torch.zeros(dims, dtype=F32)
        return pk.attach_input(t, name=name)

    dags.declare(pk, dag, make_tensor)
    before = {name: t.clone() for name, t in data.items()}
    return pk, before


# ---- the sequential model --------------------------------------------------------------------

def _abs_mm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a.double().abs() @ b.double().abs().T


def model_layer(spec, layer, m: dict[str, Model]) -> Model:
    """Apply one layer's reference to the model's rounded inputs; return the output's model."""
    a = spec.args
    x = {role: m[name].rounded() for role, name in a.items()}
    d = {role: m[name].deviation() for role, name in a.items()}
    computed_in = any(m[name].tol is not None for name in spec.reads)
    rnd = F32 if computed_in else None
    kind = spec.kind
    if kind == "rmsnorm":
        xi, w, dx, dw = x["input"].double(), x["weight"].double(), d["input"], d["weight"]
        h = xi.shape[1]
        expected = REFS[kind].rmsnorm(x["input"], x["weight"], spec.eps)
        own = testing.tol_rmsnorm(F32, h)
        r = torch.sqrt(xi.pow(2).mean(dim=1, keepdim=True) + spec.eps)
        shift = dx.pow(2).sum(dim=1, keepdim=True).sqrt() / math.sqrt(h)
        r_lo = r - shift
        assert bool((r_lo > 0).all()), f"{layer.name}: the upstream bound is as large as the rms itself"
        carried = (dx * w.abs() + xi.abs() * dw + dx * dw) / r_lo + xi.abs() * w.abs() * shift / (r * r_lo)
    elif kind in ("linear", "linear_with_residual"):
        xi, w, dx, dw = x["input"], x["weight"], d["input"], d["weight"]
        scale = _abs_mm(xi, w)
        carried = dx @ w.double().abs().T + xi.double().abs() @ dw.T + dx @ dw.T
        k = xi.shape[1]
        if kind == "linear":
            expected = REFS[kind].linear(xi, w)
        else:
            add = layer.params["add_residual"]
            expected = REFS[kind].linear_with_residual(xi, w, x["residual"], add)
            scale = scale + x["residual"].double().abs()
            carried = carried + d["residual"]
            k += 1
        own = testing.tol_linear(F32, k, scale, input_rounding=rnd)
    elif kind == "silu_mul":
        groups = layer.params["groups"]
        expected = REFS[kind].silu_mul(x["input"], groups)
        own = testing.tol_elementwise(F32, input_rounding=rnd)
        b, width = x["input"].shape
        tiles = x["input"].double().reshape(b, groups, 2, width // (2 * groups))
        dtiles = d["input"].reshape(b, groups, 2, width // (2 * groups))
        g, u, dg, du = tiles[:, :, 0], tiles[:, :, 1], dtiles[:, :, 0], dtiles[:, :, 1]
        silu = g / (1.0 + torch.exp(-g))
        carried = (SILU_LIPSCHITZ * dg * (u.abs() + du) + silu.abs() * du).reshape(b, width // 2)
    elif kind == "elementwise_add":
        expected = REFS[kind].elementwise_add(x["input_a"], x["input_b"])
        scale = x["input_a"].double().abs() + x["input_b"].double().abs()
        own = testing.tol_elementwise(F32, scale, input_rounding=rnd)
        carried = d["input_a"] + d["input_b"]
    elif kind == "identity":
        expected = REFS[kind].identity(x["input"])
        own = testing.tol_elementwise(F32, input_rounding=rnd)
        carried = d["input"]
    elif kind == "tensor_init":
        expected = REFS[kind].tensor_init(x["input"])
        own = testing.tol_elementwise(F32)
        carried = torch.zeros_like(expected)
    else:
        raise NotImplementedError(kind)
    atol = torch.as_tensor(own.atol, dtype=torch.float64) + CARRY * carried
    why = f"{own.why} + upstream error carried (max {float(carried.max()):.2e})"
    # the rms ratio's model: an upstream deviation bounded by CARRY * carried has a second moment
    # of at most its square, whatever its distribution; added to the layer's own rounding variance
    var_abs = torch.as_tensor(own.var_abs, dtype=torch.float64) + (CARRY * carried) ** 2
    tol = testing.Tolerance(atol, own.rtol, why, var_abs, own.var_rel)
    return Model(expected, atol + own.rtol * expected.abs(), tol, layer.name)


def run_model(dag, pk, before: dict) -> dict[str, Model]:
    m = {}
    for name, dims in dag.tensors.items():
        start = before[name] if name in before else torch.zeros(dims, dtype=F32)   # new_tensor: zeros
        m[name] = Model(start.double(), torch.zeros(dims, dtype=torch.float64))
    for spec, layer in zip(dag.layers, pk.layers):
        m[spec.target] = model_layer(spec, layer, m)
    return m


# ---- one DAG ---------------------------------------------------------------------------------

def run_dag(seed: int, fault: Fault | None = None, dispatch: str = "event") -> dict:
    dag = dags.random_dag(seed, all_kinds=True)
    try:
        return _run_dag(dag, fault, dispatch)
    except Exception:
        if fault is None:
            print(f"FAILED DAG (reproduce: MPK_DISPATCH={dispatch} python {os.path.relpath(__file__)} "
                  f"{seed})\n"
                  f"{dag.describe()}", flush=True)
        raise


def _run_dag(dag, fault: Fault | None, dispatch: str = "event") -> dict:
    gen = torch.Generator(device="cpu")
    gen.manual_seed(dag.seed)
    pk, before = make_pk(dag, gen, random.Random(dag.seed), fault, dispatch)
    pk.compile()
    model = run_model(dag, pk, before)
    pk()
    nontrivial = written = 0
    try:
        for name in dag.tensors:
            actual, want = pk.get_tensor(name), model[name]
            if want.tol is None:
                testing.assert_close(f"dag{dag.seed}:{name}(untouched)", actual, want.ref,
                                     testing.Tolerance(0.0, 0.0, "never written: bit-identical"))
            else:
                testing.assert_close(f"dag{dag.seed}:{name}<-{want.writer}", actual, want.ref, want.tol,
                                     context=f" (DAG seed {dag.seed})")
                written += 1
                nontrivial += bool((want.ref != 0).any())
    finally:
        pk.finalize()
    return dict(layers=len(dag.layers), tasks=len(pk.graph.tasks) - 1, compiled=not pk.build.hit,
                compile_s=pk.build.seconds if not pk.build.hit else 0.0, nontrivial=nontrivial,
                compared=len(dag.tensors), written=written,
                kinds=frozenset(layer.cpp_function for layer in pk.layers))


def run_seeds(seeds, dispatch: str = "event") -> dict:
    t0 = time.perf_counter()
    tot = dict(dags=0, layers=0, tasks=0, compiles=0, compile_s=0.0, nontrivial=0, compared=0, written=0)
    variant_sets, failures = set(), []
    for seed in seeds:
        try:
            r = run_dag(seed, dispatch=dispatch)
        except Exception as e:                    # keep going: report every failing seed
            failures.append(f"seed {seed}: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        tot["dags"] += 1
        for key in ("layers", "tasks", "compiles", "compile_s", "nontrivial", "compared", "written"):
            tot[key] += r["compiled" if key == "compiles" else key]
        variant_sets.add(r["kinds"])
    tot.update(seconds=time.perf_counter() - t0, variant_sets=len(variant_sets), failures=failures)
    return tot


def summary(t: dict, dispatch: str = "event") -> str:
    return (f"random DAGs in test mode, dispatch={dispatch!r}: {t['dags']} DAGs, {t['layers']} layers, "
            f"{t['tasks']} tasks, "
            f"{t['compared']} tensors compared ({t['written']} computed, {t['nontrivial']} of them nonzero), "
            f"{t['compiles']} compile(s) taking {t['compile_s']:.1f} s for {t['variant_sets']} variant "
            f"set(s), "
            f"total {t['seconds']:.1f} s, failures {len(t['failures'])}")


# ---- tests -----------------------------------------------------------------------------------

@pytest.mark.parametrize("dispatch", ["event", "mpk"])
def test_random_dags_match_sequential_model(dispatch):
    """Under both dispatch models (docs/runtime.md): this project's event dispatch and MPK's pre-launch."""
    t = run_seeds(SEEDS, dispatch)
    print(summary(t, dispatch))
    assert not t["failures"], "failing seeds (the DAGs are printed above):\n" + "\n".join(t["failures"])
    assert t["variant_sets"] == 1, "every DAG uses all 7 float32 variants, so one build serves them all"
    assert t["nontrivial"] > t["written"] // 2, "most computed tensors should have a nonzero reference"


def _faultable_layer(seed: int, reused: bool):
    """The last layer with grid > 1, not in place, not a zeroing, writing a tensor nothing later touches.
    reused: its tensor held a value before (a graph input or an earlier layer's output), so a tile it
    leaves unwritten keeps a stale value (the comparison must catch it); else a fresh buffer (poisoned:
    the unwritten check must catch it). None if the DAG has no such layer."""
    dag = dags.random_dag(seed, all_kinds=True)
    for i in range(len(dag.layers) - 1, -1, -1):
        spec = dag.layers[i]
        later = {n for s in dag.layers[i + 1:] for n in s.args.values()}
        had_value = spec.target in dag.given or any(s.target == spec.target for s in dag.layers[:i])
        if spec.kind != "tensor_init" and spec.target not in spec.reads and spec.target not in later \
                and spec.grid[0] * spec.grid[1] > 1 and had_value == reused:
            return f"{spec.kind}_{i}"
    return None


def _stale_tile_differs(seed: int, layer_name: str) -> bool:
    """Does the model's value of the faulted task's output tile change at that layer? (Zeros in,
    zeros out would make a stale tile look right.) Pure Python: the kernel is not compiled."""
    dag = dags.random_dag(seed, all_kinds=True)
    gen = torch.Generator(device="cpu")
    gen.manual_seed(seed)
    pk, before = make_pk(dag, gen, random.Random(seed))
    i = next(j for j, layer in enumerate(pk.layers) if layer.name == layer_name)
    spec = dag.layers[i]
    model = run_model(dags.DagSpec(seed, dag.rows, dag.tensors, dag.given, dag.layers[:i]), pk, before)
    old = model[spec.target].rounded()
    new = model_layer(spec, pk.layers[i], model).rounded()
    (ranges,) = [r for role, mode, r in dags.task_accesses(spec, (0, 0, 0), dag.tensors) if mode == "w"]
    box = tuple(slice(r.start, r.stop) for r in ranges)
    return bool(((old[box] - new[box]).abs() > 1e-3 * (1 + new[box].abs())).any())


def _control_seeds(reused: bool, count: int = 2) -> list[int]:
    """The first seeds with a layer to fault (and, for a reused tensor, a stale tile that differs)."""
    found = []
    for s in range(200):
        layer = _faultable_layer(s, reused)
        if layer and (not reused or _stale_tile_differs(s, layer)):
            found.append(s)
            if len(found) == count:
                break
    return found


@pytest.mark.parametrize("reused,seed", [(False, s) for s in _control_seeds(False)] +
                         [(True, s) for s in _control_seeds(True)])
def test_negative_control_wrong_tile_is_caught(reused, seed):
    """One task writes its neighbour's tile instead of its own (a task-table edit: no extra build).
    A fresh output tile left unwritten must raise MPKUnwrittenError; a reused one keeps a stale value,
    which the comparison with the model must reject (so its tolerances are tight enough)."""
    layer = _faultable_layer(seed, reused)
    expected = AssertionError if reused else MPKUnwrittenError
    with pytest.raises(expected) as info:
        run_dag(seed, Fault("wrong_tile", layer, (0, 0, 0)))
    if reused:
        assert "is not close" in str(info.value)
    print(f"negative control seed {seed}: wrong_tile on {layer} caught: {type(info.value).__name__}: "
          f"{str(info.value).splitlines()[0]}")


if __name__ == "__main__":
    if not os.environ.get("MPK_CACHE_DIR"):       # as under pytest (tests/conftest.py): a fresh cache
        os.environ["MPK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mpk-test-cache-")
    chosen = [int(a) for a in sys.argv[1:]] or SEEDS
    how = os.environ.get("MPK_DISPATCH", "event")
    totals = run_seeds(chosen, how)
    print(summary(totals, how))
    for line in totals["failures"]:
        print(line)
    sys.exit(1 if totals["failures"] else 0)
