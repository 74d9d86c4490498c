// entry.h: the extern "C" entry points declared in abi.h, compiled into every generated
// module. Include it LAST, after the generated dispatcher and
//   #define MPK_EXECUTE_TASK mpk_generated::execute_task   // bool(const mpk::TaskView&):
//                                                          // false for a variant it does not have
// The executor is csrc/runtime/executor.cuh (one source for both backends); this file gives it
// the dispatcher and a driver: host_cpu.h under the host compiler, host_cuda.h under nvcc (plus
// entry_cuda.h's one-task launcher). Every entry point catches everything: no C++ exception
// crosses the C ABI. All state lives in the handle mpk_init returns, so kernels sharing one
// loaded .so share nothing.
#pragma once
// MPK_DISPATCHER_OBJECT: the dispatcher's half of the CPU backend's two-object build
// (mirage/mpk/build.py); the entry points are the runtime object's, so nothing here.
#if !defined(MPK_DISPATCHER_OBJECT)
#if defined(MPK_FAULT_INJECTION) && !defined(MPK_INJECT_FAULT)
#error "runtime/entry.h: a fault-injection build needs MPK_INJECT_FAULT from the generated code"
#endif
#ifndef MPK_EXECUTE_TASK
#error "runtime/entry.h: define MPK_EXECUTE_TASK (the generated dispatcher) before including it"
#endif
#if defined(MPK_BACKEND_CUDA) && !defined(__CUDACC__)
#error "runtime/entry.h: MPK_BACKEND_CUDA is built by nvcc"
#endif
#include <string.h>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include "runtime.h"
#include "tile_maps.h"
#include "validate.h"
#if defined(__CUDACC__)
#include "entry_cuda.h"
#include "host_cuda.h"
#else
#include "host_cpu.h"
#endif

#define MPK_EXPORT extern "C" __attribute__((visibility("default")))

namespace mpk {

// The generated dispatcher as the executor calls it: on every thread of the worker block.
struct GeneratedDispatch {
    MPK_DEVICE static bool run(const TaskView& v) { return MPK_EXECUTE_TASK(v); }
};

inline void copy_message(const std::string& msg, char* buf, int n) {
    if (!buf || n <= 0) return;
    const size_t len = msg.size() < size_t(n - 1) ? msg.size() : size_t(n - 1);
    memcpy(buf, msg.data(), len);
    buf[len] = 0;
}

// A kernel-level run's task_fail, as the executor words a launch's (executor.cuh task_failed).
inline std::string failed_task_message(int32_t pos, const TaskFailure& f) {
    char msg[kTaskFailureBytes + 1];
    memcpy(msg, f.message, kTaskFailureBytes);
    msg[kTaskFailureBytes] = 0;
    return "task " + std::to_string(pos) + " failed: " + msg + " (thread " + std::to_string(f.thread) +
           " of the block)";
}

// The peer ranks' symmetric tensors and signal counters as the config lists them (empty when
// there are none): what a driver's setup keeps (CPU) or copies to the device (CUDA).
struct Peers {
    std::vector<void*> tensors;     // [world_size * num_tensors]
    std::vector<int64_t*> signals;  // [world_size]
};

// mpk_init for either driver's Kernel K: validate, copy the config, the tasks and the events,
// then setup(k, peers), the driver's part (tensors, allocation; "" or why it failed, having
// released what it took). Any exception becomes the message; none leaves.
template <class K, class Setup>
inline void* init_handle(const MpkConfig* cfg, const MpkTask* tasks, const MpkEvent* events, void* const* tensor_ptrs,
                         const MpkMeta* meta, char* err, int err_len, Setup setup) {
    if (err && err_len > 0) err[0] = 0;
    K* k = nullptr;
    try {
        const std::string why = validate(cfg, tasks, events, tensor_ptrs, meta);
        if (!why.empty()) {
            copy_message("mpk_init: " + why, err, err_len);
            return nullptr;
        }
        k = new K();
        k->cfg = *cfg;
        k->tasks.assign(tasks, tasks + cfg->num_tasks);
        k->events.assign(events, events + cfg->num_events);
        Peers peers;
        if (cfg->peer_tensor_ptrs)
            peers.tensors.assign(cfg->peer_tensor_ptrs, cfg->peer_tensor_ptrs + int64_t(cfg->world_size) * cfg->num_tensors);
        if (cfg->num_signal_slots > 0)
            peers.signals.assign(cfg->peer_signal_ptrs, cfg->peer_signal_ptrs + cfg->world_size);
        const std::string failed = setup(*k, peers);
        if (failed.empty()) return k;
        copy_message("mpk_init: " + failed, err, err_len);
    } catch (const std::exception& e) {
        copy_message(std::string("mpk_init: ") + e.what(), err, err_len);
    } catch (...) {
        copy_message("mpk_init: unknown exception", err, err_len);
    }
    delete k;
    return nullptr;
}

}  // namespace mpk

// ---- entry points

MPK_EXPORT int mpk_abi_version(void) { return MPK_ABI_VERSION; }

MPK_EXPORT int mpk_abi_sizes(int64_t* out, int n) {
    const int64_t sizes[] = {sizeof(MpkTile), sizeof(MpkTask), sizeof(MpkEvent),
                             sizeof(MpkMeta), sizeof(MpkConfig), sizeof(MpkWorkerState)};
    for (int i = 0; out && i < n && i < 6; ++i) out[i] = sizes[i];
    return 6;
}

#if !defined(__CUDACC__)
// ---- the CPU backend (host_cpu.h)

MPK_EXPORT void* mpk_init(const MpkConfig* cfg, const MpkTask* tasks, const MpkEvent* events,
                          void* const* tensor_ptrs, const MpkMeta* meta, char* err, int err_len) {
    return mpk::init_handle<mpk::host::Kernel>(cfg, tasks, events, tensor_ptrs, meta, err, err_len,
                                               [&](mpk::host::Kernel& k, mpk::Peers& peers) -> std::string {
        k.tensors.assign(tensor_ptrs, tensor_ptrs + cfg->num_tensors);
        const std::string maps = mpk::build_tile_maps(tasks, cfg->num_tasks, tensor_ptrs, k.tile_maps);
        if (!maps.empty()) return maps;
        k.st.meta = *meta;
        k.peer_tensors = std::move(peers.tensors);
        k.peer_signals = std::move(peers.signals);
        k.worker_body = [](mpk::exec::State& st, int32_t w) { mpk::exec::worker_loop<mpk::GeneratedDispatch>(st, w); };
        if (cfg->num_guard_ranges > 0) {
            k.guard_ranges.assign(cfg->guard_ranges, cfg->guard_ranges + int64_t(cfg->num_guard_ranges) * MPK_GUARD_RANGE_FIELDS);
            k.guard = mpk::guard::Table{k.guard_ranges.data(), cfg->num_guard_ranges, cfg->max_guard_faults,
                                        cfg->guard_faults, cfg->guard_fault_count};
        }
        mpk::host::allocate(k);
        mpk::host::reset_launch(k);  // so queries before the first launch see sane values
        return "";
    });
}

MPK_EXPORT int mpk_launch(void* handle) {
    if (!handle) return MPK_INVALID;
    mpk::host::Kernel& k = *static_cast<mpk::host::Kernel*>(handle);
    if (__atomic_exchange_n(&k.launching, 1, __ATOMIC_ACQ_REL)) return MPK_INVALID;  // already launching
    int status;
    try {
        status = mpk::host::launch(k);
    } catch (const std::exception& e) {
        k.status = status = MPK_INTERNAL;
        k.message = std::string("mpk_launch: ") + e.what();
    } catch (...) {
        k.status = status = MPK_INTERNAL;
        k.message = "mpk_launch: unknown exception";
    }
    __atomic_store_n(&k.launching, 0, __ATOMIC_RELEASE);
    return status;
}

MPK_EXPORT int mpk_snapshot(void* handle, MpkWorkerState* out, int n) {
    if (!handle) return -1;
    const mpk::host::Kernel& k = *static_cast<mpk::host::Kernel*>(handle);
    if (out) mpk::host::fill_snapshot(k, out, n);
    return k.cfg.num_workers;
}

MPK_EXPORT int64_t mpk_iterations(void* handle) {
    return handle ? mpk::ld_relaxed(&static_cast<mpk::host::Kernel*>(handle)->control.iterations) : -1;
}

// One task alone (abi.h: mpk_run_task). Its TaskView is the executor's (executor.cuh fill_view) minus
// the executor: a cross-rank wait or signal (allreduce) goes to this rank's own counters directly, as
// only this rank runs; a wait that is not satisfied within kRunTaskWaitS fails the task, naming it.
namespace mpk {
namespace host {
constexpr double kRunTaskWaitS = 5.0;
inline bool run_task_wait(const TaskView& v, const int64_t* counter, int64_t needed, int32_t peer, int32_t) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kRunTaskWaitS);
    while (ld_acquire_sys(counter) < needed) {
        if (std::chrono::steady_clock::now() > until)
            throw std::runtime_error("task " + std::to_string(v.task - static_cast<const MpkTask*>(v.executor)) +
                                     " waits for rank " + std::to_string(peer) + " (counter " +
                                     std::to_string(ld_acquire_sys(counter)) + ", needs " + std::to_string(needed) +
                                     "): a kernel-level run has only this rank");
        std::this_thread::yield();
    }
    return true;
}
inline void run_task_signal(const TaskView&, int64_t* counter, int64_t value, int32_t) { st_release_sys(counter, value); }
}  // namespace host
}  // namespace mpk

MPK_EXPORT int mpk_run_task(void* handle, int32_t pos, uint64_t seed, void* const* tensor_ptrs, int32_t smem_fill,
                            const void* watch_addr, int64_t watch_bytes, int32_t* watch_thread) {
    if (!handle) return MPK_INVALID;
    mpk::host::Kernel& k = *static_cast<mpk::host::Kernel*>(handle);
    k.message.clear();
    if (pos < 1 || pos >= k.cfg.num_tasks) {
        k.message = "mpk_run_task: task " + std::to_string(pos) + " is not a layer task (1.." +
                    std::to_string(k.cfg.num_tasks - 1) + ")";
        return MPK_INVALID;
    }
    if (k.guard.num_ranges > 0 && !mpk::guard::install()) {
        k.message = "mpk_run_task: cannot install the guard-page handler (sigaction failed)";
        return MPK_INTERNAL;
    }
    if (__atomic_exchange_n(&k.launching, 1, __ATOMIC_ACQ_REL)) {
        k.message = "mpk_run_task: a launch is in flight on this handle";
        return MPK_INVALID;
    }
    int status = MPK_OK;
    try {
        const MpkTask& t = k.tasks[size_t(pos)];
#ifdef MPK_FAULT_INJECTION
        const int32_t fault = pos == k.cfg.fault_task ? k.cfg.fault_kind : MPK_FAULT_NONE;
#else
        const int32_t fault = MPK_FAULT_NONE;
#endif
        void* const* bases = tensor_ptrs ? tensor_ptrs : k.tensors.data();
        // this rank's copy of a symmetric tensor is the one this run hands the kernel
        std::vector<void*> peers = k.peer_tensors;
        for (int32_t i = 0; tensor_ptrs && !peers.empty() && i < k.cfg.num_tensors; ++i) {
            void*& mine = peers[size_t(k.cfg.mpi_rank) * size_t(k.cfg.num_tensors) + size_t(i)];
            if (mine) mine = tensor_ptrs[i];
        }
        mpk::TaskView v{};
        v.task = &t;
        v.meta = &k.st.meta;
        for (int32_t i = 0; i < MPK_MAX_TILES; ++i)
            v.ptrs[i] = i < t.num_inputs + t.num_outputs ? static_cast<char*>(bases[t.tiles[i].tensor]) + t.tiles[i].offset
                                                          : nullptr;
        std::vector<mpk::ptx::TensorMap> maps(MPK_MAX_TILES);  // this run's tensor maps, over its bases
        const std::string why = mpk::task_tile_maps(t, pos, bases, maps.data(), v.tma_maps);
        if (!why.empty()) throw std::invalid_argument("mpk_run_task: " + why);
        v.iteration = 1;
        v.rank = k.cfg.mpi_rank;
        v.world_size = k.cfg.world_size;
        v.num_tensors = k.cfg.num_tensors;
        v.peer_tensors = peers.empty() ? nullptr : peers.data();
        v.peer_signals = k.peer_signals.empty() ? nullptr : k.peer_signals.data();
        v.wait_fn = mpk::host::run_task_wait;
        v.signal_fn = mpk::host::run_task_signal;
        v.executor = k.tasks.data();  // (run_task_wait names the task by its position)
        mpk::TaskFailure failure{};   // this run's task_fail record (the executor's is per launch)
        v.failure = &failure;
        v.block_threads = k.cfg.worker_threads;
        v.smem_bytes = k.cfg.smem_bytes;
        v.simt_seed = seed;
        v.on_block = false;
        v.watch_addr = watch_addr;
        v.watch_bytes = watch_bytes > 0 ? size_t(watch_bytes) : 0;
        v.watch_thread = watch_thread;
        v.smem_fill = static_cast<unsigned char>(smem_fill);
        if (watch_thread) *watch_thread = -1;
        // a fault on a guard page names this task (mirage/mpk/memcheck.py re-runs tasks one by one)
        const mpk::guard::ThreadScope scope(k.guard, nullptr, pos, -1);
        if (fault != MPK_FAULT_SKIP && !mpk::GeneratedDispatch::run(v)) {
            k.message = "mpk_run_task: task " + std::to_string(pos) + " has variant " + std::to_string(t.variant) +
                        ", which this module does not have";
            status = MPK_INVALID;
        }
        if (failure.owner != 0) {
            k.message = mpk::failed_task_message(pos, failure);
            status = MPK_TASK_FAILED;
        }
#ifdef MPK_FAULT_INJECTION
        if (status == MPK_OK) MPK_INJECT_FAULT(v, fault, k.cfg.fault_element, k.cfg.fault_amount);
#endif
    } catch (const std::invalid_argument& e) {  // (a tensor map this run's tensors cannot have)
        k.message = e.what();
        status = MPK_INVALID;
    } catch (const std::exception& e) {
        k.message = "task " + std::to_string(pos) + " failed: " + e.what();
        status = MPK_INTERNAL;
    } catch (...) {
        k.message = "task " + std::to_string(pos) + " failed: unknown exception";
        status = MPK_INTERNAL;
    }
    __atomic_store_n(&k.launching, 0, __ATOMIC_RELEASE);
    return status;
}

// Ends the executor's threads and frees the handle. A worker still inside a kernel (MPK_STUCK)
// keeps the handle alive: it is then left allocated, its threads detached.
MPK_EXPORT void mpk_finalize(void* handle) {
    if (!handle) return;
    mpk::host::Kernel* k = static_cast<mpk::host::Kernel*>(handle);
    try {
        if (mpk::host::stop_threads(*k)) delete k;
    } catch (...) {
    }
}


#else
// ---- the CUDA backend (host_cuda.h): tensor and meta pointers are device pointers, and so are the
// entries of the peer tables (cfg->peer_tensor_ptrs / peer_signal_ptrs), which setup copies to
// device memory as given. Nothing maps another process's memory (no CUDA IPC, no NVSHMEM): Python
// passes peer tables on CUDA only at world_size 1, where they hold this rank's own device memory
// (mirage/mpk/persistent_kernel.py _allocate_symmetric).

MPK_EXPORT void* mpk_init(const MpkConfig* cfg, const MpkTask* tasks, const MpkEvent* events,
                          void* const* tensor_ptrs, const MpkMeta* meta, char* err, int err_len) {
    return mpk::init_handle<mpk::cuda::Kernel>(cfg, tasks, events, tensor_ptrs, meta, err, err_len,
                                               [&](mpk::cuda::Kernel& k, mpk::Peers& peers) -> std::string {
        if (cfg->worker_threads > 256)
            return "worker_threads = " + std::to_string(cfg->worker_threads) + ": the CUDA worker block has at most 256";
        k.kernel = mpk::cuda::persistent_kernel<mpk::GeneratedDispatch>;
        if (mpk::cuda::setup(k, tensor_ptrs, *meta, peers.tensors, peers.signals)) return "";
        const std::string why = k.message.empty() ? std::string("CUDA setup failed") : k.message;
        mpk::cuda::release(k);
        return why;
    });
}

// Enqueues a launch on `stream` (a cudaStream_t; NULL: the legacy default stream) and returns;
// mpk_wait collects its status. In test mode it waits itself (test mode checks the pass at once).
MPK_EXPORT int mpk_launch_async(void* handle, void* stream) {
    if (!handle) return MPK_INVALID;
    mpk::cuda::Kernel& k = *static_cast<mpk::cuda::Kernel*>(handle);
    try {
        return mpk::cuda::launch(k, static_cast<cudaStream_t>(stream), k.cfg.test_mode != 0);
    } catch (...) {
        k.status = MPK_INTERNAL;
        k.message = "mpk_launch_async: unknown exception";
        return k.status;
    }
}

// Waits for the launch in flight (the watchdog runs meanwhile); returns its status.
MPK_EXPORT int mpk_wait(void* handle) {
    if (!handle) return MPK_INVALID;
    mpk::cuda::Kernel& k = *static_cast<mpk::cuda::Kernel*>(handle);
    try {
        return k.in_flight ? mpk::cuda::finish(k) : k.status;
    } catch (...) {
        return MPK_INTERNAL;
    }
}

MPK_EXPORT int mpk_launch(void* handle) {
    const int status = mpk_launch_async(handle, nullptr);
    return status == MPK_OK ? mpk_wait(handle) : status;
}

MPK_EXPORT int mpk_snapshot(void* handle, MpkWorkerState* out, int n) {
    if (!handle) return -1;
    const mpk::cuda::Kernel& k = *static_cast<mpk::cuda::Kernel*>(handle);
    for (int32_t w = 0; out && w < k.cfg.num_workers && w < n; ++w) {
        const mpk::exec::WorkerSlot& s = k.workers[w];
        out[w] = MpkWorkerState{w, mpk::ld_relaxed(&s.state), mpk::ld_relaxed(&s.task), mpk::ld_relaxed(&s.iteration),
                                mpk::ld_relaxed(&s.event), mpk::ld_relaxed(&s.peer), mpk::ld_relaxed(&s.counter),
                                mpk::ld_relaxed(&s.needed), s.peer >= 0 ? mpk::ld_relaxed(&s.peer_wait) : 0, 0};
    }
    return k.cfg.num_workers;
}

MPK_EXPORT int64_t mpk_iterations(void* handle) {
    return handle ? static_cast<mpk::cuda::Kernel*>(handle)->control.iterations : -1;
}

// One task alone (abi.h: mpk_run_task): one block of mpk_execute_one (entry_cuda.h) on the legacy
// default stream, then a synchronize. The view lives in device memory, as the executor's does; no
// wait/signal (a cross-rank layer fails naming itself); the watch is the CPU emulation's only.
MPK_EXPORT int mpk_run_task(void* handle, int32_t pos, uint64_t seed, void* const* tensor_ptrs, int32_t,
                            const void*, int64_t, int32_t* watch_thread) {
    if (!handle) return MPK_INVALID;
    mpk::cuda::Kernel& k = *static_cast<mpk::cuda::Kernel*>(handle);
    if (watch_thread) *watch_thread = -1;
    if (k.unusable || k.in_flight || pos < 1 || pos >= k.cfg.num_tasks) {
        k.message = "mpk_run_task: task " + std::to_string(pos) + ": not a layer task, or a launch is in flight";
        return MPK_INVALID;
    }
    k.status = MPK_OK;
    const MpkTask& t = k.tasks[size_t(pos)];
    std::vector<void*> bases(tensor_ptrs ? tensor_ptrs : k.tensors_host.data(),
                             (tensor_ptrs ? tensor_ptrs : k.tensors_host.data()) + k.cfg.num_tensors);
    mpk::TaskView v{};
    v.task = k.st.tasks + pos;
    v.meta = &k.d_state->meta;
    for (int32_t i = 0; i < MPK_MAX_TILES; ++i)
        v.ptrs[i] = i < t.num_inputs + t.num_outputs ? static_cast<char*>(bases[size_t(t.tiles[i].tensor)]) + t.tiles[i].offset
                                                      : nullptr;
    mpk::ptx::TensorMap maps[MPK_MAX_TILES];  // this run's tensor maps over its bases, copied to the device
    const void* at[MPK_MAX_TILES];
    const std::string why = mpk::task_tile_maps(t, pos, bases.data(), maps, at);
    if (!why.empty()) {
        k.message = "mpk_run_task: " + why;
        return MPK_INVALID;
    }
    v.iteration = 1;
    v.rank = k.cfg.mpi_rank;
    v.world_size = k.cfg.world_size;
    v.num_tensors = k.cfg.num_tensors;
    v.block_threads = k.cfg.worker_threads;
    v.smem_bytes = k.cfg.smem_bytes;
    v.simt_seed = seed;
    mpk::TaskView* d_view = nullptr;
    int* d_status = nullptr;
    mpk::TaskFailure failure{}, *d_failure = nullptr;  // this run's task_fail record, in device memory
    int status = 1;
    bool ok = MPK_CUDA_CHECK(k, cudaMemcpy(k.d_state, &k.st, sizeof(k.st), cudaMemcpyHostToDevice)) &&
              MPK_CUDA_CHECK(k, cudaMalloc(&d_view, sizeof(v))) && MPK_CUDA_CHECK(k, cudaMalloc(&d_status, sizeof(int))) &&
              MPK_CUDA_CHECK(k, cudaMalloc(&d_failure, sizeof(failure))) &&
              MPK_CUDA_CHECK(k, cudaMemcpy(d_failure, &failure, sizeof(failure), cudaMemcpyHostToDevice));
    v.failure = d_failure;
    mpk::ptx::TensorMap* d_maps = nullptr;
    ok = ok && MPK_CUDA_CHECK(k, cudaMalloc(&d_maps, sizeof maps)) &&
         MPK_CUDA_CHECK(k, cudaMemcpy(d_maps, maps, sizeof maps, cudaMemcpyHostToDevice));
    for (int32_t i = 0; i < MPK_MAX_TILES; ++i) v.tma_maps[i] = at[i] && d_maps ? d_maps + i : nullptr;
    ok = ok && MPK_CUDA_CHECK(k, cudaMemcpy(d_view, &v, sizeof(v), cudaMemcpyHostToDevice)) &&
              MPK_CUDA_CHECK(k, cudaFuncSetAttribute(mpk_execute_one, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                     k.cfg.smem_bytes));
    if (ok) {
        mpk_execute_one<<<1, k.cfg.worker_threads, size_t(k.cfg.smem_bytes)>>>(d_view, d_status);
        ok = MPK_CUDA_CHECK(k, cudaGetLastError()) && MPK_CUDA_CHECK(k, cudaDeviceSynchronize()) &&
             MPK_CUDA_CHECK(k, cudaMemcpy(&status, d_status, sizeof(int), cudaMemcpyDeviceToHost)) &&
             MPK_CUDA_CHECK(k, cudaMemcpy(&failure, d_failure, sizeof(failure), cudaMemcpyDeviceToHost));
    }
    if (d_view) cudaFree(d_view);
    if (d_status) cudaFree(d_status);
    if (d_failure) cudaFree(d_failure);
    if (d_maps) cudaFree(d_maps);
    if (!ok) {
        k.message = "task " + std::to_string(pos) + " failed: " + k.message;
        return MPK_INTERNAL;
    }
    if (failure.owner != 0) {  // the block left the task together; the device is fine
        k.message = mpk::failed_task_message(pos, failure);
        return MPK_TASK_FAILED;
    }
    if (status != 0) {
        k.message = "mpk_run_task: task " + std::to_string(pos) + (status == 2 ? ": the module was built without the one-task "
                    "launcher (-DMPK_NO_ONE_TASK_LAUNCHER)" : ": the module has no variant " + std::to_string(t.variant));
        return MPK_INVALID;
    }
    return MPK_OK;
}

// Frees the handle; an unusable one (a kernel that may still run) is left allocated.
MPK_EXPORT void mpk_finalize(void* handle) {
    if (!handle) return;
    mpk::cuda::Kernel* k = static_cast<mpk::cuda::Kernel*>(handle);
    if (k->unusable) return;
    mpk::cuda::release(*k);
    delete k;
}

#endif  // __CUDACC__

// ---- entry points written once: the driver's Kernel differs, these fields do not

namespace mpk {
#if defined(__CUDACC__)
using Handle = cuda::Kernel;
#else
using Handle = host::Kernel;
#endif
}  // namespace mpk

// Copies the last launch's message; returns its full length.
MPK_EXPORT int mpk_error_message(void* handle, char* buf, int n) {
    if (!handle) {
        mpk::copy_message("null handle", buf, n);
        return -1;
    }
    const mpk::Handle& k = *static_cast<mpk::Handle*>(handle);
    mpk::copy_message(k.message, buf, n);
    return int(k.message.size());
}

// After a launch (CUDA: copied back by finish); on the CPU also while one runs (the hang report).
MPK_EXPORT int mpk_event_counters(void* handle, int64_t* out, int n) {
    if (!handle) return -1;
    const mpk::Handle& k = *static_cast<mpk::Handle*>(handle);
    for (int i = 0; out && i < n && i < int(k.counters.size()); ++i) out[i] = mpk::ld_relaxed(&k.counters[size_t(i)]);
    return k.cfg.num_events;
}

MPK_EXPORT int mpk_task_progress(void* handle, int64_t* out, int n) {
    if (!handle) return -1;
    const mpk::Handle& k = *static_cast<mpk::Handle*>(handle);
    for (int i = 0; out && i < n && i < int(k.progress.size()); ++i) out[i] = mpk::ld_relaxed(&k.progress[size_t(i)]);
    return k.cfg.num_tasks;
}

// Called from another thread than the launching one (Python: on Ctrl-C): only a store, which the
// driver's supervisor (host_cpu.h supervise, host_cuda.h finish) sees within 10 ms and turns into
// MPK_INTERRUPTED and the abort flag every worker (on the GPU: every device spin loop) polls.
MPK_EXPORT int mpk_abort(void* handle) {
    if (!handle) return -1;
    mpk::st_release(&static_cast<mpk::Handle*>(handle)->interrupt, int32_t(1));
    return 0;
}
#endif  // !MPK_DISPATCHER_OBJECT
