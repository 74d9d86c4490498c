"""Every layer test file is one N-rank job under `mpirun -n N` (README "Multi-rank", issue 12).

    mpirun -n N python tests/runtime_python/<layer>/test_<layer>_testmode.py

runs every case of the file on every rank through testing.run_cases_as_script, with the tensor
parallelism the layer module declares (`TP` in mirage/mpk/layers/<layer>.py). Here every layer
file found on disk runs in a 2-rank and in a 4-rank job: one `mpiexec -n N` job per N runs the files
one after another, each as its own `__main__` (multirank_layer_files.py: a rank's torch import, 2.5 s
of CPU, was more than half of a one-file job), and one file per tensor-parallelism kind is also
launched on its own, the literal `mpiexec -n 4 python FILE` (testing.mpirun, with a timeout). For
every layer file and every rank r the output must show:

- `[rank r] MULTIRANK <layer>: N ranks, tensor parallelism '<TP>'` and `[rank r] All <layer>
  test-mode cases PASS`, every `[rank r] EVIDENCE` line PASS (the rank's shard against the matching
  slice of the unsharded float64 reference);
- a split layer (column / row): SHARDED lines whose local shape is smaller than the global one
  on the split dim; a replicated result (replicated, row after its allreduce, reduce): IDENTICAL
  lines, the same sha256 on all N ranks;
- its own files in each case's directory under MPK_OUTPUT_DIR (one per case label): test_rank{r}.cu,
  task_graph_rank{r}.json and kernel_metadata_rank{r}.json naming rank r of world_size N, beside the
  other ranks' of the same case;
- whatever the file adds (`check_mpirun_output(out, ranks)`, the allreduce's launch counts).

Negative control: MPK_TEST_WRONG_SHARD_RANK=1 makes rank 1 give its linear kernel rank 0's rows
of W (testing.World.shard; the reference slice stays rank 1's): the job fails, promptly, with rank
1's mismatch message, and rank 0 reports no failure of its own; in a job over several files the same
failure ends the job inside linear's file, whose lines name it, the next file never reached.
"""
import ast
import json
import os
import re
import time

import pytest

from mirage.mpk import inspect, testing

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
LAYERS = sorted(d for d in os.listdir(ROOT) if os.path.isfile(os.path.join(ROOT, d, f"test_{d}_testmode.py")))
TIMEOUT_S = 180
SHARDED = re.compile(r"SHARDED .* tp=(\w+) (\w+) (\([\d, ]+\)) -> (\([\d, ]+\)) \(dim (\d+):")


def layer_file(layer: str) -> str:
    return os.path.join(ROOT, layer, f"test_{layer}_testmode.py")


def test_every_layer_folder_is_launched():
    one_per_tp_kind = {"rmsnorm", "linear", "linear_with_residual", "allreduce"}
    assert len(LAYERS) >= 8 and one_per_tp_kind <= set(LAYERS), LAYERS


def check_rank(out: str, layer: str, ranks: int, r: int, tp: str) -> tuple[int, int]:
    """One rank's lines; returns (SHARDED, IDENTICAL) line counts."""
    assert testing.rank_lines(out, r, f"MULTIRANK {layer}: {ranks} ranks, tensor parallelism '{tp}'"), \
        f"rank {r} did not start as one of {ranks} ranks"
    assert testing.rank_lines(out, r, f"All {layer} test-mode cases PASS"), f"rank {r} did not finish"
    evidence = testing.rank_lines(out, r, "EVIDENCE ")
    assert evidence and all(line.endswith(" PASS") for line in evidence), f"rank {r}: {evidence}"
    files = testing.rank_lines(out, r, "generated code and task graph: ")
    assert files and f"test_rank{r}.cu" in files[0] and f"task_graph_rank{r}.json" in files[0], files
    sharded = testing.rank_lines(out, r, "SHARDED ")
    for line in sharded:
        kind, role, full, local, dim = SHARDED.search(line).groups()
        full, local, dim = ast.literal_eval(full), ast.literal_eval(local), int(dim)
        assert kind == tp and local[dim] < full[dim] and line.endswith(" PASS"), line
    identical = testing.rank_lines(out, r, "IDENTICAL ")
    assert all(line.endswith(f"on all {ranks} rank(s) PASS") for line in identical), identical
    return len(sharded), len(identical)


JOBS = [(layer, ranks) for ranks in (2, 4) for layer in LAYERS]   # every folder as 2 and as 4 ranks
ALONE = ["allreduce", "linear", "linear_with_residual", "rmsnorm"]    # one per TP kind, as their own job
DRIVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multirank_layer_files.py")
_LAYERFILE = re.compile(r"^\[rank (\d+)\] LAYERFILE (BEGIN|END) (\w+)(?: ([\d.]+))?$")


def sections(out: str) -> dict[str, tuple[str, float | None]]:
    """{layer: (its lines of the combined job, every rank's; the slowest rank's seconds or None if
    some rank did not end it)}: a rank's line belongs to the file that rank was running."""
    lines: dict[str, list[str]] = {}
    seconds: dict[str, dict[int, float]] = {}
    current: dict[int, str] = {}
    for line in out.splitlines():
        if (m := _LAYERFILE.match(line)):
            rank, layer = int(m[1]), m[3]
            current[rank] = layer if m[2] == "BEGIN" else None
            if m[2] == "END":
                seconds.setdefault(layer, {})[rank] = float(m[4])
            continue
        if (m := re.match(r"^\[rank (\d+)\] ", line)) and current.get(int(m[1])):
            lines.setdefault(current[int(m[1])], []).append(line)
    return {layer: ("\n".join(ls), max(seconds[layer].values()) if layer in seconds else None)
            for layer, ls in lines.items()}


def layers_selected(items, ranks: int) -> list[str]:
    """The layer files the selected tests of this file need in the `ranks`-rank job: every one when the
    test of the whole job is selected, else those of the selected per-layer tests (`-k gelu_tanh_mul`
    runs that layer's jobs only, not the other layers')."""
    mine = [i for i in items if i.nodeid.split("::")[0].endswith(os.path.basename(__file__))
            and getattr(i, "callspec", None) and i.callspec.params.get("ranks") == ranks]
    if any(i.originalname == "test_the_job_over_every_layer_file_exits_cleanly" for i in mine):
        return LAYERS
    wanted = {i.callspec.params["layer"] for i in mine if "layer" in i.callspec.params}
    return [layer for layer in LAYERS if layer in wanted]


@pytest.fixture(scope="module")
def combined(tmp_path_factory, request):
    """ranks -> (exit code, output, output dir) of the one job running the layer files the selected tests
    need (every one in a whole run: layers_selected), started when a test first asks for it."""
    jobs = {}

    def job(ranks: int):
        if ranks not in jobs:
            files = layers_selected(request.session.items, ranks)
            out_dir = tmp_path_factory.mktemp(f"n{ranks}")
            code, out = testing.mpirun(DRIVER, ranks, timeout=TIMEOUT_S * max(len(files), 4) / 4,
                                       args=(out_dir, *map(layer_file, files)),
                                       env={"MPK_LOG_LEVEL": "WARNING"})
            jobs[ranks] = code, out, out_dir
        return jobs[ranks]
    return job


@pytest.mark.parametrize("layer,ranks", JOBS, ids=[f"{layer}-n{ranks}" for layer, ranks in JOBS])
def test_layer_file_runs_as_one_multirank_job(layer, ranks, combined):
    code, out, out_dir = combined(ranks)
    part, elapsed = sections(out).get(layer, ("", None))
    if elapsed is None:
        tail = "\n".join(out.splitlines()[-60:])
        raise AssertionError(f"the {ranks}-rank job over every layer file (exit {code}) did not finish "
                             f"{layer}'s file on every rank; its lines:\n{part[-6000:]}\n"
                             f"the job's last lines:\n{tail}")
    check_layer_output(layer, ranks, part, out_dir / layer, elapsed)


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_job_over_every_layer_file_exits_cleanly(ranks, combined):
    code, out, _ = combined(ranks)
    done = [layer for layer, (_, seconds) in sections(out).items() if seconds is not None]
    assert code == 0 and done == LAYERS, f"exit {code}; files finished on every rank: {done} of {LAYERS}"


@pytest.mark.parametrize("layer", ALONE)
def test_layer_file_alone_is_a_multirank_job(layer, tmp_path):
    """The literal command, `mpiexec -n 4 python FILE`, for one file per tensor-parallelism kind."""
    t0 = time.perf_counter()
    code, out = testing.mpirun(layer_file(layer), 4, timeout=TIMEOUT_S,
                               env={"MPK_OUTPUT_DIR": str(tmp_path), "MPK_LOG_LEVEL": "WARNING"})
    assert code == 0, f"mpirun -n 4 {layer} failed (exit {code}); output above"
    check_layer_output(layer, 4, out, tmp_path, time.perf_counter() - t0)


def check_layer_output(layer: str, ranks: int, out: str, tmp_path, elapsed: float) -> None:
    """One layer file's output of a `ranks`-rank job and the case directories it wrote under tmp_path."""
    tp = testing.layer_tp(layer)
    split = bool(testing.TP_KINDS[tp])
    for r in range(ranks):
        n_sharded, n_identical = check_rank(out, layer, ranks, r, tp)
        assert (n_sharded > 0) == split, f"rank {r}: {n_sharded} SHARDED lines for TP '{tp}'"
        replicates = tp not in ("column", "heads")        # some output the same on every rank
        assert (n_identical > 0) == replicates, f"rank {r}: {n_identical} IDENTICAL lines for TP '{tp}'"
    # each case its own directory (run_cases_as_script), holding every rank's files of that case only
    case_dirs = sorted(d for d in tmp_path.iterdir() if d.is_dir())
    assert case_dirs and not [f for f in tmp_path.iterdir() if f.is_file()], sorted(os.listdir(tmp_path))
    for d in case_dirs:
        for r in range(ranks):
            for name in (f"test_rank{r}.cu", f"task_graph_rank{r}.json"):
                assert (d / name).is_file(), f"rank {r} wrote no {name} in {d}: {sorted(os.listdir(d))}"
            with open(d / f"kernel_metadata_rank{r}.json") as f:
                meta = json.load(f)
            assert (meta["rank"], meta["world_size"]) == (r, ranks), meta
        assert not os.path.exists(d / f"test_rank{ranks}.cu")
        # negative control of inspect's mixed-run check: one job's ranks, shards and all, are one run
        assert f"{d}: {ranks} rank(s)" in inspect.output_dir_summary(str(d))
    last = testing.rank_lines(out, 0, "generated code and task graph: ")[0].split(": ", 1)[1].split(", ")
    assert os.path.dirname(last[0]) in map(str, case_dirs), last     # where the last lines say they went
    assert testing.rank_lines(out, 0, f"generated code of the {len(case_dirs)} case(s): one directory each "
                                      f"under {tmp_path}/"), out[-3000:]
    module = testing.load_reference(layer_file(layer), name=f"test_{layer}_testmode")
    if hasattr(module, "check_mpirun_output"):
        module.check_mpirun_output(out, ranks)
    print(f"MULTIRANK {layer} -n {ranks}: TP '{tp}', every rank PASS in {elapsed:.1f} s")
    assert not any(line.startswith("[rank ") and "Traceback" in line for line in out.splitlines()), out


def test_a_rank_computing_a_wrong_shard_fails_the_job_with_its_message(tmp_path):
    t0 = time.perf_counter()
    code, out = testing.mpirun(layer_file("linear"), 2, timeout=60,
                               env={testing.WRONG_SHARD_ENV: "1", "MPK_OUTPUT_DIR": str(tmp_path),
                                    "MPK_LOG_LEVEL": "WARNING"})
    elapsed = time.perf_counter() - t0
    assert code not in (0, 124), f"exit {code}"
    first = "linear[bfloat16,8x256->96,grid=(6, 1),jitter=1,W=2,simt]"
    assert f"[rank 1] AssertionError: '{first}' is not close (bfloat16, (8, 48))!" in out
    assert "[rank 1] Mismatched elements: 384 / 384 (100.0%)" in out
    assert "[rank 1] uncaught AssertionError: calling MPI_Abort" in out
    assert "[rank 0] AssertionError" not in out and "[rank 0] Traceback" not in out, "rank 0's shard is right"
    assert "test-mode cases PASS" not in out
    assert elapsed < 30, f"the job took {elapsed:.1f} s to end"
    print(f"ENDED wrong shard on rank 1: exit {code} after {elapsed:.1f} s, with rank 1's message")


def test_a_failing_file_ends_the_job_over_several_files_naming_it(tmp_path):
    """Negative control of the job over several files: rank 1's wrong linear shard fails linear's file;
    the file before it finished, the one after is never reached, and linear's own lines say why."""
    files = [layer_file(x) for x in ("identity", "linear", "rmsnorm")]
    code, out = testing.mpirun(DRIVER, 2, timeout=120, args=(tmp_path, *files),
                               env={testing.WRONG_SHARD_ENV: "1", "MPK_LOG_LEVEL": "WARNING"})
    got = sections(out)
    assert code not in (0, 124), f"exit {code}"
    assert got["identity"][1] is not None and "rmsnorm" not in got, {k: v[1] for k, v in got.items()}
    part, seconds = got["linear"]
    assert seconds is None and "[rank 1] Mismatched elements: 384 / 384 (100.0%)" in part, part[-3000:]
    print(f"ENDED the 3-file job at linear (exit {code}): identity finished, rmsnorm not reached")
