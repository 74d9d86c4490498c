"""paged_attention_split_kv_merge reference: the merge of split-KV partials in float64 and, for the graph
test,
the split layer's reference and the unsplit attention; all from paged_attention_split_kv/pytorch_reference.py
(which walks the page table through paged_attention/pytorch_reference.py). Torch only.
"""

import os

from mirage.mpk import testing

split = testing.load_reference(
    os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "..",
        "paged_attention_split_kv",
        "test_paged_attention_split_kv.py",
    )
)
merge, split_attention, attention, write_cache = (
    split.merge,
    split.split_attention,
    split.attention,
    split.write_cache,
)
from_split, to_split, batch_layout = split.from_split, split.to_split, split.batch_layout
expected_layout, poison_outside, rope_tables = split.expected_layout, split.poison_outside, split.rope_tables
