"""Suite-wide setup: a fresh compile cache, so no test passes on a stale build.

scripts/gpu_check.sh runs test files on the GPU with MPK_TEST_DEVICE=cuda (tensors the tests create
go to the GPU: torch's default device) and MPK_TEST_CACHE_DIR (its cache of modules built ahead)."""
import os
import tempfile

# MPK_SUITE_CACHE_DIR: this run's cache, inherited by pytest-xdist's workers (started after this file
# is imported), so the workers share one cache (its entries are locked per key: mirage/mpk/build.py).
_cache = (os.environ.get("MPK_TEST_CACHE_DIR") or os.environ.get("MPK_SUITE_CACHE_DIR")
          or tempfile.mkdtemp(prefix="mpk-test-cache-"))
os.environ["MPK_CACHE_DIR"] = os.environ["MPK_SUITE_CACHE_DIR"] = _cache
if os.environ.get("MPK_TEST_DEVICE"):
    import torch

    torch.set_default_device(os.environ["MPK_TEST_DEVICE"])

# The longest files first: the README's test command runs the suite on pytest-xdist workers with
# --dist loadfile (a file's tests on one worker, so a module fixture such as test_launch_plan's
# every-variant nvcc build runs once), and a long file started last would leave the other workers idle.
LONGEST_FIRST = ["unit/test_csrc.py", "runtime_python/test_mode/test_layers_multirank.py",
                 "unit/test_launch_plan.py", "runtime_python/test_mode/test_kernel_sanitizers.py",
                 "unit/test_gpu_check.py", "runtime_python/test_mode/test_sanitizers.py", "unit/test_nvcc.py",
                 "runtime_python/test_mode/test_sampling_statistics.py"]


def pytest_configure(config):
    # pytest-xdist (3.6+) reorders --dist loadfile's files by their number of tests unless told not to,
    # which put the three-test launch-plan file (the longest) near the end of the run, 17 minutes in
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(os.path.abspath(__file__))
    rank = {os.path.join(here, f): i for i, f in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))    # stable: the rest keep their order


# ---- where the suite's time goes (benchmarks/suite_times.py) ----------------------------------------
# With MPK_SUITE_TIMES_DIR set, every worker appends one JSON line per test file: its wall seconds and
# the CPU seconds of this process and of the children it waited for (compilers, mpiexec jobs, sanitizer
# children), measured around each test including its fixtures' setup and teardown.
_times: dict[str, list[float]] = {}


def _cpu() -> float:
    import resource
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def pytest_runtest_protocol(item, nextitem):
    if not os.environ.get("MPK_SUITE_TIMES_DIR"):
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


def pytest_sessionfinish(session):
    folder = os.environ.get("MPK_SUITE_TIMES_DIR")
    if not folder or not _times:
        return
    import json
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{worker}.jsonl"), "a") as f:
        for path, (wall, cpu, tests) in _times.items():
            f.write(json.dumps(dict(file=path, worker=worker, wall=wall, cpu=cpu, tests=tests)) + "\n")
