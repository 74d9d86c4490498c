"""Non-editable installs: a wheel carries the kernel sources (csrc/) and runs a kernel from any directory.

Run: pytest tests/unit/test_install.py -s   (-s shows the commands, EVIDENCE lines and what came from where)
The wheel test builds a wheel of this checkout without build isolation (no network), installs it
with --target into a temporary directory and runs a one-layer test-mode rmsnorm from another
temporary directory with a fresh compile cache: about 10 s on 2 cores, most of it g++.
"""
import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import zipfile

import pytest
from filelock import FileLock

from mirage.mpk import build
from mirage.mpk.errors import MPKInstallError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK_HEADERS = sorted(f"tasks/{f}" for f in os.listdir(os.path.join(REPO, "csrc", "tasks"))
                      if f.endswith(".cuh"))
# pip and setuptools write to the checkout's build/ and *.egg-info: one such build at a time here.
BUILD_LOCK = os.path.join(tempfile.gettempdir(),
                          f"mpk-install-test-{hashlib.sha256(REPO.encode()).hexdigest()[:12]}.lock")

# Runs in the installed copy, cwd outside the checkout: builds, compiles and runs one rmsnorm layer.
SCRIPT = textwrap.dedent("""
    import os

    import torch

    import mirage
    from mirage.mpk import build, testing
    from mirage.mpk.persistent_kernel import PersistentKernel

    print("MIRAGE_FROM", os.path.dirname(os.path.abspath(mirage.__file__)), flush=True)
    print("CSRC_DIR", build.csrc_dir(), flush=True)
    batch, hidden, grid = 6, 96, 3
    gen = testing.generator(offset=11)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=1))
    x = testing.randn((batch, hidden), torch.float32, gen)
    w = testing.randn((hidden,), torch.float32, gen)
    out = torch.zeros(batch, hidden, dtype=torch.float32)
    x_dt, w_dt = pk.attach_input(x, name="x"), pk.attach_input(w, name="w")
    out_dt = pk.attach_input(out, name="out")
    pk.rmsnorm_layer(input=x_dt, weight=w_dt, output=out_dt, grid_dim=(grid, 1, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=os.path.join(os.getcwd(), "test_output"))
    include = pk.build.command[pk.build.command.index("-I") + 1] if pk.build.command else "-"
    print("BUILD_HIT", pk.build.hit, flush=True)
    print("BUILD_INCLUDE", include, flush=True)
    pk()
    x64 = x.double()
    ref = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6) * w.double()
    testing.check_output(f"installed_wheel.rmsnorm[float32,{batch}x{hidden},grid={grid}]", out, ref,
                         testing.tol_rmsnorm(torch.float32, hidden), pk.layers[0].checks, (x,))
    pk.finalize()
""")


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    """Run a command, print it with its exit code, time and output, and return it."""
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, **kw)
    print(f"$ {' '.join(cmd)}  (cwd {kw.get('cwd', os.getcwd())}) -> exit {proc.returncode} "
          f"in {time.perf_counter() - t0:.1f} s\n{proc.stdout}{proc.stderr}", flush=True)
    return proc


def tagged(output: str, tag: str) -> str:
    """The rest of the first output line that starts with `tag`, or ''."""
    return next((line[len(tag):].strip() for line in output.splitlines() if line.startswith(tag)), "")


def test_wheel_runs_a_kernel_outside_the_checkout(tmp_path):
    wheels, site, work = tmp_path / "wheels", tmp_path / "site", tmp_path / "work"
    work.mkdir()
    with FileLock(BUILD_LOCK):
        proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                    "-w", str(wheels), REPO], cwd=str(work))
    assert proc.returncode == 0, "building the wheel failed (output above)"
    (wheel,) = [str(p) for p in wheels.glob("mirage_mpk-*.whl")]
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
    want = ["mirage/mpk/csrc/runtime/runtime.h"] + [f"mirage/mpk/csrc/{h}" for h in TASK_HEADERS]
    print(f"EVIDENCE wheel {os.path.basename(wheel)}: {sum(n.startswith('mirage/mpk/csrc/') for n in names)} "
          f"files under mirage/mpk/csrc; required {len(want)}, missing {sorted(set(want) - names)}")
    assert set(want) <= names, sorted(set(want) - names)

    proc = run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(site),
                wheel], cwd=str(work))
    assert proc.returncode == 0, "installing the wheel failed (output above)"

    script = work / "run_installed.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, PYTHONPATH=str(site), MPK_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("MPK_CSRC_DIR", None)       # the packaged sources, not an override, must be found
    proc = run([sys.executable, str(script)], cwd=str(work), env=env)
    out = proc.stdout
    assert proc.returncode == 0, "the installed wheel failed to run a kernel (output above)"
    assert any(line.startswith("EVIDENCE installed_wheel.rmsnorm") and line.endswith(" PASS")
               for line in out.splitlines()), "no passing EVIDENCE line"
    mirage_from, csrc = tagged(out, "MIRAGE_FROM"), tagged(out, "CSRC_DIR")
    packaged = os.path.join(str(site), "mirage", "mpk", "csrc")
    hit, include = tagged(out, "BUILD_HIT"), tagged(out, "BUILD_INCLUDE")
    print(f"EVIDENCE installed: mirage from {mirage_from}, csrc_dir() {csrc}, cache hit {hit}, -I {include}")
    assert mirage_from == os.path.join(str(site), "mirage"), f"mirage was imported from {mirage_from}"
    assert csrc == packaged, f"csrc_dir() is {csrc}, expected the packaged {packaged}"
    assert (hit, include) == ("False", packaged), f"expected a fresh compile with -I {packaged}"
    # numpy is an install requirement: without it torch warns on every run of every script
    numpy_warned = "Failed to initialize NumPy" in proc.stderr
    print(f"EVIDENCE torch warned 'Failed to initialize NumPy': {numpy_warned}")
    assert not numpy_warned, "numpy is missing: pip install numpy (an install requirement)"

    stray = os.path.join(REPO, "mirage", "mpk", "csrc")
    print(f"EVIDENCE checkout has no {stray}: {not os.path.exists(stray)}")
    assert not os.path.exists(stray), f"building the wheel left a copy of csrc/ in the checkout: {stray}"


def test_sdist_contains_csrc(tmp_path):
    # An sdist is what a wheel is built from on another machine: without csrc/ that build fails.
    code = f"from setuptools import build_meta; print('SDIST', build_meta.build_sdist({str(tmp_path)!r}))"
    with FileLock(BUILD_LOCK):
        proc = run([sys.executable, "-c", code], cwd=REPO)
    assert proc.returncode == 0, "building the sdist failed (output above)"
    sdist = tmp_path / tagged(proc.stdout, "SDIST")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    want = sorted({"setup.py", "MANIFEST.in", *(f"csrc/{h}" for h in build.REQUIRED_HEADERS),
                   *(f"csrc/{h}" for h in TASK_HEADERS)})
    missing = sorted(set(want) - names)
    print(f"EVIDENCE sdist {sdist.name}: {sum(n.startswith('csrc/') for n in names)} entries under csrc/; "
          f"required {len(want)}, missing {missing}")
    assert not missing, missing

    # and a wheel built from it (in pip's own temporary directory, as on a user's machine) has them
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", str(tmp_path / "wheels"), str(sdist)], cwd=str(tmp_path))
    assert proc.returncode == 0, "building a wheel from the sdist failed (output above)"
    (wheel,) = (tmp_path / "wheels").glob("mirage_mpk-*.whl")
    with zipfile.ZipFile(wheel) as z:
        in_wheel = {n[len("mirage/mpk/"):] for n in z.namelist() if n.startswith("mirage/mpk/csrc/")}
    headers = {n for n in names if n.startswith("csrc/") and n.endswith((".h", ".cuh"))}
    print(f"EVIDENCE wheel from the sdist: {len(in_wheel)} files under mirage/mpk/csrc, "
          f"the sdist's {len(headers)} headers all there: {headers == in_wheel}")
    assert headers == in_wheel, sorted(headers ^ in_wheel)


def test_csrc_dir_override_pointing_at_an_empty_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("MPK_CSRC_DIR", str(tmp_path))
    with pytest.raises(MPKInstallError) as e:
        build.csrc_dir()
    print(f"EVIDENCE MPK_CSRC_DIR={tmp_path} -> MPKInstallError: {e.value}")
    assert "MPK_CSRC_DIR" in str(e.value) and str(tmp_path) in str(e.value)
    # the override alone is looked at: a complete checkout or package does not hide the mistake
    assert build.CHECKOUT_CSRC not in str(e.value) and build.PACKAGED_CSRC not in str(e.value)
