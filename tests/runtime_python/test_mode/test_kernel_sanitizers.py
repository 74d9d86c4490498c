"""Every layer's kernel-level test (tests/runtime_python/<layer>/test_<layer>.py) under ThreadSanitizer and
AddressSanitizer: a quick subset of each (its `quick` case; a file that marks none: its first case).

The layer files are found at run time: one per layer module (mirage/mpk/layers/<stem>.py) whose folder
has test_<stem>.py, so a layer's file joins these runs when it lands. Per sanitizer, one child
(kernel_sanitizer_subset.py under mirage.mpk.sanitize.run_under_sanitizer: the real interpreter with
the sanitizer runtime preloaded, MPK_SANITIZE=<kind>, so every layer's module is built sanitized) runs
all of them; it must exit 0, every file must pass with at least one case run, and no report may have a
frame in the project's code (docs/sanitizers.md). One sanitized module per layer variant: each quick
case is one dtype, so each file costs one sanitized build, which dominates the time; the children of
the selected tests run two at a time (MPK_SANITIZER_JOBS), one per core of a 2-core machine.

Negative controls (a scratch copy of csrc/ with one kernel broken, through MPK_CSRC_DIR): two threads of
identity's block writing one shared-memory word with no barrier between them is a ThreadSanitizer data
race in identity.cuh, which fails the verdict the runs above get (the footprint checks alone do not see
it: the word never reaches an output); a read one byte past the block's shared memory is an
AddressSanitizer heap-buffer-overflow in identity.cuh.

Run: python -m pytest -q -s tests/runtime_python/test_mode/test_kernel_sanitizers.py
     (by hand, one file: see kernel_sanitizer_subset.py and docs/sanitizers.md)
"""
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
CHILD = os.path.join(HERE, "kernel_sanitizer_subset.py")
# Per child: five layers' quick cases took 66 s (thread) and 79 s (address) on 2 cores at load 6;
# eight layers with two children at once stay well inside this.
# A safety net, not a measurement: 163 s for both children at once, idle (2026-12-03); 480 was hit at load 6.
TIMEOUT_S = 900
_KERNELFILE = re.compile(r"^KERNELFILE (\S+) selected=(\d+) passed=(\d+) failed=(\d+) skipped=(\d+) "
                         r"seconds=([\d.]+)$", re.M)


def layer_test_files() -> dict[str, str]:
    """{layer stem: its kernel-level test file}, for the layer modules that have one now."""
    stems = sorted(m.name for m in pkgutil.iter_modules(mirage.mpk.layers.__path__)
                   if not m.name.startswith("_"))
    files = {s: os.path.join(RUNTIME_PYTHON, s, f"test_{s}.py") for s in stems}
    missing = [s for s, f in files.items() if not os.path.isfile(f)]
    if missing:
        print(f"layers without a kernel-level test file (not run under the sanitizers yet): "
              f"{', '.join(missing)}")
    return {s: f for s, f in files.items() if os.path.isfile(f)}


def run_files(kind: str, files: list[str], folder: str, env: dict | None = None) -> SanitizerResult:
    """The child over `files` under `kind`; its pytest's rootdir (and so the file part of its node
    ids, which KERNELFILE lines name) is the repository, whatever the cwd (pyproject.toml's folder)."""
    extra = {"MPK_OUTPUT_DIR": folder, **(env or {})}
    return run_under_sanitizer(kind, [CHILD, *files], TIMEOUT_S, env=extra)


def per_file(result: SanitizerResult) -> dict[str, dict]:
    return {os.path.realpath(os.path.join(REPO, m[1])): dict(selected=int(m[2]), passed=int(m[3]),
                                                             failed=int(m[4]), skipped=int(m[5]),
                                                             seconds=float(m[6]))
            for m in _KERNELFILE.finditer(result.stdout)}


def verdict(kind: str, result: SanitizerResult, files: list[str]) -> list[str]:
    """What makes a run fail: a timeout, a non-zero exit, a run that was not sanitized, a file that did
    not pass (or ran nothing), a report in the project's frames. Empty when it passes."""
    problems = []
    if result.timed_out:
        problems.append(f"over {TIMEOUT_S} s")
    if result.returncode != 0:
        problems.append(f"exit {result.returncode}")
    runtime = {"thread": "libtsan", "address": "libasan"}[kind]
    if not re.search(rf"^KERNELSUBSET .*\(MPK_SANITIZE={kind}, runtime {runtime}", result.stdout, re.M):
        problems.append("the subset did not run sanitized (or did not finish)")
    got = per_file(result)
    for f in files:
        c = got.get(os.path.realpath(f))
        if c is None or c["failed"] or c["passed"] < 1:
            problems.append(f"{os.path.relpath(f, REPO)}: {c or 'no result'}")
    problems += [f"report in project frames:\n{r}" for r in result.project_reports]
    return problems


# ---- negative controls: identity's kernel broken in a scratch copy of csrc/

IDENTITY_TASK = "__device__ void identity_task(const TaskView& v) {\n"
RACE = ("    // negative control: two threads write one shared-memory word, no barrier between them\n"
        "    if (threadIdx.x < 2) mpk::smem<int>(0, 1)[0] = int(threadIdx.x);\n")
OVERFLOW = ("    // negative control: a read one byte past the block's shared memory\n"
            "    if (threadIdx.x == 0)\n"
            "        (void)*static_cast<volatile char*>(mpk::smem_base() + mpk::smem_bytes());\n")


def broken_csrc(folder: str, insert: str) -> str:
    """A copy of csrc/ in `folder` whose identity_task starts with `insert`."""
    dst = os.path.join(folder, "csrc")
    shutil.copytree(build.csrc_dir(), dst)
    path = os.path.join(dst, "tasks", "identity.cuh")
    with open(path) as f:
        src = f.read()
    assert src.count(IDENTITY_TASK) == 1, "identity.cuh changed: update the negative controls"
    with open(path, "w") as f:
        f.write(src.replace(IDENTITY_TASK, IDENTITY_TASK + insert))
    return dst


# ---- the runs: every selected test's child at once, JOBS at a time

RUNS = {   # test name -> (sanitizer, the kernel broken in the scratch csrc/ or None: all layer files)
    "test_layer_kernels_under_sanitizer[thread]": ("thread", None),
    "test_layer_kernels_under_sanitizer[address]": ("address", None),
    "test_shared_memory_race_fails_the_run": ("thread", RACE),
    "test_shared_memory_overflow_is_reported": ("address", OVERFLOW),
}
# Sanitized builds dominate (one per layer file and run, each several seconds on an idle core): the
# children run two at a time, one per core of the 2-core machines this suite targets.
JOBS = int(os.environ.get("MPK_SANITIZER_JOBS", "2"))


@pytest.fixture(scope="module")
def results(request, tmp_path_factory) -> dict[str, tuple[SanitizerResult, list[str]]]:
    """{test name: (its child's result, the files it ran)} for the tests of RUNS that pytest selected,
    their children started together (the first of them to ask waits for all)."""
    wanted = [item.name for item in request.session.items if item.name in RUNS]
    files = layer_test_files()
    # made here, not in the pool: two threads making this worker's first temporary folder at once
    # collided (FileExistsError on its basetemp) when this file ran first on its worker
    folders = {name: str(tmp_path_factory.mktemp(re.sub(r"\W", "_", name))) for name in wanted}

    def one(name):
        kind, insert = RUNS[name]
        folder = folders[name]
        if insert is None:
            todo, env = list(files.values()), {}
        else:
            todo, env = [files["identity"]], {"MPK_CSRC_DIR": broken_csrc(folder, insert)}
        return run_files(kind, todo, folder, env), todo
    with concurrent.futures.ThreadPoolExecutor(max(1, JOBS)) as pool:
        return dict(zip(wanted, pool.map(one, wanted)))


@pytest.mark.parametrize("kind", ["thread", "address"])
def test_layer_kernels_under_sanitizer(kind, results, request):
    result, files = results[request.node.name]
    result.show(_KERNELFILE)
    assert files, "no kernel-level test files found"
    problems = verdict(kind, result, files)
    assert not problems, f"{result.summary}:\n" + "\n".join(problems) + result.tails


def test_shared_memory_race_fails_the_run(results, request):
    """Negative control (thread): the race is a project report in identity.cuh and fails the verdict
    (the file itself passes: the racy word never reaches an output, so the footprint checks miss it)."""
    result, files = results[request.node.name]
    result.show(_KERNELFILE)
    assert any("data race" in r and "identity.cuh:" in r for r in result.project_reports), \
        f"{result.summary}: the shared-memory race went unseen" + result.tails
    assert verdict("thread", result, files), f"{result.summary}: the verdict passed a racy kernel"


def test_shared_memory_overflow_is_reported(results, request):
    """Negative control (address): the read past shared memory is a project report in identity.cuh."""
    result, files = results[request.node.name]
    result.show(_KERNELFILE)
    assert any("heap-buffer-overflow" in r and "identity.cuh:" in r for r in result.project_reports), \
        f"{result.summary}: the overflow went unseen" + result.tails
    assert verdict("address", result, files), f"{result.summary}: the verdict passed the overflow"
