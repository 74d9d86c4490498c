"""PersistentKernel: MPK's public API. It holds state and delegates; layers live in layers/."""
from __future__ import annotations

import ctypes as C
import functools
import inspect
import logging
import os

import torch

from . import abi, codegen, dist, faults, memcheck, profiler, reuse, written
from . import build as build_mod
from . import graph as graph_mod
from .dtypes import DType, bfloat16, to_dtype
from .errors import MPKHangError, MPKRuntimeError
from .faults import Fault
from .layers import check_aliasing, dim3, find_layer
from .meta import build_meta, check_requests
from .runtime import Runtime
from .tensor import (
    ATTACHED,
    FUSED,
    NEW,
    SHUFFLED,
    SYMMETRIC,
    DTensor,
    check_name,
    row_major_strides,
    shuffle_into,
)

log = logging.getLogger("mirage.mpk")

_MPK_DEFAULTS = dict(mode="offline", world_size=1, mpi_rank=0, num_workers=1, num_local_schedulers=4,
                     num_remote_schedulers=0, max_seq_length=1, max_num_batched_requests=1,
                     max_num_batched_tokens=1, max_num_pages=1, page_size=1, meta_tensors={},
                     profiler_tensor=None, trace_name="test_trace", spec_decode_config=None,
                     use_cutlass_kernel=False, eos_token_id=-1)
_POSITIVE = ("num_workers", "num_local_schedulers", "max_seq_length", "max_num_batched_requests",
             "max_num_batched_tokens", "max_num_pages", "page_size", "world_size")
_BACKENDS = ("auto", "cpu", "cuda")
_DISPATCH = {"event": 0, "mpk": 1}      # MPK_DISPATCH_EVENT, MPK_DISPATCH_MPK (csrc/runtime/abi.h)
# Dynamic shared memory of a worker block: what every GPU since Volta gives a block without
# opting in (48 KiB); task kernels take theirs through mpk::smem (csrc/runtime/simt.h).
WORKER_SMEM_BYTES = 48 * 1024
_IO_CATEGORIES = {"cuda_tensor": NEW, "cpu_tensor": NEW, "nvshmem_tensor": SYMMETRIC,
                  "symmetric_tensor": SYMMETRIC}


def _seed(name: str, value) -> int:
    """A schedule-jitter seed: an integer in [0, 2^64) (the runtime's seed is a uint64)."""
    try:
        seed = int(value) if not isinstance(value, (bool, float)) else None
    except ValueError:
        seed = None
    if seed is None or not 0 <= seed < 2**64:
        raise ValueError(f"{name}={value!r}: a schedule-jitter seed must be an integer in [0, 2^64) (e.g. "
                         f"{name}=7); leave it unset for no jitter")
    return seed


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    try:
        return float(raw) if raw not in (None, "") else default
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


class PersistentKernel:
    """Build a task graph from layers, compile it once, run it (exactly one pass in test mode)."""

    @classmethod
    def get_default_init_parameters(cls) -> dict:
        """MPK's constructor defaults, a fresh dict each call (test_mode is not among them)."""
        d = dict(_MPK_DEFAULTS)
        d["meta_tensors"] = {}
        return d

    def __init__(self, mode: str = "offline", world_size: int = 1, mpi_rank: int = 0, num_workers: int = 1,
                 num_local_schedulers: int = 4, num_remote_schedulers: int = 0, max_seq_length: int = 1,
                 max_num_batched_requests: int = 1, max_num_batched_tokens: int = 1, max_num_pages: int = 1,
                 page_size: int = 1, meta_tensors: dict | None = None, profiler_tensor=None,
                 trace_name: str = "test_trace", spec_decode_config=None, use_cutlass_kernel: bool = False,
                 eos_token_id: int = -1, test_mode: bool = False, *, backend: str = "auto",
                 watchdog_s: float | None = None, schedule_jitter: int | None = None,
                 fault: Fault | None = None, profile: bool = False, target_cc: int | None = None,
                 dispatch: str | None = None):
        self.params = dict(mode=mode, world_size=world_size, mpi_rank=mpi_rank, num_workers=num_workers,
                           num_local_schedulers=num_local_schedulers,
                           num_remote_schedulers=num_remote_schedulers, max_seq_length=max_seq_length,
                           max_num_batched_requests=max_num_batched_requests,
                           max_num_batched_tokens=max_num_batched_tokens, max_num_pages=max_num_pages,
                           page_size=page_size, eos_token_id=eos_token_id)
        for key in _POSITIVE:
            v = self.params[key]
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"PersistentKernel: {key} must be a positive int, got {v!r}")
        if mode != "offline":
            raise ValueError(f"PersistentKernel: mode {mode!r} is not supported; use 'offline'")
        if not isinstance(mpi_rank, int) or not 0 <= mpi_rank < world_size:
            raise ValueError(f"PersistentKernel: mpi_rank={mpi_rank!r} is outside 0..{world_size - 1}")
        # world_size > 1: COMM_WORLD must match, and an uncaught exception aborts the job (dist.py)
        self._comm = dist.world(world_size, mpi_rank) if world_size > 1 else None
        if backend not in _BACKENDS:
            raise ValueError(f"PersistentKernel: backend={backend!r}; expected one of {_BACKENDS}")
        # profiler_tensor (MPK's) or profile=True: a trace after every launch (docs/profiler.md)
        self.profiler_tensor, self.profile = profiler_tensor, bool(profile) or profiler_tensor is not None
        if self.profile:
            profiler.require()        # perfetto missing: an MPKInstallError now, not after a launch
        self.world_size, self.mpi_rank = world_size, mpi_rank
        self.test_mode = bool(test_mode)
        self.backend = backend
        self.trace_name = trace_name
        self.watchdog_s = float(watchdog_s) if watchdog_s is not None else _env_float("MPK_WATCHDOG_S", 30.0)
        env_jitter = os.environ.get("MPK_SCHEDULE_JITTER", "")
        if schedule_jitter is None and env_jitter != "":
            schedule_jitter = _seed("MPK_SCHEDULE_JITTER", env_jitter)
        elif schedule_jitter is not None:
            schedule_jitter = _seed("schedule_jitter", schedule_jitter)
        self.schedule_jitter = schedule_jitter
        # docs/runtime.md, "Dispatch models": "event" enqueues a task when its event fires, "mpk" every
        # task at a pass's start (MPK's pre-launch); MPK_DISPATCH runs a whole suite under one of them
        self.dispatch = dispatch if dispatch is not None else os.environ.get("MPK_DISPATCH", "event")
        if self.dispatch not in _DISPATCH:
            raise ValueError(f"PersistentKernel: dispatch={self.dispatch!r}; expected one of "
                             f"{sorted(_DISPATCH)}")
        self.sanitize = os.environ.get("MPK_SANITIZE", "")
        if target_cc is not None and (not isinstance(target_cc, int) or isinstance(target_cc, bool)
                                      or not 0 <= target_cc < 1000):
            raise ValueError(f"PersistentKernel: target_cc={target_cc!r}; expected a compute capability as "
                             f"an int, e.g. 80 (Ampere: a 128-thread worker block) or 90 (Hopper: 256)")
        self._target_cc = target_cc
        self.fault = fault if fault is not None else faults.from_env()
        if self.fault is not None and self.fault.rank is not None:
            if not 0 <= self.fault.rank < world_size:
                raise ValueError(f"PersistentKernel: fault rank {self.fault.rank} is outside "
                                 f"0..{world_size - 1}")
            if self.fault.rank != mpi_rank:
                self.fault = None              # the fault hits another rank; this one runs clean
        self._heap: dist.SymmetricHeap | None = None
        self._given_meta = dict(meta_tensors or {})
        self.meta_tensors: dict[str, torch.Tensor] = {}
        self.tensors: dict[str, DTensor] = {}
        self.layers: list = []
        self.device: torch.device | None = None
        self.graph = None
        self.build = None
        self.output_files: tuple[str, str] | None = None
        self._runtime: Runtime | None = None
        self._meta_at_first_launch: dict[str, torch.Tensor] | None = None
        self._fences: memcheck.Fences | None = None
        self._finalized = False
        self.passes = 0                     # graph passes of the last launch

    # ---- tensors ---------------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self.graph is not None:
            raise RuntimeError(f"{what} after compile(): the graph is frozen; build a new PersistentKernel")

    def _table(self) -> list[DTensor]:
        return [t for t in self.tensors.values() if t.id >= 0]

    def _add(self, t: DTensor) -> DTensor:
        if t.kind != FUSED:
            t.id = len(self._table())
        self.tensors[t.name] = t
        return t

    def _claim_device(self, device: torch.device, what: str) -> None:
        if device.type not in ("cpu", "cuda"):
            # e.g. a 'meta' tensor: no storage, so every data_ptr() is 0 and would read as aliasing
            raise ValueError(f"{what} is on device '{device}', which the runtime cannot run on; "
                             f"attach cpu tensors (CPU backend) or cuda tensors (CUDA backend)")
        want = {"cpu": "cpu", "cuda": "cuda"}.get(self.backend)
        if want and device.type != want:
            raise ValueError(f"{what} is on {device} but backend={self.backend!r}; move it to {want}")
        if self.device is None:
            self.device = device
        elif device != self.device:
            raise ValueError(f"{what} is on {device} but earlier tensors are on {self.device}; "
                             f"all tensors of one kernel must share a device")

    def attach_input(self, torch_tensor: torch.Tensor, name: str | None = None) -> DTensor:
        """Register a torch tensor (input, weight or output); outputs are written in place."""
        self._check_open("attach_input")
        if not isinstance(torch_tensor, torch.Tensor):
            raise TypeError(f"attach_input: expected a torch.Tensor for '{name}', "
                            f"got {type(torch_tensor).__name__}")
        name = check_name(name, self.tensors)
        try:
            dtype = to_dtype(torch_tensor.dtype)
        except TypeError as e:
            raise TypeError(f"attach_input: tensor '{name}' {tuple(torch_tensor.shape)}: {e}") from None
        if not torch_tensor.is_contiguous():
            raise ValueError(f"attach_input: tensor '{name}' (shape {tuple(torch_tensor.shape)}, strides "
                             f"{torch_tensor.stride()}) is not contiguous; pass .contiguous()")
        if torch_tensor.dim() == 0:
            raise ValueError(f"attach_input: tensor '{name}' is 0-D; attach at least 1-D tensors")
        self._claim_device(torch_tensor.device, f"tensor '{name}'")
        lo = torch_tensor.data_ptr()
        hi = lo + torch_tensor.numel() * torch_tensor.element_size()
        for other in self._table():
            if other.kind == ATTACHED:
                olo = other.data.data_ptr()
                ohi = olo + other.data.numel() * other.data.element_size()
                if lo < ohi and olo < hi:
                    raise ValueError(f"attach_input: tensor '{name}' shares memory with '{other.name}'; "
                                     f"attach the base tensor once (dependencies are tracked per tensor)")
        return self._add(DTensor(name, tuple(torch_tensor.shape), tuple(torch_tensor.stride()), dtype,
                                 ATTACHED, data=torch_tensor))

    def new_tensor(self, dims, strides=None, dtype: DType = bfloat16, name: str | None = None,
                   io_category: str = "cuda_tensor") -> DTensor:
        """A tensor the runtime allocates (read it after a run with get_tensor)."""
        self._check_open("new_tensor")
        name = check_name(name if name is not None else f"tensor_{len(self.tensors)}", self.tensors)
        dims = tuple(int(d) for d in dims)
        if not dims or any(d < 1 for d in dims):
            raise ValueError(f"new_tensor '{name}': dims must be positive, got {dims}")
        if strides is not None and tuple(strides) != row_major_strides(dims):
            raise ValueError(f"new_tensor '{name}': strides {tuple(strides)} are not row-major "
                             f"{row_major_strides(dims)}; only row-major tensors are supported")
        if io_category not in _IO_CATEGORIES:
            raise ValueError(f"new_tensor '{name}': io_category {io_category!r} is not one of "
                             f"{sorted(_IO_CATEGORIES)} ('nvshmem_tensor' = 'symmetric_tensor': memory every "
                             f"rank maps, e.g. an allreduce buffer)")
        kind = _IO_CATEGORIES[io_category]
        return self._add(DTensor(name, dims, row_major_strides(dims), to_dtype(dtype), kind))

    def _view_inputs(self, what: str, inputs, dim: int, num_groups: int) -> list[DTensor]:
        if dim != 0:
            raise ValueError(f"{what}: only dim 0 is supported, got {dim}")
        inputs = list(inputs)
        if not inputs or not all(isinstance(t, DTensor) and t.kind != FUSED for t in inputs):
            raise TypeError(f"{what}: inputs must be a non-empty list of attached/new DTensors")
        if not isinstance(num_groups, int) or num_groups < 1:
            raise ValueError(f"{what}: num_groups must be a positive int, got {num_groups!r}")
        first = inputs[0]
        for t in inputs:
            if t.dtype != first.dtype or t.dims[1:] != first.dims[1:]:
                raise ValueError(f"{what}: '{t.name}' {t.dims} {t.dtype.name} does not match '{first.name}' "
                                 f"{first.dims} {first.dtype.name} outside dim 0")
            if t.dims[0] % num_groups:
                raise ValueError(f"{what}: '{t.name}' dim 0 ({t.dims[0]}) is not divisible by "
                                 f"num_groups={num_groups}")
        return inputs

    def shuffle_tensors(self, inputs, shuffled_dim: int, num_groups: int, name: str | None = None) -> DTensor:
        """A physical interleave [g0: in0 chunk, in1 chunk, ...][g1: ...], copied before each run."""
        return self._grouped_view(SHUFFLED, "shuffle_tensors", inputs, shuffled_dim, num_groups, name)

    def fuse_tensors(self, inputs, fused_dim: int, num_groups: int, name: str | None = None) -> DTensor:
        """The same order as shuffle_tensors, as a virtual view (no copy); input side only."""
        return self._grouped_view(FUSED, "fuse_tensors", inputs, fused_dim, num_groups, name)

    def _grouped_view(self, kind: str, what: str, inputs, dim: int, num_groups: int, name) -> DTensor:
        self._check_open(what)
        prefix = "shuffled" if kind == SHUFFLED else "fused"
        name = check_name(name if name is not None else f"{prefix}_{len(self.tensors)}", self.tensors)
        srcs = self._view_inputs(f"{what} '{name}'", inputs, dim, num_groups)
        dims = (sum(t.dims[0] for t in srcs),) + srcs[0].dims[1:]
        return self._add(DTensor(name, dims, row_major_strides(dims), srcs[0].dtype, kind,
                                 sources=srcs, num_groups=num_groups))

    # ---- layers ----------------------------------------------------------------------------

    def __getattr__(self, attr: str):
        if attr.endswith("_layer") and not attr.startswith("_"):
            return functools.partial(self._add_layer, find_layer(attr))
        raise AttributeError(f"'PersistentKernel' object has no attribute '{attr}'")

    def _add_layer(self, fn, *args, **kwargs) -> None:
        kind = fn.__name__[: -len("_layer")]
        self._check_open(fn.__name__)
        name = f"{kind}_{len(self.layers)}"
        try:        # positional arguments in MPK's order work as well as keywords
            bound = inspect.signature(fn).bind(self, name, *args, **kwargs)
        except TypeError as e:
            params = list(inspect.signature(fn).parameters.values())[2:]
            shown = [p.name if p.default is p.empty else f"{p.name}={p.default!r}" for p in params]
            raise TypeError(f"{fn.__name__}: {e}; its arguments are ({', '.join(shown)})") from None
        layer = fn(self, name, *args, **kwargs)
        layer.block = dim3(name, "block_dim", bound.arguments["block_dim"])
        for acc in layer.inputs + layer.outputs:
            if self.tensors.get(acc.tensor.name) is not acc.tensor:
                raise ValueError(f"layer '{layer.name}': tensor '{acc.tensor.name}' belongs to another "
                                 f"kernel")
        for acc in layer.outputs:
            if acc.written and acc.tensor.kind in (SHUFFLED, FUSED):
                raise ValueError(f"layer '{layer.name}': output '{acc.tensor.name}' is a "
                                 f"{acc.tensor.kind} view; views are inputs only")
        check_aliasing(layer)      # declared in-place uses: test mode checks them too (written.InPlace)
        self.layers.append(layer)

    # ---- compile and run -------------------------------------------------------------------

    @property
    def worker_threads(self) -> int:
        """Threads of the worker block every task runs on: MPK's 256 from Hopper (cc 9.0) on, else 128.
        The CPU backend emulates the block of target_cc (PersistentKernel(target_cc=90): 256 threads)."""
        return 256 if self.target_cc >= 90 else 128

    @property
    def target_cc(self) -> int:
        """Compute capability the kernel is built for (e.g. 90): the device's on CUDA (target_cc=, if
        given, must match it); on the CPU backend the target_cc= given, or, if none, the one whose worker
        block fits every layer's block_dim: 0 (a 128-thread block) unless a layer asks for more threads,
        then 90 (256 threads, MPK's Hopper and Blackwell worker: MPK's files that pass block_dim=(256, 1,
        1) run unchanged)."""
        if self.device is not None and self.device.type == "cuda":
            major, minor = torch.cuda.get_device_capability(self.device)
            cc = major * 10 + minor
            if self._target_cc not in (None, cc):
                raise ValueError(f"PersistentKernel(target_cc={self._target_cc}) but {self.device} has "
                                 f"compute capability {cc}; leave target_cc unset on CUDA")
            return cc
        if self._target_cc is not None:
            return self._target_cc
        return 90 if any(b[0] * b[1] * b[2] > 128 for b in (layer.block for layer in self.layers)) else 0

    def _resolve_backend(self) -> str:
        device_type = self.device.type if self.device is not None else "cpu"
        if self.backend not in ("auto", device_type):
            raise ValueError(f"backend={self.backend!r} but the attached tensors are on {device_type}")
        return device_type

    @graph_mod.gc_paused()     # the graph's ~10 objects per task: no cyclic-GC pass over them mid-compile
    def compile(self, **kwargs) -> None:
        """Verify the graph, write test_rank{R}.cu / task_graph_rank{R}.json, build, load.

        With output_dir, also keep the built module and its metadata there for load_mpk_kernel()."""
        output_dir = self._check_build_kwargs("compile", kwargs)
        graph, variants, src, injecting = self._prepare()
        graph_json = codegen.task_graph_json(graph, variants) if output_dir else None
        if output_dir:
            self.output_files = codegen.write_outputs(output_dir, self.mpi_rank, src, graph_json)
            log.info("wrote %s and %s", *self.output_files)
        self.build = build_mod.compile_module(src, self.device.type, self.test_mode, self.sanitize, injecting,
                                              self.target_cc, what=", ".join(variants.cases), generated=True)
        if self.device.type == "cpu" and os.environ.get("MPK_ALSO_BUILD_CUDA"):  # gpu_check.sh --prepare:
            build_mod.compile_module(codegen.source(variants, "cuda", injecting), "cuda",  # the CUDA module
                                     self.test_mode, "", injecting, int(os.environ["MPK_ALSO_BUILD_CUDA"]))
        if output_dir:
            meta = reuse.describe(self, graph_json, src, build_mod.headers_digest(build_mod.csrc_dir()),
                                  abi.ABI_VERSION, injecting)
            kept = reuse.save(output_dir, self.mpi_rank, self.build.path, meta)
            log.info("kept the module for load_mpk_kernel(): %s", kept["module"])
        self._start(self.build.path, graph, variants)

    @graph_mod.gc_paused()
    def load_mpk_kernel(self, output_dir: str, **kwargs) -> None:
        """Run a module kept by an earlier compile(output_dir=...) of the same graph; no compiler runs.

        The kept metadata is checked against this declaration (graph, tensors, dtypes, rank, build
        flags, kernel sources) and a difference is a ValueError naming it. skip_validation=True (MPK's
        keyword) skips the graph comparison, never the module's checksum and source checks."""
        skip = bool(kwargs.pop("skip_validation", False))
        self._check_build_kwargs("load_mpk_kernel", kwargs)
        graph, variants, src, injecting = self._prepare()
        current = reuse.describe(self, codegen.task_graph_json(graph, variants), src,
                                 build_mod.headers_digest(build_mod.csrc_dir()), abi.ABI_VERSION, injecting)
        module = reuse.check(output_dir, self.mpi_rank, current, skip_validation=skip)
        log.info("load_mpk_kernel: %s (no compile)", module)
        where = reuse.paths(output_dir, self.mpi_rank)
        self.output_files = (os.path.join(output_dir, f"test_rank{self.mpi_rank}.cu"), where["graph"])
        self._start(module, graph, variants)

    def _check_build_kwargs(self, what: str, kwargs: dict) -> str | None:
        unknown = set(kwargs) - {"output_dir", "eos_token_id"}
        if unknown:
            raise TypeError(f"{what}() got unexpected keyword(s) {sorted(unknown)}")
        if self.graph is not None:
            raise RuntimeError(f"{what}(): this PersistentKernel was already compiled or loaded")
        if "eos_token_id" in kwargs:          # MPK lets compile() override the constructor's value
            self.params["eos_token_id"] = int(kwargs["eos_token_id"])
        out = kwargs.get("output_dir")
        if out and os.path.exists(out) and not os.path.isdir(out):
            raise NotADirectoryError(f"{what}(output_dir={out!r}): {out} exists and is not a directory")
        return out

    def _prepare(self):
        """Graph (verified), meta tensors, storage, variants and the generated source: all but the build."""
        backend = self._resolve_backend()
        self.device = self.device or torch.device("cpu")
        for layer in self.layers:
            threads = layer.block[0] * layer.block[1] * layer.block[2]
            if threads > self.worker_threads:
                raise ValueError(f"layer '{layer.name}': block_dim {layer.block} has {threads} threads, more "
                                 f"than the {self.worker_threads} of the worker block every task runs on "
                                 f"(target_cc {self.target_cc}); use block_dim=({self.worker_threads}, 1, 1)")
        graph = graph_mod.build(self.layers)
        graph_mod.verify(graph)
        for t in self.tensors.values():
            if t.kind == SHUFFLED:
                _check_shuffle_inputs_constant(t, graph)
        self.meta_tensors = build_meta(self.params, self._given_meta, self.device)
        for t in self._table():
            if t.data is None and t.kind != SYMMETRIC:
                t.data = torch.zeros(t.dims, dtype=t.dtype.torch, device=self.device)
        variants = codegen.Variants(self.layers)
        if self.fault is not None:
            faults.locate(self.fault, graph)         # a bad fault spec fails before compiling
            log.info("fault injection: %s", self.fault)
        injecting = self.fault is not None and self.fault.kind in faults.RUNTIME_KINDS
        # kept (with the graph and variants) for testing's failure directory: compile(output_dir=None)
        # writes no file, and a failing case must leave its source behind (testing/keep.py)
        self._source = (codegen.source(variants, backend, fault_injection=injecting), injecting)
        return graph, variants, *self._source

    def _start(self, module: str, graph, variants) -> None:
        """Load the module and hand it the graph, pointers and config (mpk_init)."""
        p, meta = self.params, self.meta_tensors
        config = dict(num_workers=p["num_workers"], num_local_schedulers=p["num_local_schedulers"],
                      test_mode=int(self.test_mode), jitter=int(self.schedule_jitter is not None),
                      jitter_seed=int(self.schedule_jitter or 0), watchdog_s=self.watchdog_s,
                      stuck_s=_env_float("MPK_STUCK_S", 0.0), max_seq_length=p["max_seq_length"],
                      max_num_batched_requests=p["max_num_batched_requests"],
                      max_num_batched_tokens=p["max_num_batched_tokens"], max_num_pages=p["max_num_pages"],
                      page_size=p["page_size"], total_num_requests=meta["tokens"].shape[0],
                      eos_token_id=p["eos_token_id"], mpi_rank=self.mpi_rank, world_size=self.world_size,
                      worker_threads=self.worker_threads, smem_bytes=WORKER_SMEM_BYTES)
        self._record = profiler.record_buffer(self.profiler_tensor, len(graph.tasks), self.device)
        config.update(in_order=0, dispatch=_DISPATCH[self.dispatch], profile=int(self.profile),
                      task_record=self._record.data_ptr())
        self._allocate_symmetric(graph, config)     # collective: after every rank's compile
        pointers = self._guard(graph, config)
        self._launch_args = (module, variants, config)    # for _rerun
        self._runtime = Runtime(module, graph, variants, self._table(), meta, config, self.fault, pointers)
        self.graph = graph
        self._watched = written.Watched(graph) if self.test_mode else None

    def _guard(self, graph, config: dict) -> list[int] | None:
        """Test mode: the pointers of the guarded copies kernels get (memcheck.py), made if need be, and
        their guard table in config. None: plain pointers (outside test mode; under a sanitizer)."""
        if not self.test_mode or self.sanitize:
            return None
        if self._fences is None:
            self._fences = memcheck.Fences(self._table(), graph, self.device.type == "cpu",
                                           self.meta_tensors)
        config.update(self._fences.config())
        return self._fences.pointers()

    def _allocate_symmetric(self, graph, config: dict) -> None:
        """Symmetric tensors and signal counters in node-shared memory (dist.SymmetricHeap)."""
        symmetric = [t for t in self._table() if t.kind == SYMMETRIC]
        if not symmetric and not graph.num_signal_slots:
            return
        if self.device.type != "cpu" and self.world_size > 1:   # one rank: its own device memory (dist.py)
            raise NotImplementedError(f"symmetric tensors on {self.device} at world_size={self.world_size}: "
                                      "mapping the other ranks' device memory (CUDA IPC or NVSHMEM) is not "
                                      "implemented; world_size=1 runs, as does the CPU backend at any size")
        self._heap = dist.SymmetricHeap(self._comm, self.world_size, self.mpi_rank, self.device)
        self._heap.allocate(symmetric, graph.num_signal_slots)
        tensor_table, signal_table = self._heap.pointer_tables(len(self._table()))
        self._pointer_tables = (tensor_table, signal_table)     # alive until mpk_init has copied them
        config.update(peer_tensor_ptrs=C.addressof(tensor_table), peer_signal_ptrs=C.addressof(signal_table),
                      num_signal_slots=graph.num_signal_slots)

    def __call__(self, **kwargs) -> None:
        """Launch. In test mode: poison outputs, run exactly one pass, check every tile was written."""
        unknown = set(kwargs) - {"default_stream"}
        if unknown:
            raise TypeError(f"pk() got unexpected keyword(s) {sorted(unknown)}")
        if self._runtime is None:
            raise RuntimeError("pk() called before compile()" if not self._finalized
                               else "pk() called after finalize()")
        if self._runtime.interrupted:   # outputs, meta tensors and cross-rank signals are mid-pass
            raise MPKRuntimeError("pk(): this kernel was interrupted during a pass (Ctrl-C); call finalize()")
        for t in self.tensors.values():
            if t.kind == SHUFFLED:
                shuffle_into(t)
        if self.test_mode:
            # prepare_next_batch advances step and appends tokens; every test-mode launch starts
            # from the meta tensors as they were at the first one that passed their check (a bad
            # value is a ValueError before the launch, meta.py), so pk() can run again.
            first, m = self._meta_at_first_launch or {}, self.meta_tensors
            for k, v in first.items():
                m[k].copy_(v)
            check_requests(self.params, m)
            self._meta_at_first_launch = first or {k: m[k].clone() for k in ("step", "tokens")}
            self._watched.poison()
        if self.device.type == "cuda" and not self.test_mode:   # enqueue on the caller's stream, return
            stream = kwargs.get("default_stream") or torch.cuda.current_stream(self.device)
            return self._runtime.launch_async(stream.cuda_stream)
        self.passes = passes = self._launch()
        self._export_trace()
        if self.test_mode:
            if passes != 1:
                raise MPKRuntimeError(f"test mode ran {passes} passes of the graph; expected exactly 1")
            self._watched.check(self.meta_tensors)
            self._watched.inplace.verify(self)       # outputs a layer also reads (written.InPlace)

    def _launch(self) -> int:
        """One launch on the guarded copies (test mode): the passes it ran."""
        if self._fences:
            self._fences.copy_in()
        try:
            passes = self._runtime.launch()
        except (KeyboardInterrupt, MPKHangError):
            if self._fences:            # a stuck kernel may still use the copies: never unmapped
                self._fences.pinned = True
                C.pythonapi.Py_IncRef(C.py_object(self._fences))
            if "still inside" in self._runtime.interrupted:   # a task kernel may still read or write them,
                kept = [d.data for d in self._table() if d.data is not None]   # so they are never freed
                for t in [*self.meta_tensors.values(), *kept]:             # (as its handle is not)
                    C.pythonapi.Py_IncRef(C.py_object(t))
            raise
        except MPKRuntimeError:
            if self._fences:        # (a kernel that failed may have gone out of bounds first: say so)
                self._fences.finish(self._runtime)
            raise
        if self._fences:
            self._fences.finish(self._runtime)
        return passes

    def _export_trace(self) -> None:
        if self.profile:      # as MPK: after every launch (several ranks: one file each)
            rank = f"_rank{self.mpi_rank}" if self.world_size > 1 else ""
            out = os.path.dirname(self.output_files[0]) if self.output_files else ""   # compile's output_dir
            log.info("profiler: wrote %s and %s", *profiler.export(self.graph, self._record, os.path.join(
                out, f"{self.trace_name}{rank}"), self.mpi_rank, self.params["num_workers"]))

    def _rerun(self, **config) -> None:
        """pk() once more on a second runtime of the same module, graph and tensors with these config
        fields changed (testing's serial re-run); this kernel's own runtime and trace are kept."""
        module, variants, base = self._launch_args
        mine, profile, finalized = self._runtime, self.profile, self._fences is None
        config = dict(base, **config, profile=0, task_record=None)
        pointers = self._guard(self.graph, config)      # after finalize(): fresh copies, for this run only
        self._runtime = Runtime(module, self.graph, variants, self._table(), self.meta_tensors, config,
                                self.fault, pointers)
        try:
            self.profile = False
            self()
        finally:
            self._runtime.finalize()
            self._runtime, self.profile = mine, profile
            if finalized and self._fences is not None:
                self._fences.close()
                self._fences = None

    def run(self, **kwargs) -> None:
        """The same as pk(**kwargs) (MPK's newer files call pk.run())."""
        self(**kwargs)

    def run_test_mode(self) -> None:
        """MPK's older spelling of pk() in test mode."""
        if not self.test_mode:
            raise RuntimeError("run_test_mode() needs PersistentKernel(test_mode=True)")
        self()

    def get_tensor(self, name: str) -> torch.Tensor:
        """Any tensor of the graph by name (attached, new, shuffled, or a meta tensor) after compile."""
        if name in self.meta_tensors:
            return self.meta_tensors[name]
        t = self.tensors.get(name)
        if t is None:
            known = sorted(self.tensors) + sorted(self.meta_tensors)
            raise KeyError(f"no tensor named '{name}'; known: {known}")
        if t.data is None:
            raise RuntimeError(f"tensor '{name}' has no storage yet (fused views have none; new tensors get "
                               f"theirs at compile())")
        return t.data

    def finalize(self) -> None:
        """Free the runtime's resources. Safe to call twice."""
        if self._runtime is not None:
            self._runtime.finalize()
            self._runtime = None
        if getattr(self, "_fences", None) is not None:
            self._fences.close()
            self._fences = None
        if self._heap is not None:          # collective with world_size > 1: every rank finalizes
            self._heap.free()
            self._heap = None
        self._finalized = True

    def wait(self) -> None:
        """Synchronize with the last launch: a CUDA launch outside test mode returns at once (pk() is
        asynchronous there); launches on the CPU backend and in test mode already block."""
        if self._runtime is not None and self.device is not None and self.device.type == "cuda":
            self.passes = self._runtime.wait()
            self._export_trace()

    def __enter__(self) -> PersistentKernel:
        return self

    def __exit__(self, *exc) -> None:
        self.finalize()

    def __del__(self) -> None:
        # As in MPK, a kernel that goes out of scope frees its runtime (workers, module handle). A
        # multi-rank kernel's symmetric memory is freed collectively, which a collector running at an
        # arbitrary moment on one rank cannot do: that stays with finalize() or the job's end.
        if getattr(self, "_runtime", None) is not None:     # absent if __init__ raised
            self._runtime.finalize()
            self._runtime = None


def _check_shuffle_inputs_constant(view: DTensor, graph) -> None:
    written_ids = {tile.tensor.id for t in graph.tasks[1:] for tile in t.outputs if tile.written}
    for src in view.sources:
        if src.id in written_ids:
            raise ValueError(f"shuffle_tensors '{view.name}': input '{src.name}' is written by a layer, but "
                             f"a shuffle is copied before the run; use fuse_tensors for computed inputs")
