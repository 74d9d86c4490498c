"""scripts/parse_task_graph.py and display_task_graph.py on a real task_graph_rank0.json."""
import os
import subprocess
import sys

import torch

from mirage.mpk import inspect
from mirage.mpk.persistent_kernel import PersistentKernel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BLOCK = (128, 1, 1)


def write_graph(tmp_path) -> str:
    """rmsnorm (grid 4) -> linear (grid 2) -> elementwise add (grid 4): critical path of 3 tasks."""
    pk = PersistentKernel(test_mode=True)
    x, w = pk.attach_input(torch.randn(4, 8), name="x"), pk.attach_input(torch.randn(8), name="w")
    W, r = pk.attach_input(torch.randn(6, 8), name="W"), pk.attach_input(torch.randn(4, 6), name="r")
    y = pk.new_tensor((4, 8), dtype=torch.float32, name="y")
    z = pk.new_tensor((4, 6), dtype=torch.float32, name="z")
    out = pk.attach_input(torch.zeros(4, 6), name="out")
    pk.rmsnorm_layer(input=x, weight=w, output=y, grid_dim=(4, 1, 1), block_dim=BLOCK)
    pk.linear_layer(input=y, weight=W, output=z, grid_dim=(2, 1, 1), block_dim=BLOCK)
    pk.elementwise_add_layer(input_a=z, input_b=r, output=out, grid_dim=(4, 1, 1), block_dim=BLOCK)
    pk.compile(output_dir=str(tmp_path))
    pk.finalize()
    return pk.output_files[1]


def test_parse_task_graph(tmp_path):
    path = write_graph(tmp_path)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "parse_task_graph.py"), path],
                         capture_output=True, text=True, check=True).stdout
    print(out)
    assert ": 10 tasks," in out
    assert "layer rmsnorm_0: 4 tasks" in out and "layer linear_1: 2 tasks" in out
    assert "max event fan-in 4" in out                # each linear task waits on all 4 rmsnorm rows
    assert "critical path: 3 tasks: rmsnorm_0(0, 0, 0) -> linear_1(0, 0, 0) -> elementwise_add_2" in out
    assert len(inspect.critical_path(inspect.load(path))) == 3


def test_display_task_graph(tmp_path):
    path = write_graph(tmp_path)
    out = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "display_task_graph.py"), path],
                         capture_output=True, text=True, check=True).stdout
    dot = open(path[:-5] + ".dot").read()
    print(out)
    assert dot.count("subgraph") == 3 and dot.count(" -> ") == 4 * 2 + 4 * 2   # every wait, by event
    assert 'label="rmsnorm_0"' in dot


def test_inspect_refuses_files_that_are_not_task_graphs(tmp_path):
    """A binary file, other JSON and a truncated graph: one line saying so, exit 2, no traceback."""
    graph = write_graph(tmp_path)
    cases = {"module.so": b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)),
             "config.json": b'{"mode": "offline", "world_size": 1}',
             "tasks_without_fields.json": b'{"all_tasks": [{"task_id": 0}], "all_events": [], '
                                          b'"first_tasks": []}',
             "truncated.json": open(graph, "rb").read()[:200]}
    for name, data in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        cmds = [[sys.executable, "-m", "mirage.mpk", "inspect", str(path)]]
        if name == "config.json":      # the scripts share inspect.load: one case each is enough
            cmds += [[sys.executable, os.path.join(ROOT, "scripts", f"{s}_task_graph.py"), str(path)]
                     for s in ("parse", "display")]
        for cmd in cmds:
            proc = subprocess.run(cmd, capture_output=True, text=True)
            print(f"{name}: exit {proc.returncode}: {proc.stderr.strip()}")
            assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
            assert f"{path} is not a task graph" in proc.stderr, proc.stderr
    missing = subprocess.run([sys.executable, "-m", "mirage.mpk", "inspect", str(tmp_path / "nope.json")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "No such file" in missing.stderr and "Traceback" not in missing.stderr


def test_inspect_an_output_dir(tmp_path):
    """`inspect <output_dir>`: the kept .cu (headers, variants), the graph, the metadata, the traces."""
    write_graph(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "mirage.mpk", "inspect", str(tmp_path)], capture_output=True,
                          text=True)
    print(proc.stdout + proc.stderr)
    assert proc.returncode == 0
    out = proc.stdout
    assert f"{tmp_path}: 1 rank(s) (0)" in out
    assert "rank 0 test_rank0.cu:" in out and "tasks/rmsnorm.cuh" in out and "3 variant(s): " in out
    assert "mpk::linear_task<float>" in out and "rank 0 task_graph_rank0.json: 10 tasks" in out
    assert "rank 0 kernel_metadata_rank0.json: backend cpu" in out and "traces: none" in out
