"""Kernel reuse (MPK's load_mpk_kernel): keep a built module in output_dir, load it later without a compiler.

compile(output_dir=D) writes, per rank R, beside test_rank{R}.cu and task_graph_rank{R}.json:
  mpk_module_rank{R}.so          the compiled module (a copy of the cache entry)
  kernel_metadata_rank{R}.json   what the module was built for (describe() below)
load_mpk_kernel(D), in a later process that declared the same graph, recomputes the same
description and refuses, naming each difference, anything that would make the module run
the wrong kernels or the wrong graph. The module's sha256 and size are checked before it is
loaded, so a truncated or replaced file is an error naming it, never a crash.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil

from .build import sha256_file
from .errors import MPKRuntimeError

FORMAT = 2          # 2: graph_sha256 hashes the JSON file's bytes (1: a re-encoding with sorted keys)
# What must agree between compile and load: the module's identity, how it was built, the graph.
_MODULE_KEYS = ("format", "abi_version", "backend", "source_sha256", "csrc_sha256", "test_mode", "sanitize",
                "fault_injection")
_GRAPH_KEYS = ("world_size", "rank")


def paths(output_dir: str, rank: int) -> dict[str, str]:
    """The files of one rank's kept kernel."""
    return {"module": os.path.join(output_dir, f"mpk_module_rank{rank}.so"),
            "metadata": os.path.join(output_dir, f"kernel_metadata_rank{rank}.json"),
            "graph": os.path.join(output_dir, f"task_graph_rank{rank}.json")}


def graph_sha256(graph_json: bytes) -> str:
    """A hash of task_graph_rank{R}.json's bytes (codegen.task_graph_json encodes in a fixed order)."""
    return hashlib.sha256(graph_json).hexdigest()


def describe(pk, graph_json: bytes, src: str, csrc_sha256: str, abi_version: int,
             fault_injection: bool) -> dict:
    """The metadata of a kernel: module identity, build flags, graph, tensors and layers, MPK's config."""
    p = pk.params
    return {
        "format": FORMAT, "abi_version": abi_version, "backend": pk.device.type,
        "source_sha256": hashlib.sha256(src.encode()).hexdigest(), "csrc_sha256": csrc_sha256,
        "test_mode": pk.test_mode, "sanitize": pk.sanitize, "fault_injection": fault_injection,
        "world_size": pk.world_size, "rank": pk.mpi_rank, "graph_sha256": graph_sha256(graph_json),
        "tensors": {t.name: {"dims": list(t.dims), "dtype": t.dtype.name, "kind": t.kind}
                    for t in pk.tensors.values()},
        "layers": [{"name": layer.name, "grid_dim": list(layer.grid), "variant": layer.cpp_function,
                    "params": layer.params} for layer in pk.layers],
        # MPK's fields, kept for its users; the runtime takes these at init, so they may differ.
        "mode": p["mode"], "max_seq_length": p["max_seq_length"],
        "max_num_batched_requests": p["max_num_batched_requests"],
        "max_num_batched_tokens": p["max_num_batched_tokens"], "max_num_pages": p["max_num_pages"],
        "page_size": p["page_size"], "cuda_cc": pk.target_cc,
    }


def _write_json(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
    os.replace(tmp, path)


def save(output_dir: str, rank: int, module_path: str, metadata: dict) -> dict[str, str]:
    """Copy the module into output_dir and write its metadata (module checksum included), atomically."""
    where = paths(output_dir, rank)
    tmp = f"{where['module']}.tmp{os.getpid()}"
    shutil.copyfile(module_path, tmp)
    os.replace(tmp, where["module"])
    _write_json(where["metadata"], dict(metadata, module_sha256=sha256_file(where["module"]),
                                        module_bytes=os.path.getsize(where["module"])))
    return where


def _differences(saved: dict, current: dict, keys) -> list[str]:
    return [f"{k}: saved {saved.get(k)!r}, now {current.get(k)!r}" for k in keys
            if saved.get(k) != current.get(k)]


def _graph_differences(saved: dict, current: dict) -> list[str]:
    """Tensor by tensor, layer by layer: what the user changed, not just that a hash differs."""
    out = []
    st, ct = saved.get("tensors", {}), current["tensors"]
    for name in sorted(set(st) | set(ct)):
        if name not in ct:
            out.append(f"tensor '{name}': in the saved kernel, not declared now")
        elif name not in st:
            out.append(f"tensor '{name}': declared now, not in the saved kernel")
        elif st[name] != ct[name]:
            diff = ", ".join(f"{k} saved {st[name].get(k)}, now {ct[name][k]}" for k in ct[name]
                             if st[name].get(k) != ct[name][k])
            out.append(f"tensor '{name}': {diff}")
    sl, cl = saved.get("layers", []), current["layers"]
    if len(sl) != len(cl):
        out.append(f"layers: saved {len(sl)} ({', '.join(x['name'] for x in sl)}), now {len(cl)} "
                   f"({', '.join(x['name'] for x in cl)})")
    for a, b in zip(sl, cl):
        if a != b:
            diff = ", ".join(f"{k} saved {a.get(k)}, now {b[k]}" for k in b if a.get(k) != b[k])
            out.append(f"layer '{b['name']}': {diff}")
    return out


def check(output_dir: str, rank: int, current: dict, skip_validation: bool = False) -> str:
    """Validate the kept kernel against the current declaration; return the module's path.

    skip_validation (MPK's keyword) skips the graph comparison only: the module's checksum, ABI and
    source hash are always checked, since a module built from another source dispatches other kernels."""
    where = paths(output_dir, rank)
    for what in ("module", "metadata", "graph"):
        if not os.path.isfile(where[what]):
            raise FileNotFoundError(f"load_mpk_kernel: {where[what]} not found; run "
                                    f"compile(output_dir={output_dir!r}) first (rank {rank})")
    try:
        with open(where["metadata"]) as f:
            saved = json.load(f)
    except (OSError, ValueError) as e:
        raise MPKRuntimeError(f"load_mpk_kernel: {where['metadata']} is not readable metadata: {e}") from None
    size = os.path.getsize(where["module"])
    if size != saved.get("module_bytes") or sha256_file(where["module"]) != saved.get("module_sha256"):
        raise MPKRuntimeError(f"load_mpk_kernel: {where['module']} ({size} bytes) does not match the "
                              f"checksum recorded at compile ({saved.get('module_bytes')} bytes): the file "
                              f"was changed or truncated; compile again")
    problems = _differences(saved, current, _MODULE_KEYS)
    if not skip_validation:
        problems += _differences(saved, current, _GRAPH_KEYS)
        named = _graph_differences(saved, current)      # also an unused extra tensor, as MPK checks names
        if not named and saved.get("graph_sha256") != current["graph_sha256"]:
            named = ["the task graph differs (same tensors and layers)"]
        problems += named
    if problems:
        raise ValueError(f"load_mpk_kernel: the kernel in {output_dir} was built for another "
                         f"{'module' if skip_validation else 'graph or build'} than the one declared now:\n  "
                         + "\n  ".join(problems) + "\ncompile(output_dir=...) again to rebuild it")
    return where["module"]
