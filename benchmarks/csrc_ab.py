"""A/B of two kernel-source trees on the per-task benchmark graph, in one process.

The same graph as pertask_overhead.py (one-element identity tasks) is built twice: once from each
`csrc/` tree (MPK_CSRC_DIR, which the cache key hashes), optionally with another host compiler
command for B (MPK_CXX, e.g. a wrapper that adds a flag). Launches alternate A, B, B, A, ... so a
shared machine's drift falls on both; prints the min and median of the whole pk() per task.
benchmarks/README.md's table of per-task changes was measured this way. Not a timed test.
Run: python benchmarks/csrc_ab.py A_CSRC B_CSRC [--workers 1] [--rounds 40] [--b-cxx CMD]
"""
import argparse
import os
import statistics
import time

from pertask_overhead import identity_kernel  # benchmarks/ is the script's own directory

from mirage.mpk.persistent_kernel import PersistentKernel


def kernel(csrc: str, cxx: str, workers: int, side: int) -> PersistentKernel:
    """pertask_overhead's graph, compiled from `csrc` with `cxx` (both are in the cache key)."""
    os.environ["MPK_CSRC_DIR"] = os.path.abspath(csrc)
    os.environ["MPK_CXX"] = cxx
    return identity_kernel(workers, side)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--side", type=int, default=64, help="the tensors are side x side: side**2 tasks")
    ap.add_argument("--b-cxx", default=os.environ.get("MPK_CXX", "g++"), help="host compiler command for B")
    args = ap.parse_args()
    cxx = os.environ.get("MPK_CXX", "g++")
    kernels = {"A": kernel(args.a, cxx, args.workers, args.side),
               "B": kernel(args.b, args.b_cxx, args.workers, args.side)}
    n = args.side * args.side
    times: dict[str, list[float]] = {"A": [], "B": []}
    for r in range(args.rounds):
        for name in ("A", "B") if r % 2 == 0 else ("B", "A"):
            t0 = time.perf_counter()
            kernels[name]()
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    for pk in kernels.values():
        pk.finalize()
    print(f"{n} identity tasks, {args.workers} worker(s), {args.rounds} interleaved rounds, "
          f"{os.cpu_count()} cores")
    for name, path in (("A", args.a), ("B", args.b)):
        t = times[name]
        print(f"  {name} {path}: pk() min {min(t):5.2f} us/task, median {statistics.median(t):5.2f}")


if __name__ == "__main__":
    main()
