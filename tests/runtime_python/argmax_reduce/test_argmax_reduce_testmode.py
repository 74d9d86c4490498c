"""argmax_reduce_layer in test mode: real generated code, several workers, schedule jitter, the ids in
the `output_tokens` meta tensor and, through prepare_next_batch, in `tokens`.

The partials are given (attached inputs): test_argmax_reduce.partials, argmax_partial's reference of
planted logits rows and hand-made rows whose values tie across tasks (every task equal, the maximum in
tasks 2 and 4, NaN in tasks 3 and 5 after +inf in task 0, -inf, -0 / +0). Checked exactly (assert_equal):
output_tokens against the reference, tokens[r, step + chunk] of each request whose prompt completes.

Run: python tests/runtime_python/argmax_reduce/test_argmax_reduce_testmode.py   (or pytest this file)
     mpirun -n 4 python tests/runtime_python/argmax_reduce/test_argmax_reduce_testmode.py   (one
     4-rank job: replicated (layers/argmax_reduce.py TP), every output bit-identical across ranks)
"""
import os

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

ref = testing.load_reference(__file__)
HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL = testing.load_reference(__file__, name="test_argmax_reduce")
META = testing.load_reference(os.path.join(HERE, "..", "argmax", "x.py"), name="test_argmax_testmode")

DTYPES = [torch.bfloat16, torch.float16, torch.float32]
# (batch, tasks, grid.y, prompt_lengths, step, max_num_batched_requests): 6 and 5 tasks, grid.y 2 and 8
CASES = [(8, 6, 2, (3, 5), (0, 0), 2), (8, 5, 8, (2, 9), (0, 4), 2)]
BATCH = {0: [(0, 0, 3), (1, 0, 5)], 1: [(0, 0, 2), (1, 4, 5)]}     # both prompts complete


def run_case(dtype, batch, tasks, grid_y, prompts, steps, slots, jitter=0, output_dir=None,
             world=testing.ONE_RANK):
    key = CASES.index((batch, tasks, grid_y, prompts, steps, slots))
    gen = testing.generator(offset=10 * key + tasks)
    max_seq = 16
    value, index = KERNEL.partials(batch, tasks, dtype, gen)
    tokens = torch.randint(0, tasks * KERNEL.CHUNK, (len(prompts), max_seq), generator=gen, dtype=torch.int64)
    output_tokens = torch.full((batch,), -1, dtype=torch.int64)
    meta = {"tokens": tokens.clone(), "prompt_lengths": torch.tensor(prompts, dtype=torch.int32),
            "step": torch.tensor(steps, dtype=torch.int32), "output_tokens": output_tokens}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=jitter, max_seq_length=max_seq, max_num_batched_tokens=batch,
        max_num_batched_requests=slots, max_num_pages=4 * len(prompts), page_size=16, meta_tensors=meta,
        **world.params))
    v = pk.attach_input(value, name="argmax_part_value")
    i = pk.attach_input(index, name="argmax_part_index")
    y = pk.attach_input(output_tokens.view(batch, 1), name="output_token")
    pk.argmax_reduce_layer(input=(v, i), output=y, grid_dim=(1, grid_y, 1), block_dim=(128, 1, 1))
    pk.compile(output_dir=output_dir)
    pk()
    pk.finalize()
    name = f"argmax_reduce[{str(dtype)[6:]},{batch}x{tasks},grid.y={grid_y}{world.tag}]"
    ids = ref.argmax_reduce(value, index)
    testing.assert_equal(f"{name}.output_tokens", pk.get_tensor("output_tokens").view(batch, 1), ids)
    testing.assert_equal(f"{name}.tokens", pk.get_tensor("tokens"),
                         META.expected_tokens(tokens, prompts, BATCH[key], ids.flatten(), max_seq))
    return pk


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d)[6:])
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}-grid.y{c[2]}" for c in CASES])
def test_argmax_reduce(dtype, case):
    run_case(dtype, *case, jitter=case[1])


if __name__ == "__main__":
    testing.run_cases_as_script("argmax_reduce", run_case, DTYPES, CASES)
