"""Suite-wide setup: a fresh compile cache, so no test passes on a stale build.

scripts/gpu_check.sh runs test files on the GPU with MPK_TEST_DEVICE=cuda (tensors the tests create
go to the GPU: torch's default device; a kernel-level case whose target_cc has another worker block than the
device's is skipped), MPK_TEST_CACHE_DIR (its cache of modules built ahead) and MPK_GPU_SUBSET=1 (each
layer folder's subset: gpu_subset below). MPK_TEST_CC stands for the device's compute capability where
torch sees no GPU (the dry run's collection, scripts/gpu_subset_times.py's measurement on the CPU)."""
import os
import tempfile

import pytest

# MPK_SUITE_CACHE_DIR: this run's cache, inherited by pytest-xdist's workers (started after this file
# is imported), so the workers share one cache (its entries are locked per key: mirage/mpk/build.py).
# The process that made it (none given: not a worker, not a pytest run inside a test) removes it when
# the session passed (each run left 400-500 MB in /tmp); a failed session keeps it and says where.
_owns_cache = not (os.environ.get("MPK_TEST_CACHE_DIR") or os.environ.get("MPK_SUITE_CACHE_DIR"))
_cache = (os.environ.get("MPK_TEST_CACHE_DIR") or os.environ.get("MPK_SUITE_CACHE_DIR")
          or tempfile.mkdtemp(prefix="mpk-test-cache-"))
os.environ["MPK_CACHE_DIR"] = os.environ["MPK_SUITE_CACHE_DIR"] = _cache
if os.environ.get("MPK_TEST_DEVICE"):
    import torch

    torch.set_default_device(os.environ["MPK_TEST_DEVICE"])

# The longest files first: the README's test command runs the suite on pytest-xdist workers with
# --dist loadfile (a file's tests on one worker), and a long file started last would leave the other
# workers idle. test_nvcc.py is not among them: it reads the every-variant nvcc build that
# test_launch_plan.py starts (tests/unit/every_variant.py), so it comes later and finds it built.
LONGEST_FIRST = ["unit/test_csrc.py", "runtime_python/test_mode/test_layers_multirank.py",
                 "unit/test_launch_plan.py", "runtime_python/test_mode/test_kernel_sanitizers.py",
                 "unit/test_gpu_check.py", "runtime_python/test_mode/test_sanitizers.py",
                 "runtime_python/test_mode/test_sampling_statistics.py",
                 "runtime_python/test_mode/test_shared_tile_races.py",
                 "runtime_python/test_mode/test_task_failure.py",
                 "runtime_python/test_mode/test_duplicate_writes.py",
                 "runtime_python/test_mode/test_poison_controls.py"]


def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker more than the cores. About a tenth of a 2-core run's core-seconds were idle
    with one worker per core: tests waiting on timers and hand-offs rather than computing (the runtime
    protocol test's threads, jitter and backoff sleeps, watchdog and interrupt tests, mpiexec start-up),
    which a third worker fills (benchmarks/README.md, "The whole test suite": 15:08 -> 14:20 on the
    same tree, the files' CPU unchanged)."""
    return (os.cpu_count() or 1) + 1


def pytest_configure(config):
    # pytest-xdist (3.6+) reorders --dist loadfile's files by their number of tests unless told not to,
    # which put the three-test launch-plan file (the longest) near the end of the run, 17 minutes in
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False
    _times_owner(config)


def gpu_cc() -> int | None:
    """The compute capability a GPU run targets: the device's where MPK_TEST_DEVICE is cuda and torch sees
    one, else MPK_TEST_CC (gpu_check.sh --dry-run's collection; the subset measured on the CPU), else None."""
    if os.environ.get("MPK_TEST_DEVICE", "").startswith("cuda"):
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            return major * 10 + minor
    return int(os.environ["MPK_TEST_CC"]) if os.environ.get("MPK_TEST_CC") else None


def worker_threads(cc: int) -> int:
    from mirage.mpk.testing import worker_block_dim

    return worker_block_dim(cc)[0]


def other_block(item, cc: int) -> int | None:
    """The item's target_cc parameter where its worker block is not cc's, else None."""
    cases = getattr(item, "callspec", None)
    target = cases.params.get("target_cc") if cases else None
    return target if target is not None and worker_threads(target) != worker_threads(cc) else None


def case_of(item) -> str:
    """The item's parameters but target_cc: the same case at either worker block."""
    cases = getattr(item, "callspec", None)
    return repr(sorted((k, repr(v)) for k, v in cases.params.items() if k != "target_cc")) if cases else ""


def gpu_subset(items: list, cc: int) -> list:
    """The GPU check's subset of the layer folders' items (docs/runtime.md, "GPU check"): of each test
    function, kernel-level and test-mode alike, the quick case and the first and last case at cc's worker
    block (its edges: the case tables run from the smallest case to the real sizes, over the dtypes; a
    quick case of the other block: its twin at cc's); an unparametrized test is its own edges. Items
    outside tests/runtime_python/<layer>/ are kept."""
    layers, kept, groups = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime_python"), [], {}
    for item in items:
        folder = os.path.relpath(str(item.path), layers).split(os.sep)
        if len(folder) != 2 or folder[0] == "test_mode":
            kept.append(item)
        else:
            groups.setdefault((str(item.path), item.originalname), []).append(item)
    for group in groups.values():
        here = [it for it in group if other_block(it, cc) is None]
        quick = {case_of(it) for it in group if it.get_closest_marker("quick")}     # at either block
        kept += [it for i, it in enumerate(here) if i in (0, len(here) - 1) or case_of(it) in quick]
    order = {id(it): i for i, it in enumerate(items)}
    return sorted(kept, key=lambda it: order[id(it)])


def skip_other_blocks(items: list, cc: int) -> int:
    """On CUDA every task runs on the device's worker block (run_tasks builds for the device): a case
    whose target_cc asks for the other block would run the device's again, so it is skipped, saying
    why. Returns how many."""
    skipped = 0
    for item in items:
        target = other_block(item, cc)
        if target is not None:
            skipped += 1
            item.add_marker(pytest.mark.skip(reason=(
                f"on CUDA every task runs on the device's worker block ({worker_threads(cc)} threads, cc "
                f"{cc}); the {worker_threads(target)}-thread block of target_cc {target} runs on the CPU "
                f"backend")))
    return skipped


def pytest_collection_modifyitems(config, items):
    cuda = os.environ.get("MPK_TEST_DEVICE", "").startswith("cuda")
    subset = os.environ.get("MPK_GPU_SUBSET") == "1"
    if cuda or subset:
        cc = gpu_cc()
        if cc is None:
            raise pytest.UsageError("MPK_TEST_DEVICE=cuda or MPK_GPU_SUBSET=1 without a GPU torch can use: "
                                    "set MPK_TEST_CC to the GPU's compute capability (e.g. 90)")
        if subset:
            kept = {id(it) for it in gpu_subset(items, cc)}
            config.hook.pytest_deselected(items=[it for it in items if id(it) not in kept])
            items[:] = [it for it in items if id(it) in kept]
        if cuda:
            skip_other_blocks(items, cc)
    here = os.path.dirname(os.path.abspath(__file__))
    rank = {os.path.join(here, f): i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))    # stable: the rest keep their order


# ---- where the suite's time goes (benchmarks/suite_times.py) ----------------------------------------
# With MPK_SUITE_TIMES_DIR set, every worker (or a run without workers) appends one JSON line per test
# file; a pytest started inside a test (a sanitizer child, a collection) records nothing: its time is
# its parent test's children's, counted there. One line per file: its wall seconds and
# the CPU seconds of this process and of the children it waited for (compilers, mpiexec jobs, sanitizer
# children), measured around each test including its fixtures' setup and teardown.
_times: dict[str, list[float]] = {}
_record = False


def _times_owner(config) -> None:
    global _record
    controller = not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None)
    _record = bool(os.environ.get("MPK_SUITE_TIMES_DIR")) and not os.environ.get("MPK_SUITE_TIMES_NESTED") \
        and not controller
    if _record:         # (the controller must not set it: its workers start after this and inherit it)
        os.environ["MPK_SUITE_TIMES_NESTED"] = "1"


def _cpu() -> float:
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def pytest_runtest_protocol(item, nextitem):
    if not _record:
        return None
    import time
    t0, c0 = time.perf_counter(), _cpu()
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    from _pytest.runner import runtestprotocol
    runtestprotocol(item, nextitem=nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    row = _times.setdefault(os.path.relpath(str(item.path), os.path.dirname(os.path.abspath(__file__))),
                            [0.0, 0.0, 0])
    row[0] += time.perf_counter() - t0
    row[1] += _cpu() - c0
    row[2] += 1
    return True


def pytest_sessionfinish(session, exitstatus):
    _drop_cache(int(exitstatus))
    folder = os.environ.get("MPK_SUITE_TIMES_DIR")
    if not folder or not _times:
        return
    import json
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{worker}.jsonl"), "a") as f:
        for path, (wall, cpu, tests) in _times.items():
            f.write(json.dumps(dict(file=path, worker=worker, wall=wall, cpu=cpu, tests=tests)) + "\n")


def _drop_cache(exitstatus: int) -> None:
    if not _owns_cache:
        return
    if exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        import shutil

        shutil.rmtree(_cache, ignore_errors=True)
    else:
        print(f"\nthe run's compile cache (generated modules and their builds) is kept: {_cache}")
