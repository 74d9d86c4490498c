// entry.h: the extern "C" entry points declared in abi.h, compiled into every generated
// module. Include it LAST, after the generated dispatcher and
//   #define MPK_EXECUTE_TASK mpk_generated::execute_task   // bool(const mpk::TaskView&):
//                                                          // false for a variant it does not have
// Every entry point catches everything: no C++ exception crosses the C ABI. All state
// lives in the handle mpk_init returns, so kernels sharing one loaded .so share nothing.
#pragma once
#if defined(MPK_FAULT_INJECTION) && !defined(MPK_PERTURB_OUTPUT)
#error "runtime/entry.h: a fault-injection build needs MPK_PERTURB_OUTPUT from the generated code"
#endif
#ifndef MPK_EXECUTE_TASK
#error "runtime/entry.h: define MPK_EXECUTE_TASK (the generated dispatcher) before including it"
#endif
#if defined(MPK_BACKEND_CUDA)
#error "runtime/entry.h: the CUDA executor is not written yet; build with MPK_BACKEND_CPU"
#endif
#if defined(__CUDACC__)
// Under nvcc (until the persistent GPU executor exists: docs/simt.md) the generated module is
// the dispatcher and its kernels as device code, plus a one-task launcher for checking kernels
// on a GPU; the CPU executor's entry points below are host-backend only.
#include "entry_cuda.h"
#else
#include <string.h>
#include <new>
#include <string>
#include "runtime.h"
#include "executor_cpu.h"

#define MPK_EXPORT extern "C" __attribute__((visibility("default")))

namespace mpk {

// ---- validation: everything the runtime relies on, checked once at mpk_init

inline std::string validate(const MpkConfig* c, const MpkTask* tasks, const MpkEvent* events,
                            void* const* tensors, const MpkMeta* m) {
    char b[512];
    auto bad = [&](const char* fmt, auto... args) {
        snprintf(b, sizeof b, fmt, args...);
        return std::string(b);
    };
    if (!c) return "config is NULL";
    if (c->abi_version != MPK_ABI_VERSION)
        return bad("abi_version %d, this module implements %d; rebuild the module", c->abi_version, MPK_ABI_VERSION);
    if (!tasks || !events) return "tasks or events is NULL";
    if (c->num_tasks < 2) return bad("num_tasks = %d: need TERMINATE plus at least one layer task", c->num_tasks);
    if (c->num_events < 2) return bad("num_events = %d: need TERMINATION and END_OF_TASK_GRAPH", c->num_events);
    if (c->num_tensors < 1) return bad("num_tensors = %d, need >= 1", c->num_tensors);
    if (c->num_workers < 1) return bad("num_workers = %d, need >= 1", c->num_workers);
    if (c->num_local_schedulers < 1) return bad("num_local_schedulers = %d, need >= 1", c->num_local_schedulers);
    if (c->max_seq_length < 1) return bad("max_seq_length = %d, need >= 1", c->max_seq_length);
    if (c->page_size < 1) return bad("page_size = %d, need >= 1", c->page_size);
    if (c->max_num_batched_requests < 0 || c->max_num_batched_tokens < 0 || c->max_num_pages < 0 ||
        c->total_num_requests < 0)
        return bad("negative size: max_num_batched_requests %d, max_num_batched_tokens %d, max_num_pages %d, "
                   "total_num_requests %d",
                   c->max_num_batched_requests, c->max_num_batched_tokens, c->max_num_pages, c->total_num_requests);
    if (c->world_size < 1 || c->mpi_rank < 0 || c->mpi_rank >= c->world_size)
        return bad("mpi_rank %d / world_size %d", c->mpi_rank, c->world_size);

    if (c->fault_kind < MPK_FAULT_NONE || c->fault_kind > MPK_FAULT_NO_SIGNAL)
        return bad("fault_kind = %d is not an MPK_FAULT_* value", c->fault_kind);
    if (c->fault_kind != MPK_FAULT_NONE && (c->fault_task < 1 || c->fault_task >= c->num_tasks))
        return bad("fault_task = %d is outside the layer tasks 1..%d", c->fault_task, c->num_tasks - 1);
#ifndef MPK_FAULT_INJECTION
    if (c->fault_kind != MPK_FAULT_NONE)
        return "a fault was requested but this module was built without MPK_FAULT_INJECTION";
#endif

    if (!tensors) return "tensor_ptrs is NULL";
    for (int32_t i = 0; i < c->num_tensors; ++i)
        if (!tensors[i]) return bad("tensor_ptrs[%d] is NULL", i);
    if (c->peer_tensor_ptrs)
        for (int32_t i = 0; i < c->num_tensors; ++i)
            if (c->peer_tensor_ptrs[int64_t(c->mpi_rank) * c->num_tensors + i] &&
                c->peer_tensor_ptrs[int64_t(c->mpi_rank) * c->num_tensors + i] != tensors[i])
                return bad("peer_tensor_ptrs: rank %d's own entry for tensor %d differs from tensor_ptrs[%d]",
                           c->mpi_rank, i, i);
    if (c->worker_threads < 32 || c->worker_threads > 1024 || c->worker_threads % 32)
        return bad("worker_threads = %d: need a multiple of 32 in [32, 1024]", c->worker_threads);
    if (c->smem_bytes < 0) return bad("smem_bytes = %d", c->smem_bytes);
    if (c->num_signal_slots < 0) return bad("num_signal_slots = %d", c->num_signal_slots);
    if (c->num_signal_slots > 0) {
        if (!c->peer_signal_ptrs) return bad("num_signal_slots = %d but peer_signal_ptrs is NULL", c->num_signal_slots);
        for (int32_t r = 0; r < c->world_size; ++r)
            if (!c->peer_signal_ptrs[r]) return bad("peer_signal_ptrs[%d] is NULL", r);
    }

    // meta buffers: present wherever their size is non-zero
    if (!m) return "meta is NULL";
    const int64_t reqs = c->total_num_requests, toks = c->max_num_batched_tokens, slots = c->max_num_batched_requests;
    const struct { const void* p; int64_t n; const char* name; } bufs[] = {
        {m->tokens, reqs * c->max_seq_length, "tokens"},
        {m->step, reqs, "step"},
        {m->prompt_lengths, reqs, "prompt_lengths"},
        {m->input_tokens, toks, "input_tokens"},
        {m->output_tokens, toks, "output_tokens"},
        {m->num_new_tokens, 1, "num_new_tokens"},
        {m->qo_indptr_buffer, slots + 1, "qo_indptr_buffer"},
        {m->paged_kv_indptr_buffer, slots + 1, "paged_kv_indptr_buffer"},
        {m->paged_kv_indices_buffer, c->max_num_pages, "paged_kv_indices_buffer"},
        {m->paged_kv_last_page_len_buffer, slots, "paged_kv_last_page_len_buffer"},
    };
    for (const auto& buf : bufs)
        if (buf.n > 0 && !buf.p) return bad("meta tensor %s is NULL (%lld entries expected)", buf.name, (long long)buf.n);

    const int32_t end = c->num_events - 1;
    if (tasks[0].task_type != MPK_TASK_TERMINATE) return bad("tasks[0].task_type = %d, expected TERMINATE (0)", tasks[0].task_type);
    if (events[end].event_type != MPK_EVENT_END_OF_TASK_GRAPH)
        return bad("events[%d] (the last) has event_type %d, expected END_OF_TASK_GRAPH (%d)", end,
                   events[end].event_type, MPK_EVENT_END_OF_TASK_GRAPH);
    for (int32_t e = 0; e < c->num_events; ++e)
        if (events[e].num_triggers < 0) return bad("event %d: num_triggers = %d", e, events[e].num_triggers);

    // min_waiter[e]: the lowest task waiting on e (num_tasks if none)
    std::vector<int32_t> min_waiter(size_t(c->num_events), c->num_tasks);
    for (int32_t t = c->num_tasks - 1; t >= 1; --t) {
        const MpkTask& k = tasks[t];
        if (k.task_type < MPK_TASK_FIRST_LAYER)
            return bad("task %d: task_type %d is not a layer task (>= %d)", t, k.task_type, MPK_TASK_FIRST_LAYER);
        if (k.dependent_event < -1 || k.dependent_event >= c->num_events)
            return bad("task %d: dependent_event %d outside [-1, %d)", t, k.dependent_event, c->num_events);
        if (k.dependent_event == 0) return bad("task %d waits on event 0 (TERMINATION)", t);
        if (k.dependent_event == end)
            return bad("task %d waits on END_OF_TASK_GRAPH (event %d); only the runtime does", t, end);
        if (k.dependent_event > 0) min_waiter[k.dependent_event] = t;
    }
    int32_t end_triggers = 0;
    for (int32_t t = 1; t < c->num_tasks; ++t) {
        const MpkTask& k = tasks[t];
        if (k.num_inputs < 0 || k.num_outputs < 0 || k.num_inputs + k.num_outputs > MPK_MAX_TILES)
            return bad("task %d: %d inputs + %d outputs, at most %d tiles", t, k.num_inputs, k.num_outputs, MPK_MAX_TILES);
        for (int32_t i = 0; i < k.num_inputs + k.num_outputs; ++i) {
            if (k.tiles[i].tensor < 0 || k.tiles[i].tensor >= c->num_tensors)
                return bad("task %d tile %d: tensor %d outside [0, %d)", t, i, k.tiles[i].tensor, c->num_tensors);
            if (k.tiles[i].offset < 0) return bad("task %d tile %d: negative offset %lld", t, i, (long long)k.tiles[i].offset);
        }
        if (k.num_triggers < 1 || k.num_triggers > MPK_MAX_TRIGGERS)
            return bad("task %d: num_triggers = %d, need 1..%d (a leaf task triggers END_OF_TASK_GRAPH)", t,
                       k.num_triggers, MPK_MAX_TRIGGERS);
        for (int32_t j = 0; j < k.num_triggers; ++j) {
            const int32_t e = k.trigger_events[j];
            if (e < 1 || e >= c->num_events) return bad("task %d: trigger event %d outside [1, %d)", t, e, c->num_events);
            if (min_waiter[e] <= t)
                return bad("task %d triggers event %d, which task %d waits on: a waiter must come after every trigger", t,
                           e, min_waiter[e]);
            end_triggers += e == end;
        }
    }
    if (events[end].num_triggers != end_triggers)
        return bad("END_OF_TASK_GRAPH (event %d) has num_triggers %d but %d task triggers point at it", end,
                   events[end].num_triggers, end_triggers);
    return "";
}

inline void copy_message(const std::string& msg, char* buf, int n) {
    if (!buf || n <= 0) return;
    const size_t len = msg.size() < size_t(n - 1) ? msg.size() : size_t(n - 1);
    memcpy(buf, msg.data(), len);
    buf[len] = 0;
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

MPK_EXPORT void* mpk_init(const MpkConfig* cfg, const MpkTask* tasks, const MpkEvent* events,
                          void* const* tensor_ptrs, const MpkMeta* meta, char* err, int err_len) {
    if (err && err_len > 0) err[0] = 0;
    try {
        const std::string why = mpk::validate(cfg, tasks, events, tensor_ptrs, meta);
        if (!why.empty()) {
            mpk::copy_message("mpk_init: " + why, err, err_len);
            return nullptr;
        }
        mpk::Kernel* k = new mpk::Kernel();
        k->cfg = *cfg;
        k->tasks.assign(tasks, tasks + cfg->num_tasks);
        k->events.assign(events, events + cfg->num_events);
        k->tensors.assign(tensor_ptrs, tensor_ptrs + cfg->num_tensors);
        k->meta = *meta;
        if (cfg->peer_tensor_ptrs)
            k->peer_tensors.assign(cfg->peer_tensor_ptrs,
                                   cfg->peer_tensor_ptrs + int64_t(cfg->world_size) * cfg->num_tensors);
        if (cfg->num_signal_slots > 0)
            k->peer_signals.assign(cfg->peer_signal_ptrs, cfg->peer_signal_ptrs + cfg->world_size);
        k->cfg.peer_tensor_ptrs = nullptr;  // copied above; the caller's arrays may go away
        k->cfg.peer_signal_ptrs = nullptr;
        k->requests.allocate(*cfg);
        mpk::reset_launch(*k);  // so queries before the first launch see sane values
        return k;
    } catch (const std::exception& e) {
        mpk::copy_message(std::string("mpk_init: ") + e.what(), err, err_len);
    } catch (...) {
        mpk::copy_message("mpk_init: unknown exception", err, err_len);
    }
    return nullptr;
}

MPK_EXPORT int mpk_launch(void* handle) {
    if (!handle) return MPK_INVALID;
    mpk::Kernel& k = *static_cast<mpk::Kernel*>(handle);
    if (__atomic_exchange_n(&k.launching, 1, __ATOMIC_ACQ_REL)) return MPK_INVALID;  // already launching
    int status;
    try {
        status = mpk::launch(k, [](const mpk::TaskView& v) { return MPK_EXECUTE_TASK(v); });
    } catch (const std::exception& e) {
        k.fail(MPK_INTERNAL, std::string("mpk_launch: ") + e.what());
        status = k.status;
    } catch (...) {
        k.fail(MPK_INTERNAL, "mpk_launch: unknown exception");
        status = k.status;
    }
    __atomic_store_n(&k.launching, 0, __ATOMIC_RELEASE);
    return status;
}

// Copies the last launch's message; returns its full length.
MPK_EXPORT int mpk_error_message(void* handle, char* buf, int n) {
    if (!handle) {
        mpk::copy_message("null handle", buf, n);
        return -1;
    }
    const mpk::Kernel& k = *static_cast<mpk::Kernel*>(handle);
    mpk::copy_message(k.message, buf, n);
    return int(k.message.size());
}

MPK_EXPORT int mpk_snapshot(void* handle, MpkWorkerState* out, int n) {
    if (!handle) return -1;
    const mpk::Kernel& k = *static_cast<mpk::Kernel*>(handle);
    if (out) mpk::fill_snapshot(k, out, n);
    return k.cfg.num_workers;
}

MPK_EXPORT int mpk_event_counters(void* handle, int64_t* out, int n) {
    if (!handle) return -1;
    const mpk::Kernel& k = *static_cast<mpk::Kernel*>(handle);
    for (int i = 0; out && i < n && i < int(k.counters.size()); ++i) out[i] = k.counters[i];
    return k.cfg.num_events;
}

MPK_EXPORT int mpk_task_progress(void* handle, int64_t* out, int n) {
    if (!handle) return -1;
    const mpk::Kernel& k = *static_cast<mpk::Kernel*>(handle);
    for (int i = 0; out && i < n && i < int(k.progress.size()); ++i) out[i] = k.progress[i];
    return k.cfg.num_tasks;
}

MPK_EXPORT int64_t mpk_iterations(void* handle) {
    return handle ? static_cast<mpk::Kernel*>(handle)->iterations : -1;
}

MPK_EXPORT void mpk_finalize(void* handle) { delete static_cast<mpk::Kernel*>(handle); }

#endif  // __CUDACC__
