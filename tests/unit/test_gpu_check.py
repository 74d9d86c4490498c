"""The CUDA backend's build path and scripts/gpu_check.sh, on a machine without a GPU.

- build.flags("cuda") is nvcc for one arch (sm_90a on Hopper) with the static CUDA runtime;
- a module built ahead by nvcc is found again on a machine without nvcc (MPK_NVCC pointing nowhere,
  MPK_NVCC_IDENTITY naming the nvcc that built it: what gpu_check.sh sets on the GPU machine), and a
  source nobody built ahead is an MPKCompileError naming the missing nvcc and the way out;
- gpu_check.sh --dry-run runs every stage the CPU can (the executor stage's chain / fork / join graphs
  on the CPU backend, their CUDA modules built with nvcc) and says SKIP for the GPU stages, so the
  script cannot rot; negative control: with broken kernel sources the same run fails and says which
  stage.
The GPU stages themselves run only where a GPU is: docs/runtime.md, "GPU check".
"""
import ctypes
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch

from mirage.mpk import build
from mirage.mpk.errors import MPKCompileError

NVCC = shutil.which("nvcc")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY = 'extern "C" int mpk_tiny(void) { return 7; }\n'
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH")


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


def dry_run(out, **env) -> tuple[int, str, dict]:
    proc = subprocess.run(["bash", os.path.join(ROOT, "scripts", "gpu_check.sh"), "--dry-run"],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "GPU_CHECK_OUT": str(out), **env})
    print(proc.stdout + proc.stderr)
    with open(os.path.join(out, "summary.json")) as f:
        return proc.returncode, proc.stdout, json.load(f)


@needs_nvcc
def test_gpu_check_dry_run_runs_every_stage_the_cpu_can(tmp_path):
    code, out, summary = dry_run(tmp_path)
    assert code == 0, out
    status = {s["name"]: s["status"] for s in summary["stages"]}
    assert status == {"props": "PASS", "executor": "PASS", "prepare-executor": "PASS",
                      "layers": "SKIP(no GPU: the layer tests run on the CPU backend in the suite)",
                      "sanitizers": "SKIP(no GPU)"}, status
    runs = [r for r in summary["results"] if r["stage"] == "executor"]
    want = {(g, w) for g in ("chain", "fork", "join") for w in (1, 3)}
    assert {(r["graph"], r["workers"]) for r in runs} >= want, runs
    assert all(r["exact"] and r["passes"] >= 2 for r in runs), runs
    built = [ln for ln in out.splitlines() if ln.startswith("built ahead: ")]
    assert built and int(built[0].split()[2]) >= 2, out     # CUDA modules of the identity and join graphs
    assert "GPU CHECK: 5 stages, 0 failed" in out


def test_gpu_check_dry_run_fails_naming_the_stage(tmp_path):
    """Negative control: kernel sources without the runtime, so no module builds."""
    broken = tmp_path / "csrc"
    broken.mkdir()
    code, out, summary = dry_run(tmp_path / "out", MPK_CSRC_DIR=str(broken))
    status = {s["name"]: s["status"] for s in summary["stages"]}
    assert code == 1 and status["executor"] == "FAIL(exit 1)", status
    assert "GPU CHECK: 5 stages, 2 failed: executor, prepare-executor" in out, out


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="no GPU: the CUDA backend's runs are in scripts/gpu_check.sh on a GPU machine")
@pytest.mark.parametrize("layer", ["rmsnorm", "linear", "elementwise_add"])
def test_layer_file_on_the_cuda_backend(layer):
    """Where a GPU is: the layer's test file with its tensors on the GPU (tests/conftest.py)."""
    path = os.path.join(ROOT, "tests", "runtime_python", layer, f"test_{layer}_testmode.py")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", path],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "MPK_TEST_DEVICE": "cuda"})
    print(proc.stdout[-4000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
