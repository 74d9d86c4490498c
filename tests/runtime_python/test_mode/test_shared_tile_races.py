"""Races between tasks under ThreadSanitizer: the test-mode cases marked `race` of every layer whose tasks
add into one output tile.

Such a layer declares an output Access.shared = ACCUMULATE (mirage/mpk/layers/__init__.py; splitk_linear
today): its tasks read-modify-write the same elements, so neither the kernel-level footprint checks (each
task alone may write its whole tile) nor a value check (two tasks collide within nanoseconds) sees a
plain read-modify-write where an atomic belongs. ThreadSanitizer does: the workers are OS threads and
nothing orders two tasks of one tile. The layers are found at run time (a layer module whose code names
ACCUMULATE, or imports a sibling that does); each must have a test_<stem>_testmode.py with at least one
`race` case (pyproject.toml), which one child (race_subset.py under mirage.mpk.sanitize.run_under_sanitizer,
MPK_SANITIZE=thread) runs; it must exit 0, every file must pass a case, and no report may be the
project's. The cases' variants are those of the layers' quick kernel-level cases where they can be
(splitk_linear bf16), so the suite's shared cache builds them once for both TSan runs.

Layers whose tasks share a tile BY_REQUEST (paged attention, the MoE linears, UE8M0 quantize) are not
run here: by design their tasks write disjoint elements (Layer.live: a request's rows and pages, an
expert's slots), and the kernel-level footprint check holds each task's writes to its own live part, so
a kernel writing another task's element is a named error without two tasks meeting (docs/sanitizers.md).

Negative control: splitk_linear's fp32 atomicAdd replaced by a plain read-modify-write (`*p += sum`) in a
scratch copy of csrc/ (MPK_CSRC_DIR): the same fp32 contention case is a reported data race at that line
of splitk_linear.cuh, which fails the verdict (its values pass: 0 of 40 seeds lost an update without
the sanitizer). The other survivor of the mutation run, the bf16 CAS without its retry, is no race (every
access is atomic): test_splitk_linear_controls.py's control (d) fails it by value under contention.

Run: python -m pytest -q -s tests/runtime_python/test_mode/test_shared_tile_races.py
     (by hand: python tests/runtime_python/test_mode/race_subset.py FILE..., under the helper as in
     docs/sanitizers.md)
"""
import ast
import concurrent.futures
import os
import pkgutil
import re
import shutil

import pytest

import mirage.mpk.layers
from mirage.mpk import build
from mirage.mpk.sanitize import SanitizerResult, run_under_sanitizer

HERE = os.path.dirname(os.path.abspath(__file__))
RUNTIME_PYTHON = os.path.dirname(HERE)
REPO = os.path.dirname(os.path.dirname(RUNTIME_PYTHON))
CHILD = os.path.join(HERE, "race_subset.py")
# Each child took 51 to 66 s alone on 2 cores at load 9 (builds included); twice that still passes.
TIMEOUT_S = 300
_RACEFILE = re.compile(r"^RACEFILE (\S+) passed=(\d+) failed=(\d+)$", re.M)

# the control's mutation: splitk_linear.cuh's fp32 add, atomic -> a plain read-modify-write
KERNEL = "splitk_linear.cuh"
PLAIN_RMW = ("            atomicAdd(reinterpret_cast<float*>(p), sum);\n", "            *p += sum;\n")


def accumulating_layers() -> list[str]:
    """Layer stems whose module's code names ACCUMULATE (not a docstring or comment), or imports a sibling
    module that does (a shared helper declaring the outputs)."""
    folder = mirage.mpk.layers.__path__[0]
    uses, imports = {}, {}
    for m in pkgutil.iter_modules([folder]):
        with open(os.path.join(folder, f"{m.name}.py")) as f:
            tree = ast.parse(f.read())
        uses[m.name] = any(isinstance(n, ast.Name) and n.id == "ACCUMULATE" for n in ast.walk(tree))
        imports[m.name] = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1
                           and n.module}
    return sorted(s for s in uses
                  if not s.startswith("_") and (uses[s] or any(uses.get(i) for i in imports[s])))


def race_files() -> dict[str, str]:
    """{layer stem: its test-mode file} for the accumulating layers (the file may be missing: a failure)."""
    return {s: os.path.join(RUNTIME_PYTHON, s, f"test_{s}_testmode.py") for s in accumulating_layers()}


def mutated_csrc(folder: str) -> tuple[str, int]:
    """A copy of csrc/ in `folder` with PLAIN_RMW applied, and the line of splitk_linear.cuh it changed. The
    parent's environment is left alone (the clean child starts beside this one)."""
    dst = os.path.join(folder, "csrc")
    shutil.copytree(build.csrc_dir(), dst)
    path = os.path.join(dst, "tasks", KERNEL)
    with open(path) as f:
        src = f.read()
    old, new = PLAIN_RMW
    assert src.count(old) == 1, f"{KERNEL} changed: update the negative control's mutation {old!r}"
    with open(path, "w") as f:
        f.write(src.replace(old, new))
    return dst, src[:src.index(old)].count("\n") + 1


def per_file(result: SanitizerResult) -> dict[str, dict]:
    return {os.path.realpath(os.path.join(REPO, m[1])): dict(passed=int(m[2]), failed=int(m[3]))
            for m in _RACEFILE.finditer(result.stdout)}


def verdict(result: SanitizerResult, files: list[str]) -> list[str]:
    """What makes a run fail: a timeout, a non-zero exit, an unsanitized run, a file without a passing
    `race` case (or with a failing one), a report in the project's frames. Empty when it passes."""
    problems = [f"over {TIMEOUT_S} s"] if result.timed_out else []
    if result.returncode != 0:
        problems.append(f"exit {result.returncode}")
    if not re.search(r"^RACESUBSET .*\(MPK_SANITIZE=thread, runtime libtsan", result.stdout, re.M):
        problems.append("the subset did not run sanitized (or did not finish)")
    got = per_file(result)
    for f in files:
        c = got.get(os.path.realpath(f))
        if c is None or c["failed"] or c["passed"] < 1:
            problems.append(f"{os.path.relpath(f, REPO)}: {c or 'no race case run'} (mark its contention "
                            f"cases @pytest.mark.race)")
    return problems + [f"report in project frames:\n{r}" for r in result.project_reports]


@pytest.fixture(scope="module")
def results(request, tmp_path_factory) -> dict:
    """{test name: (its child's result, the files it ran, extra)} for the selected tests below, their
    children started together (two: one per core)."""
    runs = {"test_shared_tiles_under_thread_sanitizer": False, "test_plain_read_modify_write_is_a_race": True}
    wanted = [item.name for item in request.session.items if item.name in runs]
    folders = {name: str(tmp_path_factory.mktemp(name)) for name in wanted}
    # Parsed here, once: CPython 3.11's ast.parse is not safe in two threads at once ("SystemError: AST
    # constructor recursion depth mismatch", python/cpython#106905; it failed this fixture in a CI run).
    layer_files = race_files()

    def one(name):
        files = [f for f in layer_files.values() if os.path.isfile(f)]
        if not runs[name]:
            return run_under_sanitizer("thread", [CHILD, *files], TIMEOUT_S,
                                       env={"MPK_OUTPUT_DIR": folders[name]}), files, None
        csrc, line = mutated_csrc(folders[name])
        files = [layer_files["splitk_linear"]]
        env = {"MPK_OUTPUT_DIR": folders[name], "MPK_CSRC_DIR": csrc}
        argv = [CHILD, *files, "-k", "float32"]          # the fp32 path only: the bf16 build is unchanged
        return run_under_sanitizer("thread", argv, TIMEOUT_S, env=env), files, line
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return dict(zip(wanted, pool.map(one, wanted)))


def test_accumulating_layers_have_race_cases():
    """The scan finds splitk_linear (else it is vacuous), and every layer it finds has a test-mode file."""
    files = race_files()
    print(f"layers whose tasks add into one output tile: {', '.join(files)}")
    assert "splitk_linear" in files, f"the ACCUMULATE scan found {sorted(files)}"
    missing = [os.path.relpath(f, REPO) for f in files.values() if not os.path.isfile(f)]
    assert not missing, f"accumulating layers without a test-mode file to run under TSan: {missing}"


def test_shared_tiles_under_thread_sanitizer(results, request):
    result, files, _ = results[request.node.name]
    result.show(_RACEFILE)
    assert files, "no test-mode files of accumulating layers found"
    problems = verdict(result, files)
    assert not problems, f"{result.summary}:\n" + "\n".join(problems) + result.tails


def test_plain_read_modify_write_is_a_race(results, request):
    """Negative control: the plain `*p += sum` is a project data race named at the mutated line, and fails
    the verdict the clean run passes."""
    result, files, line = results[request.node.name]
    result.show(_RACEFILE)
    site = f"{KERNEL}:{line}"
    assert any("data race" in r and site in r for r in result.project_reports), \
        f"{result.summary}: the plain read-modify-write at {site} raced unseen" + result.tails
    assert verdict(result, files), f"{result.summary}: the verdict passed a racy kernel"
