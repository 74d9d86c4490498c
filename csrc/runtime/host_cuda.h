// host_cuda.h: the CUDA backend's driver of the persistent executor (executor.cuh; docs/runtime.md).
// Included by entry.h under nvcc. Compile-checked here (tests/unit/test_nvcc.py); run only where a
// GPU is: Python loads it for backend="cuda" (mirage/mpk/runtime.py); nothing has run it on a GPU yet.
//
// The persistent kernel is ONE cooperative launch of num_workers worker CTAs (worker_threads
// threads, smem_bytes of dynamic shared memory) plus ceil(S / warps per CTA) scheduler CTAs whose
// warps' lane 0 each run a scheduler, on the caller's stream. Before the first launch the driver
// checks that every CTA can be co-resident (occupancy x SM count), else a clear error: the
// protocol spins across CTAs and deadlocks if one of them never starts.
// Memory (docs/runtime.md, "What the host sees"): the state, tables, counters, rings, the
// executor's control block (abort flag, status, message) and the beats in device memory; in
// host-mapped pinned memory only what crosses PCIe while the kernel runs, each with one writer:
// the worker / scheduler slots (the device stores, the host reads: the same watchdog and stuck
// check as the CPU backend, host_cpu.h) and the host's request to stop (the host stores, the
// device's spin loops read it every 256 rounds, never a task's path). The host's verdicts (hang,
// stuck, interrupted) stay on the host; the control block is copied back after the kernel ends.
// A kernel that does not end after an abort (a task spinning inside its kernel) is reported as
// MPK_STUCK and the handle is unusable: a running kernel cannot be stopped. mpk_abort (Ctrl-C in
// Python) goes the same way: MPK_INTERRUPTED, workers stop between tasks; a kernel not ended 1 s
// later leaves the handle unusable, so the caller gets control back within about a second.
// Every CUDA call goes through MPK_CUDA_CHECK, which records "file:line: call: error".
#pragma once
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>
#include <chrono>
#include <string>
#include <thread>
#include <vector>
#include "abi.h"
#include "executor.cuh"
#include "tile_maps.h"
#include "launch_plan.h"

namespace mpk {
namespace cuda {

// The persistent kernel. __launch_bounds__: at most 256 threads (the worker block), one CTA per
// SM wanted, so the compiler may give each thread up to 255 registers (no spills in the tasks).
// (The executor, not a task kernel: the real blockIdx, which runtime/simt.h refuses to tasks.)
#pragma push_macro("blockIdx")
#undef blockIdx
template <class D> __global__ void __launch_bounds__(256, 1) persistent_kernel(exec::State* st) {
    const int32_t W = st->cfg.num_workers;
    if (int32_t(blockIdx.x) < W) {
        exec::worker_loop<D>(*st, int32_t(blockIdx.x));
        return;
    }
    const int32_t s = (int32_t(blockIdx.x) - W) * int32_t(blockDim.x / 32) + int32_t(threadIdx.x / 32);
    if (threadIdx.x % 32 == 0 && s < st->cfg.num_local_schedulers) exec::scheduler_loop(*st, s);
}
#pragma pop_macro("blockIdx")

struct Kernel {
    MpkConfig cfg{};
    std::vector<MpkTask> tasks;
    std::vector<MpkEvent> events;
    std::vector<int32_t> first_tasks, event_waiters;
    void (*kernel)(exec::State*) = nullptr;  // persistent_kernel<Dispatch>
    double stuck_s = 0;

    exec::State st{};                  // device pointers; copied to d_state before each launch
    exec::State* d_state = nullptr;
    std::vector<void*> device_allocs;  // freed at finalize
    std::vector<void*> tensors_host;   // mpk_init's tensor pointers (device memory), for mpk_run_task
    exec::Control control{};           // the device's, copied back after a launch (st.control: device memory)
    int32_t* host_abort = nullptr;     // host-mapped, host pointers (st has the device ones)
    exec::WorkerSlot* workers = nullptr;
    exec::SchedulerSlot* schedulers = nullptr;
    void* mapped = nullptr;
    size_t launch_bytes = 0;           // the per-launch region at the start of reset_base
    void* reset_base = nullptr;

    cudaStream_t stream = nullptr;     // of the launch in flight
    cudaEvent_t done = nullptr;
    bool in_flight = false, unusable = false;
    int32_t interrupt = 0;             // atomic; mpk_abort: the launch in flight stops (cleared at a launch)
    int grid = 0, block = 0;
    size_t smem = 0;
    int64_t iteration_base = 0, launches = 0;
    double hang_after_s = 0;
    std::vector<int64_t> counters, progress;  // copied back after a launch
    int32_t status = MPK_OK;
    std::string message;
    int32_t host_status = MPK_OK;      // the host's verdict of the launch in flight
    std::string host_message;
};

inline bool check(Kernel& k, cudaError_t e, const char* call, const char* file, int line) {
    if (e == cudaSuccess) return true;
    char buf[512];
    snprintf(buf, sizeof buf, "%s:%d: %s: %s (%s)", file, line, call, cudaGetErrorName(e), cudaGetErrorString(e));
    if (k.status == MPK_OK) {
        k.status = MPK_INTERNAL;
        k.message = buf;
    }
    return false;
}
#define MPK_CUDA_CHECK(k, call) ::mpk::cuda::check((k), (call), #call, __FILE__, __LINE__)

template <class T> T* device_alloc(Kernel& k, size_t n, bool* ok) {
    void* p = nullptr;
    if (!MPK_CUDA_CHECK(k, cudaMalloc(&p, n * sizeof(T) + 1))) {
        *ok = false;
        return nullptr;
    }
    k.device_allocs.push_back(p);
    return static_cast<T*>(p);
}
template <class T> T* device_copy(Kernel& k, const T* src, size_t n, bool* ok) {
    T* p = device_alloc<T>(k, n, ok);
    if (p && n && !MPK_CUDA_CHECK(k, cudaMemcpy(p, src, n * sizeof(T), cudaMemcpyHostToDevice))) *ok = false;
    return p;
}

// Allocates and fills everything; false with k.message on failure.
inline bool setup(Kernel& k, void* const* tensors, const MpkMeta& meta, const std::vector<void*>& peer_tensors,
                  const std::vector<int64_t*>& peer_signals) {
    const MpkConfig& c = k.cfg;
    const int32_t W = c.num_workers, S = c.num_local_schedulers;
    bool ok = true;
    for (int32_t t = 1; t < c.num_tasks; ++t)
        if (k.tasks[t].dependent_event < 0) k.first_tasks.push_back(t);
    k.event_waiters.assign(size_t(c.num_events), 0);
    for (int32_t t = 1; t < c.num_tasks; ++t)
        if (k.tasks[t].dependent_event > 0) ++k.event_waiters[size_t(k.tasks[t].dependent_event)];
    exec::State& st = k.st;
    st.cfg = c;
    st.cfg.peer_tensor_ptrs = nullptr;
    st.cfg.peer_signal_ptrs = nullptr;
    st.meta = meta;
    st.tasks = device_copy(k, k.tasks.data(), k.tasks.size(), &ok);
    st.events = device_copy(k, k.events.data(), k.events.size(), &ok);
    k.tensors_host.assign(tensors, tensors + c.num_tensors);
    st.tensors = device_copy(k, tensors, size_t(c.num_tensors), &ok);
    {   // the tiles' tensor maps (tile_maps.h), encoded here over the device tensors, kept in device memory
        TileMaps maps;
        const std::string why = build_tile_maps(k.tasks.data(), c.num_tasks, tensors, maps);
        if (!why.empty()) {
            k.message = why;
            return false;
        }
        if (!maps.maps.empty()) {
            const ptx::TensorMap* d_maps = device_copy(k, maps.maps.data(), maps.maps.size(), &ok);
            std::vector<const void*> at(maps.slot.size(), nullptr);
            for (size_t i = 0; i < at.size() && d_maps; ++i)
                if (maps.slot[i] >= 0) at[i] = d_maps + maps.slot[i];
            st.tile_maps = device_copy(k, at.data(), at.size(), &ok);
        }
    }
    st.peer_tensors = peer_tensors.empty() ? nullptr : device_copy(k, peer_tensors.data(), peer_tensors.size(), &ok);
    st.peer_signals = peer_signals.empty() ? nullptr : device_copy(k, peer_signals.data(), peer_signals.size(), &ok);
    st.first_tasks = device_copy(k, k.first_tasks.data(), k.first_tasks.size(), &ok);
    st.num_first_tasks = int32_t(k.first_tasks.size());
    st.num_owning = S < W ? S : W;
    st.event_waiters = device_copy(k, k.event_waiters.data(), k.event_waiters.size(), &ok);
    st.ordered = exec::ordered_mode(c);
    st.watchdog_ns = c.watchdog_s > 0 ? int64_t(c.watchdog_s * 1e9) : 0;
    st.worker_cap = exec::worker_ring_capacity(c.num_tasks);
    st.sched_cap = exec::scheduler_ring_capacity(c.num_events);
    // The per-launch region, one allocation so that one memset resets it.
    const size_t bytes[] = {size_t(c.num_events) * 8, size_t(c.num_tasks) * 8 * 2,
                            size_t(W) * sizeof(exec::Index) * 2, size_t(S) * sizeof(exec::Index) * 2,
                            size_t(S * st.sched_cap) * sizeof(exec::SchedEntry), size_t(W + S) * sizeof(exec::Beat)};
    size_t total = 0;
    for (size_t b : bytes) total += (b + 255) / 256 * 256;
    char* base = device_alloc<char>(k, total, &ok);
    k.reset_base = base;
    k.launch_bytes = total;
    if (base) {
        char* p = base;
        auto carve = [&](size_t b) {
            char* q = p;
            p += (b + 255) / 256 * 256;
            return q;
        };
        st.counters = reinterpret_cast<int64_t*>(carve(bytes[0]));
        st.progress = reinterpret_cast<int64_t*>(carve(bytes[1]));
        st.arrived = st.progress + c.num_tasks;
        st.worker_head = reinterpret_cast<exec::Index*>(carve(bytes[2]));
        st.worker_tail = st.worker_head + W;
        st.sched_reserve = reinterpret_cast<exec::Index*>(carve(bytes[3]));
        st.sched_head = st.sched_reserve + S;
        st.sched_ring = reinterpret_cast<exec::SchedEntry*>(carve(bytes[4]));
        st.beats = reinterpret_cast<exec::Beat*>(carve(bytes[5]));
    }
    st.control = device_alloc<exec::Control>(k, 1, &ok);
    st.worker_ring = device_alloc<exec::TaskId>(k, size_t(W * st.worker_cap), &ok);
    int32_t* words = device_alloc<int32_t>(k, size_t(request_words(c)), &ok);
    RequestState rq;
    bind_requests(rq, words, c);  // pointers only: fine for device memory
    st.requests = device_copy(k, &rq, 1, &ok);
    // host-mapped: the host's request and the slots
    const size_t mapped = 64 + size_t(W) * sizeof(exec::WorkerSlot) + size_t(S) * sizeof(exec::SchedulerSlot) + 128;
    if (ok && MPK_CUDA_CHECK(k, cudaHostAlloc(&k.mapped, mapped, cudaHostAllocMapped))) {
        void* dev = nullptr;
        ok = MPK_CUDA_CHECK(k, cudaHostGetDevicePointer(&dev, k.mapped, 0));
        char* h = static_cast<char*>(k.mapped);
        char* d = static_cast<char*>(dev);
        const size_t off_w = 64;
        const size_t off_s = off_w + size_t(W) * sizeof(exec::WorkerSlot);
        k.host_abort = reinterpret_cast<int32_t*>(h);
        k.workers = reinterpret_cast<exec::WorkerSlot*>(h + off_w);
        k.schedulers = reinterpret_cast<exec::SchedulerSlot*>(h + off_s);
        st.host_abort = reinterpret_cast<int32_t*>(d);
        st.workers = reinterpret_cast<exec::WorkerSlot*>(d + off_w);
        st.schedulers = reinterpret_cast<exec::SchedulerSlot*>(d + off_s);
    } else {
        ok = false;
    }
    k.d_state = device_alloc<exec::State>(k, 1, &ok);
    k.stuck_s = c.stuck_s > 0 ? c.stuck_s : 10 * c.watchdog_s;
    return ok;
}

// The launch geometry and the resource check (the first launch): launch_plan.h decides from the
// device's limits and the kernel's attributes (static shared memory, registers) whether every CTA
// can be co-resident and whether the dynamic shared memory needs the opt-in; the occupancy API has
// the last word.
inline bool geometry(Kernel& k) {
    if (k.grid) return true;
    const MpkConfig& c = k.cfg;
    int dev = 0, coop = 0, per_sm = 0;
    k.block = c.worker_threads;
    k.smem = size_t(c.smem_bytes);
    const int warps = k.block / 32;
    k.grid = c.num_workers + (c.num_local_schedulers + warps - 1) / warps;
    GpuLimits g{};
    const struct { cudaDeviceAttr attr; int* to; } query[] = {
        {cudaDevAttrMultiProcessorCount, &g.sms}, {cudaDevAttrMaxSharedMemoryPerBlock, &g.smem_per_block},
        {cudaDevAttrMaxSharedMemoryPerBlockOptin, &g.smem_per_block_optin},
        {cudaDevAttrMaxSharedMemoryPerMultiprocessor, &g.smem_per_sm},
        {cudaDevAttrReservedSharedMemoryPerBlock, &g.smem_reserved_per_block},
        {cudaDevAttrMaxRegistersPerMultiprocessor, &g.regs_per_sm},
        {cudaDevAttrMaxThreadsPerMultiProcessor, &g.max_threads_per_sm},
        {cudaDevAttrMaxBlocksPerMultiprocessor, &g.max_blocks_per_sm}, {cudaDevAttrCooperativeLaunch, &coop}};
    cudaFuncAttributes fa{};
    const void* fn = reinterpret_cast<const void*>(k.kernel);
    bool ok = MPK_CUDA_CHECK(k, cudaGetDevice(&dev)) && MPK_CUDA_CHECK(k, cudaFuncGetAttributes(&fa, fn));
    for (const auto& q : query) ok = ok && MPK_CUDA_CHECK(k, cudaDeviceGetAttribute(q.to, q.attr, dev));
    if (!ok) return false;
    const LaunchPlan plan = plan_launch(KernelResources{int(fa.sharedSizeBytes), fa.numRegs, k.block, k.smem}, g,
                                        k.grid);
    if (plan.fits && plan.opt_in &&
        !MPK_CUDA_CHECK(k, cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, int(k.smem))))
        return false;
    if (plan.fits && !MPK_CUDA_CHECK(k, cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, k.block, k.smem)))
        return false;
    char buf[640];
    if (!coop) {
        snprintf(buf, sizeof buf, "GPU %d cannot launch cooperative kernels: the persistent kernel needs every CTA "
                 "co-resident", dev);
    } else if (!plan.fits) {
        snprintf(buf, sizeof buf, "GPU %d: %s", dev, plan.why);
    } else if (int64_t(per_sm) * g.sms < k.grid) {
        snprintf(buf, sizeof buf, "the persistent kernel needs %d co-resident CTAs (%d workers + %d scheduler CTAs of "
                 "%d warps) but GPU %d holds %d (%d per SM x %d SMs at %d threads, %d registers and %zu + %zu bytes "
                 "of shared memory; launch_plan.h expected %d per SM): lower num_workers or num_local_schedulers",
                 k.grid, c.num_workers, k.grid - c.num_workers, warps, dev, per_sm * g.sms, per_sm, g.sms, k.block,
                 fa.numRegs, size_t(fa.sharedSizeBytes), k.smem, plan.blocks_per_sm);
    } else {
        return true;
    }
    k.status = MPK_INVALID;
    k.message = buf;
    k.grid = 0;
    return false;
}

inline void reset_mapped(Kernel& k) {
    k.control = exec::Control{};  // copied to the device's at the launch
    k.control.failed_worker = -1;
    k.control.failed_task = -1;
    st_release_sys(k.host_abort, int32_t(0));
    k.host_status = MPK_OK;
    k.host_message.clear();
    for (int32_t w = 0; w < k.cfg.num_workers; ++w) {
        k.workers[w] = exec::WorkerSlot{};
        k.workers[w].task = -1;
        k.workers[w].event = k.workers[w].peer = -1;
    }
    for (int32_t s = 0; s < k.cfg.num_local_schedulers; ++s) k.schedulers[s] = exec::SchedulerSlot{};
}

// The host's view of the state: the slots through host pointers.
inline exec::State host_view(const Kernel& k) {
    exec::State v = k.st;
    v.workers = k.workers;
    v.schedulers = k.schedulers;
    return v;
}

// The host's verdict, kept on the host (the device's status has the device as its one writer),
// and the request that the device's spin loops turn into its abort flag.
inline void host_fail(Kernel& k, int32_t code, const char* why) {
    if (k.host_status == MPK_OK) {
        k.host_status = code;
        k.host_message = why;
    }
    st_release_sys(k.host_abort, int32_t(1));
}

// Waits for the launch in flight with the watchdog and the stuck check; collects the results.
inline int32_t finish(Kernel& k) {
    using clock = std::chrono::steady_clock;
    const double limit = k.cfg.watchdog_s, stuck = k.stuck_s;
    exec::State view = host_view(k);
    clock::time_point last = clock::now(), aborted_at{};
    int64_t seen = -1;
    bool aborted = false, interrupted = false;
    std::vector<int64_t> started(size_t(k.cfg.num_workers), -1);
    std::vector<clock::time_point> since(size_t(k.cfg.num_workers), last);
    for (;;) {
        const cudaError_t q = cudaEventQuery(k.done);
        if (q != cudaErrorNotReady) {
            k.in_flight = false;
            if (!MPK_CUDA_CHECK(k, q)) {  // e.g. an illegal address in a task: the context is lost
                k.unusable = true;
                return k.status;
            }
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        const clock::time_point now = clock::now();
        if (!aborted && ld_acquire(&k.interrupt)) {  // mpk_abort: the flag the device spin loops poll
            host_fail(k, MPK_INTERRUPTED, "");
            aborted = interrupted = true;
            aborted_at = now;
        }
        if (aborted) {
            if (std::chrono::duration<double>(now - aborted_at).count() > (interrupted ? 1.0 : 5.0)) {
                k.status = interrupted ? MPK_INTERRUPTED : MPK_STUCK;
                k.message = std::string(interrupted ? "interrupted (mpk_abort), but the" : "the") +
                            " persistent kernel did not end within " + (interrupted ? "1 s" : "5 s") + " of the "
                            "abort (a task is still inside its kernel); a running kernel cannot be stopped: the CUDA "
                            "context is unusable";
                k.unusable = true;
                return k.status;
            }
            continue;
        }
        bool running = false;
        const int64_t ticks = exec::progress_ticks(view, &running);
        if (ticks != seen || running) {
            seen = ticks;
            last = now;
        } else if (limit > 0 && std::chrono::duration<double>(now - last).count() >= limit) {
            k.hang_after_s = std::chrono::duration<double>(now - last).count();
            host_fail(k, MPK_HANG, "");
            aborted = true;
            aborted_at = now;
        }
        for (int32_t w = 0; w < k.cfg.num_workers && stuck > 0 && !aborted; ++w) {
            const exec::WorkerSlot& s = k.workers[w];
            const int64_t n = ld_relaxed(&s.started);
            if (ld_relaxed(&s.state) != MPK_WORKER_RUNNING || n != started[size_t(w)]) {
                started[size_t(w)] = n;
                since[size_t(w)] = now;
            } else if (std::chrono::duration<double>(now - since[size_t(w)]).count() >= stuck) {
                char buf[320];
                snprintf(buf, sizeof buf, "task %lld (iteration %lld) has been inside its kernel on worker %d for more "
                         "than %g s (stuck_s; default 10 x watchdog_s): stuck", (long long)ld_relaxed(&s.task),
                         (long long)ld_relaxed(&s.iteration), w, stuck);
                host_fail(k, MPK_STUCK, buf);
                aborted = true;
                aborted_at = now;
            }
        }
    }
    k.counters.resize(size_t(k.cfg.num_events));
    k.progress.resize(size_t(k.cfg.num_tasks));
    if (!MPK_CUDA_CHECK(k, cudaMemcpy(k.counters.data(), k.st.counters, k.counters.size() * 8, cudaMemcpyDeviceToHost)) ||
        !MPK_CUDA_CHECK(k, cudaMemcpy(k.progress.data(), k.st.progress, k.progress.size() * 8, cudaMemcpyDeviceToHost)))
        return k.status;
    if (!MPK_CUDA_CHECK(k, cudaMemcpy(&k.control, k.st.control, sizeof k.control, cudaMemcpyDeviceToHost)))
        return k.status;
    k.status = k.control.status;  // the device's failure, if any, came first
    k.message = k.control.message;
    if (k.status == MPK_OK && k.host_status != MPK_OK) {
        k.status = k.host_status;
        k.message = k.host_message;
    }
    if (k.status == MPK_INTERRUPTED) {
        const int64_t pass = k.control.iterations + 1;
        int64_t done = 0;
        for (size_t t = 1; t < k.progress.size(); ++t) done += k.progress[t] >= pass;
        k.message = "interrupted (mpk_abort) during pass " + std::to_string(pass) + " after " + std::to_string(done) +
                    " of " + std::to_string(k.cfg.num_tasks - 1) + " tasks; the workers stopped between tasks";
    }
    if (k.status == MPK_HANG && k.message.empty()) {
        char buf[160];
        snprintf(buf, sizeof buf, "watchdog: no task finished and no task ran for %.2f s (watchdog_s = %g)",
                 k.hang_after_s, k.cfg.watchdog_s);
        k.message = buf;
    }
    if (k.status == MPK_OK) k.iteration_base += k.control.iterations;
    return k.status;
}

// Enqueues one launch on `stream`; waits for it (with the watchdog) when `wait`.
inline int32_t launch(Kernel& k, cudaStream_t stream, bool wait) {
    if (k.unusable) return MPK_INVALID;
    if (k.in_flight && finish(k) != MPK_OK && k.unusable) return k.status;
    k.status = MPK_OK;
    k.message.clear();
    if (!geometry(k)) return k.status;
    if (!k.done && !MPK_CUDA_CHECK(k, cudaEventCreateWithFlags(&k.done, cudaEventDisableTiming))) return k.status;
    reset_mapped(k);
    st_release(&k.interrupt, int32_t(0));  // an mpk_abort from now on stops this launch
    k.st.iteration_base = k.iteration_base;
    k.st.launch_seed = splitmix64((k.cfg.jitter ? k.cfg.jitter_seed : 0) ^ uint64_t(k.launches) << 32);
    ++k.launches;
    void* args[] = {&k.d_state};
    if (!MPK_CUDA_CHECK(k, cudaMemsetAsync(k.reset_base, 0, k.launch_bytes, stream)) ||
        !MPK_CUDA_CHECK(k, cudaMemcpyAsync(k.d_state, &k.st, sizeof k.st, cudaMemcpyHostToDevice, stream)) ||
        !MPK_CUDA_CHECK(k, cudaMemcpyAsync(k.st.control, &k.control, sizeof k.control, cudaMemcpyHostToDevice,
                                           stream)) ||
        !MPK_CUDA_CHECK(k, cudaLaunchCooperativeKernel(reinterpret_cast<const void*>(k.kernel), dim3(unsigned(k.grid)),
                                                       dim3(unsigned(k.block)), args, k.smem, stream)) ||
        !MPK_CUDA_CHECK(k, cudaEventRecord(k.done, stream)))
        return k.status;
    k.stream = stream;
    k.in_flight = true;
    return wait ? finish(k) : MPK_OK;
}

inline void release(Kernel& k) {
    if (k.unusable) return;  // a kernel may still run: its memory must stay
    if (k.in_flight) cudaEventSynchronize(k.done);
    for (void* p : k.device_allocs) cudaFree(p);
    if (k.mapped) cudaFreeHost(k.mapped);
    if (k.done) cudaEventDestroy(k.done);
}

}  // namespace cuda
}  // namespace mpk
