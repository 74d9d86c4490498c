"""moe_w2_fp8_layer in test mode: real generated code, several workers, schedule jitter.

The cases and checks of tests/runtime_python/moe_w13_fp8/test_moe_w13_fp8_testmode.py (which states
them), run with w2=True against this folder's pytorch_reference: input [B, topk, K] codes with their
[B, topk, K / block] scales, one input row per (token, slot).

Run: python tests/runtime_python/moe_w2_fp8/test_moe_w2_fp8_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/moe_w2_fp8/test_moe_w2_fp8_testmode.py
     (one 4-rank job: row-parallel as moe_w2_linear (layers/moe_w2_fp8.py TP): every rank quantizes the
     same unsharded data and keeps columns [r*K/W, (r+1)*K/W) of the input's and every expert's codes and
     their scales (whole blocks); its partial sums against its own reference, then a second kernel's
     allreduce of them against the unsharded product, as moe_w2_linear's test does)
"""
import functools
import os

import pytest

from mirage.mpk import testing

ref = testing.load_reference(__file__)
W13 = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "moe_w13_fp8", "_"),
                             "test_moe_w13_fp8_testmode")
DTYPES, CASES = W13.DTYPES, W13.CASES
run_case = functools.partial(W13.run_case, w2=True, reference=ref)


def _jitter(dtype, case) -> int:
    return 9 + 10 * CASES.index(case) + DTYPES.index(dtype)    # a different schedule per case


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=W13.case_id)
def test_moe_w2_fp8(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


@pytest.mark.parametrize("spoil,message", W13.BAD_ROUTING, ids=[b[0] for b in W13.BAD_ROUTING])
def test_moe_w2_fp8_bad_routing(spoil, message, tmp_path):
    W13.bad_routing_is_named(spoil, message, tmp_path, w2=True)


if __name__ == "__main__":
    testing.run_cases_as_script("moe_w2_fp8", run_case, DTYPES, CASES, _jitter)
