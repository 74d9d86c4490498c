"""`python -m mirage.mpk doctor`: where the kernel sources are, and one line per missing header.

Run: pytest tests/unit/test_doctor.py -s   (-s shows doctor's output)
"""
import os
import shutil
import subprocess
import sys

import pytest

import mirage
from mirage.mpk import __main__ as cli
from mirage.mpk import build
from mirage.mpk.errors import MPKInstallError


def doctor(capsys) -> tuple[int, str]:
    """Run doctor in-process; return (exit code, stdout) and print both."""
    code = cli.doctor()
    out = capsys.readouterr().out
    with capsys.disabled():
        print(f"\n$ python -m mirage.mpk doctor  (MPK_CSRC_DIR={os.environ.get('MPK_CSRC_DIR', '')!r}) "
              f"-> exit {code}\n{out}", end="")
    return code, out


def csrc_copy(tmp_path, *deleted: str) -> str:
    """A copy of the sources in use, less `deleted` (paths relative to csrc/)."""
    copy = str(tmp_path / "csrc")
    shutil.copytree(build.csrc_dir(), copy)
    for rel in deleted:
        os.remove(os.path.join(copy, rel))
    return copy


def test_doctor_passes_on_this_install(capsys, monkeypatch):
    monkeypatch.delenv("MPK_CSRC_DIR", raising=False)
    code, out = doctor(capsys)
    where = "the package" if build.csrc_dir() == build.PACKAGED_CSRC else "the checkout"
    line = f"kernel sources: {build.csrc_dir()} ({where})"
    print(f"EVIDENCE doctor exit {code}, names '{line}': {line in out}, problems: {out.count('PROBLEM')}")
    assert code == 0 and line in out and "PROBLEM" not in out
    assert "kernel sources complete" in out and "rmsnorm" in out


def test_doctor_names_a_missing_task_header_and_its_layer(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MPK_CSRC_DIR", csrc_copy(tmp_path, "tasks/rmsnorm.cuh"))
    code, out = doctor(capsys)
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    print(f"EVIDENCE doctor exit {code}, problems: {problems}")
    assert code == 1 and len(problems) == 1
    assert "layer 'rmsnorm'" in problems[0] and "tasks/rmsnorm.cuh" in problems[0]
    assert "(MPK_CSRC_DIR)" in problems[0] and "fix:" in problems[0]


def test_doctor_names_a_missing_included_header(tmp_path, capsys, monkeypatch):
    # common.cuh belongs to no layer: only the kernels that include it show it is needed.
    monkeypatch.setenv("MPK_CSRC_DIR", csrc_copy(tmp_path, "tasks/common.cuh"))
    code, out = doctor(capsys)
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    print(f"EVIDENCE doctor exit {code}, {len(problems)} problem line(s) naming common.cuh")
    assert code == 1 and problems and all('includes "common.cuh"' in p for p in problems)
    assert any(p.startswith("PROBLEM tasks/rmsnorm.cuh includes") for p in problems)


def test_doctor_with_an_empty_override(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("MPK_CSRC_DIR", str(tmp_path))
    with pytest.raises(MPKInstallError) as e:
        build.csrc_dir()
    code, out = doctor(capsys)
    print(f"EVIDENCE doctor exit {code}, prints the MPKInstallError text: {str(e.value) in out}")
    assert code == 1 and str(e.value) in out and str(tmp_path) in out


def test_doctor_exit_status_from_the_command_line(tmp_path):
    # the same mirage as this process, from a directory outside the checkout
    here = os.path.dirname(os.path.dirname(os.path.abspath(mirage.__file__)))
    path = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, MPK_CSRC_DIR=csrc_copy(tmp_path, "tasks/silu_mul.cuh"), PYTHONPATH=path)
    proc = subprocess.run([sys.executable, "-m", "mirage.mpk", "doctor"], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=120)
    print(f"$ MPK_CSRC_DIR={env['MPK_CSRC_DIR']} python -m mirage.mpk doctor -> exit {proc.returncode}\n"
          f"{proc.stdout}{proc.stderr}")
    problems = [line for line in proc.stdout.splitlines() if line.startswith("PROBLEM")]
    print(f"EVIDENCE exit {proc.returncode}, problems: {problems}")
    # the missing kernel, and every kernel that includes it (silu_mul_linear_with_residual.cuh does)
    assert proc.returncode == 1 and "layer 'silu_mul'" in problems[0], problems
    assert all("silu_mul.cuh" in p for p in problems), problems


def test_doctor_reports_every_tool_with_a_fix_when_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("MPK_CSRC_DIR", raising=False)
    code, out = doctor(capsys)
    for what in ("host compiler", "nvcc", "MPI", "GPU", "thread sanitizer runtime",
                 "address sanitizer runtime", "cache"):
        assert any(line.split(maxsplit=1)[-1].startswith(what) for line in out.splitlines()
                   if line.startswith(("OK", "NOTE", "PROBLEM"))), what
    assert code == 0
    monkeypatch.setenv("MPK_CXX", "no-such-compiler-mpk")
    afile = tmp_path / "cache_is_a_file"
    afile.write_text("x")
    monkeypatch.setenv("MPK_CACHE_DIR", str(afile))
    code, out = doctor(capsys)
    problems = [line for line in out.splitlines() if line.startswith("PROBLEM")]
    print(f"EVIDENCE doctor exit {code}, problems: {problems}")
    assert code == 1 and len(problems) == 2
    assert "host compiler no-such-compiler-mpk: not found on PATH" in problems[0] and "fix:" in problems[0]
    assert f"the compile cache {afile} (MPK_CACHE_DIR) is a file" in problems[1]
