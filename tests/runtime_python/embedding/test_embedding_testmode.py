"""embed_layer in test mode: real generated code, several workers, schedule jitter, its token ids from
the meta tensors that init_kernel + prepare_next_batch lay out, as in production.

Each case overrides `tokens`, `prompt_lengths`, `step` and `input_tokens` (meta_tensors, the way a user
does) and attaches `input_tokens` as the layer's [batch, 1] input (MPK's demos' pattern):
  input_source=1: the ids are what prepare_next_batch wrote into input_tokens, every admitted request's
    chunk in slot order. BATCH below gives that layout worked out by hand from the admission rule
    (tests/runtime_python/test_mode/test_meta_tensors.py states it); the test checks input_tokens
    against it exactly, then the output against the reference of those ids. Entries past the batch
    keep the override's -1: ids outside the vocabulary, so those rows must come out zero.
  input_source=0: the ids are tokens[0, step[0] + b] (request 0 from its position step[0]) whatever
    input_tokens holds; the cases make the two sources differ, so a kernel reading the wrong one fails.
The output is a copy of table rows: compared exactly (a zero tolerance, then the bits).

Run: python tests/runtime_python/embedding/test_embedding_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/embedding/test_embedding_testmode.py   (one 4-rank job: the
     layer is replicated (layers/embedding.py TP), so every rank runs every case on the same full inputs
     and the outputs must be bit-identical across ranks; testing.run_cases_as_script)
"""

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
EXACT = testing.Tolerance(0.0, 0.0, "a copy: bit-exact")
BITS = {2: torch.int16, 4: torch.int32}
# (batch = max_num_batched_tokens, vocab, hidden, grid, input_source, prompt_lengths, step, max_seq_length,
# max_num_batched_requests)
CASES = [
    (64, 100, 128, (2, 4), 1, (16, 8, 32, 4), (0, 0, 0, 0), 40, 4),   # four requests, 60 of 64 tokens
    (10, 50, 96, (3, 5), 1, (5, 3, 7), (2, 0, 0), 16, 2),             # a prefilled step; 2 slots for 3
    (6, 30, 96, (3, 6), 1, (6,), (0,), 8, 1),                         # one request; one-row tiles
    (4, 40, 64, (2, 2), 0, (5,), (3,), 16, 1),                        # MPK's case: one request at step 3
    (6, 40, 64, (1, 3), 0, (6, 4, 9), (5, 0, 2), 16, 3),              # request 0 only, of three
    (4, 40, 96, (3, 4), 0, (16,), (14,), 16, 1),                      # positions 16, 17 past the row
]
# input_tokens after the first prepare_next_batch, per case (its prompts, step, batch, slots): the chunks
# (request, first position, count) in slot order. A request gets min(prompt - step, tokens left) while a
# slot and a token are left.
BATCH = {
    0: [(0, 0, 16), (1, 0, 8), (2, 0, 32), (3, 0, 4)],    # 16 + 8 + 32 + 4 = 60 <= 64
    1: [(0, 2, 3), (1, 0, 3)],                            # 5 - 2 = 3, then 3; request 2 finds no slot
    2: [(0, 0, 6)],
    3: [(0, 3, 2)],                                       # 5 - 3 = 2: input_tokens [t3, t4, -1, -1]
    4: [(0, 5, 1), (1, 0, 4), (2, 2, 1)],                 # 1, then 4, then the 1 token left
    5: [(0, 14, 2)],
}


def run_case(dtype, batch, vocab, hidden, grid, input_source, prompts, steps, max_seq, slots, jitter=0,
             output_dir=None, world=testing.ONE_RANK):
    key = CASES.index((batch, vocab, hidden, grid, input_source, prompts, steps, max_seq, slots))
    gen = testing.generator(offset=1000 * key + hidden)
    tokens = torch.randint(0, vocab, (len(prompts), max_seq), generator=gen, dtype=torch.int64)
    step = torch.tensor(steps, dtype=torch.int32)
    input_tokens = torch.full((batch,), -1, dtype=torch.int64)
    meta = {"tokens": tokens.clone(), "prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
            "step": step.clone(), "input_tokens": input_tokens}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=jitter, max_seq_length=max_seq, max_num_batched_tokens=batch,
        max_num_batched_requests=slots, max_num_pages=4 * len(prompts), page_size=16, meta_tensors=meta,
        **world.params))
    weight = testing.randn((vocab, hidden), dtype, gen)          # random rows: a wrong row shows
    out = torch.zeros(batch, hidden, dtype=dtype)
    x = pk.attach_input(input_tokens.view(batch, 1), name="input_token")
    w, y = pk.attach_input(weight, name="embed_tokens"), pk.attach_input(out, name="embed_out")
    pk.embed_layer(input=x, weight=w, output=y, grid_dim=(*grid, 1), block_dim=(128, 1, 1),
                   input_source=input_source)
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = (f"embedding[{str(dtype)[6:]},{batch}x{vocab}x{hidden},grid={grid},source={input_source},"
            f"prompts={list(prompts)},step={list(steps)}{world.tag}]")
    laid_out = torch.cat([tokens[r, p:p + n] for r, p, n in BATCH[key]])
    laid_out = torch.cat([laid_out, torch.full((batch - len(laid_out),), -1, dtype=torch.int64)])
    testing.assert_equal(f"{name}.input_tokens", pk.get_tensor("input_tokens"), laid_out)
    ids = ref.source_ids(input_source, laid_out, tokens, steps[0], batch)
    expected = ref.embedding(ids, weight)
    testing.check_output(name, out, expected, EXACT, pk.layers[0].checks, pk=pk)
    bits = BITS[out.element_size()]
    testing.assert_equal(f"{name}.bits", out.view(bits), expected.view(bits))
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"src{c[4]}-{len(c[5])}req-step{c[6][0]}-grid{c[3][0]}x{c[3][1]}"
                                             for c in CASES])
def test_embedding(dtype, case):
    run_case(dtype, *case, jitter=case[0])


if __name__ == "__main__":
    testing.run_cases_as_script("embedding", run_case, DTYPES, CASES)
