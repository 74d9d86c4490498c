"""Per-task cost of a test-mode pk(): 4096 one-element identity tasks, 1, 2 and 4 workers, in one run.

For each worker count: the whole pk() (restore meta tensors, poison the outputs, launch, check
every declared element was written) per task, the launch alone per task (the runtime: queues,
events, one emulated 128-thread block per task), and, for comparison in the same run, what the
former per-tile poison + check cost (one torch call per tile and tensor, the way mirage/mpk/written.py
did it before it became two whole-tensor operations per tensor). Min of --repeat (pk() also its
median: a shared VM's neighbours show in it). The launch also under MPK's pre-launch dispatch
(dispatch="mpk": every task queued at the pass's start, waited for in order; docs/runtime.md), as
a ratio to the event model measured in the same run. Not a timed test.
Run: python benchmarks/pertask_overhead.py [--repeat 20]
"""
import argparse
import os
import statistics
import time

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from mirage.mpk import written  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402


def per_tile_poison_and_check(watched: written.Watched) -> None:
    """The former method: a slice assignment and a comparison per declared tile."""
    for _, tile in watched.tiles:
        region = written._bits(tile.tensor.data)[written._slices(tile.box)]
        region.fill_(watched.poison_of(tile.tensor))
    for _, tile in watched.tiles:
        region = written._bits(tile.tensor.data)[written._slices(tile.box)]
        int((region == watched.poison_of(tile.tensor)).sum())


def timed(fn, repeat: int) -> list[float]:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def best(fn, repeat: int) -> float:
    return min(timed(fn, repeat))


def identity_kernel(workers: int, side: int = 64, dispatch: str = "event") -> PersistentKernel:
    """The compiled benchmark graph: side x side one-element identity tasks (csrc_ab.py uses it too)."""
    pk = PersistentKernel(test_mode=True, num_workers=workers, num_local_schedulers=1, dispatch=dispatch)
    x = pk.attach_input(torch.randn(side, side), name="x")
    y = pk.attach_input(torch.zeros(side, side), name="y")
    pk.identity_layer(x, y, (side, side, 1), (128, 1, 1))
    pk.compile()
    return pk


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    print(f"4096 identity tasks of one element (64x64 float32, grid 64x64), min of {args.repeat}, "
          f"{os.cpu_count()} cores")
    for workers in (1, 2, 4):
        pk = identity_kernel(workers)
        n = len(pk.graph.tasks) - 1
        whole = timed(pk, args.repeat)

        def launch_only(k=pk):
            k.meta_tensors["step"].zero_()          # what pk() restores before each test-mode launch
            if k._fences:                           # and copies into the guarded copies kernels use
                k._fences.copy_in()
            k._runtime.launch()

        launch = best(launch_only, args.repeat)
        former = best(lambda: per_tile_poison_and_check(pk._watched), args.repeat)
        pk.finalize()
        mpk = identity_kernel(workers, dispatch="mpk")
        prelaunch = best(lambda: launch_only(mpk), args.repeat)
        mpk.finalize()
        print(f"  {workers} worker(s): pk() {min(whole) / n * 1e6:5.2f} us/task (median "
              f"{statistics.median(whole) / n * 1e6:5.2f})   launch {launch / n * 1e6:5.2f} us/task   "
              f"former per-tile poison+check alone {former / n * 1e6:5.2f} us/task   "
              f"dispatch=mpk launch {prelaunch / n * 1e6:5.2f} us/task ({prelaunch / launch:.2f}x event)")


if __name__ == "__main__":
    main()
