// executor.cuh: the persistent executor, ONE source for both backends (docs/runtime.md).
//
// The worker loop and the scheduler loop are CUDA device code over atomics.h. nvcc builds them
// into the persistent kernel (host_cuda.h: worker CTAs + scheduler warps, all co-resident); the
// host compiler builds the very same code through the SIMT emulation (simt_cpu.h, docs/simt.md),
// where host_cpu.h runs each worker block and each scheduler warp on its own OS thread.
//
// The protocol, in the event dispatch model (the default; MPK's pre-launch model, dispatch="mpk",
// differs where the dispatch units below say):
//   - every launch starts with scheduler 0 running init_kernel and END_OF_TASK_GRAPH of pass 0
//     (prepare_next_batch, meta.h); pass i >= 1 starts with a START message to the schedulers,
//     which enqueue the tasks that wait on nothing (the "first tasks") to their workers (with
//     dispatch="mpk": every task of the pass);
//   - a worker block: thread 0 takes ready task ids from its ring (a batch of up to kBatch, each
//     one's event checked), the block runs them one by one (all threads run the task kernel), and
//     after each, thread 0 adds 1 to every event the task triggers; the add that completes an
//     event (counter == num_triggers * pass) sends the event to the schedulers that own a worker
//     of one of its waiting tasks, which enqueue those tasks [first_task_id, last_task_id);
//     END_OF_TASK_GRAPH goes to scheduler 0, which runs prepare_next_batch and starts pass i + 1
//     or terminates (in test mode after exactly one pass);
//   - rings: one single-producer ring of task ids per worker (its scheduler writes it) and one
//     multi-producer ring of messages per scheduler, both published with release / acquire;
//     capacities come from the graph, and a scheduler ring that would overflow is a named error;
//   - a task that fails (task_fail, tasks/common.cuh) records its message in the launch's TaskFailure;
//     the worker's end-of-task barrier is a block reduction that hears of it, and thread 0 makes it
//     the launch's failure (MPK_TASK_FAILED) and sets the abort flag: the pass stops, nothing traps;
//   - every spin loop checks the abort flag, the host's request to stop and the in-kernel
//     watchdog's deadline; the worker slots (stored to only) are the host's view, the beats the
//     device's (docs/runtime.md, "What the host sees").
// Task ids are (pass << 32) | position (docs/runtime.md). Nothing here allocates or throws.
#pragma once
#include <stdint.h>
#include "abi.h"
#include "atomics.h"
#include "meta.h"
#include "random.h"
#include "simt.h"
#include "task_view.h"
#include "text.h"
#if !defined(__CUDACC__)
#include <sched.h>
#include <string.h>
#include <time.h>
#endif

// The protocol's own functions are not inlined into the worker loop under nvcc (MPK_NOINLINE,
// runtime/platform.h): they run once per task or less, and inlined they would add to the worker loop's
// registers (the task kernels are functions of their own too: mpk::call_task, runtime/simt.h).

namespace mpk {
namespace exec {

// ---- ids and messages

using TaskId = uint64_t;
MPK_HOST_DEVICE MPK_INLINE TaskId make_task_id(int64_t iteration, int32_t position) {
    return (uint64_t(iteration) << 32) | uint32_t(position);
}
MPK_HOST_DEVICE MPK_INLINE int64_t task_iteration(TaskId id) { return int64_t(id >> 32); }
MPK_HOST_DEVICE MPK_INLINE int32_t task_position(TaskId id) { return int32_t(id & 0xffffffffu); }
constexpr TaskId kTerminate = 0;  // position 0: TERMINATE

// A scheduler message is (pass << 32) | what: an event index (the event fired in that pass),
// kMsgTerminate (event 0, TERMINATION) or kMsgStart (start the pass: enqueue the first tasks).
constexpr uint32_t kMsgTerminate = 0;
constexpr uint32_t kMsgStart = 0xffffffffu;

constexpr int kBatch = 16;            // task ids a worker takes per poll (MPK's 16)
constexpr int kMaxSchedulers = 256;   // the routing bitmask's size (validated at mpk_init)
constexpr int kMessageBytes = 2048;

// ---- state (device-visible: device memory on the GPU, except Control and the slots, which are
// host-mapped so that the host can watch a running kernel)

struct alignas(64) WorkerSlot {   // written by the worker's thread 0; read live by the watchdog
    int32_t state;                // MPK_WORKER_*
    int32_t event;                // event waited on, -1 if none
    int32_t peer, peer_wait;      // rank waited on (TaskView::wait) and MPK_PEER_*, -1 / 0 if none
    int64_t task, iteration;      // the task position it holds (-1 none) and its pass
    int64_t counter, needed;      // the awaited counter as last seen, and the value it needs
    int64_t started;              // tasks started: unchanged while RUNNING = still in one kernel
    int64_t done;                 // tasks completed: progress for the watchdog
    int32_t arrived;              // 1 once the block runs its loop (the watchdog starts counting then)
    int32_t pad;
};

struct alignas(64) SchedulerSlot {
    int64_t handled;              // messages handled: progress for the watchdog
    int32_t state;                // MPK_WORKER_IDLE while polling, DONE after termination
    int32_t arrived;              // 1 once the scheduler runs its loop
};

// The in-kernel watchdog's view of worker w (beats[w]) or scheduler s (beats[W + s]): stored by its
// thread 0 alone, in device memory, so that watching costs no PCIe read. (The slots above are in
// host-mapped memory and the device only ever stores to them: the host reads them, the device
// keeps its own counts.)
struct alignas(16) Beat {
    int64_t ticks;                // tasks completed, messages handled
    int32_t running;              // inside a task kernel (not waiting on a peer)
    int32_t arrived;              // the loop runs
};

struct alignas(64) Index { int64_t v; };  // a ring index alone on its cache line

struct SchedEntry {               // MPSC ring slot: seq = ticket + 1 once msg is written
    int64_t seq;
    uint64_t msg;
};

// Written by the device alone (device memory on the GPU, read by the host after the launch); the
// host's own verdicts (hang, stuck, interrupted) stay on the host, and it asks the device to stop
// through State::host_abort.
struct Control {
    int32_t abort;                // 1: every loop returns (an error, or the host's request seen)
    int32_t status;               // MPK_*; the device's first failure wins (CAS from MPK_OK)
    int64_t iterations;           // passes completed (scheduler 0)
    int32_t failed_worker;        // the worker whose block failed (task_fail; CPU: a throw) inside failed_task
    int32_t pad;
    int64_t failed_task, failed_iteration;
    TaskFailure task_failure;     // every task's TaskView::failure: the first task_fail of the launch
    char message[kMessageBytes];
};

struct State {
    MpkConfig cfg;                // pointer fields cleared; see the arrays below
    const MpkTask* tasks;         // [num_tasks]
    const MpkEvent* events;       // [num_events]
    void* const* tensors;         // [num_tensors]
    const void* const* tile_maps; // [num_tasks * MPK_MAX_TILES]: each tile's tensor map (tile_maps.h), or null
    MpkMeta meta;
    void* const* peer_tensors;    // [world_size * num_tensors] or null
    int64_t* const* peer_signals; // [world_size] or null
    const int32_t* first_tasks;   // positions that wait on nothing, ascending
    int32_t num_first_tasks;
    int32_t num_owning;           // schedulers that own a worker: min(S, W)
    const int32_t* event_waiters; // [num_events]: tasks in the event's range that wait on it
    int32_t ordered;              // several ranks, event dispatch: each worker runs its tasks in position order
    int32_t pad;
    int64_t iteration_base;       // passes of earlier successful launches (TaskView::iteration)
    int64_t watchdog_ns;          // GPU: the in-kernel deadline (<= 0: off); CPU: the host's
    uint64_t launch_seed;         // jitter stream of this launch
    // per launch (reset before it)
    int64_t* counters;            // [num_events], only grow
    int64_t* progress;            // [num_tasks], last pass completed
    int64_t* arrived;             // [num_tasks] ordered mode: the pass in which the task arrived
    TaskId* worker_ring;          // [W][worker_cap]
    int64_t worker_cap;           // a power of two
    Index* worker_head;           // [W] consumer: the worker
    Index* worker_tail;           // [W] producer: the worker's scheduler
    SchedEntry* sched_ring;       // [S][sched_cap]
    int64_t sched_cap;            // a power of two
    Index* sched_reserve;         // [S] producers' tickets
    Index* sched_head;            // [S] consumer: the scheduler
    RequestState* requests;       // scheduler 0's
    WorkerSlot* workers;          // [W]
    SchedulerSlot* schedulers;    // [S]
    Control* control;
    const int32_t* host_abort;    // the host's request to stop: host memory (host-mapped on the GPU),
                                  // read by the device in its spin loops only, never in a task's path
    Beat* beats;                  // [W + S], device memory
};

// The reorder buffer of take_batch (several ranks need each worker's tasks in position order): the
// event model only; MPK's pre-launch enqueues in position order already.
MPK_HOST_DEVICE inline int32_t ordered_mode(const MpkConfig& c) {
    return c.world_size > 1 && c.dispatch == MPK_DISPATCH_EVENT;
}

// Ring capacities from the graph (docs/runtime.md). A worker ring holds at most one pass's tasks
// plus TERMINATE (a pass starts only after the previous one ended, so its tasks have left the
// ring); MPK_QUEUE_CAPACITY_LIMIT shrinks it for the C++ tests (the scheduler then waits for
// room: a worker always drains its ring, whose tasks are ready). A scheduler ring holds at most
// one message per event of the running pass, the START of this pass and of the previous one
// (an empty START may still wait), and TERMINATE: twice that is the capacity, and a push that
// finds it full is an error (MPK_INTERNAL), never a silent overwrite.
MPK_HOST_DEVICE inline int64_t pow2_at_least(int64_t n) {
    int64_t c = 2;
    while (c < n) c <<= 1;
    return c;
}
MPK_HOST_DEVICE inline int64_t worker_ring_capacity(int32_t num_tasks) {
    int64_t want = int64_t(num_tasks) + 1;
#ifdef MPK_QUEUE_CAPACITY_LIMIT
    if (want > MPK_QUEUE_CAPACITY_LIMIT) want = MPK_QUEUE_CAPACITY_LIMIT;
#endif
    return pow2_at_least(want);
}
MPK_HOST_DEVICE inline int64_t scheduler_ring_capacity(int32_t num_events) {
    return pow2_at_least(2 * (int64_t(num_events) + 4));
}

// ---- ownership and assignment

// Workers are split into contiguous groups, one per scheduler (MPK's get_first_last_ids):
// scheduler s owns [first_worker(s), first_worker(s + 1)). With fewer workers than schedulers
// the first W schedulers own one each and the rest none.
MPK_HOST_DEVICE MPK_INLINE int32_t first_worker(int32_t workers, int32_t schedulers, int32_t s) {
    const int32_t per = workers / schedulers, rem = workers % schedulers;
    return s * per + (s < rem ? s : rem);
}
MPK_HOST_DEVICE MPK_INLINE int32_t scheduler_of(int32_t workers, int32_t schedulers, int32_t w) {
    const int32_t per = workers / schedulers, rem = workers % schedulers;
    return w < rem * (per + 1) ? w / (per + 1) : rem + (w - rem * (per + 1)) / per;
}

// The worker of a task in a pass: round-robin by position, or with jitter a hash of the seed
// and the task id (every scheduler computes the same answer, so each enqueues only its own).
MPK_HOST_DEVICE MPK_INLINE int32_t assign_worker(const State& st, int64_t iteration, int32_t position) {
    if (!st.cfg.jitter) return (position - 1) % st.cfg.num_workers;
    const uint64_t h = splitmix64(st.cfg.jitter_seed ^ splitmix64(make_task_id(iteration, position)));
    return int32_t(h % uint64_t(st.cfg.num_workers));
}

// ---- failures: the first one wins; the message is composed where it happens (text.h)

MPK_HOST_DEVICE MPK_NOINLINE inline Text fail(State& st, int32_t code) {
    if (atomic_cas_sys(&st.control->status, int32_t(MPK_OK), code) != MPK_OK) return Text(nullptr, 0);
    return Text(st.control->message, kMessageBytes);
}
MPK_HOST_DEVICE MPK_INLINE void abort_launch(State& st) { st_release_sys(&st.control->abort, int32_t(1)); }
MPK_HOST_DEVICE MPK_INLINE bool aborted(const State& st) { return ld_relaxed(&st.control->abort) != 0; }
MPK_HOST_DEVICE MPK_INLINE bool host_asked(const State& st) { return ld_relaxed_sys(st.host_abort) != 0; }

// ---- waiting

// A clock in ns that both backends have: %globaltimer on the GPU (one clock for every SM), the
// monotonic clock (std::chrono::steady_clock's) on the CPU.
MPK_DEVICE MPK_INLINE int64_t now_ns() {
#if defined(__CUDACC__)
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return int64_t(t);
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
#endif
}

// The task record (abi.h, docs/profiler.md): field k of task `pos`. The worker is written for every
// task (one store); the times only with cfg.profile, so profiling off costs a predictable branch.
enum RecordField { kReady = 0, kBegin = 1, kEnd = 2, kWorker = 3 };
MPK_DEVICE MPK_INLINE void record(const State& st, int32_t pos, RecordField k, int64_t v) {
    st.cfg.task_record[int64_t(pos) * MPK_RECORD_FIELDS + k] = v;
}
MPK_DEVICE MPK_INLINE void stamp(const State& st, int32_t pos, RecordField k) {
    if (st.cfg.profile) record(st, pos, k, now_ns());
}

// Sum of every progress count (tasks completed, messages handled) and whether a worker is inside
// a kernel, or not every block has started its loop yet: what the watchdog calls progress
// (docs/runtime.md). (Starting the threads and their fibers can take longer than watchdog_s on
// a loaded machine or under a sanitizer.) The host's view, from the slots; beat_ticks is the
// device's, from the beats.
MPK_HOST_DEVICE inline int64_t progress_ticks(const State& st, bool* busy) {
    int64_t ticks = 0;
    bool run = false;
    for (int32_t w = 0; w < st.cfg.num_workers; ++w) {
        ticks += ld_relaxed_sys(&st.workers[w].done);
        run = run || ld_relaxed_sys(&st.workers[w].state) == MPK_WORKER_RUNNING || !ld_relaxed_sys(&st.workers[w].arrived);
    }
    for (int32_t s = 0; s < st.cfg.num_local_schedulers; ++s) {
        ticks += ld_relaxed_sys(&st.schedulers[s].handled);
        run = run || !ld_relaxed_sys(&st.schedulers[s].arrived);
    }
    *busy = run;
    return ticks;
}
MPK_DEVICE inline int64_t beat_ticks(const State& st, bool* busy) {
    int64_t ticks = 0;
    bool run = false;
    for (int32_t i = 0; i < st.cfg.num_workers + st.cfg.num_local_schedulers; ++i) {
        ticks += ld_relaxed(&st.beats[i].ticks);
        run = run || ld_relaxed(&st.beats[i].running) || !ld_relaxed(&st.beats[i].arrived);
    }
    *busy = run;
    return ticks;
}

// One round of a spin loop; false once the launch aborts. Every round checks the device's abort
// flag; every kHostPoll + 1 rounds the host's request (a PCIe read on the GPU, so not every round;
// a spinning thread is not in a task's path) and turns it into the device's flag, which the
// workers also check between tasks. Every 256 rounds the in-kernel watchdog: no progress anywhere
// (beat_ticks) for twice watchdog_s is MPK_HANG, a backstop behind the host's watchdog (which
// fires at watchdog_s and reports more), so a stuck graph ends even if the host cannot ask.
// The pause: on the GPU __nanosleep; on the CPU a pause, then yields of the OS thread, then sleeps
// from 4 us doubling to 1 ms (so several ranks' threads on two cores make progress).
#if defined(__CUDACC__)
constexpr uint32_t kHostPoll = 255;
#else
constexpr uint32_t kHostPoll = 0;
#endif
struct Spin {
    uint32_t round = 0;
    uint32_t sleep_us = 4;        // CPU
    int64_t since = 0, ticks = -1;
    MPK_DEVICE bool wait(State& st) {
        if (aborted(st)) return false;
        ++round;
        if ((round & kHostPoll) == 0 && host_asked(st)) {
            abort_launch(st);
            return false;
        }
        if ((round & 255) == 0 && st.watchdog_ns > 0) {
            bool running = false;
            const int64_t now = now_ns(), t = beat_ticks(st, &running);
            if (t != ticks || running) {
                ticks = t;
                since = now;
            } else if (now - since > 2 * st.watchdog_ns) {
                fail(st, MPK_HANG).s("watchdog (in the kernel): no task finished and no task ran for ")
                    .i((now - since) / 1000000).s(" ms");
                abort_launch(st);
                return false;
            }
        }
#if defined(__CUDACC__)
        __nanosleep(round < 64 ? 32 : 256);
#else
        if (round <= 64) {
            cpu_relax();
        } else if (round <= 80) {
            sched_yield();
        } else {
            struct timespec ts = {0, long(sleep_us) * 1000};
            nanosleep(&ts, nullptr);
            sleep_us = sleep_us * 2 < 1000 ? sleep_us * 2 : 1000;
        }
#endif
        return true;
    }
};

// Jitter: 0 to 199 us before about half of the tasks (a per-worker xorshift), which widens the
// windows in which a missing dependency shows.
MPK_DEVICE inline void jitter_delay(uint64_t* rng) {
    uint64_t x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    if (x & 1) return;
    const int64_t ns = int64_t((x >> 8) % 200) * 1000;
#if defined(__CUDACC__)
    const int64_t until = now_ns() + ns;
    while (now_ns() < until) __nanosleep(1000);
#else
    struct timespec ts = {0, long(ns)};
    nanosleep(&ts, nullptr);
#endif
}

// ---- rings

// Scheduler s's ring, any producer. False (after recording MPK_INTERNAL) when it is full.
MPK_DEVICE inline bool push_message(State& st, int32_t s, uint64_t msg) {
    const int64_t t = atomic_add_relaxed(&st.sched_reserve[s].v, int64_t(1));
    const int64_t head = ld_acquire(&st.sched_head[s].v);
    if (t - head >= st.sched_cap) {
        fail(st, MPK_INTERNAL).s("scheduler queue ").i(s).s(" overflows: ").i(t - head + 1).s(" messages for ")
            .i(st.sched_cap).s(" slots (pass ").i(int64_t(msg >> 32)).s(", event ").i(int64_t(msg & 0xffffffffu))
            .s("); the capacity comes from the graph (").i(st.cfg.num_events).s(" events): a protocol bug");
        abort_launch(st);
        return false;
    }
    SchedEntry& e = st.sched_ring[int64_t(s) * st.sched_cap + (t & (st.sched_cap - 1))];
    st_relaxed(&e.msg, msg);
    st_release(&e.seq, t + 1);
    return true;
}

// Worker w's ring; only w's scheduler pushes. Waits for room (only a shrunken ring fills up).
MPK_DEVICE inline bool push_task(State& st, int32_t w, TaskId id) {
    const int64_t t = ld_relaxed(&st.worker_tail[w].v);
    Spin spin;
    while (t - ld_acquire(&st.worker_head[w].v) >= st.worker_cap)
        if (!spin.wait(st)) return false;
    st_relaxed(&st.worker_ring[int64_t(w) * st.worker_cap + (t & (st.worker_cap - 1))], id);
    st_release(&st.worker_tail[w].v, t + 1);
    return true;
}

// ---- scheduler side

// Schedulers that own a worker of a task of `range` waiting on `event` (or of the first tasks,
// event -1) in `iteration`, as a bitmask; a message goes to exactly those, so every message a
// scheduler receives carries work for it (what bounds the scheduler rings).
struct Owners {
    uint64_t bits[kMaxSchedulers / 64];
    MPK_DEVICE void clear() {
        for (int k = 0; k < kMaxSchedulers / 64; ++k) bits[k] = 0;
    }
    MPK_DEVICE void add(int32_t s) { bits[s >> 6] |= uint64_t(1) << (s & 63); }
    MPK_DEVICE bool has(int32_t s) const { return (bits[s >> 6] >> (s & 63)) & 1; }
};

// ---- the two dispatch models (docs/runtime.md, "Dispatch models"), one unit each: which schedulers a
// pass's START goes to and what they enqueue, and what an event that completes does. start_owners,
// start_pass and event_fired (below) pick the unit of cfg.dispatch.
//
// dispatch="event" (the default): START enqueues the first tasks (those waiting on nothing); an
// event that completes goes to the schedulers owning a worker of one of its waiting tasks, which
// enqueue those (`dispatch`): a task enters a queue once its event has fired.
MPK_DEVICE inline void event_start_owners(const State& st, int64_t iteration, Owners* o) {
    const int32_t W = st.cfg.num_workers, S = st.cfg.num_local_schedulers;
    o->clear();
    for (int32_t k = 0; k < st.num_first_tasks; ++k)
        o->add(scheduler_of(W, S, assign_worker(st, iteration, st.first_tasks[k])));
}

// dispatch="mpk": MPK's pre-launch. Its register_mugraph (src/kernel/runtime.cc) turns every launch
// event into EVENT_EMPTY and makes the begin task's event launch all tasks; its execute_scheduler
// (persistent_kernel.cuh) enqueues them round-robin over the workers at a pass's start, and
// execute_worker waits for each task's dependent event in queue order. Here: START goes to every
// scheduler that owns a worker, each enqueues all of the pass's tasks of its workers in position
// order (prelaunch), and an event that completes enqueues nothing; take_batch waits for each
// task's event in queue order.
MPK_DEVICE inline void prelaunch_start_owners(const State& st, Owners* o) {
    o->clear();
    for (int32_t s = 0; s < st.num_owning; ++s) o->add(s);
}

MPK_DEVICE inline void start_owners(const State& st, int64_t iteration, Owners* o) {
    if (st.cfg.dispatch == MPK_DISPATCH_MPK)
        prelaunch_start_owners(st, o);
    else
        event_start_owners(st, iteration, o);
}

MPK_DEVICE inline void owners_of_event(const State& st, int32_t ev, int64_t iteration, Owners* o) {
    const int32_t W = st.cfg.num_workers, S = st.cfg.num_local_schedulers;
    if (ev < 0) return start_owners(st, iteration, o);
    o->clear();
    const MpkEvent& e = st.events[ev];
    const int32_t n = e.last_task_id - e.first_task_id;
    if (!st.cfg.jitter && st.event_waiters[ev] == n && n >= W) {  // round-robin over >= W tasks
        for (int32_t s = 0; s < st.num_owning; ++s) o->add(s);
        return;
    }
    for (int32_t p = e.first_task_id; p < e.last_task_id; ++p)
        if (st.tasks[p].dependent_event == ev) o->add(scheduler_of(W, S, assign_worker(st, iteration, p)));
}

// Sends `what` of `iteration` to every owning scheduler but `self` (which handles it directly
// when it is an owner: returned in *mine).
MPK_DEVICE MPK_NOINLINE inline bool route(State& st, uint32_t what, int32_t ev, int64_t iteration, int32_t self, bool* mine) {
    Owners o;
    owners_of_event(st, ev, iteration, &o);
    *mine = false;
    for (int32_t s = 0; s < st.num_owning; ++s) {
        if (!o.has(s)) continue;
        if (s == self) {
            *mine = true;
            continue;
        }
        if (!push_message(st, s, (uint64_t(iteration) << 32) | what)) return false;
    }
    return true;
}

// Scheduler s enqueues its workers' tasks among those waiting on `ev` (-1: the first tasks).
// A task inside the event's range that waits on another event (or on none: the drop_dependency
// fault) is not this event's to launch.
MPK_DEVICE MPK_NOINLINE inline bool dispatch(State& st, int32_t s, int32_t ev, int64_t iteration) {
    const int32_t W = st.cfg.num_workers, S = st.cfg.num_local_schedulers;
    const int32_t lo = first_worker(W, S, s), hi = first_worker(W, S, s + 1);
    auto one = [&](int32_t p) {
        const int32_t w = assign_worker(st, iteration, p);
        if (w < lo || w >= hi) return true;
        stamp(st, p, kReady);  // before the push: the worker may begin at once
        return push_task(st, w, make_task_id(iteration, p));
    };
    if (ev < 0) {
        for (int32_t k = 0; k < st.num_first_tasks; ++k)
            if (!one(st.first_tasks[k])) return false;
        return true;
    }
    const MpkEvent& e = st.events[ev];
    for (int32_t p = e.first_task_id; p < e.last_task_id; ++p)
        if (st.tasks[p].dependent_event == ev && !one(p)) return false;
    return true;
}

MPK_DEVICE MPK_NOINLINE inline bool prelaunch(State& st, int32_t s, int64_t iteration) {
    const int32_t W = st.cfg.num_workers, S = st.cfg.num_local_schedulers;
    const int32_t lo = first_worker(W, S, s), hi = first_worker(W, S, s + 1);
    for (int32_t p = 1; p < st.cfg.num_tasks; ++p) {
        const int32_t w = assign_worker(st, iteration, p);
        if (w < lo || w >= hi) continue;
        stamp(st, p, kReady);
        if (!push_task(st, w, make_task_id(iteration, p))) return false;
    }
    return true;
}

// START of `iteration` at scheduler s, and event `ev` of `iteration` completed on a worker.
MPK_DEVICE inline bool start_pass(State& st, int32_t s, int64_t iteration) {
    return st.cfg.dispatch == MPK_DISPATCH_MPK ? prelaunch(st, s, iteration) : dispatch(st, s, -1, iteration);
}
MPK_DEVICE inline bool event_fired(State& st, int32_t ev, int64_t iteration) {
    if (st.cfg.dispatch == MPK_DISPATCH_MPK) return true;  // MPK's EVENT_EMPTY
    bool mine = false;  // a worker is no scheduler: `mine` stays false
    return route(st, uint32_t(ev), ev, iteration, -1, &mine);
}

MPK_DEVICE inline void terminate_workers(State& st, int32_t s) {
    const int32_t W = st.cfg.num_workers, S = st.cfg.num_local_schedulers;
    for (int32_t w = first_worker(W, S, s); w < first_worker(W, S, s + 1); ++w)
        if (!push_task(st, w, kTerminate)) return;
}

// Scheduler 0 at END_OF_TASK_GRAPH of `iteration` (0: the launch's seed): finalize the batch,
// lay out the next one, and start the next pass (true) or terminate everything (false).
MPK_DEVICE MPK_NOINLINE inline bool end_of_pass(State& st, int64_t iteration) {
    st_relaxed_sys(&st.control->iterations, iteration);
    RequestState& rq = *st.requests;
    bool more = prepare_next_batch(rq, st.meta, st.cfg);
    if (rq.status != MPK_OK) {
        fail(st, rq.status).s(rq.message);
        more = false;
    } else if (iteration == 0 && !more) {
        Text t = fail(st, MPK_NOTHING_SCHEDULED);
        if (t.buf) describe_nothing_scheduled(st.meta, st.cfg, t.buf, t.cap);
    }
    if (more && !aborted(st)) {
        bool mine = false;
        if (!route(st, kMsgStart, -1, iteration + 1, 0, &mine)) return false;
        return !mine || start_pass(st, 0, iteration + 1);
    }
    for (int32_t s = 1; s < st.cfg.num_local_schedulers; ++s) push_message(st, s, kMsgTerminate);
    terminate_workers(st, 0);
    return false;
}

// One scheduler: lane 0 of a warp (the other lanes return at once).
MPK_DEVICE MPK_NOINLINE inline void scheduler_loop(State& st, int32_t s) {
    SchedulerSlot& me = st.schedulers[s];
    Beat& beat = st.beats[st.cfg.num_workers + s];
    st_relaxed_sys(&me.state, int32_t(MPK_WORKER_IDLE));
    st_relaxed_sys(&me.arrived, int32_t(1));
    st_relaxed(&beat.arrived, int32_t(1));
    if (s == 0) {
        RequestState& rq = *st.requests;
        if (init_kernel(rq, st.meta, st.cfg) != MPK_OK) {
            fail(st, rq.status).s(rq.message);
            for (int32_t o = 1; o < st.cfg.num_local_schedulers; ++o) push_message(st, o, kMsgTerminate);
            terminate_workers(st, 0);
            st_relaxed_sys(&me.state, int32_t(MPK_WORKER_DONE));
            return;
        }
        if (!end_of_pass(st, 0)) {
            st_relaxed_sys(&me.state, int32_t(MPK_WORKER_DONE));
            return;
        }
    }
    const int64_t cap = st.sched_cap;
    for (int64_t h = 0;; ++h) {
        SchedEntry& e = st.sched_ring[int64_t(s) * cap + (h & (cap - 1))];
        Spin spin;
        while (ld_acquire(&e.seq) != h + 1)
            if (!spin.wait(st)) return;
        const uint64_t msg = ld_relaxed(&e.msg);
        st_release(&st.sched_head[s].v, h + 1);
        st_relaxed_sys(&me.handled, h + 1);  // (stores only: the host reads the slot)
        st_relaxed(&beat.ticks, h + 1);
        const int64_t iteration = int64_t(msg >> 32);
        const uint32_t what = uint32_t(msg & 0xffffffffu);
        bool go = true;
        if (what == kMsgTerminate) {
            terminate_workers(st, s);
            go = false;
        } else if (what == kMsgStart) {
            go = start_pass(st, s, iteration);
        } else if (int32_t(what) == st.cfg.num_events - 1) {
            go = s == 0 && end_of_pass(st, iteration);
        } else {
            go = dispatch(st, s, int32_t(what), iteration);
        }
        if (!go) break;
    }
    st_relaxed_sys(&me.state, int32_t(MPK_WORKER_DONE));
}

// ---- worker side

// What TaskView::wait / ::signal need, per task of a batch (in the block's shared memory).
struct TaskContext {
    State* st;
    int32_t worker;
    int32_t fault;
};

// TaskView::wait: until *counter >= needed (a peer rank writes it). The worker shows as WAITING
// on that peer, so a stalled rank reads as no progress and is named in the hang report.
MPK_DEVICE inline bool wait_peer(const TaskView& v, const int64_t* counter, int64_t needed, int32_t peer,
                                 int32_t what) {
    const TaskContext& c = *static_cast<const TaskContext*>(v.executor);
    State& st = *c.st;
    WorkerSlot& me = st.workers[c.worker];
    if (aborted(st)) return false;  // keep the slot as the wait that saw the abort left it
    int64_t seen = ld_acquire_sys(counter);
    if (seen >= needed) return true;
    st_relaxed_sys(&me.event, int32_t(-1));
    st_relaxed_sys(&me.peer, peer);
    st_relaxed_sys(&me.peer_wait, what);
    st_relaxed_sys(&me.needed, needed);
    st_relaxed_sys(&me.counter, seen);
    st_relaxed_sys(&me.state, int32_t(MPK_WORKER_WAITING));
    st_relaxed(&st.beats[c.worker].running, int32_t(0));  // waiting on a peer can hang
    Spin spin;
    while ((seen = ld_acquire_sys(counter)) < needed) {
        if (!spin.wait(st)) {
            st_relaxed_sys(&me.counter, seen);
            return false;
        }
    }
    st_relaxed_sys(&me.counter, seen);
    st_relaxed_sys(&me.peer, int32_t(-1));
    st_relaxed_sys(&me.state, int32_t(MPK_WORKER_RUNNING));
    st_relaxed(&st.beats[c.worker].running, int32_t(1));
    return true;
}

// TaskView::signal: *counter = value on a peer's (or this rank's) counters, release.
MPK_DEVICE inline void signal_peer(const TaskView& v, int64_t* counter, int64_t value, int32_t peer) {
#ifdef MPK_FAULT_INJECTION
    const TaskContext& c = *static_cast<const TaskContext*>(v.executor);
    if (c.fault == MPK_FAULT_NO_SIGNAL && peer != v.rank) return;  // a stalled rank: only itself hears it
#else
    (void)v;
    (void)peer;
#endif
    st_release_sys(counter, value);
}

// Thread 0 waits until counter[ev] >= num_triggers[ev] * iteration (already true for a task an
// event launched; kept as MPK keeps it). False when the launch aborts.
MPK_DEVICE inline bool wait_event(State& st, WorkerSlot& me, int32_t ev, int64_t iteration) {
    const int64_t needed = int64_t(st.events[ev].num_triggers) * iteration;
    int64_t seen = ld_acquire(&st.counters[ev]);
    if (seen >= needed) return true;
    st_relaxed_sys(&me.event, ev);
    st_relaxed_sys(&me.needed, needed);
    st_relaxed_sys(&me.counter, seen);
    st_relaxed_sys(&me.state, int32_t(MPK_WORKER_WAITING));
    Spin spin;
    while ((seen = ld_acquire(&st.counters[ev])) < needed) {
        if (!spin.wait(st)) {
            st_relaxed_sys(&me.counter, seen);
            return false;
        }
    }
    st_relaxed_sys(&me.counter, seen);
    st_relaxed_sys(&me.event, int32_t(-1));
    return true;
}

// The block's shared state: thread 0 fills it before the barrier that starts a batch.
struct Batch {
    int32_t n;                    // tasks in the batch
    int32_t stop;                 // 1: leave after the batch (TERMINATE or abort)
    int32_t next, term;           // several ranks: the next position to run, TERMINATE seen
    int64_t cur;                  // several ranks: the pass of `next`
    uint64_t rng;                 // thread 0's jitter stream
    int64_t started, done;        // tasks begun / completed: the slot's counts, kept here so the
                                  // slot (host-mapped on the GPU) is only stored to
    int32_t pos[kBatch];
    int64_t iteration[kBatch];
    TaskContext ctx[kBatch];
    TaskView view[kBatch];
};

MPK_DEVICE inline void fill_view(State& st, int32_t w, int32_t pos, int64_t iteration, TaskView& v,
                                 TaskContext& c) {
    const MpkTask& t = st.tasks[pos];
#ifdef MPK_FAULT_INJECTION
    c.fault = pos == st.cfg.fault_task ? st.cfg.fault_kind : MPK_FAULT_NONE;
#else
    c.fault = MPK_FAULT_NONE;
#endif
    c.st = &st;
    c.worker = w;
    v.task = &t;
    v.meta = &st.meta;
    for (int32_t i = 0; i < MPK_MAX_TILES; ++i) {
        v.ptrs[i] = i < t.num_inputs + t.num_outputs ? static_cast<char*>(st.tensors[t.tiles[i].tensor]) + t.tiles[i].offset
                                                      : nullptr;
        v.tma_maps[i] = st.tile_maps ? st.tile_maps[int64_t(pos) * MPK_MAX_TILES + i] : nullptr;
    }
    v.iteration = st.iteration_base + iteration;
    v.rank = st.cfg.mpi_rank;
    v.world_size = st.cfg.world_size;
    v.num_tensors = st.cfg.num_tensors;
    v.peer_tensors = st.peer_tensors;
    v.peer_signals = st.peer_signals;
#if defined(__CUDACC__)
    v.executor_peers = true;  // (direct calls: runtime/task_view.h says why)
#else
    v.wait_fn = wait_peer;
    v.signal_fn = signal_peer;
#endif
    v.executor = &c;
    v.failure = &st.control->task_failure;
    v.block_threads = st.cfg.worker_threads;
    v.smem_bytes = st.cfg.smem_bytes;
    v.on_block = true;
    v.simt_seed = splitmix64(uint64_t(pos) * 0x9E3779B97F4A7C15ull ^ uint64_t(v.iteration) << 40 ^
                             (st.cfg.jitter ? st.cfg.jitter_seed : 0));
}

MPK_DEVICE MPK_INLINE void show_running(State& st, int32_t w, Batch& b, int32_t j) {
    WorkerSlot& me = st.workers[w];
    st_relaxed_sys(&me.task, int64_t(b.pos[j]));
    st_relaxed_sys(&me.iteration, b.iteration[j]);
    st_relaxed_sys(&me.event, int32_t(-1));
    st_relaxed_sys(&me.peer, int32_t(-1));
    st_relaxed_sys(&me.started, ++b.started);
    st_relaxed_sys(&me.state, int32_t(MPK_WORKER_RUNNING));
    st_relaxed(&st.beats[w].running, int32_t(1));
}

// Several ranks: the next position after `from` that worker w runs in `iteration` (num_tasks:
// none). Every rank computes the same sequence (assign_worker).
MPK_DEVICE inline int32_t next_assigned(const State& st, int32_t w, int64_t iteration, int32_t from) {
    const int32_t W = st.cfg.num_workers, n = st.cfg.num_tasks;
    if (from < 1) from = 1;
    if (!st.cfg.jitter) {  // (p - 1) % W == w
        const int32_t p = from + (w - (from - 1) % W + W) % W;
        return p < n ? p : n;
    }
    for (int32_t p = from; p < n; ++p)
        if (assign_worker(st, iteration, p) == w) return p;
    return n;
}

// Thread 0: takes up to kBatch ready tasks of worker w into b; waits (IDLE) while there is none.
// One rank: in the order its ring delivers them (each is ready: its event fired). Several ranks
// (or cfg.in_order: testing's serial re-run, docs/profiler.md): in ascending position order
// within the pass (a reorder buffer over `arrived`): a kernel that waits for a peer rank inside
// the task (allreduce, TaskView::wait) must not hold a worker that the peer's progress needs, and
// with every worker running its tasks in the same order on every rank, the lowest task unfinished
// on any rank can run everywhere (docs/runtime.md).
MPK_DEVICE MPK_NOINLINE inline void take_batch(State& st, int32_t w, Batch& b) {
    WorkerSlot& me = st.workers[w];
    b.n = 0;
    b.stop = 1;
    if (aborted(st)) return;  // the slot keeps what the hang report needs
    b.stop = 0;
    st_relaxed_sys(&me.task, int64_t(-1));
    st_relaxed_sys(&me.event, int32_t(-1));
    st_relaxed_sys(&me.peer, int32_t(-1));
    st_relaxed_sys(&me.state, int32_t(MPK_WORKER_IDLE));
    // Adds a task; the first waits for its event (formally: an enqueued task's event has fired),
    // a later one is taken only if its event is complete. False: not taken (or the launch aborts).
    auto take = [&](int32_t pos, int64_t iteration) {
        const int32_t ev = st.tasks[pos].dependent_event;
        if (ev >= 0) {
            if (b.n == 0) {
                st_relaxed_sys(&me.task, int64_t(pos));
                st_relaxed_sys(&me.iteration, iteration);
                if (!wait_event(st, me, ev, iteration)) {
                    b.stop = 1;
                    return false;
                }
            } else if (ld_acquire(&st.counters[ev]) < int64_t(st.events[ev].num_triggers) * iteration) {
                return false;
            }
        }
        fill_view(st, w, pos, iteration, b.view[b.n], b.ctx[b.n]);
        b.pos[b.n] = pos;
        b.iteration[b.n] = iteration;
        ++b.n;
        return true;
    };
    const TaskId* ring = st.worker_ring + int64_t(w) * st.worker_cap;
    const int64_t mask = st.worker_cap - 1;
    const int32_t n = st.cfg.num_tasks;
    int64_t h = ld_relaxed(&st.worker_head[w].v);
    Spin spin;
    for (;;) {
        int64_t tail = ld_acquire(&st.worker_tail[w].v);
        if (!st.ordered && !st.cfg.in_order) {
            while (b.n < kBatch && h < tail) {
                const TaskId id = ld_relaxed(&ring[h & mask]);
                if (task_position(id) == 0) {  // TERMINATE: the last id this launch sends
                    st_release(&st.worker_head[w].v, ++h);
                    b.stop = 1;
                    break;
                }
                if (!take(task_position(id), task_iteration(id))) break;
                st_release(&st.worker_head[w].v, ++h);
                if (h == tail) tail = ld_acquire(&st.worker_tail[w].v);
            }
            if (b.n > 0 || b.stop) break;
        } else {
            for (; h < tail; ++h) {  // everything queued: ids of the running pass, or TERMINATE
                const TaskId id = ld_relaxed(&ring[h & mask]);
                const int32_t pos = task_position(id);
                const int64_t iteration = task_iteration(id);
                if (pos == 0) {
                    b.term = 1;
                    continue;
                }
                if (b.next >= n && iteration > b.cur) {  // the first id of a later pass
                    b.cur = iteration;
                    b.next = next_assigned(st, w, iteration, 1);
                }
                st.arrived[pos] = iteration;
            }
            st_release(&st.worker_head[w].v, h);
            while (b.n < kBatch && b.next < n && st.arrived[b.next] == b.cur && take(b.next, b.cur))
                b.next = next_assigned(st, w, b.cur, b.next + 1);
            if (b.n > 0 || b.stop) break;
            if (b.term && b.next >= n) {
                b.stop = 1;
                break;
            }
        }
        if (!spin.wait(st)) {
            b.stop = 1;
            return;
        }
    }
    if (b.n > 0) show_running(st, w, b, 0);
}

// Thread 0, after every thread has finished task j of the batch: triggers its events (an event
// that completes is sent to its schedulers), records progress, shows the next task running.
MPK_DEVICE MPK_NOINLINE inline void finish_task(State& st, int32_t w, Batch& b, int32_t j, bool dispatched) {
    WorkerSlot& me = st.workers[w];
    const int32_t pos = b.pos[j];
    const int64_t iteration = b.iteration[j];
    const MpkTask& t = st.tasks[pos];
    if (aborted(st)) return;  // e.g. a peer wait gave up: the kernel did not finish
    if (!dispatched) {
        fail(st, MPK_INVALID).s("task ").i(pos).s(" has variant ").i(t.variant)
            .s(", which this module's dispatcher does not have (task table and module from different graphs?)");
        abort_launch(st);
        return;
    }
    const int32_t fault = b.ctx[j].fault;
#ifdef MPK_FAULT_INJECTION
    MPK_INJECT_FAULT(b.view[j], fault, st.cfg.fault_element, st.cfg.fault_amount);
#endif
    if (fault != MPK_FAULT_NO_TRIGGER) {
        for (int32_t k = 0; k < t.num_triggers; ++k) {
            const int32_t ev = t.trigger_events[k];
            const int64_t needed = int64_t(st.events[ev].num_triggers) * iteration;
            if (atomic_add_acq_rel(&st.counters[ev], int64_t(1)) + 1 != needed) continue;
            const bool ok = ev == st.cfg.num_events - 1
                                ? push_message(st, 0, (uint64_t(iteration) << 32) | uint32_t(ev))
                                : event_fired(st, ev, iteration);
            if (!ok) return;
        }
    }
    if (st.cfg.task_record) record(st, pos, kWorker, w);
    st_release(&st.progress[pos], iteration);
    st_relaxed_sys(&me.done, ++b.done);
    st_relaxed(&st.beats[w].ticks, b.done);
    st_relaxed(&st.beats[w].running, int32_t(0));
    if (j + 1 < b.n) show_running(st, w, b, j + 1);
}

// Test mode: every task starts with the block's dynamic shared memory filled with 0xFF (NaN as
// float, bf16, fp16; -1 as integers), as a fresh block finds it (docs/simt.md), so a kernel that
// reads shared memory it did not write shows it. The barrier after a task (end_task) provides it:
// on the GPU every thread fills its part, then a second barrier (the fill must not overlap the
// task's last reads nor the next one's first writes); on the CPU the emulation fills it as the
// barrier completes, and only if the task took the shared memory at all (mpk::smem). The CPU's
// barriers go through the block handle taken once per launch (runtime/simt_cpu.h, BlockRef).
// The first barrier is a block reduction: end_task is true for every thread when any thread passed a
// true `seen` (thread 0: the abort flag; any thread: a task_fail of this task), so the block leaves
// together (one answer for all, however the threads' reads of the flags interleave).
#if defined(__CUDACC__)
struct BlockRef {};
MPK_DEVICE MPK_INLINE BlockRef this_block() { return BlockRef{}; }
MPK_DEVICE MPK_INLINE void sync_block(BlockRef) { __syncthreads(); }
MPK_DEVICE inline void poison_smem() {
    uint4* p = reinterpret_cast<uint4*>(smem_base());
    const size_t n = smem_bytes() / sizeof(uint4);
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) p[i] = make_uint4(~0u, ~0u, ~0u, ~0u);
}
MPK_DEVICE MPK_INLINE bool end_task(BlockRef, bool test_mode, bool seen) {
    const bool any = __syncthreads_or(seen) != 0;
    if (test_mode) {
        poison_smem();
        __syncthreads();
    }
    return any;
}
#else
using simt::BlockRef;
inline BlockRef this_block() { return simt::this_block(); }
inline void sync_block(BlockRef blk) { simt::sync(blk); }
inline bool end_task(BlockRef blk, bool test_mode, bool seen) { return simt::task_barrier(blk, test_mode, seen) != 0; }
#endif

// The first failing task of the launch (task_fail; on the CPU also a throw: a SIMT error), recorded so
// that the host names it. False: an earlier one holds the record.
MPK_DEVICE inline bool note_failed_task(State& st, int32_t w, int32_t pos, int64_t iteration) {
    if (atomic_cas(&st.control->failed_task, int64_t(-1), int64_t(pos)) != -1) return false;
    st.control->failed_worker = w;
    st.control->failed_iteration = iteration;
    return true;
}

// Whether this thread sees a task failure recorded in this launch (the failing thread always does, also
// when an earlier failure of another task won the record).
MPK_DEVICE MPK_INLINE bool failure_seen(const TaskView& v) { return ld_relaxed(&v.failure->owner) != 0; }

// Thread 0, after the barrier that ends task j, when the block saw a failure or the abort flag. If task j
// holds the record, it becomes the launch's failure (MPK_TASK_FAILED; the first failure of the launch
// wins). Any recorded failure stops the launch: the abort flag, which every spin loop and every block's
// end-of-task barrier hears (a block that saw the record first leaves without triggering its task's
// events: the pass is lost anyway, and nothing runs on a failed task's output).
MPK_DEVICE MPK_NOINLINE inline void task_failed(State& st, int32_t w, const Batch& b, int32_t j) {
    const TaskView& v = b.view[j];
    const uint64_t owner = ld_relaxed(&v.failure->owner);
    if (owner == 0) return;  // the abort flag alone (a hang, the host's request): already set
    if (owner == uint64_t(reinterpret_cast<uintptr_t>(v.task)) && note_failed_task(st, w, b.pos[j], b.iteration[j])) {
        const TaskFailure& f = *v.failure;  // (written by a thread of this block, before the barrier)
        fail(st, MPK_TASK_FAILED).s("task ").i(b.pos[j]).s(" (variant ").i(v.task->variant).s(", iteration ")
            .i(b.iteration[j]).s(") failed: ").s(f.message).s(" (thread ").i(f.thread).s(" of the block)");
    }
    abort_launch(st);
}

// One worker block: every thread of it runs this. D::run(view) is the generated dispatcher
// (false: a variant the module lacks).
template <class D> MPK_DEVICE void worker_loop(State& st, int32_t w) {
#if defined(__CUDACC__)
    __shared__ __align__(16) unsigned char raw[sizeof(Batch)];
    Batch& b = *reinterpret_cast<Batch*>(raw);
    const BlockRef blk = this_block();
#else
    // (the emulation poisons static __shared__ arrays before every task in test mode; the batch
    // outlives the tasks, so it is the block's scratch memory: runtime/simt_cpu_block.h)
    const BlockRef blk = this_block();
    Batch& b = *static_cast<Batch*>(simt::block_scratch(blk, sizeof(Batch)));
#endif
    const bool leader = threadIdx.x == 0;
    const bool test_mode = st.cfg.test_mode != 0;
    if (leader) {
        b.rng = splitmix64(st.launch_seed + 0x51ed27u * uint64_t(w + 1)) | 1;
        b.cur = 0;
        b.next = st.cfg.num_tasks;
        b.term = 0;
        b.started = b.done = 0;
        st_relaxed_sys(&st.workers[w].arrived, int32_t(1));
        st_relaxed(&st.beats[w].arrived, int32_t(1));
    }
#if defined(__CUDACC__)
    if (test_mode) poison_smem();  // (the barrier below separates it from the first task)
#endif
    for (;;) {
        if (leader) {
            take_batch(st, w, b);
            if (st.cfg.jitter && b.n) jitter_delay(&b.rng);
        }
        sync_block(blk);  // the batch is published
        const int32_t n = b.n;
        int32_t stop = b.stop;
        for (int32_t j = 0; j < n; ++j) {
            const TaskView& v = b.view[j];
            bool dispatched = true;
            if (leader) stamp(st, b.pos[j], kBegin);
            if (b.ctx[j].fault != MPK_FAULT_SKIP) {
#if defined(__CUDACC__)
                dispatched = D::run(v);
#else
                try {
                    dispatched = D::run(v);
                } catch (...) {
                    note_failed_task(st, w, b.pos[j], b.iteration[j]);
                    throw;
                }
#endif
            }
            bool seen = failure_seen(v);  // this thread's task_fail, or another's it sees already
            if (leader) {
                if (st.cfg.jitter && j + 1 < n) jitter_delay(&b.rng);
                seen = seen || aborted(st);
            }
            const bool halt = end_task(blk, test_mode, seen);  // every thread is done with task j
            if (leader) stamp(st, b.pos[j], kEnd);  // (a jitter delay, and the poison, count)
            if (halt) {  // a failure of task j, or an abort thread 0 saw, stops the block here
                if (leader) task_failed(st, w, b, j);
                stop = 1;
                break;
            }
            if (leader) finish_task(st, w, b, j, dispatched);
        }
        if (stop) break;
    }
    if (leader && !aborted(st)) {
        st_relaxed_sys(&st.workers[w].task, int64_t(-1));
        st_relaxed_sys(&st.workers[w].state, int32_t(MPK_WORKER_DONE));
    }
}

}  // namespace exec
}  // namespace mpk
