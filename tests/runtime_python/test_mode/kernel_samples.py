"""Deliberately broken task kernels, without touching mirage/ or csrc/: the support module of
test_kernel_negative_controls.py.

A layer is mirage/mpk/layers/<stem>.py + csrc/tasks/<stem>.cuh. For a sample kernel both come from
here instead:
  - the kernel: kernel_samples/<stem>.cuh, added to a copy of csrc/ (build.csrc_dir()) in a temporary
    directory that MPK_CSRC_DIR points at; build.py hashes every header under it into the cache key,
    so the sample's module is cached like any other and never mixed up with the real csrc/'s;
  - the layer module: a types.ModuleType registered in sys.modules as mirage.mpk.layers.<stem>,
    where find_layer and task_type_of import layers by name.
`install(monkeypatch, csrc)` does both for one test (monkeypatch undoes them).

negctl_twice (kernel_samples/negctl_twice.cuh): y = 2 x per row, correct with bug=OK; every other
value of BUGS switches on one bug (the .cuh's header describes each).
"""
from __future__ import annotations

import os
import shutil
import sys
import types

import torch

from mirage.mpk import build, testing
from mirage.mpk.dtypes import FLOATS
from mirage.mpk.layers import (
    FINITE,
    NONZERO,
    NOT_SPLIT,
    Access,
    Layer,
    check_grid,
    check_splits,
    check_tensor,
)
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLES = os.path.join(HERE, "kernel_samples")
SAMPLE = "negctl_twice"
# An unused task type: MPK's numbers stay below 1900 (layers/*.py TASK_TYPE).
TASK_TYPE = 1901
# iparam(0) of the kernel: the NEGCTL_* values of negctl_twice.cuh.
BUGS = {"ok": 0, "smem_race": 1, "warp_race": 2, "divergent_barrier": 3, "syncwarp_mask": 4,
        "exited_lanes": 5, "uninit": 6, "static_once": 7, "out_of_tile": 8, "out_of_tensor": 9,
        "halo_read": 10}


def negctl_twice_layer(pk, name: str, input, output, grid_dim, block_dim, bug: str = "ok",
                       alpha: float = 0.0) -> Layer:
    """y = 2 x (fp32 math), grid.x splitting rows; `bug` one of BUGS; alpha the weight of the halo
    term of bug 'halo_read' (0: it changes no value that is in memory)."""
    if bug not in BUGS:
        raise ValueError(f"layer '{name}': bug {bug!r}: expected one of {sorted(BUGS)}")
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    y = check_tensor(name, "output", output, dims=x.dims, dtype=x.dtype)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': grid_dim must be (n, 1, 1), got {grid}")
    rows = (0, NOT_SPLIT, NOT_SPLIT)
    inputs, outputs = [Access("input", x, rows)], [Access("output", y, rows)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, SAMPLE, grid, inputs, outputs, (x.dtype,), fparams=(alpha,),
                 iparams=(BUGS[bug], x.dims[0]), checks=(FINITE, NONZERO), params={"bug": bug})


def layer_module() -> types.ModuleType:
    """The layer module of the sample, as mirage/mpk/layers/<stem>.py would be."""
    m = types.ModuleType(f"mirage.mpk.layers.{SAMPLE}", "negctl_twice: a sample kernel with switchable bugs "
                         "(tests/runtime_python/test_mode/kernel_samples.py)")
    m.TASK_TYPE = TASK_TYPE
    m.TP = "replicated"      # every rank the whole tensor (never run multi-rank here)
    m.negctl_twice_layer = negctl_twice_layer
    return m


def make_csrc(dest: str) -> str:
    """A copy of the kernel sources with the samples added under tasks/; returns its path.
    Copied from build.csrc_dir() as it resolves now, so call it before pointing MPK_CSRC_DIR here."""
    csrc = os.path.join(dest, "csrc")
    shutil.copytree(build.csrc_dir(), csrc)
    for f in sorted(os.listdir(SAMPLES)):
        if f.endswith(".cuh"):
            shutil.copy(os.path.join(SAMPLES, f), os.path.join(csrc, "tasks", f))
    return csrc


def install(monkeypatch, csrc: str) -> None:
    """For one test: builds take csrc (make_csrc's) and pk.negctl_twice_layer exists."""
    monkeypatch.setenv("MPK_CSRC_DIR", csrc)
    monkeypatch.setitem(sys.modules, f"mirage.mpk.layers.{SAMPLE}", layer_module())


def reference(x: torch.Tensor) -> torch.Tensor:
    return (2.0 * x.double()).to(x.dtype)


def line_of(marker: str, stem: str = SAMPLE) -> str:
    """'negctl_twice.cuh:NN', the line of the kernel carrying the comment [marker] (as the emulation's
    messages name it)."""
    with open(os.path.join(SAMPLES, f"{stem}.cuh")) as f:
        hits = [i for i, line in enumerate(f, 1) if f"// [{marker}]" in line]
    if len(hits) != 1:
        raise LookupError(f"{stem}.cuh: {len(hits)} lines carry the marker [{marker}]; expected one")
    return f"{stem}.cuh:{hits[0]}"


# ---- the two paths a broken kernel goes through

def run_kernel(x: torch.Tensor, bug: str, grid: int, coords=None):
    """The kernel-level run (testing.run_tasks: each task alone, footprint checks), then run.check
    against 2 x over the tiles of the tasks that ran; returns the KernelRun."""
    out = torch.zeros_like(x)
    run = testing.run_tasks(lambda pk, t: pk.negctl_twice_layer(input=t["x"], output=t["y"],
                                                               grid_dim=(grid, 1, 1), block_dim=(128, 1, 1),
                                                               bug=bug),
                            {"x": x, "y": out}, coords=coords)
    run.check("y", reference(x), testing.tol_elementwise(x.dtype), checks=run.layer.checks)
    return run


def run_test_mode(x: torch.Tensor, bug: str, grid: int, jitter: int) -> torch.Tensor:
    """Test mode on the one-layer graph: several workers, schedule jitter (testing.cpu_config), the
    output compared by testing.check_output (a mismatch re-runs serially and names the bad tiles).
    Returns the output; raises what test mode raises."""
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter))
    try:
        out = torch.zeros_like(x)
        xd, yd = pk.attach_input(x, name="x"), pk.attach_input(out, name="y")
        pk.negctl_twice_layer(input=xd, output=yd, grid_dim=(grid, 1, 1), block_dim=(128, 1, 1), bug=bug)
        pk.compile()
        pk()
        testing.check_output(f"{SAMPLE}[{bug},jitter={jitter}]", out, reference(x),
                             testing.tol_elementwise(x.dtype), checks=pk.layers[0].checks, pk=pk)
        return out
    finally:
        pk.finalize()
