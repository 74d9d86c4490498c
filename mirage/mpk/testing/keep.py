"""What a failing case leaves behind: its generated source, task graph, module and tensors, in a
directory the failure message names (under pytest a case compiles with output_dir=None and would
otherwise leave nothing to inspect or re-run)."""
from __future__ import annotations

import os
import re
import shutil
import tempfile

import torch

from .. import abi, codegen, reuse
from .. import build as build_mod
from ..tensor import ATTACHED

FAILURE_DIR_ENV = "MPK_FAILURE_DIR"


def case_dirname(name: str) -> str:
    """A case name as a directory name: brackets, commas, spaces and the like become '_'."""
    return re.sub(r"[^A-Za-z0-9._=+-]+", "_", name).strip("_")[:120] or "case"


def failure_dir(name: str) -> str:
    """$MPK_FAILURE_DIR (default <tempdir>/mpk-failures)/<case name>-<pid>: the pid keeps the ranks of
    a job and concurrent test processes apart."""
    root = os.environ.get(FAILURE_DIR_ENV) or os.path.join(tempfile.gettempdir(), "mpk-failures")
    return os.path.join(root, f"{case_dirname(name)}-{os.getpid()}")


_README = """Kept by mirage.mpk.testing when '{name}' failed (rank {rank} of {world}, pid {pid}).

  test_rank{rank}.cu, task_graph_rank{rank}.json   the generated source and task graph
  mpk_module_rank{rank}.so, kernel_metadata_rank{rank}.json   the built module (pk.load_mpk_kernel(dir)
      runs it without compiling, once the same graph is declared)
  inputs.pt   every attached tensor by name, as it was when the check failed: inputs as attached (unless
      the graph overwrites them), outputs with the failing run's values

Load them (python3):

import torch
from mirage.mpk import inspect
tensors = torch.load("{where}/inputs.pt")
print({{n: (tuple(t.shape), t.dtype) for n, t in tensors.items()}})
print(inspect.summary(inspect.load("{where}/task_graph_rank{rank}.json")))
"""


def keep_failure(pk, name: str) -> str:
    """Write pk's source, task graph, module (with its load_mpk_kernel metadata) and attached tensors
    to failure_dir(name), replacing what an earlier failure of the same case left; return the failure
    message's line naming the directory (or saying why nothing could be kept)."""
    if pk is None or pk.graph is None or not hasattr(pk, "_source"):
        return ""
    where = failure_dir(name)
    try:
        shutil.rmtree(where, ignore_errors=True)
        src, injecting = pk._source
        module, variants, _ = pk._launch_args
        graph_json = codegen.task_graph_json(pk.graph, variants)
        codegen.write_outputs(where, pk.mpi_rank, src, graph_json)
        meta = reuse.describe(pk, graph_json, src, build_mod.headers_digest(build_mod.csrc_dir()),
                              abi.ABI_VERSION, injecting)
        reuse.save(where, pk.mpi_rank, module, meta)
        torch.save({t.name: t.data.detach().cpu().clone() for t in pk.tensors.values()
                    if t.kind == ATTACHED}, os.path.join(where, "inputs.pt"))
        with open(os.path.join(where, "README.txt"), "w") as f:
            f.write(_README.format(name=name, rank=pk.mpi_rank, world=pk.world_size, pid=os.getpid(),
                                   where=where))
    except OSError as e:         # a full or read-only disk must not hide the failure itself
        return (f"\nFailure files: not kept ({type(e).__name__}: {e}); set {FAILURE_DIR_ENV} to a writable "
                f"directory")
    return (f"\nFailure files (source, task graph, module, inputs; README.txt says how to load them): "
            f"{where} ({', '.join(sorted(os.listdir(where)))})")
