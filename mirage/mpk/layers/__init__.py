"""Layer modules: one per layer, found by name (`pk.<stem>_layer` -> `layers/<stem>.py`).

A layer module checks shapes, states its partition map and returns a `Layer`; it never
compiles or runs anything. The helpers below are the shared vocabulary of those checks.

Task types: each layer module's `TASK_TYPE` is the number its tasks carry in the task table and
in task_graph_rank{R}.json. Where MPK has the task, it is MPK's `TaskType` number (MPK numbers
layer tasks from 100 up and its event types 900-999: `MPK_TASK_TYPES`). A layer MPK does not have
takes the next free number of `EXTENSION_TASK_TYPES`, 1000-1999, "mirage-mpk extensions"
(`python -m mirage.mpk new-layer <stem>` writes it). `task_type_of` raises when a module's number
is in neither range or two modules share one, naming the modules and the next free number.
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable, Iterable

from ..dtypes import DType
from ..tensor import FUSED, DTensor, group_chunks

NOT_SPLIT = -1
AXES = "xyz"
# Access.shared: tasks along a grid axis that does not split this output share its tile, each writing
# only the part of its request, which the meta tensors decide at run time (paged attention: grid.x is
# the request, qo_indptr_buffer its rows). Layer.live names each task's part; test mode checks it.
BY_REQUEST = "by_request"
# ACCUMULATE: tasks along a grid axis that does not split this output add their partials into its tile
# (atomics: split-K). The output is read-modify-written: the layer also lists it as an input (its initial
# value) and declares that in place (Layer.inplace), so it is not poisoned; the adds' order is the schedule's.
ACCUMULATE = "accumulate"
# Non-vacuity checks a layer may declare for its outputs (mirage.mpk.testing runs them).
FINITE, NONZERO, DIFFERS_FROM_INPUT = "finite", "nonzero", "differs_from_input"
DEFAULT_CHECKS = (FINITE, NONZERO, DIFFERS_FROM_INPUT)


@dataclass
class Access:
    """One tensor of a layer: `pmap[a]` is the tensor dim that grid axis a splits (-1: none)."""
    role: str
    tensor: DTensor
    pmap: tuple[int, int, int] = (NOT_SPLIT, NOT_SPLIT, NOT_SPLIT)
    written: bool = True      # outputs only: False for dummy outputs a task never touches
    shared: str | None = None  # outputs only: BY_REQUEST, ACCUMULATE, or None (every grid axis > 1 splits it)
    # A tensor map of each task's 2-D tile for TMA (csrc/runtime/tile_maps.h): (box rows, box columns,
    # swizzle bytes 0 / 32 / 64 / 128), or None. The kernel reads it as TaskView::tma(slot).
    tma: tuple[int, int, int] | None = None


@dataclass
class Layer:
    name: str                 # unique in its kernel, e.g. "rmsnorm_0"
    kind: str                 # module stem == C++ task file stem == test folder
    grid: tuple[int, int, int]
    inputs: list[Access]
    outputs: list[Access]
    template: tuple[DType, ...]     # C++ template arguments of the task kernel
    fparams: tuple[float, ...] = ()
    iparams: tuple[int, ...] = ()
    checks: tuple[str, ...] = DEFAULT_CHECKS
    params: dict = field(default_factory=dict)   # for references and reports (eps, ...)
    # Role of a symmetric output whose tile's cross-rank signal slot each task uses (allreduce):
    # the graph numbers the slots and passes (slot, use, uses per pass) as iparams 0..2.
    signal_role: str | None = None
    # Scalar parameters the kernel must honour: name -> the value a kernel that ignored the
    # parameter would in effect compute with (rmsnorm: eps -> 0). The layer's tests must run a
    # case where that value moves the reference beyond the tolerance (testing.check_scalars).
    scalars: dict = field(default_factory=dict)
    block: tuple[int, int, int] = (128, 1, 1)    # block_dim as given; at most the worker block's threads
    # In-place use the kernel supports: output role -> the input roles it may share storage with
    # (each task reads its own tile whole before storing it). Any other sharing is refused
    # (check_aliasing). An in-place output is not poisoned, so not checked for unwritten elements.
    inplace: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # Per-task iparams (coord -> ints), for a layer whose tasks differ in more than their tiles (the
    # request a paged-attention task serves); None: every task gets `iparams`.
    task_iparams: Callable[[tuple[int, int, int]], tuple[int, ...]] | None = None
    # The part of its tiles a task really touches, decided by the meta tensors (qo_indptr_buffer,
    # paged_kv_*): live(meta, coord) -> {role: bool mask shaped like the role's whole tensor}, on the CPU
    # whatever the tensors' device (host bookkeeping: made with device="cpu", never torch's default device,
    # which a GPU test sets to CUDA; the callers move them). Inputs: the elements it may read; outputs:
    # the elements it writes, every one. Roles left out: the whole tile.
    # A kernel-level run loads only the live input elements and checks writes against the live outputs;
    # test mode checks every live output element was written. It may read only the batch layout
    # (qo_indptr_buffer, paged_kv_*_buffer, num_new_tokens), which a test-mode pass leaves as its tasks
    # saw it.
    live: Callable[[dict, tuple[int, int, int]], dict] | None = None
    # Float32 input roles the kernel reads as UE8M0, by their exponent field alone (MPK's block-scaled fp8
    # GEMMs): a scale that is not a power of two counts as the power of two below it. The evidence line of
    # every output computed from this layer says how many were not, and by how much (testing.ue8m0_note).
    ue8m0_scales: tuple[str, ...] = ()

    @property
    def cpp_function(self) -> str:
        return kernel_function(self.kind, self.template)

    @property
    def task_type(self) -> int:
        return task_type_of(self.kind)

    @property
    def num_tasks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]


def kernel_function(kind: str, template: tuple[DType, ...]) -> str:
    """The C++ task kernel a layer kind runs for these template dtypes (csrc/tasks/<kind>.cuh)."""
    return f"mpk::{kind}_task<{', '.join(d.cpp for d in template)}>"


# MPK_TASK_FIRST_LAYER (csrc/runtime/abi.h) up to MPK's event types (900-999), which no task uses.
MPK_TASK_TYPES = range(100, 900)
EXTENSION_TASK_TYPES = range(1000, 2000)     # mirage-mpk extensions: layers MPK has no TaskType for


def layer_stems() -> list[str]:
    """Every layer module's stem (layers/<stem>.py; `_`-prefixed modules are helpers)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def task_type_of(kind: str) -> int:
    """The stable task type of a layer kind: its module's TASK_TYPE, the same in every graph's JSON
    and task table; checked against every other layer module's (check_task_types)."""
    # kind itself too: a layer module may be registered without a file (a test's broken sample kernels)
    types = {stem: getattr(importlib.import_module(f"{__name__}.{stem}"), "TASK_TYPE", None)
             for stem in dict.fromkeys([*layer_stems(), kind])}
    return check_task_types(types)[kind]


def next_free_task_type(used: Iterable[object]) -> int:
    """The lowest number of EXTENSION_TASK_TYPES that no layer module uses."""
    taken = {n for n in used if isinstance(n, int)}
    return next(n for n in EXTENSION_TASK_TYPES if n not in taken)


def check_task_types(types: dict[str, object]) -> dict[str, int]:
    """stem -> TASK_TYPE of every layer module, or ValueError naming the module(s) and the fix:
    each an int in MPK_TASK_TYPES (MPK's TaskType) or EXTENSION_TASK_TYPES, no two alike."""
    free = next_free_task_type(types.values())
    for stem, n in types.items():
        if not (isinstance(n, int) and not isinstance(n, bool)) or (
                n not in MPK_TASK_TYPES and n not in EXTENSION_TASK_TYPES):
            what = "declares no TASK_TYPE" if n is None else f"TASK_TYPE = {n!r} is not a task type"
            raise ValueError(
                f"layers/{stem}.py {what}: use MPK's TaskType number "
                f"({MPK_TASK_TYPES.start}-{MPK_TASK_TYPES.stop - 1}) where MPK has the task, else the next "
                f"free mirage-mpk extension number, {free} (range {EXTENSION_TASK_TYPES.start}-"
                f"{EXTENSION_TASK_TYPES.stop - 1})")
    owners: dict[int, str] = {}
    for stem, n in sorted(types.items()):
        if n in owners:
            raise ValueError(
                f"layers/{owners[n]}.py and layers/{stem}.py both declare TASK_TYPE = {n}: task types name "
                f"a layer kind in the task table and task_graph_rank{{R}}.json, so each must be unique; "
                f"give the one MPK does not number the next free extension number, {free}")
        owners[n] = stem
    return types


def find_layer(method: str) -> Callable[..., Layer]:
    """`rmsnorm_layer` -> mirage.mpk.layers.rmsnorm.rmsnorm_layer; an MPK name that is not its module's
    stem is the module's function of that name (`embed_layer` in layers/embedding.py); else AttributeError."""
    stem = method[: -len("_layer")]
    try:
        module = importlib.import_module(f"{__name__}.{stem}")
    except ModuleNotFoundError as e:
        if e.name != f"{__name__}.{stem}":
            raise                         # the layer exists but one of its imports is missing
        mods = [importlib.import_module(f"{__name__}.{s}") for s in layer_stems()]
        fns = {n: f for m in mods for n, f in vars(m).items()
               if n.endswith("_layer") and getattr(f, "__module__", None) == m.__name__}
        if method in fns:
            return fns[method]
        known = sorted(fns)
        raise AttributeError(f"PersistentKernel has no layer '{method}' (no module mirage/mpk/layers/"
                             f"{stem}.py); known layers: {', '.join(known)}") from None
    return getattr(module, method)


# ---- checks shared by the layer modules --------------------------------------------------

def check_tensor(layer: str, role: str, t: object, *, ndim: int | None = None,
                 dims: tuple | None = None, dtype: DType | tuple[DType, ...] | None = None) -> DTensor:
    if not isinstance(t, DTensor):
        raise TypeError(f"layer '{layer}': '{role}' must be a DTensor from attach_input/new_tensor, "
                        f"got {type(t).__name__}")
    if ndim is not None and len(t.dims) != ndim:
        raise ValueError(f"layer '{layer}': tensor '{t.name}' ({role}) must be {ndim}-D, "
                         f"got shape {t.dims}")
    if dims is not None:
        for d, (want, got) in enumerate(zip(dims, t.dims)):
            if want is not None and want != got:
                raise ValueError(f"layer '{layer}': tensor '{t.name}' ({role}) dim {d} is {got}, "
                                 f"expected {want} (shape {t.dims}, expected "
                                 f"{tuple('*' if w is None else w for w in dims)})")
    if dtype is not None:
        allowed = dtype if isinstance(dtype, tuple) else (dtype,)
        if t.dtype not in allowed:
            raise ValueError(f"layer '{layer}': tensor '{t.name}' ({role}) has dtype {t.dtype.name}, "
                             f"expected {' or '.join(d.name for d in allowed)}")
    return t


def storage(t: DTensor) -> set[str]:
    """Names of the storage-owning tensors behind `t` (a fused view: its sources)."""
    return {s.name for s in t.sources} if t.kind == FUSED else {t.name}


def check_aliasing(layer: Layer) -> list[str]:
    """A written output sharing storage with an input of the same layer (the same tensor, or a fused
    view of it) is refused unless the layer declares that in-place use (Layer.inplace). Attached
    tensors never overlap each other (attach_input), so sharing storage is sharing bytes. Returns the
    declared in-place uses found ("'T' (output = input_a)")."""
    found = []
    for out in (acc for acc in layer.outputs if acc.written):
        for inp in layer.inputs:
            shared = storage(out.tensor) & storage(inp.tensor)
            if shared and inp.role in layer.inplace.get(out.role, ()):
                found.append(f"'{sorted(shared)[0]}' ({out.role} = {inp.role})")
            elif shared:
                allowed = {o: list(i) for o, i in layer.inplace.items()} or "none"
                raise ValueError(f"layer '{layer.name}': tensor '{sorted(shared)[0]}' is both its input "
                                 f"'{inp.role}' ('{inp.tensor.name}') and its output '{out.role}' "
                                 f"('{out.tensor.name}'); a {layer.kind} layer may not run in place there "
                                 f"(in-place uses it declares: {allowed}). Write to a separate tensor")
    return found


def check_grid(layer: str, grid_dim: object, block_dim: object) -> tuple[int, int, int]:
    """grid_dim: 1-3 positive ints. block_dim is validated; every task runs on the worker block's
    threads (PersistentKernel.worker_threads), which block_dim may not exceed (checked at compile)."""
    grid = dim3(layer, "grid_dim", grid_dim)
    block = dim3(layer, "block_dim", block_dim)
    if block[0] * block[1] * block[2] > 1024:
        raise ValueError(f"layer '{layer}': block_dim {block} has more than 1024 threads")
    return grid


def dim3(layer: str, what: str, v: object) -> tuple[int, int, int]:
    """1 to 3 positive ints -> (x, y, z), missing ones 1; else ValueError naming the layer."""
    t = tuple(v) if isinstance(v, (tuple, list)) else (v,)
    if not 1 <= len(t) <= 3 or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1
                                       for x in t):
        raise ValueError(f"layer '{layer}': {what} must be 1 to 3 positive ints, got {v!r}")
    return tuple(t) + (1,) * (3 - len(t))


def check_splits(layer: str, grid: tuple[int, int, int], inputs: list[Access],
                 outputs: list[Access]) -> None:
    """Every split divides its dim; every grid axis > 1 splits every written output."""
    for acc in inputs + outputs:
        t = acc.tensor
        used = [d for d in acc.pmap if d != NOT_SPLIT]
        if len(used) != len(set(used)):
            raise ValueError(f"layer '{layer}': two grid axes split the same dim of '{t.name}'")
        for a, d in enumerate(acc.pmap):
            if d == NOT_SPLIT or grid[a] == 1:
                continue
            if t.dims[d] % grid[a]:
                ok = [g for g in range(1, t.dims[d] + 1) if t.dims[d] % g == 0]
                shown = ", ".join(map(str, ok[:12])) + (", ..." if len(ok) > 12 else "")
                raise ValueError(
                    f"layer '{layer}': tensor '{t.name}' ({acc.role}) dim {d} ({t.dims[d]}) is not "
                    f"divisible by grid_dim.{AXES[a]}={grid[a]}; grid sizes that divide {t.dims[d]}: "
                    f"{shown}")
            if t.kind == FUSED and d != 0:
                raise ValueError(f"layer '{layer}': fused tensor '{t.name}' can only be split on dim 0")
        if t.kind == FUSED:
            _check_fused_tiles(layer, acc, next((grid[a] for a, d in enumerate(acc.pmap) if d == 0), 1))
    for acc in outputs:
        if not acc.written or acc.shared in (BY_REQUEST, ACCUMULATE):
            continue
        for a in range(3):
            if grid[a] > 1 and acc.pmap[a] == NOT_SPLIT:
                raise ValueError(
                    f"layer '{layer}': grid_dim.{AXES[a]}={grid[a]} does not split output "
                    f"'{acc.tensor.name}'; its {grid[a]} tasks would write the same elements")


def _check_fused_tiles(layer: str, acc: Access, parts: int) -> None:
    """Each tile of a fused view must lie inside one input chunk: its kernel gets one pointer."""
    t = acc.tensor
    ends, end = [], 0
    for _, _, rows in group_chunks(t.sources, t.num_groups):
        end += rows
        ends.append(end)
    tile = t.dims[0] // parts
    bad = next((e for e in ends if e % tile), None)
    if bad is None:
        return
    n = t.dims[0]
    ok = [g for g in range(1, n + 1) if n % g == 0 and all(e % (n // g) == 0 for e in ends)]
    lo = bad // tile * tile
    raise ValueError(f"layer '{layer}': tile rows [{lo}, {lo + tile}) of fused tensor '{t.name}' "
                     f"({acc.role}, {n} rows split {parts} ways) straddle two inputs (a chunk ends at "
                     f"row {bad}); grid sizes that keep tiles inside one input: {', '.join(map(str, ok))}")
