// meta.h: the request manager, MODE_OFFLINE (docs/runtime.md, "Meta tensors").
//
// init_kernel() resets the request state once per launch; prepare_next_batch() runs on
// every END_OF_TASK_GRAPH: it finalizes the batch that just ran (steps advance, output
// tokens are appended, finished requests free their pages) and lays out the next one in
// the meta tensors. Both are host+device functions over RequestState + MpkMeta + MpkConfig
// with no allocation, no std:: containers and no exceptions: scheduler 0 runs them in the
// executor (csrc/runtime/executor.cuh) on the CPU and on the GPU alike. A failure is a status
// code plus a message in RequestState::message (text.h, no snprintf on the device).
//
// Storage: RequestState points into request_words(cfg) int32 words that the executor
// allocates beside its own state (host memory on the CPU, device memory on the GPU) and
// hands to bind_requests(); binding computes pointers only, so the host can bind device
// memory.
//
// Invariants between calls:
//   slots 0..num_slots-1 hold the active requests in admission order; slot s processed
//   qo_indptr[s+1]-qo_indptr[s] >= 1 tokens in the batch that just ran, so
//   num_slots <= max_num_batched_tokens; a slot's pages cover step+chunk tokens
//   (at most ceil(max_seq_length / page_size) pages); every page is either in exactly
//   one slot or in the free FIFO.
#pragma once
#include <stdint.h>
#include "abi.h"
#include "platform.h"
#include "text.h"

namespace mpk {

// ---- state

struct RequestState {
    // capacities
    int32_t max_slots;         // max_num_batched_requests
    int32_t pages_per_slot;    // ceil(max_seq_length / page_size)
    int32_t num_pages;         // max_num_pages
    // per slot, [max_slots] (slot_pages: [max_slots, pages_per_slot])
    int32_t* slot_request;
    int32_t* slot_chunk;       // tokens scheduled in the batch being prepared
    int32_t* slot_num_pages;
    int32_t* slot_pages;
    // free-page FIFO, a ring of [num_pages]
    int32_t* free_pages;
    int32_t free_head, free_count;
    // progress
    int32_t num_slots;
    int32_t next_request_id;
    int32_t num_calls;         // prepare_next_batch calls since init_kernel
    // the first failure (MPK_INVALID / MPK_INTERNAL) and its message
    int32_t status;
    char message[512];
};

// Words of storage behind RequestState's pointers for this config (one spare per array, so no
// pointer is null even when a size is 0).
MPK_HOST_DEVICE inline int64_t request_words(const MpkConfig& cfg) {
    const int64_t slots = cfg.max_num_batched_requests > 0 ? cfg.max_num_batched_requests : 0;
    const int64_t per_slot = (int64_t(cfg.max_seq_length) + cfg.page_size - 1) / cfg.page_size;
    const int64_t pages = cfg.max_num_pages > 0 ? cfg.max_num_pages : 0;
    return 3 * (slots + 1) + (slots * per_slot + 1) + (pages + 1);
}

// Points `st` into `words` (request_words(cfg) int32s, not dereferenced: may be device memory).
MPK_HOST_DEVICE inline void bind_requests(RequestState& st, int32_t* words, const MpkConfig& cfg) {
    const int32_t slots = cfg.max_num_batched_requests > 0 ? cfg.max_num_batched_requests : 0;
    const int32_t per_slot = (cfg.max_seq_length + cfg.page_size - 1) / cfg.page_size;
    st = RequestState{};
    st.max_slots = slots;
    st.pages_per_slot = per_slot;
    st.num_pages = cfg.max_num_pages > 0 ? cfg.max_num_pages : 0;
    st.slot_request = words;
    st.slot_chunk = st.slot_request + slots + 1;
    st.slot_num_pages = st.slot_chunk + slots + 1;
    st.slot_pages = st.slot_num_pages + slots + 1;
    st.free_pages = st.slot_pages + int64_t(slots) * per_slot + 1;
}

// ---- helpers

// The first failure wins: returns a Text to append the message to (a sink once one is recorded).
MPK_HOST_DEVICE inline Text meta_fail(RequestState& st, int32_t status) {
    if (st.status != MPK_OK) return Text(nullptr, 0);
    st.status = status;
    return Text(st.message, int32_t(sizeof st.message));
}

MPK_HOST_DEVICE inline int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

MPK_HOST_DEVICE inline void free_page_push(RequestState& st, int32_t page) {
    st.free_pages[(st.free_head + st.free_count) % st.num_pages] = page;
    ++st.free_count;
}

MPK_HOST_DEVICE inline int32_t free_page_pop(RequestState& st) {
    const int32_t page = st.free_pages[st.free_head];
    st.free_head = (st.free_head + 1) % st.num_pages;
    --st.free_count;
    return page;
}

// Schedules `chunk` tokens of request r in slot s: copies tokens[r, step .. step+chunk)
// to input_tokens[*cursor ..], grows the slot's page list to ceil((step+chunk)/page_size)
// pages from the free FIFO (in order). False (with a message) when the FIFO runs dry.
MPK_HOST_DEVICE inline bool schedule_slot(RequestState& st, const MpkMeta& m, const MpkConfig& cfg, int32_t s,
                          int32_t r, int32_t chunk, int32_t* cursor) {
    const int32_t step = m.step[r];
    const int64_t* row = m.tokens + int64_t(r) * cfg.max_seq_length;
    for (int32_t j = 0; j < chunk; ++j) m.input_tokens[*cursor + j] = row[step + j];
    *cursor += chunk;
    st.slot_chunk[s] = chunk;
    const int32_t need = ceil_div(step + chunk, cfg.page_size);
    int32_t* pages = st.slot_pages + int64_t(s) * st.pages_per_slot;
    while (st.slot_num_pages[s] < need) {
        if (st.free_count == 0)
        {
            meta_fail(st, MPK_INVALID).s("prepare_next_batch: request ").i(r).s(" needs ").i(need).s(" KV pages (")
                .i(step + chunk).s(" tokens, page_size ").i(cfg.page_size)
                .s(") but no free page is left: max_num_pages = ").i(cfg.max_num_pages)
                .s("; hint: raise max_num_pages");
            return false;
        }
        pages[st.slot_num_pages[s]++] = free_page_pop(st);
    }
    return true;
}

// ---- init_kernel

// MODE_OFFLINE: no active request, qo/kv indptr zeroed, request_ids -1, every page free in order.
// step is kept: step[r] tokens of request r are already in the KV cache (docs/runtime.md).
MPK_HOST_DEVICE inline int32_t init_kernel(RequestState& st, const MpkMeta& m, const MpkConfig& cfg) {
    st.status = MPK_OK;
    st.message[0] = 0;
    st.num_slots = 0;
    st.next_request_id = 0;
    st.num_calls = 0;
    st.free_head = 0;
    st.free_count = 0;
    for (int32_t p = 0; p < st.num_pages; ++p) free_page_push(st, p);
    for (int32_t s = 0; s <= st.max_slots; ++s) {
        m.qo_indptr_buffer[s] = 0;
        m.paged_kv_indptr_buffer[s] = 0;
    }
    for (int32_t s = 0; s < st.max_slots; ++s) m.request_ids[s] = -1;
    for (int32_t r = 0; r < cfg.total_num_requests; ++r) {
        if (m.prompt_lengths[r] < 1 || m.prompt_lengths[r] > cfg.max_seq_length) {
            meta_fail(st, MPK_INVALID).s("init_kernel: prompt_lengths[").i(r).s("] = ").i(m.prompt_lengths[r])
                .s(" is outside [1, max_seq_length = ").i(cfg.max_seq_length).s("]");
            return st.status;
        }
        if (m.step[r] < 0 || m.step[r] > cfg.max_seq_length) {
            meta_fail(st, MPK_INVALID).s("init_kernel: step[").i(r).s("] = ").i(m.step[r])
                .s(" is outside [0, max_seq_length = ").i(cfg.max_seq_length).s("]");
            return st.status;
        }
    }
    return MPK_OK;
}

// ---- prepare_next_batch

// Returns whether the new batch has any token. On failure returns false with
// st.status != MPK_OK. In test mode every call after the first only finalizes.
MPK_HOST_DEVICE inline bool prepare_next_batch(RequestState& st, const MpkMeta& m, const MpkConfig& cfg) {
    const int32_t L = cfg.max_seq_length;
    const int32_t budget = cfg.max_num_batched_tokens;
    int32_t* qo = m.qo_indptr_buffer;

    // (1) finalize the batch that just ran; compact the survivors into slots 0..
    int32_t kept = 0;
    for (int32_t s = 0; s < st.num_slots; ++s) {
        const int32_t r = st.slot_request[s];
        const int32_t n = qo[s + 1] - qo[s];
        m.step[r] += n;
        bool done = false;
        if (n > 0 && m.step[r] >= m.prompt_lengths[r]) {  // prompt done: the last token emits
            const int64_t token = m.output_tokens[qo[s + 1] - 1];
            if (m.step[r] < L) m.tokens[int64_t(r) * L + m.step[r]] = token;
            if (cfg.eos_token_id >= 0 && token == cfg.eos_token_id) done = true;
        }
        if (m.step[r] + 1 >= L) done = true;
        int32_t* pages = st.slot_pages + int64_t(s) * st.pages_per_slot;
        if (done) {
            for (int32_t p = 0; p < st.slot_num_pages[s]; ++p) free_page_push(st, pages[p]);
            continue;
        }
        if (kept != s) {
            int32_t* dst = st.slot_pages + int64_t(kept) * st.pages_per_slot;
            for (int32_t p = 0; p < st.slot_num_pages[s]; ++p) dst[p] = pages[p];
            st.slot_request[kept] = r;
            st.slot_num_pages[kept] = st.slot_num_pages[s];
        }
        ++kept;
    }
    st.num_slots = kept;
    if (cfg.test_mode && st.num_calls++ > 0) return false;

    // (2) continue the active requests: a prefill chunk, else one decode token. One token
    // is reserved for each later active slot, so no slot is starved (kept <= budget).
    int32_t cursor = 0;
    for (int32_t s = 0; s < kept; ++s) {
        const int32_t r = st.slot_request[s];
        const int32_t left = budget - cursor - (kept - s - 1);
        const int32_t rest = m.prompt_lengths[r] - m.step[r];
        const int32_t chunk = rest > 0 ? (rest < left ? rest : left) : 1;
        if (chunk < 1 || cursor + chunk > budget) {
            meta_fail(st, MPK_INTERNAL).s("prepare_next_batch: slot ").i(s).s(" (request ").i(r).s(") got ").i(chunk)
                .s(" tokens");
            return false;
        }
        if (!schedule_slot(st, m, cfg, s, r, chunk, &cursor)) return false;
    }

    // (3) admit new requests while a slot and a token are left. A request whose cache is
    // already full (step == max_seq_length) has nothing to compute and is skipped.
    while (st.next_request_id < cfg.total_num_requests && st.num_slots < st.max_slots && cursor < budget) {
        const int32_t r = st.next_request_id++;
        if (m.step[r] >= L) continue;
        const int32_t rest = m.prompt_lengths[r] - m.step[r];
        const int32_t left = budget - cursor;
        const int32_t chunk = rest > 0 ? (rest < left ? rest : left) : 1;
        const int32_t s = st.num_slots++;
        st.slot_request[s] = r;
        st.slot_num_pages[s] = 0;
        if (!schedule_slot(st, m, cfg, s, r, chunk, &cursor)) return false;
    }

    // (4) the batch layout; entries past the last slot repeat the final indptr value.
    int32_t* kv = m.paged_kv_indptr_buffer;
    qo[0] = 0;
    kv[0] = 0;
    for (int32_t s = 0; s < st.max_slots; ++s) {
        if (s < st.num_slots) {
            const int32_t* pages = st.slot_pages + int64_t(s) * st.pages_per_slot;
            for (int32_t p = 0; p < st.slot_num_pages[s]; ++p) m.paged_kv_indices_buffer[kv[s] + p] = pages[p];
            qo[s + 1] = qo[s] + st.slot_chunk[s];
            kv[s + 1] = kv[s] + st.slot_num_pages[s];
            const int32_t len = (m.step[st.slot_request[s]] + st.slot_chunk[s]) % cfg.page_size;
            m.paged_kv_last_page_len_buffer[s] = len == 0 ? cfg.page_size : len;
            m.request_ids[s] = st.slot_request[s];
        } else {
            qo[s + 1] = qo[s];
            kv[s + 1] = kv[s];
            m.paged_kv_last_page_len_buffer[s] = 0;
            m.request_ids[s] = -1;
        }
    }
    m.num_new_tokens[0] = cursor;
    return cursor > 0;
}

// ---- messages

// Why the first batch is empty, with the numbers that decide it (MPK_NOTHING_SCHEDULED).
MPK_HOST_DEVICE inline void describe_nothing_scheduled(const MpkMeta& m, const MpkConfig& cfg, char* buf, int32_t n) {
    Text t(buf, n);
    t.s("the first prepare_next_batch scheduled no token: total_num_requests=").i(cfg.total_num_requests)
        .s(", prompt_lengths=[");
    const int32_t shown = cfg.total_num_requests < 8 ? cfg.total_num_requests : 8;
    const char* more = shown < cfg.total_num_requests ? ", ..." : "";
    for (int32_t r = 0; r < shown; ++r) t.s(r ? ", " : "").i(m.prompt_lengths[r]);
    t.s(more).s("], step=[");
    for (int32_t r = 0; r < shown; ++r) t.s(r ? ", " : "").i(m.step[r]);
    t.s(more).s("], max_num_batched_tokens=").i(cfg.max_num_batched_tokens).s(", max_num_batched_requests=")
        .i(cfg.max_num_batched_requests).s(", max_seq_length=").i(cfg.max_seq_length).s("; hint: ");
    const char* hint = cfg.total_num_requests == 0        ? "pass at least one request (prompt_lengths / tokens)"
                       : cfg.max_num_batched_tokens <= 0   ? "raise max_num_batched_tokens"
                       : cfg.max_num_batched_requests <= 0 ? "raise max_num_batched_requests"
                                                           : "every request has step == max_seq_length (cache full)";
    t.s(hint);
}

}  // namespace mpk
