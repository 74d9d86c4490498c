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
