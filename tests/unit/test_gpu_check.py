"""The CUDA backend's build path and scripts/gpu_check.sh, on a machine without a GPU.

- build.flags("cuda") is nvcc for one arch (sm_90a on Hopper) with the static CUDA runtime;
- a module built ahead by nvcc is found again on a machine without nvcc (MPK_NVCC pointing nowhere,
  MPK_NVCC_IDENTITY naming the nvcc that built it: what gpu_check.sh sets on the GPU machine), and a
  source nobody built ahead is an MPKCompileError naming the missing nvcc and the way out;
- gpu_check.sh --dry-run runs every stage the CPU can (the executor stage's chain / fork / join graphs
  on the CPU backend, the failure stage's failing task then clean runs, their CUDA modules built with
  nvcc, the cache's size checked, every layer folder collected with MPK_TEST_DEVICE=cuda as the run mode
  loads it: its subset, MPK_GPU_SUBSET, at cc 90, each folder's selected count and estimated GPU seconds
  printed, their sum within LIMIT_LAYERS) and says SKIP(dry run: ...) for the GPU stages, so the script
  cannot rot; negative control: with broken kernel sources and a 1 s layers limit the same run fails and
  says which stages;
- gpu_check.sh without --dry-run where torch sees no GPU fails within seconds, naming why (a check that
  ran nothing on a GPU never says "0 failed"); its run-mode time limits sum to at most 10 minutes.
The GPU stages themselves run only where a GPU is: docs/runtime.md, "GPU check".
"""
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import torch

from mirage.mpk import build, testing
from mirage.mpk.errors import MPKCompileError

NVCC = shutil.which("nvcc")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = 'extern "C" int mpk_tiny(void) { return 7; }\n'
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")
# every layer folder, as gpu_check.sh finds them: each must get its own stage
LAYERS = sorted(os.path.basename(os.path.dirname(d)) for d in glob.glob(os.path.join(ROOT, "tests",
                "runtime_python", "*", "")) if os.path.basename(os.path.dirname(d)) != "test_mode")
RUN_LIMIT_S = 600       # the run mode's stage limits in all: a 10-minute window on a GPU machine


def test_cuda_flags_target_one_arch_with_the_static_runtime():
    fl = build.flags("cuda", True, "", target_cc=90)
    assert fl[:2] == ["-x", "cu"] and "-DMPK_BACKEND_CUDA" in fl and "-DMPK_TEST_MODE" in fl
    assert fl[fl.index("-cudart") + 1] == "static"
    assert "arch=compute_90a,code=[sm_90a,compute_90a]" in fl
    assert "arch=compute_80,code=[sm_80,compute_80]" in build.flags("cuda", False, "", target_cc=80)
    with pytest.raises(ValueError, match="compute-sanitizer"):
        build.flags("cuda", True, "address")
    with pytest.raises(ValueError, match="backend 'rocm'"):
        build.flags("rocm", True, "")


@needs_nvcc
def test_a_module_built_ahead_is_used_without_nvcc(tmp_path, monkeypatch):
    monkeypatch.setenv("MPK_CACHE_DIR", str(tmp_path))
    ahead = build.compile_module(TINY, "cuda", True, target_cc=90)
    assert not ahead.hit and ctypes.CDLL(ahead.path).mpk_tiny() == 7
    identity = build.compiler_identity(build.compiler_for("cuda"))
    monkeypatch.setenv("MPK_NVCC", "no-such-nvcc-mpk")
    monkeypatch.setenv("MPK_NVCC_IDENTITY", identity)
    again = build.compile_module(TINY, "cuda", True, target_cc=90)
    assert again.hit and again.path == ahead.path
    print(f"BUILT AHEAD {ahead.key[:16]} with nvcc, found again without it")
    missing = r"no-such-nvcc-mpk is not on PATH and the cache .* has no module for this source .*--prepare"
    with pytest.raises(MPKCompileError, match=missing):
        build.compile_module(TINY + "// never built\n", "cuda", True, target_cc=90)


def gpu_check(out, *args, **env) -> tuple[int, str, dict]:
    # PYTHONPATH: the run mode installs the project (pip -e) only where mirage.mpk does not import
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), *args],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "GPU_CHECK_OUT": str(out), **env,
                               "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")})
    print(proc.stdout + proc.stderr)
    with open(os.path.join(out, "summary.json")) as f:
        return proc.returncode, proc.stdout, json.load(f)


def dry_run(out, **env) -> tuple[int, str, dict]:
    return gpu_check(out, "--dry-run", **env)


def run_limits(out: str) -> int:
    """The run mode's time limits in all, from the line every mode prints first."""
    m = re.search(r"^run-mode time limits: .* = (\d+) s$", out, re.M)
    assert m, out
    return int(m.group(1))


@needs_nvcc
def test_gpu_check_dry_run_runs_every_stage_the_cpu_can(tmp_path):
    code, out, summary = dry_run(tmp_path)
    assert code == 0, out
    status = {s["name"]: s["status"] for s in summary["stages"]}
    stages = {"props": "PASS", "executor": "PASS", "failure": "PASS", "prepare-executor": "PASS",
              "prepare-failure": "PASS", "cache-size": "PASS",
              **{f"collect:{layer}": "PASS" for layer in LAYERS}, "layers-budget": "PASS",
              "layers": "SKIP(dry run: the layer tests need a GPU; each folder was collected on the CUDA "
                        "path above)",
              "sanitizers": "SKIP(dry run: compute-sanitizer needs a GPU)"}
    assert status == stages, status
    assert len(LAYERS) >= 9 and "allreduce" in LAYERS, LAYERS     # every folder reached, allreduce too
    for layer in LAYERS:    # each folder's subset was collected, not an empty folder passing
        log = (tmp_path / f"collect_{layer}.log").read_text()
        assert re.search(r"^\d+/\d+ tests? collected \(\d+ deselected\)", log, re.M), log
        assert "error" not in log.lower(), log
        # the subset at cc 90: test-mode cases too, no case of the 128-thread block (the device's is 256)
        assert "_testmode.py::" in log and "-cc80]" not in log, log
        m = re.search(rf"^collect:{layer} +PASS +[\d.]+  selected (\d+) tests \(\d+ skipped\), estimated "
                      rf"([\d.]+) s$", out, re.M)
        assert m and int(m.group(1)) > 0 and float(m.group(2)) > 0, out
    budget = re.search(r"^layers-budget +PASS +0  \d+ folders, estimated (\d+) s of (\d+) s", out, re.M)
    assert budget and int(budget.group(1)) <= int(budget.group(2)) == 310, out
    runs = [r for r in summary["results"] if r["stage"] == "executor"]
    want = {(g, w) for g in ("chain", "fork", "join") for w in (1, 3)}
    assert {(r["graph"], r["workers"]) for r in runs} >= want, runs
    assert all(r["exact"] and r["passes"] >= 2 for r in runs), runs
    failed = [r for r in summary["results"] if r["stage"] == "failure"]   # a task fails, then clean runs
    assert failed and all(r["ok"] for r in failed), failed
    built = [ln for ln in out.splitlines() if ln.startswith("built ahead: ")]
    assert built and int(built[0].split()[2]) >= 3, out     # the identity, join and failure graphs
    assert "(limit 64 MiB)" in built[0], built
    assert summary["mode"] == "dry-run" and summary["ran_on_gpu"] is False
    assert f"GPU CHECK (dry run: nothing ran on a GPU): {len(stages)} stages, 0 failed, 2 skipped" in out, out
    assert run_limits(out) <= RUN_LIMIT_S


def test_gpu_check_dry_run_fails_naming_the_stage(tmp_path):
    """Negative controls: kernel sources without the runtime, so no module builds; and a tree of two
    layer folders, one of which fails to collect on the CUDA path as allreduce's did (its module-level
    torch.get_default_device() makes a tensor on the default device, which a CPU-only torch refuses)."""
    broken = tmp_path / "csrc"
    broken.mkdir()
    layers = tmp_path / "layers"
    # (the default device as tests/conftest.py sets it, which pytest does not load outside the repository)
    bad = ("import os\n\nimport torch\n\ntorch.set_default_device(os.environ.get('MPK_TEST_DEVICE', 'cpu'))\n"
           "DEVICE = torch.get_default_device()\n\n\ndef test_ok():\n    pass\n")
    for name, body in (("good", "def test_ok():\n    pass\n"), ("bad", bad)):
        (layers / name).mkdir(parents=True)
        (layers / name / f"test_{name}.py").write_text(body)
    code, out, summary = dry_run(tmp_path / "out", MPK_CSRC_DIR=str(broken), GPU_CHECK_LAYER_ROOT=str(layers),
                                 GPU_CHECK_LIMIT_LAYERS="1")
    status = {s["name"]: s["status"] for s in summary["stages"]}
    assert code == 1 and status["executor"] == "FAIL(exit 1)", status
    assert status["collect:good"] == "PASS", status
    # a layers limit the folders' estimates cannot fit (each at least its process start)
    assert status["layers-budget"] == "FAIL(over 1s)", status
    if torch.cuda.is_available():       # there the bad folder collects too
        assert status["collect:bad"] == "PASS", status
        return
    assert status["collect:bad"] == "FAIL(exit 2)", status
    assert "Torch not compiled with CUDA enabled" in (tmp_path / "out" / "collect_bad.log").read_text()
    assert "GPU CHECK (dry run: nothing ran on a GPU): 11 stages, 6 failed: executor, failure, " \
           "prepare-executor, prepare-failure, collect:bad, layers-budget, 2 skipped" in out, out


@pytest.mark.skipif(torch.cuda.is_available(), reason="torch sees a GPU: the run mode would run the stages")
def test_gpu_check_without_a_gpu_fails_at_once_naming_why(tmp_path):
    """The run mode where torch sees no GPU: props, then the decision; every GPU stage fails with the
    reason, in seconds (nothing is built or run first), and the exit status is 1."""
    t0 = time.monotonic()
    code, out, summary = gpu_check(tmp_path)
    seconds = time.monotonic() - t0
    why = stages_module().no_gpu_reason()
    assert why, "torch sees no GPU here, so there must be a reason"
    status = {s["name"]: s["status"] for s in summary["stages"]}
    assert code == 1, out
    assert status["props"] == "PASS" and status["gpu"] == f"FAIL(no GPU: {why})", status
    assert status["executor"] == status["failure"] == status["layers"] == "FAIL(not run: no GPU)", status
    assert status["sanitizers"].startswith("FAIL(not run: no GPU"), status
    if shutil.which("compute-sanitizer") is None:       # a missing sanitizer is named too
        assert "compute-sanitizer not on PATH" in status["sanitizers"], status
    assert not any(s.startswith("SKIP") for s in status.values()), status
    assert summary["ran_on_gpu"] is False
    assert f"GPU CHECK (nothing ran on a GPU: no GPU: {why}): 6 stages, 5 failed: gpu, executor, failure, " \
           f"layers, sanitizers;" in out, out
    assert run_limits(out) <= RUN_LIMIT_S
    assert seconds < 60, f"the no-GPU run took {seconds:.0f} s: it must fail at once"


def stages_module():
    return testing.load_reference(os.path.join(ROOT, "scripts", "gpu_stages.py"), name="gpu_stages")


def test_no_gpu_reasons_name_the_cause(monkeypatch):
    """A CPU build of torch, and a CUDA build that sees no device (torch.cuda.init's error appended)."""
    stages = stages_module()
    if torch.cuda.is_available():
        assert stages.no_gpu_reason() is None
        return
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None)
    assert stages.no_gpu_reason() == f"torch {torch.__version__} is a CPU build (torch.version.cuda is None)"
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "init", lambda: (_ for _ in ()).throw(RuntimeError("no NVIDIA driver")))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert stages.no_gpu_reason() == (f"torch.cuda.is_available() is False (torch {torch.__version__} for "
                                      f"CUDA 12.8, CUDA_VISIBLE_DEVICES=): no NVIDIA driver")


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no GPU: the CUDA backend's runs are in scripts/gpu_check.sh on a GPU machine")
@pytest.mark.parametrize("layer", LAYERS)
def test_layer_folder_on_the_cuda_backend(layer):
    """Where a GPU is: the layer's folder with its tensors on the GPU (tests/conftest.py), as gpu_check.sh's
    layers stage runs it."""
    path = os.path.join(ROOT, "tests", "runtime_python", layer)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", path],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MPK_TEST_DEVICE": "cuda"})
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
