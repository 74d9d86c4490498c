"""What profiling costs per task (docs/profiler.md): 4096 one-element identity tasks on 2 workers, the
launch alone per task with profiling off and on, interleaved rounds in one run (min over rounds), plus
the time to export the trace. Not a timed test.
Run: python benchmarks/profiler_overhead.py [--rounds 7]
"""
import argparse
import os
import tempfile
import time

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from mirage.mpk import profiler  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402


def kernel(profile: bool, trace: str) -> PersistentKernel:
    pk = PersistentKernel(test_mode=True, num_workers=2, num_local_schedulers=1, profile=profile,
                          trace_name=trace)
    x = pk.attach_input(torch.randn(64, 64), name="x")
    y = pk.attach_input(torch.zeros(64, 64), name="y")
    pk.identity_layer(x, y, (64, 64, 1), (128, 1, 1))
    pk.compile()
    return pk


def launch_seconds(pk: PersistentKernel) -> float:
    pk.meta_tensors["step"].zero_()          # what pk() restores before each test-mode launch
    if pk._fences:                           # and copies into the guarded copies kernels use
        pk._fences.copy_in()
    t0 = time.perf_counter()
    pk._runtime.launch()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        kernels = {p: kernel(p, os.path.join(tmp, "trace")) for p in (False, True)}
        n = len(kernels[False].graph.tasks) - 1
        best = {p: min(launch_seconds(kernels[p]) for _ in range(2)) for p in kernels}   # warm up
        for _ in range(args.rounds):
            for p, pk in kernels.items():
                best[p] = min(best[p], launch_seconds(pk))
        on = kernels[True]
        t0 = time.perf_counter()
        profiler.export(on.graph, on._record, os.path.join(tmp, "trace"), 0, 2)
        export = time.perf_counter() - t0
        for pk in kernels.values():
            pk.finalize()
    print(f"{n} identity tasks, 2 workers, {os.cpu_count()} cores, min of {args.rounds} interleaved rounds")
    print(f"  launch, profiling off: {best[False] / n * 1e6:5.2f} us/task")
    extra = (best[True] / best[False] - 1) * 100
    print(f"  launch, profiling on:  {best[True] / n * 1e6:5.2f} us/task ({extra:+.1f}%)")
    print(f"  export of the trace and CSV: {export * 1e3:.0f} ms ({export / n * 1e6:.1f} us/task)")


if __name__ == "__main__":
    main()
