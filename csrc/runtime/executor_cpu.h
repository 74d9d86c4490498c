// executor_cpu.h: the CPU executor of the persistent-kernel protocol (docs/runtime.md).
//
// Threads: num_workers workers + num_local_schedulers schedulers, created per launch; the
// thread that called mpk_launch supervises (watchdog) and joins them.
//
// Ownership: worker w belongs to scheduler w % num_local_schedulers (a scheduler that owns
// no worker still takes part). Scheduler 0 receives END_OF_TASK_GRAPH, runs
// prepare_next_batch and sends every other scheduler "dispatch iteration i" or TERMINATE;
// each scheduler then pushes to its own workers only.
//
// Dispatch: tasks 1..num_tasks-1 and the END pseudo task (position num_tasks) go to worker
// queues in ascending id order, round-robin ((position - 1) % num_workers) or, with jitter,
// to a seeded random worker. Every queue stays ascending, so the lowest unfinished task
// has its producers done and sits at the head of its queue: progress is guaranteed.
//
// Queues: single-producer/single-consumer rings of task ids. A full ring blocks its
// producer, which is safe: a scheduler blocked at position p only waits on a queue that
// holds ids below p, and the lowest unfinished task is never behind an unfinished one.
// Capacity is a speed choice (2 x tasks per worker + 4); tests shrink it with
// -DMPK_QUEUE_CAPACITY_LIMIT=2 to exercise the blocking path.
#pragma once
#include <chrono>
#include <exception>
#include <mutex>
#include <stdio.h>
#include <string>
#include <thread>
#include <vector>
#include "abi.h"
#include "atomics.h"
#include "meta.h"
#include "random.h"
#include "task_view.h"

namespace mpk {

// Host storage behind RequestState (meta.h): the words and the state pointing into them.
struct RequestStorage {
    std::vector<int32_t> words;
    RequestState state{};
    void allocate(const MpkConfig& cfg) {
        words.assign(size_t(request_words(cfg)), 0);
        bind_requests(state, words.data(), cfg);
    }
};

// ---- task ids: (iteration << 32) | position; position 0 is TERMINATE

using TaskId = uint64_t;
inline TaskId make_task_id(int64_t iteration, int32_t position) {
    return (uint64_t(iteration) << 32) | uint32_t(position);
}
inline int64_t task_iteration(TaskId id) { return int64_t(id >> 32); }
inline int32_t task_position(TaskId id) { return int32_t(id & 0xffffffffu); }
constexpr TaskId kTerminate = 0;

// ---- waiting: spin briefly, then yield, then sleep in growing steps (cap 1 ms), so many
// threads of several processes on 2 cores still make progress. Callers check abort.

constexpr int kSpinRounds = 64;
constexpr int kYieldRounds = 16;
constexpr int kFirstSleepUs = 4;
constexpr int kMaxSleepUs = 1000;

class Backoff {
public:
    void wait() {
        if (round_ < kSpinRounds) {
            cpu_relax();
        } else if (round_ < kSpinRounds + kYieldRounds) {
            std::this_thread::yield();
        } else {
            std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
            sleep_us_ = sleep_us_ * 2 < kMaxSleepUs ? sleep_us_ * 2 : kMaxSleepUs;
        }
        ++round_;
    }

private:
    int round_ = 0;
    int sleep_us_ = kFirstSleepUs;
};

// ---- queues

class TaskQueue {
public:
    void reset(int64_t capacity) {  // capacity: a power of two; only while no thread runs
        buf_.assign(size_t(capacity), 0);
        mask_ = capacity - 1;
        st_relaxed(&head_, int64_t(0));
        st_relaxed(&tail_, int64_t(0));
    }
    // Blocks while full. False when the launch aborts. One producer at a time: a queue
    // whose producer changes (scheduler 0's END queue) is handed over through the protocol.
    bool push(TaskId id, const int32_t* abort) {
        const int64_t t = ld_acquire(&tail_);
        Backoff backoff;
        while (t - ld_acquire(&head_) > mask_) {
            if (ld_relaxed(abort)) return false;
            backoff.wait();
        }
        buf_[size_t(t & mask_)] = id;
        st_release(&tail_, t + 1);
        return true;
    }
    // Blocks while empty. False when the launch aborts.
    bool pop(TaskId* id, const int32_t* abort) {
        const int64_t h = ld_relaxed(&head_);
        Backoff backoff;
        while (ld_acquire(&tail_) == h) {
            if (ld_relaxed(abort)) return false;
            backoff.wait();
        }
        *id = buf_[size_t(h & mask_)];
        st_release(&head_, h + 1);
        return true;
    }

private:
    alignas(64) int64_t head_ = 0;  // next id to pop; written by the consumer
    alignas(64) int64_t tail_ = 0;  // next free slot; written by the producer
    alignas(64) std::vector<TaskId> buf_;
    int64_t mask_ = 0;
};

inline int64_t worker_queue_capacity(int32_t num_tasks, int32_t num_workers) {
    int64_t want = 2 * ((int64_t(num_tasks) + num_workers - 1) / num_workers) + 4;
#ifdef MPK_QUEUE_CAPACITY_LIMIT
    if (want > MPK_QUEUE_CAPACITY_LIMIT) want = MPK_QUEUE_CAPACITY_LIMIT;
#endif
    int64_t cap = 2;
    while (cap < want) cap <<= 1;
    return cap;
}

// ---- jitter: a counter-based hash for assignments, a per-worker xorshift for delays


inline uint64_t xorshift64(uint64_t* s) {
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

// Same answer in every scheduler, so each can pick out its own workers' ids.
inline int32_t assign_worker(const MpkConfig& cfg, int64_t iteration, int32_t position) {
    if (!cfg.jitter) return (position - 1) % cfg.num_workers;
    const uint64_t h = splitmix64(cfg.jitter_seed ^ splitmix64(make_task_id(iteration, position)));
    return int32_t(h % uint64_t(cfg.num_workers));
}

// ---- the handle: everything a kernel owns (no global state)

struct WorkerSlot {
    alignas(64) int32_t state = MPK_WORKER_IDLE;  // atomic: the watchdog reads it live
    // The rest is written by the worker only and read after the join.
    int32_t event = -1, peer = -1, peer_wait = 0;  // peer >= 0: a cross-rank wait (wait_peer)
    int64_t task = -1, iteration = 0, counter = 0, needed = 0;
    uint64_t rng = 0;  // jitter delays
};

struct Kernel {
    // copied at mpk_init
    MpkConfig cfg{};
    std::vector<MpkTask> tasks;    // [num_tasks]
    std::vector<MpkEvent> events;  // [num_events]
    std::vector<void*> tensors;    // [num_tensors]
    MpkMeta meta{};
    RequestStorage requests;
    std::vector<void*> peer_tensors;     // [world_size * num_tensors], or empty
    std::vector<int64_t*> peer_signals;  // [world_size], or empty
    int64_t iteration_base = 0;          // passes of earlier successful launches (signals only grow)

    // per launch (reset_launch)
    std::vector<int64_t> counters;            // [num_events], only grow
    std::vector<int64_t> progress;            // [num_tasks], last iteration completed
    std::vector<TaskQueue> worker_queues;     // [num_workers]
    std::vector<TaskQueue> scheduler_queues;  // [num_local_schedulers]
    std::vector<WorkerSlot> workers;          // [num_workers]
    int32_t abort = 0;         // atomic; every wait loop checks it
    int32_t live_threads = 0;  // atomic; the supervisor polls until 0
    int64_t ticks = 0;         // atomic; tasks completed + scheduler messages handled
    int64_t iterations = 0;    // written by scheduler 0, read after the join
    int32_t launching = 0;     // atomic; refuses a second concurrent launch
    double hang_after_s = 0;   // silence measured when the watchdog fired

    std::mutex error_mutex;    // guards status and message
    int32_t status = MPK_OK;
    std::string message;

    int32_t end_event() const { return cfg.num_events - 1; }
    int32_t end_position() const { return cfg.num_tasks; }

    // The first failure of a launch wins.
    void fail(int32_t code, const std::string& why) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (status == MPK_OK) {
            status = code;
            message = why;
        }
    }
    void fail_and_abort(int32_t code, const std::string& why) {
        fail(code, why);
        st_release(&abort, int32_t(1));
    }
};

inline void reset_launch(Kernel& k) {
    const MpkConfig& c = k.cfg;
    k.counters.assign(size_t(c.num_events), 0);
    k.progress.assign(size_t(c.num_tasks), 0);
    k.worker_queues = std::vector<TaskQueue>(size_t(c.num_workers));
    for (TaskQueue& q : k.worker_queues) q.reset(worker_queue_capacity(c.num_tasks, c.num_workers));
    k.scheduler_queues = std::vector<TaskQueue>(size_t(c.num_local_schedulers));
    for (TaskQueue& q : k.scheduler_queues) q.reset(4);  // one message in flight + TERMINATE
    k.workers = std::vector<WorkerSlot>(size_t(c.num_workers));
    for (int32_t w = 0; w < c.num_workers; ++w)
        k.workers[w].rng = splitmix64(c.jitter_seed + 0x51ed27u * uint64_t(w + 1)) | 1;
    st_relaxed(&k.abort, int32_t(0));
    st_relaxed(&k.live_threads, int32_t(0));
    st_relaxed(&k.ticks, int64_t(0));
    k.iterations = 0;
    k.hang_after_s = 0;
    k.status = MPK_OK;
    k.message.clear();
}

// ---- worker

// Waits until counter[ev] >= num_triggers[ev] * iteration. False when aborted.
inline bool wait_event(Kernel& k, WorkerSlot& me, int32_t ev, int64_t iteration) {
    const int64_t needed = int64_t(k.events[ev].num_triggers) * iteration;
    me.event = ev;
    me.needed = needed;
    int64_t seen = ld_acquire(&k.counters[ev]);
    if (seen < needed) {
        st_relaxed(&me.state, int32_t(MPK_WORKER_WAITING));
        Backoff backoff;
        while ((seen = ld_acquire(&k.counters[ev])) < needed) {
            if (ld_relaxed(&k.abort)) {
                me.counter = seen;
                return false;
            }
            backoff.wait();
        }
    }
    me.counter = seen;
    return true;
}

// 0..200 us before half of the tasks: widens the windows in which a missing dependency shows.
inline void jitter_delay(WorkerSlot& me) {
    const uint64_t r = xorshift64(&me.rng);
    if (r & 1) return;
    std::this_thread::sleep_for(std::chrono::microseconds((r >> 8) % 200));
}

// ---- cross-rank waits and signals (TaskView::wait / ::signal), for layers like allreduce

struct TaskContext {  // what wait_peer / signal_peer need, per running task
    Kernel* kernel;
    WorkerSlot* worker;
    int32_t fault;
};

// Like wait_event, but on a counter in node-shared memory that a peer rank writes. The worker
// shows as WAITING (not RUNNING), so a stalled peer reads as no progress to the watchdog.
inline bool wait_peer(const TaskView& v, const int64_t* counter, int64_t needed, int32_t peer, int32_t what) {
    const TaskContext& c = *static_cast<const TaskContext*>(v.executor);
    WorkerSlot& me = *c.worker;
    int64_t seen = ld_acquire(counter);
    if (seen >= needed) return true;
    me.event = -1;
    me.peer = peer;
    me.peer_wait = what;
    me.needed = needed;
    st_relaxed(&me.state, int32_t(MPK_WORKER_WAITING));
    Backoff backoff;
    while ((seen = ld_acquire(counter)) < needed) {
        if (ld_relaxed(&c.kernel->abort)) {
            me.counter = seen;
            return false;
        }
        backoff.wait();
    }
    me.counter = seen;
    me.peer = -1;
    st_relaxed(&me.state, int32_t(MPK_WORKER_RUNNING));
    return true;
}

inline void signal_peer(const TaskView& v, int64_t* counter, int64_t value, int32_t peer) {
#ifdef MPK_FAULT_INJECTION
    const TaskContext& c = *static_cast<const TaskContext*>(v.executor);
    if (c.fault == MPK_FAULT_NO_SIGNAL && peer != v.rank) return;  // a stalled rank: only itself hears it
#else
    (void)v;
    (void)peer;
#endif
    st_release(counter, value);
}

template <class Exec> bool run_task(Kernel& k, WorkerSlot& me, int32_t pos, int64_t iteration, Exec& exec) {
    const MpkTask& t = k.tasks[pos];
#ifdef MPK_FAULT_INJECTION
    const int32_t fault = pos == k.cfg.fault_task ? k.cfg.fault_kind : MPK_FAULT_NONE;
#else
    const int32_t fault = MPK_FAULT_NONE;
#endif
    TaskContext context{&k, &me, fault};
    TaskView view{};
    view.task = &t;
    view.meta = &k.meta;
    for (int32_t i = 0; i < t.num_inputs + t.num_outputs; ++i)
        view.ptrs[i] = static_cast<char*>(k.tensors[t.tiles[i].tensor]) + t.tiles[i].offset;
    view.iteration = k.iteration_base + iteration;
    view.rank = k.cfg.mpi_rank;
    view.world_size = k.cfg.world_size;
    view.num_tensors = k.cfg.num_tensors;
    view.peer_tensors = k.peer_tensors.empty() ? nullptr : k.peer_tensors.data();
    view.peer_signals = k.peer_signals.empty() ? nullptr : k.peer_signals.data();
    view.wait = wait_peer;
    view.signal = signal_peer;
    view.executor = &context;
    view.block_threads = k.cfg.worker_threads;
    view.smem_bytes = k.cfg.smem_bytes;
    // The emulated block's thread order: a function of the task and the pass, and of the jitter
    // seed when jitter is on (so a missing barrier shows across seeds); fixed otherwise.
    view.simt_seed = splitmix64(uint64_t(pos) * 0x9E3779B97F4A7C15ull ^ uint64_t(view.iteration) << 40 ^
                                (k.cfg.jitter ? k.cfg.jitter_seed : 0));
    try {
        // exec returns false for a variant the generated dispatcher lacks: the task table and the
        // module come from different graphs. Running nothing there would pass silently.
        if (fault != MPK_FAULT_SKIP && !exec(view)) {
            k.fail_and_abort(MPK_INVALID, "task " + std::to_string(pos) + " has variant " + std::to_string(t.variant) +
                                              ", which this module's dispatcher does not have (task table and "
                                              "module from different graphs?)");
            return false;
        }
#ifdef MPK_FAULT_INJECTION
        if (fault == MPK_FAULT_PERTURB) MPK_PERTURB_OUTPUT(view, k.cfg.fault_element, k.cfg.fault_amount);
#endif
    } catch (const std::exception& e) {
        k.fail_and_abort(MPK_INTERNAL, "task " + std::to_string(pos) + " (variant " + std::to_string(t.variant) +
                                           ", iteration " + std::to_string(iteration) + ") threw: " + e.what());
        return false;
    } catch (...) {
        k.fail_and_abort(MPK_INTERNAL, "task " + std::to_string(pos) + " (variant " + std::to_string(t.variant) +
                                           ", iteration " + std::to_string(iteration) + ") threw a non-std exception");
        return false;
    }
    if (ld_relaxed(&k.abort)) return false;  // e.g. a peer wait gave up: the kernel did not finish
    if (fault != MPK_FAULT_NO_TRIGGER)
        for (int32_t j = 0; j < t.num_triggers; ++j) atomic_add_release(&k.counters[t.trigger_events[j]], int64_t(1));
    st_release(&k.progress[pos], iteration);
    return true;
}

template <class Exec> void worker_loop(Kernel& k, int32_t w, Exec& exec) {
    WorkerSlot& me = k.workers[w];
    TaskQueue& queue = k.worker_queues[w];
    for (;;) {
        me.task = -1;
        me.event = -1;
        me.peer = -1;
        st_relaxed(&me.state, int32_t(MPK_WORKER_IDLE));
        TaskId id;
        if (!queue.pop(&id, &k.abort)) return;
        const int32_t pos = task_position(id);
        const int64_t iteration = task_iteration(id);
        if (pos == 0) {
            st_relaxed(&me.state, int32_t(MPK_WORKER_DONE));
            return;
        }
        me.task = pos;
        me.iteration = iteration;
        const bool is_end = pos == k.end_position();
        const int32_t ev = is_end ? k.end_event() : k.tasks[pos].dependent_event;
        if (ev >= 0 && !wait_event(k, me, ev, iteration)) return;
        if (is_end) {  // the pass is over: hand it to scheduler 0
            if (!k.scheduler_queues[0].push(id, &k.abort)) return;
        } else {
            st_relaxed(&me.state, int32_t(MPK_WORKER_RUNNING));  // heartbeat for the watchdog
            if (k.cfg.jitter) jitter_delay(me);
            if (!run_task(k, me, pos, iteration, exec)) return;
        }
        atomic_add_relaxed(&k.ticks, int64_t(1));
    }
}

// ---- scheduler

inline bool dispatch(Kernel& k, int32_t s, int64_t iteration) {
    for (int32_t pos = 1; pos <= k.end_position(); ++pos) {
        const int32_t w = assign_worker(k.cfg, iteration, pos);
        if (w % k.cfg.num_local_schedulers != s) continue;
        if (!k.worker_queues[w].push(make_task_id(iteration, pos), &k.abort)) return false;
    }
    return true;
}

inline void terminate_workers(Kernel& k, int32_t s) {
    for (int32_t w = s; w < k.cfg.num_workers; w += k.cfg.num_local_schedulers)
        if (!k.worker_queues[w].push(kTerminate, &k.abort)) return;
}

// Scheduler 0, on END_OF_TASK_GRAPH of `iteration`: whether to run another pass.
inline bool end_of_task_graph(Kernel& k, int64_t iteration) {
    k.iterations = iteration;
    RequestState& st = k.requests.state;
    const bool more = prepare_next_batch(st, k.meta, k.cfg);
    if (st.status != MPK_OK) {
        k.fail(st.status, st.message);
        return false;
    }
    if (iteration == 0 && !more) {
        char why[1024];
        describe_nothing_scheduled(k.meta, k.cfg, why, int32_t(sizeof why));
        k.fail(MPK_NOTHING_SCHEDULED, why);
    }
    return more;
}

// Messages: scheduler 0's queue carries END_OF_TASK_GRAPH ids; another scheduler's queue
// carries make_task_id(i, 1) = "dispatch iteration i", or kTerminate.
inline void scheduler_loop(Kernel& k, int32_t s) {
    const int32_t num_schedulers = k.cfg.num_local_schedulers;
    for (;;) {
        TaskId msg;
        if (!k.scheduler_queues[s].pop(&msg, &k.abort)) return;
        atomic_add_relaxed(&k.ticks, int64_t(1));
        const int64_t iteration = task_iteration(msg);
        if (task_position(msg) == 0) {
            terminate_workers(k, s);
            return;
        }
        if (s != 0) {
            if (!dispatch(k, s, iteration)) return;
            continue;
        }
        const bool more = end_of_task_graph(k, iteration);
        for (int32_t o = 1; o < num_schedulers; ++o)
            if (!k.scheduler_queues[o].push(more ? make_task_id(iteration + 1, 1) : kTerminate, &k.abort)) return;
        if (!more) {
            terminate_workers(k, 0);
            return;
        }
        if (!dispatch(k, 0, iteration + 1)) return;
    }
}

// ---- launch

// Polls until every thread has exited. Progress = ticks moved or a worker RUNNING; after
// watchdog_s of neither, sets abort (every wait loop returns within ~1 ms).
inline void supervise(Kernel& k) {
    using clock = std::chrono::steady_clock;
    const double limit = k.cfg.watchdog_s;
    double poll_s = limit > 0 ? limit / 10 : 0.01;
    poll_s = poll_s < 0.001 ? 0.001 : poll_s > 0.01 ? 0.01 : poll_s;
    clock::time_point last = clock::now();
    int64_t seen = ld_relaxed(&k.ticks);
    while (ld_acquire(&k.live_threads) > 0) {
        std::this_thread::sleep_for(std::chrono::duration<double>(poll_s));
        if (limit <= 0) continue;
        const int64_t ticks = ld_relaxed(&k.ticks);
        bool running = false;
        for (WorkerSlot& slot : k.workers) running |= ld_relaxed(&slot.state) == MPK_WORKER_RUNNING;
        const clock::time_point now = clock::now();
        if (ticks != seen || running) {
            seen = ticks;
            last = now;
            continue;
        }
        const double silent = std::chrono::duration<double>(now - last).count();
        if (silent >= limit) {
            k.hang_after_s = silent;
            k.fail_and_abort(MPK_HANG, "");  // message composed after the join
            return;
        }
    }
}

// After the join: name the waiting workers (Python maps positions to layers).
inline std::string hang_message(const Kernel& k) {
    char buf[256];
    snprintf(buf, sizeof buf, "watchdog: no task finished and no task ran for %.2f s (watchdog_s = %g)",
             k.hang_after_s, k.cfg.watchdog_s);
    std::string msg = buf;
    int shown = 0;
    for (size_t w = 0; w < k.workers.size(); ++w) {
        const WorkerSlot& s = k.workers[w];
        if (s.state != MPK_WORKER_WAITING) continue;
        if (shown++ == 4) {
            msg += "; ...";
            break;
        }
        if (s.peer >= 0) {
            snprintf(buf, sizeof buf, "; worker %zu at task %lld (iteration %lld) waits for rank %d (%s): counter %lld, "
                     "needs %lld", w, (long long)s.task, (long long)s.iteration, s.peer,
                     s.peer_wait == MPK_PEER_CONSUMED ? "to read the slot's previous use" : "its signal",
                     (long long)s.counter, (long long)s.needed);
            msg += buf;
            continue;
        }
        snprintf(buf, sizeof buf, "; worker %zu waits at task %lld (iteration %lld) on event %d: counter %lld, needs %lld",
                 w, (long long)s.task, (long long)s.iteration, s.event, (long long)s.counter, (long long)s.needed);
        msg += buf;
    }
    return msg;
}

template <class Exec> void guarded(Kernel& k, const char* who, Exec body) {
    try {
        body();
    } catch (const std::exception& e) {
        k.fail_and_abort(MPK_INTERNAL, std::string(who) + ": " + e.what());
    } catch (...) {
        k.fail_and_abort(MPK_INTERNAL, std::string(who) + ": unknown exception");
    }
    atomic_add_release(&k.live_threads, int32_t(-1));
}

// Runs init_kernel, seeds END_OF_TASK_GRAPH of iteration 0, runs the protocol, joins.
template <class Exec> int32_t launch(Kernel& k, Exec exec) {
    reset_launch(k);
    RequestState& st = k.requests.state;
    if (init_kernel(st, k.meta, k.cfg) != MPK_OK) {
        k.fail(st.status, st.message);
        return k.status;
    }
    k.scheduler_queues[0].push(make_task_id(0, k.end_position()), &k.abort);
    std::vector<std::thread> threads;
    auto start = [&](auto body, const char* who) {
        atomic_add_release(&k.live_threads, int32_t(1));
        try {
            threads.emplace_back([&k, body, who] { guarded(k, who, body); });
        } catch (const std::exception& e) {
            atomic_add_release(&k.live_threads, int32_t(-1));
            k.fail_and_abort(MPK_INTERNAL, std::string("cannot start a thread: ") + e.what());
        }
    };
    for (int32_t s = 0; s < k.cfg.num_local_schedulers; ++s) start([&k, s] { scheduler_loop(k, s); }, "scheduler");
    for (int32_t w = 0; w < k.cfg.num_workers; ++w) start([&k, w, &exec] { worker_loop(k, w, exec); }, "worker");
    supervise(k);
    for (std::thread& t : threads) t.join();
    if (k.status == MPK_HANG) k.message = hang_message(k);
    if (k.status == MPK_OK) k.iteration_base += k.iterations;
    return k.status;
}

inline void fill_snapshot(const Kernel& k, MpkWorkerState* out, int n) {
    for (int32_t w = 0; w < int32_t(k.workers.size()) && w < n; ++w) {
        const WorkerSlot& s = k.workers[w];
        MpkWorkerState& o = out[w];
        o.worker = w;
        o.state = s.state;
        o.task = s.task;
        o.iteration = s.iteration;
        o.event = s.event;
        o.peer = s.peer;
        o.counter = s.counter;
        o.needed = s.needed;
        o.peer_wait = s.peer >= 0 ? s.peer_wait : 0;
        o.pad = 0;
    }
}

}  // namespace mpk
