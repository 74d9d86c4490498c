"""python -m mirage.mpk doctor | cache [list|clear|path] | inspect <task_graph.json or output_dir>
                 | new-layer <stem> [--root DIR]   (the files of a new layer: mirage/mpk/scaffold.py)"""
from __future__ import annotations

import os
import pkgutil
import re
import shutil
import subprocess
import sys

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def _tool_version(path: str, *args: str) -> str:
    out = subprocess.run([path, *args], capture_output=True, text=True).stdout
    lines = out.splitlines() or ["?"]
    return next((x for x in lines if "release" in x), lines[0]).strip()


def _report(kind: str, what: str, detail: str, fix: str = "") -> None:
    """One doctor line: OK, NOTE (optional and absent) or PROBLEM (required), with the fix."""
    print(f"{kind:7s} {what}: {detail}{f'; fix: {fix}' if fix else ''}")


def doctor() -> int:
    """Report the toolchain, MPI, the GPU, sanitizer runtimes, the cache and the kernel sources, each
    missing piece with its fix. Exit 1 when a required one (compiler, kernel sources, cache) is missing."""
    import torch

    import mirage

    from . import build, sanitize
    from .errors import MPKCacheError

    print(f"mirage {mirage.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    problems = 0
    cxx = os.environ.get("MPK_CXX", "g++")
    path = shutil.which(cxx)
    if path:
        _report("OK", f"host compiler {cxx}", f"{path} ({_tool_version(path, '--version')})")
    else:
        problems += 1
        _report("PROBLEM", f"host compiler {cxx}", "not found on PATH: the CPU backend cannot build modules",
                "install g++ (apt-get install g++) or set MPK_CXX to a C++17 compiler")
    nvcc = shutil.which("nvcc")
    if nvcc:
        archs = subprocess.run([nvcc, "--list-gpu-arch"], capture_output=True, text=True).stdout.split()
        _report("OK", "nvcc", f"{nvcc} ({_tool_version(nvcc, '--version')}); archs {' '.join(archs) or '?'}")
    else:
        _report("NOTE", "nvcc", "not found: the CUDA build of the kernels is not checked (tests/unit/"
                "test_nvcc.py skips); the CPU backend does not need it", "install the CUDA toolkit")
    try:
        from mpi4py import MPI  # noqa: F401  (import only: checks the extra is installed)

        from .testing import mpiexec
        _report("OK", "MPI", f"mpi4py {sys.modules['mpi4py'].__version__}, mpiexec {mpiexec()}")
    except (ImportError, FileNotFoundError) as e:
        _report("NOTE", "MPI", f"{e}: multi-rank runs (world_size > 1) and their tests are unavailable",
                "pip install 'mirage-mpk[mpi]' (mpi4py and MPICH from PyPI, no root needed)")
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        _report("OK", "GPU", f"{torch.cuda.device_count()} x {props.name}, cc {props.major}.{props.minor}, "
                f"{props.multi_processor_count} SMs")
    else:
        _report("NOTE", "GPU", "none visible to torch: the CPU backend runs everything (CUDA kernels through "
                "the SIMT emulation); GPU-only tests skip")
    for kind in ("thread", "address"):
        try:
            _report("OK", f"{kind} sanitizer runtime", sanitize.runtime_library(kind))
        except (FileNotFoundError, subprocess.CalledProcessError) as e:
            _report("NOTE", f"{kind} sanitizer runtime", f"{e}: MPK_SANITIZE={kind} is unavailable",
                    f"install the compiler's {sanitize.LIBRARY[kind]} (Debian: lib{kind[0]}san* for gcc)")
    try:
        root = build._usable_cache_dir()
        entries = [e for e in os.listdir(root) if len(e) == 64]
        size = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(root) for f in fs)
        _report("OK", "cache", f"{root}: {len(entries)} module(s), {size / 2**20:.1f} MiB")
    except MPKCacheError as e:
        problems += 1
        _report("PROBLEM", "cache", str(e))
    print(f"get_configurations_from_gpu(0) = {mirage.get_configurations_from_gpu(0)}")
    problems += check_kernel_sources()
    return 1 if problems else 0


def _source_kind(path: str) -> tuple[str, str]:
    """(where the kernel sources at `path` come from, how to repair a file missing there)."""
    from . import build

    if os.environ.get("MPK_CSRC_DIR"):
        return "MPK_CSRC_DIR", "restore it there, or unset MPK_CSRC_DIR to use the installed sources"
    if os.path.realpath(path) == os.path.realpath(build.PACKAGED_CSRC):
        return "the package", "reinstall mirage-mpk (pip install . copies csrc/ into the package)"
    return "the checkout", "restore it from git (git checkout -- csrc/)"


def check_kernel_sources() -> int:
    """Print where the kernel sources are and one line per missing file, with its fix; return the count."""
    from . import build, layers
    from .errors import MPKInstallError

    try:
        root = build.csrc_dir()
    except MPKInstallError as e:
        print(f"PROBLEM {e}")
        return 1
    where, fix = _source_kind(root)
    print(f"kernel sources: {root} ({where})")
    missing = [(f"runtime header {h}", h) for h in build.REQUIRED_HEADERS]
    stems = sorted(m.name for m in pkgutil.iter_modules(layers.__path__) if not m.name.startswith("_"))
    missing += [(f"layer '{s}' (mirage/mpk/layers/{s}.py): kernel tasks/{s}.cuh", f"tasks/{s}.cuh")
                for s in stems]
    problems = [f"PROBLEM {what} is missing from {root} ({where}); fix: {fix}"
                for what, rel in missing if not os.path.isfile(os.path.join(root, rel))]
    # A header that is there but includes one that is not fails only when a kernel is compiled.
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(f for f in files if f.endswith((".h", ".cuh"))):
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                includes = _INCLUDE.findall(f.read())
            for inc in includes:
                if not any(os.path.isfile(os.path.join(d, inc)) for d in (dirpath, root)):
                    problems.append(f"PROBLEM {os.path.relpath(path, root)} includes \"{inc}\", which is "
                                    f"missing from {root} ({where}); fix: {fix}")
    for line in problems:
        print(line)
    if not problems:
        print(f"kernel sources complete: {len(build.REQUIRED_HEADERS)} runtime headers, "
              f"{len(stems)} layer kernels ({', '.join(stems)})")
    return len(problems)


def cache(args: list[str]) -> int:
    from .build import cache_dir

    root, action = cache_dir(), (args[0] if args else "list")
    if action == "path":
        print(root)
    elif action == "clear":
        shutil.rmtree(root, ignore_errors=True)
        print(f"removed {root}")
    elif action == "list":
        entries = sorted(e for e in os.listdir(root) if len(e) == 64) if os.path.isdir(root) else []
        for e in entries:   # a module, or the CPU backend's runtime object (mirage/mpk/build.py)
            kept = [f for f in ("module.so", "runtime.o") if os.path.exists(os.path.join(root, e, f))]
            size = os.path.getsize(os.path.join(root, e, kept[0])) if kept else 0
            print(f"{e[:16]}  {size:>9} bytes  {kept[0] if kept else '-'}")
        print(f"{len(entries)} entries in {root}")
    else:
        print(f"unknown cache action {action!r}; use list, clear or path", file=sys.stderr)
        return 2
    return 0


def inspect(path: str) -> int:
    """A task graph file, or an output_dir: its kept .cu, task graphs, metadata and traces."""
    from . import inspect as graph_inspect

    try:
        print(graph_inspect.output_dir_summary(path) if os.path.isdir(path) else
              graph_inspect.summary(graph_inspect.load(path), path))
    except (OSError, graph_inspect.NotATaskGraph) as e:
        print(f"inspect: {e}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("doctor", "cache", "inspect", "new-layer") or (
            argv[0] == "inspect" and len(argv) < 2):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "new-layer":
        from .scaffold import main as new_layer
        return new_layer(argv[1:])
    if argv[0] == "doctor":
        return doctor()
    if argv[0] == "cache":
        return cache(argv[1:])
    return inspect(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
