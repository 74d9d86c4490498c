"""The `live` layers run whatever torch's default device is (issue 31, item 5).

The GPU check sets torch's default device to CUDA (tests/conftest.py, MPK_TEST_DEVICE); the library made
its host bookkeeping (Layer.live's masks, the harness's tile masks) on the default device, so on the GPU
CPU and CUDA tensors met and every kernel-level test of a layer with Layer.live, and paged attention's test
mode, raised a device mismatch. Here the library's default device is "meta" (neither the tensors' device nor
any real one: a tensor made there and used with real ones raises) while each layer's kernel-level quick
case and one test-mode case run: paged attention, its split-KV and merge, a MoE linear, UE8M0 quantize.

How the default is set: LibraryDefault does what torch.set_default_device does (a TorchFunctionMode filling
in the device of a factory call that names none), for the calls made from mirage/ only. The tests' own code
(inputs, references, tests/runtime_python/*) follows the default device by design (that is how the GPU check
puts its inputs on the GPU), so it keeps the CPU here. Every call the mode defaulted is recorded: the test
asserts there is none, besides the runs passing. The static half (every factory call in mirage/ read, run or
not) is tests/unit/test_explicit_device.py. Negative control: live_parts with its `device="cpu"` removed from
one torch.arange (the original bug) fails, and the record names the file and line.
"""
import os
import sys

import pytest
import torch
import torch.utils._device
from torch.overrides import TorchFunctionMode

import mirage
from mirage.mpk import testing
from mirage.mpk.layers import paged_attention

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LIBRARY = os.path.dirname(os.path.abspath(mirage.__file__)) + os.sep
TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
FACTORIES = torch.utils._device._device_constructors()


class LibraryDefault(TorchFunctionMode):
    """torch.set_default_device(device) for factory calls made from mirage/; the test's own calls get
    the CPU. `defaulted` lists each library call that named no device ("path:line torch.name")."""

    def __init__(self, device: str):
        super().__init__()
        self.device, self.defaulted = torch.device(device), []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func in FACTORIES and kwargs.get("device") is None:
            frame = sys._getframe(1)
            while frame is not None and frame.f_code.co_filename.startswith(TORCH):
                frame = frame.f_back                # the caller, past torch's own Python wrappers
            path = frame.f_code.co_filename if frame is not None else ""
            if path.startswith(LIBRARY):
                kwargs["device"] = self.device
                self.defaulted.append(f"{os.path.relpath(path, ROOT)}:{frame.f_lineno} torch.{func.__name__}")
            else:
                kwargs["device"] = "cpu"
        return func(*args, **kwargs)


def folder_test(folder: str, name: str):
    """tests/runtime_python/<folder>/<name>.py as a module (loaded by path, as its folder's tests do)."""
    return testing.load_reference(os.path.join(ROOT, "tests", "runtime_python", folder, "x.py"), name=name)


def kernel_cases():
    """(label, run): each live layer's kernel-level quick case, at the 128-thread block."""
    pa = folder_test("paged_attention", "test_paged_attention")
    skv = folder_test("paged_attention_split_kv", "test_paged_attention_split_kv")
    merge = folder_test("paged_attention_split_kv_merge", "test_paged_attention_split_kv_merge")
    w13 = folder_test("moe_w13_linear", "test_moe_w13_linear")
    q = folder_test("quantize_fp8", "test_quantize_fp8")
    return [
        ("paged_attention", lambda: pa.run_case(*pa.QUICK[0], 80)),
        ("paged_attention_split_kv", lambda: skv.test_paged_attention_split_kv_kernel(*skv.QUICK)),
        ("paged_attention_split_kv_merge",
         lambda: merge.test_paged_attention_split_kv_merge_kernel(*merge.QUICK)),
        ("moe_w13_linear", lambda: w13.test_moe_w13_linear_kernel(torch.bfloat16, *w13.SHAPES[0], 80)),
        ("quantize_fp8_ue8m0", lambda: q.test_kernel_ue8m0(torch.bfloat16, *q.SHAPES[0], 80)),
    ]


def graph_cases(tmp_path):
    """(label, run): one test-mode pk() of each live layer (its live parts checked after the pass)."""
    pa = folder_test("paged_attention", "test_paged_attention_testmode")
    skv = folder_test("paged_attention_split_kv", "test_paged_attention_split_kv_testmode")
    merge = folder_test("paged_attention_split_kv_merge", "test_paged_attention_split_kv_merge_testmode")
    w13 = folder_test("moe_w13_linear", "test_moe_w13_linear_testmode")
    q = folder_test("quantize_fp8", "test_quantize_fp8_testmode")
    return [
        ("paged_attention", lambda: pa.test_paged_attention(torch.bfloat16, pa.CASES[1])),
        ("paged_attention_split_kv", lambda: skv.test_paged_attention_split_kv(torch.bfloat16, skv.CASES[0])),
        ("paged_attention_split_kv_merge",
         lambda: merge.test_paged_attention_split_kv_merge(torch.bfloat16, merge.CASES[0])),
        ("moe_w13_linear", lambda: w13.test_moe_w13_linear(torch.bfloat16, w13.CASES[0], tmp_path)),
        ("quantize_fp8_ue8m0", lambda: q.test_quantize_fp8_ue8m0(5, 640, 5)),
    ]


def run_on_meta(label: str, run) -> None:
    with LibraryDefault("meta") as mode:
        run()
    testing.say(f"DEFAULT_DEVICE {label}: ran with the library's default device 'meta', the tensors on the "
                f"CPU; {len(mode.defaulted)} library factory call(s) without a device "
                f"{'PASS' if not mode.defaulted else 'FAIL'}")
    assert not mode.defaulted, f"{label}: factory calls on the default device: {sorted(set(mode.defaulted))}"


def test_kernel_level_runs_of_the_live_layers_ignore_the_default_device():
    for label, run in kernel_cases():
        run_on_meta(f"{label}[kernel]", run)


def test_test_mode_runs_of_the_live_layers_ignore_the_default_device(tmp_path):
    for label, run in graph_cases(tmp_path):
        run_on_meta(f"{label}[test mode]", run)


def test_a_live_mask_on_the_default_device_fails(monkeypatch):
    """Negative control: live_parts as it was (torch.arange without a device): the kernel-level run
    raises on the meta tensor meeting the CPU ones, and the record names the line."""
    path = paged_attention.__file__
    source = open(path).read()
    fixed = 'pos = torch.arange(max(min(s, len(pages) * page_size), 0), device="cpu")'
    assert source.count(fixed) == 1, "paged_attention.live_parts changed: update the control"
    namespace = dict(vars(paged_attention))
    exec(compile(source.replace(fixed, fixed.replace(', device="cpu"', "")), path, "exec"), namespace)
    monkeypatch.setattr(paged_attention, "live_parts", namespace["live_parts"])
    label, run = kernel_cases()[0]
    with pytest.raises(Exception) as e, LibraryDefault("meta") as mode:
        run()
    line = source[:source.index(fixed)].count("\n") + 1
    assert f"mirage/mpk/layers/paged_attention.py:{line} torch.arange" in mode.defaulted, mode.defaulted
    testing.say(f"DEFAULT_DEVICE control: live_parts' torch.arange without a device fails the {label} run: "
                f"{type(e.value).__name__}: {str(e.value).splitlines()[0][:120]}; recorded "
                f"{mode.defaulted[0]} PASS")
