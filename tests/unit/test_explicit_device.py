"""Every torch factory call in mirage/ names its device (issue 31, item 5).

A factory call without `device=` puts its tensor on torch's default device, which the GPU check sets to
CUDA (tests/conftest.py, MPK_TEST_DEVICE): host bookkeeping made that way (Layer.live's masks) met CPU
tensors and every kernel-level test of a `live` layer raised a device mismatch on the GPU. This is the
static half: every call, run or not, is read (tests/runtime_python/test_mode/test_default_device.py runs
the live layers with another default device). Negative control: a call without a device is named.
"""
import ast
import os

import torch.utils._device

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# torch's own list of the functions torch.set_default_device fills the device of (zeros, arange, tensor...)
FACTORIES = {f.__name__ for f in torch.utils._device._device_constructors()}


def undeviced(source: str, path: str) -> list[str]:
    """`path:line torch.<factory>` for each `torch.<factory>(...)` call in `source` without device=."""
    found = []
    for node in ast.walk(ast.parse(source, path)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in FACTORIES and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)):
            found.append(f"{path}:{node.lineno} torch.{node.func.attr}")
    return found


def test_every_factory_call_in_the_library_names_its_device():
    files = [os.path.join(d, f) for d, _, fs in os.walk(os.path.join(ROOT, "mirage")) for f in fs
             if f.endswith(".py")]
    calls, bad = 0, []
    for path in files:
        source = open(path).read()
        rel = os.path.relpath(path, ROOT)
        calls += sum(source.count(f"torch.{f}(") for f in FACTORIES)
        bad += undeviced(source, rel)
    print(f"EXPLICIT_DEVICE {len(files)} files of mirage/, {calls} torch factory calls, {len(bad)} without "
          f"device= {'PASS' if not bad else 'FAIL'}")
    assert not bad, "factory calls on torch's default device (give each the tensors' device): " + \
        "; ".join(bad)


def test_a_factory_call_without_a_device_is_named():
    source = ("import torch\n\n\ndef live(meta, rows):\n    ok = torch.zeros(rows, device='cpu')\n"
              "    pos = torch.arange(rows)\n    return torch.as_tensor(1.0, dtype=torch.float64)\n")
    assert undeviced(source, "layers/x.py") == ["layers/x.py:6 torch.arange", "layers/x.py:7 torch.as_tensor"]
