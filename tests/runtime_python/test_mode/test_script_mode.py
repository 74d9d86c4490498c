"""A layer test file run as a script (testing.run_cases_as_script): `--list` prints the case labels,
`-k SUBSTRING` runs only the matching cases, each case writes its own directory under
MPK_OUTPUT_DIR, cleared of its stale files first (another run's rank files made `inspect` report
ranks of two runs), and the last lines say where the files went.

Run: pytest tests/runtime_python/test_mode/test_script_mode.py -s
"""
import os
import subprocess
import sys

from mirage.mpk import testing
from mirage.mpk.testing import cases

HERE = os.path.dirname(os.path.abspath(__file__))
RMSNORM = os.path.join(HERE, "..", "rmsnorm", "test_rmsnorm_testmode.py")
ONE = "rmsnorm[float32,case=(1, 7, 1)]"            # the smallest case: one label, one directory
ONE_DIR = "rmsnorm_float32_case=_1_7_1"


def script(*args, env=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, RMSNORM, *args], capture_output=True, text=True,
                          env=dict(os.environ, MPK_LOG_LEVEL="WARNING", **(env or {})), timeout=300)
    print(f"$ {' '.join(args)} -> exit {proc.returncode}\n{proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    return proc


def test_list_prints_every_label_and_runs_nothing(tmp_path):
    proc = script("--list", env={"MPK_OUTPUT_DIR": str(tmp_path)})
    labels = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(labels) == 15 and ONE in labels, labels
    assert labels[-1] == "rmsnorm[float32,case=(6, 384, 3),{'eps': 0.001}]"
    assert os.listdir(tmp_path) == []


def test_k_runs_one_case_into_its_own_directory_without_stale_files(tmp_path):
    case_dir = tmp_path / ONE_DIR
    case_dir.mkdir()
    stale = ["task_graph_rank1.json", "test_rank3.cu", "test_rank0.cu", "notes.txt"]   # a 4-rank run's
    for name in stale:
        (case_dir / name).write_text("stale")
    proc = script("-k", ONE, env={"MPK_OUTPUT_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == [ONE_DIR], "only the chosen case ran"
    assert sorted(os.listdir(case_dir)) == ["kernel_metadata_rank0.json", "mpk_module_rank0.so",
                                            "task_graph_rank0.json", "test_rank0.cu"], "stale files removed"
    assert (case_dir / "test_rank0.cu").read_text() != "stale"
    last = proc.stdout.splitlines()[-3:]
    assert last == [
        f"generated code and task graph: {case_dir}/test_rank0.cu, {case_dir}/task_graph_rank0.json",
        f"generated code of the 1 case(s): one directory each under {tmp_path}/ (e.g. {case_dir}; "
        f"python -m mirage.mpk inspect <directory>)",
        f"All 1 rmsnorm test-mode case(s) matching -k '{ONE}' PASS"], last
    inspect = subprocess.run([sys.executable, "-m", "mirage.mpk", "inspect", str(case_dir)],
                             capture_output=True, text=True)
    assert inspect.returncode == 0 and f"{case_dir}: 1 rank(s) (0)" in inspect.stdout, inspect.stderr


def test_k_matching_nothing_fails_naming_the_way_out(tmp_path):
    proc = script("-k", "no such case", env={"MPK_OUTPUT_DIR": str(tmp_path)})
    assert proc.returncode == 1
    assert "rmsnorm: -k 'no such case' matches none of the 15 case labels; --list prints them" in proc.stderr


def test_each_rank_clears_only_what_no_other_rank_of_the_job_writes(tmp_path):
    """Under mpirun every rank clears the case directory while the others may already write it: rank r
    removes its own files; rank 0 also those of ranks the job lacks and files of no rank."""
    names = ["test_rank0.cu", "test_rank1.cu", "task_graph_rank1.json", "test_rank2.cu",
             "kernel_metadata_rank3.json", "README.txt"]
    for rank, kept in ((1, {"test_rank0.cu", "test_rank2.cu", "kernel_metadata_rank3.json", "README.txt"}),
                       (0, {"test_rank1.cu", "task_graph_rank1.json"})):
        for name in names:
            (tmp_path / name).write_text("stale")
        cases._clear_case_dir(str(tmp_path), testing.World(rank, 2))
        assert set(os.listdir(tmp_path)) == kept, (rank, sorted(os.listdir(tmp_path)))
        for name in os.listdir(tmp_path):
            os.remove(tmp_path / name)
