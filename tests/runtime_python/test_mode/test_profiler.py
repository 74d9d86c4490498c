"""The profiler (docs/profiler.md): profile=True or MPK's profiler_tensor writes
<trace_name>.perfetto-trace (a Perfetto protobuf trace) and <trace_name>.csv after every launch, into
compile()'s output_dir when it has one.

Checked on rmsnorm (grid 3) -> linear (grid 4 x 2) with 3 workers and schedule jitter: the trace
decoded with the perfetto package's protos against the task record (a thread track per worker, one
begin/end pair per task on its worker's track, names, times in ns from the first record), its
structure through scripts/parse_task_graph.py's load_trace, the validator, with negative controls
(an overlap, a track without a descriptor, a slice not named by grid coordinate, a task twice, a
slice that never ends, the old Chrome JSON and a truncated file are each refused), the CSV, the
files in output_dir and their paths logged, the error naming the extra when perfetto is missing,
that profiling leaves the task-to-worker assignment as it is (the same seed without profiling;
another seed changes it, so the comparison can fail), the critical path and idle share that
parse_task_graph.py reports, and profiler_tensor's checks.

Run: python tests/runtime_python/test_mode/test_profiler.py   (or pytest this file)
"""
import csv
import json
import logging
import os
import re
import subprocess
import sys

import pytest
import torch
from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace, TrackEvent

from mirage.mpk import profiler, testing
from mirage.mpk.errors import MPKInstallError
from mirage.mpk.persistent_kernel import PersistentKernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(ROOT, "scripts", "parse_task_graph.py")
parse = testing.load_reference(SCRIPT, name="parse_task_graph")     # the script, as a module
BLOCK = (128, 1, 1)
NUM_TASKS = 3 + 8
PB2 = "perfetto.protos.perfetto.trace.perfetto_trace_pb2"


def run(trace_name, jitter=3, output_dir=None, **kw):
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
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    return pk


def assignment(pk) -> dict[int, int]:
    return {r["task"]: r["worker"] for r in profiler.rows(pk.graph, pk._record)}


def decode(path) -> Trace:
    trace = Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    return trace


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("trace") / "chain")
    return run(base, profile=True), base


def test_trace_is_the_task_record_in_perfetto_protobuf(traced):
    """Decoded with the perfetto package's own protos, independently of parse_task_graph.py."""
    pk, base = traced
    record = {r["task"]: r for r in profiler.rows(pk.graph, pk._record)}
    t0 = min(min(r["ready_ns"], r["begin_ns"]) for r in record.values())
    packets = decode(base + ".perfetto-trace").packet
    assert all(p.trusted_packet_sequence_id == 1 for p in packets)
    procs = [p.track_descriptor for p in packets if p.track_descriptor.HasField("process")]
    assert [(d.process.pid, d.process.process_name) for d in procs] == [(1, "rank 0")]    # pid = rank + 1
    threads = {p.track_descriptor.uuid: p.track_descriptor for p in packets
               if p.track_descriptor.HasField("thread")}
    assert sorted((d.thread.pid, d.thread.tid, d.thread.thread_name, d.parent_uuid)
                  for d in threads.values()) == [(1, w + 1, f"worker {w}", procs[0].uuid) for w in range(3)]
    assert {r["worker"] + 1 for r in record.values()} <= {d.thread.tid for d in threads.values()}
    events = [p for p in packets if p.HasField("track_event")]
    assert [p.timestamp for p in events] == sorted(p.timestamp for p in events)    # time order
    open_, pairs = {}, {}
    for p in events:
        ev = p.track_event
        if ev.type == TrackEvent.TYPE_SLICE_BEGIN:
            assert ev.track_uuid not in open_, "a slice begins on a worker already in one"
            open_[ev.track_uuid] = p
        else:
            assert ev.type == TrackEvent.TYPE_SLICE_END and ev.track_uuid in open_
            begin = open_.pop(ev.track_uuid)
            task = next(a.int_value for a in begin.track_event.debug_annotations if a.name == "task")
            assert task not in pairs, f"task {task} has two slices"
            pairs[task] = (begin, p)
    assert not open_ and sorted(pairs) == sorted(record) and len(pairs) == NUM_TASKS
    for task, (begin, end) in pairs.items():
        r, t = record[task], pk.graph.tasks[task]
        ev = begin.track_event
        assert ev.name == f"{t.layer.name} {t.coord}" and list(ev.categories) == [t.layer.kind]
        assert threads[ev.track_uuid].thread.tid == r["worker"] + 1
        assert (begin.timestamp, end.timestamp) == (r["begin_ns"] - t0, r["end_ns"] - t0)
        assert 0 <= begin.timestamp <= end.timestamp
        assert end.timestamp - begin.timestamp == r["end_ns"] - r["begin_ns"]        # the duration, exactly
        args = {a.name: a for a in ev.debug_annotations}
        assert (args["wait_ns"].int_value, args["event"].int_value) == (r["wait_ns"], t.event)
        assert [v.int_value for v in args["triggers"].array_values] == list(t.triggers)
    assert min(min(b.timestamp, e.timestamp) for b, e in pairs.values()) >= 0     # times start at t0


def test_trace_structure(traced):
    pk, base = traced
    slices, tracks = parse.load_trace(base + ".perfetto-trace")
    assert sorted(tracks.values()) == ["worker 0", "worker 1", "worker 2"], tracks
    assert sorted(s["args"]["task"] for s in slices) == list(range(1, NUM_TASKS + 1))
    assert {s["name"] for s in slices} >= {"rmsnorm_0 (2, 0, 0)", "linear_1 (3, 1, 0)"}
    assert all(s["rank"] == 0 and s["dur"] > 0 and s["args"]["wait_us"] >= 0 for s in slices)
    with open(base + ".csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == NUM_TASKS and tuple(table[0]) == profiler.COLUMNS
    for row in table:
        ready, begin, end = (int(row[k]) for k in ("ready_ns", "begin_ns", "end_ns"))
        assert 0 < ready <= begin < end and int(row["wait_ns"]) == begin - ready, row
    by_task = {s["args"]["task"]: s["worker"] for s in slices}
    assert by_task == {int(r["task"]): int(r["worker"]) for r in table} == assignment(pk)


def test_the_validator_refuses_broken_traces(traced, tmp_path):
    """Negative controls: each check of load_trace fails on a trace broken its way, and a file that
    is not a Perfetto protobuf (the Chrome JSON this profiler used to write, a truncated trace) fails
    the decode."""
    _, base = traced
    with open(base + ".perfetto-trace", "rb") as f:
        good = f.read()

    def written(data: bytes) -> str:
        path = tmp_path / "broken.perfetto-trace"
        path.write_bytes(data)
        return str(path)

    def broken(edit) -> str:
        trace = Trace()
        trace.ParseFromString(good)
        edit(trace.packet)
        # back in time order (the tracks first), as the profiler writes: only the edit is wrong
        ordered = sorted(trace.packet, key=lambda p: p.timestamp if p.HasField("track_event") else -1)
        return written(Trace(packet=ordered).SerializeToString())

    def begins(packets):
        return [p for p in packets if p.track_event.type == TrackEvent.TYPE_SLICE_BEGIN]

    def overlap(packets):       # the first slice's end moved past the next begin on its worker
        first = begins(packets)[0]
        ends = [p for p in packets if p.track_event.type == TrackEvent.TYPE_SLICE_END
                and p.track_event.track_uuid == first.track_event.track_uuid]
        later = [p for p in begins(packets) if p.track_event.track_uuid == first.track_event.track_uuid]
        assert len(later) >= 2, "the first slice's worker ran one task only: no overlap to make"
        ends[0].timestamp = later[1].timestamp + 1

    def drop_thread(packets):
        packets.remove(next(p for p in packets if p.track_descriptor.HasField("thread")
                            and p.track_descriptor.uuid == begins(packets)[0].track_event.track_uuid))

    def task_twice(packets):
        a, b = begins(packets)[:2]
        b.track_event.debug_annotations[0].int_value = a.track_event.debug_annotations[0].int_value

    cases = {"overlap": overlap,
             "which no named thread track descriptor": drop_thread,
             "is not a slice begin named 'layer (x, y, z)'": lambda ps: setattr(
                 begins(ps)[-1].track_event, "name", "linear_1"),
             "has two slices": task_twice,
             "never ends": lambda ps: ps.remove([p for p in ps if p.HasField("track_event")][-1])}
    for reason, edit in cases.items():
        with pytest.raises(parse.BadTrace, match=re.escape(reason)):
            parse.load_trace(broken(edit))
    parse.load_trace(broken(lambda ps: None))      # the unedited copy passes
    old_json = json.dumps(dict(traceEvents=[  # what this profiler wrote before
        dict(name="process_name", ph="M", pid=0, args=dict(name="rank 0")),
        dict(name="rmsnorm_0 (0, 0, 0)", ph="X", pid=0, tid=0, ts=0, dur=1, args=dict(task=1))]))
    for data in (old_json.encode(), good[:-1]):       # (the last packet cut short by a byte)
        with pytest.raises(parse.BadTrace, match="not a Perfetto protobuf trace"):
            parse.load_trace(written(data))
    with pytest.raises(parse.BadTrace, match="no task slices"):
        parse.load_trace(written(b""))           # an empty file decodes (no packets): still refused


def test_files_go_to_output_dir_and_are_logged(tmp_path, monkeypatch, caplog):
    """compile(output_dir=D): D/<trace_name>.perfetto-trace and .csv, nothing in the working
    directory, and both paths in the mirage.mpk log."""
    cwd, out = tmp_path / "cwd", tmp_path / "out"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(logging.getLogger("mirage.mpk"), "propagate", True)    # (caplog hears the root)
    with caplog.at_level(logging.INFO, logger="mirage.mpk"):
        run("kept", profile=True, output_dir=str(out))
    trace, table = str(out / "kept.perfetto-trace"), str(out / "kept.csv")
    assert os.path.isfile(trace) and os.path.isfile(table) and os.listdir(cwd) == []
    assert f"profiler: wrote {trace} and {table}" in caplog.messages
    assert len(parse.load_trace(trace)[0]) == NUM_TASKS
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="mirage.mpk"):
        run("here", profile=True)                  # no output_dir: trace_name as given, from the cwd
    assert sorted(os.listdir(cwd)) == ["here.csv", "here.perfetto-trace"]
    assert "profiler: wrote here.perfetto-trace and here.csv" in caplog.messages


def test_missing_perfetto_names_the_extra(monkeypatch, tmp_path):
    """Without the perfetto package, asking for profiling is an MPKInstallError at construction that
    names the extra; export says the same; without profiling nothing needs it."""
    for name in ("perfetto", PB2):
        monkeypatch.setitem(sys.modules, name, None)       # (an import of it then fails)
    message = r"profiling needs the 'profile' extra, .*pip install -e '\.\[profile\]'"
    for kw in (dict(profile=True), dict(profiler_tensor=torch.zeros(3000 * 128, dtype=torch.uint64))):
        with pytest.raises(MPKInstallError, match=message):
            PersistentKernel(**testing.cpu_config(num_workers=3, **kw))
    with pytest.raises(MPKInstallError, match=message):
        profiler.export(None, torch.zeros(8, dtype=torch.int64), str(tmp_path / "t"))
    PersistentKernel(**testing.cpu_config(num_workers=3))      # profiling off: constructs


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
