"""Soak: many back-to-back pk() calls on one kernel, then many create / compile (cache hit) / run /
finalize cycles in one process; memory (RSS), open file descriptors and threads must come back to
where they started. Prints the figures; exits 1 on growth. Not a timed test (tests/unit/test_soak.py
runs a short version).

Run: python benchmarks/soak.py [--launches 1000] [--cycles 200]
"""
import argparse
import gc
import os
import sys

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from mirage.mpk import testing  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

# Allowed drift after warm-up: allocator pools and torch's caches settle within a few MiB.
RSS_SLACK_MIB = 16


def process_state() -> dict:
    """RSS in MiB, open file descriptors and OS threads of this process (Linux /proc)."""
    with open("/proc/self/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return {"rss_mib": rss_kib / 1024, "fds": len(os.listdir("/proc/self/fd")),
            "threads": len(os.listdir("/proc/self/task"))}


def kernel() -> tuple[PersistentKernel, torch.Tensor, torch.Tensor]:
    gen = testing.generator(offset=5)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=2))
    x, w = testing.randn((8, 256), torch.float32, gen), testing.randn((256,), torch.float32, gen)
    y = torch.zeros(8, 256)
    pk.rmsnorm_layer(pk.attach_input(x, name="x"), pk.attach_input(w, name="w"), pk.attach_input(y, name="y"),
                     (4, 1, 1), (128, 1, 1))
    pk.compile()
    return pk, x, y


def soak(launches: int, cycles: int, say=print) -> list[str]:
    """Run the soak; return the problems (empty: nothing grew)."""
    pk, x, y = kernel()
    pk()
    expected = y.clone()
    gc.collect()
    start = process_state()
    for i in range(launches):
        pk()
        if i % 100 == 0 and not torch.equal(y, expected):
            return [f"launch {i}: the output changed between identical passes"]
    pk.finalize()
    del pk
    gc.collect()
    after_launches = process_state()
    for _ in range(cycles):
        pk, x, y = kernel()
        pk()
        pk.finalize()
    del pk
    gc.collect()
    end = process_state()
    say(f"SOAK start {start}; after {launches} pk() {after_launches}; after {cycles} create/compile/run/"
        f"finalize cycles {end}")
    problems = []
    for name, state in (("launches", after_launches), ("cycles", end)):
        if state["fds"] > start["fds"]:
            problems.append(f"{name}: open file descriptors {start['fds']} -> {state['fds']}")
        if state["threads"] > start["threads"]:
            problems.append(f"{name}: threads {start['threads']} -> {state['threads']}")
        if state["rss_mib"] > start["rss_mib"] + RSS_SLACK_MIB:
            problems.append(f"{name}: RSS {start['rss_mib']:.1f} -> {state['rss_mib']:.1f} MiB (more than "
                            f"{RSS_SLACK_MIB} MiB)")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=1000)
    ap.add_argument("--cycles", type=int, default=200)
    args = ap.parse_args()
    problems = soak(args.launches, args.cycles)
    print("SOAK " + ("PASS: nothing grew" if not problems else "FAIL: " + "; ".join(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
