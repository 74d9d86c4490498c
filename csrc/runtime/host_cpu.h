// host_cpu.h: the CPU backend's driver of the persistent executor (executor.cuh; docs/runtime.md).
//
// The handle owns the executor's state in host memory and num_workers + num_local_schedulers OS
// threads, started at the first launch and kept until mpk_finalize (no thread is created per
// launch). Per launch, each worker thread runs its worker block through the SIMT emulation
// (mpk::simt::run_block: worker_threads fibers running exec::worker_loop) and each scheduler
// thread a one-warp block whose lane 0 runs exec::scheduler_loop. The thread that called
// mpk_launch supervises: it wakes them, then waits for them with the watchdog:
//   - no task finished, no message handled and no worker inside a kernel for watchdog_s: MPK_HANG
//     (the abort flag, which every spin loop checks, ends the launch within about 1 ms);
//   - one task inside its kernel for stuck_s (default 10 x watchdog_s): MPK_STUCK naming it; the
//     launch returns without that worker (a kernel cannot be interrupted), and the handle refuses
//     further launches until the worker comes back;
//   - mpk_abort (Ctrl-C in Python, from another thread): MPK_INTERRUPTED through the same abort
//     flag, so workers stop between tasks; one still inside a kernel after kInterruptGraceS is
//     left there as with MPK_STUCK, so the caller gets control back within about a second.
// Everything lives in the handle; two handles share nothing.
#pragma once
#include <condition_variable>
#include <chrono>
#include <exception>
#include <mutex>
#include <stdio.h>
#include <string.h>
#include <string>
#include <thread>
#include <vector>
#include "abi.h"
#include "executor.cuh"
#include "guard.h"
#include "tile_maps.h"

namespace mpk {
namespace host {

// Runs exec::worker_loop<Dispatch> for worker w; set by the entry points, which know the
// generated dispatcher.
using WorkerBody = void (*)(exec::State&, int32_t);

struct Kernel {
    // copied at mpk_init
    MpkConfig cfg{};
    std::vector<MpkTask> tasks;
    std::vector<MpkEvent> events;
    std::vector<void*> tensors;
    TileMaps tile_maps;                  // the tiles' tensor maps (tile_maps.h), over `tensors`
    std::vector<const void*> tile_map_at;  // [num_tasks * MPK_MAX_TILES]: into tile_maps, or null; empty: none
    std::vector<void*> peer_tensors;     // [world_size * num_tensors], or empty
    std::vector<int64_t*> peer_signals;  // [world_size], or empty
    std::vector<int32_t> first_tasks, event_waiters;
    WorkerBody worker_body = nullptr;
    double stuck_s = 0;
    std::vector<int64_t> guard_ranges;   // test mode's guard pages (guard.h); guard points into it
    guard::Table guard;

    // the executor's memory (exec::State points into it)
    std::vector<int64_t> counters, progress, arrived;
    std::vector<exec::TaskId> worker_ring;
    std::vector<exec::Index> worker_head, worker_tail, sched_reserve, sched_head;
    std::vector<exec::SchedEntry> sched_ring;
    std::vector<int32_t> request_words;
    RequestState requests{};
    std::vector<exec::WorkerSlot> workers;
    std::vector<exec::SchedulerSlot> schedulers;
    std::vector<exec::Beat> beats;
    exec::Control control{};     // the executor's (its threads write it)
    int32_t host_abort = 0;      // atomic; the supervisor's request to stop (exec::State::host_abort)
    int32_t host_status = MPK_OK;  // the supervisor's verdict (hang, stuck, interrupted) and its message
    std::string host_message;
    exec::State st{};

    // threads: index < num_workers is worker `index`, the rest scheduler `index - num_workers`
    std::vector<std::thread> threads;
    std::mutex mu;
    std::condition_variable wake, done;
    uint64_t generation = 0;     // a new value starts a launch
    bool shutdown = false;
    int32_t live = 0;            // threads still inside the current launch
    std::vector<char> busy;      // per thread: inside a launch
    int32_t launching = 0;       // atomic; refuses a second concurrent launch
    int32_t interrupt = 0;       // atomic; mpk_abort: the launch in flight stops (cleared at a launch's start)
    int64_t launches = 0;
    int64_t iteration_base = 0;  // passes of earlier successful launches
    double hang_after_s = 0;     // silence measured when the watchdog fired
    double start_s = 0;          // from waking the threads to every block running its loop (last launch)
    int32_t status = MPK_OK;     // of the last launch
    std::string message;

    int32_t num_threads() const { return cfg.num_workers + cfg.num_local_schedulers; }
};

// ---- setup

inline void allocate(Kernel& k) {
    const MpkConfig& c = k.cfg;
    const int32_t W = c.num_workers, S = c.num_local_schedulers;
    for (int32_t t = 1; t < c.num_tasks; ++t)
        if (k.tasks[t].dependent_event < 0) k.first_tasks.push_back(t);
    k.event_waiters.assign(size_t(c.num_events), 0);
    for (int32_t t = 1; t < c.num_tasks; ++t)
        if (k.tasks[t].dependent_event > 0) ++k.event_waiters[size_t(k.tasks[t].dependent_event)];
    const int64_t wcap = exec::worker_ring_capacity(c.num_tasks), scap = exec::scheduler_ring_capacity(c.num_events);
    k.counters.assign(size_t(c.num_events), 0);
    k.progress.assign(size_t(c.num_tasks), 0);
    k.arrived.assign(size_t(c.num_tasks), 0);
    k.worker_ring.assign(size_t(W * wcap), 0);
    k.worker_head.assign(size_t(W), exec::Index{0});
    k.worker_tail.assign(size_t(W), exec::Index{0});
    k.sched_ring.assign(size_t(S * scap), exec::SchedEntry{0, 0});
    k.sched_reserve.assign(size_t(S), exec::Index{0});
    k.sched_head.assign(size_t(S), exec::Index{0});
    k.request_words.assign(size_t(request_words(c)), 0);
    bind_requests(k.requests, k.request_words.data(), c);
    k.workers.assign(size_t(W), exec::WorkerSlot{});
    k.schedulers.assign(size_t(S), exec::SchedulerSlot{});
    k.beats.assign(size_t(W + S), exec::Beat{});
    k.busy.assign(size_t(W + S), 0);

    exec::State& st = k.st;
    st.cfg = c;
    st.cfg.peer_tensor_ptrs = nullptr;  // copied into vectors; the caller's arrays may go away
    st.cfg.peer_signal_ptrs = nullptr;
    st.tasks = k.tasks.data();
    st.events = k.events.data();
    st.tensors = k.tensors.data();
    k.tile_map_at.clear();
    for (const int32_t i : k.tile_maps.slot) k.tile_map_at.push_back(i < 0 ? nullptr : &k.tile_maps.maps[size_t(i)]);
    st.tile_maps = k.tile_map_at.empty() ? nullptr : k.tile_map_at.data();
    st.peer_tensors = k.peer_tensors.empty() ? nullptr : k.peer_tensors.data();
    st.peer_signals = k.peer_signals.empty() ? nullptr : k.peer_signals.data();
    st.first_tasks = k.first_tasks.data();
    st.num_first_tasks = int32_t(k.first_tasks.size());
    st.num_owning = S < W ? S : W;
    st.event_waiters = k.event_waiters.data();
    st.watchdog_ns = c.watchdog_s > 0 ? int64_t(c.watchdog_s * 1e9) : 0;  // the backstop (Spin) behind the supervisor
    st.counters = k.counters.data();
    st.progress = k.progress.data();
    st.arrived = k.arrived.data();
    st.ordered = exec::ordered_mode(c);
    st.worker_ring = k.worker_ring.data();
    st.worker_cap = wcap;
    st.worker_head = k.worker_head.data();
    st.worker_tail = k.worker_tail.data();
    st.sched_ring = k.sched_ring.data();
    st.sched_cap = scap;
    st.sched_reserve = k.sched_reserve.data();
    st.sched_head = k.sched_head.data();
    st.requests = &k.requests;
    st.workers = k.workers.data();
    st.schedulers = k.schedulers.data();
    st.control = &k.control;
    st.host_abort = &k.host_abort;
    st.beats = k.beats.data();
    k.stuck_s = c.stuck_s > 0 ? c.stuck_s : 10 * c.watchdog_s;
}

// Per launch, while no thread runs: counters and progress from 0, empty rings, fresh slots.
inline void reset_launch(Kernel& k) {
    std::fill(k.counters.begin(), k.counters.end(), 0);
    std::fill(k.progress.begin(), k.progress.end(), 0);
    std::fill(k.arrived.begin(), k.arrived.end(), 0);
    for (auto* v : {&k.worker_head, &k.worker_tail, &k.sched_reserve, &k.sched_head})
        for (exec::Index& i : *v) i.v = 0;
    for (exec::SchedEntry& e : k.sched_ring) e = exec::SchedEntry{0, 0};
    for (exec::WorkerSlot& s : k.workers) {
        s = exec::WorkerSlot{};
        s.state = MPK_WORKER_IDLE;
        s.task = -1;
        s.event = s.peer = -1;
    }
    for (exec::SchedulerSlot& s : k.schedulers) s = exec::SchedulerSlot{};
    for (exec::Beat& b : k.beats) b = exec::Beat{};
    k.host_abort = 0;
    k.host_status = MPK_OK;
    k.host_message.clear();
    k.control.abort = 0;
    k.control.status = MPK_OK;
    k.control.iterations = 0;
    k.control.failed_worker = -1;
    k.control.failed_task = -1;
    k.control.failed_iteration = 0;
    k.control.task_failure = TaskFailure{};  // the next task_fail is this launch's first
    k.control.message[0] = 0;
    k.st.iteration_base = k.iteration_base;
    k.st.launch_seed = splitmix64((k.cfg.jitter ? k.cfg.jitter_seed : 0) ^ uint64_t(k.launches) << 32);
    k.hang_after_s = 0;
}

// ---- failures

// The supervisor's verdict: kept on the host (the executor's status has one writer, its own
// threads), and the executor asked to stop: its spin loops see host_abort.
inline void host_fail(Kernel& k, int32_t code, const std::string& why) {
    if (k.host_status == MPK_OK) {
        k.host_status = code;
        k.host_message = why;
    }
    st_release(&k.host_abort, int32_t(1));
}

// A worker's or scheduler's block ended with an exception (a task threw, a SIMT violation).
inline void block_failed(Kernel& k, int32_t index, const char* what) {
    const int32_t W = k.cfg.num_workers;
    char buf[256];
    // The task is the one this worker recorded (note_failed_task: the first failing task of the
    // launch) or, when another worker's failure won that record, the one its slot shows running: two
    // blocks failing at once must both name their task, whichever reports first.
    int64_t task = ld_acquire(&k.control.failed_task), iteration = k.control.failed_iteration;
    if (index < W && (task <= 0 || k.control.failed_worker != index) &&
        ld_relaxed(&k.workers[size_t(index)].state) == MPK_WORKER_RUNNING) {
        task = ld_relaxed(&k.workers[size_t(index)].task);
        iteration = ld_relaxed(&k.workers[size_t(index)].iteration);
    } else if (index < W && k.control.failed_worker != index) {
        task = -1;
    }
    if (index < W && task > 0 && task < k.cfg.num_tasks)
        snprintf(buf, sizeof buf, "task %lld (variant %d, iteration %lld) failed: ", (long long)task,
                 k.tasks[size_t(task)].variant, (long long)iteration);
    else if (index < W)
        snprintf(buf, sizeof buf, "worker %d's block failed: ", index);
    else
        snprintf(buf, sizeof buf, "scheduler %d failed: ", index - W);
    exec::fail(k.st, MPK_INTERNAL).s(buf).s(what);  // the executor's own failure (its thread)
    exec::abort_launch(k.st);
}

// ---- threads

inline void run_block_of(Kernel& k, int32_t index, uint64_t launch) {
    const int32_t W = k.cfg.num_workers;
    const uint64_t seed = splitmix64(uint64_t(index + 1) * 0x9E3779B97F4A7C15ull ^ launch << 40 ^
                                     (k.cfg.jitter ? k.cfg.jitter_seed : 0));
    try {
        if (index < W) {  // task code runs here: faults on guard pages are reported (guard.h)
            const guard::ThreadScope scope(k.guard, &k.workers[size_t(index)].task, -1, index);
            simt::Block block{k.cfg.worker_threads, size_t(k.cfg.smem_bytes), seed};
            block.contend = k.cfg.jitter != 0;  // the tasks' atomics pause (docs/runtime.md, Schedule jitter)
            simt::run_block(block, [&k, index] { k.worker_body(k.st, index); });
        } else {
            simt::run_block(simt::Block{32, 0, seed}, [&k, index, W] {
                if (threadIdx.x == 0) exec::scheduler_loop(k.st, index - W);
            });
        }
    } catch (const std::exception& e) {
        block_failed(k, index, e.what());
    } catch (...) {
        block_failed(k, index, "an exception not derived from std::exception");
    }
}

inline void thread_main(Kernel* kp, int32_t index) {
    Kernel& k = *kp;
    uint64_t seen = 0;
    for (;;) {
        uint64_t launch;
        {
            std::unique_lock<std::mutex> lock(k.mu);
            k.wake.wait(lock, [&] { return k.shutdown || k.generation != seen; });
            if (k.shutdown) return;
            seen = k.generation;
            launch = uint64_t(k.launches);
        }
        run_block_of(k, index, launch);
        {
            std::lock_guard<std::mutex> lock(k.mu);
            k.busy[size_t(index)] = 0;
            --k.live;
        }
        k.done.notify_all();
    }
}

// ---- messages composed after a launch

// The silence, the events of the running pass that never fired although tasks wait on them, and
// the workers waiting on a peer rank or an event (runtime.py composes its own report for Python).
inline std::string hang_message(const Kernel& k) {
    char buf[320];
    snprintf(buf, sizeof buf, "watchdog: no task finished and no task ran for %.2f s (watchdog_s = %g)",
             k.hang_after_s, k.cfg.watchdog_s);
    std::string msg = k.hang_after_s > 0 ? buf : k.control.message;  // else the in-kernel backstop's (Spin)
    const int64_t pass = k.control.iterations + 1;
    int shown = 0;
    for (int32_t e = 1; e + 1 < k.cfg.num_events; ++e) {
        const MpkEvent& ev = k.events[size_t(e)];
        const int64_t counter = ld_relaxed(&k.counters[size_t(e)]), needed = int64_t(ev.num_triggers) * pass;
        if (k.event_waiters[size_t(e)] == 0 || counter >= needed) continue;
        if (shown++ == 4) {
            msg += "; ...";
            break;
        }
        snprintf(buf, sizeof buf, "; event %d of pass %lld never fired (counter %lld, needs %lld): tasks %d..%d not "
                 "started", e, (long long)pass, (long long)counter, (long long)needed, ev.first_task_id,
                 ev.last_task_id - 1);
        msg += buf;
    }
    for (size_t w = 0; w < k.workers.size(); ++w) {
        const exec::WorkerSlot& s = k.workers[w];
        if (ld_relaxed(&s.state) != MPK_WORKER_WAITING) continue;
        if (s.peer >= 0)
            snprintf(buf, sizeof buf, "; worker %zu at task %lld (iteration %lld) waits for rank %d (%s): counter %lld, "
                     "needs %lld", w, (long long)s.task, (long long)s.iteration, s.peer,
                     s.peer_wait == MPK_PEER_CONSUMED ? "to read the slot's previous use" : "its signal",
                     (long long)s.counter, (long long)s.needed);
        else
            snprintf(buf, sizeof buf, "; worker %zu waits at task %lld (iteration %lld) on event %d: counter %lld, needs "
                     "%lld", w, (long long)s.task, (long long)s.iteration, s.event, (long long)s.counter,
                     (long long)s.needed);
        msg += buf;
    }
    return msg;
}

// An interrupted launch: the pass, how far it got and, if a worker is still inside its kernel,
// which one (it cannot be stopped; the handle refuses launches until it returns).
inline std::string interrupted_message(const Kernel& k, int32_t left_inside) {
    const int64_t pass = k.control.iterations + 1;
    int64_t done = 0;
    for (size_t t = 1; t < k.progress.size(); ++t) done += ld_relaxed(&k.progress[t]) >= pass;
    char buf[384];
    snprintf(buf, sizeof buf, "interrupted (mpk_abort) during pass %lld after %lld of %d tasks; the workers stopped "
             "between tasks", (long long)pass, (long long)done, k.cfg.num_tasks - 1);
    std::string msg = buf;
    for (int32_t w = 0; w < k.cfg.num_workers && left_inside > 0; ++w) {
        const exec::WorkerSlot& s = k.workers[size_t(w)];
        if (!k.busy[size_t(w)] || ld_relaxed(&s.state) != MPK_WORKER_RUNNING) continue;
        snprintf(buf, sizeof buf, "; task %lld (iteration %lld) is still inside its kernel on worker %d and cannot "
                 "be stopped", (long long)ld_relaxed(&s.task), (long long)ld_relaxed(&s.iteration), w);
        msg += buf;
    }
    return msg;
}

// ---- launch

// How long an interrupted launch waits for a worker to leave its kernel before it returns
// without it (a kernel cannot be stopped; a Ctrl-C must give control back within about 1 s).
constexpr double kInterruptGraceS = 1.0;

// After the abort flag is set: waits up to `grace_s` for every thread, then up to 2 s for all but
// those inside a kernel (the others leave within about 1 ms; a kernel cannot be stopped).
// Returns the number of threads still inside the launch.
inline int32_t await_return(Kernel& k, double grace_s) {
    std::unique_lock<std::mutex> lock(k.mu);
    k.done.wait_for(lock, std::chrono::duration<double>(grace_s), [&] { return k.live == 0; });
    k.done.wait_for(lock, std::chrono::seconds(2), [&] {
        int32_t inside_kernel = 0;
        for (int32_t w = 0; w < k.cfg.num_workers; ++w)
            inside_kernel += k.busy[size_t(w)] && ld_relaxed(&k.workers[size_t(w)].state) == MPK_WORKER_RUNNING;
        return k.live <= inside_kernel;
    });
    return k.live;
}

// Waits for the launch's threads with the watchdog, the stuck check and mpk_abort (above).
// Returns the number of threads left inside the launch (workers inside a kernel).
inline int32_t supervise(Kernel& k) {
    using clock = std::chrono::steady_clock;
    const double limit = k.cfg.watchdog_s, stuck = k.stuck_s;
    double poll_s = limit > 0 ? limit / 10 : 0.01;
    poll_s = poll_s < 0.001 ? 0.001 : poll_s > 0.01 ? 0.01 : poll_s;
    const auto poll = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(poll_s));
    const int32_t W = k.cfg.num_workers;
    clock::time_point last = clock::now();
    int64_t seen = -1;
    std::vector<int64_t> started(size_t(W), -1);
    std::vector<clock::time_point> since(size_t(W), last);
    const clock::time_point t0 = last;
    bool hang_checked = limit > 0, all_arrived = false;
    k.start_s = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(k.mu);
            if (k.done.wait_for(lock, poll, [&] { return k.live == 0; })) return 0;
        }
        if (ld_acquire(&k.interrupt)) {
            host_fail(k, MPK_INTERRUPTED, "");  // the message is composed after the threads are back
            return await_return(k, kInterruptGraceS);
        }
        if (limit <= 0 && stuck <= 0) continue;
        const clock::time_point now = clock::now();
        bool running = false;
        const int64_t ticks = exec::progress_ticks(k.st, &running);
        if (!all_arrived) {
            all_arrived = true;
            for (const exec::WorkerSlot& s : k.workers) all_arrived = all_arrived && ld_relaxed(&s.arrived);
            for (const exec::SchedulerSlot& s : k.schedulers) all_arrived = all_arrived && ld_relaxed(&s.arrived);
            if (all_arrived) k.start_s = std::chrono::duration<double>(now - t0).count();
        }
        if (ticks != seen || running) {
            seen = ticks;
            last = now;
        } else if (hang_checked && std::chrono::duration<double>(now - last).count() >= limit) {
            hang_checked = false;  // once: the threads now leave within about 1 ms
            k.hang_after_s = std::chrono::duration<double>(now - last).count();
            host_fail(k, MPK_HANG, "");  // the message is composed after the threads are back
        }
        for (int32_t w = 0; w < W && stuck > 0; ++w) {
            const exec::WorkerSlot& s = k.workers[size_t(w)];
            const int64_t n = ld_relaxed(&s.started);
            if (ld_relaxed(&s.state) != MPK_WORKER_RUNNING || n != started[size_t(w)]) {
                started[size_t(w)] = n;
                since[size_t(w)] = now;
                continue;
            }
            const double inside = std::chrono::duration<double>(now - since[size_t(w)]).count();
            if (inside < stuck) continue;
            char buf[512];
            snprintf(buf, sizeof buf, "task %lld (iteration %lld) has been inside its kernel on worker %d for %.2f s "
                     "(stuck_s = %g; default 10 x watchdog_s): stuck. The worker cannot be stopped; finalize() the "
                     "kernel", (long long)ld_relaxed(&s.task), (long long)ld_relaxed(&s.iteration), w, inside, stuck);
            host_fail(k, MPK_STUCK, buf);
            return await_return(k, 0);
        }
    }
}

inline bool start_threads(Kernel& k) {
    if (!k.threads.empty()) return true;
    try {
        for (int32_t i = 0; i < k.num_threads(); ++i) k.threads.emplace_back(thread_main, &k, i);
        return true;
    } catch (const std::exception& e) {
        {
            std::lock_guard<std::mutex> lock(k.mu);
            k.shutdown = true;
        }
        k.wake.notify_all();
        for (std::thread& t : k.threads) t.join();
        k.threads.clear();
        k.shutdown = false;
        k.status = MPK_INTERNAL;
        k.message = std::string("cannot start the executor's threads: ") + e.what();
        return false;
    }
}

inline int32_t launch(Kernel& k) {
    {
        std::lock_guard<std::mutex> lock(k.mu);
        if (k.live > 0) {  // a worker of an earlier launch is still inside a kernel (MPK_STUCK)
            int32_t w = 0;
            while (w < k.cfg.num_workers && !k.busy[size_t(w)]) ++w;
            char buf[256];
            snprintf(buf, sizeof buf, "worker %d is still inside task %lld of an earlier launch (stuck); finalize() "
                     "the kernel", w, w < k.cfg.num_workers ? (long long)ld_relaxed(&k.workers[size_t(w)].task) : -1LL);
            k.status = MPK_INVALID;
            k.message = buf;
            return k.status;
        }
    }
    if (!start_threads(k)) return k.status;
    if (k.guard.num_ranges > 0 && !guard::install()) {
        k.status = MPK_INTERNAL;
        k.message = "cannot install the guard-page handler (sigaction failed)";
        return k.status;
    }
    reset_launch(k);
    st_release(&k.interrupt, int32_t(0));  // an mpk_abort from now on stops this launch
    {
        std::lock_guard<std::mutex> lock(k.mu);
        k.live = k.num_threads();
        for (char& b : k.busy) b = 1;
        ++k.generation;
    }
    k.wake.notify_all();
    const int32_t left = supervise(k);
    ++k.launches;
    k.status = ld_acquire(&k.control.status);  // the executor's failure, if any, came first
    k.message = k.control.message;
    if (k.status == MPK_OK && k.host_status != MPK_OK) {
        k.status = k.host_status;
        k.message = k.host_message;
    }
    if (k.status == MPK_HANG) k.message = hang_message(k);
    if (k.status == MPK_INTERRUPTED) k.message = interrupted_message(k, left);
    if (k.status == MPK_OK) k.iteration_base += ld_relaxed(&k.control.iterations);
    return k.status;
}

// Ends the threads. A thread still inside a kernel (MPK_STUCK) cannot be joined: then every
// thread is detached and the handle is left allocated (that thread still reads it); returns
// whether the handle may be freed.
inline bool stop_threads(Kernel& k) {
    bool stuck;
    {
        std::lock_guard<std::mutex> lock(k.mu);
        k.shutdown = true;
        stuck = k.live > 0;
    }
    k.wake.notify_all();
    for (size_t i = 0; i < k.threads.size(); ++i) {
        if (stuck) k.threads[i].detach();
        else k.threads[i].join();
    }
    k.threads.clear();
    return !stuck;
}

inline void fill_snapshot(const Kernel& k, MpkWorkerState* out, int n) {
    for (int32_t w = 0; w < k.cfg.num_workers && w < n; ++w) {
        const exec::WorkerSlot& s = k.workers[size_t(w)];
        MpkWorkerState& o = out[w];
        o.worker = w;
        o.state = ld_relaxed(&s.state);
        o.task = ld_relaxed(&s.task);
        o.iteration = ld_relaxed(&s.iteration);
        o.event = ld_relaxed(&s.event);
        o.peer = ld_relaxed(&s.peer);
        o.counter = ld_relaxed(&s.counter);
        o.needed = ld_relaxed(&s.needed);
        o.peer_wait = o.peer >= 0 ? ld_relaxed(&s.peer_wait) : 0;
        o.pad = 0;
    }
}

}  // namespace host
}  // namespace mpk
