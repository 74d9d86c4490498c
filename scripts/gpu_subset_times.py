"""Measure the GPU check's layer subset on the CPU backend: scripts/gpu_subset_times.json.

    python scripts/gpu_subset_times.py [--cache DIR] [FOLDER ...]   (default: every layer folder)

Runs pytest with MPK_GPU_SUBSET=1 (tests/conftest.py: of each test function of the layer folders, the quick
case and the first and last case at the GPU's worker block) at MPK_TEST_CC (default 90, the H100/H200
the check is built for) on the CPU backend, one process, and stores each test's CPU seconds (setup + call
+ teardown; user + system time of the process, its threads and children: not wall time, which a loaded
machine inflates) and the CPU seconds a fresh process takes to import torch, pytest and mirage. The modules
are built
first (a run into a fresh cache, or --cache DIR of an earlier one), then the timed run finds them all: on
the GPU machine they come built ahead (gpu_check.sh --prepare), so a build is no part of its time. The
dry run of scripts/gpu_check.sh estimates each folder's layers stage from these (docs/runtime.md, "GPU
check"). Rerun it after adding or reshaping tests; given folders replace only their own entries.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "scripts", "gpu_subset_times.json")
LAYERS = os.path.join(ROOT, "tests", "runtime_python")


# The GPU run's time is estimated from the CPU's: no GPU has run these tests yet, so this is a stated
# estimate, to be replaced by the first GPU run's layers_<folder>.log times. What a test's CPU time here
# holds: the emulated kernels (every thread a fiber: on the GPU microseconds, so this part only
# overestimates), the harness's torch operations (poisoned images, footprint compares, evidence) and
# module loads. On the GPU the same operations run on CUDA tensors: each a kernel launch (~5-10 us against
# ~1-2 us for a small CPU operation) and every .any() / int() a device synchronization, waits that CPU
# time does not count. FACTOR = 2 covers a test of such operations alone at twice its CPU cost; a test
# whose time is emulated kernels needs far less. Per folder a fresh process: FACTOR x (the CPU seconds of
# importing torch, pytest and mirage, measured here (start_s), and of the folder's collection, measured
# by the dry run), plus CUDA_START_S for creating the CUDA context and loading the modules built ahead
# (well under a second on an H100-class part with the driver loaded, longer without persistence mode: 2 s
# assumed). (A CUDA build of torch imports more than the CPU build measured here: part of the 2x.)
FACTOR = 2.0
CUDA_START_S = 2.0


def estimate(folder: str, nodeids: list[str], collect_s: float, data: dict) -> tuple[float, str]:
    """(seconds, how) of a layers stage running `nodeids` of `folder` on the GPU (see FACTOR). A test
    not measured yet counts as the folder's slowest measured one (or the slowest of all), and says so."""
    tests = data["tests"]
    own = [v for k, v in tests.items() if k.split("/")[2] == folder]
    fallback = max(own or tests.values() or [0.0])
    cpu = sum(tests.get(n, fallback) for n in nodeids)
    missing = sum(n not in tests for n in nodeids)
    fixed = FACTOR * (data["start_s"] + collect_s) + CUDA_START_S
    how = (f"CPU {cpu:.1f} s x {FACTOR:g} + {fixed:.1f} s start" +
           (f"; {missing} not measured, counted at {fallback:.1f} s each (scripts/gpu_subset_times.py)"
            if missing else ""))
    return FACTOR * cpu + fixed, how


def cpu_seconds(who: int) -> float:
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def process_cpu() -> float:
    """CPU seconds of this process (every thread: the emulated workers too) and its waited-for children."""
    return cpu_seconds(resource.RUSAGE_SELF) + cpu_seconds(resource.RUSAGE_CHILDREN)


class Recorder:
    """pytest plugin: CPU seconds per node id (setup + call + teardown; CPU time, not wall time, so a
    loaded machine's waits are not counted), and the failures."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.failed: list[str] = []
        self._start = 0.0

    def pytest_runtest_logstart(self, nodeid, location):
        self._start = process_cpu()

    def pytest_runtest_logfinish(self, nodeid, location):
        self.seconds[nodeid] = process_cpu() - self._start

    def pytest_runtest_logreport(self, report):
        if report.failed:
            self.failed.append(report.nodeid)


def start_seconds() -> float:
    """CPU seconds of a fresh process importing what every layers stage imports first (best of three)."""
    best = float("inf")
    for _ in range(3):
        before = cpu_seconds(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-c", "import torch, pytest, mirage.mpk.testing"], check=True,
                       cwd=ROOT)
        best = min(best, cpu_seconds(resource.RUSAGE_CHILDREN) - before)
    return best


def main() -> int:
    import pytest

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cache", help="a compile cache holding the subset's modules (else built first)")
    ap.add_argument("folders", nargs="*", help="layer folders (default: every one)")
    args = ap.parse_args()
    cache = args.cache
    folders = args.folders or sorted(os.path.join(LAYERS, d) for d in os.listdir(LAYERS)
                             if d != "test_mode" and os.path.isdir(os.path.join(LAYERS, d)))
    os.environ.setdefault("MPK_TEST_CC", "90")
    os.environ["MPK_GPU_SUBSET"] = "1"
    command = ["-n", "0", "-q", "-p", "no:cacheprovider", *folders]
    if cache is None:           # the build run (in a subprocess: its modules stay loaded in it)
        cache = tempfile.mkdtemp(prefix="mpk-subset-cache-")
        subprocess.run([sys.executable, "-m", "pytest", *command], cwd=ROOT, check=False,
                       env={**os.environ, "MPK_SUITE_CACHE_DIR": cache})
    os.environ["MPK_SUITE_CACHE_DIR"] = cache
    rec, t0 = Recorder(), time.monotonic()
    code = pytest.main(command, plugins=[rec])
    old = json.load(open(DATA)) if os.path.exists(DATA) else {"tests": {}}
    names = {os.path.basename(f.rstrip("/")) for f in folders}
    tests = {k: v for k, v in old["tests"].items() if k.split("/")[2] not in names}
    tests.update({k: round(v, 3) for k, v in rec.seconds.items()})
    data = {"measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "cc": int(os.environ["MPK_TEST_CC"]),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.python_version()}",
            "start_s": round(start_seconds(), 3), "tests": dict(sorted(tests.items()))}
    with open(DATA, "w") as f:
        json.dump(data, f, indent=0)
        f.write("\n")
    print(f"GPU SUBSET TIMES {len(rec.seconds)} tests in {time.monotonic() - t0:.0f} s "
          f"({sum(rec.seconds.values()):.0f} s in tests), {len(rec.failed)} failed; {DATA}")
    return int(code) if rec.failed else 0


if __name__ == "__main__":
    sys.exit(main())
