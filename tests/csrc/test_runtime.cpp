// test_runtime.cpp: proves the persistent-kernel protocol of csrc/runtime/executor.cuh on the
// CPU backend (host_cpu.h: worker blocks through the SIMT emulation) with a fake dispatcher (no
// real layer kernels): topologies, workers and schedulers, jitter, event-driven dispatch, test
// mode vs the offline loop, meta tensors, watchdog, the stuck-in-kernel limit, queue overflow,
// validation, independent handles. It is shaped like a generated module: runtime.h, a
// dispatcher, then entry.h. The fake kernels are block code: thread 0 does the work.
//
// Run:  tests/csrc/run_runtime_tests.sh          (also with 2-slot worker rings, TSan, ASan+UBSan)
// One:  g++ -std=c++17 -O2 -pthread -Icsrc tests/csrc/test_runtime.cpp -o /tmp/t && /tmp/t [name ...]
//       (names: substrings of the tests' names in main, e.g. /tmp/t interrupt stuck)
#include "runtime/runtime.h"
#include "runtime/simt.h"
#include "tasks/common.cuh"  // task_fail (fake::FAIL)

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <stdio.h>
#include <string>
#include <string.h>
#include <thread>
#include <vector>

// ---- fake kernels

namespace fake {
enum Variant { SUM = 0, MODEL = 1, THROW = 2, PEER = 3, PROBE = 4, SPIN = 5, PAIR = 6, SMEM = 7, STATIC_SMEM = 8,
               FAIL = 9 };
constexpr int kRow = 32;      // int64 entries per MODEL log row
constexpr int kMaxRows = 16;

// SUM: out0 (uint64) = 31 * (sum of inputs) + position (iparams[1]); iparams[0] > 0 sleeps
// that many microseconds first. A value read before its producer wrote it shows as a mismatch.
inline void sum(const mpk::TaskView& v) {
    if (v.iparam(0) > 0) std::this_thread::sleep_for(std::chrono::microseconds(v.iparam(0)));
    uint64_t acc = 0;
    for (int i = 0; i < v.task->num_inputs; ++i) acc += *v.in<uint64_t>(i);
    *v.out<uint64_t>(0) = acc * 31 + uint64_t(v.iparam(1));
}

// MODEL: a "language model" whose next token is input + 1; logs the batch layout it saw.
// out0: int64 [1 + kMaxRows * kRow]; [0] = rows; a row = num_new, qo[0..S], kv[0..S],
// last[0..S-1], kv_indices[0..kv[S]-1], input_tokens[0..num_new-1], then -1. S = iparams[0].
inline void model(const mpk::TaskView& v) {
    const MpkMeta& m = *v.meta;
    const int S = int(v.iparam(0));
    const int n = m.num_new_tokens[0];
    for (int j = 0; j < n; ++j) m.output_tokens[j] = m.input_tokens[j] + 1;
    int64_t* log = v.out<int64_t>(0);
    int64_t* row = log + 1 + log[0]++ * kRow;
    int k = 0;
    row[k++] = n;
    for (int s = 0; s <= S; ++s) row[k++] = m.qo_indptr_buffer[s];
    for (int s = 0; s <= S; ++s) row[k++] = m.paged_kv_indptr_buffer[s];
    for (int s = 0; s < S; ++s) row[k++] = m.paged_kv_last_page_len_buffer[s];
    for (int p = 0; p < m.paged_kv_indptr_buffer[S]; ++p) row[k++] = m.paged_kv_indices_buffer[p];
    for (int j = 0; j < n; ++j) row[k++] = m.input_tokens[j];
    while (k < kRow) row[k++] = -1;
}
// PEER: a cross-rank wait through TaskView::wait/signal, without a second process: waits
// until its own out0 (int64) reaches the pass number (the test sets it, as "rank 1" would),
// then signals out0 = pass + 100.
inline void peer(const mpk::TaskView& v) {
    int64_t* counter = v.out<int64_t>(0);
    if (!v.wait(counter, v.iteration, 1, MPK_PEER_DATA)) return;
    v.signal(counter, v.iteration + 100, 0);
}

// SMEM (every thread): reads its word of the block's dynamic shared memory, then writes the
// task's position there; out0 (uint64) = how many threads found a word other than the 0xFF
// poison, i.e. what an earlier task on this worker block left behind.
inline void smem_stale(const mpk::TaskView& v) {
    uint32_t* words = mpk::smem<uint32_t>(0, blockDim.x);
    const int stale = __syncthreads_count(words[threadIdx.x] != 0xFFFFFFFFu);
    words[threadIdx.x] = uint32_t(v.iparam(1));
    if (threadIdx.x == 0) *v.out<uint64_t>(0) = uint64_t(stale);
}

// STATIC_SMEM: the same through a static __shared__ array (the emulation poisons those too).
inline void static_smem_stale(const mpk::TaskView& v) {
    __shared__ uint32_t words[1024];
    const int stale = __syncthreads_count(words[threadIdx.x] != 0xFFFFFFFFu);
    words[threadIdx.x] = uint32_t(v.iparam(1));
    if (threadIdx.x == 0) *v.out<uint64_t>(0) = uint64_t(stale);
}

// FAIL: SUM, and while g_fail_armed the block's last thread (not the leader) calls task_fail (tasks/
// common.cuh) as a kernel with a bad input does; the other threads carry on (no barrier follows).
extern std::atomic<int> g_fail_armed;
inline void fail(const mpk::TaskView& v) {
    if (threadIdx.x == 0) sum(v);
    if (g_fail_armed.load() && int(threadIdx.x) == int(blockDim.x) - 1) mpk::task_fail(v, "injected task_fail");
}

// PROBE and SPIN see the handle under test (a test-harness global; the runtime has none).
void probe(const mpk::TaskView& v);
void spin(const mpk::TaskView& v);
void pair(const mpk::TaskView& v);
}  // namespace fake

namespace mpk_generated {
// Called by every thread of the worker block; thread 0 runs the fake kernel.
inline bool execute_task(const mpk::TaskView& v) {
    const bool leader = threadIdx.x == 0;
    switch (v.task->variant) {
    case fake::SUM: if (leader) fake::sum(v); return true;
    case fake::MODEL: if (leader) fake::model(v); return true;
    case fake::THROW: if (leader) throw std::runtime_error("injected failure"); return true;
    case fake::PEER: if (leader) fake::peer(v); return true;
    case fake::PROBE: if (leader) fake::probe(v); return true;
    case fake::SPIN: if (leader) fake::spin(v); return true;
    case fake::PAIR: if (leader) fake::pair(v); return true;
    case fake::SMEM: fake::smem_stale(v); return true;
    case fake::STATIC_SMEM: fake::static_smem_stale(v); return true;
    case fake::FAIL: fake::fail(v); return true;
    default: return false;
    }
}
}  // namespace mpk_generated
#define MPK_EXECUTE_TASK mpk_generated::execute_task
#include "runtime/entry.h"

namespace fake {
std::atomic<mpk::host::Kernel*> g_kernel{nullptr};
std::atomic<int> g_violations{0}, g_queued_seen{0}, g_release{0}, g_fail_armed{0};
// Set by the pre-launch test: the probe goes on (to its cap) until it has seen a task queued before
// its event fired. A correct pre-launch queues them at the pass's start without waiting for the
// probe, so only a busy machine delays them; waiting a fixed time failed under CI's load.
std::atomic<bool> g_probe_wants_violation{false};
// The monotonic clock in ns (the executor's now_ns on the CPU), so a kernel can say when it got
// somewhere and a test can time from there rather than from the launch.
int64_t steady_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
// PROBE: for iparams[0] ms, and then until it has seen at least one queued id (and, when
// g_probe_wants_violation, one queued before its event fired), at most 30 s (on a loaded machine the
// pass's ids may reach the rings late, and a probe that saw none proves nothing), checks every worker
// ring: each queued task's event has completed (event-driven dispatch: a task is enqueued only once its
// event fired). Counts what it saw.
void probe(const mpk::TaskView& v) {
    mpk::host::Kernel& k = *g_kernel.load();
    const auto now = std::chrono::steady_clock::now();
    const auto until = now + std::chrono::milliseconds(v.iparam(0)), cap = now + std::chrono::seconds(30);
    auto waiting = [&](auto t) {
        return t < until || g_queued_seen.load() == 0 || (g_probe_wants_violation.load() && g_violations.load() == 0);
    };
    for (auto t = now; waiting(t) && t < cap; t = std::chrono::steady_clock::now()) {
        for (int32_t w = 0; w < k.cfg.num_workers; ++w) {
            const int64_t head = mpk::ld_acquire(&k.worker_head[w].v), tail = mpk::ld_acquire(&k.worker_tail[w].v);
            for (int64_t h = head; h < tail; ++h) {
                const uint64_t id = mpk::ld_relaxed(&k.worker_ring[size_t(w * k.st.worker_cap + (h & (k.st.worker_cap - 1)))]);
                const int32_t pos = mpk::exec::task_position(id);
                if (pos <= 0) continue;
                ++g_queued_seen;
                const int32_t ev = k.tasks[size_t(pos)].dependent_event;
                if (ev >= 0 && mpk::ld_acquire(&k.counters[size_t(ev)]) <
                                   int64_t(k.events[size_t(ev)].num_triggers) * mpk::exec::task_iteration(id))
                    ++g_violations;
            }
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    *v.out<uint64_t>(0) = uint64_t(v.iparam(1));  // as SUM with no inputs
}
// Whether the task at `pos` has been enqueued on any worker ring of k in this launch (its event
// fired and was dispatched), taken or not: the ring keeps its last worker_cap ids.
bool enqueued(mpk::host::Kernel& k, int32_t pos) {
    for (int32_t w = 0; w < k.cfg.num_workers; ++w) {
        const int64_t tail = mpk::ld_acquire(&k.worker_tail[w].v);
        for (int64_t h = std::max<int64_t>(0, tail - k.st.worker_cap); h < tail; ++h)
            if (mpk::exec::task_position(mpk::ld_relaxed(&k.worker_ring[size_t(w * k.st.worker_cap +
                                                                               (h & (k.st.worker_cap - 1)))])) == pos)
                return true;
    }
    return false;
}
// PAIR: two "ranks" (two handles in this process, world_size 2, g_pair_kernel[rank]) exchange a
// signal per task, as allreduce does: signal g_pair[rank][position] = pass, then wait for the
// other rank's. When this rank is iparams[2] and iparams[0] > 0, first stays inside the kernel
// until task iparams[0] of this rank has been enqueued (at most 20 s; g_pair_late counts a
// timeout), so this rank's events arrive in an order the test chooses, whatever the load (it
// slept 50 ms, which a busy machine can outlast); iparams[3] = 1: only that wait, no exchange.
std::atomic<int64_t> g_pair[2][16];
std::atomic<mpk::host::Kernel*> g_pair_kernel[2];
std::atomic<int> g_pair_late{0};
void pair(const mpk::TaskView& v) {
    if (v.rank == v.iparam(2) && v.iparam(0) > 0) {
        const auto cap = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (!enqueued(*g_pair_kernel[v.rank].load(), int32_t(v.iparam(0))))
            if (std::chrono::steady_clock::now() < cap) std::this_thread::sleep_for(std::chrono::microseconds(100));
            else { ++g_pair_late; break; }
    }
    const int32_t pos = int32_t(v.iparam(1));
    if (v.iparam(3) == 1) {
        sum(v);
        return;
    }
    v.signal(reinterpret_cast<int64_t*>(&g_pair[v.rank][pos]), v.iteration, 1 - v.rank);
    if (!v.wait(reinterpret_cast<const int64_t*>(&g_pair[1 - v.rank][pos]), v.iteration, 1 - v.rank, MPK_PEER_DATA))
        return;
    sum(v);
}
// SPIN: sets g_inside (and g_inside_ns, when) as it enters, so a test waits until the task is
// inside its kernel instead of sleeping for a time it hopes is enough; stays there until the test
// sets g_release (at most 60 s, so a failed test still ends), then acts as SUM.
std::atomic<int> g_inside{0};
std::atomic<int64_t> g_inside_ns{0};
void spin(const mpk::TaskView& v) {
    g_inside_ns = steady_ns();
    g_inside = 1;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!g_release.load() && std::chrono::steady_clock::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    sum(v);
}
}  // namespace fake

// ---- harness

#include "check.h"

static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Polls `done` every millisecond for up to `deadline_s`; returns whether it held. A test waits
// this way for the state it needs (a task inside its kernel, a worker waiting on a peer, a worker
// back from its kernel) instead of sleeping for a time it hopes is enough: under TSan on a loaded
// 2-core machine a launch's threads can take a second to start. The deadline only ends a failing
// test, so it is generous.
constexpr double kStateDeadlineS = 30;
template <class F> static bool await_state(F done, double deadline_s = kStateDeadlineS) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(deadline_s));
    while (!done()) {
        if (std::chrono::steady_clock::now() >= until) return done();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

// ---- graphs: nodes with dependency sets -> tasks and events as mirage/mpk/graph.py builds them (docs/dependencies.md)

struct Node {
    int variant = fake::SUM;
    std::vector<int> deps;  // earlier nodes, ascending
    int64_t sleep_us = 0;
};

struct Graph {
    std::vector<Node> nodes;  // nodes[0] is unused (TERMINATE)
    Graph() : nodes(1) {}
    int add(std::vector<int> deps, int variant = fake::SUM, int64_t sleep_us = 0) {
        nodes.push_back(Node{variant, deps, sleep_us});
        return int(nodes.size()) - 1;
    }
    int num_tasks() const { return int(nodes.size()); }
};

constexpr uint64_t kPoison = 0xdeadbeefdeadbeefull;
constexpr int kValues = 0, kLog = 1;  // tensor indices

struct Built {
    std::vector<MpkTask> tasks;
    std::vector<MpkEvent> events;
};

// Consumers with the same dependency set share one event (num_triggers = |set|) when they are
// consecutive, so an event's waiters are one range [first_task_id, last_task_id) as
// mirage/mpk/graph.py numbers them; leaves trigger END_OF_TASK_GRAPH, the last event. `slots`
// goes to MODEL tasks.
static Built build(const Graph& g, int slots = 1) {
    const int n = g.num_tasks();
    Built b;
    b.tasks.assign(n, MpkTask{});
    b.events.push_back(MpkEvent{MPK_EVENT_TERMINATION, 0, 0, 0});
    std::vector<bool> has_consumer(n, false);
    for (int t = 1; t < n; ++t) {
        const Node& node = g.nodes[t];
        MpkTask& k = b.tasks[t];
        k.task_type = MPK_TASK_FIRST_LAYER;
        k.variant = node.variant;
        k.dependent_event = -1;
        k.iparams[0] = node.variant == fake::MODEL ? slots : node.sleep_us;
        k.iparams[1] = t;
        if (node.variant == fake::MODEL) {
            k.num_outputs = 1;
            k.tiles[0].tensor = kLog;
        } else {
            k.num_inputs = int(node.deps.size());
            k.num_outputs = 1;
            for (size_t i = 0; i < node.deps.size(); ++i) {
                k.tiles[i].tensor = kValues;
                k.tiles[i].offset = 8 * node.deps[i];
            }
            k.tiles[node.deps.size()].tensor = kValues;
            k.tiles[node.deps.size()].offset = 8 * t;
        }
        if (node.deps.empty()) continue;
        if (t > 1 && g.nodes[t - 1].deps == node.deps) {  // the previous task's event: extend its range
            k.dependent_event = b.tasks[t - 1].dependent_event;
            b.events[k.dependent_event].last_task_id = t + 1;
            continue;
        }
        const int e = int(b.events.size());
        b.events.push_back(MpkEvent{MPK_EVENT_LAUNCH_TASKS, int(node.deps.size()), t, t + 1});
        for (int d : node.deps) {
            MpkTask& p = b.tasks[d];
            p.trigger_events[p.num_triggers++] = e;
            has_consumer[d] = true;
        }
        k.dependent_event = e;
    }
    const int end = int(b.events.size());
    int leaves = 0;
    for (int t = 1; t < n; ++t)
        if (!has_consumer[t]) {
            b.tasks[t].trigger_events[b.tasks[t].num_triggers++] = end;
            ++leaves;
        }
    b.events.push_back(MpkEvent{MPK_EVENT_END_OF_TASK_GRAPH, leaves, 0, 0});
    b.tasks[0].task_type = MPK_TASK_TERMINATE;
    b.tasks[0].dependent_event = -1;
    return b;
}

static bool writes_value(int variant) {
    return variant == fake::SUM || variant == fake::PROBE || variant == fake::SPIN || variant == fake::PAIR ||
           variant == fake::FAIL;
}

static std::vector<uint64_t> expected_values(const Graph& g) {
    std::vector<uint64_t> v(g.num_tasks(), kPoison);
    for (int t = 1; t < g.num_tasks(); ++t) {
        if (!writes_value(g.nodes[t].variant)) continue;
        uint64_t acc = 0;
        for (int d : g.nodes[t].deps) acc += v[d];
        v[t] = acc * 31 + uint64_t(t);
    }
    return v;
}

static Graph chain(int n) {
    Graph g;
    g.add({});
    for (int t = 2; t <= n; ++t) g.add({t - 1});
    return g;
}
static Graph fork(int n) {  // 1 -> 2..n+1 -> each a leaf
    Graph g;
    const int root = g.add({});
    for (int i = 0; i < n; ++i) g.add({root});
    return g;
}
static Graph join(int n) {  // n roots -> 1 (n <= 7 inputs)
    Graph g;
    std::vector<int> roots;
    for (int i = 0; i < n; ++i) roots.push_back(g.add({}));
    g.add(roots);
    return g;
}
static Graph diamond() {
    Graph g;
    const int a = g.add({});
    const int b = g.add({a}), c = g.add({a});
    g.add({b, c});
    return g;
}
// Random layered DAG: up to 3 deps among the previous 12 nodes, trigger fan-out <= 7 (a
// producer triggers one event per run of consecutive consumers with one dependency set).
static Graph random_dag(int n, unsigned seed) {
    Graph g;
    std::mt19937 rng(seed);
    std::vector<int> fanout(n + 1, 0);
    for (int t = 1; t <= n; ++t) {
        std::vector<int> deps;
        const int want = t == 1 ? 0 : int(rng() % 4);
        for (int i = 0; i < want; ++i) {
            const int lo = t > 12 ? t - 12 : 1;
            const int d = lo + int(rng() % unsigned(t - lo));
            if (fanout[d] < 7 && std::find(deps.begin(), deps.end(), d) == deps.end()) deps.push_back(d);
        }
        std::sort(deps.begin(), deps.end());
        if (!deps.empty() && g.nodes.back().deps != deps)
            for (int d : deps) ++fanout[d];
        g.add(deps);
    }
    return g;
}

// ---- a kernel instance: graph + tensors + meta tensors + config

struct Meta {
    std::vector<int64_t> tokens, input_tokens, output_tokens;
    std::vector<int32_t> step, prompt_lengths, num_new_tokens, qo, kv, kv_indices, last, request_ids;
    // Sizes every buffer (one spare entry so no pointer is NULL), then fills it.
    void setup(const MpkConfig& c, const std::vector<int32_t>& prompts, const std::vector<int32_t>& steps) {
        tokens.resize(size_t(c.total_num_requests) * c.max_seq_length + 1);
        step.resize(prompts.size() + 1);
        prompt_lengths.resize(prompts.size() + 1);
        input_tokens.resize(size_t(c.max_num_batched_tokens) + 1);
        output_tokens.resize(size_t(c.max_num_batched_tokens) + 1);
        num_new_tokens.resize(1);
        qo.resize(size_t(c.max_num_batched_requests) + 1);
        kv.resize(size_t(c.max_num_batched_requests) + 1);
        kv_indices.resize(size_t(c.max_num_pages) + 1);
        last.resize(size_t(c.max_num_batched_requests) + 1);
        request_ids.resize(size_t(c.max_num_batched_requests) + 1);
        restore(c, prompts, steps);
    }
    // In place (the handle keeps the pointers): prompt r is 10*(r+1), 10*(r+1)+1, ...
    void restore(const MpkConfig& c, const std::vector<int32_t>& prompts, const std::vector<int32_t>& steps) {
        const int L = c.max_seq_length;
        for (size_t r = 0; r < prompts.size(); ++r) {
            for (int j = 0; j < L; ++j) tokens[r * L + j] = j < prompts[r] ? 10 * int64_t(r + 1) + j : 0;
            step[r] = steps[r];
            prompt_lengths[r] = prompts[r];
        }
        std::fill(input_tokens.begin(), input_tokens.end(), 0);
        std::fill(output_tokens.begin(), output_tokens.end(), 0);
        num_new_tokens[0] = 0;
        for (auto* v : {&qo, &kv, &kv_indices, &last, &request_ids}) std::fill(v->begin(), v->end(), -7);
    }
    MpkMeta view() {
        return MpkMeta{tokens.data(), step.data(), prompt_lengths.data(), input_tokens.data(),
                       output_tokens.data(), num_new_tokens.data(), qo.data(), kv.data(),
                       kv_indices.data(), last.data(), request_ids.data()};
    }
    int64_t token(const MpkConfig& c, int r, int j) const { return tokens[size_t(r) * c.max_seq_length + j]; }
};

static MpkConfig default_config() {
    MpkConfig c{};
    c.abi_version = MPK_ABI_VERSION;
    c.num_workers = 3;
    c.num_local_schedulers = 2;
    c.num_tensors = 2;
    c.test_mode = 1;
    c.watchdog_s = 5.0;  // a protocol bug shows as MPK_HANG, never as a stuck test
    c.max_seq_length = c.max_num_batched_requests = c.max_num_batched_tokens = 1;
    c.max_num_pages = c.page_size = c.total_num_requests = 1;
    c.eos_token_id = -1;
    c.world_size = 1;
    c.worker_threads = 32;  // the fake tasks below are plain host code, run once per task
    return c;
}

struct Instance {
    Graph graph;
    Built built;
    MpkConfig cfg;
    Meta meta;
    MpkMeta meta_view{};
    std::vector<uint64_t> values;
    std::vector<int64_t> log;
    std::vector<void*> tensors;
    void* handle = nullptr;
    std::string init_error;
    int status = -1;
    double seconds = 0;
    int64_t returned_ns = 0;               // fake::steady_ns() when the last launch returned
    std::atomic<int> launches_returned{0};  // another thread sees a launch end by this changing

    Instance(const Graph& g, MpkConfig c, std::vector<int32_t> prompts = {1}, std::vector<int32_t> steps = {0})
        : graph(g), cfg(c) {
        cfg.total_num_requests = int(prompts.size());
        built = build(graph, cfg.max_num_batched_requests);
        cfg.num_tasks = int(built.tasks.size());
        cfg.num_events = int(built.events.size());
        meta.setup(cfg, prompts, steps);
        reset_buffers();
    }
    ~Instance() { mpk_finalize(handle); }
    void reset_buffers() {  // in place once allocated: the handle keeps the pointers
        values.resize(graph.num_tasks());
        log.resize(1 + fake::kMaxRows * fake::kRow);
        std::fill(values.begin(), values.end(), kPoison);
        std::fill(log.begin(), log.end(), 0);
        tensors = {values.data(), log.data()};
        meta_view = meta.view();
    }
    bool init() {
        char err[512];
        handle = mpk_init(&cfg, built.tasks.data(), built.events.data(), tensors.data(), &meta_view, err, sizeof err);
        init_error = err;
        return handle != nullptr;
    }
    int launch() {
        const auto t0 = std::chrono::steady_clock::now();
        status = mpk_launch(handle);
        seconds = seconds_since(t0);
        returned_ns = fake::steady_ns();
        ++launches_returned;
        return status;
    }
    std::string message() const {
        char buf[2048];
        mpk_error_message(handle, buf, sizeof buf);
        return buf;
    }
    std::vector<int64_t> progress() const {
        std::vector<int64_t> p(cfg.num_tasks);
        mpk_task_progress(handle, p.data(), int(p.size()));
        return p;
    }
    std::vector<int64_t> counters() const {
        std::vector<int64_t> p(cfg.num_events);
        mpk_event_counters(handle, p.data(), int(p.size()));
        return p;
    }
    std::vector<MpkWorkerState> snapshot() const {
        std::vector<MpkWorkerState> s(cfg.num_workers);
        mpk_snapshot(handle, s.data(), int(s.size()));
        return s;
    }
    // After a clean run of `passes` passes: every SUM value right, every task completed in
    // the last pass, every counter = num_triggers * passes, every worker DONE.
    bool check_clean_run(int64_t passes, const char* what) {
        const int before = g_failures;
        CHECK(status == MPK_OK, "%s: status %d, message '%s'", what, status, message().c_str());
        CHECK(mpk_iterations(handle) == passes, "%s: %lld passes, expected %lld", what,
              (long long)mpk_iterations(handle), (long long)passes);
        const std::vector<uint64_t> want = expected_values(graph);
        for (int t = 1; t < graph.num_tasks(); ++t)
            if (writes_value(graph.nodes[t].variant))
                CHECK(values[t] == want[t], "%s: task %d value %llx, expected %llx", what, t,
                      (unsigned long long)values[t], (unsigned long long)want[t]);
        const std::vector<int64_t> p = progress();
        for (int t = 1; t < cfg.num_tasks; ++t) CHECK(p[t] == passes, "%s: task %d progress %lld", what, t, (long long)p[t]);
        const std::vector<int64_t> c = counters();
        for (int e = 0; e < cfg.num_events; ++e)
            CHECK(c[e] == built.events[e].num_triggers * passes, "%s: event %d counter %lld, expected %lld", what, e,
                  (long long)c[e], (long long)(built.events[e].num_triggers * passes));
        for (const MpkWorkerState& s : snapshot())
            CHECK(s.state == MPK_WORKER_DONE, "%s: worker %d state %d after a clean run", what, s.worker, s.state);
        return g_failures == before;
    }
};

// The handle's launch count as mpk_launch publishes it, under the handle's mutex once reset_launch
// has rewritten the slots, counters and progress with plain stores: a thread that watches a
// launch (mpk_snapshot, mpk_task_progress) starts reading only once this has moved past its value
// from before the launch, which orders its reads after that reset (TSan reports them otherwise).
static uint64_t launch_generation(const Instance& in) {
    mpk::host::Kernel& k = *static_cast<mpk::host::Kernel*>(in.handle);
    std::lock_guard<std::mutex> lock(k.mu);
    return k.generation;
}

static void check_row(const std::vector<int64_t>& log, int r, std::vector<int64_t> want, const char* what) {
    want.resize(fake::kRow, -1);
    const int64_t* row = log.data() + 1 + r * fake::kRow;
    for (int k = 0; k < fake::kRow; ++k)
        CHECK(row[k] == want[k], "%s: log row %d entry %d = %lld, expected %lld", what, r, k, (long long)row[k],
              (long long)want[k]);
}

// The part of a message from `from` up to `to` (or its end) for a summary line; the whole message
// when `from` is missing (a failed check reports it; substr(npos) would throw and end the run).
static std::string excerpt(const std::string& msg, const char* from, const char* to = nullptr) {
    const size_t a = msg.find(from);
    if (a == std::string::npos) return msg;
    return msg.substr(a, to ? msg.find(to, a) - a : std::string::npos);
}

template <class T> static void check_vec(const std::vector<T>& got, std::vector<T> want, const char* what) {
    for (size_t i = 0; i < want.size(); ++i)
        CHECK(i < got.size() && got[i] == want[i], "%s[%zu] = %lld, expected %lld", what, i,
              (long long)(i < got.size() ? got[i] : -999), (long long)want[i]);
}

// ---- tests: topologies x workers/schedulers x jitter, test mode

static void test_topologies() {
    struct Shape { const char* name; Graph g; };
    const std::vector<Shape> shapes = {{"chain20", chain(20)}, {"fork12", fork(12)}, {"join7", join(7)},
                                       {"diamond", diamond()}, {"random300", random_dag(300, 7)}};
    const int configs[][2] = {{1, 1}, {3, 1}, {8, 2}, {8, 4}, {2, 4}};  // workers, schedulers
    for (const Shape& shape : shapes) {
        int runs = 0;
        const int before = g_failures;
        const auto t0 = std::chrono::steady_clock::now();
        for (const auto& ws : configs)
            for (uint64_t seed = 0; seed <= 7; ++seed)
                for (int ranks = 1; ranks <= 2; ++ranks)  // 2: each worker runs its tasks in position order
                    for (int32_t dispatch : {MPK_DISPATCH_EVENT, MPK_DISPATCH_MPK}) {
                        MpkConfig c = default_config();
                        c.dispatch = dispatch;
                        c.num_workers = ws[0];
                        c.num_local_schedulers = ws[1];
                        c.jitter = seed > 0;
                        c.jitter_seed = seed;
                        c.world_size = ranks;
                        Instance in(shape.g, c);
                        CHECK(in.init(), "%s: mpk_init: %s", shape.name, in.init_error.c_str());
                        in.launch();
                        in.check_clean_run(1, shape.name);
                        ++runs;
                    }
        printf("topology %-10s tasks %3d: %2d runs (workers x schedulers 1x1 3x1 8x2 8x4 2x4, jitter off + seeds 1..7, "
               "world_size 1 and 2, dispatch event and mpk), values/progress/counters exact, %.2f s %s\n",
               shape.name, shape.g.num_tasks() - 1, runs, seconds_since(t0), g_failures == before ? "PASS" : "FAIL");
    }
}

// ---- tests: meta tensors in test mode

static void test_meta_default() {
    const int before = g_failures;
    Instance in(diamond(), default_config());  // every param 1, prompt [1], step [0]
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    in.check_clean_run(1, "meta default");
    check_vec(in.meta.qo, {0, 1}, "qo_indptr");
    check_vec(in.meta.kv, {0, 1}, "paged_kv_indptr");
    check_vec(in.meta.kv_indices, {0}, "paged_kv_indices");
    check_vec(in.meta.last, {1}, "paged_kv_last_page_len");
    check_vec(in.meta.num_new_tokens, {1}, "num_new_tokens");
    check_vec(in.meta.input_tokens, {10}, "input_tokens");
    check_vec(in.meta.step, {1}, "step");
    check_vec(in.meta.tokens, {10}, "tokens");  // nothing written: step 1 >= max_seq_length 1
    printf("meta default (all params 1): qo [0,1] kv [0,1] indices [0] last [1] new [1], step -> [1], tokens "
           "untouched %s\n", g_failures == before ? "PASS" : "FAIL");
}

static void test_meta_multi_request() {
    const int before = g_failures;
    MpkConfig c = default_config();
    c.max_seq_length = 4;
    c.max_num_batched_requests = 2;
    c.max_num_batched_tokens = 4;
    c.max_num_pages = 4;
    c.page_size = 2;
    Graph g = diamond();
    g.add({}, fake::MODEL);
    Instance in(g, c, {2, 3, 1}, {0, 0, 0});
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    in.check_clean_run(1, "meta multi-request");
    // r0 prefill 2 (page 0), r1 prefill min(3, 2) = 2 (page 1); r2 waits (slots full)
    check_row(in.log, 0, {4, 0, 2, 4, 0, 1, 2, 2, 2, 0, 1, 10, 11, 20, 21}, "multi");
    check_vec(in.meta.step, {2, 2, 0}, "step");
    check_vec(in.meta.tokens, {10, 11, 12, 0, 20, 21, 22, 0, 30, 0, 0, 0}, "tokens");  // r0 emitted 11+1
    printf("meta 3 requests, page_size 2, 2 slots, 4 tokens: qo [0,2,4] kv [0,1,2] last [2,2], step -> [2,2,0], "
           "r0 emits at position 2 %s\n", g_failures == before ? "PASS" : "FAIL");
}

static void test_meta_prefilled_step() {
    const int before = g_failures;
    MpkConfig c = default_config();
    c.max_seq_length = 8;
    c.max_num_batched_requests = 2;
    c.max_num_batched_tokens = 4;
    c.max_num_pages = 8;
    c.page_size = 2;
    Graph g;
    g.add({}, fake::MODEL);
    g.add({1});
    // r0: prompt 4 fully cached (step 4): one decode token tokens[0,4], 5 tokens -> 3 pages.
    // r1: prompt 5, 2 cached: prefill the last 3, 5 tokens -> 3 pages (first 1 = the cache).
    Instance in(g, c, {4, 5}, {4, 2});
    in.meta.tokens[4] = 77;  // the decode input at position 4 of r0
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    in.check_clean_run(1, "meta prefilled");
    check_row(in.log, 0, {4, 0, 1, 4, 0, 3, 6, 1, 1, 0, 1, 2, 3, 4, 5, 77, 22, 23, 24}, "prefilled");
    check_vec(in.meta.step, {5, 5}, "step");
    CHECK(in.meta.token(c, 0, 5) == 78, "r0 output at position 5: %lld", (long long)in.meta.token(c, 0, 5));
    CHECK(in.meta.token(c, 1, 5) == 25, "r1 output at position 5: %lld", (long long)in.meta.token(c, 1, 5));
    printf("meta pre-filled step [4,2], page_size 2: cached pages first, kv [0,3,6] last [1,1], step -> [5,5], "
           "outputs at position 5 %s\n", g_failures == before ? "PASS" : "FAIL");
}

// ---- tests: the offline loop (test_mode 0)

static void test_offline_loop() {
    const int before = g_failures;
    MpkConfig c = default_config();
    c.test_mode = 0;
    c.num_workers = 4;
    c.max_seq_length = 6;
    c.max_num_batched_requests = 2;
    c.max_num_batched_tokens = 4;
    c.max_num_pages = 8;
    c.page_size = 2;
    c.jitter = 1;
    c.jitter_seed = 11;
    Graph g = diamond();
    g.add({4}, fake::MODEL);
    Instance in(g, c, {3, 2}, {0, 0});
    CHECK(in.init(), "%s", in.init_error.c_str());
    for (int launch = 0; launch < 2; ++launch) {  // the second launch proves per-launch reset
        if (launch) {
            in.meta.restore(in.cfg, {3, 2}, {0, 0});  // as Python would restore step / tokens
            in.reset_buffers();
        }
        in.launch();
        in.check_clean_run(5, "offline loop");
        // rows: num_new | qo[3] | kv[3] | last[2] | kv indices | input tokens
        check_row(in.log, 0, {4, 0, 3, 4, 0, 2, 3, 1, 1, 0, 1, 2, 10, 11, 12, 20}, "offline it1");
        check_row(in.log, 1, {2, 0, 1, 2, 0, 2, 3, 2, 2, 0, 1, 2, 13, 21}, "offline it2");
        check_row(in.log, 2, {2, 0, 1, 2, 0, 3, 5, 1, 1, 0, 1, 3, 2, 4, 14, 22}, "offline it3");
        check_row(in.log, 3, {1, 0, 1, 1, 0, 2, 2, 2, 0, 2, 4, 23}, "offline it4");
        check_row(in.log, 4, {1, 0, 1, 1, 0, 3, 3, 1, 0, 2, 4, 5, 24}, "offline it5");
        CHECK(in.log[0] == 5, "model ran %lld times", (long long)in.log[0]);
        check_vec(in.meta.tokens, {10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 24, 25}, "tokens");
        check_vec(in.meta.step, {5, 5}, "step");  // done at step + 1 >= 6: the last token is emitted, not run
        check_vec(in.meta.qo, {0, 0, 0}, "final qo_indptr");
        check_vec(in.meta.num_new_tokens, {0}, "final num_new_tokens");
    }
    printf("offline loop prompts [3,2], 4 tokens, max_seq_length 6, page_size 2: 5 passes, per-pass "
           "layouts and tokens exact, twice on one handle %s\n", g_failures == before ? "PASS" : "FAIL");
}

static void test_offline_eos() {
    const int before = g_failures;
    MpkConfig c = default_config();
    c.test_mode = 0;
    c.max_seq_length = 6;
    c.max_num_batched_requests = 2;
    c.max_num_batched_tokens = 4;
    c.max_num_pages = 8;
    c.page_size = 2;
    c.eos_token_id = 23;  // r1 emits 22, then 23 and stops; r0 reaches max_seq_length then
    Graph g;
    g.add({}, fake::MODEL);
    Instance in(g, c, {3, 2}, {0, 0});
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    in.check_clean_run(3, "offline eos");
    check_row(in.log, 2, {2, 0, 1, 2, 0, 3, 5, 1, 1, 0, 1, 3, 2, 4, 14, 22}, "eos it3");
    CHECK(in.log[0] == 3, "model ran %lld times", (long long)in.log[0]);
    check_vec(in.meta.tokens, {10, 11, 12, 13, 14, 15, 20, 21, 22, 23, 0, 0}, "tokens");
    check_vec(in.meta.step, {5, 3}, "step");  // without eos r1 would run to step 5 (5 passes)
    printf("offline loop with eos_token_id 23: r1 stops at step 3 on its eos, r0 at max_seq_length, 3 passes %s\n",
           g_failures == before ? "PASS" : "FAIL");
}

// ---- tests: statuses

static void test_nothing_scheduled() {
    const int before = g_failures;
    MpkConfig c = default_config();
    c.max_num_batched_tokens = 0;
    Instance in(diamond(), c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    const std::string msg = in.message();
    CHECK(in.status == MPK_NOTHING_SCHEDULED, "status %d", in.status);
    for (const char* word : {"total_num_requests=1", "prompt_lengths=[1]", "step=[0]", "max_num_batched_tokens=0"})
        CHECK(msg.find(word) != std::string::npos, "message lacks '%s': %s", word, msg.c_str());
    for (int64_t p : in.progress()) CHECK(p == 0, "a task ran");
    for (int t = 1; t < 5; ++t) CHECK(in.values[t] == kPoison, "task %d wrote", t);
    CHECK(mpk_iterations(in.handle) == 0, "passes %lld", (long long)mpk_iterations(in.handle));
    printf("max_num_batched_tokens 0 -> MPK_NOTHING_SCHEDULED, zero tasks ran: \"%s\" %s\n", msg.c_str(),
           g_failures == before ? "PASS" : "FAIL");
}

static void test_invalid_at_launch() {
    const int before = g_failures;
    MpkConfig c = default_config();
    c.max_seq_length = 4;
    c.max_num_batched_tokens = 4;
    c.max_num_pages = 2;  // the prompt needs 4 pages of 1
    Instance dry(diamond(), c, {4}, {0});
    CHECK(dry.init(), "%s", dry.init_error.c_str());
    dry.launch();
    std::string msg = dry.message();
    CHECK(dry.status == MPK_INVALID, "status %d", dry.status);
    CHECK(msg.find("request 0 needs 4") != std::string::npos && msg.find("max_num_pages = 2") != std::string::npos,
          "%s", msg.c_str());
    for (int64_t p : dry.progress()) CHECK(p == 0, "a task ran");
    printf("free pages run dry -> MPK_INVALID: \"%s\" %s\n", msg.c_str(), g_failures == before ? "PASS" : "FAIL");

    const int before2 = g_failures;
    Instance zero(diamond(), default_config(), {0}, {0});
    CHECK(zero.init(), "%s", zero.init_error.c_str());
    zero.launch();
    msg = zero.message();
    CHECK(zero.status == MPK_INVALID && msg.find("prompt_lengths[0] = 0") != std::string::npos, "%d %s", zero.status,
          msg.c_str());
    printf("prompt_lengths [0] -> MPK_INVALID at init_kernel: \"%s\" %s\n", msg.c_str(),
           g_failures == before2 ? "PASS" : "FAIL");
}

static void test_kernel_exception() {
    const int before = g_failures;
    Graph g = chain(3);
    g.add({3}, fake::THROW);
    g.add({4});
    MpkConfig c = default_config();
    c.num_workers = 4;
    Instance in(g, c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    const std::string msg = in.message();
    CHECK(in.status == MPK_INTERNAL && msg.find("task 4") != std::string::npos &&
              msg.find("injected failure") != std::string::npos, "%d %s", in.status, msg.c_str());
    CHECK(in.progress()[5] == 0, "the consumer of the failed task ran");
    printf("a kernel that throws -> MPK_INTERNAL, process alive: \"%s\" %s\n", msg.c_str(),
           g_failures == before ? "PASS" : "FAIL");
}

// task_fail from a thread other than the leader, in two tasks that may run side by side on two workers:
// MPK_TASK_FAILED naming one of them (the first failure wins), the consumer never runs; disarmed, the next
// launch of the same handle is a clean run (the record is reset per launch, the worker threads are back).
static void test_task_fail_then_clean_launch() {
    const int before = g_failures;
    Graph g = chain(3);
    g.add({3}, fake::FAIL);
    g.add({3}, fake::FAIL);
    g.add({4, 5});
    MpkConfig c = default_config();
    c.num_workers = 4;
    Instance in(g, c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    fake::g_fail_armed = 1;
    in.launch();
    const std::string msg = in.message();
    const bool named = msg.find("task 4 (") == 0 || msg.find("task 5 (") == 0;
    CHECK(in.status == MPK_TASK_FAILED && named && msg.find("failed: injected task_fail (thread ") != std::string::npos,
          "%d %s", in.status, msg.c_str());
    CHECK(in.progress()[6] == 0, "the consumer of a failed task ran");
    fake::g_fail_armed = 0;
    in.reset_buffers();
    in.launch();
    in.check_clean_run(1, "the launch after a task failure");
    printf("task_fail in two tasks -> MPK_TASK_FAILED \"%s\", then a clean launch of the same handle %s\n",
           msg.c_str(), g_failures == before ? "PASS" : "FAIL");
}

static void test_unknown_variant() {
    const int before = g_failures;
    Graph g = chain(3);
    g.add({3}, 99);  // a variant the dispatcher above does not have
    g.add({4});
    Instance in(g, default_config());
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    const std::string msg = in.message();
    CHECK(in.status == MPK_INVALID && msg.find("task 4 has variant 99") != std::string::npos, "%d %s", in.status,
          msg.c_str());
    CHECK(in.progress()[5] == 0, "the consumer of the undispatched task ran");
    printf("a variant the dispatcher lacks -> MPK_INVALID, not a silent no-op: \"%s\" %s\n", msg.c_str(),
           g_failures == before ? "PASS" : "FAIL");
}

// ---- tests: watchdog

static void test_hang() {
    for (int variant = 0; variant < 2; ++variant) {
        const int before = g_failures;
        // event 1 needs 2 triggers but only task 1 triggers it: it never fires, so task 2 is never
        // enqueued (event-driven dispatch) and every worker ends up idle.
        Graph g;
        g.add({});
        g.add({1});
        g.add({});  // an unrelated leaf that finishes
        MpkConfig c = default_config();
        c.watchdog_s = 0.3;
        c.num_workers = variant ? 8 : 2;
        c.num_local_schedulers = variant ? 3 : 1;
        c.jitter = variant;
        c.jitter_seed = 5;
        c.profile = 1;  // the task record's end times: when the last progress happened
        Instance in(g, c);
        in.built.events[1].num_triggers = 2;
        std::vector<int64_t> rec(size_t(MPK_RECORD_FIELDS) * size_t(in.cfg.num_tasks), -1);
        in.cfg.task_record = rec.data();
        CHECK(in.init(), "%s", in.init_error.c_str());
        in.launch();
        const std::string msg = in.message();
        CHECK(in.status == MPK_HANG, "status %d", in.status);
        // The watchdog's clock starts at the last progress (tasks 1 and 3 ending), not at the launch:
        // before them the first launch starts the threads and their fibers, and the tasks run, all
        // slow under TSan on a loaded machine. The record's times are the monotonic clock's ns.
        const int64_t last_end = std::max(rec[1 * MPK_RECORD_FIELDS + 2], rec[3 * MPK_RECORD_FIELDS + 2]);
        const double idle_s = double(in.returned_ns - last_end) * 1e-9;
        CHECK(rec[1 * MPK_RECORD_FIELDS + 2] > 0 && rec[3 * MPK_RECORD_FIELDS + 2] > 0 && in.seconds >= c.watchdog_s &&
                  idle_s >= c.watchdog_s && idle_s < c.watchdog_s + 0.5,
              "HANG %.3f s after the launch, %.3f s after the last task ended (watchdog_s %.2f)", in.seconds, idle_s,
              c.watchdog_s);
        for (const MpkWorkerState& s : in.snapshot())
            CHECK(s.state == MPK_WORKER_IDLE && s.task == -1, "worker %d state %d task %lld: task 2 was enqueued",
                  s.worker, s.state, (long long)s.task);
        const std::vector<int64_t> p = in.progress(), e = in.counters();
        CHECK(p[1] == 1 && p[2] == 0 && p[3] == 1, "progress %lld %lld %lld", (long long)p[1], (long long)p[2],
              (long long)p[3]);
        CHECK(e[1] == 1 && e[2] == 1, "event counters %lld %lld", (long long)e[1], (long long)e[2]);
        CHECK(mpk_iterations(in.handle) == 0, "passes %lld", (long long)mpk_iterations(in.handle));
        CHECK(msg.find("event 1 of pass 1 never fired (counter 1, needs 2): tasks 2..2 not started") != std::string::npos,
              "%s", msg.c_str());
        printf("missing trigger (%d workers, %d schedulers, jitter %d) -> MPK_HANG %.3f s after the last task ended "
               "(watchdog_s 0.3), no worker holds the starved task: \"%s\" %s\n", c.num_workers,
               c.num_local_schedulers, c.jitter, idle_s, msg.c_str(), g_failures == before ? "PASS" : "FAIL");
    }
}

// A wait on a peer's counter shows as WAITING on that rank (the watchdog fires, the snapshot
// and message name the rank); once the counter arrives the task finishes, and the pass
// number the kernel sees keeps counting across launches (signals only grow). The "peer" signals
// only once the task shows as WAITING on it, so the task is seen to wait and then to resume.
static void test_peer_wait() {
    const int before = g_failures;
    Graph g;
    const int t = g.add({}, fake::PEER);
    MpkConfig c = default_config();
    c.watchdog_s = 0.3;
    Instance in(g, c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    __atomic_store_n(reinterpret_cast<int64_t*>(&in.values[t]), int64_t(0), __ATOMIC_RELEASE);
    in.launch();
    const std::string msg = in.message();
    CHECK(in.status == MPK_HANG, "status %d", in.status);
    int waiting = 0;
    for (const MpkWorkerState& s : in.snapshot())
        if (s.state == MPK_WORKER_WAITING && s.task == t) {
            ++waiting;
            CHECK(s.peer == 1 && s.peer_wait == MPK_PEER_DATA && s.event == -1 && s.counter == 0 && s.needed == 1,
                  "peer %d wait %d event %d counter %lld needs %lld", s.peer, s.peer_wait, s.event,
                  (long long)s.counter, (long long)s.needed);
        }
    CHECK(waiting == 1, "%d workers wait at the peer task", waiting);
    CHECK(msg.find("waits for rank 1 (its signal): counter 0, needs 1") != std::string::npos, "%s", msg.c_str());
    CHECK(in.progress()[t] == 0, "the peer task completed without its signal");

    MpkConfig c2 = default_config();
    Instance ok(g, c2);
    CHECK(ok.init(), "%s", ok.init_error.c_str());
    int64_t* counter = reinterpret_cast<int64_t*>(&ok.values[t]);
    for (int64_t pass = 1; pass <= 2; ++pass) {
        __atomic_store_n(counter, pass - 1, __ATOMIC_RELEASE);
        ok.meta.restore(ok.cfg, {1}, {0});
        const int launches = ok.launches_returned;
        const uint64_t generation = launch_generation(ok);
        std::thread peer([&] {  // (it slept 20 ms: on a loaded machine the task had not begun to wait)
            const bool waiting = await_state([&] {
                if (ok.launches_returned != launches) return true;  // the launch ended without waiting
                if (launch_generation(ok) == generation) return false;  // not begun: the slots are being reset
                for (const MpkWorkerState& s : ok.snapshot())
                    if (s.state == MPK_WORKER_WAITING && s.task == t && s.peer == 1) return true;
                return false;
            });
            CHECK(waiting && ok.launches_returned == launches, "launch %lld: the peer task never showed as WAITING on "
                  "rank 1 (%s)", (long long)pass, waiting ? "the launch returned first" : "30 s");
            __atomic_store_n(counter, pass, __ATOMIC_RELEASE);
        });
        ok.launch();
        peer.join();
        CHECK(ok.status == MPK_OK, "launch %lld: status %d %s", (long long)pass, ok.status, ok.message().c_str());
        CHECK(__atomic_load_n(counter, __ATOMIC_ACQUIRE) == pass + 100, "launch %lld: signalled %lld",
              (long long)pass, (long long)__atomic_load_n(counter, __ATOMIC_ACQUIRE));
    }
    printf("peer wait: no signal -> MPK_HANG naming rank 1 (\"...%s\"); with the signal -> OK, pass number 1 "
           "then 2 across launches %s\n", excerpt(msg, "waits for rank", ";").c_str(),
           g_failures == before ? "PASS" : "FAIL");
}

static void test_long_task_is_not_a_hang() {
    const int before = g_failures;
    Graph g;
    g.add({});
    g.add({1}, fake::SUM, 500000);  // 0.5 s = 2 x watchdog_s inside the kernel
    g.add({2});
    MpkConfig c = default_config();
    c.watchdog_s = 0.25;
    Instance in(g, c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    in.launch();
    in.check_clean_run(1, "long task");
    CHECK(in.seconds >= 0.5, "launch took %.3f s", in.seconds);
    printf("one task sleeping 0.5 s with watchdog_s 0.25 -> MPK_OK in %.3f s %s\n", in.seconds,
           g_failures == before ? "PASS" : "FAIL");
}

// ---- tests: mpk_init validation

static void test_init_rejects() {
    const int before = g_failures;
    struct Case {
        const char* name;
        const char* expect;
        void (*mutate)(Instance&);
    };
    const Case cases[] = {
        {"abi_version", "abi_version 99", [](Instance& in) { in.cfg.abi_version = 99; }},
        {"num_workers 0", "num_workers = 0", [](Instance& in) { in.cfg.num_workers = 0; }},
        {"num_local_schedulers 0", "num_local_schedulers = 0", [](Instance& in) { in.cfg.num_local_schedulers = 0; }},
        {"num_tasks 1", "num_tasks = 1", [](Instance& in) { in.cfg.num_tasks = 1; }},
        {"page_size 0", "page_size = 0", [](Instance& in) { in.cfg.page_size = 0; }},
        {"dependent_event out of range", "dependent_event 9", [](Instance& in) { in.built.tasks[2].dependent_event = 9; }},
        {"waits on event 0", "waits on event 0", [](Instance& in) { in.built.tasks[2].dependent_event = 0; }},
        {"waits on END", "waits on END_OF_TASK_GRAPH", [](Instance& in) { in.built.tasks[2].dependent_event = 3; }},
        {"trigger out of range", "trigger event 7", [](Instance& in) { in.built.tasks[1].trigger_events[0] = 7; }},
        {"trigger after waiter", "task 4 triggers event 1, which task 2 waits on",
         [](Instance& in) { in.built.tasks[4].trigger_events[in.built.tasks[4].num_triggers++] = 1; }},
        {"END num_triggers", "num_triggers 5 but 1 task triggers", [](Instance& in) { in.built.events[3].num_triggers = 5; }},
        {"no trigger", "num_triggers = 0", [](Instance& in) { in.built.tasks[2].num_triggers = 0; }},
        {"too many triggers", "num_triggers = 9", [](Instance& in) { in.built.tasks[2].num_triggers = 9; }},
        {"too many tiles", "at most 12 tiles", [](Instance& in) { in.built.tasks[2].num_inputs = MPK_MAX_TILES; }},
        {"tile tensor", "tensor 5 outside [0, 2)", [](Instance& in) { in.built.tasks[2].tiles[0].tensor = 5; }},
        {"null tensor", "tensor_ptrs[1] is NULL", [](Instance& in) { in.tensors[1] = nullptr; }},
        {"null meta", "meta tensor step is NULL", [](Instance& in) { in.meta_view.step = nullptr; }},
        {"TERMINATE first", "tasks[0].task_type", [](Instance& in) { in.built.tasks[0].task_type = 100; }},
        {"too many schedulers", "num_local_schedulers = 300", [](Instance& in) { in.cfg.num_local_schedulers = 300; }},
        {"waiter outside its range", "task 3 waits on event 1, whose task range [2, 3) does not hold it",
         [](Instance& in) { in.built.events[1].last_task_id = 3; }},
        {"range outside the tasks", "event 2: task range [4, 9) is not inside",
         [](Instance& in) { in.built.events[2].last_task_id = 9; }},
        {"END launches", "event 3 (END_OF_TASK_GRAPH) has the task range [1, 2)",
         [](Instance& in) { in.built.events[3].first_task_id = 1; in.built.events[3].last_task_id = 2; }},
        {"fires early", "event 2 has num_triggers 1 but 2 task triggers point at it",
         [](Instance& in) { in.built.events[2].num_triggers = 1; }},
        {"never fires", "event 2 launches tasks [4, 5) but has num_triggers 0",
         [](Instance& in) { in.built.events[2].num_triggers = 0; }},
    };
    int rejected = 0;
    for (const Case& k : cases) {
        Instance in(diamond(), default_config());  // events: 0 TERM, 1 {1}: [2, 4), 2 {2,3}: [4, 5), 3 END
        k.mutate(in);
        const bool ok = in.init();
        CHECK(!ok && in.init_error.find(k.expect) != std::string::npos, "%s: handle %p, message '%s'", k.name,
              in.handle, in.init_error.c_str());
        rejected += !ok;
    }
    char err[256];
    CHECK(mpk_init(nullptr, nullptr, nullptr, nullptr, nullptr, err, sizeof err) == nullptr, "null config accepted");
    printf("mpk_init rejects %d/%zu bad inputs with a message, e.g. \"%s\" %s\n", rejected, sizeof cases / sizeof cases[0], err,
           g_failures == before ? "PASS" : "FAIL");
}

// ---- tests: handles

static void test_two_handles_concurrently() {
    const int before = g_failures;
    MpkConfig c = default_config();
    c.num_workers = 4;
    c.jitter = 1;
    Instance a(random_dag(200, 1), c), b(random_dag(150, 2), c);
    a.cfg.jitter_seed = 21;
    b.cfg.jitter_seed = 22;
    CHECK(a.init() && b.init(), "%s %s", a.init_error.c_str(), b.init_error.c_str());
    for (int round = 0; round < 5; ++round) {
        a.reset_buffers();  // same storage, poisoned again; step restored (a launch advances it)
        b.reset_buffers();
        a.meta.restore(a.cfg, {1}, {0});
        b.meta.restore(b.cfg, {1}, {0});
        std::thread ta([&] { a.launch(); });
        std::thread tb([&] { b.launch(); });
        ta.join();
        tb.join();
        a.check_clean_run(1, "handle a");
        b.check_clean_run(1, "handle b");
    }
    printf("two handles of one module, 4 workers each, launched concurrently 5 times: both exact %s\n",
           g_failures == before ? "PASS" : "FAIL");
}

// The second mpk_launch comes while the first launch's task is inside its kernel (SPIN, held until
// released): it slept 50 ms into a 200 ms task, and on a loaded machine the first launch had not
// begun by then, or had ended.
static void test_concurrent_launch_refused() {
    const int before = g_failures;
    Graph g;
    g.add({}, fake::SPIN);
    Instance in(g, default_config());
    CHECK(in.init(), "%s", in.init_error.c_str());
    fake::g_release = 0;
    fake::g_inside = 0;
    std::thread t([&] { in.launch(); });
    CHECK(await_state([] { return fake::g_inside.load() == 1; }), "the first launch's task was not inside its kernel "
          "within %.0f s", kStateDeadlineS);
    CHECK(mpk_launch(in.handle) == MPK_INVALID, "a second concurrent launch was accepted");
    fake::g_release = 1;
    t.join();
    in.check_clean_run(1, "first launch");
    int64_t sizes[6];
    CHECK(mpk_abi_sizes(sizes, 6) == 6 && sizes[1] == sizeof(MpkTask) && mpk_abi_version() == MPK_ABI_VERSION,
          "abi sizes/version");
    printf("a second mpk_launch on a running handle -> MPK_INVALID; abi sizes %lld %lld %lld %lld %lld %lld %s\n",
           (long long)sizes[0], (long long)sizes[1], (long long)sizes[2], (long long)sizes[3], (long long)sizes[4],
           (long long)sizes[5], g_failures == before ? "PASS" : "FAIL");
}

// The in-kernel watchdog (Spin, executor.cuh), the backstop behind the host's: with the host's
// supervisor off (watchdog_s = 0) and only the executor's deadline set, the starved graph of
// test_hang still ends, as MPK_HANG from inside the kernel, after twice that deadline, under both
// dispatch models. (On the GPU this is the only watchdog when the host cannot ask.)
static void test_in_kernel_watchdog() {
    for (int32_t dispatch : {MPK_DISPATCH_EVENT, MPK_DISPATCH_MPK}) {
        const int before = g_failures;
        Graph g;
        g.add({});
        g.add({1});
        g.add({});
        MpkConfig c = default_config();
        c.watchdog_s = 0;  // the supervisor's watchdog (and the stuck check) off
        c.dispatch = dispatch;
        Instance in(g, c);
        in.built.events[1].num_triggers = 2;
        CHECK(in.init(), "%s", in.init_error.c_str());
        mpk::host::Kernel& k = *static_cast<mpk::host::Kernel*>(in.handle);
        k.st.watchdog_ns = 100 * 1000 * 1000;  // 0.1 s: fires after 0.2 s without progress
        in.launch();
        const std::string msg = in.message();
        CHECK(in.status == MPK_HANG, "status %d: %s", in.status, msg.c_str());
        CHECK(msg.find("watchdog (in the kernel): no task finished and no task ran for ") == 0 &&
                  msg.find("event 1 of pass 1 never fired") != std::string::npos, "%s", msg.c_str());
        CHECK(in.seconds >= 0.2 && in.seconds < 0.2 + k.start_s + 2.0, "HANG after %.3f s", in.seconds);
        printf("in-kernel watchdog alone (dispatch %s, host's off) -> MPK_HANG after %.3f s (deadline 2 x 0.1 s): "
               "\"%s\" %s\n", dispatch == MPK_DISPATCH_MPK ? "mpk" : "event", in.seconds, msg.c_str(),
               g_failures == before ? "PASS" : "FAIL");
    }
}

// ---- tests: MPK's event-driven dispatch, the scheduler ring's bound, the stuck-in-kernel limit

// The probe graph under one dispatch model: PROBE (task 1) inspects every worker ring while it runs
// (fake::probe counts the queued ids and those whose event had not fired yet); 40 first tasks and
// 20 tasks that wait on PROBE. The values must be exact either way.
static void run_probe_graph(int32_t dispatch, const char* label) {
    Graph g;
    const int p = g.add({}, fake::PROBE, 60);
    for (int i = 0; i < 40; ++i) g.add({});
    for (int i = 0; i < 20; ++i) g.add({p});
    MpkConfig c = default_config();
    c.num_workers = 2;
    c.num_local_schedulers = 2;
    c.dispatch = dispatch;
    Instance in(g, c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    fake::g_violations = 0;
    fake::g_queued_seen = 0;
    fake::g_kernel = static_cast<mpk::host::Kernel*>(in.handle);
    in.launch();
    fake::g_kernel = nullptr;
    in.check_clean_run(1, label);
}

// A task is enqueued only once its event has fired: the 20 tasks that wait on PROBE must not be in
// any ring until it finishes. (The former executor queued every task of a pass at its start: this
// test fails on it.)
static void test_event_driven_dispatch() {
    const int before = g_failures;
    run_probe_graph(MPK_DISPATCH_EVENT, "event-driven dispatch");
    CHECK(fake::g_violations == 0, "%d queued ids whose event had not fired", fake::g_violations.load());
    CHECK(fake::g_queued_seen > 0, "the probe never saw a queued task: vacuous");
    printf("event-driven dispatch: while task 1 ran, %d queued ids seen in the worker rings, %d of them before their "
           "event fired %s\n", fake::g_queued_seen.load(), fake::g_violations.load(),
           g_failures == before ? "PASS" : "FAIL");
}

// MPK's pre-launch (dispatch = MPK_DISPATCH_MPK): now the 20 tasks waiting on PROBE are in the rings
// while it runs (queued at the pass's start, before their event fired), yet each runs only after
// it: the values are exact.
static void test_prelaunch_dispatch() {
    const int before = g_failures;
    fake::g_probe_wants_violation = true;
    run_probe_graph(MPK_DISPATCH_MPK, "pre-launch dispatch");
    fake::g_probe_wants_violation = false;
    CHECK(fake::g_violations > 0, "no task was queued before its event fired: not MPK's pre-launch");
    printf("pre-launch dispatch (MPK's): while task 1 ran, %d queued ids seen, %d of them before their event fired; "
           "values exact %s\n", fake::g_queued_seen.load(), fake::g_violations.load(),
           g_failures == before ? "PASS" : "FAIL");
}

// The task record (abi.h, docs/profiler.md): with profile = 1 every task's worker is the one
// assign_worker gives, 0 < ready <= begin < end, and one worker's tasks never overlap in time;
// without profile only the worker is written. in_order (testing's serial re-run) on one worker
// runs tasks in position order, so a task whose dependency was dropped still reads its producer's
// value; in event order (the negative control) it runs at the pass's start and reads poison.
static void test_task_record_and_in_order() {
    const int before = g_failures;
    for (int profile = 0; profile <= 1; ++profile) {
        MpkConfig c = default_config();
        c.num_workers = 4;
        c.jitter = 1;
        c.jitter_seed = 11;
        c.profile = profile;
        Instance in(random_dag(60, 3), c);
        std::vector<int64_t> rec(size_t(MPK_RECORD_FIELDS) * size_t(in.cfg.num_tasks), -1);
        in.cfg.task_record = rec.data();
        CHECK(in.init(), "%s", in.init_error.c_str());
        in.launch();
        in.check_clean_run(1, "task record");
        const mpk::exec::State& st = static_cast<mpk::host::Kernel*>(in.handle)->st;
        std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(size_t(c.num_workers));
        for (int t = 1; t < in.cfg.num_tasks; ++t) {
            const int64_t* r = &rec[size_t(t) * MPK_RECORD_FIELDS];
            CHECK(r[3] == mpk::exec::assign_worker(st, 1, t), "task %d recorded on worker %lld", t, (long long)r[3]);
            CHECK(profile ? 0 < r[0] && r[0] <= r[1] && r[1] < r[2] : r[0] == -1 && r[2] == -1,
                  "task %d (profile %d): ready %lld begin %lld end %lld", t, profile, (long long)r[0],
                  (long long)r[1], (long long)r[2]);
            if (r[3] >= 0 && r[3] < c.num_workers) spans[size_t(r[3])].push_back({r[1], r[2]});
        }
        for (auto& w : spans) {
            std::sort(w.begin(), w.end());
            for (size_t i = 1; profile && i < w.size(); ++i)
                CHECK(w[i].first >= w[i - 1].second, "two tasks of one worker overlap in time");
        }
    }
    for (int in_order = 1; in_order >= 0; --in_order) {  // a -> b -> c, c's dependency dropped
        MpkConfig c = default_config();
        c.num_workers = 1;
        c.in_order = in_order;
        Instance in(chain(3), c);
        in.built.tasks[3].dependent_event = -1;
        CHECK(in.init(), "%s", in.init_error.c_str());
        CHECK(in.launch() == MPK_OK, "in_order %d: %s", in_order, in.message().c_str());
        const bool right = in.values[3] == expected_values(in.graph)[3];
        CHECK(right == bool(in_order), "in_order %d: the task that lost its dependency read %s", in_order,
              right ? "its producer's value" : "poison");
    }
    printf("task record: workers as assigned, ready <= begin < end, no overlap on a worker, times only with "
           "profile; in_order runs a dropped dependency's task after its producer, event order before it %s\n",
           g_failures == before ? "PASS" : "FAIL");
}

// Test mode: every task finds the worker block's dynamic shared memory and its static __shared__
// arrays poisoned, as a fresh block does, though the tasks before it on the same block wrote them
// (runtime/executor.cuh, end_task; the emulation refills them as the barrier after a task
// completes), on worker blocks of 32, 128 and 256 threads. Negative control: outside test mode the
// second task on the block sees the first one's words.
static void test_smem_poisoned_between_tasks() {
    const int before = g_failures;
    for (const int kind : {int(fake::SMEM), int(fake::STATIC_SMEM)})
    for (const int threads : {32, 128, 256})
    for (int test_mode = 1; test_mode >= 0; --test_mode) {
        Graph g;  // a chain of SMEM tasks with a SUM between two of them (no shared memory taken)
        g.add({}, kind);
        g.add({1}, kind);
        g.add({2}, fake::SUM);
        g.add({3}, kind);
        MpkConfig c = default_config();
        c.num_workers = 1;
        c.test_mode = test_mode;
        c.worker_threads = threads;
        c.smem_bytes = 4 * c.worker_threads;
        Instance in(g, c);
        CHECK(in.init(), "%s", in.init_error.c_str());
        CHECK(in.launch() == MPK_OK, "smem test_mode %d: %s", test_mode, in.message().c_str());
        const uint64_t later = test_mode ? 0 : uint64_t(c.worker_threads);  // the block's first task: 0 either way
        CHECK(in.values[1] == 0 && in.values[2] == later && in.values[4] == later,
              "%s, %d threads, test_mode %d: stale shared-memory words seen by tasks 1, 2, 4: %llu, %llu, %llu "
              "(expected 0, %llu, %llu)",
              kind == fake::SMEM ? "dynamic" : "static __shared__", threads, test_mode, (unsigned long long)in.values[1], (unsigned long long)in.values[2],
              (unsigned long long)in.values[4], (unsigned long long)later, (unsigned long long)later);
    }
    printf("shared memory (dynamic and static __shared__) between tasks on one block of 32, 128 and 256 threads: "
           "poisoned in test mode (0 stale words), the previous task's words otherwise (the control) %s\n",
           g_failures == before ? "PASS" : "FAIL");
}

// The scheduler ring's capacity comes from the graph; a push that finds it full is a named error.
// Shrunk to 2 slots here: task 1 completes 6 events at once while the scheduler sleeps.
static void test_scheduler_queue_overflow() {
    const int before = g_failures;
    Graph g;
    const int root = g.add({}, fake::SUM, 30000);  // the scheduler backs off into 1 ms sleeps meanwhile
    for (int i = 0; i < 6; ++i) {
        g.add({root});
        g.add({});  // separates the consumers: one event each
    }
    MpkConfig c = default_config();
    c.num_workers = 1;
    c.num_local_schedulers = 1;
    Instance in(g, c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    CHECK(in.built.tasks[root].num_triggers == 6, "root triggers %d events", in.built.tasks[root].num_triggers);
    mpk::host::Kernel& k = *static_cast<mpk::host::Kernel*>(in.handle);
    CHECK(k.st.sched_cap == mpk::exec::scheduler_ring_capacity(in.cfg.num_events) && k.st.sched_cap >= 2 * in.cfg.num_events,
          "capacity %lld for %d events", (long long)k.st.sched_cap, in.cfg.num_events);
    k.st.sched_cap = 2;  // the buffer stays larger: only the bound shrinks
    in.launch();
    const std::string msg = in.message();
    CHECK(in.status == MPK_INTERNAL && msg.find("scheduler queue 0 overflows: 3 messages for 2 slots (pass 1, event") !=
                                           std::string::npos, "%d %s", in.status, msg.c_str());
    printf("a scheduler ring shrunk to 2 slots, 6 events at once -> MPK_INTERNAL: \"%s\" %s\n", msg.c_str(),
           g_failures == before ? "PASS" : "FAIL");
}

// Whether every thread of the handle's last launch has left it (a worker released from its kernel
// after MPK_STUCK or an interrupted launch comes back this way).
static bool no_worker_inside(Instance& in) {
    mpk::host::Kernel& k = *static_cast<mpk::host::Kernel*>(in.handle);
    std::lock_guard<std::mutex> lock(k.mu);
    return k.live == 0;
}

// A task that stays inside its kernel past stuck_s is reported (MPK_STUCK) instead of blocking
// forever; the handle refuses launches until the worker is back, then runs again.
static void test_stuck_in_kernel() {
    const int before = g_failures;
    Graph g;
    g.add({});
    const int t = g.add({1}, fake::SPIN);
    g.add({t});
    MpkConfig c = default_config();
    c.watchdog_s = 0.1;
    c.stuck_s = 0.4;
    Instance in(g, c);
    CHECK(in.init(), "%s", in.init_error.c_str());
    fake::g_release = 0;
    fake::g_inside = 0;
    in.launch();
    std::string msg = in.message();
    CHECK(in.status == MPK_STUCK, "status %d: %s", in.status, msg.c_str());
    // Not before stuck_s into the launch; within 1.1 s of stuck_s after the task entered its kernel
    // (timed from there, not from the launch: starting the threads and task 1 come first).
    const double inside_s = double(in.returned_ns - fake::g_inside_ns) * 1e-9;
    CHECK(fake::g_inside && in.seconds >= 0.4 && inside_s < 1.5,
          "MPK_STUCK %.3f s after the launch, %.3f s after task 2 entered its kernel (entered: %d)", in.seconds,
          inside_s, fake::g_inside.load());
    CHECK(msg.find("task 2 (iteration 1) has been inside its kernel on worker") != std::string::npos &&
              msg.find("stuck_s = 0.4") != std::string::npos, "%s", msg.c_str());
    const std::string first = msg;
    const double took = inside_s;
    CHECK(in.launch() == MPK_INVALID && in.message().find("is still inside task 2 of an earlier launch") !=
                                            std::string::npos, "%d %s", in.status, in.message().c_str());
    fake::g_release = 1;
    CHECK(await_state([&] { return no_worker_inside(in); }), "the stuck worker did not come back within %.0f s",
          kStateDeadlineS);
    in.meta.restore(in.cfg, {1}, {0});
    in.reset_buffers();
    in.launch();
    in.check_clean_run(1, "after the stuck worker came back");
    printf("a task inside its kernel past stuck_s 0.4 (watchdog_s 0.1) -> MPK_STUCK %.3f s after it entered: \"%s\"; "
           "refused while it stays; OK once it returned %s\n", took, first.c_str(), g_failures == before ? "PASS" : "FAIL");
}

// mpk_abort from another thread (Python's Ctrl-C): a long pass returns MPK_INTERRUPTED within a
// task's length, the workers stopped between tasks, and the handle runs a clean pass next. An
// abort with no launch in flight is dropped. A task inside its kernel cannot be stopped: the
// launch returns after the 1 s grace naming it and refuses launches until it comes back.
// Launches `in` while another thread calls mpk_abort on it (as Python does on Ctrl-C) once
// `ready()` holds, the state the test needs the abort to find (it slept a fixed time, which a
// loaded machine outlasts before the task has begun: "after 0 of 3 tasks"). A ready() that does
// not come within the deadline, or a launch that returns first, is a failure naming `what`; the
// abort still goes out so the launch ends. Returns when it went out (fake::steady_ns()).
template <class F> static int64_t launch_aborted_when(Instance& in, F ready, const char* what) {
    int64_t aborted_ns = 0;
    const int launches = in.launches_returned;
    const uint64_t generation = launch_generation(in);
    std::thread ctrl_c([&] {  // ready() reads the handle only once the launch has begun (launch_generation)
        const bool reached = await_state(
            [&] { return in.launches_returned != launches || (launch_generation(in) != generation && ready()); });
        const bool ended = in.launches_returned != launches;
        CHECK(reached && !ended, "waiting for %s before mpk_abort: %s", what,
              ended ? "the launch returned first" : "not reached within the deadline");
        aborted_ns = fake::steady_ns();
        mpk_abort(in.handle);
    });
    in.launch();
    ctrl_c.join();
    return aborted_ns;
}

static void test_interrupt() {
    const int before = g_failures;
    CHECK(mpk_abort(nullptr) == -1, "mpk_abort(NULL)");
    Graph g = chain(20);
    for (size_t t = 1; t < g.nodes.size(); ++t) g.nodes[t].sleep_us = 50000;  // a 1 s pass
    Instance in(g, default_config());
    CHECK(in.init(), "%s", in.init_error.c_str());
    mpk_abort(in.handle);  // no launch in flight: no effect on the next one
    const auto tasks_done = [&] {
        const std::vector<int64_t> p = in.progress();
        return std::count(p.begin() + 1, p.end(), int64_t(1));
    };
    // mid-pass: once task 1 of the chain has finished (19 x 50 ms still to run)
    const int64_t aborted_ns = launch_aborted_when(in, [&] { return tasks_done() >= 1; }, "task 1 to finish");
    const std::string msg = in.message();
    const int64_t done = tasks_done();
    const double after_s = double(in.returned_ns - aborted_ns) * 1e-9;
    CHECK(in.status == MPK_INTERRUPTED, "status %d: %s", in.status, msg.c_str());
    // within a task's length (50 ms) and the supervisor's 10 ms poll, with room for a busy machine;
    // ignoring the abort would take the rest of the pass, about 0.9 s
    CHECK(after_s < 0.5, "MPK_INTERRUPTED %.3f s after the abort", after_s);
    CHECK(done >= 1 && done < 20 && msg.find("interrupted (mpk_abort) during pass 1 after " + std::to_string(done) +
                                             " of 20 tasks") != std::string::npos, "%lld done: %s", (long long)done,
          msg.c_str());
    in.meta.restore(in.cfg, {1}, {0});
    in.reset_buffers();
    in.launch();
    in.check_clean_run(1, "after an interrupted launch");
    printf("mpk_abort once task 1 of a 1 s pass finished -> MPK_INTERRUPTED %.3f s after it: \"%s\"; the next launch "
           "is clean %s\n", after_s, msg.c_str(), g_failures == before ? "PASS" : "FAIL");

    const int before_spin = g_failures;
    Graph s;
    s.add({});
    const int t = s.add({1}, fake::SPIN);
    s.add({t});
    Instance spin(s, default_config());
    CHECK(spin.init(), "%s", spin.init_error.c_str());
    fake::g_release = 0;
    fake::g_inside = 0;
    const int64_t spin_aborted_ns = launch_aborted_when(spin, [] { return fake::g_inside.load() == 1; },
                                                        "task 2 to be inside its kernel");
    const std::string stuck = spin.message();
    const double spin_after_s = double(spin.returned_ns - spin_aborted_ns) * 1e-9;
    // the 1 s grace (kInterruptGraceS), then control back at once: 1.5 s of room for a busy machine,
    // less than the further 2 s await_return gives the threads outside a kernel
    CHECK(spin.status == MPK_INTERRUPTED && spin_after_s >= 1.0 && spin_after_s < 2.5,
          "status %d %.3f s after the abort", spin.status, spin_after_s);
    CHECK(stuck.find("during pass 1 after 1 of 3 tasks") != std::string::npos &&
              stuck.find("task 2 (iteration 1) is still inside its kernel on worker") != std::string::npos, "%s",
          stuck.c_str());
    CHECK(spin.launch() == MPK_INVALID && spin.message().find("still inside task 2") != std::string::npos, "%d %s",
          spin.status, spin.message().c_str());
    fake::g_release = 1;
    CHECK(await_state([&] { return no_worker_inside(spin); }), "the interrupted worker did not come back within %.0f s",
          kStateDeadlineS);
    printf("mpk_abort while a task spins inside its kernel -> MPK_INTERRUPTED %.3f s after the abort (1 s grace): "
           "\"%s\"; refused until it returns %s\n", spin_after_s, stuck.c_str(),
           g_failures == before_spin ? "PASS" : "FAIL");
}

// Several ranks: every worker runs its tasks of a pass in position order, so kernels that wait
// for a peer inside the task (allreduce) cannot deadlock across ranks. Two handles in this
// process are ranks 0 and 1 (world_size 2): A (task 3, after X) and B (task 5, after Y) both run
// on worker 0 and exchange a signal with the other rank; on rank 0 X stays in its kernel until B
// is enqueued, on rank 1 Y until A is (fake::pair), so rank 0 gets B's event first and rank 1 A's. Run in arrival order (shown by switching the
// reorder off through the handle), rank 0 waits in B for rank 1's B, which waits behind A for
// rank 0's A: a hang; in position order both ranks run A, then B.
static void test_cross_rank_order() {
    const int before = g_failures;
    Graph g;
    const int x = g.add({}), y = g.add({});
    g.add({x}, fake::PAIR);
    g.add({});
    g.add({y}, fake::PAIR);
    std::string hang;
    for (int ordered = 0; ordered <= 1; ++ordered) {
        for (auto& row : fake::g_pair)
            for (auto& c : row) c = 0;
        MpkConfig c = default_config();
        c.num_workers = 2;
        c.num_local_schedulers = 1;
        c.world_size = 2;
        c.watchdog_s = 0.5;
        c.stuck_s = 60;  // X or Y waiting inside its kernel on a loaded machine is not stuck
        fake::g_pair_late = 0;
        std::vector<std::unique_ptr<Instance>> ranks;
        for (int r = 0; r < 2; ++r) {
            c.mpi_rank = r;
            ranks.emplace_back(new Instance(g, c));
            Instance& in = *ranks.back();
            in.built.tasks[x].iparams[0] = 5;  // X waits until B is enqueued...
            in.built.tasks[y].iparams[0] = 3;  // ...Y until A is...
            in.built.tasks[x].variant = in.built.tasks[y].variant = fake::PAIR;
            in.built.tasks[x].iparams[2] = 0;  // ...X on rank 0 only, Y on rank 1 only
            in.built.tasks[y].iparams[2] = 1;
            in.built.tasks[x].iparams[3] = in.built.tasks[y].iparams[3] = 1;
            CHECK(in.init(), "%s", in.init_error.c_str());
            static_cast<mpk::host::Kernel*>(in.handle)->st.ordered = ordered;
            fake::g_pair_kernel[r] = static_cast<mpk::host::Kernel*>(in.handle);
        }
        std::thread t1([&] { ranks[1]->launch(); });
        ranks[0]->launch();
        t1.join();
        fake::g_pair_kernel[0] = fake::g_pair_kernel[1] = nullptr;
        CHECK(fake::g_pair_late == 0, "ordered %d: %d of X, Y waited 20 s for the other event", ordered,
              fake::g_pair_late.load());
        if (!ordered) {
            CHECK(ranks[0]->status == MPK_HANG && ranks[1]->status == MPK_HANG, "arrival order: statuses %d %d",
                  ranks[0]->status, ranks[1]->status);
            hang = ranks[0]->message();
            CHECK(hang.find("worker 0 at task 5 (iteration 1) waits for rank 1 (its signal)") != std::string::npos,
                  "%s", hang.c_str());
        } else {
            for (auto& in : ranks) in->check_clean_run(1, "position order");
        }
    }
    printf("two ranks, tasks A and B on one worker, their events in opposite orders: arrival order hangs (\"...%s\"), "
           "position order runs %s\n", excerpt(hang, "worker 0").c_str(), g_failures == before ? "PASS" : "FAIL");
}

// Arguments: run only the tests whose name contains one of them (e.g. `interrupt stuck`), to
// repeat the timing-sensitive ones under load; none: every test.
int main(int argc, char** argv) {
    const auto t0 = std::chrono::steady_clock::now();
    const struct { const char* name; void (*run)(); } tests[] = {
        {"topologies", test_topologies},
        {"meta_default", test_meta_default},
        {"meta_multi_request", test_meta_multi_request},
        {"meta_prefilled_step", test_meta_prefilled_step},
        {"offline_loop", test_offline_loop},
        {"offline_eos", test_offline_eos},
        {"nothing_scheduled", test_nothing_scheduled},
        {"invalid_at_launch", test_invalid_at_launch},
        {"kernel_exception", test_kernel_exception},
        {"task_fail", test_task_fail_then_clean_launch},
        {"unknown_variant", test_unknown_variant},
        {"hang", test_hang},
        {"in_kernel_watchdog", test_in_kernel_watchdog},
        {"peer_wait", test_peer_wait},
        {"long_task_is_not_a_hang", test_long_task_is_not_a_hang},
        {"event_driven_dispatch", test_event_driven_dispatch},
        {"prelaunch_dispatch", test_prelaunch_dispatch},
        {"task_record_and_in_order", test_task_record_and_in_order},
        {"smem_poisoned_between_tasks", test_smem_poisoned_between_tasks},
        {"scheduler_queue_overflow", test_scheduler_queue_overflow},
        {"stuck_in_kernel", test_stuck_in_kernel},
        {"interrupt", test_interrupt},
        {"cross_rank_order", test_cross_rank_order},
        {"init_rejects", test_init_rejects},
        {"two_handles_concurrently", test_two_handles_concurrently},
        {"concurrent_launch_refused", test_concurrent_launch_refused},
    };
    int ran = 0;
    for (const auto& t : tests) {
        bool wanted = argc == 1;
        for (int i = 1; i < argc; ++i) wanted = wanted || strstr(t.name, argv[i]) != nullptr;
        if (!wanted) continue;
        t.run();
        ++ran;
    }
    CHECK(ran > 0, "no test matches the arguments");
    printf("%s: %d failure(s), %.2f s\n", g_failures ? "FAILED" : "All runtime tests passed", g_failures.load(),
           seconds_since(t0));
    return g_failures ? 1 : 0;
}
