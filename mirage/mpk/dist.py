"""Multi-rank (docs/runtime.md): MPI bootstrap, failure propagation, symmetric memory, agreement.

Only a kernel with world_size > 1 imports mpi4py (the `[mpi]` extra: mpi4py and MPICH from
PyPI); one rank needs no MPI. Run a multi-rank file as `mpirun -n 4 python file.py`:

- world() checks world_size / mpi_rank against COMM_WORLD and installs an excepthook that
  prints the traceback (each line prefixed with the rank) and calls MPI_Abort, so an
  uncaught exception on one rank ends the whole job (as `python -m mpi4py` does). Ctrl-C
  (mpiexec forwards SIGINT) is such an exception: KeyboardInterrupt from pk(). SIGTERM ends
  the rank at once. Both first unlink MPICH's named node segment (release_node_segments), which
  SymmetricHeap.allocate also does once every rank has mapped it.
- SymmetricHeap puts a kernel's symmetric tensors (io_category "nvshmem_tensor", alias
  "symmetric_tensor") and its cross-rank signal counters in one MPI shared-memory window on
  the node: every rank maps every rank's segment. Allocation and free are collective; after
  an error the job's abort releases the window.
- all_ranks_agree() is an allreduce of a pass flag, so one rank's failed check makes every
  rank fail together instead of leaving the others in the next collective.
"""
from __future__ import annotations

import contextlib
import ctypes as C
import os
import signal
import sys
import time
import traceback

import torch

from .tensor import DTensor

INSTALL_HINT = "pip install -e '.[mpi]' (mpi4py and MPICH from PyPI)"
ALIGN = 64            # bytes: every tensor and the counters start on their own cache line
# MPI_Abort tears the job down at once, and mpiexec may drop output still in a rank's pipe:
# the dying rank waits this long after writing its traceback so that it reaches the user.
ABORT_GRACE_S = 0.5


def mpi():
    """The mpi4py.MPI module (importing it initializes MPI), or ImportError with the install hint."""
    try:
        from mpi4py import MPI
    except ImportError as e:
        raise ImportError(f"world_size > 1 needs mpi4py and an MPI library: {INSTALL_HINT} ({e})") from None
    return MPI


def world(world_size: int, mpi_rank: int):
    """COMM_WORLD, checked against a kernel's world_size and mpi_rank; installs the abort hook first."""
    comm = mpi().COMM_WORLD
    install_excepthook(comm)
    script = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "file.py"
    if comm.Get_size() != world_size:
        raise ValueError(f"PersistentKernel: world_size={world_size} but MPI COMM_WORLD has "
                         f"{comm.Get_size()} rank(s); launch with: mpirun -n {world_size} python {script}")
    if comm.Get_rank() != mpi_rank:
        raise ValueError(f"PersistentKernel: mpi_rank={mpi_rank} but this process is rank {comm.Get_rank()} "
                         f"of COMM_WORLD; pass mpi_rank=MPI.COMM_WORLD.Get_rank()")
    return comm


def install_excepthook(comm) -> None:
    """An uncaught exception prints its traceback with the rank, then MPI_Abort ends every rank."""
    if getattr(sys.excepthook, "mpk_abort_hook", False):
        return

    def hook(exc_type, exc, tb):
        rank = comm.Get_rank()
        try:
            sys.stdout.flush()
            text = "".join(traceback.format_exception(exc_type, exc, tb)).rstrip("\n")
            sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in text.split("\n")))
            sys.stderr.write(f"[rank {rank}] uncaught {exc_type.__name__}: calling MPI_Abort so that every "
                             f"rank of the job ends\n")
            sys.stderr.flush()
            time.sleep(ABORT_GRACE_S)
        finally:
            release_node_segments()
            comm.Abort(1)

    def on_sigterm(signum, frame):
        release_node_segments()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)        # die by the signal, as without this handler

    hook.mpk_abort_hook = True
    sys.excepthook = hook
    with contextlib.suppress(ValueError):   # signal handlers can be set from the main thread only
        signal.signal(signal.SIGTERM, on_sigterm)


def release_node_segments() -> None:
    """Unlink the named /dev/shm segments of MPICH that this process maps. MPICH unlinks a window's
    segment once every rank has mapped it, but keeps the one made at MPI_Init named until
    MPI_Finalize, which a job ended by MPI_Abort or a signal never reaches: it would stay in /dev/shm.
    Mappings stay valid; the memory goes with the last process that maps it."""
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:   # (a peer may have been first)
        for path in {ln.split()[-1] for ln in maps if "/dev/shm/mpich_shm_" in ln and "(deleted)" not in ln}:
            os.unlink(path)


def active_world():
    """COMM_WORLD if this process is one of several MPI ranks (mpi4py already imported), else None."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is None or not MPI.Is_initialized() or MPI.Is_finalized() or MPI.COMM_WORLD.Get_size() < 2:
        return None
    return MPI.COMM_WORLD


def rank_prefix() -> str:
    """"[rank r] " under a multi-rank MPI job, "" otherwise (evidence lines carry it)."""
    comm = active_world()
    return f"[rank {comm.Get_rank()}] " if comm is not None else ""


def all_ranks_agree(ok: bool, what: str) -> None:
    """Allreduce of a pass flag: if any rank failed, raise AssertionError on every rank, naming them."""
    comm = active_world()
    flags = comm.allgather(bool(ok)) if comm is not None else [bool(ok)]
    failed = [r for r, f in enumerate(flags) if not f]
    if failed:
        raise AssertionError(f"{what}: failed on rank(s) {failed} of {len(flags)}")


# ---- symmetric memory --------------------------------------------------------------------

def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


class SymmetricHeap:
    """One kernel's symmetric tensors and signal counters, in memory every rank on the node maps.

    The layout is the same on every rank (same graph): tensors in table order, each on its own
    cache line, then the counters, int64 [num_signal_slots, world_size + 1] (allreduce.h).
    With comm None (one rank) it is plain memory on `device` (the GPU's on the CUDA backend: the
    kernel reads and signals it there) and this rank is its only peer."""

    def __init__(self, comm, world_size: int, rank: int, device: torch.device | str = "cpu"):
        self.comm, self.world_size, self.rank, self.device = comm, world_size, rank, torch.device(device)
        self.tensors: list[DTensor] = []
        self.segments: list[torch.Tensor] = []        # per rank: uint8 view of its segment
        self.signals: list[torch.Tensor] = []         # per rank: int64 [slots, world_size + 1]
        self._win = self._node = None

    def allocate(self, tensors: list[DTensor], num_signal_slots: int) -> None:
        """Collective: map every rank's segment, give `tensors` their storage, zero the counters."""
        offsets, size = [], 0
        for t in tensors:
            offsets.append(size)
            size = _aligned(size + t.numel * t.dtype.itemsize)
        signal_offset = size
        size = _aligned(size + num_signal_slots * (self.world_size + 1) * 8)
        size = max(size, ALIGN)
        if self.comm is None:
            self.segments = [torch.zeros(size, dtype=torch.uint8, device=self.device)]
        else:
            layout = [(t.name, t.dims, t.dtype.name) for t in tensors]
            self.segments = self._map(size, layout, num_signal_slots)
        mine = self.segments[self.rank]
        for t, off in zip(tensors, offsets):
            t.data = mine[off:off + t.numel * t.dtype.itemsize].view(t.dtype.torch).view(t.dims)
        shape = (num_signal_slots, self.world_size + 1)
        nbytes = 8 * shape[0] * shape[1]
        self.signals = [seg[signal_offset:signal_offset + nbytes].view(torch.int64).view(shape)
                        for seg in self.segments]
        self.tensors = list(tensors)
        if self.comm is not None:
            self._node.Barrier()      # every rank's counters are zero before any rank signals
            release_node_segments()   # every rank has mapped it: even a SIGKILLed job leaves none

    def _map(self, size: int, layout: list, num_signal_slots: int) -> list[torch.Tensor]:
        MPI = mpi()
        mine = (size, layout, num_signal_slots)
        theirs = self.comm.allgather(mine)
        differ = [r for r, x in enumerate(theirs) if x != mine]
        if differ:
            raise RuntimeError(f"rank {self.rank}: ranks {differ} declare different symmetric tensors or "
                               f"signal slots (rank {self.rank}: {mine}; rank {differ[0]}: "
                               f"{theirs[differ[0]]}); every rank must build the same graph")
        node = self.comm.Split_type(MPI.COMM_TYPE_SHARED, key=self.rank)
        if node.Get_size() != self.world_size:
            node.Free()
            raise RuntimeError(f"symmetric tensors on the CPU backend need all {self.world_size} ranks on "
                               f"one node; this node has {node.Get_size()}")
        info = MPI.Info.Create()
        info.Set("alloc_shared_noncontig", "true")     # page-aligned, rank-local segments
        self._node = node
        self._win = MPI.Win.Allocate_shared(size, 1, info, comm=node)
        info.Free()
        segments = []
        for r in range(self.world_size):
            buf, _ = self._win.Shared_query(r)
            segments.append(torch.frombuffer(buf, dtype=torch.uint8, count=size))
        segments[self.rank].zero_()
        return segments

    def pointer_tables(self, num_tensors: int):
        """(peer tensor bases [world_size * num_tensors], signal bases [world_size]) as ctypes arrays."""
        table = (C.c_void_p * (self.world_size * num_tensors))()
        for r in range(self.world_size):
            for t in self.tensors:
                own = t.data.data_ptr() - self.segments[self.rank].data_ptr()
                table[r * num_tensors + t.id] = self.segments[r].data_ptr() + own
        signals = (C.c_void_p * self.world_size)(*[s.data_ptr() for s in self.signals])
        return table, signals

    def free(self) -> None:
        """Collective. Own tensors keep their values (copied out), so get_tensor works after finalize."""
        for t in self.tensors:
            t.data = t.data.clone()
        self.segments, self.signals = [], []
        if self._win is not None:
            self._win.Free()
            self._node.Free()
            self._win = self._node = None
