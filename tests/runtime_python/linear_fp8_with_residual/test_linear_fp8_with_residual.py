"""linear_fp8_with_residual: the kernel alone (testing.run_tasks; docs/kernel_tests.md), on linear_fp8.cuh's
kernel with the residual added in fp32 before the rounding.

The cases, checks and negative controls of tests/runtime_python/linear_fp8/test_linear_fp8.py (which
states them), with a residual [B, N] in the output's dtype, against this folder's pytorch_reference; and a
kernel that drops the residual fails.

Run: python tests/runtime_python/linear_fp8_with_residual/test_linear_fp8_with_residual.py   (or pytest)
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

ref = testing.load_reference(__file__)
plain = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "linear_fp8", "_"),
                               "test_linear_fp8")


@pytest.mark.parametrize("target_cc", plain.TARGETS)
@pytest.mark.parametrize("dtype", plain.DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("batch,k,n,grid,coords", plain.SHAPES)
def test_linear_fp8_with_residual_kernel(dtype, batch, k, n, grid, coords, target_cc):
    plain.run_kernel(dtype, plain.inputs(batch, k, n, residual=True, dtype=dtype), grid, coords, target_cc,
                     reference=ref)


@pytest.mark.quick     # the layer's case in the quick subset and the kernel sanitizer runs
@pytest.mark.parametrize("target_cc", plain.TARGETS)
def test_linear_fp8_with_residual_kernel_strided(target_cc):
    d = plain.inputs(4, 256, 24, residual=True, x_stride=768)
    plain.run_kernel(torch.bfloat16, d, 3, None, target_cc, reference=ref)


CONTROLS = plain.CONTROLS + [("if (residual) sum +=", "if (false) sum +=", "drops the residual")]


@pytest.mark.parametrize("old,new,what", CONTROLS, ids=[c[2].replace(" ", "_") for c in CONTROLS])
def test_linear_fp8_with_residual_negative_controls(old, new, what, tmp_path):
    plain.negative_control(tmp_path, old, new, residual=True, reference=ref)


@pytest.mark.parametrize("change,message", plain.BAD_SHAPES + [({"out": (3, 16)}, "")],
                         ids=[str(b[0]) for b in plain.BAD_SHAPES] + ["ok"])
def test_linear_fp8_with_residual_bad_shapes(change, message):
    if not message:     # the defaults build: the residual is accepted in the output's shape
        from mirage.mpk.persistent_kernel import PersistentKernel
        pk = PersistentKernel(**testing.cpu_config())
        plain.attach(pk, residual=True)
        assert pk.layers[0].kind == "linear_fp8_with_residual"
        pk.finalize()
        return
    plain.bad_shape_is_refused(change, message, residual=True)


if __name__ == "__main__":
    testing.run_pytest_file_as_script(__file__, sys.argv[1:])
