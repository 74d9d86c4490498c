"""compile() time against graph size: 1k / 10k / 100k tasks, module already cached, and each stage's share.

The graph is issue 13's: 10 chained elementwise_add layers (t_i = t_{i-1} + y, fp32, one row of
8 columns per task), grid N/10 each, so every task waits on one task of the layer before. One
warm-up compile fills the compile cache (MPK_CACHE_DIR, a fresh temporary directory); every timed
compile is then a cache hit, with output_dir set so the task-graph JSON and the kept module are
written as a user's compile(output_dir=...) does.

Stages are timed by wrapping the library functions compile() calls (a wrapper per stage, not per
task, so the wrappers cost nothing measurable):
  build       graph.build                      layers -> tasks -> events
  verify      graph.verify                     the verifier
  JSON        codegen.task_graph_json + codegen.write_outputs + reuse.describe (hashes the graph)
  task table  tasktable.TaskTable             the flat arrays the runtime (and the JSON) read
  init        Runtime.__init__ minus the table  load the module, events, mpk_init
  other       the rest of compile(): the cache lookup (headers digest), copying the kept module
Each size is compiled --repeat times and the minimum of each figure is printed (the machine may
be shared: the 1-minute load average is printed beside the table).
Run: python benchmarks/compile_scaling.py [--repeat 3] [--sizes 1000,10000,100000]
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections import defaultdict

import torch

os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")
os.environ["MPK_CACHE_DIR"] = tempfile.mkdtemp(prefix="mpk-scaling-")

from mirage.mpk import codegen, reuse, runtime, tasktable, testing  # noqa: E402
from mirage.mpk import graph as graph_mod  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

LAYERS, COLS = 10, 8
STAGES = ("build", "verify", "JSON", "task table", "init", "other")
# (owner, attribute, stage): the functions compile() reaches, looked up where compile() calls them
TIMED = [(graph_mod, "build", "build"), (graph_mod, "verify", "verify"),
         (codegen, "task_graph_json", "JSON"), (codegen, "write_outputs", "JSON"),
         (reuse, "describe", "JSON"),
         (tasktable.TaskTable, "__init__", "task table"), (runtime.Runtime, "__init__", "init")]


def declare(num_tasks: int) -> PersistentKernel:
    grid = num_tasks // LAYERS
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None))
    y = pk.attach_input(torch.ones(grid, COLS), name="y")
    prev = pk.attach_input(torch.zeros(grid, COLS), name="t0")
    for i in range(1, LAYERS + 1):
        out = pk.attach_input(torch.zeros(grid, COLS), name=f"t{i}")
        pk.elementwise_add_layer(input_a=prev, input_b=y, output=out, grid_dim=(grid, 1, 1),
                                 block_dim=(128, 1, 1))
        prev = out
    return pk


def install_timers(spent: dict[str, float]) -> None:
    """Wrap each TIMED function so its wall time adds to its stage; the table's time inside
    Runtime.__init__ is counted once, under "task table"."""
    for owner, name, stage in TIMED:
        real = getattr(owner, name)

        def timed(*args, _real=real, _stage=stage, **kwargs):
            before = dict(spent)
            t0 = time.perf_counter()
            try:
                return _real(*args, **kwargs)
            finally:
                nested = sum(spent[s] - before.get(s, 0.0) for s in spent if s != _stage)
                spent[_stage] += time.perf_counter() - t0 - nested
        setattr(owner, name, timed)


def compile_once(num_tasks: int, spent: dict[str, float], warm: bool = True) -> float:
    pk = declare(num_tasks)
    spent.clear()
    with tempfile.TemporaryDirectory(prefix="mpk-scaling-out-") as out:
        t0 = time.perf_counter()
        pk.compile(output_dir=out)
        total = time.perf_counter() - t0
    assert pk.build.hit or not warm, "a timed compile must be a cache hit"
    assert len(pk.graph.tasks) == num_tasks + 1, len(pk.graph.tasks)
    pk.finalize()
    spent["other"] = total - sum(spent[s] for s in STAGES if s != "other")
    return total


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="1000,10000,100000")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    spent: dict[str, float] = defaultdict(float)
    install_timers(spent)
    compile_once(LAYERS, spent, warm=False)           # fills the cache: the same variant set for every size
    rows = []
    for n in sizes:
        best_total, best = float("inf"), {s: float("inf") for s in STAGES}
        for _ in range(args.repeat):
            best_total = min(best_total, compile_once(n, spent))
            best = {s: min(best[s], spent[s]) for s in STAGES}
        rows.append((n, best_total, best))
    load = os.getloadavg()[0]
    print(f"compile(output_dir=...) of {LAYERS} chained elementwise_add layers, cache hit, min of "
          f"{args.repeat}; load average {load:.2f} on {os.cpu_count()} cores")
    print(f"{'tasks':>8} {'total s':>8} {'us/task':>8}  " + "  ".join(f"{s:>10}" for s in STAGES))
    for n, total, best in rows:
        shares = "  ".join(f"{best[s]:6.3f} {100 * best[s] / total:2.0f}%" for s in STAGES)
        print(f"{n:>8} {total:8.3f} {1e6 * total / n:8.1f}  {shares}")
    print("(stage columns: seconds and share of the total; each stage's min over the repeats)")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    finally:
        shutil.rmtree(os.environ["MPK_CACHE_DIR"], ignore_errors=True)     # this run's own cache
