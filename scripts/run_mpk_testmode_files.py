"""Run Mirage MPK's own test-mode files here, with only the two changes a CPU machine needs.

    python scripts/run_mpk_testmode_files.py <mpk checkout or folder of .py files> [--timeout S]

Each `test_*.py` is copied into a temporary folder with `device = "cuda"` turned into
`device = "cpu"` and each `torch.cuda.synchronize()` call turned into `pass` (so indentation
stays valid); nothing else changes. Each file then runs as a script (`python file.py`, as
MPK's files are run) in its own process with a timeout, and one line per file says PASS
(exit 0), FAIL (with the last lines of its output) or TIMEOUT. The script exits non-zero if
any file failed. MPK's files are read from the checkout given; none is part of this repository.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

TEST_DIR = os.path.join("tests", "runtime_python", "test_mode")
_DEVICE = re.compile(r"""(device\s*=\s*)(["'])cuda\2""")
_SYNC = re.compile(r"torch\.cuda\.synchronize\(\)")


def to_cpu(text: str) -> str:
    """The two edits of a CUDA test-mode file for a machine without a GPU."""
    return _SYNC.sub("pass", _DEVICE.sub(r'\1"cpu"', text))


def find_files(root: str) -> list[str]:
    folder = os.path.join(root, TEST_DIR) if os.path.isdir(os.path.join(root, TEST_DIR)) else root
    return sorted(os.path.join(folder, f) for f in os.listdir(folder)
                  if f.startswith("test_") and f.endswith(".py"))


def run_one(path: str, workdir: str, timeout: float) -> tuple[str, float, str]:
    """(PASS|FAIL|TIMEOUT, seconds, output tail) of one converted file run as a script."""
    with open(path) as f:
        text = to_cpu(f.read())
    dst = os.path.join(workdir, os.path.basename(path))
    with open(dst, "w") as f:
        f.write(text)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, dst], cwd=workdir, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        return "TIMEOUT", time.perf_counter() - t0, out[-1500:]
    tail = (proc.stdout + proc.stderr)[-1500:]
    return ("PASS" if proc.returncode == 0 else "FAIL"), time.perf_counter() - t0, tail


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", help="an MPK checkout (its tests/runtime_python/test_mode is used) or a folder")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the output tail of passing files too")
    args = ap.parse_args()
    files = find_files(args.root)
    if not files:
        print(f"no test_*.py files under {args.root}", file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="mpk_files_") as work:
        for path in files:
            verdict, secs, tail = run_one(path, work, args.timeout)
            results.append(verdict)
            print(f"MPKFILE {os.path.basename(path)} {verdict} {secs:.1f}s", flush=True)
            if verdict != "PASS" or args.verbose:
                print("    " + tail.strip().replace("\n", "\n    "), flush=True)
    passed = results.count("PASS")
    print(f"{passed} of {len(results)} MPK test-mode files pass")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
