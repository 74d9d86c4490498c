"""A C++ harness of tests/csrc built as a shared library and its C entry point loaded with ctypes
(test_ptx_gemm.py, test_wgmma_gemm.py): g++ -O2 with the warnings as errors, csrc/ on the include path."""
from __future__ import annotations

import ctypes
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def entry_point(out_dir: str, source: str, symbol: str, argtypes: list) -> ctypes._CFuncPtr:
    """tests/csrc/<source> built into out_dir, its function `symbol` (returning int) with `argtypes`."""
    lib = os.path.join(str(out_dir), os.path.splitext(source)[0] + ".so")
    flags = ["-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-Wall", "-Wextra", "-Werror"]
    src, include = os.path.join(ROOT, "tests", "csrc", source), "-I" + os.path.join(ROOT, "csrc")
    subprocess.run(["g++", *flags, include, src, "-o", lib], check=True, timeout=300)
    fn = getattr(ctypes.CDLL(lib), symbol)
    fn.argtypes = argtypes
    fn.restype = ctypes.c_int
    return fn


def gemm_control_is_caught(label: str, seeds, run, budget, named: tuple) -> None:
    """A GEMM harness's negative control over `seeds`: run(seed) -> (d, error, a, b) with the defect
    planted. Every failure must be of the expected kind: an error holding one of the words `named` (None
    among them: a wrong result is expected instead), or d outside budget(a, b) of torch.matmul in fp64;
    it must fail on at least one seed (a race only on the seeds whose schedule shows it); the evidence
    of each seed is printed."""
    import torch

    from mirage.mpk import testing

    caught = []
    for seed in seeds:
        d, err, a, b = run(seed)
        if err:
            caught.append(f"seed {seed}: {err}")
            assert any(w and w in err for w in named), err
            continue
        ref = torch.matmul(a.double(), b.double().t())
        c = testing.compare(d, ref, budget(a, b))
        testing.evidence(f"{label} seed {seed}", d, ref, budget(a, b), c)
        if not c.passed:
            caught.append(f"seed {seed}: outside the budget ({c.n_bad} of {d.numel()} elements)")
    print(f"{label}: caught on {len(caught)} of {len(seeds)} seeds\n  " + "\n  ".join(caught))
    assert caught, f"{label} passed on every seed"
