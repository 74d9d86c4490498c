"""`python -m mirage.mpk new-layer <stem>` writes a layer that passes from the first run, touching nothing
else.

In a temporary copy of the repository (mirage/, csrc/, tests/, scripts/, docs/, pyproject.toml; no .git)
the command writes a layer; then, with PYTHONPATH at that copy: ruff passes on the new files, its
test-mode test passes (a subset of its cases: one dtype, and the scalar cases), its kernel-level test
skips while testing.run_tasks is missing, and the unit tests that check every layer (test_layer_recipe,
test_docs, test_linecount, test_task_types) pass with it. Negative controls: the command refuses a bad
stem, an existing layer and an existing file, writing nothing; and a generated module given another
layer's task type makes task_type_of fail naming both modules.
Run: pytest tests/unit/test_new_layer.py -s
"""
import os
import shutil
import subprocess
import sys

import pytest

from mirage.mpk import layers, scaffold

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEM = "scaled_demo"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory):
    """A copy of the repository to write layers into."""
    dst = tmp_path_factory.mktemp("checkout")
    skip = shutil.ignore_patterns("__pycache__", "test_output", "*.egg-info", ".pytest_cache")
    for name in ("mirage", "csrc", "tests", "scripts", "docs"):
        shutil.copytree(os.path.join(ROOT, name), dst / name, ignore=skip)
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), dst)
    return dst


def run(cmd: list[str], cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def new_layer(checkout, stem: str, cwd=None) -> subprocess.CompletedProcess:
    return run([sys.executable, "-m", "mirage.mpk", "new-layer", stem, "--root", str(checkout)],
               cwd or checkout)


def layer_paths(stem: str) -> list[str]:
    folder = f"tests/runtime_python/{stem}"
    return [f"mirage/mpk/layers/{stem}.py", f"csrc/tasks/{stem}.cuh", f"{folder}/pytorch_reference.py",
            f"{folder}/test_{stem}.py", f"{folder}/test_{stem}_testmode.py"]


def next_free(checkout) -> int:
    """The task type new-layer should give the next layer: the checkout's lowest free extension number."""
    declared = scaffold.declared_task_types(str(checkout / "mirage" / "mpk" / "layers"))
    return layers.next_free_task_type(declared.values())


@pytest.fixture(scope="module")
def first_task_type(checkout) -> int:
    return next_free(checkout)        # before new-layer runs; 1000 until the repository has extension layers


@pytest.fixture(scope="module")
def generated(checkout, first_task_type):
    proc = new_layer(checkout, STEM)
    assert proc.returncode == 0, proc.stderr
    assert all((checkout / p).is_file() for p in layer_paths(STEM)), proc.stdout
    return checkout


def test_generated_layer_passes_its_tests_and_the_layer_checks(generated, first_task_type):
    text = (generated / "mirage" / "mpk" / "layers" / f"{STEM}.py").read_text()
    assert f"TASK_TYPE = {first_task_type}\n" in text, "not the next free extension number"
    # ruff is a test dependency (the `test` extra); the project's `ruff check .` sees these files
    lint = run([sys.executable, "-m", "ruff", "check", *[p for p in layer_paths(STEM) if p.endswith(".py")]],
               generated)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    folder = f"tests/runtime_python/{STEM}"
    pytest = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs"]
    # one dtype (one compile) of the regular cases, and its scalar case: -k selects in every file given
    proc = run([*pytest, f"{folder}/test_{STEM}_testmode.py", "-k", "float32"], generated)
    print(proc.stdout[-2000:])
    assert proc.returncode == 0 and "5 passed" in proc.stdout, proc.stdout[-6000:] + proc.stderr[-3000:]
    units = ["test_layer_recipe", "test_docs", "test_linecount", "test_task_types"]
    proc = run([*pytest, "-s", f"{folder}/test_{STEM}.py", *[f"tests/unit/{u}.py" for u in units]], generated)
    print(proc.stdout[-2000:])
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    assert f"RECIPE tests/runtime_python/{STEM}/test_{STEM}_testmode.py" in proc.stdout, "not checked"
    # the kernel-level test ran every task alone with the footprint checks, at both block sizes
    assert f"FOOTPRINT {STEM}_0[{STEM},4/4 task(s),128 threads]" in proc.stdout, proc.stdout[-3000:]
    assert f"FOOTPRINT {STEM}_0[{STEM},4/4 task(s),256 threads]" in proc.stdout, proc.stdout[-3000:]
    script = run([sys.executable, f"{folder}/test_{STEM}.py", "-k", "strided"], generated)
    assert script.returncode == 0 and " passed" in script.stdout, script.stdout + script.stderr
    print(f"NEW_LAYER {STEM}: generated files pass ruff, their tests and the layer checks PASS")


def test_refusals_write_nothing(generated, tmp_path):
    again = new_layer(generated, STEM)          # the command: message on stderr, exit 2
    assert again.returncode == 2 and f"layer '{STEM}' already exists" in again.stderr, again.stderr
    for bad in ("9lives", "class", "LayerNorm", "_private", "norm_layer", "x" * 21):
        with pytest.raises(ValueError, match=f"{bad!r} is not a layer stem"):
            scaffold.new_layer(bad, str(generated))
        assert not (generated / "mirage" / "mpk" / "layers" / f"{bad}.py").exists()
    (generated / "csrc" / "tasks" / "halfdone.cuh").write_text("// an earlier attempt\n")
    with pytest.raises(ValueError, match="refusing to overwrite: csrc/tasks/halfdone.cuh"):
        scaffold.new_layer("halfdone", str(generated))
    assert not (generated / "mirage" / "mpk" / "layers" / "halfdone.py").exists(), "nothing may be written"
    assert (generated / "csrc" / "tasks" / "halfdone.cuh").read_text() == "// an earlier attempt\n"
    with pytest.raises(ValueError, match="is not a mirage-mpk checkout"):
        scaffold.new_layer("fine", str(tmp_path))


def test_next_layer_takes_the_next_number_and_collisions_are_named(generated, first_task_type):
    expected = next_free(generated)
    assert expected > first_task_type
    proc = new_layer(generated, "second_demo")
    assert proc.returncode == 0, proc.stderr
    module = generated / "mirage" / "mpk" / "layers" / "second_demo.py"
    assert f"TASK_TYPE = {expected}\n" in module.read_text()
    module.write_text(module.read_text().replace(f"TASK_TYPE = {expected}\n", "TASK_TYPE = 119\n"))
    check = run([sys.executable, "-c", "from mirage.mpk import layers; layers.task_type_of('rmsnorm')"],
                generated)
    assert check.returncode != 0, "a task type shared with rmsnorm must be refused"
    assert "layers/rmsnorm.py and layers/second_demo.py both declare TASK_TYPE = 119" in check.stderr, \
        check.stderr
    for p in layer_paths("second_demo"):
        os.remove(generated / p)
