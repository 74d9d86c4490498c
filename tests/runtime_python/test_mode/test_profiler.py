"""The profiler (docs/profiler.md): profile=True or MPK's profiler_tensor writes
<trace_name>.perfetto-trace and <trace_name>.csv after every launch.

Checked on rmsnorm (grid 3) -> linear (grid 4 x 2) with 3 workers and schedule jitter: the trace's
structure, one slice per task, no overlap on a track, the CSV (scripts/parse_task_graph.py's
load_trace is the validator, with negative controls: an overlap, an unnamed track, a slice not
named by grid coordinate are each refused), that profiling leaves the task-to-worker assignment as
it is (the same seed without profiling; another seed changes it, so the comparison can fail), the
critical path and idle share that parse_task_graph.py reports, and profiler_tensor's checks.

Run: python tests/runtime_python/test_mode/test_profiler.py   (or pytest this file)
"""
import copy
import csv
import json
import os
import re
import subprocess
import sys

import pytest
import torch

from mirage.mpk import profiler, testing
from mirage.mpk.persistent_kernel import PersistentKernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "scripts", "parse_task_graph.py")
parse = testing.load_reference(SCRIPT, name="parse_task_graph")     # the script, as a module
BLOCK = (128, 1, 1)
NUM_TASKS = 3 + 8


def run(trace_name, jitter=3, **kw):
    """The graph run once on 3 workers: the kernel (finalized)."""
    gen = testing.generator(offset=5)
    config = testing.cpu_config(jitter_seed=jitter, num_workers=3, trace_name=trace_name, **kw)
    pk = PersistentKernel(**config)
    x = pk.attach_input(testing.randn((6, 64), torch.float32, gen), name="x")
    w = pk.attach_input(testing.randn((64,), torch.float32, gen), name="w")
    W = pk.attach_input(testing.randn((32, 64), torch.float32, gen), name="W")
    y = pk.new_tensor((6, 64), dtype=torch.float32, name="y")
    z = pk.attach_input(torch.zeros(6, 32), name="z")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(3, 1, 1), block_dim=BLOCK)
    pk.linear_layer(input=y, weight=W, output=z, grid_dim=(4, 2, 1), block_dim=BLOCK)
    pk.compile()
    pk()
    pk.finalize()
    return pk


def assignment(pk) -> dict[int, int]:
    return {r["task"]: r["worker"] for r in profiler.rows(pk.graph, pk._record)}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("trace") / "chain")
    return run(base, profile=True), base


def test_trace_structure(traced):
    pk, base = traced
    slices, tracks = parse.load_trace(base + ".perfetto-trace")
    assert sorted(tracks.values()) == ["worker 0", "worker 1", "worker 2"], tracks
    assert sorted(s["args"]["task"] for s in slices) == list(range(1, NUM_TASKS + 1))
    assert {s["name"] for s in slices} >= {"rmsnorm_0 (2, 0, 0)", "linear_1 (3, 1, 0)"}
    assert all(s["pid"] == 0 and s["dur"] > 0 and s["args"]["wait_us"] >= 0 for s in slices)
    with open(base + ".csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == NUM_TASKS and tuple(table[0]) == profiler.COLUMNS
    for row in table:
        ready, begin, end = (int(row[k]) for k in ("ready_ns", "begin_ns", "end_ns"))
        assert 0 < ready <= begin < end and int(row["wait_ns"]) == begin - ready, row
    by_task = {s["args"]["task"]: s["tid"] for s in slices}
    assert by_task == {int(r["task"]): int(r["worker"]) for r in table} == assignment(pk)


def test_the_validator_refuses_broken_traces(traced, tmp_path):
    """Negative controls: each check of load_trace fails on a trace broken its way."""
    _, base = traced
    with open(base + ".perfetto-trace") as f:
        good = json.load(f)
    slices = [e for e in good["traceEvents"] if e["ph"] == "X"]
    first = min(slices, key=lambda s: s["ts"])
    later = next(s for s in sorted(slices, key=lambda s: s["ts"])
                 if s["tid"] == first["tid"] and s is not first)

    def broken(edit):
        doc = copy.deepcopy(good)
        edit(doc["traceEvents"])
        path = tmp_path / "broken.perfetto-trace"
        path.write_text(json.dumps(doc))
        return str(path)

    def shift(events):
        next(e for e in events if e.get("name") == later["name"])["ts"] = first["ts"] + first["dur"] / 2

    cases = {"overlap": shift,
             "without process_name/thread_name metadata": lambda ev: ev.remove(
                 next(e for e in ev if e.get("name") == "thread_name" and e["tid"] == first["tid"])),
             "is not 'layer (x, y, z)'": lambda ev: ev[-1].update(name="linear_1"),
             "has two slices": lambda ev: ev.append(dict(ev[-1]))}
    for reason, edit in cases.items():
        with pytest.raises(parse.BadTrace, match=re.escape(reason)):
            parse.load_trace(broken(edit))
    parse.load_trace(broken(lambda ev: None))      # the unedited copy passes


def test_profiling_keeps_the_assignment(traced, tmp_path):
    pk, _ = traced
    plain = assignment(run(str(tmp_path / "off")))                 # same seed, profiling off
    assert not os.path.exists(tmp_path / "off.perfetto-trace")
    assert plain == assignment(pk)
    other = assignment(run(str(tmp_path / "other"), jitter=4))      # negative control: it can differ
    assert other != plain


def test_parse_task_graph_reports_the_critical_path(traced):
    _, base = traced
    out = subprocess.run([sys.executable, SCRIPT, base + ".perfetto-trace"], capture_output=True, text=True,
                         check=True).stdout
    print(out)
    assert f"{NUM_TASKS} tasks on 3 worker(s) of 1 rank(s)" in out
    assert "critical path in time: " in out and "idle share per worker (of that span): worker 0 " in out
    slices, _ = parse.load_trace(base + ".perfetto-trace")
    path = parse.critical_path(slices)
    assert path[-1] is max(slices, key=lambda s: s["ts"] + s["dur"])
    assert all(a["ts"] + a["dur"] <= b["ts"] + parse.EPS_US for a, b in zip(path, path[1:]))
    assert path[-1]["name"].startswith("linear_1") and len(path) >= 2


def test_profiler_tensor(tmp_path):
    """MPK's spelling: a uint64 tensor of the user's size; too small or of another dtype: a ValueError."""
    buf = torch.zeros(3000 * 128, dtype=torch.uint64)
    run(str(tmp_path / "mpk"), profiler_tensor=buf)
    slices, _ = parse.load_trace(str(tmp_path / "mpk.perfetto-trace"))
    assert len(slices) == NUM_TASKS and int(buf.view(torch.int64)[4 * 1 + 2]) > 0
    for bad in (torch.zeros(4 * NUM_TASKS, dtype=torch.int64), torch.zeros(3000, dtype=torch.float32)):
        with pytest.raises(ValueError, match=rf"profiler_tensor: .*at least {4 * (NUM_TASKS + 1)} entries"):
            run(str(tmp_path / "bad"), profiler_tensor=bad)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-q", "-s"]))
