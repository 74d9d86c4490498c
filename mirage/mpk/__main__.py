"""python -m mirage.mpk doctor | cache [list|clear|path] | inspect <task_graph.json>"""
from __future__ import annotations

import os
import pkgutil
import re
import shutil
import subprocess
import sys

_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def doctor() -> int:
    import torch

    import mirage

    from .build import cache_dir

    print(f"mirage {mirage.__version__}, torch {torch.__version__}, python {sys.version.split()[0]}")
    for tool in (os.environ.get("MPK_CXX", "g++"), "nvcc"):
        path = shutil.which(tool)
        out = subprocess.run([path, "--version"], capture_output=True, text=True).stdout if path else ""
        lines = out.splitlines() or ["not found"]
        version = next((x for x in lines if "release" in x), lines[0])
        print(f"{tool}: {path or '-'} ({version})")
    print(f"CUDA available to torch: {torch.cuda.is_available()}")
    print(f"get_configurations_from_gpu(0) = {mirage.get_configurations_from_gpu(0)}")
    print(f"cache: {cache_dir()}")
    return 1 if check_kernel_sources() else 0


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
        for e in entries:
            so = os.path.join(root, e, "module.so")
            print(f"{e[:16]}  {os.path.getsize(so) if os.path.exists(so) else 0:>9} bytes")
        print(f"{len(entries)} module(s) in {root}")
    else:
        print(f"unknown cache action {action!r}; use list, clear or path", file=sys.stderr)
        return 2
    return 0


def inspect(path: str) -> int:
    from . import inspect as graph_inspect

    try:
        g = graph_inspect.load(path)
    except (OSError, graph_inspect.NotATaskGraph) as e:
        print(f"inspect: {e}", file=sys.stderr)
        return 2
    print(graph_inspect.summary(g, path))
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("doctor", "cache", "inspect") or (argv[0] == "inspect" and len(argv) < 2):
        print(__doc__, file=sys.stderr)
        return 2
    if argv[0] == "doctor":
        return doctor()
    if argv[0] == "cache":
        return cache(argv[1:])
    return inspect(argv[1])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
