"""python -m mirage.mpk doctor | cache [list|clear|path] | inspect <task_graph.json>"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys


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
    return 0


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

    print(graph_inspect.summary(graph_inspect.load(path), path))
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
