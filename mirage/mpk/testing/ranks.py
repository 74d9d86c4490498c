"""Multi-rank checks and one layer test file as an N-rank job (tensor parallelism per layer's TP)."""
from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from typing import Callable

import torch

from .. import dist
from .evidence import digest, say

# ---- multi-rank ----------------------------------------------------------------------------

all_ranks_agree = dist.all_ranks_agree


@contextlib.contextmanager
def on_all_ranks(what: str):
    """Run checks, then agree across ranks (dist.all_ranks_agree) before any later collective:
    a rank whose check failed re-raises its error, the others raise naming the failed ranks."""
    try:
        yield
    except Exception as e:
        dist.all_ranks_agree(False, what)     # raises on every rank, naming the failed ones
        raise AssertionError(f"{what}: {e}") from e   # not reached
    dist.all_ranks_agree(True, what)


# ---- tensor parallelism: one layer test as an N-rank job ------------------------------------

# How a layer is split across ranks under tensor parallelism, as MPK's models use it. Each layer
# module declares one kind as its module-level `TP` (the only per-layer knowledge); the table says
# what the kind means for the test's tensors: role -> the dim of which rank r holds
# [r*n//W, (r+1)*n//W) (roles not named stay whole on every rank).
#   replicated: every rank computes the whole layer on the same full inputs; outputs bit-identical
#   column:     rank r holds its rows of the weight (each expert's, for [E, N, K]) and computes its
#               columns of the output
#   row:        rank r holds its columns of the input and of the weight and computes a partial sum
#               (the residual on rank 0 only); an allreduce after it gives every rank the whole sum
#   reduce:     the allreduce: each rank's input is its own partial; the sum is bit-identical on all
#   heads:      attention: rank r holds its KV heads with their query groups: its columns of the packed
#               input (grouped per KV head) and of the output, its heads of the caches
# Dims count from the end, so a kind fits a 2D weight [N, K] and an experts' 3D weight [E, N, K] alike.
TP_KINDS = {"replicated": {}, "column": {"weight": -2, "output": -1}, "row": {"input": -1, "weight": -1},
            "reduce": {}, "heads": {"input": -1, "k_cache": 2, "v_cache": 2, "output": -1}}
# Negative control (read here only): on this rank, World.shard gives the kernel its neighbour's part
# of every input it slices, while the reference ("output") stays this rank's: a wrong shard.
WRONG_SHARD_ENV = "MPK_TEST_WRONG_SHARD_RANK"


def layer_tp(kind: str) -> str:
    """The tensor parallelism layers/<kind>.py declares: its module-level TP, a key of TP_KINDS
    (tests/unit/test_layer_recipe.py requires it of every layer module)."""
    return importlib.import_module(f"mirage.mpk.layers.{kind}").TP


class CaseSkipped(Exception):
    """A case whose split dim is smaller than the number of ranks (the same on every rank)."""


class World:
    """One rank's view of a layer test run as an N-rank job (run_cases_as_script under mpirun).

    A layer test's run_case takes `world=testing.ONE_RANK` and: draws its unsharded tensors from one
    seeded generator (the same on every rank); keeps its part of each with `world.shard(role,
    tensor)` (the tensor itself on one rank and for the roles its TP keeps whole); builds the kernel
    with `cpu_config(..., **world.params)`; a row-parallel layer adds an allreduce_layer; it
    compares what it computed with `world.shard("output", unsharded_reference)` and puts
    `world.tag` in its names. `shards` records (role, full shape, local shape, dim, lo, hi, sha256)."""

    def __init__(self, rank: int = 0, size: int = 1, comm=None, tp: str | None = None):
        self.rank, self.size, self.comm, self.tp, self.shards = rank, size, comm, tp, []
        self.params = dict(world_size=size, mpi_rank=rank)     # for PersistentKernel / cpu_config
        self.tag = f",W={size}" if size > 1 else ""             # "" on one rank: names as ever

    def part(self, n: int, rank: int | None = None) -> tuple[int, int]:
        """[lo, hi) of `rank`'s part (default this rank's) of a dim of n: [r*n//W, (r+1)*n//W)."""
        if n < self.size:
            raise CaseSkipped(f"a dim of {n} cannot be split across {self.size} ranks")
        r = self.rank if rank is None else rank
        return r * n // self.size, (r + 1) * n // self.size

    def shard(self, role: str, full: torch.Tensor) -> torch.Tensor:
        """This rank's part (contiguous) of an unsharded tensor of `role`, as TP_KINDS[tp] splits it."""
        dim = TP_KINDS[self.tp].get(role) if self.size > 1 else None
        if dim is None:
            return full
        dim %= full.dim()
        wrong = role != "output" and os.environ.get(WRONG_SHARD_ENV) == str(self.rank)
        lo, hi = self.part(full.shape[dim], (self.rank + wrong) % self.size)
        local = full.narrow(dim, lo, hi - lo).contiguous()
        self.shards.append((role, tuple(full.shape), tuple(local.shape), dim, lo, hi, digest(local)))
        return local

    def gather(self, obj) -> list:
        return self.comm.allgather(obj) if self.comm is not None else [obj]

    def verify(self, label: str, pk) -> None:
        """After a case ran on every rank (collective), from what all ranks gathered: each split dim is
        smaller than the whole, and the ranks' parts tile it and differ (SHARDED lines); the replicated
        outputs (every output in a replicated layer's test, a reduce layer's) agree (IDENTICAL lines).
        Inside on_all_ranks: a failed check fails every rank with the same message."""
        same = [a.tensor.name for layer in pk.layers for a in layer.outputs
                if a.written and (self.tp == "replicated" or layer_tp(layer.kind) == "reduce")]
        everyone = self.gather((self.shards, [digest(pk.get_tensor(n)) for n in same]))
        with on_all_ranks(f"{label}: tensor parallelism '{self.tp}'"):
            for k, (role, full, local, dim, lo, hi, _) in enumerate(self.shards):
                parts = [theirs[0][k][4:] for theirs in everyone]
                assert local[dim] < full[dim], f"'{role}' is not split: {full} -> {local}"
                assert [p[:2] for p in parts] == [self.part(full[dim], q) for q in range(self.size)] and \
                    len({p[2] for p in parts}) == self.size, f"'{role}': the ranks hold {parts}"
                say(f"SHARDED {label} tp={self.tp} {role} {full} -> {local} (dim {dim}: [{lo}, {hi}) of "
                    f"{full[dim]}); the {self.size} ranks' parts tile it and differ PASS")
            for i, n in enumerate(same):
                seen = [theirs[1][i] for theirs in everyone]
                assert len(set(seen)) == 1, f"replicated output '{n}' differs across ranks: {seen}"
                say(f"IDENTICAL {label} {n} sha256={seen[0]} on all {self.size} rank(s) PASS")


ONE_RANK = World()


def script_world(layer: str | None = None) -> World:
    """A one-rank World under plain python (mpi4py is not imported); under `mpirun -n N` (the launcher's
    PMI_SIZE or OMPI_COMM_WORLD_SIZE set) COMM_WORLD's rank and size, with the abort-on-exception hook
    installed (dist.install_excepthook); tp: the layer's TP."""
    tp = layer_tp(layer) if layer else None
    if not {"PMI_SIZE", "OMPI_COMM_WORLD_SIZE"} & set(os.environ) or dist.mpi().COMM_WORLD.Get_size() == 1:
        return World(tp=tp)
    comm = dist.mpi().COMM_WORLD
    dist.install_excepthook(comm)
    return World(comm.Get_rank(), comm.Get_size(), comm, tp)


def _on_world(world: World, label: str, run):
    """One case: on one rank exactly run(world); on several run(fresh World), then World.verify. A
    failure propagates: the excepthook prints the rank's traceback and MPI_Abort ends the job."""
    if world.size == 1:
        return run(world)
    case = World(world.rank, world.size, world.comm, world.tp)
    try:
        pk = run(case)
    except CaseSkipped as e:
        return say(f"SKIP {label}: {e}")
    case.verify(label, pk)
    return pk


def mpiexec() -> str:
    """The `mpiexec` of this Python's environment (the mpich wheel installs it), else the PATH's."""
    here = os.path.join(sysconfig.get_path("scripts"), "mpiexec")
    found = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if not found:
        raise FileNotFoundError(f"mpiexec not found in {os.path.dirname(here)} or on PATH: "
                                f"{dist.INSTALL_HINT}")
    return found


def mpirun(file: str, n: int, timeout: float = 60, args: tuple = (),
           env: dict | None = None) -> tuple[int, str]:
    """Run `mpiexec -n N python FILE ARGS` and return (exit code, stdout + stderr); 124 on a timeout,
    after killing the whole job. Multi-rank tests assert on the code and on per-rank evidence lines."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, file, *map(str, args)]
    full_env = dict(os.environ, **(env or {}))
    full_env.pop("PYTEST_CURRENT_TEST", None)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
        code = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)           # mpiexec and every rank: one session
        out, _ = proc.communicate()
        out += f"\n[mpirun] TIMEOUT: killed after {timeout:g} s: {' '.join(cmd)}\n"
        code = 124
    print(f"$ {' '.join(cmd)}  -> exit {code}\n{out}", flush=True)
    return code, out


def rank_lines(output: str, rank: int, prefix: str) -> list[str]:
    """Lines of rank `rank` in an mpirun output that start with `prefix` (after "[rank r] ")."""
    tag = f"[rank {rank}] {prefix}"
    return [line for line in output.splitlines() if line.startswith(tag)]


def as_rank(rank: int, world_size: int, layer_call: Callable) -> Callable:
    """layer_call(pk, tensors) with the layer declared as rank `rank` of `world_size` would declare it (a
    layer module reads pk.mpi_rank and pk.world_size for its rank flag, e.g. which rank adds a residual):
    a kernel-level case (run_tasks) at another rank's parameters, in one process, without MPI."""
    def call(pk, tensors):
        saved = pk.mpi_rank, pk.world_size
        pk.mpi_rank, pk.world_size = rank, world_size
        try:
            layer_call(pk, tensors)
        finally:
            pk.mpi_rank, pk.world_size = saved
    return call
