"""Run a Python script under ThreadSanitizer or AddressSanitizer and count the reports (docs/sanitizers.md).

    result = run_under_sanitizer("thread", "tests/runtime_python/test_mode/sanitizer_subset.py", 300)
    print(result.summary)   # SANITIZER thread: 0 reports in project frames (0 elsewhere, suppressed), ...

A module built with MPK_SANITIZE=thread|address only loads into a Python started with the
sanitizer runtime preloaded, so the script runs in a child: the real interpreter (never a
shell shim) with LD_PRELOAD=<the compiler's libtsan/libasan> (for ASan followed by the
compiler's libstdc++, see CXX_RUNTIME), MPK_SANITIZE=<kind> (a separate cache entry),
OMP_NUM_THREADS=1 (torch's OpenMP pool is noise under TSan), the *_OPTIONS below, and the
rest of the environment (MPK_CACHE_DIR included) inherited.

The sanitizer writes its reports to files (log_path=<a temporary folder>/<kind>, one file
per process), not to the child's stderr: a script that redirects fd 2 (pytest's capture
does, for every test not run with -s) would otherwise take the report with it, and a run
halted by ASan would end with exit 1 and nothing to show. The files' text is appended to
`stderr` after a `==== <kind> log <file> ====` line and parsed with it; log_path is always
the harness's (it overrides a caller's).

A report is "in project frames" when one of its stack frames is in the generated module
(module.so / module.cu) or under csrc/; the others (CPython, torch, libgomp) are counted but
do not fail a run. Nothing is suppressed at the sanitizer level, so both counts are real.
TSan's exit code is set to 0: the child's exit code is the script's own verdict. A script
may print one line `GRAPH <label> PASS` per graph it ran; they are counted in the summary.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from .build import csrc_dir

OPTIONS = {
    # exitcode=0: the script's verdict is the exit code; history_size=4: keep the "previous access"
    # stack of a race (its frames decide whether the report is the project's)
    "thread": ("TSAN_OPTIONS", "exitcode=0:report_signal_unsafe=0:history_size=4"),
    "address": ("ASAN_OPTIONS", "detect_leaks=0"),        # CPython itself leaks
}
LIBRARY = {"thread": "libtsan.so", "address": "libasan.so"}
# Preloaded after the sanitizer runtime. ASan resolves the real __cxa_throw when it starts; CPython
# does not link libstdc++ (torch and the modules bring it in later, by dlopen), so without it the
# first C++ throw (a kernel's SIMT error, any caught exception) dies in ASan's interceptor:
# `AddressSanitizer: CHECK failed: asan_interceptors.cpp:320 "((__interception::real___cxa_throw))
# != (0)"`, exit 1 (GCC bug 84428, google/sanitizers#934).
CXX_RUNTIME = {"address": "libstdc++.so.6"}
# a report's first line; a CHECK failure is the sanitizer's own, fatal, and has no SUMMARY line
_START = re.compile(r"(WARNING|ERROR): (ThreadSanitizer|AddressSanitizer)\b"
                    r"|(ThreadSanitizer|AddressSanitizer):? CHECK failed")
_FRAME = re.compile(r"^\s*#\d+ ")
_PID = re.compile(r"^==\d+==")
_GRAPH = re.compile(r"^GRAPH \S+ PASS$", re.M)
FIRST_LINES = 8


@dataclass
class SanitizerResult:
    kind: str
    returncode: int                 # the child's exit code (-9 on a timeout; -N: killed by signal N)
    timed_out: bool
    project_reports: list[str]      # first lines (header, first frames, SUMMARY) of each project report
    total_reports: int              # reports seen, in any frames
    graphs_run: int
    seconds: float
    stdout: str = field(repr=False)
    stderr: str = field(repr=False)     # the child's stderr, then the sanitizer's log files
    last_report: str = ""               # the header line of the last report seen, in any frames

    @property
    def exit_cause(self) -> str:
        """Why the child ended, when it did not exit 0 of its own accord ('' when it did)."""
        if self.timed_out:
            return "timed out, killed"
        if self.returncode < 0:
            try:
                return f"killed by {signal.Signals(-self.returncode).name}"
            except ValueError:
                return f"killed by signal {-self.returncode}"
        if self.returncode != 0 and self.last_report:
            return f"last report: {self.last_report}"
        return ""

    def show(self, lines: re.Pattern | None = None) -> None:
        """Print the summary, the child's stdout lines that match `lines` (its per-file verdicts), and
        the first lines of each report in project frames."""
        print(self.summary)
        for line in lines.finditer(self.stdout) if lines is not None else ():
            print(line[0])
        for report in self.project_reports:
            print(report)

    @property
    def tails(self) -> str:
        """The ends of the child's stdout and stderr, for a failure's message."""
        return f"\nstdout tail:\n{self.stdout[-3000:]}\nstderr tail:\n{self.stderr[-3000:]}"

    @property
    def summary(self) -> str:
        n = len(self.project_reports)
        cause = self.exit_cause
        return (f"SANITIZER {self.kind}: {n} reports in project frames ({self.total_reports - n} elsewhere, "
                f"suppressed), {self.graphs_run} graphs run, exit {self.returncode}"
                f"{f' ({cause})' if cause else ''}, {self.seconds:.1f} s")


def runtime_library(kind: str) -> str:
    """The sanitizer runtime of the compiler that builds the modules (MPK_CXX, default g++)."""
    cxx = os.environ.get("MPK_CXX", "g++")
    out = subprocess.run([cxx, f"-print-file-name={LIBRARY[kind]}"], capture_output=True, text=True,
                         check=True).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        raise FileNotFoundError(f"{cxx} has no {LIBRARY[kind]} (got {out!r}); install its sanitizer runtime")
    return os.path.realpath(out)


def interpreter() -> str:
    """sys.executable if it is a binary (a venv's python is a symlink to one and keeps the venv)."""
    exe = sys.executable
    with open(os.path.realpath(exe), "rb") as f:
        if f.read(4) == b"\x7fELF":
            return exe
    base = getattr(sys, "_base_executable", "")
    if base and base != exe:
        with open(os.path.realpath(base), "rb") as f:
            if f.read(4) == b"\x7fELF":
                return base
    raise RuntimeError(f"{exe} is not a binary (a shim?): LD_PRELOAD needs the real interpreter")


def cxx_runtime(kind: str) -> str | None:
    """The C++ runtime preloaded after `kind`'s (CXX_RUNTIME; None when it needs none)."""
    name = CXX_RUNTIME.get(kind)
    if name is None:
        return None
    cxx = os.environ.get("MPK_CXX", "g++")
    out = subprocess.run([cxx, f"-print-file-name={name}"], capture_output=True, text=True,
                         check=True).stdout.strip()
    if not os.path.isabs(out) or not os.path.exists(out):
        raise FileNotFoundError(f"{cxx} has no {name} (got {out!r}); the {kind} runtime needs it preloaded")
    return os.path.realpath(out)


def preload(kind: str) -> str:
    """LD_PRELOAD's value for `kind`: its runtime first (it must come first), then its C++ runtime."""
    return " ".join(x for x in (runtime_library(kind), cxx_runtime(kind)) if x)


def sanitizer_env(kind: str, extra: dict[str, str] | None = None,
                  log_path: str | None = None) -> dict[str, str]:
    if kind not in OPTIONS:
        raise ValueError(f"sanitizer {kind!r}: expected one of {sorted(OPTIONS)}")
    env = dict(os.environ)
    before = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = preload(kind) + (f" {before}" if before else "")
    name, value = OPTIONS[kind]
    env[name] = f"{value}:{env[name]}" if env.get(name) else value     # the caller's options win
    env.update(MPK_SANITIZE=kind, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra or {})
    if log_path:                                                        # but this one: see the docstring
        env[name] = f"{env[name]}:log_path={log_path}" if env.get(name) else f"log_path={log_path}"
    return env


def in_project(frame: str) -> bool:
    return csrc_dir() + os.sep in frame or "module.so+0x" in frame or "/module.cu:" in frame


def parse_reports(text: str) -> list[tuple[bool, list[str]]]:
    """(in project frames, lines) per report: from its WARNING/ERROR line through its SUMMARY line (a CHECK
    failure, which has none: through the line before the next report, or the end)."""
    reports, current = [], None
    for line in text.splitlines():
        if _START.search(line):
            if current is not None:     # one without a SUMMARY (a CHECK failure): ends at the next
                reports.append(current)
            current = [line]
            continue
        if current is None:
            continue
        current.append(line)
        if line.startswith("SUMMARY: "):
            reports.append(current)
            current = None
    if current is not None:         # cut off (a crash or a timeout): still a report
        reports.append(current)
    return [(any(_FRAME.match(x) and in_project(x) for x in r), r) for r in reports]


def first_lines(report: list[str]) -> str:
    head = [x for x in report[:FIRST_LINES] if x.strip()]
    tail = [x for x in report if x.startswith("SUMMARY: ")]
    return "\n".join(head + [x for x in tail if x not in head])


def run_under_sanitizer(kind: str, argv_or_script, timeout: float,
                        env: dict[str, str] | None = None) -> SanitizerResult:
    """Run `python script.py` (a path) or `python *argv` (a list) under `kind`; count its reports."""
    argv = [argv_or_script] if isinstance(argv_or_script, str) else list(argv_or_script)
    cmd = [interpreter(), *argv]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"mpk-{kind}-log-") as logs:
        log_path = os.path.join(logs, kind)
        proc = subprocess.Popen(cmd, env=sanitizer_env(kind, env, log_path), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, errors="replace")
        try:
            out, err = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            timed_out = True
        texts = [err, *read_logs(logs)]
    reports = [r for text in texts for r in parse_reports(text)]   # each file alone: one cut off ends there
    return SanitizerResult(kind, -9 if timed_out else proc.returncode, timed_out,
                           [first_lines(r) for mine, r in reports if mine], len(reports),
                           len(_GRAPH.findall(out)), time.perf_counter() - t0, out, "".join(texts),
                           _PID.sub("", reports[-1][1][0]).strip() if reports else "")


def read_logs(folder: str) -> list[str]:
    """The sanitizer's log files in `folder` (<kind>.<pid>, one per process that wrote one), each after a
    `==== <kind> log <file> ====` line."""
    texts = []
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), errors="replace") as f:
            texts.append(f"\n==== {name.split('.')[0]} log {name} ====\n{f.read()}")
    return texts
