"""Cold vs warm compile of one layer's module, and the time to a first pass, as ratios in one run.

Cold: an empty MPK_CACHE_DIR (g++ builds the generated module). Warm: the same kernel again
(a content-hash hit: no compiler runs). Each repeated `--repeat` times; medians printed.
Run: python benchmarks/compile_time.py [--repeat 3]
"""
import argparse
import os
import statistics
import tempfile
import time

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")

from mirage.mpk import testing  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402


def one(dtype=torch.bfloat16) -> tuple[float, float, bool]:
    """(compile seconds, first-pass seconds, cache hit) for a 16x4096 rmsnorm."""
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None))
    x = pk.attach_input(torch.randn(16, 4096, dtype=dtype), name="x")
    w = pk.attach_input(torch.randn(4096, dtype=dtype), name="w")
    out = pk.attach_input(torch.zeros(16, 4096, dtype=dtype), name="out")
    pk.rmsnorm_layer(input=x, weight=w, output=out, grid_dim=(16, 1, 1), block_dim=(128, 1, 1))
    t0 = time.perf_counter()
    pk.compile()
    t1 = time.perf_counter()
    pk()
    t2 = time.perf_counter()
    pk.finalize()
    return t1 - t0, t2 - t1, pk.build.hit


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    cold, warm, run = [], [], []
    for _ in range(args.repeat):
        os.environ["MPK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mpk-bench-")
        c, r, hit = one()
        assert not hit
        w, r2, hit = one()
        assert hit
        cold.append(c)
        warm.append(w)
        run += [r, r2]
    mc, mw, mr = (statistics.median(v) for v in (cold, warm, run))
    print(f"rmsnorm bf16 16x4096, grid 16: compile cold {mc:.3f} s, warm (cache hit) {mw:.4f} s, "
          f"cold/warm {mc / mw:.0f}x; one test-mode pass {mr * 1000:.1f} ms (medians of {args.repeat})")


if __name__ == "__main__":
    main()
