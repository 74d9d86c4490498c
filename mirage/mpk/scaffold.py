"""`python -m mirage.mpk new-layer <stem> [--root DIR]`: the files of a new layer, passing from the first run.

A layer is exactly these files, found by their stem (README, "How to add a layer"):
  mirage/mpk/layers/<stem>.py                          the layer module
  csrc/tasks/<stem>.cuh                                the CUDA kernel (both backends)
  tests/runtime_python/<stem>/pytorch_reference.py     the maths in float64
  tests/runtime_python/<stem>/test_<stem>.py           the kernel alone, task by task (testing.run_tasks)
  tests/runtime_python/<stem>/test_<stem>_testmode.py  the layer in a real graph, one or N ranks
The generated layer is a row-wise PLACEHOLDER, y = x * scale (one scalar parameter, so the SCALARS /
SCALAR_CASES pattern is there to keep or delete), with the next free extension task type. Nothing is
overwritten: an existing file or layer of that stem is an error and nothing is written.
"""
from __future__ import annotations

import argparse
import ast
import keyword
import os
import re
import sys
from string import Template

from .layers import next_free_task_type

MAX_STEM = 20    # the generated files then fit ruff's 110 columns (as long as linear_with_residual)

LAYER = '''\
"""${stem}_layer: PLACEHOLDER y = x * scale per element, fp32 math; grid.x splits rows.

input [rows, cols] -> output [rows, cols]. Kernel: csrc/tasks/${stem}.cuh.
Written by `python -m mirage.mpk new-layer ${stem}`:
replace each PLACEHOLDER here, in the kernel, in pytorch_reference.py and in the tests together.
"""
from __future__ import annotations

from ..dtypes import FLOATS
from . import NOT_SPLIT, Access, Layer, check_grid, check_splits, check_tensor

# The next free number of the mirage-mpk extension range (layers/__init__.py): MPK has no such task.
# A layer MPK has takes MPK's TaskType number instead.
TASK_TYPE = ${task_type}
# Tensor parallelism (mirage.mpk.testing.TP_KINDS): every rank runs the whole layer on the same inputs.
TP = "replicated"
# Scalar parameter -> the value a kernel that ignored it would in effect use (Layer.scalars): a kernel
# that ignored `scale` multiplies by 1. PLACEHOLDER: with no scalar parameter, delete SCALARS, the
# fparams/params/scalars below and the tests' SCALAR_CASES.
SCALARS = {"scale": 1.0}


def ${stem}_layer(pk, name: str, input, output, grid_dim, block_dim,
        scale: float = 2.0) -> Layer:
    grid = check_grid(name, grid_dim, block_dim)
    x = check_tensor(name, "input", input, ndim=2, dtype=FLOATS)
    rows, cols = x.dims
    y = check_tensor(name, "output", output, dims=(rows, cols), dtype=x.dtype)
    if grid[1] != 1 or grid[2] != 1:
        raise ValueError(f"layer '{name}': ${stem} works on whole rows, so grid_dim must be "
                         f"(rows_split, 1, 1); got {grid}")
    if not isinstance(scale, (int, float)) or isinstance(scale, bool):
        raise ValueError(f"layer '{name}': scale must be a number, got {scale!r}")
    split_rows = (0, NOT_SPLIT, NOT_SPLIT)       # grid.x splits dim 0 of input and output
    inputs = [Access("input", x, split_rows)]
    outputs = [Access("output", y, split_rows)]
    check_splits(name, grid, inputs, outputs)
    return Layer(name, "${stem}", grid, inputs, outputs, (x.dtype,), fparams=(float(scale),),
                 params={"scale": float(scale)}, scalars=dict(SCALARS))
'''

KERNEL = '''\
// ${stem}.cuh: PLACEHOLDER y = x * scale, row by row over one task's tile, as CUDA device code for
// both backends (runtime/simt.h). Written by `python -m mirage.mpk new-layer ${stem}`: replace the
// maths here, in mirage/mpk/layers/${stem}.py and in pytorch_reference.py together.
//   y[r, j] = x[r, j] * scale,  scale = fparam(0)
// fp32 math, one rounding to T per output.
// Shapes: in(0) x [rows, cols] (row stride strides[0], any column stride), out(0) y [rows, cols]
//         with its own strides. The layer's grid.x splits rows: a task has whole rows, what a row
//         reduction needs.
// Threads: the block takes one row at a time; thread t handles columns t, t + blockDim.x, ...
//   (consecutive threads, consecutive elements: coalesced). No barriers. A row reduction adds
//   block_sum (common.cuh; shared memory, two __syncthreads per call; rmsnorm.cuh batches rows).
// Test: tests/runtime_python/${stem}/test_${stem}.py (the kernel alone, task by task),
//       tests/runtime_python/${stem}/test_${stem}_testmode.py (in a graph)
// Run:  python -m pytest tests/runtime_python/${stem}/
#pragma once
#include "common.cuh"

namespace mpk {

// ---- kernel
template <typename T>
__device__ void ${stem}_rows(const T* x, const Tile2D& xt, T* y, const Tile2D& yt, float scale) {
    for (int64_t r = 0; r < xt.rows; ++r) {
        const T* xr = x + r * xt.row_stride;
        T* yr = y + r * yt.row_stride;
        for (int64_t c = threadIdx.x; c < xt.cols; c += blockDim.x)
            yr[c * yt.col_stride] = from_float<T>(to_float(xr[c * xt.col_stride]) * scale);
    }
}

// ---- dispatch
template <typename T>
__device__ void ${stem}_task(const TaskView& v) {
    ${stem}_rows<T>(v.in<const T>(0), tile2d(v.in_tile(0)), v.out<T>(0), tile2d(v.out_tile(0)),
                    static_cast<float>(v.fparam(0)));
}

}  // namespace mpk
'''

REFERENCE = '''\
"""${stem} reference: PLACEHOLDER y = x * scale, in float64, unrounded.

torch only: a reference that shared code with the layer would share its bugs.
"""
import torch


def ${stem}(x: torch.Tensor, scale: float = 2.0) -> torch.Tensor:
    return x.double() * scale
'''

TESTMODE = '''\
"""${stem}_layer in test mode: real generated code, several workers, schedule jitter.

Run: python tests/runtime_python/${stem}/test_${stem}_testmode.py
     python -m pytest tests/runtime_python/${stem}/test_${stem}_testmode.py
     mpirun -n 4 python tests/runtime_python/${stem}/test_${stem}_testmode.py
     (one 4-rank job: the layer is replicated (its module's TP), so every rank runs every case on
     the same full inputs and the outputs must be bit-identical across ranks; run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (rows, cols, grid.x): even split, non-power-of-two split (3 tiles of 2 rows), one-row tiles, one task
SHAPES = [(16, 4096, 16), (6, 384, 3), (5, 96, 5), (1, 7, 1)]
# (dtype, shape, scalar parameters): cases where each parameter moves the result beyond the budget, so a
# kernel that ignored it fails (testing.check_scalars, required).
SCALAR_CASES = [
    (torch.bfloat16, (6, 384, 3), {"scale": 3.0}),
    (torch.float32, (5, 96, 5), {"scale": -0.5}),
]


def run_case(dtype, rows, cols, grid, scale=2.0, jitter=0, output_dir=None, scalars_required=False,
             world=testing.ONE_RANK):
    gen = testing.generator(offset=rows * 1000 + cols)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    x = testing.randn((rows, cols), dtype, gen)
    out = torch.zeros(rows, cols, dtype=dtype)
    x_dt, out_dt = pk.attach_input(x, name="x"), pk.attach_input(out, name="out")
    pk.${stem}_layer(input=x_dt, output=out_dt, grid_dim=(grid, 1, 1), block_dim=(128, 1, 1),
        scale=scale)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    expected = ref.${stem}(x, scale)
    name = f"${stem}[{str(dtype)[6:]},{rows}x{cols},grid={grid},scale={scale:g}{world.tag}]"
    # PLACEHOLDER: a reduction derives its own budget (docs/tolerances.md)
    tol = testing.tol_elementwise(dtype)
    reference = lambda **p: ref.${stem}(x, **p)      # noqa: E731 (the reference of the scalars)
    testing.check_output(name, out, expected, tol, pk.layers[0].checks, (x,), pk=pk, reference_fn=reference)
    testing.check_scalars(name, pk.layers[0], reference, expected, tol, required=scalars_required)
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols,grid", SHAPES)
def test_${stem}(dtype, rows, cols, grid):
    run_case(dtype, rows, cols, grid, jitter=rows)


@pytest.mark.parametrize("dtype,case,params", SCALAR_CASES,
                         ids=[f"{str(d)[6:]}-{c[0]}x{c[1]}-{p}" for d, c, p in SCALAR_CASES])
def test_${stem}_scalar_parameters(dtype, case, params):
    run_case(dtype, *case, jitter=case[0], scalars_required=True, **params)


if __name__ == "__main__":
    testing.run_cases_as_script("${stem}", run_case, DTYPES, SHAPES,
                                scalar_cases=SCALAR_CASES)
'''

KERNEL_TEST = '''\
"""${stem}: the kernel alone (testing.run_tasks; docs/kernel_tests.md).

Each task runs by itself on one emulated worker block, with no scheduler and everything outside its
declared tiles poisoned: a task that writes outside its output tiles, reads outside its input tiles,
races with itself or leaves an output element unwritten is a testing.MPKFootprintError naming its grid
coordinate, the tensor and the elements. Iterate on the kernel here; test_${stem}_testmode.py runs it in
a graph. Both use pytorch_reference.py.

Run: python tests/runtime_python/${stem}/test_${stem}.py   (or pytest this file; -k to pick cases)
"""
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
TARGETS = [80, 90]       # the worker block: 128 threads (sm_80), 256 (sm_90a / sm_100a)
SCALE = 2.0
# (rows, cols, grid.x, coords): every task of an even split; the edge tasks of a non-power-of-two split
# (3 tiles of 2 rows); one-row tiles narrower than a warp.
SHAPES = [(16, 384, 4, None), (6, 96, 3, "edges"), (5, 7, 5, None)]


block_dim = testing.worker_block_dim     # 128 threads (sm_80), 256 from Hopper on


def run_kernel(dtype, x, grid, coords, target_cc):
    """run_tasks over the layer's tasks, then the evidence over the tiles of the tasks that ran."""
    def layer_call(pk, t):
        pk.${stem}_layer(input=t["x"], output=t["out"], grid_dim=(grid, 1, 1),
            block_dim=block_dim(target_cc), scale=SCALE)

    run = testing.run_tasks(layer_call, {"x": x, "out": torch.zeros(x.shape, dtype=dtype)}, coords,
                            target_cc=target_cc)
    run.check("out", ref.${stem}(x, SCALE), testing.tol_elementwise(dtype), inputs=(x,))
    return run


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("rows,cols,grid,coords", SHAPES)
def test_kernel(dtype, rows, cols, grid, coords, target_cc):
    x = testing.randn((rows, cols), dtype, testing.generator(offset=rows * 1000 + cols))
    run_kernel(dtype, x, grid, coords, target_cc)


@pytest.mark.parametrize("target_cc", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
def test_kernel_strided(dtype, target_cc):
    # x a column block of a wider matrix: its row stride (3 * cols) is not its width, so a kernel that
    # takes one tensor's strides for another's fails here
    wide = testing.randn((6, 3 * 96), dtype, testing.generator(offset=7))
    run_kernel(dtype, wide[:, 96:192], 3, None, target_cc)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
'''


def layer_files(stem: str, task_type: int) -> dict[str, str]:
    """Relative path -> text of every file of a new layer `stem` with task type `task_type`."""
    folder = f"tests/runtime_python/{stem}"
    texts = {f"mirage/mpk/layers/{stem}.py": LAYER, f"csrc/tasks/{stem}.cuh": KERNEL,
             f"{folder}/pytorch_reference.py": REFERENCE, f"{folder}/test_{stem}.py": KERNEL_TEST,
             f"{folder}/test_{stem}_testmode.py": TESTMODE}
    return {rel: Template(t).substitute(stem=stem, task_type=task_type) for rel, t in texts.items()}


def declared_task_types(layers_dir: str) -> dict[str, object]:
    """stem -> the TASK_TYPE literal of each layer module in `layers_dir` (read, not imported: --root may
    be another checkout)."""
    types = {}
    for name in sorted(os.listdir(layers_dir)):
        if name.endswith(".py") and not name.startswith("_"):
            with open(os.path.join(layers_dir, name), encoding="utf-8") as f:
                tree = ast.parse(f.read(), filename=name)
            types[name[:-3]] = next((ast.literal_eval(n.value) for n in tree.body if isinstance(n, ast.Assign)
                                     and any(getattr(t, "id", None) == "TASK_TYPE" for t in n.targets)), None)
    return types


def new_layer(stem: str, root: str) -> list[str]:
    """Write the files of layer `stem` into the checkout at `root`; their paths. ValueError, with nothing
    written, for a bad stem, an existing layer or file, or a root that is not a checkout."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,%d}" % (MAX_STEM - 1), stem) or keyword.iskeyword(stem) or \
            stem.endswith("_layer"):
        raise ValueError(f"new-layer: {stem!r} is not a layer stem: use a lowercase Python identifier "
                         f"(letters, digits, _; starting with a letter; not a keyword) of at most {MAX_STEM} "
                         f"characters, e.g. 'layernorm', without '_layer' (pk.<stem>_layer is the method)")
    layers_dir = os.path.join(root, "mirage", "mpk", "layers")
    if not (os.path.isfile(os.path.join(layers_dir, "__init__.py"))
            and os.path.isfile(os.path.join(root, "csrc", "tasks", "common.cuh"))):
        raise ValueError(f"new-layer: {os.path.abspath(root)} is not a mirage-mpk checkout (no "
                         f"mirage/mpk/layers/__init__.py or csrc/tasks/common.cuh); run it from the "
                         f"repository root or pass --root DIR")
    types = declared_task_types(layers_dir)
    if stem in types:
        raise ValueError(f"new-layer: layer '{stem}' already exists (mirage/mpk/layers/{stem}.py); pick "
                         f"another stem or edit that layer")
    files = layer_files(stem, next_free_task_type(types.values()))
    folder = os.path.join(root, "tests", "runtime_python", stem)
    taken = [rel for rel in files if os.path.exists(os.path.join(root, rel))]
    if taken or os.path.exists(folder):
        raise ValueError(f"new-layer: refusing to overwrite: {', '.join(taken) or folder} already "
                         f"exist(s) in {os.path.abspath(root)}; remove them or pick another stem")
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "x", encoding="utf-8") as f:
            f.write(text)
    return list(files)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m mirage.mpk new-layer",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("stem", help="the layer's name: module, kernel and test folder (e.g. layernorm)")
    parser.add_argument("--root", default=".", help="the checkout to write into (default: .)")
    args = parser.parse_args(argv)
    try:
        written = new_layer(args.stem, args.root)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print("\n".join(f"wrote {rel}" for rel in written))
    print(f"next: replace each PLACEHOLDER with the layer's maths, then python -m pytest "
          f"tests/runtime_python/{args.stem}/ (README, 'How to add a layer')")
    return 0
