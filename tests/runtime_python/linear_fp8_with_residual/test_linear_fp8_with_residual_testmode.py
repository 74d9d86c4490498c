"""linear_fp8_with_residual_layer in test mode: quantize_fp8_layer(scale_ue8m0=True) then the linear with
its residual, in one graph; several workers, schedule jitter.

The cases and checks of tests/runtime_python/linear_fp8/test_linear_fp8_testmode.py (which states them),
with a residual [B, N] in the output's dtype added before the rounding, against this folder's
pytorch_reference.

Run: python tests/runtime_python/linear_fp8_with_residual/test_linear_fp8_with_residual_testmode.py
     mpirun -n 4 python <that file>
     (one 4-rank job: column-parallel (layers/linear_fp8_with_residual.py TP): every rank quantizes the same
     activations, keeps rows [r*N/W, (r+1)*N/W) of the weight's codes and words and adds those columns of
     the residual; testing.run_cases_as_script)
"""
import os

import pytest

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
plain = testing.load_reference(os.path.join(os.path.dirname(__file__), "..", "linear_fp8", "_"),
                               "test_linear_fp8_testmode")
DTYPES, CASES = plain.DTYPES, plain.CASES


def run_case(dtype, batch, k, n, grid, jitter=0, output_dir=None, world=testing.ONE_RANK):
    d = plain.kernel_test.inputs(batch, k, n, residual=True, dtype=dtype)      # the same on every rank
    d["x"] = d["x"].to(dtype).float()
    qw, w = world.shard("weight", d["qw"]), world.shard("weight", d["w"])
    sw = world.shard("weight", d["sw"].T.contiguous()).T.contiguous()
    r = world.shard("output", d["r"])                  # this rank's columns of the residual
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **world.params))
    cols = max(g for g in range(1, grid + 1) if qw.shape[0] % g == 0)        # divides the local N
    o = plain.build(pk, dtype, {**d, "qw": qw, "sw": sw}, cols, residual=r)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = (f"linear_fp8_with_residual[{str(dtype)[6:]},{batch}x{k}->{n},grid={pk.layers[1].grid},"
            f"jitter={jitter}{world.tag}]")
    exact = world.shard("output", d["x"].double() @ d["w"].double().T + d["r"].double())
    plain.check(name, pk, dtype, d["x"], o, qw, sw, w, exact, residual=r, reference=ref)
    return pk


def _jitter(dtype, case) -> int:
    return 5 + 10 * CASES.index(case) + DTYPES.index(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_linear_fp8_with_residual(dtype, case, tmp_path):
    run_case(dtype, *case, jitter=_jitter(dtype, case), output_dir=str(tmp_path))


if __name__ == "__main__":
    testing.run_cases_as_script("linear_fp8_with_residual", run_case, DTYPES, CASES, _jitter)
