"""The persistent kernel's launch resources, checked before a GPU sees them (docs/runtime.md, "Launch
resources").

nvcc builds a generated module that dispatches every kernel instantiation the code generator can
emit (every layer kind x dtype: the most static shared memory and registers any graph's persistent
kernel can have) for sm_80, sm_90a and sm_100a in test mode, as `compile()` builds it but for the
one-task launcher (tests/unit/every_variant.py: the build this file shares with test_nvcc.py's
per-kernel budgets, once per architecture per run). ptxas's report of `persistent_kernel` (registers
per thread, static shared memory) and the launch the host would make on each architecture's reference
GPU (A100, H100/H200, B200: MPK's worker and scheduler counts for its SMs,
`PersistentKernel.worker_threads` threads, WORKER_SMEM_BYTES of dynamic shared memory) go through
csrc/runtime/launch_plan.h, the decision host_cuda.h makes before its first launch. The test then
holds that decision to CUDA's rules, written out here independently of the header:
  - static + dynamic shared memory of a block <= 48 KiB unless the plan opts in, and <= the
    architecture's opt-in maximum when it does; static alone <= 48 KiB;
  - registers x threads of one block within the SM's register file, at most 255 per thread;
  - every CTA co-resident: blocks per SM (by shared memory with the 1 KiB reserved per block,
    registers, threads, block slots) x SMs >= the grid.
A launch that cannot succeed (the default-size opt-in missed, co-residency impossible) is a failing
test here. A negative control feeds the header a block that cannot fit and one that needs opt-in.
Skips, saying so, where nvcc or a host compiler is absent. Run: pytest tests/unit/test_launch_plan.py -s
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

import mirage
from mirage.mpk import build, testing
from mirage.mpk.persistent_kernel import WORKER_SMEM_BYTES

NVCC = shutil.which("nvcc")
CXX = shutil.which("g++")
pytestmark = pytest.mark.skipif(NVCC is None or CXX is None, reason="nvcc or g++ is not installed: the "
                                "CUDA build of the persistent kernel cannot be checked here")
HERE = os.path.dirname(os.path.abspath(__file__))
every_variant = testing.load_reference(__file__, name="every_variant")
KIB = 1024
# The reference GPU of each architecture (CUDA programming guide, "Compute capabilities"; SM counts of
# the A100 SXM, H100/H200 SXM, B200).
ARCHS = {
    "sm_80": dict(cc=80, sms=108, smem_per_block=48 * KIB, smem_per_block_optin=163 * KIB,
                  smem_per_sm=164 * KIB, smem_reserved_per_block=1 * KIB, regs_per_sm=65536,
                  max_threads_per_sm=2048, max_blocks_per_sm=32),
    "sm_90a": dict(cc=90, sms=132, smem_per_block=48 * KIB, smem_per_block_optin=227 * KIB,
                   smem_per_sm=228 * KIB, smem_reserved_per_block=1 * KIB, regs_per_sm=65536,
                   max_threads_per_sm=2048, max_blocks_per_sm=32),
    "sm_100a": dict(cc=100, sms=148, smem_per_block=48 * KIB, smem_per_block_optin=227 * KIB,
                    smem_per_sm=228 * KIB, smem_reserved_per_block=1 * KIB, regs_per_sm=65536,
                    max_threads_per_sm=2048, max_blocks_per_sm=32),
}
LIMIT_KEYS = ["sms", "smem_per_block", "smem_per_block_optin", "smem_per_sm", "smem_reserved_per_block",
              "regs_per_sm", "max_threads_per_sm", "max_blocks_per_sm"]


@pytest.fixture(scope="module")
def plan_command(tmp_path_factory) -> str:
    exe = str(tmp_path_factory.mktemp("plan") / "launch_plan_main")
    subprocess.run([CXX, "-std=c++17", "-O1", "-I", build.csrc_dir(), os.path.join(HERE, "..", "csrc",
                    "launch_plan_main.cpp"), "-o", exe], check=True)
    return exe


def plan(command: str, static_smem: int, registers: int, threads: int, dynamic: int, grid: int,
         limits: dict) -> dict:
    args = [static_smem, registers, threads, dynamic, grid, *(limits[k] for k in LIMIT_KEYS)]
    return json.loads(subprocess.run([command, *map(str, args)], capture_output=True, text=True,
                                     check=True).stdout)


def cuda_rules(static_smem: int, registers: int, threads: int, dynamic: int, grid: int, limits: dict,
               opt_in: bool) -> list[str]:
    """What CUDA refuses about this launch, independently of launch_plan.h."""
    wrong = []
    block = static_smem + dynamic
    if static_smem > 48 * KIB:
        wrong.append(f"static shared memory {static_smem} B > 48 KiB")
    if not opt_in and block > limits["smem_per_block"]:
        wrong.append(f"{block} B of shared memory per block without opt-in (> {limits['smem_per_block']} B): "
                     f"the launch fails (or occupancy is 0)")
    if block > limits["smem_per_block_optin"]:
        wrong.append(f"{block} B of shared memory per block > the opt-in maximum "
                     f"{limits['smem_per_block_optin']}")
    if registers > 255 or registers * threads > limits["regs_per_sm"]:
        wrong.append(f"{registers} registers x {threads} threads do not fit one SM")
    per_warp = -(-registers // 8) * 8 * 32
    blocks = min(limits["max_blocks_per_sm"], limits["max_threads_per_sm"] // threads,
                 limits["regs_per_sm"] // per_warp // (threads // 32),
                 limits["smem_per_sm"] // (block + limits["smem_reserved_per_block"]))
    if blocks * limits["sms"] < grid:
        wrong.append(f"{grid} CTAs cannot be co-resident: {blocks} per SM x {limits['sms']} SMs")
    return wrong


@pytest.fixture(scope="module")
def usage() -> dict[str, dict[str, int]]:
    """arch -> registers and static shared memory of persistent_kernel, from the every-variant build."""
    archs = every_variant.supported_archs()
    found = {}
    for arch, report in every_variant.ptxas_reports(archs).items():
        kernels = [p for name, p in report.items() if name.startswith("void mpk::cuda::persistent_kernel<")]
        assert len(kernels) == 1, f"{arch}: ptxas reported {len(kernels)} persistent kernels"
        found[arch] = dict(registers=kernels[0]["registers"], static_smem=kernels[0]["smem"])
    return found


@pytest.mark.parametrize("arch", list(ARCHS))
def test_persistent_kernel_launch_fits_each_architecture(usage, plan_command, arch):
    if arch not in usage:
        pytest.skip(f"this nvcc cannot build {arch}")
    limits, use = ARCHS[arch], usage[arch]
    workers, schedulers = mirage.configuration_for_sms(limits["sms"])
    threads = 256 if limits["cc"] >= 90 else 128            # PersistentKernel.worker_threads
    grid = workers + -(-schedulers // (threads // 32))       # host_cuda.h geometry(): warps run schedulers
    p = plan(plan_command, use["static_smem"], use["registers"], threads, WORKER_SMEM_BYTES, grid, limits)
    wrong = cuda_rules(use["static_smem"], use["registers"], threads, WORKER_SMEM_BYTES, grid, limits,
                       p["opt_in"])
    print(f"LAUNCH {arch}: persistent_kernel {use['registers']} registers, {use['static_smem']} B static + "
          f"{WORKER_SMEM_BYTES} B dynamic smem, {threads} threads, grid {grid} ({workers} workers + "
          f"{schedulers} schedulers) on {limits['sms']} SMs -> plan opt_in={p['opt_in']} "
          f"blocks/SM={p['blocks_per_sm']} ({p['bound']}) fits={p['fits']} {p['why']}; CUDA's rules: "
          f"{'; '.join(wrong) or 'none broken'} {'PASS' if p['fits'] and not wrong else 'FAIL'}")
    assert p["fits"], p["why"]
    assert not wrong, f"{arch}: the host's launch would fail: " + "; ".join(wrong)


def test_plan_refuses_what_cannot_launch(plan_command):
    """Negative controls: the header's verdicts on launches CUDA refuses or must be told about."""
    h100 = ARCHS["sm_90a"]
    over = plan(plan_command, 3184, 128, 256, 228 * KIB, 130, h100)
    assert not over["fits"] and "shared memory" in over["why"], over
    needs = plan(plan_command, 3184, 128, 256, 48 * KIB, 130, h100)
    assert needs["fits"] and needs["opt_in"], needs          # 48 KiB dynamic + static: over the default
    small = plan(plan_command, 3184, 128, 256, 32 * KIB, 130, h100)
    assert small["fits"] and not small["opt_in"], small
    crowded = plan(plan_command, 3184, 255, 256, 48 * KIB, 133, h100)
    assert not crowded["fits"] and "registers" in crowded["why"], crowded
    assert "133 co-resident" in crowded["why"], crowded
    assert cuda_rules(3184, 226, 256, 48 * KIB, 130, h100, opt_in=False), "the rules miss the missing opt-in"
    print("LAUNCH negative controls: over the opt-in maximum, the missing opt-in, too many CTAs: all "
          "refused PASS")
