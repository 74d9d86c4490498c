"""sampling_sm100_layer in test mode: real generated code, several workers, schedule jitter, the ids
written into the `output_tokens` meta tensor and copied into `tokens` by prepare_next_batch, as in
production, with the keys (request, position) read from the batch layout prepare_next_batch wrote.

Each case overrides `tokens`, `prompt_lengths`, `step` and `output_tokens` (meta_tensors) and attaches
output_tokens as the layer's [batch, 1] output (as argmax's test). After pk(): output_tokens holds the
reference's draw of every row (exact, assert_equal; pytorch_reference.py), keyed by the chunks BATCH works
out by hand from the admission rule (test_meta_tensors.py states it); rows past the batch are keyed as
padding. Then the finalize has copied each completed prompt's last draw into tokens. Case 3 skips request
0 (its cache is full), so slot 0 serves request 1: a kernel keyed by the slot draws other ids.
The seed is a runtime value: the same compiled kernel, its seed tensor rewritten, draws the reference's
ids for the new seed (and different ones). A second kernel with another worker count and jitter seed
draws bit-identical ids.

Run: python tests/runtime_python/sampling_sm100/test_sampling_sm100_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/sampling_sm100/test_sampling_sm100_testmode.py   (one 4-rank
     job: the layer is replicated (layers/sampling_sm100.py TP): every rank draws from the same full logits
     with the same seed and the ids must be bit-identical across ranks; testing.run_cases_as_script)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
ref = testing.load_reference(__file__)
# the finalize's expected tokens: argmax's test-mode file (the same rule for any id written to output_tokens)
META = testing.load_reference(os.path.join(HERE, "..", "argmax", "x.py"), name="test_argmax_testmode")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch = max_num_batched_tokens, vocab, prompt_lengths, step, max_seq_length,
#  max_num_batched_requests, grid.x)
CASES = [
    (8, 1000, (3, 5), (0, 0), 16, 2, 1),          # two prompts done in this pass
    (6, 1500, (4, 9), (1, 0), 16, 2, 3),          # request 1 not done (3 of 9); 3 tasks of 2 rows
    (4, 300, (3, 2, 2), (16, 0, 1), 16, 2, 4),    # request 0 skipped: slot 0 is request 1; a padding row
    (1, 151936, (1,), (0,), 4, 1, 1),             # Qwen3's vocabulary, one row
]
# the chunks (request, first position, count) in slot order after the first prepare_next_batch
BATCH = {0: [(0, 0, 3), (1, 0, 5)], 1: [(0, 1, 3), (1, 0, 3)], 2: [(1, 0, 2), (2, 1, 1)], 3: [(0, 0, 1)]}
SEED, NEW_SEED = 1234, (1 << 33) + 5


def build(logits, tokens, prompts, steps, max_seq, slots, grid, jitter, workers, output_dir, world):
    batch = logits.shape[0]
    meta = {"tokens": tokens.clone(), "prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
            "step": torch.tensor(steps, dtype=torch.int32),
            "output_tokens": torch.full((batch,), -1, dtype=torch.int64)}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=jitter, num_workers=workers, max_seq_length=max_seq, max_num_batched_tokens=batch,
        max_num_batched_requests=slots, max_num_pages=4 * len(prompts), page_size=16, meta_tensors=meta,
        **world.params))
    x = pk.attach_input(logits, name="logits")
    y = pk.attach_input(meta["output_tokens"].view(batch, 1), name="output_token")
    pk.sampling_sm100_layer(logits=x, output=y, grid_dim=(grid, 1, 1), block_dim=(128, 1, 1), seed=SEED)
    pk.compile(output_dir=output_dir)
    return pk


def run_case(dtype, batch, vocab, prompts, steps, max_seq, slots, grid, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    key = CASES.index((batch, vocab, prompts, steps, max_seq, slots, grid))
    gen = testing.generator(offset=1000 * key + vocab)
    tokens = torch.randint(0, vocab, (len(prompts), max_seq), generator=gen, dtype=torch.int64)
    logits = world.shard("input", testing.randn((batch, vocab), dtype, gen, scale=2.0))
    name = f"sampling_sm100[{str(dtype)[6:]},{batch}x{vocab},grid={grid},prompts={list(prompts)}," \
           f"step={list(steps)}{world.tag}]"
    keys = ref.batch_keys(BATCH[key], batch)
    pk = build(logits, tokens, prompts, steps, max_seq, slots, grid, jitter, 3, output_dir, world)
    seed_name = pk.layers[0].params["seed"]
    draws = {}
    for seed in (SEED, NEW_SEED):          # the same compiled kernel: only its seed tensor changes
        pk.get_tensor(seed_name).fill_(seed)
        pk()
        got = pk.get_tensor("output_tokens").view(batch, 1)
        ids, near = ref.expected(got, logits, seed, *keys)
        if near:
            testing.say(f"NEAR_TIE {name}[seed={seed}]: {near} row(s) within {ref.GAP}: either of the two "
                        f"accepted")
        testing.assert_equal(f"{name}.output_tokens[seed={seed}]", got, ids)
        testing.assert_equal(f"{name}.tokens[seed={seed}]", pk.get_tensor("tokens"),
                             META.expected_tokens(tokens, prompts, BATCH[key], ids.flatten(), max_seq))
        draws[seed] = ids
    assert batch == 1 or not torch.equal(draws[SEED], draws[NEW_SEED]), \
        f"{name}: a new seed drew the same ids"
    pk.get_tensor(seed_name).fill_(SEED)
    pk.finalize()
    other = build(logits, tokens, prompts, steps, max_seq, slots, grid, jitter + 17, 2, None, world)
    other()
    testing.assert_equal(f"{name}.output_tokens[2 workers, jitter {jitter + 17}]",
                         other.get_tensor("output_tokens").view(batch, 1), draws[SEED])
    other.finalize()
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-{len(c[2])}req-grid{c[6]}" for c in CASES])
def test_sampling_sm100(dtype, case):
    run_case(dtype, *case, jitter=case[0])


if __name__ == "__main__":
    testing.run_cases_as_script("sampling_sm100", run_case, DTYPES, CASES)
