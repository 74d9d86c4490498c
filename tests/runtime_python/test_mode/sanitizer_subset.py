"""The representative subset run under the sanitizers: fork, join, diamond (each at every jitter
seed of its test), and the Qwen3 MLP chain at a small size (hidden 256, intermediate 384,
batch 4; fp32 and bf16).

Each case is the graph test's own run() (several workers, schedule jitter, every layer checked
against its reference), so a mismatch fails here as it fails there. Prints `GRAPH <label> PASS`
per graph (mirage.mpk.sanitize counts them); exits non-zero on any mismatch or error.

Two graphs are built and run at a time (--jobs): the four sanitized compiles dominate the time,
and two kernels running side by side (fork and diamond share one loaded module) is part of what
the sanitizers should see.

Not collected by pytest: test_sanitizers.py runs it under each sanitizer; by hand, see
docs/sanitizers.md. It also runs unsanitized: python tests/runtime_python/test_mode/sanitizer_subset.py
"""
import argparse
import concurrent.futures
import os
import sys
import time
import traceback

import torch

from mirage.mpk import testing

FORK = testing.load_reference(__file__, name="test_fork_point")
JOIN = testing.load_reference(__file__, name="test_join_point")
DIAMOND = testing.load_reference(__file__, name="test_diamond_fork_join")
QWEN = testing.load_reference(__file__, name="test_qwen3_mlp")
graph = testing.load_reference(__file__, name="graph_checks")

# The Qwen3 MLP test's run() reads its sizes from module constants: shrink them here.
SMALL_MLP = dict(BATCH=4, HIDDEN=256, INTER=384, DOWN_GRID=8)
# (dtype, g): g silu_mul tasks of 384 / g columns; the gate/up linear runs on 2g tasks
MLP_CASES = [(torch.float32, 12), (torch.bfloat16, 16)]


def cases(base: str) -> list:
    """(label, thunk) per graph, each writing its generated code to its own folder under `base`.
    The four distinct builds come first (two compile at once); the rest are cache hits."""
    def topology(name, mod, seed):
        return f"{name}[jitter={seed}]", lambda: mod.run(seed, os.path.join(base, f"{name}_{seed}"))

    def mlp(dtype, groups):
        tag = str(dtype)[6:]
        folder = os.path.join(base, f"qwen3_mlp_small_{tag}")
        return f"qwen3_mlp_small[{tag},g={groups}]", lambda: QWEN.run(dtype, groups, 80 + groups, folder)

    first = [topology("fork", FORK, FORK.JITTERS[0]), topology("join", JOIN, JOIN.JITTERS[0])]
    first += [mlp(dtype, groups) for dtype, groups in MLP_CASES]
    rest = [topology("fork", FORK, s) for s in FORK.JITTERS[1:]]
    rest += [topology("join", JOIN, s) for s in JOIN.JITTERS[1:]]
    rest += [topology("diamond", DIAMOND, s) for s in DIAMOND.JITTERS]     # the fork's build
    return first + rest


def sanitizer_runtime() -> str:
    """The sanitizer runtime mapped into this process ('none' when unsanitized)."""
    with open("/proc/self/maps") as f:
        names = {os.path.basename(line.split()[-1]) for line in f if "/lib" in line}
    return ",".join(sorted(n for n in names if n.startswith(("libtsan", "libasan")))) or "none"


def timed(label: str, run) -> bool:
    t = time.perf_counter()
    try:
        run()
    except Exception:
        traceback.print_exc()
        testing.say(f"GRAPH {label} FAIL after {time.perf_counter() - t:.1f} s")
        return False
    testing.say(f"GRAPH {label} PASS")   # one write: forked graphs share stdout
    testing.say(f"TIMING {label}: {time.perf_counter() - t:.1f} s (compile included)")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="graphs built and run at once (default 2)")
    args = parser.parse_args()
    # Under a sanitizer this process already has its runtime loaded: the compiler the builds spawn
    # must not inherit it (g++ with libtsan/libasan preloaded compiles 1.5 to 3 times slower).
    os.environ.pop("LD_PRELOAD", None)
    missing = [k for k in SMALL_MLP if not hasattr(QWEN, k)]
    if missing:
        print(f"test_qwen3_mlp.py no longer defines {missing}: update SMALL_MLP here", file=sys.stderr)
        return 2
    for k, v in SMALL_MLP.items():
        setattr(QWEN, k, v)
    t0 = time.perf_counter()
    todo = cases(graph.output_dir())
    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        ok = list(pool.map(lambda case: timed(*case), todo))
    verdict = "PASS" if all(ok) else f"FAIL ({ok.count(False)} failed)"
    print(f"{len(todo)} sanitizer-subset graphs {verdict} in {time.perf_counter() - t0:.1f} s "
          f"(MPK_SANITIZE={os.environ.get('MPK_SANITIZE') or 'off'}, runtime {sanitizer_runtime()})")
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
