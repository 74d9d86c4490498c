"""Compile a generated module through a content-hash cache (after Triton's cache).

Key: sha256 of the generated source, every header under csrc/, the compiler's identity
and version, and the flags. One directory per key; a build goes to a private temporary
directory and is published with os.replace under a per-key file lock, so concurrent
ranks compile once and no reader ever sees a partial .so.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass

from filelock import FileLock

from .errors import MPKCacheError, MPKCompileError, MPKInstallError

log = logging.getLogger("mirage.mpk")

# The kernel sources: inside the package when installed from a wheel or `pip install .`
# (setup.py copies csrc/ to mirage/mpk/csrc), beside the package in a checkout or an editable install.
_HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGED_CSRC = os.path.join(_HERE, "csrc")
CHECKOUT_CSRC = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "csrc")
# What a build cannot do without: the runtime every generated module includes.
REQUIRED_HEADERS = ("runtime/runtime.h", "runtime/entry.h", "runtime/abi.h")
# -O1 (after the backend's -O2, so it wins): what both sanitizers' manuals recommend (less inlining,
# exact reports), and a third less compile time per sanitized module than -O2 (4.9 s against 7.1 s
# for a paged-attention module under ASan): the suite builds one per layer file per sanitizer.
# -g1: line tables and function descriptions (inlined frames included), which is all a report's
# file:line needs, without the local variables' descriptions: 40% less compile time per sanitized
# module (a linear module under TSan 3.1 s -> 1.9 s), the reports' frames unchanged (the sanitizer
# tests assert them: tests/runtime_python/test_mode/test_kernel_sanitizers.py, test_sanitizers.py).
SANITIZERS = {"thread": ["-fsanitize=thread", "-g1", "-O1"],
              "address": ["-fsanitize=address", "-fno-omit-frame-pointer", "-g1", "-O1"]}


@dataclass
class BuildResult:
    path: str           # the shared object to load
    key: str
    hit: bool
    seconds: float      # compile time on a miss, lookup time on a hit
    command: list[str]


def cache_dir() -> str:
    return os.environ.get("MPK_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "mirage-mpk")


def cuda_arch(target_cc: int) -> str:
    """nvcc's target for a compute capability: the arch-specific sm_90a / sm_100a where they exist
    (Hopper, Blackwell datacenter), else sm_<cc>."""
    return f"sm_{target_cc}a" if target_cc in (90, 100) else f"sm_{target_cc}"


def compiler_for(backend: str) -> str:
    return os.environ.get("MPK_NVCC", "nvcc") if backend == "cuda" else os.environ.get("MPK_CXX", "g++")


def flags(backend: str, test_mode: bool, sanitize: str, fault_injection: bool = False,
          target_cc: int = 90) -> list[str]:
    """The compile flags: the host compiler with the SIMT emulation (cpu), or nvcc for one GPU arch with
    the static CUDA runtime, so the module is a plain C-ABI .so that needs no CUDA install to load."""
    if backend == "cuda":
        if sanitize:
            raise ValueError(f"MPK_SANITIZE={sanitize!r} instruments the CPU backend; on the GPU run the "
                             f"process under compute-sanitizer instead")
        arch = cuda_arch(target_cc)
        f = ["-x", "cu", "-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static",
             "-DMPK_BACKEND_CUDA", "-gencode", f"arch=compute_{arch[3:]},code=[{arch},compute_{arch[3:]}]"]
    elif backend == "cpu":
        f = ["-x", "c++", "-std=c++17", "-O2", "-fPIC", "-shared", "-pthread", "-DMPK_BACKEND_CPU"]
    else:
        raise ValueError(f"backend {backend!r}: expected 'cpu' or 'cuda'")
    if test_mode:
        f.append("-DMPK_TEST_MODE")
    if fault_injection:
        f.append("-DMPK_FAULT_INJECTION")
    if sanitize:                 # cpu only: the cuda branch refused it above
        if sanitize not in SANITIZERS:
            raise ValueError(f"MPK_SANITIZE={sanitize!r}: expected one of {sorted(SANITIZERS)} or empty")
        f += SANITIZERS[sanitize]
    return f


def csrc_dir() -> str:
    """The directory of the C++/CUDA sources a build includes (-I): MPK_CSRC_DIR if set (to test
    edited kernels without reinstalling; the cache key hashes its headers), else the packaged copy,
    else the checkout's. Raises MPKInstallError naming every place looked at when none is complete."""
    override = os.environ.get("MPK_CSRC_DIR", "")
    candidates = [("MPK_CSRC_DIR", override)] if override else [("the package", PACKAGED_CSRC),
                                                                 ("the checkout", CHECKOUT_CSRC)]
    for _, path in candidates:
        if all(os.path.isfile(os.path.join(path, h)) for h in REQUIRED_HEADERS):
            return path
    looked = "; ".join(f"{where}: {path}" for where, path in candidates)
    raise MPKInstallError(f"the kernel sources (csrc/, with {', '.join(REQUIRED_HEADERS)}) were not found "
                          f"(looked in {looked}). Reinstall mirage-mpk (pip install . copies csrc/ into the "
                          f"package) or point MPK_CSRC_DIR at a csrc/ directory")


def _compiler_env() -> dict[str, str]:
    """The compiler must not inherit a sanitizer runtime preloaded into this Python (2-3x slower)."""
    return {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


@functools.lru_cache(maxsize=None)
def compiler_identity(compiler: str) -> str:
    path = shutil.which(compiler)
    if path is None and compiler == compiler_for("cuda") and os.environ.get("MPK_NVCC_IDENTITY"):
        return os.environ["MPK_NVCC_IDENTITY"]  # a GPU machine without nvcc: modules built ahead (cache hits)
    if path is None:
        raise FileNotFoundError(f"compiler '{compiler}' not found on PATH (set MPK_CXX to choose one; "
                                f"MPK_NVCC for nvcc)")
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False,
                         env=_compiler_env()).stdout
    return f"{os.path.realpath(path)}\n{out.strip()}"


def headers_digest(csrc: str) -> str:
    """sha256 over every header under `csrc` (relative path + bytes), in a fixed order."""
    h = hashlib.sha256()
    for root, dirs, files in os.walk(csrc):
        dirs.sort()
        for name in sorted(files):
            if name.endswith((".h", ".cuh")):
                path = os.path.join(root, name)
                h.update(os.path.relpath(path, csrc).encode())
                with open(path, "rb") as f:
                    h.update(f.read())
    return h.hexdigest()


def cache_key(src: str, compiler: str, fl: list[str], csrc: str) -> str:
    h = hashlib.sha256()
    for part in (src, headers_digest(csrc), compiler_identity(compiler), " ".join(fl)):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _usable_cache_dir() -> str:
    """cache_dir(), created if missing; a file there, or a directory this process cannot write, is an
    MPKCacheError naming the path and where it came from (MPK_CACHE_DIR or the default)."""
    root = cache_dir()
    origin = "MPK_CACHE_DIR" if os.environ.get("MPK_CACHE_DIR") else "the default cache directory"
    if os.path.exists(root) and not os.path.isdir(root):
        raise MPKCacheError(f"the compile cache {root} ({origin}) is a file, not a directory; point "
                            f"MPK_CACHE_DIR at a directory")
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as e:
        raise MPKCacheError(f"cannot create the compile cache {root} ({origin}): {e.strerror}; point "
                            f"MPK_CACHE_DIR at a writable directory") from None
    if not os.access(root, os.W_OK | os.X_OK):
        raise MPKCacheError(f"the compile cache {root} ({origin}) is not writable by this process; point "
                            f"MPK_CACHE_DIR at a writable directory")
    return root


# A published entry: <key>/module.so (or runtime.o, below) and <key>/module.sha256 ("<sha256> <bytes>"),
# written before the directory is renamed into place, so an entry is whole or absent; every hit checks it.
_CHECKSUM = "module.sha256"
# The CPU backend builds a generated module (codegen.source) as two objects, linked: the runtime's (the
# executor, the SIMT emulation's scheduler, the entry points: nine tenths of a module's compile time,
# 2.7 of 2.8 s at -O2 and 5.0 of 5.2 s under ASan for identity's), compiled from RUNTIME_TU once per
# (flags, csrc/, compiler) and cached as an entry of its own, and the dispatcher's: the generated source
# with -DMPK_DISPATCHER_OBJECT (csrc/runtime/runtime_object.h), which declares the emulation's slow
# paths instead of compiling them again (csrc/runtime/simt_cpu_config.h). Built alone, the generated source is
# still a whole module: the by-hand command in its header, and nvcc's build.
RUNTIME_OBJECT = "runtime.o"
RUNTIME_TU = '#include "runtime/runtime_object.h"\n'


def _verified(entry: str, artifact: str = "module.so") -> str | None:
    """The entry's artifact if its checksum file matches it; a damaged entry is logged and discarded."""
    so, record = os.path.join(entry, artifact), os.path.join(entry, _CHECKSUM)
    if not os.path.exists(so) and not os.path.exists(record):
        return None
    try:
        with open(record) as f:
            want_hash, want_size = f.read().split()
        size = os.path.getsize(so)
        if size == int(want_size) and sha256_file(so) == want_hash:
            return so
        why = (f"{artifact} ({size} bytes) does not match its record ({want_size} bytes, sha256 "
               f"{want_hash[:16]}...)")
    except (OSError, ValueError) as e:
        why = f"its module or checksum record is unreadable ({e})"
    log.warning("cache entry %s is damaged (%s): discarding it and rebuilding", entry, why)
    shutil.rmtree(entry, ignore_errors=True)
    return None


def compile_module(src: str, backend: str = "cpu", test_mode: bool = True, sanitize: str = "",
                   fault_injection: bool = False, target_cc: int = 90, what: str = "",
                   generated: bool = False) -> BuildResult:
    """The module of `src`, from the cache or compiled now; `what` (the kernels in it) goes in the log.
    generated: `src` is codegen.source's (a dispatcher that includes runtime/entry.h), which the CPU
    backend builds against the cached runtime object (RUNTIME_TU above)."""
    compiler = compiler_for(backend)
    fl = flags(backend, test_mode, sanitize, fault_injection, target_cc)
    csrc = csrc_dir()
    two_objects = generated and backend == "cpu"
    key = cache_key(src, compiler, fl + (["-DMPK_DISPATCHER_OBJECT"] if two_objects else []), csrc)
    if not two_objects:
        return _cached(key, src, "module.so", compiler, what, lambda cu, out: [[compiler, *fl, "-I", csrc, cu,
                                                                               "-o", out]])

    def two(cu: str, out: str) -> list[list[str]]:
        # keyed by csrc/runtime/ alone, all it includes: a scratch csrc/ with one task kernel edited (the
        # negative controls) reuses the runtime object instead of compiling it again (3-5 s each)
        runtime_key = cache_key(RUNTIME_TU, compiler, fl + ["-c"], os.path.join(csrc, "runtime"))
        runtime = _cached(runtime_key, RUNTIME_TU, RUNTIME_OBJECT,
                          compiler, "the runtime object", lambda c, o: [[compiler, *fl, "-c", "-I", csrc, c,
                                                                         "-o", o]]).path
        dispatcher = os.path.join(os.path.dirname(out), "dispatcher.o")
        # the runtime's object first: with the dispatcher's first, ThreadSanitizer's symbolizer lost the
        # file:line of task kernels' frames (tests/runtime_python/test_mode/test_sanitizers.py)
        return [[compiler, *fl, "-DMPK_DISPATCHER_OBJECT", "-c", "-I", csrc, cu, "-o", dispatcher],
                [compiler, *fl, "-x", "none", runtime, dispatcher, "-o", out]]
    return _cached(key, src, "module.so", compiler, what, two)


def _cached(key: str, src: str, artifact: str, compiler: str, what: str, commands) -> BuildResult:
    """The cache entry `key` holding `artifact`, or made now in a private directory published whole:
    `src` is written to module.cu there, then commands(module.cu, artifact's path) run in order."""
    root = _usable_cache_dir()
    final = os.path.join(root, key)
    t0 = time.perf_counter()
    with FileLock(os.path.join(root, f"{key}.lock")):
        found = _verified(final, artifact)
        if found is not None:
            dt = time.perf_counter() - t0
            log.info("cache hit %s (%s)", key[:16], found)
            return BuildResult(found, key, True, dt, [])
        if shutil.which(compiler) is None:   # only a cache hit works without one (MPK_NVCC_IDENTITY)
            raise MPKCompileError(f"{compiler} is not on PATH and the cache {root} has no module for this "
                                  f"source ({key[:16]}); install it, or build ahead (scripts/gpu_check.sh "
                                  f"--prepare)", [compiler], "", "")
        log.info("compiling %s%s with %s (cache miss)", key[:16], f" ({what})" if what else "", compiler)
        tmp = os.path.join(root, f"{key}.tmp.{os.getpid()}.{uuid.uuid4().hex}")
        try:
            os.makedirs(tmp)
            cu = os.path.join(tmp, "module.cu")
            with open(cu, "w") as f:
                f.write(src)
            cmds = commands(cu, os.path.join(tmp, artifact))
            for cmd in cmds:
                proc = subprocess.run(cmd, capture_output=True, text=True, check=False, env=_compiler_env())
                if proc.returncode != 0:
                    _compile_failed(root, key, cu, cmd, proc)
            built = os.path.join(tmp, artifact)
            with open(os.path.join(tmp, _CHECKSUM), "w") as f:
                f.write(f"{sha256_file(built)} {os.path.getsize(built)}\n")
            if os.path.isdir(final):          # a stale directory without a module
                shutil.rmtree(final)
            os.replace(tmp, final)
        except OSError as e:
            origin = "MPK_CACHE_DIR" if os.environ.get("MPK_CACHE_DIR") else "the default cache directory"
            raise MPKCacheError(f"writing the cache entry {final} failed: {e.strerror or e} (cache {root}, "
                                f"{origin}); nothing was published, the next run compiles again") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)      # gone after a publish; a partial build otherwise
        dt = time.perf_counter() - t0
        log.info("compiled %s in %.2f s", key[:16], dt)
        return BuildResult(os.path.join(final, artifact), key, False, dt, cmds[0])


def _compile_failed(root: str, key: str, cu: str, cmd: list[str], proc) -> None:
    kept = os.path.join(root, "failed", f"{key}.cu")
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    shutil.copyfile(cu, kept)
    errors = "\n".join(line for line in proc.stderr.splitlines() if "error" in line)[:4000]
    raise MPKCompileError(
        f"compiling the generated module failed (exit {proc.returncode})\n"
        f"command: {' '.join(cmd)}\nfirst errors:\n{errors or proc.stderr[:4000]}\n"
        f"kept source: {kept}", cmd, errors or proc.stderr, kept)
