// validate.h: everything the executor relies on, checked once at mpk_init (docs/runtime.md,
// "The C ABI"). Host code; returns "" or the reason, which mpk_init reports.
#pragma once
#include <stdio.h>
#include <string>
#include <vector>
#include "abi.h"
#include "executor.cuh"

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
    if (c->num_local_schedulers < 1 || c->num_local_schedulers > exec::kMaxSchedulers)
        return bad("num_local_schedulers = %d, need 1..%d", c->num_local_schedulers, exec::kMaxSchedulers);
    if (c->max_seq_length < 1) return bad("max_seq_length = %d, need >= 1", c->max_seq_length);
    if (c->page_size < 1) return bad("page_size = %d, need >= 1", c->page_size);
    if (c->max_num_batched_requests < 0 || c->max_num_batched_tokens < 0 || c->max_num_pages < 0 ||
        c->total_num_requests < 0)
        return bad("negative size: max_num_batched_requests %d, max_num_batched_tokens %d, max_num_pages %d, "
                   "total_num_requests %d",
                   c->max_num_batched_requests, c->max_num_batched_tokens, c->max_num_pages, c->total_num_requests);
    if (c->world_size < 1 || c->mpi_rank < 0 || c->mpi_rank >= c->world_size)
        return bad("mpi_rank %d / world_size %d", c->mpi_rank, c->world_size);
    if (c->profile && !c->task_record) return "profile = 1 needs a task_record (docs/profiler.md)";

    if (c->fault_kind < MPK_FAULT_NONE || c->fault_kind > MPK_FAULT_OVERREAD)
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
    if (c->num_guard_ranges < 0 || c->max_guard_faults < 0)
        return bad("num_guard_ranges = %d, max_guard_faults = %d", c->num_guard_ranges, c->max_guard_faults);
    if (c->num_guard_ranges > 0) {
#if defined(__CUDACC__)
        return "guard pages are the CPU backend's (the GPU's guarded copies have red zones only)";
#endif
        if (!c->guard_ranges || !c->guard_fault_count || (c->max_guard_faults > 0 && !c->guard_faults))
            return "num_guard_ranges > 0 needs guard_ranges, guard_faults and guard_fault_count";
        for (int32_t i = 0; i < c->num_guard_ranges; ++i) {
            const int64_t* r = c->guard_ranges + int64_t(i) * MPK_GUARD_RANGE_FIELDS;
            // r[2]: a tensor, or -1 - i for meta tensor i (MpkMeta's i-th pointer: mirage/mpk/memcheck.py)
            const int64_t num_meta = int64_t(sizeof(MpkMeta) / sizeof(void*));
            if (r[0] >= r[1] || r[2] < -num_meta || r[2] >= c->num_tensors)
                return bad("guard range %d: [%lld, %lld) of tensor %lld", i, (long long)r[0], (long long)r[1],
                           (long long)r[2]);
        }
    }
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
        {m->request_ids, slots, "request_ids"},
    };
    for (const auto& buf : bufs)
        if (buf.n > 0 && !buf.p) return bad("meta tensor %s is NULL (%lld entries expected)", buf.name, (long long)buf.n);

    const int32_t end = c->num_events - 1;
    if (tasks[0].task_type != MPK_TASK_TERMINATE) return bad("tasks[0].task_type = %d, expected TERMINATE (0)", tasks[0].task_type);
    if (events[end].event_type != MPK_EVENT_END_OF_TASK_GRAPH)
        return bad("events[%d] (the last) has event_type %d, expected END_OF_TASK_GRAPH (%d)", end,
                   events[end].event_type, MPK_EVENT_END_OF_TASK_GRAPH);
    // Each event launches the tasks of [first_task_id, last_task_id) that wait on it when it fires
    // (MPK's range; an empty range is first == last, or -1 / -1). TERMINATION and END launch none.
    for (int32_t e = 0; e < c->num_events; ++e) {
        const MpkEvent& ev = events[e];
        if (ev.num_triggers < 0) return bad("event %d: num_triggers = %d", e, ev.num_triggers);
        const bool empty = ev.first_task_id == ev.last_task_id || (ev.first_task_id == -1 && ev.last_task_id == -1);
        if (!empty && (e == 0 || e == end))
            return bad("event %d (%s) has the task range [%d, %d); it launches no task", e,
                       e == 0 ? "TERMINATION" : "END_OF_TASK_GRAPH", ev.first_task_id, ev.last_task_id);
        if (!empty && (ev.first_task_id < 1 || ev.first_task_id > ev.last_task_id || ev.last_task_id > c->num_tasks))
            return bad("event %d: task range [%d, %d) is not inside the layer tasks [1, %d)", e, ev.first_task_id,
                       ev.last_task_id, c->num_tasks);
        if (!empty && ev.num_triggers < 1)
            return bad("event %d launches tasks [%d, %d) but has num_triggers 0: it never fires", e,
                       ev.first_task_id, ev.last_task_id);
    }

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
        if (k.dependent_event > 0) {
            min_waiter[k.dependent_event] = t;
            const MpkEvent& ev = events[k.dependent_event];
            if (t < ev.first_task_id || t >= ev.last_task_id)
                return bad("task %d waits on event %d, whose task range [%d, %d) does not hold it: it would never be "
                           "launched", t, k.dependent_event, ev.first_task_id, ev.last_task_id);
        }
    }
    std::vector<int32_t> refs(size_t(c->num_events), 0);
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
            ++refs[size_t(e)];
        }
    }
    if (events[end].num_triggers != refs[size_t(end)])
        return bad("END_OF_TASK_GRAPH (event %d) has num_triggers %d but %d task triggers point at it", end,
                   events[end].num_triggers, refs[size_t(end)]);
    // Fewer expected triggers than triggers would fire the event before its last producer ran.
    // (More never fire it: the watchdog reports that.)
    for (int32_t e = 1; e < end; ++e)
        if (events[e].num_triggers > 0 && events[e].num_triggers < refs[size_t(e)])
            return bad("event %d has num_triggers %d but %d task triggers point at it: it would fire before all of "
                       "them", e, events[e].num_triggers, refs[size_t(e)]);
    return "";
}

}  // namespace mpk
