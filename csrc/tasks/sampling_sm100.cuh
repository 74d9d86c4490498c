// sampling_sm100.cuh: Gumbel-max sampling, one token id per logits row, as CUDA device code for both
// backends (runtime/simt.h):
//   y[r, 0] = argmax_j (x[r, j] + g_j),   g_j = -log(-log(u_j)), u_j uniform in (0, 1)   (int64)
// so token j is drawn with probability softmax(x[r])_j (the Gumbel-max trick; temperature 1, as MPK).
// The generator is counter-based: u_j comes from Philox4x32-10 (Salmon et al., SC'11, the generator of
// Random123 and curand; the reference checks its copy against Random123's known answers) with
//   key = (seed & 0xFFFFFFFF, seed >> 32), counter = (j, position, request, 0), output word 0 (w),
// so a draw depends only on (seed, request, position, token id): not on the workers, the tiling, the
// order tasks run in, the rank or the other rows of the batch.
// The transform never sees 0 or 1: u = (w + 1/2) / 2^32, and E = -log(u) is computed as
//   -log(u) for w < 2^31 and -log1p(-(1 - u)) above, 1 - u = (2^32 - 1 - w + 1/2) / 2^32 from integers,
// so both tails keep all 32 bits: E in [1.2e-10, 22.9], g = -log(E) in [-3.2, 22.9], finite for every w.
// A logit of -inf stays -inf (finite + -inf), so a masked token is drawn only from an all -inf row
// (then id 0, argmax's rule); a NaN logit is a NaN score, which wins (the first NaN), as in argmax.
// The maximum is argmax.cuh's (argmax_rows_by): exact comparisons, ties to the lower id.
// A row's key: row = iparam(0) + r (the task's first batch row, then r); the batch slot s with
//   qo_indptr_buffer[s] <= row < qo_indptr_buffer[s + 1] (s < iparam(1) = max_num_batched_requests) gives
//   request = request_ids[s] and position = step[request] + row - qo_indptr_buffer[s], the position of
//   the token whose logits the row holds (the drawn token goes to position + 1). A row past the batch's
//   tokens takes request 0xFFFFFFFF and position = row: defined, and its id is written like the others.
//   A request_ids entry outside [0, iparam(2) = total requests) fails the task (never a read past step).
// The seed is in(1)[0], an int64 read when the task runs (a runtime value: layers/sampling_sm100.py).
// Shapes: in(0) x [rows, vocab] (any strides; vocab < 2^32); in(1) seed [1] int64; out(0) y [rows, 1]
//   int64. grid.x splits the rows (MPK's map).
// Cost: one Philox call (10 rounds of two 32x32->64 multiplies) and two logs per logit.
// Test: tests/runtime_python/sampling_sm100/test_sampling_sm100.py (the kernel alone, ids exact against
//       the reference's generator), tests/runtime_python/sampling_sm100/test_sampling_sm100_testmode.py
//       (in a graph, into output_tokens), tests/runtime_python/test_mode/test_sampling_statistics.py
//       (goodness of fit, independence, masks, and the negative controls each must reject)
// Run:  python -m pytest tests/runtime_python/sampling_sm100/ tests/runtime_python/test_mode/test_sampling_statistics.py
#pragma once
#include "../runtime/text.h"
#include "argmax.cuh"

namespace mpk {

// ---- the generator
struct Philox4 {
    uint32_t w[4];
};

MPK_HOST_DEVICE MPK_INLINE Philox4 philox4x32_10(Philox4 c, uint32_t k0, uint32_t k1) {
    for (int round = 0; round < 10; ++round) {
        const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c.w[0];
        const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c.w[2];
        c = Philox4{{static_cast<uint32_t>(p1 >> 32) ^ c.w[1] ^ k0, static_cast<uint32_t>(p1),
                     static_cast<uint32_t>(p0 >> 32) ^ c.w[3] ^ k1, static_cast<uint32_t>(p0)}};
        k0 += 0x9E3779B9u;   // the key schedule (Weyl sequence) between rounds
        k1 += 0xBB67AE85u;
    }
    return c;
}

// A standard Gumbel variate from 32 random bits (the header's transform).
MPK_HOST_DEVICE MPK_INLINE float sampling_gumbel(uint32_t w) {
    const float two_to_minus_32 = 2.3283064365386963e-10f;
    const float e = w < 0x80000000u ? -logf((static_cast<float>(w) + 0.5f) * two_to_minus_32)
                                    : -log1pf(-(static_cast<float>(0xFFFFFFFFu - w) + 0.5f) * two_to_minus_32);
    return -logf(e);
}

struct SamplingKey {
    uint32_t request, position;
};

// Row `row` of the batch: its request and position (the header).
MPK_DEVICE MPK_INLINE SamplingKey sampling_key(const TaskView& v, int64_t row) {
    const int32_t* qo = v.meta->qo_indptr_buffer;
    for (int64_t s = 0; s < v.iparam(1); ++s) {
        if (qo[s] <= row && row < qo[s + 1]) {
            const int32_t r = v.meta->request_ids[s];
            if (r < 0 || r >= v.iparam(2)) {  // (the row's threads only: carry on without reading step)
                task_fail_text(v, [&](Text& t) {    // (written into the launch's record: no buffer on the stack)
                    t.s("sampling_sm100: meta tensor 'request_ids'[").i(s).s("] = ").i(r)
                        .s(" names a request outside the step meta tensor (total_num_requests ").i(v.iparam(2)).s(")");
                });
                break;              // (task_fail records and returns: the row's key past the batch)
            }
            return SamplingKey{static_cast<uint32_t>(r), static_cast<uint32_t>(v.meta->step[r] + (row - qo[s]))};
        }
    }
    return SamplingKey{0xFFFFFFFFu, static_cast<uint32_t>(row)};
}

// ---- dispatch
template <typename T>
__device__ void sampling_sm100_task(const TaskView& v) {
    const Tile2D xt = tile2d(v.in_tile(0)), yt = tile2d(v.out_tile(0));
    const uint64_t seed = static_cast<uint64_t>(v.in<const int64_t>(1)[0]);
    const uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
    int64_t* y = v.out<int64_t>(0);
    argmax_rows_by<T>(
        v.in<const T>(0), xt,
        [&](int64_t r) {
            const SamplingKey key = sampling_key(v, v.iparam(0) + r);
            return [=](int64_t c, float x) {
                const Philox4 u = philox4x32_10(Philox4{{static_cast<uint32_t>(c), key.position, key.request, 0u}}, k0, k1);
                return x + sampling_gumbel(u.w[0]);
            };
        },
        [&](int64_t r, uint64_t best) { y[r * yt.row_stride] = static_cast<uint32_t>(best); });
}

}  // namespace mpk
