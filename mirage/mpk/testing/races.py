"""Races between the threads of one task, in global memory, from ThreadSanitizer: named errors of a
kernel-level run (docs/kernel_tests.md, "Races between a task's threads").

Two threads of a block storing to one element between barriers is a bug whatever they store (a chunk
loop that steps 128 on a 256-thread block writes each element twice, with the same value: no value or
footprint check can see it; HiRace checks global memory for this, compute-sanitizer's racecheck only
shared memory). Under MPK_SANITIZE=thread the emulation runs a block's threads as TSan fibers that
switch without synchronising and release/acquire at barriers and warp collectives
(csrc/runtime/simt_cpu_sched.h), so such stores are a TSan data race. Reports reach this process's
report file (the log_path mirage.mpk.sanitize sets; when TSan writes to stderr, a file set here for
each task's run only, whose text is copied to stderr as it is read); after each run of a task, a new
report whose address lies in one of the run's tensors becomes an MPKFootprintError naming the task,
the threads, the tensor element and the kernel lines. Other reports (shared memory, the runtime) are
left to the sanitizer's verdict. TSan reports a pair of code locations once per process: the first
run that races is the one named.
"""
from __future__ import annotations

import ctypes
import os
import re
import sys
import tempfile

_ACCESS = re.compile(r"^  (Previous )?(atomic )?(write|read) of size (\d+) at 0x([0-9a-f]+) by "
                     r"(?:thread (T\d+)|main thread)", re.I | re.M)
_FRAME = re.compile(r"^\s+#\d+ .* (\S*?/tasks/([\w.]+\.cuh):(\d+))", re.M)
_THREAD = re.compile(r"^  Thread (T\d+) '[^']*?(\d+)'", re.M)


class TsanReports:
    """This process's ThreadSanitizer report file, read from where the last read stopped."""

    def __init__(self, lib, path: str, echo: bool):
        self.lib, self.path, self.echo = lib, path, echo
        self.offset = os.path.getsize(path) if os.path.exists(path) else 0

    def arm(self) -> None:
        """Before a task's run: when TSan reports to stderr, to a fresh file of ours for this run only."""
        if self.echo:
            getattr(self.lib, "__sanitizer_set_report_path")(self.path.rsplit(".", 1)[0].encode())
            getattr(self.lib, "__sanitizer_get_report_path")()       # (re)opens it, empty
            self.offset = 0

    @classmethod
    def open(cls) -> "TsanReports | None":
        """The reader, or None when this process does not run under ThreadSanitizer."""
        lib = ctypes.CDLL(None)
        if not hasattr(lib, "__tsan_create_fiber"):
            return None
        get = getattr(lib, "__sanitizer_get_report_path")      # (a string: no name mangling in a class)
        get.restype = ctypes.c_char_p
        path = (get() or b"").decode()
        if path:
            return cls(lib, path, False)
        folder = tempfile.mkdtemp(prefix="mpk-tsan-")       # reports to stderr: to a file, echoed
        getattr(lib, "__sanitizer_set_report_path")(os.path.join(folder, "tsan").encode())
        reports = cls(lib, (get() or b"").decode(), True)
        getattr(lib, "__sanitizer_set_report_fd")(ctypes.c_void_p(2))      # stderr again until arm()
        return reports

    def new(self) -> list[str]:
        """The reports written since the last call."""
        if not os.path.exists(self.path):
            return []
        with open(self.path, errors="replace") as f:
            f.seek(self.offset)
            text = f.read()
        self.offset += len(text.encode(errors="replace"))
        if self.echo:
            getattr(self.lib, "__sanitizer_set_report_fd")(ctypes.c_void_p(2))
            sys.stderr.write(text)
        return [r for r in text.split("WARNING: ThreadSanitizer: ")[1:] if r.startswith("data race")]


def _lines(stack: str) -> str:
    """The kernel lines of a stack, innermost first, up to the first outside common.cuh."""
    shown = []
    for m in _FRAME.finditer(stack):
        shown.append(f"{m[2]}:{m[3]}")
        if m[2] != "common.cuh" or len(shown) == 3:
            break
    return " < ".join(shown) or "(no kernel frame)"


def named_race(report: str, locate) -> str:
    """The message's tail for one data-race report, or "" when its address is in none of the run's
    tensors. locate(address) -> the element's description (kernel.py's _describe) or ""."""
    accesses = list(_ACCESS.finditer(report))
    if len(accesses) < 2:
        return ""
    where = locate(int(accesses[0][5], 16))
    if not where:
        return ""
    names = {m[1]: m[2] for m in _THREAD.finditer(report)}
    parts = []
    for i, m in enumerate(accesses[:2]):
        end = accesses[1].start() if i == 0 else report.find("\n  Location", m.start())
        stack = report[m.end(): end if end > 0 else None]
        who = f"thread {names[m[6]]}" if m[6] in names else (m[6] or "the main thread")
        parts.append(f"{who} {m[2] or ''}{m[3].lower()} at {_lines(stack)}")
    both = "write" if all(m[3].lower() == "write" for m in accesses[:2]) else "access"
    return (f"has two threads of its block {both} one element between barriers (a race whatever the values "
            f"are; ThreadSanitizer): {where}; {parts[0]}, and before it {parts[1]}")
