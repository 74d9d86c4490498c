"""Shared by the graph-topology tests: check every layer of a run against its folder's reference.

check_graph(pk, before) walks pk.layers in program order. Each layer's output is compared with
tests/runtime_python/<layer>/pytorch_reference.py applied to the values that layer must have
read: graph inputs as they were before the run (`before`: so a task that ran before a
write-after-read dependency let it shows), and intermediates as the kernel left them (so a
consumer that read before its producer finished shows, and the budget stays per layer and
tight). An output that a later layer overwrites cannot be read back after the run: it is
not compared (the line says so), and a layer reading it in between is refused (restructure
the test). Budgets come from mirage.mpk.testing.

Loaded by path: `graph = testing.load_reference(__file__, name="graph_checks")`.
"""
import os

import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel
from mirage.mpk.tensor import ATTACHED

HERE = os.path.dirname(os.path.abspath(__file__))
KINDS = ("rmsnorm", "linear", "linear_with_residual", "silu_mul", "elementwise_add", "identity",
         "tensor_init")
REFS = {kind: testing.load_reference(os.path.join(HERE, "..", kind, "x.py")) for kind in KINDS}
BLOCK = (128, 1, 1)
CHUNK = 4096        # weight rows per float64 product: bounds the memory of real-size references


# Both dispatch models (docs/runtime.md, "Dispatch models"): the multi-layer graphs run under each.
DISPATCH = ["event", "mpk"]


def new_pk(jitter: int, **overrides) -> PersistentKernel:
    """Several workers and schedule jitter (a different seed per case), as every test here runs."""
    return PersistentKernel(**testing.cpu_config(jitter_seed=jitter, **overrides))


def output_dir(tmp_path=None) -> str:
    """pytest's tmp_path under pytest, ./test_output (or MPK_OUTPUT_DIR) as a script."""
    return str(tmp_path) if tmp_path is not None else os.environ.get("MPK_OUTPUT_DIR", "./test_output")


def snapshot(pk: PersistentKernel) -> dict[str, torch.Tensor]:
    """Clones of every attached tensor, taken before pk(): the graph inputs as the layers must see them."""
    return {name: t.data.clone() for name, t in pk.tensors.items() if t.kind == ATTACHED}


def by_rows(fn, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fn(x, w) over CHUNK-row slices of w (output columns), concatenated: same maths, less memory."""
    return torch.cat([fn(x, w[i:i + CHUNK]) for i in range(0, w.shape[0], CHUNK)], dim=1)


def abs_product(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """|x| @ |W|^T in float64: the linear budget's scale."""
    return by_rows(lambda a, b: a.abs().double() @ b.abs().double().T, x, w)


def reference_and_budget(layer, ins: dict[str, torch.Tensor]):
    """(float64 reference, testing tolerance) of one layer applied to `ins` (role -> tensor)."""
    kind, dtype = layer.kind, layer.template[0]
    if kind == "rmsnorm":
        x, w = ins["input"], ins["weight"]
        return REFS[kind].rmsnorm(x, w, layer.params["eps"]), testing.tol_rmsnorm(dtype, x.shape[1])
    if kind == "linear":
        x, w = ins["input"], ins["weight"]
        expected = by_rows(REFS[kind].linear, x, w)
        return expected, testing.tol_linear(dtype, x.shape[1], abs_product(x, w))
    if kind == "linear_with_residual":
        x, w, r = ins["input"], ins["weight"], ins["residual"]
        add = layer.params["add_residual"]
        expected = torch.cat([REFS[kind].linear_with_residual(x, w[i:i + CHUNK], r[:, i:i + CHUNK], add)
                              for i in range(0, w.shape[0], CHUNK)], dim=1)
        scale = abs_product(x, w) + (r.double().abs() if add else 0.0)
        return expected, testing.tol_linear(dtype, x.shape[1] + int(add), scale)
    if kind == "silu_mul":
        return REFS[kind].silu_mul(ins["input"], layer.params["groups"]), testing.tol_elementwise(dtype)
    if kind == "elementwise_add":
        a, b = ins["input_a"], ins["input_b"]
        scale = a.double().abs() + b.double().abs()
        return REFS[kind].elementwise_add(a, b), testing.tol_elementwise(dtype, scale)
    if kind == "identity":
        return REFS[kind].identity(ins["input"]), testing.tol_elementwise(dtype)
    if kind == "tensor_init":
        out = next(a.tensor for a in layer.outputs if a.written)
        return REFS[kind].tensor_init(torch.empty(out.dims)), testing.tol_elementwise(dtype)
    raise NotImplementedError(f"no reference for layer kind '{kind}'")


def check_graph(pk: PersistentKernel, before: dict[str, torch.Tensor], label: str) -> None:
    """Compare every layer's output with its reference, as described at the top of this file."""
    last_writer = {}
    for i, layer in enumerate(pk.layers):
        for acc in layer.outputs:
            if acc.written:
                last_writer[acc.tensor.name] = i
    seen: dict[str, torch.Tensor | None] = {}      # name -> value the next reader sees (None: lost)

    def value(layer, t):
        if t.name not in seen:
            return before[t.name] if t.kind == ATTACHED else pk.get_tensor(t.name)
        if seen[t.name] is None:
            raise NotImplementedError(f"layer '{layer.name}' reads '{t.name}', which a later layer "
                                      f"overwrites: the run keeps no copy to check against")
        return seen[t.name]

    for i, layer in enumerate(pk.layers):
        ins = {acc.role: value(layer, acc.tensor) for acc in layer.inputs}
        (out,) = [acc.tensor for acc in layer.outputs if acc.written]
        expected, tol = reference_and_budget(layer, ins)
        name = f"{label}:{layer.name}.{out.name}"
        if last_writer[out.name] != i:
            print(f"OVERWRITTEN {name}: layer '{pk.layers[last_writer[out.name]].name}' writes it later, "
                  f"so this value is gone after the run; the later layer's value is checked", flush=True)
            seen[out.name] = None
            continue
        actual = pk.get_tensor(out.name)
        testing.assert_close(name, actual, expected, tol, pk=pk)
        testing.check_nonvacuous(name, actual, layer.checks, inputs=tuple(ins.values()),
                                 reference=None if layer.kind == "tensor_init" else expected)
        seen[out.name] = actual


def fan(pk: PersistentKernel) -> tuple[int, int]:
    """(largest number of events one task triggers, largest num_triggers of an event one task waits on)."""
    graph = pk.graph
    launch = [e for e in graph.events if e.kind == "launch"]
    most_triggers = max(len([e for e in t.triggers if e != graph.end_event]) for t in graph.tasks[1:])
    return most_triggers, max((e.num_triggers for e in launch), default=0)


def waits_on_layers(pk: PersistentKernel, task) -> set[str]:
    """Names of the layers whose tasks trigger the event `task` waits on."""
    if task.event <= 0:
        return set()
    return {pk.graph.tasks[p].layer.name for p in pk.graph.triggers_of(task.event)}


def consumers_of(pk: PersistentKernel, task) -> set[str]:
    """Names of the layers whose tasks wait on an event `task` triggers."""
    return {pk.graph.tasks[w].layer.name for e in task.triggers for w in pk.graph.events[e].waiters}


def attach(pk: PersistentKernel, dtype, gen, **shapes) -> dict:
    """Attach one tensor per name=shape: zeros for names starting with 'out_', random otherwise
    (weights named 'w*' scaled by 1/sqrt(last dim), so outputs stay near unit size)."""
    dts = {}
    for name, shape in shapes.items():
        if name.startswith("out_"):
            t = torch.zeros(shape, dtype=dtype)
        else:
            t = testing.randn(shape, dtype, gen, scale=shape[-1] ** -0.5 if name.startswith("w") else 1.0)
        dts[name] = pk.attach_input(t, name=name)
    return dts
