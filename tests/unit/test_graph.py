"""mirage.mpk.graph: exact tile dependencies, shared events, numbering, coarsening, and the verifier.

Pure Python: layers are declared on a PersistentKernel (never compiled) over new_tensor()s,
which get no storage, then graph.build(pk.layers). Run: pytest tests/unit/test_graph.py -s
(-s shows the 100k-task timing line).

Notation in comments: L0(1) = task of layer 0 at grid x = 1; rows [a, b) = the tile's rows.
"""
import time

import pytest

import mirage
from mirage.mpk import graph as graph_mod
from mirage.mpk import testing
from mirage.mpk.errors import GraphError
from mirage.mpk.layers import tensor_init
from mirage.mpk.persistent_kernel import PersistentKernel

BLOCK = (128, 1, 1)


class Net:
    """A tiny graph-description helper: float32 new tensors and row/column-tiled add layers."""

    def __init__(self):
        self.pk = PersistentKernel(test_mode=True)

    def t(self, name, rows=8, cols=4):
        return self.pk.new_tensor(dims=(rows, cols), dtype=mirage.float32, name=name)

    def copy(self, src, dst, grid):
        """dst = src + 0, tiled like the add (grid.x rows, grid.y columns): a row-tiled copy. (An
        identity_layer tiles the other way round: grid.x splits the last dim, as in MPK.)"""
        zero = self.pk.tensors.get(f"zero_{src.dims[0]}x{src.dims[1]}") or \
            self.pk.new_tensor(dims=src.dims, dtype=mirage.float32, name=f"zero_{src.dims[0]}x{src.dims[1]}")
        self.add(src, zero, dst, grid)

    def add(self, a, b, out, grid):
        self.pk.elementwise_add_layer(input_a=a, input_b=b, output=out, grid_dim=grid, block_dim=BLOCK)

    def build(self, verify=True):
        g = graph_mod.build(self.pk.layers)
        if verify:
            graph_mod.verify(g)
        return g


def task(g, layer, x=0, y=0):
    """The task of layer index `layer` at grid coordinate (x, y, 0)."""
    name = g.layers[layer].name
    return next(t for t in g.tasks[1:] if t.layer.name == name and t.coord == (x, y, 0))


def producers(g, t):
    """Labels of the tasks that trigger the event `t` waits on (what will actually run)."""
    return {g.tasks[p].label for p in g.triggers_of(t.event)} if t.event > 0 else set()


def lbl(g, layer, x=0, y=0):
    return task(g, layer, x, y).label


def mpk_log():
    """The 'mirage.mpk' logger's messages (it has its own stderr handler, propagate=False)."""
    return testing.capture_log()


# ---- dependencies ----------------------------------------------------------------------------

def test_consumer_depends_only_on_overlapping_producer_tiles():
    n = Net()
    x, y, z = n.t("x", 6), n.t("y", 6), n.t("z", 6)
    n.copy(x, y, (3, 1, 1))      # L0: y rows [0,2) [2,4) [4,6)
    n.copy(y, z, (2, 1, 1))      # L1: reads y rows [0,3) [3,6)
    g = n.build()
    # [0,3) meets L0(0) and L0(1); [3,6) meets L0(1) and L0(2); nothing more
    assert producers(g, task(g, 1, 0)) == {lbl(g, 0, 0), lbl(g, 0, 1)}
    assert producers(g, task(g, 1, 1)) == {lbl(g, 0, 1), lbl(g, 0, 2)}
    e0, e1 = g.events[task(g, 1, 0).event], g.events[task(g, 1, 1).event]
    assert e0.id != e1.id and e0.num_triggers == 2 and e1.num_triggers == 2
    # L0(1) feeds both consumers: it triggers both events; L0(0) only the first
    assert task(g, 0, 1).triggers == [e0.id, e1.id]
    assert task(g, 0, 0).triggers == [e0.id]
    assert all(task(g, 0, i).event == -1 for i in range(3))


def test_column_split_producer_row_split_consumer():
    n = Net()
    x, y, z = n.t("x", 4, 8), n.t("y", 4, 8), n.t("z", 4, 8)
    n.copy(x, y, (1, 2, 1))      # L0: y columns [0,4) and [4,8), all rows
    n.copy(y, z, (2, 1, 1))      # L1: y rows [0,2) and [2,4), all columns: each meets both L0 tiles
    g = n.build()
    both = {lbl(g, 0, 0, 0), lbl(g, 0, 0, 1)}
    assert producers(g, task(g, 1, 0)) == both and producers(g, task(g, 1, 1)) == both
    # equal dependency sets: one shared event
    ev = g.events[task(g, 1, 0).event]
    assert task(g, 1, 1).event == ev.id and ev.num_triggers == 2
    assert ev.waiters == [task(g, 1, 0).id, task(g, 1, 1).id]


def test_read_after_read_needs_no_order():
    n = Net()
    x, y, z = n.t("x"), n.t("y"), n.t("z")
    n.copy(x, y, (2, 1, 1))
    n.copy(x, z, (2, 1, 1))      # also only reads x
    g = n.build()
    assert all(t.event == -1 for t in g.tasks[1:])
    assert len(g.events) == 2    # TERMINATION and END_OF_TASK_GRAPH only
    assert g.events[-1].num_triggers == 4


def test_read_after_write():
    n = Net()
    x, y, z = n.t("x"), n.t("y"), n.t("z")
    n.copy(x, y, (2, 1, 1))      # L0 writes y rows [0,4) [4,8)
    n.copy(y, z, (4, 1, 1))      # L1 reads y rows [0,2) [2,4) [4,6) [6,8)
    g = n.build()
    for i in range(4):
        assert producers(g, task(g, 1, i)) == {lbl(g, 0, i // 2)}
    # L1(0) and L1(1) have the same set {L0(0)}: one event for both
    assert task(g, 1, 0).event == task(g, 1, 1).event != task(g, 1, 2).event == task(g, 1, 3).event


def test_write_after_read():
    n = Net()
    y, z, w = n.t("y"), n.t("z"), n.t("w")
    n.copy(y, z, (4, 1, 1))      # L0 reads y (a graph input) rows [0,2) [2,4) [4,6) [6,8)
    n.copy(w, y, (2, 1, 1))      # L1 overwrites y rows [0,4) [4,8): must wait for those readers
    g = n.build()
    assert producers(g, task(g, 1, 0)) == {lbl(g, 0, 0), lbl(g, 0, 1)}
    assert producers(g, task(g, 1, 1)) == {lbl(g, 0, 2), lbl(g, 0, 3)}


def test_write_after_write():
    n = Net()
    x, w, y = n.t("x"), n.t("w"), n.t("y")
    n.copy(x, y, (2, 1, 1))      # L0 writes y rows [0,4) [4,8)
    n.copy(w, y, (4, 1, 1))      # L1 writes y rows [0,2) ... [6,8): after L0's write of them
    g = n.build()
    for i in range(4):
        assert producers(g, task(g, 1, i)) == {lbl(g, 0, i // 2)}


def test_reused_buffer_raw_war_waw():
    n = Net()
    x, y, z, w, v = n.t("x"), n.t("y"), n.t("z"), n.t("w"), n.t("v")
    n.copy(x, y, (2, 1, 1))      # L0 writes y
    n.copy(y, z, (2, 1, 1))      # L1 reads y            (RAW on L0)
    n.copy(w, y, (2, 1, 1))      # L2 writes y again     (WAR on L1, WAW on L0)
    n.copy(y, v, (2, 1, 1))      # L3 reads the new y    (RAW on L2 only: L2 covers L0's write)
    g = n.build()
    for i in range(2):
        assert producers(g, task(g, 1, i)) == {lbl(g, 0, i)}
        assert producers(g, task(g, 2, i)) == {lbl(g, 1, i), lbl(g, 0, i)}
        assert producers(g, task(g, 3, i)) == {lbl(g, 2, i)}


# ---- events: shared sets, fork, join, diamond ---------------------------------------------------

def test_equal_dependency_sets_share_one_event():
    n = Net()
    x, y, z = n.t("x"), n.t("y"), n.t("z")
    n.copy(x, y, (1, 1, 1))      # L0: one task writes all of y
    n.copy(y, z, (4, 1, 1))      # L1: four tasks, each depends on {L0(0)}
    g = n.build()
    ev = g.events[task(g, 1, 0).event]
    assert [t.event for t in g.tasks[2:]] == [ev.id] * 4
    assert ev.num_triggers == 1 and ev.waiters == [2, 3, 4, 5]
    assert (ev.first_task_id, ev.last_task_id) == (2, 6)     # MPK's half-open launch range
    assert task(g, 0).triggers == [ev.id]
    assert len(g.events) == 3    # TERMINATION, the shared event, END


def test_join():
    n = Net()
    x, y, z = n.t("x"), n.t("y"), n.t("z")
    n.copy(x, y, (4, 1, 1))
    n.copy(y, z, (1, 1, 1))      # one task reads all of y: waits for all four producers
    g = n.build()
    ev = g.events[task(g, 1).event]
    assert ev.num_triggers == 4
    assert all(task(g, 0, i).triggers == [ev.id] for i in range(4))


def test_fork_same_set_one_event_per_consumer_layer():
    n = Net()
    x, y, a, b = n.t("x"), n.t("y"), n.t("a"), n.t("b")
    n.copy(x, y, (1, 1, 1))
    n.copy(y, a, (2, 1, 1))
    n.copy(y, b, (2, 1, 1))      # four consumers in two layers, all with the set {L0(0)}
    g = n.build()
    # within a layer the set is shared; across layers it is not (ids 2, 3 and 4, 5 are two ranges, and
    # a third layer in between would split one event's range), so L0(0) triggers one event per layer
    ea, eb = task(g, 1, 0).event, task(g, 2, 0).event
    assert task(g, 1, 1).event == ea != eb == task(g, 2, 1).event
    assert [(e.waiters, e.first_task_id, e.last_task_id, e.num_triggers) for e in g.events[1:3]] == [
        ([2, 3], 2, 4, 1), ([4, 5], 4, 6, 1)]
    assert task(g, 0).triggers == [ea, eb] and len(g.events) == 4


def test_fork_different_sets_means_several_triggers():
    n = Net()
    x, y, a, b = n.t("x"), n.t("y"), n.t("a"), n.t("b")
    n.copy(x, y, (2, 1, 1))
    n.copy(y, a, (1, 1, 1))      # set {L0(0), L0(1)}
    n.copy(y, b, (2, 1, 1))      # sets {L0(0)} and {L0(1)}
    g = n.build()
    ea, eb0 = task(g, 1).event, task(g, 2, 0).event
    assert task(g, 0, 0).triggers == [ea, eb0]
    assert g.events[ea].num_triggers == 2 and g.events[eb0].num_triggers == 1


def test_diamond_and_the_shapes_mpk_rejects():
    n = Net()
    x, y, a, b, c = n.t("x"), n.t("y"), n.t("a"), n.t("b"), n.t("c")
    n.copy(x, y, (2, 1, 1))          # L0
    n.copy(y, a, (2, 1, 1))          # L1: L1(i) needs L0(i)
    n.copy(y, b, (1, 1, 1))          # L2: needs L0(0) and L0(1)
    n.add(a, b, c, (2, 1, 1))        # L3: L3(i) needs L1(i) and L2(0): two producer layers
    g = n.build()                    # verify() passes: MPK's case 2/3 shapes are accepted
    for i in range(2):
        # "two waits" in MPK: one event here, triggered by both producer layers
        t3 = task(g, 3, i)
        assert producers(g, t3) == {lbl(g, 1, i), lbl(g, 2)}
        assert g.events[t3.event].num_triggers == 2
        # "two triggers" in MPK: L0(i) feeds L1(i)'s event and L2's event
        assert task(g, 0, i).triggers == [task(g, 1, i).event, task(g, 2).event]
    assert task(g, 2).triggers == [task(g, 3, 0).event, task(g, 3, 1).event]
    assert g.events[-1].num_triggers == 2 and set(g.triggers_of(g.end_event)) == {
        task(g, 3, 0).id, task(g, 3, 1).id}


# ---- numbering: each event's waiters are one id range [first_task_id, last_task_id) ----------------

def test_tasks_sharing_an_event_get_consecutive_ids():
    n = Net()
    x, y, z = n.t("x", 4, 4), n.t("y", 4, 4), n.t("z", 4, 4)
    n.copy(x, y, (2, 1, 1))      # L0: rows [0,2) [2,4): tasks 1, 2
    n.copy(y, z, (2, 2, 1))      # L1: (x, y) reads rows of L0(x): sets {L0(0)} {L0(1)} {L0(0)} {L0(1)}
    g = n.build()
    # grid order would be (0,0) (1,0) (0,1) (1,1): ids 3, 5 on one event and 4 on the other. Each
    # event's waiters get consecutive ids instead, in grid order (x fastest) among themselves.
    assert [t.coord for t in g.tasks[3:]] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert [(e.id, e.waiters, e.first_task_id, e.last_task_id) for e in g.events[1:3]] == [
        (1, [3, 4], 3, 5), (2, [5, 6], 5, 7)]
    assert producers(g, g.tasks[4]) == {lbl(g, 0, 0)} and producers(g, g.tasks[5]) == {lbl(g, 0, 1)}
    end = g.events[-1]
    assert end.waiters == [] and (end.first_task_id, end.last_task_id) == (0, 0)       # as MPK writes it
    assert (g.events[0].first_task_id, g.events[0].last_task_id) == (0, 0)


def test_tasks_waiting_on_nothing_come_first_in_their_layer():
    n = Net()
    x, y, x2, z = n.t("x", 4), n.t("y", 4), n.t("x2", 4), n.t("z", 8)
    n.copy(x, y, (1, 1, 1))                              # L0 writes y
    yx2 = n.pk.fuse_tensors([y, x2], fused_dim=0, num_groups=1, name="yx2")    # rows [y | x2]
    n.copy(yx2, z, (2, 1, 1))                            # L1(0) reads y (waits on L0), L1(1) x2 (nothing)
    g = n.build()
    # L1(1) can start at once: it is numbered before L1(0), which waits
    assert [(t.label, t.event) for t in g.tasks[2:]] == [(lbl(g, 1, 1), -1), (lbl(g, 1, 0), 1)]
    assert (g.events[1].first_task_id, g.events[1].last_task_id) == (3, 4)


def test_end_of_task_graph_is_triggered_by_exactly_the_leaves():
    n = Net()
    x, y, a, b, c, q, r = (n.t(s) for s in "xyabcqr")
    n.copy(x, y, (2, 1, 1))
    n.copy(y, a, (2, 1, 1))
    n.copy(y, b, (1, 1, 1))
    n.add(a, b, c, (2, 1, 1))
    n.copy(q, r, (4, 1, 1))          # unrelated: its tasks are roots and leaves at once
    g = n.build()
    waited_on = {p for t in g.tasks[1:] for p in producers(g, t)}
    leaves = {t.label for t in g.tasks[1:] if t.label not in waited_on}
    assert leaves == {lbl(g, 3, 0), lbl(g, 3, 1)} | {lbl(g, 4, i) for i in range(4)}
    end = g.events[-1]
    assert end.kind == "end_of_task_graph" and end.num_triggers == len(leaves) == 6
    assert {g.tasks[i].label for i in g.triggers_of(end.id)} == leaves
    for t in g.tasks[1:]:            # a leaf triggers END only; an inner task never does
        assert (t.triggers == [end.id]) == (t.label in leaves)


def test_ids_are_topological_and_follow_program_order():
    n = Net()
    x, y, a, b, c = n.t("x"), n.t("y"), n.t("a"), n.t("b"), n.t("c")
    n.copy(x, y, (2, 2, 1))
    n.copy(y, a, (4, 1, 1))
    n.copy(y, b, (1, 2, 1))
    n.add(a, b, c, (2, 2, 1))
    g = n.build()
    assert g.tasks[0] is None                            # TERMINATE
    assert [t.id for t in g.tasks[1:]] == list(range(1, len(g.tasks)))
    # layers in program order, contiguous; grid x fastest (as CUDA linearizes blockIdx) among tasks
    # that wait on the same event or on none (L0 here)
    assert [t.layer.name for t in g.tasks[1:]] == (["elementwise_add_0"] * 4 + ["elementwise_add_1"] * 4 +
                                                   ["elementwise_add_2"] * 2 + ["elementwise_add_3"] * 4)
    assert [t.coord for t in g.tasks[1:5]] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    for t in g.tasks[1:]:
        assert all(p < t.id for p in g.triggers_of(t.event))       # producers come first
        for e in t.triggers:
            if e != g.end_event:
                assert min(g.events[e].waiters) > t.id               # waiters come after
    for e in g.events[1:-1]:                                         # each event launches one range
        assert e.waiters == list(range(e.first_task_id, e.last_task_id))


# ---- coarsening ------------------------------------------------------------------------------

def _fan_out_graph(consumers: int):
    """L0(0) writes all of y; L2 task i reads y and v rows [2i, 2i+2): sets {L0(0), L1(i)}."""
    n = Net()
    rows = 2 * consumers
    x, y, x2, v, z = n.t("x", rows), n.t("y", rows), n.t("x2", rows), n.t("v", rows), n.t("z", rows)
    n.copy(x, y, (1, 1, 1))
    n.copy(x2, v, (consumers, 1, 1))
    n.add(y, v, z, (consumers, 1, 1))
    return n


def test_eight_events_per_producer_is_allowed():
    with mpk_log() as log:
        g = _fan_out_graph(8).build()
    assert g.coarsened == [] and not any("coarsened" in m for m in log)
    assert len(task(g, 0).triggers) == 8                 # at the cap, not over it
    assert all(g.events[task(g, 2, i).event].num_triggers == 2 for i in range(8))


def test_barrier_coarsening_over_eight_triggers():
    with mpk_log() as log:
        g = _fan_out_graph(16).build()                   # L0(0) would trigger 16 events
    assert g.coarsened == ["elementwise_add_2"]
    barrier = {task(g, 2, i).event for i in range(16)}
    assert len(barrier) == 1
    ev = g.events[barrier.pop()]
    assert ev.num_triggers == 17                         # L0(0) and all 16 L1 tasks
    assert producers(g, task(g, 2, 5)) == {lbl(g, 0)} | {lbl(g, 1, i) for i in range(16)}
    assert all(len(t.triggers) <= graph_mod.MAX_TRIGGERS for t in g.tasks[1:])
    msg = next(m for m in log if "coarsened" in m)
    assert "layer 'elementwise_add_2'" in msg and "16 dependency sets" in msg
    assert "more than 8 events" in msg and "one barrier event over 17 tasks" in msg, msg


def test_coarsened_layer_is_one_range_in_grid_order():
    n = Net()
    x, y, x2, v, z = n.t("x", 32), n.t("y", 32), n.t("x2", 32), n.t("v", 32), n.t("z", 32)
    n.copy(x, y, (1, 1, 1))                  # L0(0) writes all of y
    n.copy(x2, v, (16, 1, 1))                # L1(i) writes v rows [2i, 2i+2)
    n.add(y, v, z, (16, 2, 1))               # L2(i, j): set {L0(0), L1(i)}, shared by j = 0, 1
    g = n.build()
    # 16 sets: L2 becomes one barrier, whose 32 waiters are again in plain grid order (not in pairs)
    assert g.coarsened == ["elementwise_add_2"]
    l2 = g.tasks[18:]
    assert [t.coord for t in l2] == [(i, j, 0) for j in range(2) for i in range(16)]
    ev = g.events[l2[0].event]
    assert (ev.first_task_id, ev.last_task_id, ev.num_triggers) == (18, 50, 17) and len(g.events) == 3
    assert producers(g, l2[-1]) == {lbl(g, 0)} | {lbl(g, 1, i) for i in range(16)}


def _consumer_layers(count: int):
    """L0(0) writes all of y; then `count` one-task layers each read all of y: set {L0(0)} each."""
    n = Net()
    x, y = n.t("x"), n.t("y")
    n.copy(x, y, (1, 1, 1))
    for i in range(count):
        n.copy(y, n.t(f"out{i}"), (1, 1, 1))
    return n


def test_a_task_feeds_at_most_eight_consumer_layers():
    # one event per consumer layer: eight layers are eight triggers, at the cap
    g = _consumer_layers(8).build()
    assert task(g, 0).triggers == list(range(1, 9)) and g.coarsened == []
    # a ninth cannot be coarsened away (each layer already waits on one event)
    with pytest.raises(GraphError) as e:
        _consumer_layers(9).build()
    assert str(e.value) == (
        "task elementwise_add_0(0, 0, 0) would trigger 9 events (cap 8) even with one barrier per consumer "
        "layer: layers " + ", ".join(f"'elementwise_add_{i}'" for i in range(1, 10)) + " each wait on it "
        "through their own event (events are per layer); split its consumers differently, e.g. let some "
        "layers read a copy of its output (an identity layer)")


# ---- the verifier rejects hand-mutated graphs ---------------------------------------------------

def _chain(layers=3):
    """L0 -> L1 -> ... each a one-task copy: task i + 1 waits on event i (triggered by task i)."""
    n = Net()
    ts = [n.t(f"t{i}", 4, 4) for i in range(layers + 1)]
    for i in range(layers):
        n.copy(ts[i], ts[i + 1], (1, 1, 1))
    return n.build()


def test_verify_rejects_a_cycle():
    g = _chain(3)
    t1, t2 = g.tasks[1], g.tasks[2]
    t1.event = t2.triggers[0]           # task 1 now also waits for task 2, which waits for task 1
    with pytest.raises(GraphError) as e:
        graph_mod.verify(g)
    msg = str(e.value)
    assert msg.startswith("cycle in the task graph: ") and t1.label in msg and t2.label in msg, msg


def test_verify_rejects_a_wrong_trigger_count():
    g = _chain(2)
    g.events[1].num_triggers += 1
    with pytest.raises(GraphError) as e:
        graph_mod.verify(g)
    assert str(e.value) == ("event 1 (launch) has num_triggers=2 but 1 tasks trigger it: "
                            "elementwise_add_0(0, 0, 0)")


def test_verify_rejects_a_wrong_end_count():
    g = _chain(2)
    g.events[-1].num_triggers = 0
    with pytest.raises(GraphError, match=r"event 2 \(end_of_task_graph\) has num_triggers=0 but 1 tasks"):
        graph_mod.verify(g)


def test_verify_rejects_an_uncovered_read():
    n = Net()
    x, y, z = n.t("x", 4, 4), n.t("y", 4, 4), n.t("z", 4, 4)
    n.copy(x, y, (2, 1, 1))             # L0(0) rows [0,2), L0(1) rows [2,4)
    n.copy(y, z, (1, 1, 1))             # L1(0) waits on one event triggered by both
    g = n.build()
    join, end = task(g, 1).event, g.end_event
    # drop L0(1) from the join event, keeping every count consistent: it becomes a leaf
    task(g, 0, 1).triggers = [end]
    g.events[join].num_triggers -= 1
    g.events[end].num_triggers += 1
    with pytest.raises(GraphError) as e:
        graph_mod.verify(g)
    assert str(e.value) == ("task elementwise_add_1(0, 0, 0) reads 'y' elements (2, 0)..(4, 4) written by "
                            f"task elementwise_add_0(1, 0, 0), but its event {join} does not wait for a "
                            "writer of them (missing dependency)")


def test_verify_rejects_a_missing_write_after_read():
    n = Net()
    a, b, c = n.t("a", 2, 2), n.t("b", 2, 2), n.t("c", 2, 2)
    n.copy(a, b, (1, 1, 1))             # L0 reads a
    n.copy(c, a, (1, 1, 1))             # L1 overwrites a: must wait for L0
    g = n.build()
    reader, writer = task(g, 0), task(g, 1)
    # L0 triggers END instead of L1's event, keeping every count consistent
    reader.triggers = [g.end_event]
    g.events[writer.event].num_triggers -= 1
    g.events[g.end_event].num_triggers += 1
    writer.event = -1 if g.events[writer.event].num_triggers == 0 else writer.event
    with pytest.raises(GraphError) as e:
        graph_mod.verify(g)
    assert str(e.value) == ("task elementwise_add_1(0, 0, 0) overwrites 'a' elements that task "
                            "elementwise_add_0(0, 0, 0) "
                            f"reads earlier, but its event {writer.event} does not wait for it (missing "
                            "write-after-read dependency)")


def test_verify_rejects_a_waiter_before_its_producer():
    n = Net()
    x, y, z, a, b = (n.t(s, 4, 4) for s in "xyzab")
    n.copy(x, y, (1, 1, 1))             # task 1
    n.copy(y, z, (1, 1, 1))             # task 2 waits on event 1 (triggered by task 1)
    n.copy(a, b, (1, 1, 1))             # task 3: independent leaf
    g = n.build()
    # task 3 triggers event 1 instead of END: no cycle, but waiter 2 < producer 3
    g.tasks[3].triggers = [1]
    g.events[1].num_triggers += 1
    g.events[-1].num_triggers -= 1
    with pytest.raises(GraphError) as e:
        graph_mod.verify(g)
    assert str(e.value) == ("event 1: trigger task elementwise_add_2(0, 0, 0) (id 3) does not come before "
                            "waiter elementwise_add_1(0, 0, 0) (id 2); ids must be topological")


def _swap_ids(g, a: int, b: int) -> None:
    """Exchange the ids of tasks a and b, keeping every event's waiters list true."""
    ta, tb = g.tasks[a], g.tasks[b]
    g.tasks[a], g.tasks[b] = tb, ta
    ta.id, tb.id = b, a
    for e in g.events:
        e.waiters = sorted(b if w == a else a if w == b else w for w in e.waiters)


def test_verify_rejects_an_event_whose_waiters_are_not_one_range():
    n = Net()
    x, y, z = n.t("x", 4, 4), n.t("y", 4, 4), n.t("z", 4, 4)
    n.pk.identity_layer(input=x, output=y, grid_dim=(2, 1, 1), block_dim=BLOCK)
    n.pk.identity_layer(input=y, output=z, grid_dim=(2, 2, 1), block_dim=BLOCK)
    g = n.build()
    # an identity's grid.x splits columns, grid.y rows: L1(x, y) waits for L0(x), the column tile it
    # reads. Numbered (0,0) (0,1) | (1,0) (1,1): events 1 = [3, 5), 2 = [5, 7). Back in plain grid
    # order, the old numbering, event 1's waiters 3, 5 straddle task 4 of event 2 (the dependencies
    # stay right: only the ranges break).
    assert [t.coord for t in g.tasks[3:]] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    _swap_ids(g, 4, 5)
    with pytest.raises(GraphError) as e:
        graph_mod.verify(g)
    assert str(e.value) == ("event 1: waiters are tasks 3, 5 but its range [3, 6) also holds task 4 = "
                            "'identity_1'(1, 0, 0), which waits on event 2")
    # a waiters list that is one range but not the tasks waiting: the range the runtime gets is wrong
    g = n.build()
    g.events[1].waiters = [3]
    with pytest.raises(GraphError) as e:
        graph_mod.verify(g)
    assert str(e.value) == ("event 1 (launch) lists waiters 3, range [3, 4), but the tasks waiting on it "
                            "are 3, 4")


def test_verify_rejects_a_task_whose_id_is_not_its_position():
    g = _chain(2)
    g.tasks[2].id = 5
    with pytest.raises(GraphError, match=r"task elementwise_add_1\(0, 0, 0\) is at position 2 of the task "
                                         r"list but has id 5"):
        graph_mod.verify(g)


def test_verify_rejects_a_leaf_without_end_trigger():
    g = _chain(2)
    g.tasks[2].triggers = []
    g.events[-1].num_triggers = 0
    with pytest.raises(GraphError, match=r"task elementwise_add_1\(0, 0, 0\) triggers nothing: a leaf must "
                                         r"trigger END_OF_TASK_GRAPH"):
        graph_mod.verify(g)


def test_verify_rejects_waiting_on_end():
    g = _chain(2)
    g.tasks[2].event = g.end_event
    with pytest.raises(GraphError, match=r"task elementwise_add_1\(0, 0, 0\) waits on event 2, which no "
                                         r"task may"):
        graph_mod.verify(g)


def test_in_place_is_allowed_but_a_race_within_a_layer_is_not():
    n = Net()
    x, y = n.t("x"), n.t("y")
    n.add(x, y, x, (2, 1, 1))           # in place, task by task: allowed (each task reads its own tile)
    n.build()
    n = Net()
    x, y = n.t("x"), n.t("y")
    n.copy(x, x, (2, 1, 1))
    n.build()
    # a task reading rows another task of the same layer writes is a race
    n = Net()
    x, y = n.t("x", 8, 8), n.t("y", 8, 8)
    # (tensor_init reads its dummy_input whole when grid.x is 1, while grid.y splits what it zeroes;
    # PersistentKernel refuses that aliasing up front, check_aliasing: the verifier must refuse it too)
    n.pk.layers.append(tensor_init.tensor_init_layer(n.pk, "tensor_init_0", x, x, y, (1, 2, 1), BLOCK))
    with pytest.raises(GraphError, match=r"layer 'tensor_init_0': task \(0, 0, 0\) reads elements that "
                                         r"task \(0, 1, 0\) of the same layer writes \(a race\)"):
        n.build(verify=False)


# ---- scale ------------------------------------------------------------------------------------

def test_100k_tasks_build_and_verify():
    rows = 50_000
    n = Net()
    x, y, z = n.t("x", rows, 2), n.t("y", rows, 2), n.t("z", rows, 2)
    n.copy(x, y, (rows, 1, 1))              # 50k tasks, one row each
    n.copy(y, z, (rows // 2, 2, 1))         # 50k tasks of 2 rows x 1 column: two producers each
    t0 = time.perf_counter()
    g = graph_mod.build(n.pk.layers)
    t1 = time.perf_counter()
    graph_mod.verify(g)
    t2 = time.perf_counter()
    print(f"\nTIMING graph of {len(g.tasks) - 1} tasks, {len(g.events)} events: build {t1 - t0:.2f} s, "
          f"verify {t2 - t1:.2f} s, total {t2 - t0:.2f} s (target about 2 s: docs/dependencies.md)")
    assert len(g.tasks) == 100_001
    # L1 task (i, j) reads rows 2i, 2i+1: set {L0(2i), L0(2i+1)}, shared by j = 0, 1, which get
    # consecutive ids: one event per pair, launching the range [rows + 1 + 2i, rows + 3 + 2i)
    assert len(g.events) == 2 + rows // 2
    assert [t.coord for t in g.tasks[rows + 1:rows + 5]] == [(0, 0, 0), (0, 1, 0), (1, 0, 0), (1, 1, 0)]
    assert (g.events[-2].first_task_id, g.events[-2].last_task_id) == (2 * rows - 1, 2 * rows + 1)
    last = g.tasks[-1]
    assert last.coord == (rows // 2 - 1, 1, 0)
    assert producers(g, last) == {f"elementwise_add_0({rows - k}, 0, 0)" for k in (2, 1)}
    assert t2 - t0 < 30, "graph build + verify of 100k tasks took over 30 s"
