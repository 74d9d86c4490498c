"""Statistical tests of sampling_sm100_layer (csrc/tasks/sampling_sm100.cuh) that catch real sampler bugs,
each run on the test-mode kernel (generated code, several workers, jitter) and each rejecting the
negative controls below, which the cosine-similarity bar of MPK's and FlashInfer's tests lets through.

The experiment. One kernel samples a batch of R = 16 requests x P = 256 prompt positions (4,096 rows,
every row the same TARGET logits over V = 64 tokens, 4 of them masked with -inf, token 0 the most likely);
LAUNCHES = 4 launches with consecutive seeds (the seed is a runtime tensor: one build) give N = 16,384
draws, keyed by distinct (seed, request, position).

(1) Goodness of fit, Pearson's chi-square against p = softmax(TARGET) (float64). Bins: every token with
    expected count N p_j >= 5; the rest pooled into one bin (merged into the smallest bin if the pool
    itself expects < 5). Masked tokens form no bin: they must be drawn zero times (below), and an id
    outside [0, V) rejects outright. Under a correct sampler the counts are multinomial(N, p), and with
    every expected count >= 5 (Cochran's rule) X^2 follows chi-square with (bins - 1) degrees of freedom
    to within the approximation, so rejecting when its upper tail P(chi2_df >= X^2) < ALPHA = 1e-6 fails a
    correct sampler with probability 1e-6 per experiment (over the choice of seeds; the seeds are fixed,
    so a given run is deterministic).
(2) Independence across requests: the pairs (request 2k, request 2k + 1) at the same position and seed
    (8 x 256 x 4 = 8,192 pairs), each id mapped to one of G = 4 groups of contiguous ids of about equal
    probability (q_g = sum of p over the group; every M q_a q_b is above 5). The G x G table is tested
    against the product law M q_a q_b (known marginals, a goodness of fit of the joint: df = G^2 - 1 =
    15), same rule, same ALPHA: false alarm 1e-6. The pairs (position 2i, 2i + 1) of one request are
    tested the same way.
(3) Masked tokens: drawn zero times in every experiment. A correct kernel never draws one (-inf plus a
    finite Gumbel is -inf, below every unmasked score): false alarm 0.
(4) The transform's ends: with the generator's word forced to 0 on even and 2^32 - 1 on odd ids (a
    mutated build), the draws equal the reference's (the transform applied to those words: finite,
    -3.13 and 22.87) and no masked token is drawn; the naive transform -log(-log(w / 2^32)) under the
    same words gives -inf and +inf noise, NaN scores on masked tokens, and draws one: rejected.
    Deterministic: false alarm 0.

A test run therefore fails a correct sampler with probability at most 6e-6: three statistics ((1) and the
two tables of (2)) at ALPHA each, on each of the two seed sets (SEED_SETS), by the union bound (FALSE_ALARM;
(3) and (4) add nothing). test_the_statistics_false_alarm_rate_is_the_stated_one checks the statistics'
calibration on a correct sampler without the kernel: over 400 experiments, the rejections at levels 0.1,
0.05 and 0.01 are each level's binomial count, and any of the three rejects at most three times the level
(negative control: the tables read with (G - 1)^2 degrees of freedom fail it).
The controls, each a one-string mutation of the kernel (testing.mutated_kernel), and
the statistic that must reject each:
  temperature 1.1 where 1.0 is asked (x / 1.1)    -> (1)
  token 0 (the top token) never drawn (a scan from 1) -> (1)
  the id off by one (best + 1)                     -> (1)
  the request left out of the counter (every request the same stream) -> (2)
  the request added to the token id in the counter (neighbouring requests' streams shifted by one) -> (2)
Each STAT line also prints the cosine similarity of the frequencies to p, the bar of MPK's and
FlashInfer's tests (> 0.99): the temperature and both stream controls meet it (0.997 and above) and are
rejected here all the same.
Power (the rejection rate over repeated experiments, fresh seeds each): `python
tests/runtime_python/test_mode/test_sampling_statistics.py --power 20` measures it for every control and
the false-alarm count of the correct kernel; the suite runs each control on two seed sets.
"""
import math
import os
import sys

import pytest
import torch

from mirage.mpk import testing
from mirage.mpk.persistent_kernel import PersistentKernel

HERE = os.path.dirname(os.path.abspath(__file__))
R, P, V, G, LAUNCHES = 16, 256, 64, 4, 4
ALPHA = 1e-6
MASKED = [7, 21, 40, 63]
KERNEL = "sampling_sm100.cuh"
SCORE = "return x + sampling_gumbel(u.w[0]);"
COUNTER = "Philox4{{static_cast<uint32_t>(c), key.position, key.request, 0u}}"
CONTROLS = {   # name: (old, new, the statistic that must reject it)
    "temperature_1.1": (SCORE, "return x / 1.1f + sampling_gumbel(u.w[0]);", "fit"),
    "top_token_never_drawn": (SCORE, "return c == 0 ? -INFINITY : x + sampling_gumbel(u.w[0]);", "fit"),
    "id_off_by_one": ("y[r * yt.row_stride] = static_cast<uint32_t>(best);",
                      "y[r * yt.row_stride] = static_cast<uint32_t>(best) + 1;", "fit"),
    "request_not_in_counter": (COUNTER, "Philox4{{static_cast<uint32_t>(c), key.position, 0u, 0u}}",
                               "requests"),
    "streams_shifted_by_request": (
        COUNTER, "Philox4{{static_cast<uint32_t>(c) + key.request, key.position, 0u, 0u}}", "requests"),
}


def target() -> torch.Tensor:
    x = testing.randn((V,), torch.float32, testing.generator(offset=64), scale=1.5)
    x[0] = x.max() + 1.0
    x[MASKED] = -float("inf")
    return x


TARGET = target()
PROBS = torch.softmax(TARGET.double(), 0)


def kernel() -> PersistentKernel:
    rows = R * P
    meta = {"prompt_lengths": torch.full((R,), P, dtype=torch.int32),
            "step": torch.zeros(R, dtype=torch.int32),
            "output_tokens": torch.full((rows,), -1, dtype=torch.int64)}
    pk = PersistentKernel(**testing.cpu_config(
        jitter_seed=3, max_seq_length=P + 1, max_num_batched_tokens=rows, max_num_batched_requests=R,
        max_num_pages=R, page_size=P + 1, meta_tensors=meta))
    x = pk.attach_input(TARGET.expand(rows, V).contiguous(), name="logits")
    y = pk.attach_input(meta["output_tokens"].view(rows, 1), name="ids")
    pk.sampling_sm100_layer(logits=x, output=y, grid_dim=(16, 1, 1), block_dim=(128, 1, 1))
    pk.compile()
    return pk


def draws(pk, first_seed: int) -> torch.Tensor:
    """[LAUNCHES, R, P] ids: one launch per seed first_seed, first_seed + 1, ... (rows: request-major)."""
    seed, out = pk.get_tensor(pk.layers[0].params["seed"]), []
    for k in range(LAUNCHES):
        seed.fill_(first_seed + k)
        pk()
        out.append(pk.get_tensor("output_tokens").clone().view(R, P))
    return torch.stack(out)


def chi2_sf(x2: float, df: int) -> float:
    """P(chi-square with df degrees of freedom >= x2): the regularized upper incomplete gamma."""
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(x2 / 2, dtype=torch.float64)))


def pearson(observed: torch.Tensor, expected: torch.Tensor) -> tuple[float, int, float]:
    x2 = float(((observed.double() - expected) ** 2 / expected).sum())
    df = observed.numel() - 1
    return x2, df, chi2_sf(x2, df)


def fit(ids: torch.Tensor) -> tuple[float, str]:
    """(1) and (3): (p-value, the evidence); p = 0 for an id outside [0, V) or a masked token drawn."""
    ids = ids.flatten()
    n = ids.numel()
    counts = torch.bincount(ids.clamp(0, V), minlength=V + 1)[:V]    # (ids outside [0, V) dropped here)
    cosine = float(torch.nn.functional.cosine_similarity(counts.double(), PROBS, dim=0))
    bar = f"cosine {cosine:.4f}, MPK's bar > 0.99 {'met' if cosine > 0.99 else 'missed'}"
    if bool(((ids < 0) | (ids >= V)).any()):
        return 0.0, f"ids outside [0, {V}): {ids[(ids < 0) | (ids >= V)].unique().tolist()[:5]} ({bar})"
    masked = int(counts[MASKED].sum())
    if masked:
        return 0.0, f"masked tokens drawn {masked} times ({bar})"
    e = n * PROBS
    big, small = (e >= 5), (e > 0) & (e < 5)
    obs, exp = [counts[big]], [e[big]]
    if bool(small.any()):
        obs.append(counts[small].sum().view(1))
        exp.append(e[small].sum().view(1))
    obs, exp = torch.cat(obs), torch.cat(exp)
    if exp[-1] < 5 and exp.numel() > 1:          # the pool expects too little: merge it into the smallest bin
        j = int(torch.argmin(exp[:-1]))
        obs[j] += obs[-1]
        exp[j] += exp[-1]
        obs, exp = obs[:-1], exp[:-1]
    x2, df, p = pearson(obs, exp)
    return p, (f"chi2={x2:.1f} df={df} p={p:.3g} (N={n}, top token {int(counts[0])} drawn vs "
                       f"{float(e[0]):.0f} expected; {bar})")


def groups() -> torch.Tensor:
    """Each id's group: G contiguous ranges of about equal probability (id j in group floor(G * the
    probability of the ids before j)); every group has some (the top token's 0.4 < 2 / G)."""
    before = torch.cumsum(PROBS, 0) - PROBS
    g = torch.clamp((before * G).floor().long(), 0, G - 1)
    assert set(g[PROBS > 0].tolist()) == set(range(G)), g
    return g


def independent(a: torch.Tensor, b: torch.Tensor) -> tuple[float, str]:
    """(2) on the pairs (a[i], b[i]): the G x G table against the product of the group probabilities;
    (p-value, the evidence)."""
    g = groups()
    q = torch.zeros(G, dtype=torch.float64).index_add_(0, g, PROBS)
    a, b = a.flatten().clamp(0, V - 1), b.flatten().clamp(0, V - 1)
    # (index_select: advanced indexing g[a] takes ~25 ms here, 1000x longer)
    table = torch.bincount(g.index_select(0, a) * G + g.index_select(0, b), minlength=G * G)
    x2, df, p = pearson(table, a.numel() * torch.outer(q, q).flatten())
    same = float((a == b).double().mean())
    return p, (f"chi2={x2:.1f} df={df} p={p:.3g} (M={a.numel()} pairs, equal ids {same:.3f} vs "
                       f"{float((PROBS ** 2).sum()):.3f} expected)")


def across_requests(ids: torch.Tensor):
    return independent(ids[:, 0::2, :], ids[:, 1::2, :])


def across_positions(ids: torch.Tensor):
    return independent(ids[:, :, 0::2], ids[:, :, 1::2])


STATISTICS = {"fit": fit, "requests": across_requests, "positions": across_positions}
SEED_SETS = (1000, 2 ** 40)     # the first seeds of the suite's experiments (LAUNCHES consecutive seeds each)
# A run of the correct kernel fails if any statistic rejects in any seed set: at most this (union bound)
FALSE_ALARM = ALPHA * len(STATISTICS) * len(SEED_SETS)
STATED = f"{FALSE_ALARM:.0e}".replace("e-0", "e-")      # as the docstring writes it: 6e-6


def verdicts(ids: torch.Tensor) -> dict[str, tuple[bool, str]]:
    """Per statistic (rejected at ALPHA, the evidence)."""
    results = {name: stat(ids) for name, stat in STATISTICS.items()}
    return {name: (p < ALPHA, evidence) for name, (p, evidence) in results.items()}


def report(label: str, results: dict, must_reject: str | None) -> None:
    """One line per statistic; PASS/FAIL on the correct kernel (every one accepts) and on a control's
    statistic (it rejects); a control's other statistics are shown for information."""
    for name, (rejected, evidence) in results.items():
        verdict = "rejected" if rejected else "accepted"
        if must_reject is None or name == must_reject:
            verdict += " PASS" if rejected == (name == must_reject) else " FAIL"
        testing.say(f"STAT sampling[{label}] {name}: {evidence} alpha={ALPHA} {verdict}")
    if must_reject is None:
        testing.say(f"STAT sampling[{label}]: {len(results)} statistics at alpha={ALPHA} each; a run of "
                    f"{len(SEED_SETS)} seed sets fails a correct sampler with probability <= "
                    f"{STATED}")


@pytest.fixture(scope="module")
def correct():
    pk = kernel()
    yield pk
    pk.finalize()


@pytest.mark.parametrize("first_seed", SEED_SETS)
def test_a_correct_sampler_passes_every_statistic(correct, first_seed):
    results = verdicts(draws(correct, first_seed))
    report(f"correct,seeds from {first_seed}", results, None)
    assert not any(rejected for rejected, _ in results.values()), results


@pytest.mark.parametrize("control", sorted(CONTROLS))
def test_each_control_is_rejected(tmp_path, control):
    old, new, statistic = CONTROLS[control]
    with testing.mutated_kernel(tmp_path, KERNEL, old, new):
        pk = kernel()
    try:
        for first_seed in SEED_SETS:
            results = verdicts(draws(pk, first_seed))
            report(f"{control},seeds from {first_seed}", results, statistic)
            assert results[statistic][0], \
                f"control {control}: {statistic} accepted it: {results[statistic][1]}"
    finally:
        pk.finalize()


def reference_draws(gen: torch.Generator) -> torch.Tensor:
    """[LAUNCHES, R, P] ids of a correct sampler without the kernel: torch.multinomial of softmax(TARGET),
    independent draws (the law the statistics test; the reference's Philox-keyed Gumbel-max, which the exact
    tests hold the kernel to, takes seconds per launch in int64 arithmetic)."""
    n = LAUNCHES * R * P
    return torch.multinomial(PROBS, n, replacement=True, generator=gen).view(LAUNCHES, R, P)


def binomial_range(n: int, p: float, tail: float = 1e-4) -> tuple[int, int]:
    """[lo, hi]: the counts of Binomial(n, p) outside which each tail has probability below `tail`."""
    pmf = [math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]
    lo = next(k for k in range(n + 1) if sum(pmf[:k + 1]) >= tail)
    hi = next(k for k in range(n, -1, -1) if sum(pmf[k:]) >= tail)
    return lo, hi


CALIBRATION = 400, (0.1, 0.05, 0.01)      # experiments, levels


def calibration(experiments: int = CALIBRATION[0]) -> list[str]:
    """Over K = `experiments` experiments of reference_draws, per level a of CALIBRATION: the experiments
    each statistic rejects (a Binomial(K, a) count, within its 1e-4 tails) and those any of the three
    rejects (at most Binomial(K, 3 a): the union bound); the levels that fail."""
    levels = CALIBRATION[1]
    gen = torch.Generator().manual_seed(31)
    pvalues = torch.tensor([[stat(reference_draws(gen))[0] for stat in STATISTICS.values()]
                            for _ in range(experiments)], dtype=torch.float64)
    failed = []
    for a in levels:
        counts = (pvalues < a).sum(0).tolist()
        union = int((pvalues < a).any(1).sum())
        lo, hi = binomial_range(experiments, a)
        union_hi = binomial_range(experiments, len(STATISTICS) * a)[1]
        ok = all(lo <= c <= hi for c in counts) and union <= union_hi
        testing.say(f"STAT sampling[calibration, {experiments} experiments of a correct sampler] level {a}: "
                    f"rejected by {dict(zip(STATISTICS, counts))} (Binomial({experiments}, {a}): "
                    f"[{lo}, {hi}]), by any of the three {union} (<= {union_hi}, the union bound "
                    f"{len(STATISTICS) * a:g}) {'PASS' if ok else 'FAIL'}")
        failed += [] if ok else [f"level {a}: rejections {counts}, by any {union}"]
    return failed


def test_the_statistics_false_alarm_rate_is_the_stated_one():
    """FALSE_ALARM, the docstring's rate, rests on each statistic's p-value being uniform under a correct
    sampler (the chi-square approximation) and on the union bound over the statistics and seed sets:
    calibration() holds at every level, and the docstring states FALSE_ALARM. (At ALPHA = 1e-6 itself no
    run could count; the levels here check the approximation where counting can.)"""
    stated = f"probability at most {STATED}"
    assert stated in __doc__, f"the module docstring does not state '{stated}'"
    failed = calibration()
    assert not failed, f"the statistics' false alarms are not their levels': {failed}"


def test_a_statistic_with_the_wrong_degrees_of_freedom_fails_the_calibration(monkeypatch):
    """Negative control of the check above: the independence tables read with (G - 1)^2 = 9 degrees of
    freedom (the textbook count for estimated marginals; here the marginals are known: G^2 - 1 = 15), so
    their p-values are too small and they reject far more often than the level."""
    right = pearson

    def pearson_df9(observed: torch.Tensor, expected: torch.Tensor) -> tuple[float, int, float]:
        x2, df, p = right(observed, expected)
        return (x2, (G - 1) ** 2, chi2_sf(x2, (G - 1) ** 2)) if observed.numel() == G * G else (x2, df, p)
    monkeypatch.setitem(globals(), "pearson", pearson_df9)
    failed = calibration(100)        # (far off at every level: fewer experiments show it)
    testing.say(f"CAUGHT sampling calibration with df (G-1)^2 for the tables: {failed}")
    assert failed, "the tables' too-small p-values passed the calibration"


FORCED = ("const Philox4 u = philox4x32_10(",
          "const Philox4 u = (c & 1) ? Philox4{{0xFFFFFFFFu, 0u, 0u, 0u}} : Philox4{{0u, 0u, 0u, 0u}};\n"
          "                (void)philox4x32_10(")
NAIVE = ("MPK_HOST_DEVICE MPK_INLINE float sampling_gumbel(uint32_t w) {",
         "MPK_HOST_DEVICE MPK_INLINE float sampling_gumbel(uint32_t w) {\n"
         "    if (w == w) return -logf(-logf(static_cast<float>(w) * 2.3283064365386963e-10f));")


def forced_draws(tmp_path, naive: bool) -> torch.Tensor:
    with testing.mutated_kernel(tmp_path, KERNEL, *FORCED):
        if naive:   # a second replacement in the same copy: mutated_kernel copies the sources it runs on
            path = os.path.join(os.environ["MPK_CSRC_DIR"], "tasks", KERNEL)
            text = open(path).read()
            assert text.count(NAIVE[0]) == 1
            open(path, "w").write(text.replace(*NAIVE))
        pk = kernel()
    try:
        return draws(pk, 5)[0]
    finally:
        pk.finalize()


def test_the_transform_is_finite_at_both_ends_of_the_generator(tmp_path):
    """(4): words 0 (even ids) and 2^32 - 1 (odd ids) everywhere: the reference's noise for them is finite,
    so every row draws argmax(TARGET + noise) (an unmasked odd id); the naive transform draws a masked one."""
    ref = testing.load_reference(os.path.join(HERE, "..", "sampling_sm100", "x.py"))
    words = torch.where(torch.arange(V) % 2 == 1, 2 ** 32 - 1, 0)
    noise = ref.gumbel(words)
    assert bool(torch.isfinite(noise).all())
    want = int(torch.argmax(TARGET.double() + noise))
    assert want % 2 == 1 and want not in MASKED
    got = forced_draws(tmp_path / "layer", naive=False)
    testing.assert_equal("sampling[forced words 0 / 2^32-1].ids", got, torch.full_like(got, want))
    bad = forced_draws(tmp_path / "naive", naive=True)
    drawn = sorted(set(bad.flatten().tolist()))
    testing.say(f"CAUGHT sampling naive transform -log(-log(w / 2^32)) at words 0 / 2^32-1: draws {drawn} "
                f"(masked {MASKED}) PASS")
    assert set(drawn) & set(MASKED), f"the naive transform drew no masked token: {drawn}"


def power(repeats: int) -> None:
    """The rejection rate of each control by its statistic, and the correct kernel's false alarms, over
    `repeats` experiments with fresh seeds (python this file --power N)."""
    import tempfile

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for control in [None, *sorted(CONTROLS)]:
            if control is None:
                pk = kernel()
            else:
                with testing.mutated_kernel(f"{tmp}/{control}", KERNEL, *CONTROLS[control][:2]):
                    pk = kernel()
            rejected = {name: 0 for name in STATISTICS}
            for k in range(repeats):
                for name, (rej, _) in verdicts(draws(pk, 10 ** 6 * (k + 1))).items():
                    rejected[name] += rej
            pk.finalize()
            rows.append((control or "correct (false alarms)", rejected))
            print(f"POWER {rows[-1][0]:<28} " + "  ".join(f"{n} {r}/{repeats}" for n, r in rejected.items()),
                  flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--power"]:
        power(int(sys.argv[2]))
    else:
        testing.run_pytest_file_as_script(__file__, sys.argv[1:])
