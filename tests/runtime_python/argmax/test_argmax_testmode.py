"""argmax_layer in test mode: real generated code, several workers, schedule jitter, the ids written
into the `output_tokens` meta tensor and copied into `tokens` by prepare_next_batch, as in production.

Each case overrides `tokens`, `prompt_lengths`, `step` and `output_tokens` (meta_tensors) and attaches
output_tokens as the layer's [batch, 1] output (MPK's demos' pattern, as embedding's test attaches
input_tokens). After pk(): output_tokens holds torch.argmax of every logits row (exact, assert_equal);
then prepare_next_batch's finalize has copied, for each request whose prompt this pass completes, the
id of its chunk's last row into tokens[r, step + chunk]; the other requests' tokens are unchanged. BATCH
gives each case's chunks worked out by hand from the admission rule (test_meta_tensors.py states it).
The logits rows are argmax's planted kinds (pytorch_reference.KINDS: ties, first / last, NaN, -inf,
-0 / +0, random), one or two rows at the vocabularies real models use (151,936, 153,600).

Run: python tests/runtime_python/argmax/test_argmax_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/argmax/test_argmax_testmode.py   (one 4-rank job: the
     layer is replicated (layers/argmax.py TP): every rank runs every case on the same full logits and
     the ids must be bit-identical across ranks; testing.run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch = max_num_batched_tokens, vocab, prompt_lengths, step, max_seq_length, max_num_batched_requests)
CASES = [
    (8, 1000, (3, 5), (0, 0), 16, 2),          # two prompts done in this pass
    (6, 1500, (4, 9), (1, 0), 16, 2),          # request 0 done at step 4; request 1 not (3 of 9)
    (1, 151936, (1,), (0,), 4, 1),             # Qwen3's vocabulary, one row
    (2, 153600, (2,), (0,), 4, 1),             # the padded one, two rows
]
# the chunks (request, first position, count) in slot order after the first prepare_next_batch
BATCH = {0: [(0, 0, 3), (1, 0, 5)], 1: [(0, 1, 3), (1, 0, 3)], 2: [(0, 0, 1)], 3: [(0, 0, 2)]}
KINDS = {2: ["tie_boundary"], 3: ["random", "nan"]}


def expected_tokens(tokens, prompts, chunks, ids, max_seq):
    """tokens after the pass's finalize: a request whose prompt the chunk completes gets its last row's id."""
    want, row = tokens.clone(), 0
    for r, p, n in chunks:
        row += n
        if p + n >= prompts[r] and p + n < max_seq:
            want[r, p + n] = ids[row - 1]
    assert not torch.equal(want, tokens), "no request completes its prompt: the tokens check is vacuous"
    return want


def run_case(dtype, batch, vocab, prompts, steps, max_seq, slots, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    key = CASES.index((batch, vocab, prompts, steps, max_seq, slots))
    gen = testing.generator(offset=1000 * key + vocab)
    tokens = torch.randint(0, vocab, (len(prompts), max_seq), generator=gen, dtype=torch.int64)
    output_tokens = torch.full((batch,), -1, dtype=torch.int64)
    meta = {"tokens": tokens.clone(), "prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
            "step": torch.tensor(steps, dtype=torch.int32), "output_tokens": output_tokens}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=jitter, max_seq_length=max_seq, max_num_batched_tokens=batch,
        max_num_batched_requests=slots, max_num_pages=4 * len(prompts), page_size=16, meta_tensors=meta,
        **world.params))
    logits = ref.logits(batch, vocab, dtype, gen, kinds=KINDS.get(key, ref.KINDS))
    x = pk.attach_input(logits, name="logits")
    y = pk.attach_input(output_tokens.view(batch, 1), name="output_token")
    pk.argmax_layer(input=x, output=y, grid_dim=(1, 1, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = f"argmax[{str(dtype)[6:]},{batch}x{vocab},prompts={list(prompts)},step={list(steps)}{world.tag}]"
    ids = ref.argmax(logits)
    testing.assert_equal(f"{name}.output_tokens", pk.get_tensor("output_tokens").view(batch, 1), ids)
    testing.assert_equal(f"{name}.tokens", pk.get_tensor("tokens"),
                         expected_tokens(tokens, prompts, BATCH[key], ids.flatten(), max_seq))
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-{len(c[2])}req" for c in CASES])
def test_argmax(dtype, case):
    run_case(dtype, *case, jitter=case[0])


if __name__ == "__main__":
    testing.run_cases_as_script("argmax", run_case, DTYPES, CASES)
