// task_view.h: what a task kernel sees. Kernels get pre-offset pointers, tile shapes
// and per-task metadata; never the grid, never the graph.
#pragma once
#include <stddef.h>
#include "abi.h"
#include "platform.h"

namespace mpk {

// A task's failure (common.cuh task_fail; docs/runtime.md, "A task that fails"): one record per launch
// (the executor's, in its control block: device memory on the GPU) or per kernel-level run. The first
// failing thread wins it: owner, from 0 to the failing task's row (a compare-and-swap), then the message.
// Nothing traps or throws: the thread returns, the block leaves the task together, and the executor
// stops the pass, so the GPU stays usable for the next launch.
constexpr int kTaskFailureBytes = 256;
struct TaskFailure {
    uint64_t owner;               // 0, or the failing task's MpkTask* (its row in the task table)
    int32_t thread;               // threadIdx.x of the thread that failed it
    int32_t pad;
    char message[kTaskFailureBytes];  // NUL-terminated, truncated
};

#if defined(__CUDACC__)
struct TaskView;
namespace exec {  // runtime/executor.cuh: what serves TaskView::wait / ::signal under nvcc
MPK_DEVICE inline bool wait_peer(const TaskView& v, const int64_t* counter, int64_t needed, int32_t peer, int32_t what);
MPK_DEVICE inline void signal_peer(const TaskView& v, int64_t* counter, int64_t value, int32_t peer);
}  // namespace exec
#endif

struct TaskView {
    const MpkTask* task;
    void* ptrs[MPK_MAX_TILES];  // base(tile.tensor) + tile.offset, inputs then outputs
    const MpkMeta* meta;        // meta tensors, for layers that read them
    const void* tma_maps[MPK_MAX_TILES] = {};  // each slot's tensor map (runtime/tile_maps.h), null: none

    // ---- multi-rank (docs/runtime.md); single-rank layers ignore these
    int64_t iteration = 0;      // graph passes of this handle, this one included: from 1, across launches
    int32_t rank = 0, world_size = 1, num_tensors = 0;
    void* const* peer_tensors = nullptr;     // [world_size * num_tensors] bases (NULL: not symmetric)
    int64_t* const* peer_signals = nullptr;  // [world_size]: each rank's signal counters
    // What serves wait() and signal() below (peers_served(): something does).
#if defined(__CUDACC__)
    // Under nvcc the executor's own functions, called directly. Never through a function pointer: a
    // device function whose address is taken makes ptxas compile every function of the persistent
    // kernel under the full calling convention, and the tasks spilled there (sm_90a, every variant:
    // paged_attention 168 B of spill stores, the fp8 MoE linears 76 B; none with the direct calls:
    // tests/unit/test_nvcc.py reads every function as the persistent kernel compiles it).
    bool executor_peers = false;
#else
    // The CPU backend: the executor's (runtime/executor.cuh) or mpk_run_task's (runtime/entry.h),
    // through pointers, since its task code and its executor are separate objects (runtime_object.h).
    bool (*wait_fn)(const TaskView&, const int64_t* counter, int64_t needed, int32_t peer, int32_t what) = nullptr;
    void (*signal_fn)(const TaskView&, int64_t* counter, int64_t value, int32_t peer) = nullptr;
#endif
    void* executor = nullptr;   // the executor's state for wait/signal
    TaskFailure* failure = nullptr;  // where task_fail records (null only in a view built by hand: a test)

    // ---- the worker block the kernel runs on (docs/simt.md). Under nvcc these are the launch's
    // own; the CPU backend's emulation (runtime/simt_cpu.h) builds the block from them.
    int32_t block_threads = 0;  // threads of the worker block (MpkConfig::worker_threads)
    int32_t smem_bytes = 0;     // its dynamic shared memory (MpkConfig::smem_bytes)
    uint64_t simt_seed = 0;     // seeds the emulation's thread order for this task and pass
    bool on_block = false;      // the executor's worker block runs it (MPK_RUN_TASK starts no block)
#if !defined(__CUDACC__)
    // The CPU backend's write-watch (docs/simt.md, Debugging): when the emulation runs this task
    // as its own block (MPK_RUN_TASK outside a worker block) with watch_addr set, it stores into
    // *watch_thread the linear thread index of the last thread during whose run segment the
    // watch_bytes at watch_addr changed (-1: none). Not under nvcc.
    const void* watch_addr = nullptr;
    size_t watch_bytes = 0;
    int32_t* watch_thread = nullptr;
    unsigned char smem_fill = 0xFF;  // the byte a fresh block's shared memory holds (simt::Block::smem_fill)
#endif

    template <typename T> MPK_HOST_DEVICE T* in(int i) const { return static_cast<T*>(ptrs[i]); }
    template <typename T> MPK_HOST_DEVICE T* out(int j) const {
        return static_cast<T*>(ptrs[task->num_inputs + j]);
    }
    MPK_HOST_DEVICE const MpkTile& in_tile(int i) const { return task->tiles[i]; }
    MPK_HOST_DEVICE const MpkTile& out_tile(int j) const { return task->tiles[task->num_inputs + j]; }
    // Slot i's tensor map, for TMA (M: mpk::ptx::TensorMap); null unless its layer asked for one (Access.tma).
    template <typename M> MPK_HOST_DEVICE const M* tma(int i) const { return static_cast<const M*>(tma_maps[i]); }
    // Cross-rank waits (docs/runtime.md). wait: until *counter >= needed, the worker shown as waiting on
    // rank `peer` for `what` (MPK_PEER_*); false when the launch aborts (return at once). signal:
    // *counter = value (release) on rank `peer`'s counters. Only where peers_served().
#if defined(__CUDACC__)
    MPK_HOST_DEVICE bool peers_served() const { return executor_peers; }
    MPK_DEVICE bool wait(const int64_t* counter, int64_t needed, int32_t peer, int32_t what) const {
        return executor_peers && exec::wait_peer(*this, counter, needed, peer, what);
    }
    MPK_DEVICE void signal(int64_t* counter, int64_t value, int32_t peer) const {
        if (executor_peers) exec::signal_peer(*this, counter, value, peer);
    }
#else
    bool peers_served() const { return wait_fn && signal_fn; }
    bool wait(const int64_t* counter, int64_t needed, int32_t peer, int32_t what) const {
        return wait_fn && wait_fn(*this, counter, needed, peer, what);
    }
    void signal(int64_t* counter, int64_t value, int32_t peer) const {
        if (signal_fn) signal_fn(*this, counter, value, peer);
    }
#endif
    MPK_HOST_DEVICE int64_t iparam(int k) const { return task->iparams[k]; }
    MPK_HOST_DEVICE double fparam(int k) const { return task->fparams[k]; }
    // Output j's tile in rank `peer`'s copy of its (symmetric) tensor; nullptr if not symmetric.
    template <typename T> MPK_HOST_DEVICE T* peer_out(int j, int32_t peer) const {
        const MpkTile& t = out_tile(j);
        char* base = peer_tensors ? static_cast<char*>(peer_tensors[int64_t(peer) * num_tensors + t.tensor]) : nullptr;
        return base ? reinterpret_cast<T*>(base + t.offset) : nullptr;
    }
};

}  // namespace mpk
