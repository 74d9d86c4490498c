"""Verification helpers: error-budget tolerances, evidence lines, non-vacuity checks.

Error budget (DESIGN 9). Every kernel computes in fp32 from its inputs and rounds once to
the output dtype. With u = unit roundoff (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) and the
reference evaluated in float64 on the same inputs, each output element obeys

    |out - ref| <= rtol * |ref| + atol

    rtol = u_out + ops * u32
        u_out |ref|: the final rounding to the output dtype;
        ops * u32: a few fp32 operations per element (multiplies, exp, rsqrt); for a
        normalization the reduction error is relative to the result, so it adds
        (reduction_length / 2) ops (sum of squares, halved by the square root).
    atol = ((k + 1) * u32 + u_in) * scale + tiny_out / 2
        (k + 1) * u32 * scale: recursive fp32 summation of k terms in any order, with
        scale = sum_i |x_i * w_i| per element (Higham's gamma_k bound; products of bf16 or
        fp16 values are exact in fp32, fp32 products add the "+1");
        u_in * scale: inputs that are themselves rounded intermediates of a chain may sit
        one rounding away from the reference's (0 for graph inputs);
        tiny_out / 2: half the smallest subnormal of the output dtype, the rounding floor.

These are worst-case bounds, not fitted thresholds: a missed tile, a wrong column or a
dropped dependency produces errors of the size of |ref| itself, far outside them in fp32.
For bf16/fp16 chains the tight check is per layer (each layer's reference applied to the
kernel's own inputs); the end-to-end bound composes the layers' u_in terms.
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import math
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from dataclasses import dataclass

import torch

from . import dist
from .dtypes import DType, float32, to_dtype
from .layers import DIFFERS_FROM_INPUT, FINITE, NONZERO

U32 = 2.0**-24
_TINY = {torch.bfloat16: 2.0**-133, torch.float16: 2.0**-24, torch.float32: 2.0**-149}


@dataclass
class Tolerance:
    atol: torch.Tensor | float     # per element (broadcastable) or scalar
    rtol: float
    why: str                       # how the budget was derived, for the failure message


def tolerance(dtype: DType | torch.dtype, *, k: int = 0, scale: torch.Tensor | float | None = None,
              ops: float = 4, input_rounding: DType | torch.dtype | None = None) -> Tolerance:
    """The one tolerance function: output rounding + fp32 accumulation over k terms (see module doc)."""
    d = to_dtype(dtype)
    u_in = to_dtype(input_rounding).unit_roundoff if input_rounding is not None else 0.0
    rtol = d.unit_roundoff + ops * U32
    floor = _TINY[d.torch] / 2
    if scale is None:
        atol: torch.Tensor | float = floor
    else:
        s = scale.double() if isinstance(scale, torch.Tensor) else float(scale)
        atol = ((k + 1) * U32 + u_in) * s + floor
    why = f"u_out={d.unit_roundoff:.3g}, k={k}, ops={ops:g}, u_in={u_in:.3g}"
    return Tolerance(atol, rtol, why)


def tol_elementwise(dtype, scale: torch.Tensor | None = None, input_rounding=None) -> Tolerance:
    """add / silu_mul / copy: a few fp32 ops per element; scale = |a| + |b| for a sum."""
    k = 1 if scale is not None else 0
    return tolerance(dtype, k=k, scale=scale, ops=8, input_rounding=input_rounding)


def tol_linear(dtype, k: int, scale: torch.Tensor, input_rounding=None) -> Tolerance:
    """x @ W^T (+ residual): scale = |x| @ |W|^T (+ |residual|), k = in_features (+1)."""
    return tolerance(dtype, k=k, scale=scale, ops=2, input_rounding=input_rounding)


def tol_rmsnorm(dtype, hidden: int) -> Tolerance:
    """rmsnorm: the mean of squares is relative to the result: hidden/2 + rsqrt + 2 multiplies."""
    return tolerance(dtype, ops=hidden / 2 + 6)


# ---- evidence ------------------------------------------------------------------------------

def say(line: str) -> None:
    """Print one evidence line, prefixed "[rank r] " in a multi-rank job, and flush."""
    sys.stdout.write(f"{dist.rank_prefix()}{line}\n")     # one write: ranks' lines do not interleave
    sys.stdout.flush()


def _fmt_index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    idx = []
    for s in reversed(shape):
        idx.append(flat % s)
        flat //= s
    return tuple(reversed(idx))


@dataclass
class Comparison:
    """Element-wise result of comparing actual with expected under a tolerance (float64)."""
    diff: torch.Tensor        # |actual - expected|; inf where exactly one side is NaN
    allowed: torch.Tensor     # atol + rtol * |expected|
    bad: torch.Tensor         # diff > allowed

    @property
    def n_bad(self) -> int:
        return int(self.bad.sum())


def compare(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> Comparison:
    a64, e64 = actual.double(), expected.double()
    allowed = torch.as_tensor(tol.atol, dtype=torch.float64) + tol.rtol * e64.abs()
    diff = (a64 - e64).abs()
    diff = torch.where((a64 == e64) | (a64.isnan() & e64.isnan()), 0.0, diff)   # equal infs, both NaN
    diff = torch.where(a64.isnan() ^ e64.isnan(), math.inf, diff)
    return Comparison(diff, allowed.expand_as(diff), diff > allowed)


def evidence(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
             c: Comparison) -> tuple[float, int]:
    """Print `EVIDENCE name dtype shape max_abs max_rel atol rtol worst_index PASS|FAIL`."""
    diff = c.diff
    rel = diff / expected.double().abs().clamp_min(torch.finfo(torch.float64).tiny)
    worst = int(diff.argmax()) if diff.numel() else 0
    max_abs = float(diff.max()) if diff.numel() else 0.0
    max_rel = float(rel.max()) if rel.numel() else 0.0
    atol_shown = float(torch.as_tensor(tol.atol, dtype=torch.float64).max())
    shape = tuple(actual.shape)
    say(f"EVIDENCE {name} {str(actual.dtype).replace('torch.', '')} {shape} max_abs={max_abs:.3e} "
        f"max_rel={max_rel:.3e} atol={atol_shown:.3e} rtol={tol.rtol:.3e} "
        f"worst_index={_fmt_index(worst, shape)} {'PASS' if c.n_bad == 0 else 'FAIL'}")
    return max_abs, worst


def assert_close(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
                 context: str = "") -> None:
    """Compare in float64 and print one evidence line, pass or fail; raise on failure."""
    # dtype is not compared: references are float64 and unrounded; the budget has u_out.
    for attr in ("shape", "device"):
        a, e = getattr(actual, attr), getattr(expected, attr)
        if a != e:
            line = f"EVIDENCE {name} {actual.dtype} {tuple(actual.shape)} - - - - - FAIL"
            say(line)
            raise AssertionError(f"'{name}': the values for attribute '{attr}' do not match: {a} != {e}")
    c = compare(actual, expected, tol)
    max_abs, worst = evidence(name, actual, expected, tol, c)
    n_bad, shape, e64 = c.n_bad, tuple(actual.shape), expected.double()
    if n_bad:
        first = int(c.bad.flatten().nonzero()[0])
        idx = _fmt_index(first, shape)
        raise AssertionError(
            f"'{name}' is not close ({str(actual.dtype).replace('torch.', '')}, {shape}){context}!\n"
            f"Mismatched elements: {n_bad} / {actual.numel()} ({100.0 * n_bad / actual.numel():.1f}%)\n"
            f"Greatest absolute difference: {max_abs:.6g} at index {_fmt_index(worst, shape)}\n"
            f"First mismatch at {idx}: actual {float(actual.flatten()[first].double()):.6g}, expected "
            f"{float(e64.flatten()[first]):.6g}, allowed {float(c.allowed.flatten()[first]):.3g}\n"
            f"Tolerance budget: {tol.why}; seed: MPK_SEED={seed()}")


def assert_equal(name: str, actual, expected) -> None:
    """Exact comparison (integers, metadata, bit copies), with its evidence line."""
    a = actual.tolist() if isinstance(actual, torch.Tensor) else actual
    e = expected.tolist() if isinstance(expected, torch.Tensor) else expected
    shape = tuple(actual.shape) if isinstance(actual, torch.Tensor) else (len(a),) if isinstance(a, list) \
        else ()
    ok = a == e
    say(f"EVIDENCE {name} exact {shape} {'PASS' if ok else 'FAIL'}")
    if not ok:
        raise AssertionError(f"'{name}' is not equal:\n  actual   {a}\n  expected {e}\n"
                             f"seed: MPK_SEED={seed()}")


def digest(t: torch.Tensor) -> str:
    """A short sha256 of a tensor's bytes (bit-identity across ranks); needs no numpy."""
    raw = bytes(t.detach().cpu().contiguous().view(torch.uint8).flatten().tolist())
    return hashlib.sha256(raw).hexdigest()[:16]


def check_output(name: str, actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance,
                 checks=(FINITE, NONZERO, DIFFERS_FROM_INPUT), inputs: tuple[torch.Tensor, ...] = ()) -> None:
    """The one call per compared tensor: the evidence line, then one line per non-vacuity check."""
    assert_close(name, actual, expected, tol)
    check_nonvacuous(name, actual, checks, inputs, reference=expected)


def _diverging(pk, references: dict, tolerances: dict):
    """(layer, output index, tensor name, Comparison) for each compared output, in program order."""
    for layer in pk.layers:
        for k, acc in enumerate(layer.outputs):
            name = acc.tensor.name
            if acc.written and name in references:
                out = pk.get_tensor(name)
                c = compare(out, references[name], tolerances[name])
                evidence(f"{layer.name}.{name}", out, references[name], tolerances[name], c)
                yield layer, k, name, c


def first_divergence(pk, references: dict[str, torch.Tensor], tolerances: dict[str, Tolerance]) -> str | None:
    """Report the first layer (topological order) whose output leaves its tolerance, or None.

    references / tolerances: per tensor name, the expected final value of that tensor. The
    report names the layer, the grid coordinates of its bad tiles and the worst element."""
    checked, report, later = 0, None, []
    for layer, k, name, c in _diverging(pk, references, tolerances):
        if not c.n_bad:
            checked += 1 if report is None else 0
            continue
        if report is not None:
            later.append(layer.name)
            continue
        tiles = []
        for task in pk.graph.layer_tasks(layer):
            region = c.bad[tuple(slice(lo, hi) for lo, hi in zip(*task.outputs[k].box))]
            if region.any():
                tiles.append(f"{task.coord}: {int(region.sum())}/{region.numel()}")
        out = pk.get_tensor(name)
        worst = int(c.diff.argmax())
        idx = _fmt_index(worst, tuple(out.shape))
        report = (f"first divergent layer: '{layer.name}' (the {checked} compared output(s) before it "
                  f"agree)\n"
                  f"  output '{name}' ({str(out.dtype)[6:]}, {tuple(out.shape)}): {c.n_bad} / {out.numel()} "
                  f"elements outside tolerance\n"
                  f"  bad tiles (grid coordinate: bad/total): {'; '.join(tiles[:16])}"
                  f"{' ...' if len(tiles) > 16 else ''}\n"
                  f"  worst element {idx}: actual {float(out.flatten()[worst]):.6g}, expected "
                  f"{float(references[name].flatten()[worst]):.6g}, "
                  f"allowed {float(c.allowed.flatten()[worst]):.3g}")
    if report is not None and later:
        report += f"\n  later layers that diverge too: {', '.join(later)}"
    return report


def assert_no_divergence(pk, references: dict[str, torch.Tensor], tolerances: dict[str, Tolerance]) -> None:
    """Compare every intermediate with its reference; print and raise the first divergence."""
    report = first_divergence(pk, references, tolerances)
    agree = f"DIVERGENCE none: {len(references)} tensors agree"
    say(f"DIVERGENCE {report}" if report else agree)
    if report:
        raise AssertionError(report)


def _nonvacuous_line(name: str, check: str, ok: bool, detail: str = "") -> None:
    verdict = "PASS" if ok else "FAIL"
    say(f"NONVACUOUS {name} {check} {verdict}{(' ' + detail) if detail else ''}")
    if not ok:
        raise AssertionError(f"non-vacuity check '{check}' failed for '{name}' {detail}")


def check_nonvacuous(name: str, out: torch.Tensor, checks=(FINITE, NONZERO, DIFFERS_FROM_INPUT),
                     inputs: tuple[torch.Tensor, ...] = (), reference: torch.Tensor | None = None) -> None:
    """One line per check: finite, not all zero, not equal to an input, reference not trivial."""
    if FINITE in checks:
        _nonvacuous_line(name, "finite", bool(torch.isfinite(out.float()).all()))
    if NONZERO in checks:
        nz = int((out != 0).sum())
        _nonvacuous_line(name, "nonzero", nz > 0, f"({nz}/{out.numel()} nonzero)")
    if DIFFERS_FROM_INPUT in checks:
        same = [i for i, x in enumerate(inputs) if x.shape == out.shape and torch.equal(x.to(out.dtype), out)]
        _nonvacuous_line(name, "differs_from_input", not same, f"(equal to input #{same[0]})" if same else "")
    if reference is not None:
        _nonvacuous_line(name, "reference_nontrivial", bool((reference != 0).any()) and
                         bool(torch.isfinite(reference.float()).all()))


def check_layer_outputs(pk, outputs: dict[str, torch.Tensor] | None = None) -> None:
    """Run every layer's declared non-vacuity checks on its final outputs."""
    for layer in pk.layers:
        ins = tuple(a.tensor.data for a in layer.inputs if a.tensor.data is not None)
        for acc in layer.outputs:
            if acc.written:
                check_nonvacuous(f"{layer.name}.{acc.tensor.name}", pk.get_tensor(acc.tensor.name),
                                 layer.checks, ins)


@contextlib.contextmanager
def capture_log(level: int = logging.INFO):
    """Collect the 'mirage.mpk' logger's messages (cache hits/misses, coarsening) as a list."""
    logger = logging.getLogger("mirage.mpk")
    records: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler, old = Collect(level), logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


# ---- inputs --------------------------------------------------------------------------------

def seed(default: int = 0) -> int:
    """The test seed: MPK_SEED if set, else `default` (printed in every failure message)."""
    return int(os.environ.get("MPK_SEED", default))


def generator(offset: int = 0) -> torch.Generator:
    """A contained CPU generator (never the global RNG), seeded from MPK_SEED + offset."""
    g = torch.Generator(device="cpu")
    g.manual_seed(seed() + offset)
    return g


def randn(shape, dtype=float32, gen: torch.Generator | None = None, scale: float = 1.0) -> torch.Tensor:
    d = to_dtype(dtype)
    return (torch.randn(*shape, generator=gen or generator(), dtype=torch.float32) * scale).to(d.torch)


def load_reference(test_file: str, name: str = "pytorch_reference"):
    """Load `<folder of test_file>/pytorch_reference.py` under a unique name (folders never collide)."""
    folder = os.path.dirname(os.path.abspath(test_file))
    path = os.path.join(folder, f"{name}.py")
    unique = f"_mpk_ref_{os.path.basename(folder)}_{abs(hash(path)) & 0xFFFFFF:06x}"
    if unique in sys.modules:
        return sys.modules[unique]
    spec = importlib.util.spec_from_file_location(unique, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[unique] = module
    spec.loader.exec_module(module)
    return module


def run_cases_as_script(name: str, run_case, dtypes, cases, jitter=None, extra=()) -> None:
    """`python test_<layer>_testmode.py`: every (dtype, case), output in ./test_output (or
    MPK_OUTPUT_DIR); any failure raises, so the script exits non-zero."""
    out_dir = os.environ.get("MPK_OUTPUT_DIR", "./test_output")
    for fn in extra:
        fn()
    for dtype in dtypes:
        for case in cases:
            kw = {"jitter": jitter(dtype, case)} if jitter else {}
            pk = run_case(dtype, *case, output_dir=out_dir, **kw)
    print(f"generated code and task graph: {pk.output_files[0]}, {pk.output_files[1]}")
    print(f"All {name} test-mode cases PASS")


def cpu_config(jitter_seed: int | None = 0, **overrides) -> dict:
    """MPK default params for a test-mode run with several workers and (by default) jitter."""
    import mirage

    from .persistent_kernel import PersistentKernel

    params = PersistentKernel.get_default_init_parameters()
    workers, schedulers = mirage.get_configurations_from_gpu(0)
    params.update(test_mode=True, num_workers=workers, num_local_schedulers=max(2, schedulers))
    params.update(overrides)
    params["schedule_jitter"] = jitter_seed
    return params


# ---- multi-rank ----------------------------------------------------------------------------

all_ranks_agree = dist.all_ranks_agree


@contextlib.contextmanager
def on_all_ranks(what: str):
    """Run checks, then agree across ranks (dist.all_ranks_agree) before any later collective:
    a rank whose check failed re-raises its error, the others raise naming the failed ranks."""
    try:
        yield
    except Exception as e:
        dist.all_ranks_agree(False, what)     # raises on every rank, naming the failed ones
        raise AssertionError(f"{what}: {e}") from e   # not reached
    dist.all_ranks_agree(True, what)


def mpiexec() -> str:
    """The `mpiexec` of this Python's environment (the mpich wheel installs it), else the PATH's."""
    here = os.path.join(sysconfig.get_path("scripts"), "mpiexec")
    found = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError(f"mpiexec not found in {os.path.dirname(here)} or on PATH: "
                                f"{dist.INSTALL_HINT}")
    return found


def mpirun(file: str, n: int, timeout: float = 60, args: tuple = (),
           env: dict | None = None) -> tuple[int, str]:
    """Run `mpiexec -n N python FILE ARGS` and return (exit code, stdout + stderr); 124 on a timeout,
    after killing the whole job. Multi-rank tests assert on the code and on per-rank evidence lines."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, file, *map(str, args)]
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)           # mpiexec and every rank: one session
        out, _ = proc.communicate()
        out += f"\n[mpirun] TIMEOUT: killed after {timeout:g} s: {' '.join(cmd)}\n"
        code = 124
    print(f"$ {' '.join(cmd)}  -> exit {code}\n{out}", flush=True)
    return code, out


def rank_lines(output: str, rank: int, prefix: str) -> list[str]:
    """Lines of rank `rank` in an mpirun output that start with `prefix` (after "[rank r] ")."""
    tag = f"[rank {rank}] {prefix}"
    return [line for line in output.splitlines() if line.startswith(tag)]
