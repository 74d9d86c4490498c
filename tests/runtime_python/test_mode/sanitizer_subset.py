"""The representative subset run under the sanitizers: fork, join, diamond, and the Qwen3 MLP
chain at a small size (hidden 256, intermediate 384, batch 4; fp32 and bf16).

Each case is the graph test's own run() (several workers, schedule jitter, every layer checked
against its reference), so a mismatch fails here as it fails there. Prints `GRAPH <label> PASS`
per graph (mirage.mpk.sanitize counts them); exits non-zero on any mismatch or error.

Not collected by pytest; test_sanitizers.py runs it under each sanitizer. By hand
(docs/sanitizers.md):
    python -c "from mirage.mpk.sanitize import run_under_sanitizer as r; \
        print(r('thread', 'tests/runtime_python/test_mode/sanitizer_subset.py', 600).summary)"
It also runs unsanitized: python tests/runtime_python/test_mode/sanitizer_subset.py
"""
import sys
import time

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


def cases():
    """(label, thunk) per graph: one jitter seed per topology (the first of its test's list)."""
    out = [(f"{name}[jitter={mod.JITTERS[0]}]", lambda m=mod: m.run(m.JITTERS[0], graph.output_dir()))
           for name, mod in (("fork", FORK), ("join", JOIN), ("diamond", DIAMOND))]
    for dtype, groups in MLP_CASES:
        out.append((f"qwen3_mlp_small[{str(dtype)[6:]},g={groups}]",
                    lambda d=dtype, g=groups: QWEN.run(d, g, 80 + g, graph.output_dir())))
    return out


def main() -> int:
    missing = [k for k in SMALL_MLP if not hasattr(QWEN, k)]
    if missing:
        print(f"test_qwen3_mlp.py no longer defines {missing}: update SMALL_MLP here", file=sys.stderr)
        return 2
    for k, v in SMALL_MLP.items():
        setattr(QWEN, k, v)
    t0 = time.perf_counter()
    for label, run in cases():
        t = time.perf_counter()
        run()
        print(f"GRAPH {label} PASS", flush=True)
        print(f"TIMING {label}: {time.perf_counter() - t:.1f} s", flush=True)
    print(f"All {len(cases())} sanitizer-subset graphs PASS in {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
