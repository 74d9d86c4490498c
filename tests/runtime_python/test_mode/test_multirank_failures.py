"""A failure on one rank never hangs a multi-rank job (docs/runtime.md).

    mpirun -n 3 python test_multirank_failures.py exception   rank 1 raises after compile(): the
        excepthook prints its traceback with the rank and calls MPI_Abort; every rank ends
    mpirun -n 2 python test_multirank_failures.py die         rank 1 SIGKILLs itself while rank 0
        waits in the allreduce for its signal: mpiexec ends the job with a non-zero code
    mpirun -n 4 python test_multirank_failures.py stall       rank 2 stays alive but never signals
        (fault no_signal on one allreduce task): the other ranks' watchdogs fire (watchdog_s 2)
        with MPKHangError naming rank 2, within watchdog_s + 1 s of their last progress (the task
        record's latest stamp); all ranks agree on the outcome and exit 0
    mpirun -n 2 python test_multirank_failures.py mismatch    world_size=3 on 2 ranks: a clear error

pytest runs each as a subprocess with a timeout (the entry point is under __main__) and
asserts the exit code, the time to end (well below 30 s after startup) and the messages.
"""
import os
import signal
import sys
import time

import torch

from mirage.mpk import testing
from mirage.mpk.errors import MPKHangError
from mirage.mpk.faults import Fault
from mirage.mpk.persistent_kernel import PersistentKernel

WATCHDOG_S = 2.0
STALLED_RANK, STALLED_TILE = 2, (1, 0, 0)


def build(rank: int, size: int, fault=None, watchdog_s: float = 30.0,
          profile: bool = False) -> PersistentKernel:
    """Only the stall case shortens the watchdog: elsewhere the failed rank alone must end the job."""
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=5, world_size=size, mpi_rank=rank),
                          watchdog_s=watchdog_s, fault=fault, profile=profile)
    x = testing.randn((2, 24), torch.float32, testing.generator(offset=rank))
    x_dt, out_dt = pk.attach_input(x, name="x"), pk.attach_input(torch.zeros(2, 24), name="out")
    buf = pk.new_tensor((size, 2, 24), dtype=torch.float32, name="buf", io_category="symmetric_tensor")
    pk.allreduce_layer(input=x_dt, buffer=buf, output=out_dt, grid_dim=(3, 1, 1), block_dim=(128, 1, 1))
    pk.compile()
    return pk


def main(mode: str) -> None:
    from mpi4py import MPI
    rank, size = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
    if mode == "stall":
        fault = Fault("no_signal", "allreduce_0", STALLED_TILE, rank=STALLED_RANK)
        # the ranks that hang record their tasks (a rank that completes would write a trace file)
        pk = build(rank, size, fault, watchdog_s=WATCHDOG_S, profile=rank != STALLED_RANK)
        t0 = time.perf_counter()
        try:
            pk()
            outcome = "completed"
        except MPKHangError as e:
            outcome = str(e)
        returned_ns, elapsed = time.monotonic_ns(), time.perf_counter() - t0
        if rank != STALLED_RANK:   # the watchdog counts from the last progress
            idle = (returned_ns - testing.last_progress_ns(pk)) / 1e9
        with testing.on_all_ranks("stall outcome"):
            if rank == STALLED_RANK:          # it got every peer's signal, and its own
                assert outcome == "completed", outcome
            else:
                want = (f"waits for rank {STALLED_RANK}'s signal on 'allreduce_0' tile {STALLED_TILE} "
                        f"(counter 0, needs 1)")
                assert want in outcome, outcome
                # (timed from pk()'s call it also held the threads' start and the ranks' skew,
                # which a loaded machine stretches past the 1 s)
                assert idle < WATCHDOG_S + 1.0, f"MPKHangError {idle:.2f} s after the last progress"
        first = outcome.splitlines()[0] if rank == STALLED_RANK else next(
            ln.strip() for ln in outcome.splitlines() if "waits for rank" in ln)
        since = "" if rank == STALLED_RANK else f" ({idle:.2f} s after the last progress)"
        testing.say(f"STALL after {elapsed:.2f} s{since}: {first}")
        pk.finalize()
        return
    if mode == "mismatch":                         # world_size disagrees with mpirun -n
        PersistentKernel(**testing.cpu_config(world_size=size + 1, mpi_rank=rank))
        raise AssertionError("unreachable: world_size was not checked against COMM_WORLD")
    pk = build(rank, size)
    if rank == 1:
        testing.say(f"FAILING at {time.time():.3f} ({mode})")
        if mode == "exception":
            raise RuntimeError("injected failure on rank 1")
        os.kill(os.getpid(), signal.SIGKILL)
    testing.say("launching; rank 1 will never signal")
    pk()                                           # waits for rank 1 until the job is ended
    raise AssertionError("unreachable: the allreduce completed without rank 1")


def run(mode: str, ranks: int) -> tuple[int, str, float]:
    """(exit code, output, seconds from rank 1's failure to the end of the job; the whole run for stall)."""
    t0 = time.time()
    code, out = testing.mpirun(__file__, ranks, timeout=50, args=(mode,))
    end = time.time()
    failing = testing.rank_lines(out, 1, "FAILING at ")
    return code, out, end - (float(failing[0].split()[4]) if failing else t0)


def test_exception_on_one_rank_ends_the_job_with_its_traceback():
    code, out, elapsed = run("exception", 3)
    assert code not in (0, 124), f"exit {code}"
    assert "[rank 1] Traceback (most recent call last):" in out
    assert "[rank 1] RuntimeError: injected failure on rank 1" in out
    assert "[rank 1] uncaught RuntimeError: calling MPI_Abort" in out
    assert elapsed < 30, f"the job ended {elapsed:.1f} s after rank 1 failed"
    print(f"ENDED exception: exit {code}, {elapsed:.1f} s after rank 1 raised")


def test_world_size_is_checked_against_comm_world():
    code, out, _ = run("mismatch", 2)
    assert code not in (0, 124), f"exit {code}"
    want = ("ValueError: PersistentKernel: world_size=3 but MPI COMM_WORLD has 2 rank(s); launch with: "
            "mpirun -n 3 python test_multirank_failures.py")
    assert f"[rank 0] {want}" in out or f"[rank 1] {want}" in out
    assert "unreachable" not in out


def test_a_rank_that_dies_ends_the_job():
    code, out, elapsed = run("die", 2)
    assert code not in (0, 124), f"exit {code}"
    assert "[rank 0] launching" in out
    assert "unreachable" not in out
    assert elapsed < 30, f"the job ended {elapsed:.1f} s after rank 1 died"
    print(f"ENDED die: exit {code}, {elapsed:.1f} s after rank 1 died")


def test_a_stalled_rank_is_named_by_the_others_watchdog():
    code, out, elapsed = run("stall", 4)
    assert code == 0, f"exit {code}"
    for r in range(4):
        lines = testing.rank_lines(out, r, "STALL ")
        assert lines, f"rank {r} printed no STALL line"
        if r != STALLED_RANK:
            assert f"waits for rank {STALLED_RANK}'s signal on 'allreduce_0' tile {STALLED_TILE}" in lines[0]
    print(f"ENDED stall: exit {code} after {elapsed:.1f} s (startup and compile included)")


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("exception", "die", "stall", "mismatch"):
        raise SystemExit(f"usage: mpirun -n N python {sys.argv[0]} exception|die|stall|mismatch")
    main(sys.argv[1])
