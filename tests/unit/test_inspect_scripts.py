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


def one_layer(tmp_path, rows: int) -> str:
    """A one-layer kernel (rmsnorm over `rows` rows) kept in tmp_path: another run than write_graph's."""
    pk = PersistentKernel(test_mode=True)
    x, w = pk.attach_input(torch.randn(rows, 8), name="x"), pk.attach_input(torch.randn(8), name="w")
    out = pk.attach_input(torch.zeros(rows, 8), name="out")
    pk.rmsnorm_layer(input=x, weight=w, output=out, grid_dim=(1, 1, 1), block_dim=BLOCK)
    pk.compile(output_dir=str(tmp_path))
    pk.finalize()
    return str(tmp_path)


def inspect_dir(path) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "mirage.mpk", "inspect", str(path)], capture_output=True,
                          text=True)
    print(f"exit {proc.returncode}: {proc.stdout[:300]}{proc.stderr}")
    return proc


def test_inspect_refuses_a_dir_mixing_runs(tmp_path):
    """A stale rank (another run's files as rank 1, its metadata saying world_size 1), a rank's task graph
    replaced by another run's, and two ranks kept without metadata whose layers differ: each refused,
    naming the files; a one-run directory is not (negative control: test_inspect_an_output_dir)."""
    here, other = tmp_path / "run", tmp_path / "other"
    write_graph(here)
    one_layer(other, rows=4)
    for kind in ("test_rank{}.cu", "task_graph_rank{}.json", "kernel_metadata_rank{}.json"):
        (here / kind.format(1)).write_bytes((other / kind.format(0)).read_bytes())
    proc = inspect_dir(here)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip() == (
        f"inspect: {here} mixes files of different runs: ranks [0, 1] are present, but the metadata says "
        f"world_size 1; layers differ: kernel_metadata_rank0.json: rmsnorm_0 mpk::rmsnorm_task<float>, "
        f"linear_1 mpk::linear_task<float>, elementwise_add_2 mpk::elementwise_add_task<float>; "
        f"kernel_metadata_rank1.json: rmsnorm_0 mpk::rmsnorm_task<float>. Remove the stale files (or the "
        f"directory) and run again, or inspect one run's own directory"), proc.stderr

    replaced = tmp_path / "replaced"
    write_graph(replaced)
    (replaced / "task_graph_rank0.json").write_bytes((other / "task_graph_rank0.json").read_bytes())
    proc = inspect_dir(replaced)
    assert proc.returncode == 2
    assert "task_graph_rank0.json is not the file kernel_metadata_rank0.json describes (its graph_sha256 " \
           "differs)" in proc.stderr, proc.stderr

    bare = tmp_path / "bare"                 # as MPK writes them: no metadata, only the graphs
    bare.mkdir()
    (bare / "task_graph_rank0.json").write_bytes((here / "task_graph_rank0.json").read_bytes())
    (bare / "task_graph_rank1.json").write_bytes((other / "task_graph_rank0.json").read_bytes())
    proc = inspect_dir(bare)
    assert proc.returncode == 2 and "layers differ: task_graph_rank0.json: rmsnorm_0, linear_1, " \
                                    "elementwise_add_2; task_graph_rank1.json: rmsnorm_0" in proc.stderr


def test_inspect_warns_of_rank_files_written_far_apart(tmp_path):
    """Same layers, no metadata, but one graph an hour older: a warning line, not a refusal."""
    write_graph(tmp_path)
    for name in ("kernel_metadata_rank0.json", "mpk_module_rank0.so"):
        os.remove(tmp_path / name)
    stale = tmp_path / "task_graph_rank1.json"
    stale.write_bytes((tmp_path / "task_graph_rank0.json").read_bytes())
    os.utime(stale, (os.path.getmtime(stale) - 3600,) * 2)
    proc = inspect_dir(tmp_path)
    assert proc.returncode == 0
    assert proc.stdout.splitlines()[0].startswith("WARNING: task_graph_rank1.json is 3600 s older than "
                                                  "task_graph_rank0.json"), proc.stdout
