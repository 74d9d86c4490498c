"""The stages of scripts/gpu_check.sh, one stage per process: python scripts/gpu_stages.py <stage>.

  props     the device: name, compute capability, SMs, shared memory, MPK's worker configuration,
            nvcc and compute-sanitizer; where torch cannot use a GPU, a last line "NO GPU: <why>"
            (gpu_check.sh then fails every GPU stage with that reason instead of running them)
  executor  the persistent executor with identity tasks on chain, fork and join graphs, at 1 worker
            and at the full worker count: one launch outside test mode that runs REPEAT passes of the
            graph (max_seq_length = REPEAT + 1: prepare_next_batch starts each next pass; on the GPU the
            launch is enqueued on the stream and pk.wait() collects it), then one test-mode pass (poison
            + written check); the outputs must equal the inputs bit for bit
  small     one chain launch with 2 workers (what compute-sanitizer runs)
  failure   a task that fails, then clean runs in the same process (docs/runtime.md, "A task that
            fails"): a moe_w13_linear graph in test mode whose moe_mask names an expert that does not
            exist must raise MPKRuntimeError naming the layer, the task and the kernel's message; the
            mask repaired, pk() again must give the exact product (integer-valued float32 inputs); the
            same kernel-level (testing.run_tasks: a failing task, then a good one). On the GPU: the
            context survives a failed task (no trap), and the next launch runs
  collect   pytest --collect-only of each layer folder given (--dry-run, MPK_TEST_DEVICE=cuda and
            MPK_GPU_SUBSET=1, as the layers stage runs it), all in this one process (one torch import, not
            one per folder): <--out>/collect_<folder>.log each, lines "COLLECT <folder> <pytest exit code>
            <seconds>" and "ESTIMATE <folder> selected N tests ..., estimated S s (...)" per folder (from
            scripts/gpu_subset_times.json), and "LAYERS ... estimated T s of <--limit> s PASS|FAIL"; exits 1
            when T is over the limit

On a machine without a GPU the same code runs on the CPU backend (gpu_check.sh --dry-run), so the
script is exercised where CI runs. Prints one JSON line per result, prefixed "RESULT ".
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import torch

if __name__ == "__main__":    # before mirage.mpk configures its logger (a test importing this keeps its own)
    os.environ.setdefault("MPK_LOG_LEVEL", "WARNING")
import mirage  # noqa: E402
from mirage.mpk.persistent_kernel import PersistentKernel  # noqa: E402

SHAPE = (8, 512)        # rows x columns; identity tiles split the columns (grid.x)
TILES = 16


def device() -> torch.device:
    return torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")


def report(**fields) -> None:
    print("RESULT " + json.dumps(fields), flush=True)


def no_gpu_reason() -> str | None:
    """Why torch cannot run the CUDA backend in this process, or None. The run mode of gpu_check.sh
    fails with this reason: a check that ran nothing on a GPU must not pass."""
    if torch.version.cuda is None:
        kind = f"a ROCm build (hip {torch.version.hip})" if torch.version.hip else "a CPU build"
        return f"torch {torch.__version__} is {kind} (torch.version.cuda is None)"
    if torch.cuda.is_available():
        return None
    try:                    # is_available() says no reason; init() raises with the driver's
        torch.cuda.init()
        detail = ""
    except Exception as e:  # noqa: BLE001 (any error is the reason to show)
        detail = f": {str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}"
    return (f"torch.cuda.is_available() is False (torch {torch.__version__} for CUDA {torch.version.cuda}, "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}){detail}")


def stage_props() -> None:
    dev = device()
    workers, schedulers = mirage.get_configurations_from_gpu(0)
    why = no_gpu_reason()
    info = {"stage": "props", "device": str(dev), "workers": workers, "schedulers": schedulers,
            "nvcc": shutil.which("nvcc"), "compute_sanitizer": shutil.which("compute-sanitizer"),
            "torch": torch.__version__, "no_gpu": why}
    if shutil.which("nvidia-smi"):      # the driver must be new enough for the nvcc that built the modules
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
        info["driver"] = smi.stdout.strip() or smi.stderr.strip()[:200]
    if dev.type == "cuda":
        p = torch.cuda.get_device_properties(dev)
        info.update(name=p.name, cc=f"{p.major}.{p.minor}", sms=p.multi_processor_count,
                    memory_gib=round(p.total_memory / 2**30, 1), cuda=torch.version.cuda)
    report(**info)
    if why:
        print(f"NO GPU: {why}", flush=True)


def build(topology: str, workers: int, test_mode: bool, passes: int = 1) -> tuple[PersistentKernel, dict]:
    """An identity graph: chain (x -> a -> b -> c), fork (x -> a, b, c) or join (x, x2 -> a + b).
    Returns the kernel and {output tensor: expected tensor}."""
    dev, gen = device(), torch.Generator().manual_seed(7)
    schedulers = max(1, mirage.get_configurations_from_gpu(0)[1])
    pk = PersistentKernel(test_mode=test_mode, num_workers=workers, num_local_schedulers=schedulers,
                          max_seq_length=passes + 1, max_num_pages=passes + 1)
    block = (pk.worker_threads, 1, 1)
    x = torch.randn(*SHAPE, generator=gen).to(dev)
    outs = {k: torch.zeros(*SHAPE, device=dev) for k in ("a", "b", "c")}
    t = {k: pk.attach_input(v, name=k) for k, v in dict(x=x, **outs).items()}
    if topology == "chain":
        for src, dst in (("x", "a"), ("a", "b"), ("b", "c")):
            pk.identity_layer(t[src], t[dst], (TILES, 1, 1), block)
        expected = {k: x for k in outs}
    elif topology == "fork":
        for dst in ("a", "b", "c"):
            pk.identity_layer(t["x"], t[dst], (TILES, 1, 1), block)
        expected = {k: x for k in outs}
    else:
        pk.identity_layer(t["x"], t["a"], (TILES, 1, 1), block)
        pk.identity_layer(t["x"], t["b"], (TILES // 2, 1, 1), block)
        pk.elementwise_add_layer(t["a"], t["b"], t["c"], (SHAPE[0], 1, 1), block)
        expected = {"a": x, "b": x, "c": x + x}
    pk.compile()
    return pk, {outs[k]: v for k, v in expected.items()}


def run_graph(topology: str, workers: int, repeat: int) -> bool:
    pk, expected = build(topology, workers, test_mode=False, passes=repeat)
    t0 = time.perf_counter()
    pk()
    pk.wait()
    seconds = time.perf_counter() - t0
    passes = pk.passes
    exact = all(torch.equal(out, want) for out, want in expected.items())
    pk.finalize()
    checked, expected = build(topology, workers, test_mode=True)
    checked()           # raises on an unwritten tile, a hang or a failed task
    exact = exact and all(torch.equal(out, want) for out, want in expected.items())
    checked.finalize()
    report(stage="executor", graph=topology, workers=workers, passes=passes, exact=exact,
           us_per_pass=round(seconds / max(passes, 1) * 1e6, 1))
    return exact and passes == repeat


def failure_scenario() -> dict:
    """The failure stage (module doc); returns its report's fields (ok: every check held)."""
    from mirage.mpk import testing
    from mirage.mpk.errors import MPKError
    from mirage.mpk.layers.moe_w13_linear import moe_grid

    dev, gen = device(), torch.Generator().manual_seed(11)
    tokens, experts, topk, k, n = 3, 8, 2, 64, 16
    x = torch.randint(-4, 5, (tokens, k), generator=gen).float()   # |sums| <= 64 * 16: exact in float32
    w = torch.randint(-4, 5, (experts, n, k), generator=gen).float()
    routing = torch.zeros(experts, tokens, dtype=torch.int32)      # MPK's layout: slot + 1, 0 not routed
    for t in range(tokens):
        chosen = torch.randperm(experts, generator=gen)[:topk]
        routing[chosen, t] = torch.arange(1, topk + 1, dtype=torch.int32)
    active = (routing > 0).any(1).nonzero().flatten()
    mask = torch.zeros(experts + 1, dtype=torch.int32)
    mask[:active.numel()], mask[experts] = active.int(), active.numel()
    expected = torch.zeros(tokens, topk, n)
    for e, t in (routing > 0).nonzero().tolist():
        expected[t, int(routing[e, t]) - 1] = w[e] @ x[t]
    bad = mask.clone()
    bad[1] = experts                    # tasks of expert stride offset 1 (both column tiles) fail
    want = "moe: moe_mask names an expert outside [0, num_experts)"
    tensors = {"x": x, "w": w, "routing": routing, "mask": bad, "out": torch.zeros(tokens, topk, n)}
    tensors = {name: v.clone().to(dev) for name, v in tensors.items()}    # (mask: repaired in place)
    pk = PersistentKernel(**testing.cpu_config(jitter_seed=None))
    block = (pk.worker_threads, 1, 1)

    def layer(p, t):
        p.moe_w13_linear_layer(input=t["x"], weight=t["w"], moe_routing_indices=t["routing"],
                               moe_mask=t["mask"], output=t["out"], grid_dim=moe_grid(2, 3), block_dim=block)

    def raised(run) -> str:     # what run() raised: the message of an MPKRuntimeError, else the type too
        try:
            run()
        except MPKError as e:
            return str(e) if type(e).__name__ == "MPKRuntimeError" else f"{type(e).__name__}: {e}"
        return "(nothing raised)"

    def exact(out: torch.Tensor) -> bool:    # the claimed (token, slot) rows; test mode poisons the rest
        claimed = torch.zeros(tokens, topk, dtype=torch.bool)
        for e, t in (routing > 0).nonzero().tolist():
            claimed[t, int(routing[e, t]) - 1] = True
        return torch.equal(out.cpu()[claimed], expected[claimed])

    layer(pk, {name: pk.attach_input(v, name=name) for name, v in tensors.items()})
    pk.compile()
    graph_msg = raised(pk)
    tensors["mask"].copy_(mask.to(dev))
    pk()                                # the next launch of the same kernel runs, and is right
    graph_exact = exact(tensors["out"])
    pk.finalize()
    tensors["mask"].copy_(bad.to(dev))
    kernel_msg = raised(lambda: testing.run_tasks(layer, tensors))
    tensors["mask"].copy_(mask.to(dev))
    run = testing.run_tasks(layer, tensors)
    kernel_exact = exact(run.outputs["out"])
    named = r"task \d+ = 'moe_w13_linear_0'\(1, \d, 0\)"     # grid.x: the expert offset (mask[1])
    said = rf"failed: {re.escape(want)} \(thread \d+ of the block\)"
    graph_ok = re.search(rf"launch failed \(status 7\): {named} \(variant \d+, iteration 1\) {said}",
                         graph_msg) is not None
    kernel_ok = re.search(rf"{named} {said}", kernel_msg) is not None
    return dict(graph_message=graph_msg, graph_named=graph_ok, graph_then_exact=graph_exact,
                kernel_message=kernel_msg, kernel_named=kernel_ok, kernel_then_exact=kernel_exact,
                ok=graph_ok and graph_exact and kernel_ok and kernel_exact)


def stage_failure() -> bool:
    fields = failure_scenario()
    report(stage="failure", device=str(device()), **fields)
    return fields["ok"]


class Selected:
    """pytest plugin: the node ids collected and not marked to skip (skipif with a true bool included)."""

    def __init__(self):
        self.run: list[str] = []
        self.skipped = 0

    def pytest_collection_finish(self, session):
        for item in session.items:
            skip = any(m.name == "skip" or (m.name == "skipif" and m.args and m.args[0] is True)
                       for m in item.iter_markers())
            self.skipped += skip
            if not skip:
                self.run.append(item.nodeid)


def stage_collect(folders: list[str], out: str, limit: float) -> int:
    """Collect each folder as the layers stage runs it (MPK_GPU_SUBSET=1); estimate its GPU time from
    scripts/gpu_subset_times.json; 1 when the estimates add up to more than `limit` seconds."""
    import contextlib

    import gpu_subset_times as times  # beside this script (sys.path[0])
    import pytest
    data = json.load(open(times.DATA))
    total = 0.0
    for folder in folders:
        name, start, cpu, sel = os.path.basename(folder.rstrip("/")), time.monotonic(), times.process_cpu(), \
            Selected()
        with open(os.path.join(out, f"collect_{name}.log"), "w") as log, contextlib.redirect_stdout(log), \
                contextlib.redirect_stderr(log):
            code = pytest.main(["--collect-only", "-q", "-p", "no:cacheprovider", folder], plugins=[sel])
        seconds = time.monotonic() - start
        print(f"COLLECT {name} {int(code)} {seconds:.3f}", flush=True)
        est, how = times.estimate(name, sel.run, times.process_cpu() - cpu, data)
        total += est
        print(f"ESTIMATE {name} selected {len(sel.run)} tests ({sel.skipped} skipped), estimated {est:.1f} s "
              f"({how})", flush=True)
    fits = total <= limit
    print(f"LAYERS {len(folders)} folders, estimated {total:.0f} s of {limit:g} s ({times.FACTOR:g} x the "
          f"CPU times measured {data['measured']}, cc {data['cc']}) {'PASS' if fits else 'FAIL'}", flush=True)
    return 0 if fits else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("stage", choices=["props", "executor", "small", "failure", "collect"])
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--out", default=".")
    ap.add_argument("--limit", type=float, default=float("inf"), help="collect: the layers stages' seconds")
    ap.add_argument("folders", nargs="*")
    args = ap.parse_intermixed_args()     # (collect --limit N FOLDER...: options among the folders)
    if args.stage == "collect":
        return stage_collect(args.folders, args.out, args.limit)
    if args.stage == "props":
        stage_props()
        return 0
    if args.stage == "small":
        return 0 if run_graph("chain", 2, 1) else 1
    if args.stage == "failure":
        return 0 if stage_failure() else 1
    full = mirage.get_configurations_from_gpu(0)[0]
    ok = [run_graph(topology, workers, args.repeat) for topology in ("chain", "fork", "join")
          for workers in sorted({1, full})]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
