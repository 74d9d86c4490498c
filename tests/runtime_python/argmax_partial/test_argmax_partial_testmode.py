"""argmax_partial_layer in test mode, followed by argmax_reduce_layer as MPK's demos run them: real
generated code, several workers, schedule jitter, the final ids in the `output_tokens` meta tensor.

Each case: logits of argmax's planted kinds (ties inside one task and across the first task boundary,
NaN, -inf, -0 / +0, the maximum first and last) -> argmax_partial (grid.x ranges, grid.y the batch) ->
(value, index) -> argmax_reduce -> output_tokens attached as the [batch, 1] output; the meta tensors as
argmax's test sets them (its cases' prompts and BATCH). Checked exactly (assert_equal): the partials'
global indices and value bits against the reference, output_tokens against torch.argmax of the logits,
and tokens[r, step + chunk] of each request whose prompt the pass completes.

Run: python tests/runtime_python/argmax_partial/test_argmax_partial_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/argmax_partial/test_argmax_partial_testmode.py   (one
     4-rank job: replicated (layers/argmax_partial.py TP), every output bit-identical across ranks)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
HERE = os.path.dirname(os.path.abspath(__file__))
ARGMAX = testing.load_reference(os.path.join(HERE, "..", "argmax", "x.py"))
META = testing.load_reference(os.path.join(HERE, "..", "argmax", "x.py"), name="test_argmax_testmode")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
BITS = {2: torch.int16, 4: torch.int32}
# (argmax's case index (batch, vocab, meta tensors), partial grid, reduce grid.y): 3 and 5 ranges
# (non-powers of two) with grid.y 2 and one-row tiles; Qwen3's 151,936 in 8 ranges; 153,600 in 96.
CASES = [(0, (5, 8), 2), (1, (3, 2), 6), (2, (8, 1), 1), (3, (96, 2), 1)]


def run_case(dtype, case, grid, reduce_y, jitter=0, output_dir=None, world=testing.ONE_RANK):
    batch, vocab, prompts, steps, max_seq, slots = META.CASES[case]
    tasks = grid[0]
    gen = testing.generator(offset=100 * case + tasks)
    tokens = torch.randint(0, vocab, (len(prompts), max_seq), generator=gen, dtype=torch.int64)
    output_tokens = torch.full((batch,), -1, dtype=torch.int64)
    meta = {"tokens": tokens.clone(), "prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
            "step": torch.tensor(steps, dtype=torch.int32), "output_tokens": output_tokens}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=jitter, max_seq_length=max_seq, max_num_batched_tokens=batch,
        max_num_batched_requests=slots, max_num_pages=4 * len(prompts), page_size=16, meta_tensors=meta,
        **world.params))
    kinds = ARGMAX.KINDS if batch > 2 else ["tie_boundary", "nan"]
    logits = ARGMAX.logits(batch, vocab, dtype, gen, chunk=vocab // tasks, kinds=kinds)
    x = pk.attach_input(logits, name="logits")
    value = pk.attach_input(torch.zeros(batch, tasks, dtype=dtype), name="argmax_part_value")
    index = pk.attach_input(torch.zeros(batch, tasks, dtype=torch.int64), name="argmax_part_index")
    y = pk.attach_input(output_tokens.view(batch, 1), name="output_token")
    pk.argmax_partial_layer(input=x, output=(value, index), grid_dim=(*grid, 1), block_dim=(128, 1, 1))
    pk.argmax_reduce_layer(input=(value, index), output=y, grid_dim=(1, reduce_y, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = f"argmax_partial[{str(dtype)[6:]},{batch}x{vocab},grid={grid},reduce_y={reduce_y}{world.tag}]"
    want_value, want_index = ref.argmax_partial(logits, tasks)
    testing.assert_equal(f"{name}.index", pk.get_tensor("argmax_part_index"), want_index)
    bits = BITS[logits.element_size()]
    testing.assert_equal(f"{name}.value[bits]", pk.get_tensor("argmax_part_value").view(bits),
                         want_value.view(bits))
    ids = ARGMAX.argmax(logits)
    testing.assert_equal(f"{name}.output_tokens", pk.get_tensor("output_tokens").view(batch, 1), ids)
    testing.assert_equal(f"{name}.tokens", pk.get_tensor("tokens"),
                         META.expected_tokens(tokens, prompts, META.BATCH[case], ids.flatten(), max_seq))
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"case{c[0]}-grid{c[1][0]}x{c[1][1]}" for c in CASES])
def test_argmax_partial(dtype, case):
    run_case(dtype, *case, jitter=case[0] + 1)


if __name__ == "__main__":
    testing.run_cases_as_script("argmax_partial", run_case, DTYPES, CASES)
