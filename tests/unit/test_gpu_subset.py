"""The GPU check's layer subset and its time estimate (issue 31, item 6), on made-up items: no collection.

tests/conftest.py, with MPK_GPU_SUBSET=1, keeps of each layer folder's test functions (kernel-level and
test-mode) the first and last case at the GPU's worker block plus the quick case (its twin at that block
where the quick case asks for the other); on CUDA (MPK_TEST_DEVICE=cuda) a case at the other
worker block is skipped with the reason, since run_tasks builds for the device's block whatever target_cc
says. scripts/gpu_subset_times.estimate turns the measured CPU seconds into a GPU estimate. The real
folders' selection and estimates are checked by test_gpu_check.py's dry run.
"""
import importlib.util
import os
from types import SimpleNamespace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAYER = os.path.join(ROOT, "tests", "runtime_python", "foo")


def load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


conftest = load("tests/conftest.py", "_mpk_conftest_under_test")
times = load("scripts/gpu_subset_times.py", "_mpk_gpu_subset_times")


class Item:
    """What gpu_subset and skip_other_blocks read of a pytest item."""

    def __init__(self, file: str, name: str, params: dict | None = None, quick: bool = False):
        self.path, self.originalname, self.quick, self.marks = os.path.join(LAYER, file), name, quick, []
        if params is not None:
            self.callspec = SimpleNamespace(params=params)
        self.nodeid = f"{file}::{name}{sorted(params.items()) if params else ''}"

    def get_closest_marker(self, name: str):
        return object() if name == "quick" and self.quick else None

    def add_marker(self, mark) -> None:
        self.marks.append(mark)


def items() -> list[Item]:
    kernel = [Item("test_foo.py", "test_kernel", {"case": c, "target_cc": cc}, quick=(c, cc) == ("B", 80))
              for c in "ABCD" for cc in (80, 90)]
    return kernel + [Item("test_foo.py", "test_refuses"),
                     Item("test_foo_testmode.py", "test_graph", {"case": 1}),
                     Item("test_foo_testmode.py", "test_graph", {"case": 2}),
                     Item("test_foo_testmode.py", "test_graph", {"case": 3}),
                     Item(os.path.join("..", "test_mode", "test_x.py"), "test_other")]


def names(chosen) -> list[str]:
    return [f"{it.originalname}[{','.join(map(str, it.callspec.params.values()))}]" if hasattr(it, "callspec")
            else it.originalname for it in chosen]


def test_the_subset_is_the_edges_and_the_quick_case():
    at90 = names(conftest.gpu_subset(items(), 90))
    assert at90 == ["test_kernel[A,90]", "test_kernel[B,90]", "test_kernel[D,90]", "test_refuses",
                    "test_graph[1]", "test_graph[3]", "test_other"], at90
    at80 = names(conftest.gpu_subset(items(), 80))
    assert at80[:3] == ["test_kernel[A,80]", "test_kernel[B,80]", "test_kernel[D,80]"], at80
    print(f"GPU_SUBSET cc90 keeps {len(at90)} of {len(items())}: {at90} PASS")


def test_a_subset_blind_to_the_worker_block_is_caught(monkeypatch):
    """Negative control: a selection that ignores target_cc keeps a case at the other block."""
    monkeypatch.setattr(conftest, "other_block", lambda item, cc: None)
    broken = names(conftest.gpu_subset(items(), 90))
    assert broken[:3] != ["test_kernel[A,90]", "test_kernel[B,90]", "test_kernel[D,90]"], broken
    assert "test_kernel[A,80]" in broken


def test_on_cuda_the_other_worker_block_is_skipped_saying_why():
    chosen = items()
    assert conftest.skip_other_blocks(chosen, 90) == 4
    skipped = [it for it in chosen if it.marks]
    assert names(skipped) == [f"test_kernel[{c},80]" for c in "ABCD"], names(skipped)
    reason = skipped[0].marks[0].kwargs["reason"]
    assert "device's worker block (256 threads, cc 90)" in reason and "128-thread block of target_cc 80" \
        in reason and "CPU backend" in reason, reason
    assert conftest.skip_other_blocks(items(), 86) == 4          # Ampere: the 90 cases go
    print(f"GPU_SKIP cc90: 4 of {len(chosen)} skipped: {reason} PASS")


def test_without_a_gpu_the_compute_capability_must_be_named(monkeypatch):
    monkeypatch.setenv("MPK_TEST_DEVICE", "cpu")
    monkeypatch.delenv("MPK_TEST_CC", raising=False)
    assert conftest.gpu_cc() is None
    monkeypatch.setenv("MPK_TEST_CC", "90")
    assert conftest.gpu_cc() == 90
    config = SimpleNamespace(hook=SimpleNamespace(pytest_deselected=lambda items: None))
    monkeypatch.delenv("MPK_TEST_CC")
    monkeypatch.setenv("MPK_GPU_SUBSET", "1")
    with pytest.raises(pytest.UsageError, match="set MPK_TEST_CC"):
        conftest.pytest_collection_modifyitems(config, items())


def test_the_estimate_is_the_factor_times_the_cpu_seconds_plus_the_start():
    data = {"start_s": 2.0, "tests": {"tests/runtime_python/foo/test_foo.py::a": 1.0,
                                      "tests/runtime_python/foo/test_foo.py::b": 2.0,
                                      "tests/runtime_python/bar/test_bar.py::c": 5.0}}
    ids = ["tests/runtime_python/foo/test_foo.py::a", "tests/runtime_python/foo/test_foo.py::b",
           "tests/runtime_python/foo/test_foo.py::new"]
    seconds, how = times.estimate("foo", ids, 1.0, data)
    # a, b and the unmeasured one at foo's slowest (2 s): 5 s of CPU; the process: start 2 + collection 1
    assert seconds == pytest.approx(times.FACTOR * (5.0 + 2.0 + 1.0) + times.CUDA_START_S), (seconds, how)
    assert "1 not measured, counted at 2.0 s each" in how, how
    seconds, how = times.estimate("baz", ["tests/runtime_python/baz/test_baz.py::x"], 0.0, data)
    assert seconds == pytest.approx(times.FACTOR * (5.0 + 2.0) + times.CUDA_START_S), how   # slowest of all
