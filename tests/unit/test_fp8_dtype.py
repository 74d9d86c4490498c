"""The fp8 element type (csrc/runtime/dtypes.h, fp8_e4m3_t) on the CPU backend against torch.float8_e4m3fn.

A harness built from the header with the CPU backend's compiler decodes all 256 codes and encodes a
sweep of floats: every fp8 value, every tie between neighbours (ties go to even), the floats just
either side of each tie, the subnormals and their ties, zeros, and 200,000 random floats spread over
every binade from 2^-12 to 512, both signs. Below 480 the codes must equal torch's cast bit for bit;
from 448 up (inf too) the header saturates to +-448 as CUDA's __nv_fp8_e4m3 does, where torch gives
NaN from 480; NaN encodes as 0x7F. Negative control: the same harness over a scratch copy of the header
whose normal-range rounding is half-up instead of half-to-even fails, at the ties and only there.
Run: pytest tests/unit/test_fp8_dtype.py -s
"""
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from mirage.mpk import build, testing
from mirage.mpk.dtypes import float8_e4m3, to_dtype

CXX = os.environ.get("MPK_CXX", "g++")
pytestmark = pytest.mark.skipif(shutil.which(CXX) is None, reason=f"{CXX} is not installed")
HARNESS = r"""
#include <stdio.h>
#include <vector>
#include "runtime/dtypes.h"
int main() {   // stdin: n floats; stdout: to_float of the 256 codes, then the n codes of from_float
    std::vector<float> in;
    float f;
    while (fread(&f, 4, 1, stdin) == 1) in.push_back(f);
    for (int c = 0; c < 256; ++c) {
        const float v = mpk::to_float(mpk::fp8_e4m3_t{static_cast<uint8_t>(c)});
        fwrite(&v, 4, 1, stdout);
    }
    for (float x : in) {
        const uint8_t code = mpk::from_float<mpk::fp8_e4m3_t>(x).bits;
        fwrite(&code, 1, 1, stdout);
    }
}
"""
ROUND_EVEN = "((a + 0x7FFFFu + ((a >> 20) & 1)) >> 20)"


def harness(folder, csrc: str):
    src, exe = os.path.join(folder, "fp8.cpp"), os.path.join(folder, "fp8")
    with open(src, "w") as f:
        f.write(HARNESS)
    subprocess.run([CXX, "-std=c++17", "-O2", "-I", csrc, src, "-o", exe], check=True)

    def run(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = subprocess.run([exe], input=x.float().numpy().tobytes(), capture_output=True, check=True).stdout
        decoded = torch.from_numpy(np.frombuffer(out[:1024], dtype=np.float32).copy())
        return decoded, torch.from_numpy(np.frombuffer(out[1024:], dtype=np.uint8).copy())
    return run


def sweep() -> tuple[torch.Tensor, torch.Tensor]:
    """The floats to encode, and which of them are ties between two fp8 neighbours."""
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    values = codes[torch.isfinite(codes) & (codes >= 0)].unique().sort().values.double()     # 0 .. 448
    ties = (values[1:] + values[:-1]) / 2
    ulp = torch.nextafter(ties.float(), torch.tensor(float("inf"))) - ties.float()
    g = testing.generator(20261202)
    mags = torch.exp2(torch.empty(200_000, dtype=torch.float64).uniform_(-12, 9, generator=g))
    signs = torch.where(torch.rand(200_000, generator=g) < 0.5, -1.0, 1.0)
    pos = torch.cat([values, ties, ties - ulp, ties + ulp, torch.tensor([0.0, 2.0**-10, 2.0**-9 * 1.5, 448.0,
                     460.0, 464.0, 479.9, 480.0, 1e4, float("inf")], dtype=torch.float64)]).float()
    x = torch.cat([pos, -pos, (mags * signs).float()])
    return x, torch.isin(x.abs(), ties.float())     # a random float can be a tie too


def expected(x: torch.Tensor) -> torch.Tensor:
    """torch's codes below 480; the header's saturation (CUDA's) from 448 up, where torch says NaN."""
    want = x.to(torch.float8_e4m3fn).view(torch.uint8).clone()
    big = x.abs() >= 448
    want[big] = torch.where(x[big] > 0, 0x7E, 0xFE).to(torch.uint8)
    return want


def mismatches(got: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return (got != expected(x)).nonzero().flatten()


def test_fp8_is_in_the_dtype_table():
    assert to_dtype(torch.float8_e4m3fn) is float8_e4m3 and to_dtype("float8_e4m3") is float8_e4m3
    assert float8_e4m3.itemsize == 1 and float8_e4m3.unit_roundoff == 2.0**-4 and float8_e4m3.is_float


def test_fp8_codes_match_torch_bit_for_bit(tmp_path):
    run = harness(str(tmp_path), build.csrc_dir())
    x, _ = sweep()
    decoded, got = run(torch.cat([x, torch.tensor([float("nan"), -float("nan")])]))
    want_dec = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    nan = torch.isnan(want_dec)
    bad_dec = ((decoded != want_dec) & ~nan) | (torch.isnan(decoded) != nan)
    bad = mismatches(got[:-2], x)
    print(f"FP8 decode: 256 codes, {int(bad_dec.sum())} differ from torch; encode: {len(x)} floats "
          f"(ties, their neighbours, subnormals, 2^-12..512 both signs), {len(bad)} differ "
          f"{'PASS' if not len(bad) and not bad_dec.any() else 'FAIL'}")
    assert not bad_dec.any(), f"codes {bad_dec.nonzero().flatten().tolist()} decode differently"
    assert not len(bad), f"{len(bad)} floats, e.g. {x[bad[:5]].tolist()} -> {got[bad[:5]].tolist()}, " \
        f"want {expected(x)[bad[:5]].tolist()}"
    assert got[-2:].tolist() == [0x7F, 0x7F], "NaN encodes as 0x7F"
    saturated = run(torch.tensor([448.0, 500.0, float("inf"), -float("inf")]))[1].tolist()
    assert saturated == [0x7E, 0x7E, 0x7E, 0xFE], saturated


def test_round_half_up_is_caught(tmp_path):
    """Negative control: half-up rounding in the normal range differs from torch at the ties only."""
    csrc = str(tmp_path / "csrc")
    shutil.copytree(build.csrc_dir(), csrc)
    path = os.path.join(csrc, "runtime", "dtypes.h")
    text = open(path).read()
    assert text.count(ROUND_EVEN) == 1, "dtypes.h changed: update the negative control"
    with open(path, "w") as f:
        f.write(text.replace(ROUND_EVEN, "((a + 0x80000u) >> 20)"))
    x, is_tie = sweep()
    bad = mismatches(harness(str(tmp_path), csrc)(x)[1], x)
    print(f"FP8 negative control (half-up): {len(bad)} of {int(is_tie.sum())} ties differ, "
          f"{int((~is_tie[bad]).sum())} non-ties")
    assert len(bad) > 0 and is_tie[bad].all(), "half-up rounding went unseen, or differed off the ties"
