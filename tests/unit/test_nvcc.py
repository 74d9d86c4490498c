"""nvcc builds the task kernels for the GPU: every instantiation the code generator can emit, and a
generated module (the Qwen3 MLP chain: the dispatcher, the persistent executor of
csrc/runtime/executor.cuh as one cooperative kernel, its CUDA host driver csrc/runtime/host_cuda.h,
and the entry points), for sm_80, sm_90a and sm_100a (where this nvcc has it); and that module
linked as a .so with the static CUDA runtime loads through ctypes without a GPU, where mpk_init
fails with the CUDA error named.

The same .cuh files run on the CPU through the SIMT emulation in every other test; this one proves
they are CUDA that nvcc accepts, and holds each kernel to a resource budget read from
`-Xptxas -v`: no register spills, no local memory beyond STACK_BUDGET (a stack frame means
local-memory traffic in a hot loop), and it prints registers and shared memory per kernel. The
per-kernel budgets read the every-variant build that test_launch_plan.py reads too
(tests/unit/every_variant.py: once per architecture per run).
Skips, saying so, where nvcc is absent. Run: pytest tests/unit/test_nvcc.py -s
"""
import os
import re
import shutil
import subprocess

import pytest
import torch

from mirage.mpk import build, codegen, memcheck, testing
from mirage.mpk.errors import MPKRuntimeError
from mirage.mpk.persistent_kernel import PersistentKernel

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed: the CUDA build of the "
                                "kernels cannot be checked here (the CPU emulation still runs them)")
every_variant = testing.load_reference(__file__, name="every_variant")
# Bytes of stack frame (local memory) a kernel may use: none. (It was 16 for the kernels that can fail a
# task, the printf argument buffer of common.cuh task_fail's error path; task_fail now records its message
# in the view's record without printf, and task_fail_text writes a message with numbers straight into it.)
STACK_BUDGET = 0
# The executor's functions that run off the hot path under the full calling convention: the failure path
# and the message writers of a failure (runtime/text.h's appends, out of line so that no task or protocol
# step carries a copy), and TaskView::wait / ::signal's cross-rank waits. ptxas may spill a few bytes
# there; anything else spilling fails.
COLD_ABI = {"mpk::exec::fail", "mpk::exec::wait_peer", "mpk::exec::signal_peer",
            "mpk::Text::i", "mpk::Text::s"}
COLD_ABI_SPILL_BUDGET = 128
# The persistent kernel's own body (the executor's worker and scheduler loops around the task calls, once
# per task or per message: no task's inner loop). At 255 registers ptxas spills a few bytes there on
# sm_100a (16/16 B of stores/loads in the every-variant build, 24/24 B without its probes; sm_80 and
# sm_90a none), varying with what else the module holds. Which instructions they are needs the SASS
# (cuobjdump / nvdisasm, absent here): a GPU session's to read. Task functions have no allowance.
EXECUTOR_KERNEL = "void mpk::cuda::persistent_kernel<"
EXECUTOR_KERNEL_SPILL_BUDGET = 64
TASK = "void mpk::call_task<"      # the function MPK_RUN_TASK calls under nvcc (runtime/simt.h), demangled


def task_budget_problems(arch: str, report: dict[str, dict]) -> list[str]:
    """Every function's spills against the budget (each as the worst of the kernels ptxas compiled it
    for, persistent_kernel included: every_variant.ptxas_report), and each task function's stack
    frame; the task functions printed."""
    problems = []
    for name, r in sorted(report.items()):
        if "spill_stores" not in r:
            continue
        where = f" (compiled for {r['kernel'].split('(')[0]})" if r.get("kernel") not in (None, name) else ""
        if name.startswith(TASK):
            print(f"NVCC {arch} {name[len(TASK):].split('(')[1]}: {r['stack']} B stack, "
                  f"{r['spill_stores']}/{r['spill_loads']} B spill st/ld{where}")
            if r["stack"] > STACK_BUDGET:
                problems.append(f"{arch} {name}: {r['stack']} B stack frame > budget {STACK_BUDGET} B{where}")
        spills = r["spill_stores"] + r["spill_loads"]
        executor = name.startswith(EXECUTOR_KERNEL)
        budget = (COLD_ABI_SPILL_BUDGET if name.split("(")[0] in COLD_ABI else
                  EXECUTOR_KERNEL_SPILL_BUDGET if executor else 0)
        if executor:
            print(f"NVCC {arch} persistent_kernel: {r.get('registers')} registers, {r['stack']} B stack, "
                  f"{r['spill_stores']}/{r['spill_loads']} B spill st/ld (budget {budget} B)")
        if spills > budget:
            problems.append(f"{arch} {name}: spills {r['spill_stores']}/{r['spill_loads']} B{where}")
    return problems


def test_every_kernel_instantiation_builds_within_budget():
    """Each kernel instantiation as the dispatcher calls it (mpk::call_task<kernel>, a function of its own),
    from the every-variant build shared with test_launch_plan.py (tests/unit/every_variant.py): each
    task function's stack frame and spills, and its probe kernel's registers and static shared memory
    (a probe does nothing but call the task function, so they are the task's)."""
    archs = every_variant.supported_archs()
    problems = []
    for arch, text in every_variant.ptxas_texts(archs).items():
        report = every_variant.ptxas_report(text)
        problems += serialized_wgmma_problems(arch, text)
        for stem, dtype, fn in every_variant.variants():
            probe = report.get(every_variant.probe_name(stem, dtype))
            assert probe is not None, f"no ptxas report for {every_variant.probe_name(stem, dtype)} on {arch}"
            print(f"NVCC {arch} {stem}<{dtype}>: {probe['registers']} registers, {probe['smem']} B static "
                  f"smem")
        tasks = [name for name in report if name.startswith(TASK)]
        assert len(tasks) == len(every_variant.variants()), f"{arch}: {len(tasks)} task functions"
        problems += task_budget_problems(arch, report)
    assert not problems, "\n".join(problems)


# ptxas serializes the wgmma.mma_async of a function the kernel calls (warning C7510, "wgmma pipeline
# crossing function boundary": each MMA waits for the one before; only a kernel's own wgmmas overlap).
# Every task is such a function (runtime/simt.h's call_task), so the Hopper path of linear and
# linear_with_residual (csrc/tasks/wgmma_linear.cuh, through linear_tile) is serialized: open work, known
# and printed. Inlining those four variants into persistent_kernel cleared the warning but made ptxas
# spill in the other tasks (sm_90a: the MoE linears 68-96 B of stores, paged_attention 28-32 B) and
# in the kernel; which costs a GPU more needs a GPU to say. Any other function named by C7510 fails.
KNOWN_SERIALIZED_WGMMA = ("mpk::linear_task<", "mpk::linear_with_residual_task<", "mpk::linear_tile<")


def serialized_wgmma_problems(arch: str, text: str) -> list[str]:
    """ptxas's C7510 lines of a report: each printed; one naming a function outside
    KNOWN_SERIALIZED_WGMMA is a problem."""
    problems = []
    for name in every_variant.serialized_wgmma(text):
        known = any(k in name for k in KNOWN_SERIALIZED_WGMMA)
        state = "known, open" if known else "NEW"
        print(f"NVCC {arch} wgmma serialized under a call in {name[:110]} ({state})")
        if not known:
            problems.append(f"{arch}: ptxas serialized the wgmmas under a call in {name} (C7510)")
    return problems


WGMMA_IN_A_FUNCTION = r"""#include "runtime/ptx.h"
__device__ INLINE void mma(float (&d)[4], uint64_t a, uint64_t b) {
    mpk::ptx::wgmma_fence();
    mpk::ptx::wgmma_mma_async_m64nNk16_f32_bf16_bf16<8>(d, a, b, 1);
    mpk::ptx::wgmma_commit_group();
    mpk::ptx::wgmma_wait_group<0>();
}
extern "C" __global__ void wgmma_in_a_function(float* out, uint64_t a, uint64_t b) {
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    mma(d, a, b);
    for (int i = 0; i < 4; ++i) out[4 * threadIdx.x + i] = d[i];
}
"""


def test_ptxas_names_a_wgmma_in_a_called_function(tmp_path):
    """Negative control of the every-variant build's C7510 check: the warning exists in this nvcc and
    names a wgmma in a function the kernel calls (__noinline__), and not the same wgmma inlined; the
    check fails on the one it names (not a known one)."""
    if "sm_90a" not in every_variant.supported_archs():
        pytest.skip("this nvcc cannot build sm_90a")
    texts = {}
    for inline in ("__noinline__", "__forceinline__"):
        src = tmp_path / f"wgmma_{inline.strip('_')}.cu"
        src.write_text(WGMMA_IN_A_FUNCTION.replace("INLINE", inline))
        texts[inline] = every_variant.nvcc_ptxas(str(src), "sm_90a", [])
    seen = {inline: every_variant.serialized_wgmma(text) for inline, text in texts.items()}
    assert seen == {"__noinline__": ["wgmma_in_a_function"], "__forceinline__": []}, seen
    problems = serialized_wgmma_problems("sm_90a", texts["__noinline__"])
    assert len(problems) == 1 and "wgmma_in_a_function" in problems[0], problems
    print(f"NVCC negative control: C7510 in {seen['__noinline__'][0]} (called); none inlined PASS")


def test_budget_catches_a_spilling_task():
    """Negative control: ptxas's report of a task function that spills, and of one with a stack frame
    (the lines as ptxas prints them, mangled names demangled by c++filt), fail the budget by name; the
    same report with both clean passes; a task clean in its probe but spilling in the persistent kernel,
    and a helper spilling there, fail whichever kernel ptxas reported last."""
    head = ("ptxas info    : Function properties for "
            "_ZN3mpk9call_taskIXadL_ZNS_12rmsnorm_taskIfEEvRKNS_8TaskViewEEEEEvS4_\n")
    bad = (head + "    0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
           "ptxas info    : Function properties for "
           "_ZN3mpk9call_taskIXadL_ZNS_11linear_taskIfEEvRKNS_8TaskViewEEEEEvS4_\n"
           "    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n")
    problems = task_budget_problems("sm_90a", every_variant.ptxas_report(bad))
    assert len(problems) == 2, problems
    assert "mpk::rmsnorm_task<float>" in problems[1] and "spills 8/8 B" in problems[1], problems
    assert "mpk::linear_task<float>" in problems[0] and "16 B stack frame" in problems[0], problems
    clean = head + "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    assert task_budget_problems("sm_90a", every_variant.ptxas_report(clean)) == []
    # the same task function clean in its probe and spilling inside the persistent kernel (what the
    # function pointers of TaskView did, runtime/task_view.h), and a helper it calls spilling there: in
    # either order of the two kernels' sections the spills are problems naming persistent_kernel
    entry = "ptxas info    : Compiling entry function '{}' for 'sm_90a'\n"
    helper = ("ptxas info    : Function properties for "
              "_ZN3mpk11linear_tileIfEEvRKNS_8TaskViewEPKT_RKNS_6Tile2DEi\n"
              "    0 bytes stack frame, 32 bytes spill stores, 32 bytes spill loads\n")
    mangled = "_ZN3mpk4cuda17persistent_kernelINS_17GeneratedDispatchEEEvPNS_4exec5StateE"
    kernel = (entry.format(mangled) + f"ptxas info    : Function properties for {mangled}\n"
              "    0 bytes stack frame, {0} bytes spill stores, {0} bytes spill loads\n")
    in_kernel = head + "    0 bytes stack frame, 508 bytes spill stores, 948 bytes spill loads\n" + helper
    in_probe = entry.format("probe_rmsnorm_float32") + clean
    for text in (kernel.format(32) + in_kernel + in_probe, in_probe + kernel.format(32) + in_kernel):
        problems = task_budget_problems("sm_90a", every_variant.ptxas_report(text))
        named = all("compiled for void mpk::cuda::persistent_kernel" in p for p in problems)
        assert len(problems) == 2 and named, problems
        assert "spills 508/948 B" in problems[0] and "mpk::linear_tile<float>" in problems[1], problems
    # the executor's own body past its budget (EXECUTOR_KERNEL_SPILL_BUDGET) is a problem too
    problems = task_budget_problems("sm_90a", every_variant.ptxas_report(kernel.format(33) + clean))
    assert len(problems) == 1 and "persistent_kernel" in problems[0], problems
    assert "spills 33/33 B" in problems[0], problems
    print(f"NVCC negative control: {problems} PASS")


def qwen3_mlp_kernel() -> PersistentKernel:
    """The gate/up -> silu_mul -> down+residual chain (not compiled)."""
    pk = PersistentKernel(test_mode=True, num_workers=2)
    b, h, i, g = 8, 64, 96, 2
    x = pk.attach_input(torch.zeros(b, h, dtype=torch.bfloat16), name="x")
    wg = pk.attach_input(torch.zeros(i, h, dtype=torch.bfloat16), name="w_gate")
    wu = pk.attach_input(torch.zeros(i, h, dtype=torch.bfloat16), name="w_up")
    wd = pk.attach_input(torch.zeros(h, i, dtype=torch.bfloat16), name="w_down")
    w = pk.shuffle_tensors([wg, wu], 0, g, name="w_gate_up")
    mid = pk.new_tensor((b, 2 * i), dtype=torch.bfloat16, name="mlp_mid")
    act = pk.new_tensor((b, i), dtype=torch.bfloat16, name="silu_out")
    out = pk.attach_input(torch.zeros(b, h, dtype=torch.bfloat16), name="mlp_out")
    pk.linear_layer(x, w, mid, (2 * g, 1, 1), (128, 1, 1))
    pk.silu_mul_layer(mid, act, (g, 1, 1), (128, 1, 1))
    pk.linear_with_residual_layer(act, wd, x, out, (4, 1, 1), (128, 1, 1))
    return pk


def test_generated_qwen3_mlp_module_builds(tmp_path):
    """The generated test_rank0.cu of the gate/up -> silu_mul -> down+residual chain, as nvcc sees it:
    the one-task launcher and the persistent kernel, without register spills (every function ptxas
    reports, the executor's cold ABI functions within their own budget, COLD_ABI)."""
    pk = qwen3_mlp_kernel()
    src = codegen.source(codegen.Variants(pk.layers), "cpu")
    path = tmp_path / "test_rank0.cu"
    path.write_text(src)
    archs = every_variant.supported_archs()
    reports = every_variant.per_arch(archs, lambda arch: every_variant.nvcc_ptxas(str(path), arch, []))
    for arch, report in reports.items():
        kernels = sorted(name for name, r in report.items() if "registers" in r)
        assert "mpk_execute_one" in kernels, (arch, kernels)
        assert any("persistent_kernel<" in k for k in kernels), (arch, kernels)
        for fn, r in sorted(report.items()):
            print(f"NVCC generated {arch} {fn}: {r.get('registers', '-')} registers, {r['stack']} B stack, "
                  f"{r['spill_stores']} B spill stores")
            if fn.split("(")[0] in COLD_ABI:
                assert r["spill_stores"] <= COLD_ABI_SPILL_BUDGET, (fn, arch, r)
            else:
                assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (fn, arch, r)


def test_generated_module_links_and_names_the_missing_gpu(tmp_path):
    """The full generated module for sm_90a as a shared object with the static CUDA runtime (a module
    built on a machine without a GPU for one that has it): it links, loads through ctypes with the ABI
    check, and where no GPU (or no driver) exists mpk_init fails with the CUDA call, its file:line and
    the error's name, raised as MPKRuntimeError, instead of crashing the process."""
    pk = qwen3_mlp_kernel()
    graph, variants, src, _ = pk._prepare()
    path, so = tmp_path / "test_rank0.cu", tmp_path / "module.so"
    path.write_text(src)
    cmd = [NVCC, "-std=c++17", "-x", "cu", "-O3", "-shared", "-Xcompiler", "-fPIC", "-cudart", "static",
           *every_variant.gencode(["sm_90a"]), "-I", build.csrc_dir(), str(path), "-o", str(so)]
    print("$", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"nvcc failed (exit {proc.returncode}):\n{proc.stderr[-6000:]}"
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: mpk_init would succeed here (this checks the no-GPU path)")
    want = r"the runtime rejected the kernel: mpk_init: .*host_cuda\.h:\d+: cudaMalloc\(.*\): cuda\w+ \("
    # this kernel's tensors are on the CPU, so test mode would guard them with guard pages, which a CUDA
    # module refuses (a CUDA kernel's tensors get red zones only: memcheck.Fences(pages=False))
    pk._fences = memcheck.Fences(pk._table(), graph, pages=False)
    with pytest.raises(MPKRuntimeError, match=want) as e:
        pk._start(str(so), graph, variants)
    print(f"NVCC module.so ({so.stat().st_size} bytes) without a GPU: {e.value}")


@pytest.mark.parametrize("read, name, line", [(1, "blockIdx", 15), (2, "gridDim", 17)])
def test_task_kernel_reading_block_index_is_refused(tmp_path, read, name, line):
    """A task kernel reading blockIdx / gridDim does not compile under nvcc either (runtime/simt.h): the
    static_assert's reason and the kernel's line (tests/csrc/refuse_blockidx.cu). The control, the same
    kernel without the read, compiles, and so does the executor's own blockIdx (runtime/host_cuda.h,
    in the generated-module tests above)."""
    src = "tests/csrc/refuse_blockidx.cu"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def compile_with(value: int) -> subprocess.CompletedProcess:
        cmd = [NVCC, "-std=c++17", "-x", "cu", "-c", *every_variant.gencode(["sm_90a"]), "-I",
               build.csrc_dir(), f"-DMPK_READ={value}", f"{root}/{src}", "-o", str(tmp_path / "refused.o")]
        print("$", " ".join(cmd))
        return subprocess.run(cmd, capture_output=True, text=True, timeout=300)

    bad = compile_with(read)
    assert bad.returncode != 0, f"nvcc compiled a task kernel that reads {name}"
    text = bad.stdout + bad.stderr
    assert (f'static assertion failed with "task kernel reads {name}: a persistent worker runs many tasks '
            f"on one block; use the task's tiles and iparams (docs/simt.md)\"") in text, text[-3000:]
    assert f"at line {line} of {root}/{src}" in text, text[-3000:]
    good = compile_with(0)
    assert good.returncode == 0, f"the control did not compile:\n{good.stderr[-3000:]}"


# Each wrapper of csrc/runtime/ptx.h and the PTX instruction it must be (tests/csrc/ptx_probe.cu calls them
# all).
PTX_FORMS = ["mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32",
             "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32",
             "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32",
             "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32",
             "ldmatrix.sync.aligned.m8n8.x1.shared.b16", "ldmatrix.sync.aligned.m8n8.x2.shared.b16",
             "ldmatrix.sync.aligned.m8n8.x4.shared.b16", "ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16",
             "ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16",
             "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
             "cp.async.cg.shared.global", "cp.async.ca.shared.global", "cp.async.commit_group",
             "cp.async.wait_group", "cp.async.wait_all",
             "mbarrier.init.shared::cta.b64", "mbarrier.arrive.shared::cta.b64",
             "mbarrier.test_wait.parity.shared::cta.b64", "mbarrier.inval.shared::cta.b64"]
E4M3 = "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"
SM90 = ["mbarrier.arrive.expect_tx.shared::cta.b64", "mbarrier.expect_tx.relaxed.cta.shared::cta.b64",
        "mbarrier.complete_tx.relaxed.cta.shared::cta.b64", "mbarrier.try_wait.parity.shared::cta.b64",
        "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes",
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes",
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group",
        "cp.async.bulk.tensor.3d.global.shared::cta.bulk_group",
        "cp.async.bulk.commit_group", "cp.async.bulk.wait_group.read", "fence.proxy.async.shared::cta",
        # runtime/ptx_wgmma.h's stmatrix (sm_90 and newer)
        *(f"stmatrix.sync.aligned.m8n8.x{k}{t}.shared.b16" for k in (1, 2, 4) for t in ("", ".trans"))]
# runtime/ptx_wgmma.h's wgmma: sm_90a only (sm_100a has no wgmma). ptx_probe.cu's ptx_wgmma_probe issues
# each N of WGMMA_N with A from shared memory (SS) and from registers (RS), bf16 and f16.
WGMMA_N = [8, 16, 64, 128, 200, 256]
WGMMA_TYPES = ["bf16.bf16", "f16.f16"]
SM90A = ["wgmma.fence.sync.aligned", "wgmma.commit_group.sync.aligned", "wgmma.wait_group.sync.aligned 0;",
         "wgmma.wait_group.sync.aligned 1;",
         *(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{t}" for n in WGMMA_N for t in WGMMA_TYPES)]
# One mma_async as the PTX ISA orders its operands: {d...}, then SS: a-desc, b-desc, scale-d, imm-scale-a,
# imm-scale-b, imm-trans-a, imm-trans-b; RS: {a0, a1, a2, a3}, b-desc, scale-d, imm-scale-a, imm-scale-b,
# imm-trans-b (scale-d the predicate the wrapper sets from its int)
WGMMA_ASM = re.compile(r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k16\.f32\.(\w+\.\w+)\s+\{([^}]*)\},\s*"
                       r"(?:(%rd\d+)|\{(%r\d+),\s*(%r\d+),\s*(%r\d+),\s*(%r\d+)\}),\s*%rd\d+,\s*p,\s*"
                       r"(-?1),\s*(-?1),\s*(?:([01]),\s*)?([01]);")


def wgmma_forms(text: str) -> dict[tuple[int, str, str], set[tuple[str, ...]]]:
    """(N, types, "SS" or "RS") -> the immediates (scale-a, scale-b[, trans-a], trans-b) of each mma_async
    in the PTX, each checked: N / 2 distinct f32 accumulator registers, the operands in the ISA's order."""
    total = text.count("wgmma.mma_async")
    forms: dict[tuple[int, str, str], set[tuple[str, ...]]] = {}
    matched = 0
    for m in WGMMA_ASM.finditer(text):
        n, types, d, desc_a, trans_a = int(m[1]), m[2], m[3].split(","), m[4], m[11]
        assert len(d) == n // 2 and len(set(d)) == n // 2 and all(r.strip().startswith("%f") for r in d), \
            (n, types, len(d))
        assert (trans_a is None) == (desc_a is None), m[0][-80:]    # trans-a with a descriptor A only
        imms = (m[9], m[10]) + ((trans_a,) if desc_a else ()) + (m[12],)
        forms.setdefault((n, types, "SS" if desc_a else "RS"), set()).add(imms)
        matched += 1
    assert matched == total, f"{total - matched} of {total} mma_async not in the ISA's operand order"
    return forms


@pytest.mark.parametrize("arch", every_variant.ARCHS)
def test_ptx_wrappers_are_the_instructions(tmp_path, arch):
    """Under nvcc each wrapper of runtime/ptx.h is its inline asm and nothing more: every form appears in
    the PTX of the kernels that call them all (e4m3 from sm_89; mbarrier's tx and try_wait forms, TMA
    and stmatrix from sm_90; wgmma on sm_90a alone, each mma_async with its N / 2 accumulators and its
    operands in the ISA's order), which ptxas builds without spills."""
    if arch not in every_variant.supported_archs():
        pytest.skip(f"this nvcc cannot build {arch}")
    src = str(tmp_path / "ptx_probe.cu")       # nvcc_ptxas writes its fatbin beside the source
    shutil.copy(os.path.join(os.path.dirname(os.path.dirname(__file__)), "csrc", "ptx_probe.cu"), src)
    ptx = tmp_path / f"ptx_probe.{arch}.ptx"
    subprocess.run([NVCC, "-std=c++17", "-ptx", f"-arch={arch}", "-I", build.csrc_dir(), src, "-o",
                    str(ptx)], check=True, timeout=300)
    text = ptx.read_text()
    forms = (PTX_FORMS + ([E4M3] if arch != "sm_80" else []) + (SM90 if arch != "sm_80" else [])
             + (SM90A if arch == "sm_90a" else []))
    missing = [f for f in forms if f not in text]
    assert missing == [], f"{arch}: not in the PTX: {missing}"
    wgmma = wgmma_forms(text)
    if arch == "sm_90a":
        want = {(n, t, k) for n in WGMMA_N for t in WGMMA_TYPES for k in ("SS", "RS")}
        assert set(wgmma) == want, f"mma_async forms missing {want - set(wgmma)}, extra {set(wgmma) - want}"
        imms = set().union(*wgmma.values())
        # the defaults, and the probe's negated and MN-major operands (ptx_probe.cu's wgmma_scales)
        for i in [("1", "1", "0", "0"), ("1", "1", "0"), ("-1", "1", "1", "1"), ("1", "-1", "1", "0"),
                  ("-1", "-1", "1"), ("1", "-1", "0")]:
            assert i in imms, (i, imms)
        print(f"NVCC {arch} wgmma: {text.count('wgmma.mma_async')} mma_async in {len(wgmma)} forms, "
              f"N = 256 with {len(re.search(r'm64n256k16[^{]*{([^}]*)}', text)[1].split(','))} accumulators, "
              f"immediates {sorted(imms)}")
    else:
        assert "wgmma." not in text, f"{arch}: wgmma in the PTX (it exists on sm_90a only)"
    report = every_variant.ptxas_report(every_variant.nvcc_ptxas(src, arch, []))
    assert set(report) == {"ptx_probe", "ptx_wgmma_probe"}, sorted(report)
    print(f"NVCC {arch} ptx_probe.cu: {len(forms)} forms in the PTX")
    for kernel, r in sorted(report.items()):
        print(f"NVCC {arch} {kernel}: {r['registers']} registers, {r['stack']} B stack, "
              f"{r['spill_stores']}/{r['spill_loads']} B spills")
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0, (kernel, r)
