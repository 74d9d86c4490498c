"""A quick subset of the layers' kernel-level tests (tests/runtime_python/<layer>/test_<layer>.py), run
in this process through pytest; test_kernel_sanitizers.py runs it under each sanitizer.

    python kernel_sanitizer_subset.py FILE...

From each FILE it runs the cases marked `quick` (pyproject.toml: one case per layer), or, in a file
that marks none, its first collected case (a file that has just landed still runs under the
sanitizers; mark one quick case there to choose it). Prints per case `GRAPH <node id> PASS`
(mirage.mpk.sanitize counts them), per file one line

    KERNELFILE <file> selected=<n> passed=<n> failed=<n> skipped=<n> seconds=<s>

and the sanitizer runtime mapped into the process; exits with pytest's status. Not collected by
pytest (no test_ prefix). Unsanitized it runs the same: python kernel_sanitizer_subset.py FILE...
"""
import os
import sys
import time
from collections import defaultdict

import pytest


class QuickSubset:
    """pytest plugin: keeps the quick cases of each file (else its first case); tallies outcomes per
    file, keyed by the file part of the node ids (its path relative to the rootdir)."""

    def __init__(self):
        self.selected: dict[str, list[str]] = defaultdict(list)
        self.outcomes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.seconds: dict[str, float] = defaultdict(float)

    @staticmethod
    def _file(nodeid: str) -> str:
        return nodeid.split("::")[0]

    def pytest_collection_modifyitems(self, session, config, items):
        by_file = defaultdict(list)
        for item in items:
            by_file[self._file(item.nodeid)].append(item)
        keep = []
        for f, its in by_file.items():
            quick = [it for it in its if it.get_closest_marker("quick")]
            chosen = quick or its[:1]
            keep += chosen
            self.selected[f] = [it.nodeid for it in chosen]
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep

    def pytest_collectreport(self, report):
        if report.failed:           # an import error: the file fails, whatever it would have selected
            self.outcomes[self._file(report.nodeid)]["failed"] += 1

    def pytest_runtest_logreport(self, report):
        f = self._file(report.nodeid)
        self.seconds[f] += report.duration
        if report.failed:
            self.outcomes[f]["failed"] += 1
        elif report.when == "call" and report.passed:
            self.outcomes[f]["passed"] += 1
            print(f"\nGRAPH {report.nodeid} PASS", flush=True)    # own line: after the progress dot
        elif report.skipped:
            self.outcomes[f]["skipped"] += 1

    def summary(self) -> list[str]:
        return [f"KERNELFILE {f} selected={len(self.selected.get(f, []))} passed={c['passed']} "
                f"failed={c['failed']} skipped={c['skipped']} seconds={self.seconds[f]:.1f}"
                for f, c in sorted(self.outcomes.items())]


def sanitizer_runtime() -> str:
    """The sanitizer runtime mapped into this process ('none' when unsanitized)."""
    with open("/proc/self/maps") as f:
        names = {os.path.basename(line.split()[-1]) for line in f if "/lib" in line}
    return ",".join(sorted(n for n in names if n.startswith(("libtsan", "libasan")))) or "none"


def main(files: list[str]) -> int:
    if not files:
        print("usage: kernel_sanitizer_subset.py FILE...", file=sys.stderr)
        return 2
    runtime = sanitizer_runtime()
    # The runtime is loaded by now: the compiler the builds spawn must not inherit it (g++ with
    # libtsan/libasan preloaded compiles 1.5 to 3 times slower; docs/sanitizers.md).
    os.environ.pop("LD_PRELOAD", None)
    plugin = QuickSubset()
    t0 = time.perf_counter()
    # -p no:cacheprovider: no .pytest_cache writes; addopts of pyproject.toml still apply (importlib mode)
    status = pytest.main([*files, "-q", "-s", "-p", "no:cacheprovider"], plugins=[plugin])
    for line in plugin.summary():
        print(line, flush=True)
    print(f"KERNELSUBSET {len(files)} file(s) exit {int(status)} in {time.perf_counter() - t0:.1f} s "
          f"(MPK_SANITIZE={os.environ.get('MPK_SANITIZE') or 'off'}, runtime {runtime})", flush=True)
    return int(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
