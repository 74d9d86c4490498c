// abi.h: the plain-C contract between the Python side (mirage/mpk/runtime.py, ctypes)
// and a compiled test_rank{R}.cu module. Every struct here has a ctypes twin in
// mirage/mpk/abi.py; mpk_abi_sizes() lets Python refuse a module whose layout differs.
// Bump MPK_ABI_VERSION whenever a struct or an entry point changes.
#pragma once
#include <stdint.h>

#define MPK_ABI_VERSION 12
#define MPK_MAX_DIMS 4
#define MPK_MAX_TILES 12     // inputs + outputs of one task (paged attention with its options: 11)
#define MPK_MAX_TRIGGERS 8   // docs/dependencies.md: more than this and the graph builder coarsens
#define MPK_NUM_IPARAMS 4
#define MPK_NUM_FPARAMS 2

// Task types that are not layer tasks. Layer task types start at MPK_TASK_FIRST_LAYER.
#define MPK_TASK_TERMINATE 0
#define MPK_TASK_END_OF_TASK_GRAPH 1
#define MPK_TASK_FIRST_LAYER 100

// Event types (task_graph.json "event_type").
#define MPK_EVENT_TERMINATION 0
#define MPK_EVENT_LAUNCH_TASKS 1
#define MPK_EVENT_END_OF_TASK_GRAPH 2

// Status codes returned by mpk_launch.
#define MPK_OK 0
#define MPK_HANG 1               // watchdog fired; see mpk_snapshot
#define MPK_NOTHING_SCHEDULED 2  // first prepare_next_batch scheduled no token
#define MPK_INVALID 3            // bad config / arguments; see mpk_error_message
#define MPK_INTERNAL 4
#define MPK_STUCK 5              // a task stayed inside its kernel past stuck_s; see mpk_error_message
#define MPK_INTERRUPTED 6        // mpk_abort stopped the launch (Ctrl-C); see mpk_error_message
#define MPK_TASK_FAILED 7        // a task kernel's task_fail (tasks/common.cuh) stopped it; see mpk_error_message

// Fault injection (negative controls), active only in modules built with
// -DMPK_FAULT_INJECTION; the other kinds (wrong tile, dropped dependency) are edits of the
// task table made by the Python side and need no runtime code.
#define MPK_DISPATCH_EVENT 0      // a task is enqueued when the event it waits on fires
#define MPK_DISPATCH_MPK 1        // MPK's pre-launch: every task enqueued at a pass's start, waited for in order

#define MPK_FAULT_NONE 0
#define MPK_FAULT_SKIP 1          // the task's kernel does not run (its events still fire)
#define MPK_FAULT_PERTURB 2       // after the kernel, output 0 element += amount
#define MPK_FAULT_NO_TRIGGER 3    // the task never triggers its events
#define MPK_FAULT_NO_SIGNAL 4     // the task signals no peer but itself (a stalled rank)
#define MPK_FAULT_OVERRUN 5       // after the kernel, writes amount elements starting element past output 0's tile
#define MPK_FAULT_UNDERRUN 6      // ... writes amount elements ending element before output 0's tile
#define MPK_FAULT_OVERREAD 7      // ... reads amount elements starting element past output 0's tile

// Test mode's guard pages (csrc/runtime/guard.h; CPU backend): a range is lo, hi (addresses) and
// the tensor's index (-1 - i: meta tensor i, MpkMeta's i-th field); a fault record is the address, the tensor, MPK_ACCESS_*, the task position
// the faulting worker showed (-1: none) and the worker (-1: mpk_run_task's caller). A page the
// handler opens is filled with MPK_GUARD_RED_BYTE first (mirage/mpk/guard.py RED_BYTE).
#define MPK_GUARD_RANGE_FIELDS 3
#define MPK_GUARD_FAULT_FIELDS 5
#define MPK_GUARD_RED_BYTE 0xA5
#define MPK_ACCESS_UNKNOWN 0
#define MPK_ACCESS_READ 1
#define MPK_ACCESS_WRITE 2

// Worker states in a snapshot.
#define MPK_WORKER_IDLE 0         // waiting for its queue
#define MPK_WORKER_WAITING 1      // waiting on an event
#define MPK_WORKER_RUNNING 2      // inside a task kernel (a heartbeat: never a hang)
#define MPK_WORKER_DONE 3         // saw TERMINATE

// What a worker waiting on a peer rank waits for (MpkWorkerState.peer_wait).
#define MPK_PEER_DATA 1           // the peer's tile and its signal (allreduce: "arrived")
#define MPK_PEER_CONSUMED 2       // the peer to finish reading the slot's previous use

// One tensor tile of one task. The kernel receives base(tensor) + offset, pre-offset.
typedef struct {
    int32_t tensor;                   // index into the tensor pointer table passed to mpk_init
    int32_t ndim;
    int64_t offset;                   // bytes from the tensor's base pointer
    int64_t dims[MPK_MAX_DIMS];       // tile extent, elements; unused dims are 1
    int64_t strides[MPK_MAX_DIMS];    // elements; unused dims are 0
    // A tensor map of the tile for TMA (runtime/tile_maps.h; the kernel's TaskView::tma): a 2-D tile of
    // tma_elem_bytes elements read in boxes of tma_rows x tma_cols with a tma_swizzle-byte swizzle (0, 32,
    // 64, 128). tma_rows 0: none.
    int32_t tma_rows, tma_cols, tma_swizzle, tma_elem_bytes;
} MpkTile;

// One task. tasks[0] is TERMINATE; tasks[1..num_tasks-1] are layer tasks in
// topological order (ids are positions in this array).
typedef struct {
    int32_t task_type;
    int32_t variant;                  // case label in the generated dispatcher
    int32_t num_inputs;
    int32_t num_outputs;
    int32_t dependent_event;          // event to wait on, -1 = none
    int32_t num_triggers;
    int32_t trigger_events[MPK_MAX_TRIGGERS];
    int64_t iparams[MPK_NUM_IPARAMS]; // per-task metadata (request index, expert offset, ...)
    double fparams[MPK_NUM_FPARAMS];  // layer scalars (rmsnorm eps, ...)
    MpkTile tiles[MPK_MAX_TILES];     // inputs, then outputs
} MpkTask;

// One event. events[0] is TERMINATION (no triggers); events[num_events-1] is
// END_OF_TASK_GRAPH, triggered by every leaf task.
typedef struct {
    int32_t event_type;
    int32_t num_triggers;             // triggers per iteration
    int32_t first_task_id;            // the tasks it launches when it fires: [first_task_id,
    int32_t last_task_id;             // last_task_id), MPK's range (empty: first == last)
} MpkEvent;

// Meta tensors (docs/runtime.md): host pointers on the CPU backend.
typedef struct {
    int64_t* tokens;                  // [total_num_requests, max_seq_length]
    int32_t* step;                    // [total_num_requests]
    int32_t* prompt_lengths;          // [total_num_requests]
    int64_t* input_tokens;            // [max_num_batched_tokens]
    int64_t* output_tokens;           // [max_num_batched_tokens]
    int32_t* num_new_tokens;          // [1]
    int32_t* qo_indptr_buffer;        // [max_num_batched_requests + 1]
    int32_t* paged_kv_indptr_buffer;  // [max_num_batched_requests + 1]
    int32_t* paged_kv_indices_buffer; // [max_num_pages]
    int32_t* paged_kv_last_page_len_buffer; // [max_num_batched_requests]
    int32_t* request_ids;             // [max_num_batched_requests]: slot s's request, -1 past the last
} MpkMeta;

typedef struct {
    int32_t abi_version;
    int32_t num_workers;
    int32_t num_local_schedulers;
    int32_t num_tasks;                // entries in tasks[], TERMINATE included
    int32_t num_events;               // entries in events[], TERMINATION and END included
    int32_t num_tensors;
    int32_t test_mode;                // 1: exactly one pass (docs/runtime.md)
    int32_t jitter;                   // 1: seeded schedule jitter (docs/runtime.md)
    uint64_t jitter_seed;
    double watchdog_s;                // <= 0 disables the watchdog
    double stuck_s;                   // a task inside its kernel this long is stuck; <= 0: 10 x watchdog_s
    int32_t max_seq_length;
    int32_t max_num_batched_requests;
    int32_t max_num_batched_tokens;
    int32_t max_num_pages;
    int32_t page_size;
    int32_t total_num_requests;
    int64_t eos_token_id;
    int32_t mpi_rank;
    int32_t world_size;
    int32_t fault_kind;               // MPK_FAULT_*; ignored unless built with MPK_FAULT_INJECTION
    int32_t fault_task;               // task position the fault hits
    double fault_amount;              // MPK_FAULT_PERTURB: added to the element (in fp32)
    int64_t fault_element;            // MPK_FAULT_PERTURB: row-major index inside output 0's tile
    // Multi-rank (docs/runtime.md): node-shared memory every rank maps; copied at mpk_init.
    void* const* peer_tensor_ptrs;    // [world_size * num_tensors]: rank r's base of tensor t at
                                      // r * num_tensors + t; NULL entries: not symmetric. NULL: none
    int64_t* const* peer_signal_ptrs; // [world_size]: each rank's signal counters (NULL if no slots)
    int32_t num_signal_slots;         // signal slots per rank (layout: csrc/tasks/allreduce.cuh)
    // The worker block every task kernel runs on (docs/simt.md): its threads (a multiple of 32)
    // and its dynamic shared memory in bytes.
    int32_t worker_threads;
    int32_t smem_bytes;
    // Diagnosis (docs/profiler.md). in_order: each worker runs its tasks of a pass in ascending
    // position order, as with several ranks (testing's serial re-run: one worker, the program's
    // order). task_record: NULL, or MPK_RECORD_FIELDS int64 per task position, on the kernel's
    // device: the worker that ran it is always written; with profile = 1 also the times (ns,
    // %globaltimer on the GPU, CLOCK_MONOTONIC on the CPU) at which it was enqueued (ready), began
    // and ended. One pass's values: a later pass of the same launch overwrites them.
    int32_t in_order;
    int32_t profile;
    // MPK_DISPATCH_*: when tasks enter the workers' queues (docs/runtime.md, "Dispatch models").
    int32_t dispatch;
    int32_t pad_dispatch;
    int64_t* task_record;
    // Memory-safe test mode (docs/runtime.md; CPU backend only): the guard pages of the guarded
    // tensors, MPK_GUARD_RANGE_FIELDS int64 each (copied at mpk_init), and where the fault handler
    // records what touched them: max_guard_faults records of MPK_GUARD_FAULT_FIELDS int64, and
    // *guard_fault_count, every fault counted (the caller zeroes it before a launch). 0 ranges: none.
    int32_t num_guard_ranges;
    int32_t max_guard_faults;
    const int64_t* guard_ranges;
    int64_t* guard_faults;
    int64_t* guard_fault_count;
} MpkConfig;

#define MPK_RECORD_FIELDS 4      // task_record per task: ready, begin, end, worker

// Per-worker state captured when a launch ends (always) or the watchdog fires.
typedef struct {
    int32_t worker;
    int32_t state;                    // MPK_WORKER_*
    int64_t task;                     // task position (index into tasks[]), -1 if none
    int64_t iteration;
    int32_t event;                    // event waited on, -1 if none
    int32_t peer;                     // rank waited on (a cross-rank signal), -1 if none
    int64_t counter;                  // counter value seen
    int64_t needed;                   // value the wait needs
    int32_t peer_wait;                // MPK_PEER_* when peer >= 0
    int32_t pad;
} MpkWorkerState;

#ifdef __cplusplus
extern "C" {
#endif
// Implemented in csrc/runtime/entry.h, compiled into every generated module.
int mpk_abi_version(void);
// sizeof MpkTile, MpkTask, MpkEvent, MpkMeta, MpkConfig, MpkWorkerState, in that order.
int mpk_abi_sizes(int64_t* out, int n);
// Copies everything it needs; returns NULL and fills err on invalid input.
void* mpk_init(const MpkConfig* cfg, const MpkTask* tasks, const MpkEvent* events,
               void* const* tensor_ptrs, const MpkMeta* meta, char* err, int err_len);
// Runs init_kernel, then the persistent runtime until termination. Blocks. Returns MPK_*.
int mpk_launch(void* handle);
// Message of the last non-OK launch (NUL-terminated, truncated to n).
int mpk_error_message(void* handle, char* buf, int n);
// Fills up to n worker states from the last launch; returns the number of workers.
int mpk_snapshot(void* handle, MpkWorkerState* out, int n);
// Event counters after the last launch (num_events entries).
int mpk_event_counters(void* handle, int64_t* out, int n);
// Per task: the last iteration in which it completed (0 = never) (num_tasks entries).
int mpk_task_progress(void* handle, int64_t* out, int n);
// Iterations (graph passes) completed by the last launch.
int64_t mpk_iterations(void* handle);
// Stops the launch in flight on `handle` (callable from any thread, e.g. while another thread
// is inside mpk_launch / mpk_wait): it returns MPK_INTERRUPTED within about a second, its
// workers stopped between tasks. No effect when no launch is in flight. Returns 0, or -1 for
// a NULL handle.
int mpk_abort(void* handle);
void mpk_finalize(void* handle);
// Task `pos` alone, on one block, on the calling thread (CPU: the SIMT emulation, its threads in the
// order `seed` draws, under the guard table, that task's injected fault included; CUDA: one block of
// mpk_execute_one, then a synchronize). No scheduler, no events, no meta-tensor pass; no launch may be
// in flight on the handle. Used by kernel-level runs (mirage.mpk.testing.run_tasks) and by test mode
// to name the task that touched a red zone or guard page (mirage/mpk/memcheck.py). tensor_ptrs: num_tensors pointers for this run (NULL: mpk_init's). CPU only:
// smem_fill is the byte the block's shared memory starts with (0xFF as in every block); watch_addr /
// watch_bytes (NULL/0: none) name bytes whose last writer's linear thread index goes to *watch_thread
// (-1: none wrote them). Returns MPK_OK, or MPK_INVALID / MPK_INTERNAL with the reason in
// mpk_error_message.
int mpk_run_task(void* handle, int32_t pos, uint64_t seed, void* const* tensor_ptrs, int32_t smem_fill,
                 const void* watch_addr, int64_t watch_bytes, int32_t* watch_thread);
#ifdef __cplusplus
}
#endif
