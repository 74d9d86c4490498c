"""Typed errors. Bad input is a ValueError/TypeError; these are the runner's own failures."""
from __future__ import annotations


class MPKError(RuntimeError):
    """Base class of the runner's failures."""


class MPKCompileError(MPKError):
    """The compiler rejected a generated module. Carries the command, errors and kept source."""

    def __init__(self, message: str, command: list[str], errors: str, source_path: str):
        super().__init__(message)
        self.command, self.errors, self.source_path = command, errors, source_path


class MPKHangError(MPKError):
    """The watchdog saw no progress for watchdog_s seconds; the text names stuck layers and tiles."""


class MPKRuntimeError(MPKError):
    """The runtime refused to run or failed (e.g. nothing scheduled, page pool exhausted)."""


class MPKUnwrittenError(MPKError):
    """Elements a layer declares it writes still hold the poison value after the run."""


class MPKMemoryError(MPKError):
    """A kernel accessed memory outside a tensor (test mode's red zones and guard pages); the text names
    the layer, the task's grid coordinate, the tensor and the byte range."""


class GraphError(MPKError):
    """The task graph verifier rejected a graph."""


class MPKInstallError(MPKError):
    """The installation is incomplete (e.g. the kernel sources are missing); the text says where it looked."""


class MPKCacheError(MPKError):
    """The compile cache cannot be used or written; the text names the path and MPK_CACHE_DIR."""


class MPKFootprintError(MPKError, AssertionError):
    """A kernel-level run (testing.run_tasks) saw a task write outside its declared output tiles, depend
    on memory outside its declared input tiles, race with itself, or leave its output unwritten; the
    text names the layer, the task's grid coordinate, the tensor and the elements."""
