"""The test-mode cases marked `race` (pyproject.toml) of the given files, run in this process through
pytest; test_shared_tile_races.py runs it under ThreadSanitizer.

    python race_subset.py FILE... [-k EXPR]

A `race` case is a layer's test-mode graph whose tasks add into one output tile (splitk_linear's
contention cases): several workers, schedule jitter, the emulated atomics pausing between load and swap
(docs/runtime.md). Prints per passed case `GRAPH <node id> PASS` (mirage.mpk.sanitize counts them), per
file one line

    RACEFILE <file> passed=<n> failed=<n>

and the sanitizer runtime mapped into the process; exits with pytest's status (5, no case collected, is a
failure too). Not collected by pytest (no test_ prefix). Unsanitized it runs the same.
"""
import os
import sys
import time
from collections import defaultdict

import pytest


class Tally:
    """pytest plugin: outcomes per file (the file part of the node ids)."""

    def __init__(self):
        self.outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def pytest_collectreport(self, report):
        if report.failed:           # an import error: the file fails
            self.outcomes[report.nodeid.split("::")[0]]["failed"] += 1

    def pytest_runtest_logreport(self, report):
        f = report.nodeid.split("::")[0]
        if report.failed:
            self.outcomes[f]["failed"] += 1
        elif report.when == "call" and report.passed:
            self.outcomes[f]["passed"] += 1
            print(f"\nGRAPH {report.nodeid} PASS", flush=True)    # own line: after the progress dot


def sanitizer_runtime() -> str:
    """The sanitizer runtime mapped into this process ('none' when unsanitized)."""
    with open("/proc/self/maps") as f:
        names = {os.path.basename(line.split()[-1]) for line in f if "/lib" in line}
    return ",".join(sorted(n for n in names if n.startswith(("libtsan", "libasan")))) or "none"


def main(args: list[str]) -> int:
    if not args:
        print("usage: race_subset.py FILE... [-k EXPR]", file=sys.stderr)
        return 2
    runtime = sanitizer_runtime()
    # The runtime is loaded by now: the compiler the builds spawn must not inherit it (g++ with libtsan
    # preloaded compiles 1.5 to 3 times slower; docs/sanitizers.md).
    os.environ.pop("LD_PRELOAD", None)
    tally = Tally()
    t0 = time.perf_counter()
    status = pytest.main([*args, "-m", "race", "-q", "-s", "-p", "no:cacheprovider"], plugins=[tally])
    for f, c in sorted(tally.outcomes.items()):
        print(f"RACEFILE {f} passed={c['passed']} failed={c['failed']}", flush=True)
    print(f"RACESUBSET exit {int(status)} in {time.perf_counter() - t0:.1f} s "
          f"(MPK_SANITIZE={os.environ.get('MPK_SANITIZE') or 'off'}, runtime {runtime})", flush=True)
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
