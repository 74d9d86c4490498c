"""The watchdog: a stuck graph raises MPKHangError within watchdog_s + 1 s; a long task does not.

The hang is made by one extra expected trigger on an event, added to the built graph
before the runtime sees it (verify() would reject it, so it is skipped while that kernel
compiles; monkeypatch.context() restores both functions right after). The hanging kernels
profile (task record), so the time to the error is taken from the last progress (the last
task's stamps), as the watchdog counts it: from pk()'s call it also holds starting the threads
and running the first layer, which a loaded machine stretches.

Run: pytest tests/runtime_python/test_mode/test_watchdog.py -s   (-s shows the TIMING lines)
"""
import time

import pytest
import torch

from mirage.mpk import abi, testing
from mirage.mpk import graph as graph_mod
from mirage.mpk.errors import MPKHangError
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)


def new_pk(**kw) -> PersistentKernel:
    params = PersistentKernel.get_default_init_parameters()
    params.update(test_mode=True, num_workers=3, num_local_schedulers=2)   # no jitter: fixed placement
    params.update(kw)
    return PersistentKernel(**params)


def hanging_kernel(monkeypatch, **kw) -> PersistentKernel:
    """L0 (1 task) -> L1 (2 tasks, one shared event) -> L2 (2 tasks, one event each); L1's event
    expects one trigger more than L0 gives, so it never fires: L1 is never enqueued (MPK's
    event-driven dispatch, docs/runtime.md), L2 neither, and every worker ends up idle."""
    real_build = graph_mod.build

    def build_with_lost_trigger(layers):
        g = real_build(layers)
        g.events[g.tasks[2].event].num_triggers += 1
        return g

    with monkeypatch.context() as m:
        m.setattr(graph_mod, "build", build_with_lost_trigger)
        m.setattr(graph_mod, "verify", lambda g: None)
        m.delenv("MPK_SCHEDULE_JITTER", raising=False)     # the placement above assumes no jitter
        pk = new_pk(profile=True, **kw)     # the task record: when the last progress happened
        x = pk.attach_input(torch.randn(4, 8), name="x")
        y = pk.new_tensor((4, 8), dtype=torch.float32, name="y")
        z = pk.new_tensor((4, 8), dtype=torch.float32, name="z")
        w = pk.attach_input(torch.zeros(4, 8), name="w")
        pk.identity_layer(input=x, output=y, grid_dim=(1, 1, 1), block_dim=BLOCK)
        pk.identity_layer(input=y, output=z, grid_dim=(2, 1, 1), block_dim=BLOCK)
        pk.identity_layer(input=z, output=w, grid_dim=(2, 1, 1), block_dim=BLOCK)
        pk.compile()
    return pk


def timed_hang(pk) -> tuple[float, float, str]:
    """(seconds from pk()'s call, seconds from the last progress, the report) for a hanging pk()."""
    t0 = time.perf_counter()
    with pytest.raises(MPKHangError) as e:
        pk()
    returned_ns, elapsed = time.monotonic_ns(), time.perf_counter() - t0
    return elapsed, (returned_ns - testing.last_progress_ns(pk)) / 1e9, str(e.value)


def test_hang_is_reported_within_watchdog_plus_one_second(monkeypatch):
    watchdog_s = 1.0
    pk = hanging_kernel(monkeypatch, watchdog_s=watchdog_s)
    g = pk.graph
    e1, e2 = g.tasks[2].event, g.tasks[4].event           # L1's shared event; L2(0)'s event
    elapsed, idle, report = timed_hang(pk)
    print(f"\nTIMING MPKHangError {idle:.3f} s after the last progress, {elapsed:.3f} s after pk() "
          f"(watchdog_s = {watchdog_s:g})\n{report}")
    assert watchdog_s <= elapsed and watchdog_s <= idle < watchdog_s + 1.0, (elapsed, idle)
    lines = report.splitlines()
    assert lines[0] == ("no progress for 1 s (watchdog_s; MPK_WATCHDOG_S): the task graph is stuck in "
                        "pass 1"), report
    # each event that never fired: the layer and tiles waiting on it, counter vs needed, and why;
    # the lost trigger (the root cause) first
    assert lines[1] == (f"  not started in layer 'identity_1' (0, 0, 0), (1, 0, 0): event {e1} never "
                        f"fired (counter 1, needs 2); all 1 producers finished ('identity_0'(0, 0, 0)) but a "
                        f"trigger never arrived"), report
    assert (f"  not started in layer 'identity_2' (0, 0, 0): event {e2} never fired (counter 0, needs 1); "
            f"unfinished producers: 'identity_1'(0, 0, 0)") in lines, report
    workers = [ln for ln in lines if ln.startswith("  worker")]
    assert workers == [f"  worker {w}: idle, no task" for w in range(3)], report
    assert "task 2 " not in report and "waits at task" not in report   # no raw task ids
    pk.finalize()


def test_mpk_watchdog_s_env_is_honoured(monkeypatch):
    monkeypatch.setenv("MPK_WATCHDOG_S", "0.5")
    pk = hanging_kernel(monkeypatch)
    assert pk.watchdog_s == 0.5
    elapsed, idle, report = timed_hang(pk)
    print(f"\nTIMING MPKHangError {idle:.3f} s after the last progress, {elapsed:.3f} s after pk() "
          f"(MPK_WATCHDOG_S=0.5)")
    assert 0.5 <= elapsed and 0.5 <= idle < 1.5, (elapsed, idle)
    assert report.startswith("no progress for 0.5 s"), report
    pk.finalize()


def test_watchdog_s_argument_beats_the_env(monkeypatch):
    monkeypatch.setenv("MPK_WATCHDOG_S", "100")
    assert new_pk(watchdog_s=0.25).watchdog_s == 0.25
    assert new_pk().watchdog_s == 100.0
    monkeypatch.delenv("MPK_WATCHDOG_S")
    assert new_pk().watchdog_s == 30.0                     # the default (docs/runtime.md)


def test_bad_mpk_watchdog_s_is_named(monkeypatch):
    monkeypatch.setenv("MPK_WATCHDOG_S", "soon")
    with pytest.raises(ValueError, match=r"MPK_WATCHDOG_S='soon' is not a number"):
        new_pk()


def _long_linear(x, w, watchdog_s, trace):
    """One linear task (the whole matmul) and a consumer layer whose 2 tasks wait on it; profiled
    (the trace goes to `trace`), so the task record says how long the linear was inside its kernel."""
    pk = new_pk(watchdog_s=watchdog_s, profile=True, trace_name=str(trace))
    xd, wd = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    y = pk.new_tensor((x.shape[0], w.shape[0]), dtype=torch.float32, name="y")
    z = pk.attach_input(torch.zeros(x.shape[0], w.shape[0]), name="z")
    pk.linear_layer(input=xd, weight=wd, output=y, grid_dim=(1, 1, 1), block_dim=BLOCK)
    pk.identity_layer(input=y, output=z, grid_dim=(2, 1, 1), block_dim=BLOCK)
    pk.compile()
    return pk


def _inside_s(pk) -> float:
    """Seconds the linear (task 1) was inside its kernel in pk's last launch: begin to end stamp."""
    rec = pk._record.view(-1)[: abi.RECORD_FIELDS * len(pk.graph.tasks)].view(-1, abi.RECORD_FIELDS)
    return (int(rec[1, 2]) - int(rec[1, 1])) / 1e9


def test_one_long_task_does_not_trip_the_watchdog(monkeypatch, tmp_path):
    # 128 x 4096 @ 4096 x 4096 fp32 in one task: about 0.3 s on a 2-core CI machine.
    # Measure it first with the watchdog off, then run it with watchdog_s a quarter of that,
    # so the check holds on faster and slower machines alike. The lengths are the task's time
    # inside its kernel (task record), not pk()'s; and a run that came out shorter than 2 x
    # watchdog_s (a busy machine slowed the probe, then freed up: 0.99 s, then 0.47 s) proved
    # nothing, so it is run again with a quarter of its own length, up to 3 times. The stuck limit
    # (default 10 x watchdog_s, 2.5 x the probe's length) is out of the way: a run slowed 2.5-fold
    # would raise MPK_STUCK, which is not what this tests (tests/csrc/test_runtime.cpp does).
    monkeypatch.setenv("MPK_STUCK_S", "60")
    g = testing.generator(3)
    x, w = testing.randn((128, 4096), gen=g), testing.randn((4096, 4096), gen=g)
    probe = _long_linear(x, w, 0, tmp_path / "probe")      # <= 0 disables the watchdog
    probe()
    watchdog_s = max(_inside_s(probe) / 4, 0.01)
    probe.finalize()
    for attempt in range(3):
        pk = _long_linear(x, w, watchdog_s, tmp_path / f"run{attempt}")
        t0 = time.perf_counter()
        pk()                                               # must not raise MPKHangError
        elapsed, inside = time.perf_counter() - t0, _inside_s(pk)
        print(f"\nTIMING one task inside its kernel {inside:.3f} s (pk() {elapsed:.3f} s) with watchdog_s = "
              f"{watchdog_s:.3f} s")
        if inside > 2 * watchdog_s:
            break
        pk.finalize()
        watchdog_s = max(inside / 4, 0.01)
    assert inside > 2 * watchdog_s, "the task was not long enough to test the heartbeat"
    ref = x.double() @ w.double().T
    tol = testing.tol_linear(torch.float32, 4096, x.double().abs() @ w.double().abs().T)
    testing.assert_close("long_linear.z", pk.get_tensor("z"), ref, tol)
    pk.finalize()
