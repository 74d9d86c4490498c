"""Multi-rank pieces that need no MPI: symmetric tensors, allreduce shape rules, signal slots,
the no_signal fault's checks, where one rank's symmetric memory lives. (The runs themselves:
tests/runtime_python/allreduce and test_mode/test_multirank_failures.py, under mpirun.)"""
import types

import pytest
import torch

from mirage.mpk import dist
from mirage.mpk import graph as graph_mod
from mirage.mpk.errors import GraphError
from mirage.mpk.faults import Fault, from_env
from mirage.mpk.persistent_kernel import PersistentKernel
from mirage.mpk.tensor import NEW, SYMMETRIC

BLOCK = (128, 1, 1)


def kernel(**kw) -> PersistentKernel:
    return PersistentKernel(test_mode=True, num_workers=2, **kw)


def test_symmetric_io_categories():
    pk = kernel()
    f32 = torch.float32
    assert pk.new_tensor((1, 2, 4), dtype=f32, name="a", io_category="nvshmem_tensor").kind == SYMMETRIC
    assert pk.new_tensor((1, 2, 4), dtype=f32, name="b", io_category="symmetric_tensor").kind == SYMMETRIC
    assert pk.new_tensor((2, 4), dtype=f32, name="c").kind == NEW
    with pytest.raises(ValueError, match=r"io_category 'shared' is not one of .*'nvshmem_tensor' = "
                                         r"'symmetric_tensor'"):
        pk.new_tensor((2, 4), dtype=f32, name="d", io_category="shared")


def test_one_rank_symmetric_memory_is_plain_memory_on_the_kernel_device():
    """world_size 1 on CUDA: the symmetric buffer and the signal counters are the GPU's own memory, so the
    allreduce folder runs there (the kernel signals itself through the one-entry peer tables). The meta
    device stands in for the GPU here: only where the storage lives is checked."""
    pk = kernel()
    buf = pk.new_tensor((1, 2, 8), dtype=torch.float32, name="buf", io_category="nvshmem_tensor")
    heap = dist.SymmetricHeap(None, 1, 0, torch.device("meta"))
    heap.allocate([buf], num_signal_slots=3)
    assert buf.data.device.type == "meta" and buf.data.shape == (1, 2, 8)
    assert heap.signals[0].device.type == "meta" and heap.signals[0].shape == (3, 2)
    # several ranks on a GPU would need the peers' memory mapped: refused, saying what is missing
    two = types.SimpleNamespace(_table=lambda: [buf], device=torch.device("cuda", 0), world_size=2)
    with pytest.raises(NotImplementedError, match=r"cuda:0 at world_size=2: mapping the other ranks' device "
                                                  r"memory \(CUDA IPC or NVSHMEM\) is not implemented"):
        PersistentKernel._allocate_symmetric(two, types.SimpleNamespace(num_signal_slots=1), {})


def test_allreduce_rejects_a_plain_buffer_and_a_wrong_shape():
    pk = kernel()
    x = pk.attach_input(torch.ones(2, 8), name="x")
    y = pk.attach_input(torch.zeros(2, 8), name="y")
    plain = pk.new_tensor((1, 2, 8), dtype=torch.float32, name="plain")
    wrong = pk.new_tensor((2, 2, 8), dtype=torch.float32, name="wrong", io_category="nvshmem_tensor")
    with pytest.raises(ValueError, match=r"buffer 'plain' is a new tensor; every rank writes it, so allocate "
                                         r"it with new_tensor\(\.\.\., io_category='nvshmem_tensor'\)"):
        pk.allreduce_layer(input=x, buffer=plain, output=y, grid_dim=(2, 1, 1), block_dim=BLOCK)
    with pytest.raises(ValueError, match=r"buffer 'wrong' is \(2, 2, 8\), expected \(world_size, batch, "
                                         r"hidden\) = \(1, 2, 8\)"):
        pk.allreduce_layer(input=x, buffer=wrong, output=y, grid_dim=(2, 1, 1), block_dim=BLOCK)
    buf = pk.new_tensor((1, 2, 8), dtype=torch.float32, name="buf", io_category="nvshmem_tensor")
    with pytest.raises(ValueError, match=r"dim 1 \(8\) is not divisible by grid_dim.x=3"):
        pk.allreduce_layer(input=x, buffer=buf, output=y, grid_dim=(3, 1, 1), block_dim=BLOCK)


def shared_buffer_graph(grid_a: int, grid_b: int):
    pk = kernel()
    x = pk.attach_input(torch.ones(2, 12), name="x")
    mid = pk.new_tensor((2, 12), dtype=torch.float32, name="mid")
    out = pk.attach_input(torch.zeros(2, 12), name="out")
    buf = pk.new_tensor((1, 2, 12), dtype=torch.float32, name="buf", io_category="nvshmem_tensor")
    pk.allreduce_layer(input=x, buffer=buf, output=mid, grid_dim=(grid_a, 1, 1), block_dim=BLOCK)
    pk.allreduce_layer(input=mid, buffer=buf, output=out, grid_dim=(grid_b, 1, 1), block_dim=BLOCK)
    return graph_mod.build(pk.layers)


def test_layers_sharing_a_buffer_share_its_slots_in_program_order():
    g = shared_buffer_graph(3, 3)
    graph_mod.verify(g)
    assert g.num_signal_slots == 3
    first, second = g.tasks[1:4], g.tasks[4:7]
    assert [t.signal for t in first] == [(0, 0, 2), (1, 0, 2), (2, 0, 2)]
    assert [t.signal for t in second] == [(0, 1, 2), (1, 1, 2), (2, 1, 2)]
    # the second layer's task waits for the first's (its input, and the buffer tile: a write)
    assert all(t.deps == {t.id - 3} for t in second)
    # the buffer is never a declared write: not poisoned, not checked for unwritten elements
    assert all(not tile.declared for t in g.tasks[1:] for tile in t.outputs if tile.role == "buffer")


def test_layers_sharing_a_buffer_must_split_it_alike():
    with pytest.raises(GraphError, match=r"layers sharing a symmetric buffer must split it the same way"):
        shared_buffer_graph(3, 2)


def test_no_signal_fault_needs_a_cross_rank_layer_and_a_rank_in_range():
    pk = kernel(fault=Fault("no_signal", "identity_0"))
    a = pk.attach_input(torch.ones(2, 2), name="a")
    b = pk.attach_input(torch.zeros(2, 2), name="b")
    pk.identity_layer(input=a, output=b, grid_dim=(1, 1, 1), block_dim=BLOCK)
    with pytest.raises(ValueError, match=r"fault no_signal: layer 'identity_0' signals no other rank"):
        pk.compile()
    with pytest.raises(ValueError, match=r"fault rank 3 is outside 0..0"):
        kernel(fault=Fault("no_signal", "allreduce_0", rank=3))


def test_fault_env_carries_the_rank(monkeypatch):
    monkeypatch.setenv("MPK_FAULT", "no_signal:allreduce_2:1,0,0:0:0:2")
    assert from_env() == Fault("no_signal", "allreduce_2", (1, 0, 0), 0.0, 0, 2)
    monkeypatch.setenv("MPK_FAULT", "skip:rmsnorm_0:1")
    assert from_env().rank is None
