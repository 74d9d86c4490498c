"""ctypes twins of csrc/runtime/abi.h. Keep field order and types identical."""
from __future__ import annotations

import ctypes as C

ABI_VERSION = 12
MAX_DIMS, MAX_TILES, MAX_TRIGGERS, NUM_IPARAMS, NUM_FPARAMS = 4, 12, 8, 4, 2
TASK_TERMINATE, TASK_END_OF_TASK_GRAPH, TASK_FIRST_LAYER = 0, 1, 100
EVENT_TYPES = {"termination": 0, "launch": 1, "end_of_task_graph": 2}
OK, HANG, NOTHING_SCHEDULED, INVALID, INTERNAL, STUCK, INTERRUPTED, TASK_FAILED = 0, 1, 2, 3, 4, 5, 6, 7
WORKER_STATES = {0: "idle", 1: "waiting", 2: "running", 3: "done"}
FAULT_NONE, FAULT_SKIP, FAULT_PERTURB, FAULT_NO_TRIGGER, FAULT_NO_SIGNAL = 0, 1, 2, 3, 4
FAULT_OVERRUN, FAULT_UNDERRUN, FAULT_OVERREAD = 5, 6, 7
GUARD_RANGE_FIELDS, GUARD_FAULT_FIELDS = 3, 5       # int64 per guard range / fault record
ACCESS = {0: "accessed", 1: "read", 2: "wrote"}    # MPK_ACCESS_* as the verb of a report
PEER_DATA, PEER_CONSUMED = 1, 2


class MpkTile(C.Structure):
    _fields_ = [("tensor", C.c_int32), ("ndim", C.c_int32), ("offset", C.c_int64),
                ("dims", C.c_int64 * MAX_DIMS), ("strides", C.c_int64 * MAX_DIMS),
                ("tma_rows", C.c_int32), ("tma_cols", C.c_int32), ("tma_swizzle", C.c_int32),
                ("tma_elem_bytes", C.c_int32)]


class MpkTask(C.Structure):
    _fields_ = [("task_type", C.c_int32), ("variant", C.c_int32), ("num_inputs", C.c_int32),
                ("num_outputs", C.c_int32), ("dependent_event", C.c_int32), ("num_triggers", C.c_int32),
                ("trigger_events", C.c_int32 * MAX_TRIGGERS), ("iparams", C.c_int64 * NUM_IPARAMS),
                ("fparams", C.c_double * NUM_FPARAMS), ("tiles", MpkTile * MAX_TILES)]


class MpkEvent(C.Structure):
    _fields_ = [("event_type", C.c_int32), ("num_triggers", C.c_int32),
                ("first_task_id", C.c_int32), ("last_task_id", C.c_int32)]


META_FIELDS = ["tokens", "step", "prompt_lengths", "input_tokens", "output_tokens", "num_new_tokens",
               "qo_indptr_buffer", "paged_kv_indptr_buffer", "paged_kv_indices_buffer",
               "paged_kv_last_page_len_buffer", "request_ids"]


class MpkMeta(C.Structure):
    _fields_ = [(name, C.c_void_p) for name in META_FIELDS]


class MpkConfig(C.Structure):
    _fields_ = [("abi_version", C.c_int32), ("num_workers", C.c_int32),
                ("num_local_schedulers", C.c_int32), ("num_tasks", C.c_int32), ("num_events", C.c_int32),
                ("num_tensors", C.c_int32), ("test_mode", C.c_int32), ("jitter", C.c_int32),
                ("jitter_seed", C.c_uint64), ("watchdog_s", C.c_double), ("stuck_s", C.c_double),
                ("max_seq_length", C.c_int32), ("max_num_batched_requests", C.c_int32),
                ("max_num_batched_tokens", C.c_int32), ("max_num_pages", C.c_int32),
                ("page_size", C.c_int32), ("total_num_requests", C.c_int32),
                ("eos_token_id", C.c_int64), ("mpi_rank", C.c_int32), ("world_size", C.c_int32),
                ("fault_kind", C.c_int32), ("fault_task", C.c_int32), ("fault_amount", C.c_double),
                ("fault_element", C.c_int64), ("peer_tensor_ptrs", C.c_void_p),
                ("peer_signal_ptrs", C.c_void_p), ("num_signal_slots", C.c_int32),
                ("worker_threads", C.c_int32), ("smem_bytes", C.c_int32), ("in_order", C.c_int32),
                ("profile", C.c_int32), ("dispatch", C.c_int32), ("pad_dispatch", C.c_int32),
                ("task_record", C.c_void_p), ("num_guard_ranges", C.c_int32),
                ("max_guard_faults", C.c_int32), ("guard_ranges", C.c_void_p), ("guard_faults", C.c_void_p),
                ("guard_fault_count", C.c_void_p)]
RECORD_FIELDS = 4        # MpkConfig.task_record per task: ready, begin, end (ns), worker


class MpkWorkerState(C.Structure):
    _fields_ = [("worker", C.c_int32), ("state", C.c_int32), ("task", C.c_int64),
                ("iteration", C.c_int64), ("event", C.c_int32), ("peer", C.c_int32),
                ("counter", C.c_int64), ("needed", C.c_int64), ("peer_wait", C.c_int32),
                ("pad", C.c_int32)]


STRUCTS = (MpkTile, MpkTask, MpkEvent, MpkMeta, MpkConfig, MpkWorkerState)


def declare(lib: C.CDLL) -> None:
    """Argument and result types of the module's entry points."""
    P = C.c_void_p
    lib.mpk_abi_version.restype = C.c_int
    lib.mpk_abi_sizes.argtypes = [C.POINTER(C.c_int64), C.c_int]
    lib.mpk_init.restype = P
    lib.mpk_init.argtypes = [C.POINTER(MpkConfig), C.POINTER(MpkTask), C.POINTER(MpkEvent),
                             C.POINTER(C.c_void_p), C.POINTER(MpkMeta), C.c_char_p, C.c_int]
    lib.mpk_launch.argtypes = [P]
    lib.mpk_error_message.argtypes = [P, C.c_char_p, C.c_int]
    lib.mpk_snapshot.argtypes = [P, C.POINTER(MpkWorkerState), C.c_int]
    lib.mpk_event_counters.argtypes = [P, C.POINTER(C.c_int64), C.c_int]
    lib.mpk_task_progress.argtypes = [P, C.POINTER(C.c_int64), C.c_int]
    lib.mpk_iterations.restype = C.c_int64
    lib.mpk_iterations.argtypes = [P]
    lib.mpk_finalize.argtypes = [P]
    lib.mpk_finalize.restype = None
    lib.mpk_abort.argtypes = [P]
    lib.mpk_run_task.argtypes = [P, C.c_int32, C.c_uint64, C.POINTER(C.c_void_p), C.c_int32, P, C.c_int64,
                                 C.POINTER(C.c_int32)]
    if hasattr(lib, "mpk_launch_async"):       # CUDA modules: a launch on the caller's stream
        lib.mpk_launch_async.argtypes = [P, P]
        lib.mpk_wait.argtypes = [P]


def check_layout(lib: C.CDLL, path: str) -> None:
    version = lib.mpk_abi_version()
    sizes = (C.c_int64 * len(STRUCTS))()
    lib.mpk_abi_sizes(sizes, len(STRUCTS))
    want = [C.sizeof(s) for s in STRUCTS]
    if version != ABI_VERSION or list(sizes) != want:
        raise RuntimeError(f"module {path} has ABI {version} with struct sizes {list(sizes)}; this "
                           f"mirage expects ABI {ABI_VERSION} with {want}. Clear the cache "
                           f"(python -m mirage.mpk cache clear) and rebuild")
