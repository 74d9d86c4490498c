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
