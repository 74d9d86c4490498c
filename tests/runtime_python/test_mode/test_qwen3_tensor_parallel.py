"""The Qwen3 decoder sharded across MPI ranks (tensor parallelism) decodes the unsharded model's tokens.

The model: test_qwen3_decoder.py's seeded 2-layer fp32 Qwen3ForCausalLM with 8 query heads over 4 KV heads
(head_dim 64, q/k norm, RoPE, untied LM head, vocab 256, hidden 128, intermediate 256), so 2 and 4 ranks
each hold whole KV heads. mirage.mpk.models.qwen3 shards it by rank (`shard`, as MPK's models): QKV and
gate/up column-parallel (rank r: its KV heads' q/k/v rows, its I/W gate/up rows), o_proj and down_proj
row-parallel (the matching columns, partial sums, the residual on rank 0) each followed by an
allreduce_layer, attention over the rank's heads and cache heads; embedding, norms, LM head and the draw
replicated. Every rank decodes test_qwen3_generate.py's 3 prompts (5, 3 and 8 tokens, pages of 4, 6 new
tokens asked, max_seq_length 14, schedule jitter) with qwen3.generate's offline loop (test_mode=False).
Checks, each agreed across ranks before the next collective:
  1. sharding is active: this rank's attached q_proj / down_proj / k_cache are 1/W of the model's, and
     the ranks' shards differ;
  2. every token the kernel appended, every request and step, equals hf_model.generate(do_sample=False)
     of the unsharded HF model on that prompt alone, on every rank; `step` ends at max_seq_length - 1;
  3. tokens and step are bit-identical across ranks (the allreduce sums in rank order);
  4. with a sampling seed: every rank draws the same tokens, each the Gumbel-max of HF's logits
     (test_qwen3_generate.py's reference, the LM head scaled there x10).
Negative control (pytest, 2 ranks): rank 1 builds from rank 0's shard (`--wrong-shard`): the job fails,
every rank naming the tokens that differ from HF's.

Run: mpirun -n 4 python tests/runtime_python/test_mode/test_qwen3_tensor_parallel.py
pytest runs that for N = 2 and 4 as a subprocess (the entry point is under __main__).
"""
import os
import sys

import pytest
import torch

from mirage.mpk import testing

pytest.importorskip("transformers")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_qwen3_generate as gen  # noqa: E402  (the prompts, HF's streams, the sampling reference)

from mirage.mpk.models import qwen3  # noqa: E402

HEADS = dict(num_attention_heads=8, num_key_value_heads=4)


def model():
    return gen.hf_model(torch.float32, **HEADS)


def decode(m, ps, rank, size, output_dir, **kw):
    """One offline decode of ps on this rank; (tokens, step, the build's tensors by name)."""
    pk = qwen3.decode_kernel(m, ps, gen.NEW, output_dir=output_dir, page_size=gen.PAGE, world_size=size,
                             mpi_rank=rank, schedule_jitter=7 + rank, **kw)
    shapes = {n: tuple(pk.get_tensor(n).shape) for n in ("model_layers_0_self_attn_q_proj_weight",
                                                         "model_layers_0_mlp_down_proj_weight",
                                                         "layers_0_k_cache")}
    digest = testing.digest(pk.get_tensor("model_layers_0_self_attn_q_proj_weight"))
    pk()
    out = pk.get_tensor("tokens").clone(), pk.get_tensor("step").clone(), shapes, digest
    pk.finalize()
    return out


def run(comm, rank: int, size: int, output_dir, wrong_shard: bool = False) -> None:
    if wrong_shard and rank == 1:        # the negative control: rank 1 holds rank 0's slice of every weight
        right = qwen3.shard
        qwen3.shard = lambda sd, cfg, r, w: right(sd, cfg, 0, w)
    m, ps = model(), gen.prompts()
    cfg = m.config
    label = f"qwen3_tp[W={size},8q4kv,prompts={list(gen.PROMPTS)},L={gen.L},page={gen.PAGE}]"
    tokens, step, shapes, digest = decode(m, ps, rank, size, output_dir)
    want = {"model_layers_0_self_attn_q_proj_weight": (cfg.num_attention_heads * cfg.head_dim // size,
                                                       cfg.hidden_size),
            "model_layers_0_mlp_down_proj_weight": (cfg.hidden_size, cfg.intermediate_size // size),
            "layers_0_k_cache": (gen.PAGE, cfg.num_key_value_heads // size, cfg.head_dim)}
    shapes["layers_0_k_cache"] = shapes["layers_0_k_cache"][1:]          # [pages, page, heads, head_dim]
    digests = comm.allgather(digest)
    with testing.on_all_ranks(f"{label}: sharding is active"):
        assert shapes == want, (shapes, want)
        assert wrong_shard or len(set(digests)) == size, f"ranks hold the same q_proj shard: {digests}"
    testing.say(f"SHARDED {label} rank {rank}: {shapes} (1/{size} of the heads and of the intermediate); "
                f"shards differ on all {size} ranks PASS")
    streams = [gen.hf_stream(m, p, gen.L - len(p)) for p in ps]
    with testing.on_all_ranks(f"{label}: tokens vs HF generate"):
        for r, (p, s) in enumerate(zip(ps, streams)):
            testing.assert_equal(f"{label}.tokens[{r}, {len(p)}:] vs HF generate (unsharded)",
                                 tokens[r, len(p):len(p) + len(s)], s)
        testing.assert_equal(f"{label}.step", step, [gen.L - 1] * len(ps))
    compared = sum(map(len, streams))
    testing.say(f"TOKENS {label}: {compared} generated tokens equal the unsharded HF generate's PASS")
    everyone = comm.allgather(testing.digest(tokens) + testing.digest(step))
    with testing.on_all_ranks(f"{label}: identical on every rank"):
        assert len(set(everyone)) == 1, everyone
    testing.say(f"IDENTICAL {label}.tokens/step on all {size} ranks PASS")

    sharp = gen.sharpened(m)
    tokens, step, _, _ = decode(sharp, ps, rank, size, output_dir, sampling_seed=gen.SEED)
    got, expected, near = gen.gumbel_max_of_hf(sharp, ps, tokens, step, gen.SEED)
    everyone = comm.allgather(testing.digest(tokens))
    with testing.on_all_ranks(f"{label}: sampled"):
        testing.assert_equal(f"{label}: {got.numel()} drawn tokens (seed {gen.SEED}) vs Gumbel-max of HF "
                             f"logits ({near} near-ties)", got, expected)
        assert len(set(everyone)) == 1, everyone
    testing.say(f"SAMPLED {label}: {got.numel()} drawn tokens equal the Gumbel-max of HF's logits, identical "
                f"on all {size} ranks PASS")


@pytest.mark.parametrize("ranks", [2, 4])
def test_qwen3_tensor_parallel_mpirun(ranks, tmp_path):
    code, out = testing.mpirun(__file__, ranks, timeout=600, env={"MPK_OUTPUT_DIR": str(tmp_path)})
    assert code == 0, f"mpirun -n {ranks} failed (exit {code}); output above"
    for r in range(ranks):
        for prefix in ("SHARDED ", "TOKENS ", "IDENTICAL ", "SAMPLED "):
            lines = testing.rank_lines(out, r, prefix)
            assert len(lines) == 1 and lines[0].endswith(" PASS"), f"rank {r}: {prefix!r} lines {lines}"
        assert testing.rank_lines(out, r, "All Qwen3 tensor-parallel checks PASS"), f"rank {r} did not finish"


def test_wrong_shard_is_caught(tmp_path):
    """Negative control: rank 1 builds from rank 0's shard; each rank fails on the tokens vs HF."""
    code, out = testing.mpirun(__file__, 2, timeout=600, args=("--wrong-shard",),
                               env={"MPK_OUTPUT_DIR": str(tmp_path)})
    assert code != 0, "the wrong shard went unnoticed"
    assert "tokens vs HF generate" in out and "TOKENS " not in out, out[-3000:]
    testing.say(f"CAUGHT a wrong shard on rank 1 of 2: the job failed (exit {code}) at tokens vs HF generate")


if __name__ == "__main__":
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    if world.Get_size() < 2:
        raise SystemExit(f"run with several ranks: mpirun -n 4 python {sys.argv[0]}")
    run(world, world.Get_rank(), world.Get_size(), os.environ.get("MPK_OUTPUT_DIR", "./test_output"),
        wrong_shard="--wrong-shard" in sys.argv)
    testing.say("All Qwen3 tensor-parallel checks PASS")
