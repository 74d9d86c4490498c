"""Where the test suite's time goes: its slowest files, by wall and by CPU, from one run.

    python benchmarks/suite_times.py                 # runs the suite as .ci/run does (pytest part only)
    python benchmarks/suite_times.py --top 20 -- -m quick      # pytest arguments after --
    python benchmarks/suite_times.py --read DIR      # the report of an earlier run's MPK_SUITE_TIMES_DIR

tests/conftest.py records, per test file and xdist worker, the wall seconds of its tests (fixtures'
setup and teardown included) and the CPU seconds of the worker process and of the children it waited
for (compilers, mpiexec jobs, sanitizer children). The report prints the run's wall time, the CPU all
files used against what the cores could give (wall x cores: under 100% means workers waited, on a
subprocess's sleep or an idle tail), each worker's busy seconds (a worker far longer than the others
is the run's critical path), and the slowest files. The suite's budget is 15 minutes on 2 cores
(README, "Tests"); a file over a minute is where a new cost should be looked for first.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(folder: str) -> list[dict]:
    rows = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".jsonl"):
            with open(os.path.join(folder, name)) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows


def report(rows: list[dict], wall: float | None, top: int) -> str:
    cores = os.cpu_count() or 1
    cpu = sum(r["cpu"] for r in rows)
    busy: dict[str, float] = {}
    for r in rows:
        busy[r["worker"]] = busy.get(r["worker"], 0.0) + r["wall"]
    lines = []
    if wall is not None:
        use = 100 * cpu / (wall * cores)
        lines.append(f"suite: {wall:.0f} s wall ({wall / 60:.1f} min) on {cores} cores; files' CPU "
                     f"{cpu:.0f} s = {use:.0f}% of wall x cores")
    else:
        lines.append(f"files' CPU {cpu:.0f} s; {len(rows)} files")
    lines.append("workers' busy seconds: " + ", ".join(f"{w} {s:.0f}" for w, s in sorted(busy.items())))
    lines.append(f"{'wall s':>8} {'cpu s':>8} {'tests':>6}  file (slowest {top} by wall)")
    for r in sorted(rows, key=lambda r: -r["wall"])[:top]:
        lines.append(f"{r['wall']:8.1f} {r['cpu']:8.1f} {r['tests']:6d}  {r['file']}  [{r['worker']}]")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--read", help="print the report of an earlier run's MPK_SUITE_TIMES_DIR")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments")
    args = ap.parse_args()
    if args.read:
        print(report(read(args.read), None, args.top))
        return 0
    folder = tempfile.mkdtemp(prefix="mpk-suite-times-")
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "auto", "--dist", "loadfile", "tests",
           *args.pytest_args]
    t0 = time.perf_counter()
    code = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "MPK_SUITE_TIMES_DIR": folder}).returncode
    wall = time.perf_counter() - t0
    print(f"\n{' '.join(cmd)} -> exit {code}; per-file times in {folder}")
    print(report(read(folder), wall, args.top))
    return code


if __name__ == "__main__":
    sys.exit(main())
