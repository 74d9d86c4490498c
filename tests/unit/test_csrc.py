"""The C++ tests of the runtime protocol, the SIMT emulation and the CPU kernels, run from pytest.

The runtime test (and test_guard.cpp, the guard-page handler) also runs under ThreadSanitizer
and AddressSanitizer+UBSan, and with 2-slot queues (the blocking-push path); each build prints one
line per check. The SIMT test
(csrc/runtime/simt_cpu.h; docs/simt.md) runs plain, with the ucontext switch, under TSan (a
missing barrier must be a TSan report, its fixed kernel clean) and under ASan+UBSan (raw
shared/global overflows must be ASan reports); plain also runs the static __shared__ poison's negative
control, and refuse checks that a task kernel reading blockIdx / gridDim does not compile; ptx runs
the tensor-core and cp.async test (tests/csrc/test_ptx.cpp), the mbarrier test (test_mbarrier.cpp) and the
TMA test (test_tma.cpp) and the wgmma test (test_wgmma.cpp) plain, under TSan and under ASan+UBSan.
"""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _run(script: str, *args: str) -> str:
    proc = subprocess.run(["bash", os.path.join(ROOT, "tests", "csrc", script), *args],
                          capture_output=True, text=True, timeout=600)
    print(proc.stdout[-3000:])
    assert proc.returncode == 0, (f"{script} {args} failed (exit {proc.returncode}):\n"
                                  f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout + proc.stderr


@pytest.mark.parametrize("mode", ["plain", "small", "thread", "address"])
def test_runtime_protocol(mode):
    out = _run("run_runtime_tests.sh", mode)
    assert "All runtime tests passed: 0 failure(s)" in out
    assert "All guard tests passed: " in out          # tests/csrc/test_guard.cpp (runtime/guard.h)
    assert "WARNING: ThreadSanitizer" not in out and "ERROR: AddressSanitizer" not in out
    assert "runtime error:" not in out      # UBSan


def test_cpu_kernels():
    out = _run("run_kernel_tests.sh")
    assert "All kernel checks passed" in out


@pytest.mark.parametrize("mode", ["plain", "ucontext", "thread", "address", "refuse", "ptx"])
def test_simt_emulation(mode):
    out = _run("run_simt_tests.sh", mode)
    if mode == "ptx":  # test_ptx, test_mbarrier, test_tma, test_wgmma (.cpp): plain, TSan, ASan+UBSan
        assert out.count("All ptx tests passed: 0 failure(s)") == 3
        assert out.count("All mbarrier tests passed: 0 failure(s)") == 3
        assert out.count("All tma tests passed: 0 failure(s)") == 3
        assert out.count("All wgmma tests passed: 0 failure(s)") == 3
        assert "WARNING: ThreadSanitizer" not in out and "ERROR: AddressSanitizer" not in out
        assert "runtime error:" not in out
        return
    if mode == "refuse":   # blockIdx / gridDim in a task kernel do not compile (refuse_blockidx.cu)
        assert out.count("PASS refuse-") == 4
        return
    assert "All simt tests passed: 0 failure(s)" in out
    if mode == "plain":    # the static __shared__ poison's negative control fails without it
        assert "PASS static-poison-off" in out and "PASS static-poison-on" in out
    assert "runtime error:" not in out      # UBSan
    if mode == "thread":   # the suite is report-free; the controls' reports are checked by the script
        assert out.count("PASS tsan-") == 3
    if mode == "address":
        assert "ERROR: AddressSanitizer" not in out.split("PASS asan-")[0]
        assert out.count("PASS asan-") == 2
