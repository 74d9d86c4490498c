"""Verification helpers: error-budget tolerances, evidence lines, non-vacuity checks.

Error budget. Every kernel computes in fp32 from its inputs and rounds once to
the output dtype. With u = unit roundoff (2^-8 bf16, 2^-11 fp16, 2^-24 fp32) and the
reference evaluated in float64 on the same inputs, each output element obeys

    |out - ref| <= rtol * |ref| + atol

    rtol = u_out + ops * u32
        u_out |ref|: the final rounding to the output dtype;
        ops * u32: a few fp32 operations per element (multiplies, exp, rsqrt); for a
        normalization the reduction error is relative to the result, so it adds
        (reduction_length / 2) ops (sum of squares, halved by the square root).
    atol = ((k + 1) * u32 + u_in) * scale + tiny_out / 2
        (k + 1) * u32 * scale: recursive fp32 summation of k terms in any order, with
        scale = sum_i |x_i * w_i| per element (Higham's gamma_k bound; products of bf16 or
        fp16 values are exact in fp32, fp32 products add the "+1");
        u_in * scale: inputs that are themselves rounded intermediates of a chain may sit
        one rounding away from the reference's (0 for graph inputs);
        tiny_out / 2: half the smallest subnormal of the output dtype, the rounding floor.

Normalizations (tol_normalization: rmsnorm, layernorm, softmax). A normalization scales each
element by a factor computed from a reduction over `length` elements of its row. A reduction
of positive terms (a sum of squares, a sum of exps) has a relative error <= length * u32
(recursive summation of k positive terms: gamma_k, relative to the sum itself), and the
factor inherits it relative to the result: raised to the power p with which the reduction
enters the factor (p = 1/2 under a (r)sqrt, 1 under a division), it adds p * length ops.
A reduction of signed terms (the mean that layernorm subtracts) is not relative to the
result: its error |d mu| <= (length + 1) u32 * mean_j |x_j| reaches the output multiplied
by the factor, an absolute term per element, atol's (k + 1) u32 * scale with k = length and
scale = mean_j |x_j| * factor * |w| (the `centered` argument). To first order a mean's error
does not move a two-pass variance mean((x - mu)^2) (its derivative sum_j 2 (x_j - mu) is 0),
so layernorm's second reduction is a positive one, like rmsnorm's. Per reduction:

    rmsnorm    mean(x^2) under rsqrt, p = 1/2:   ops = length / 2 + 6 (rsqrt, / length, + eps,
               2 multiplies, slack)  -- tol_rmsnorm, the same numbers as before
    layernorm  mean(x): centered = mean|x| * rstd * |w|; var = mean((x - mu)^2) under rsqrt,
               p = 1/2: length / 2, + 7 ops (the subtraction, + bias)
    softmax    max: exact; sum_j exp(x_j - max) under a division, p = 1: length, + exp's own
               error (a few ulps) and the subtraction's rounding, which exp turns into a
               relative error of u32 |x - max|: add max |x - max| ops
    Not covered: a bias b added after the scaling (layernorm's affine bias). The relative terms then
    apply to |y - b|, not to |y| = |ref|, so where b cancels y the bound is too tight; such a layer
    needs its own `scale` term (|y - b| times those ops), not this helper.

Attention (tol_attention): o = sum_j p_j v_j / sum_j p_j with p_j = exp(s_j - max), s_j = q . k_j / sqrt(D),
in fp32 (csrc/tasks/paged_attention.cuh). Two error sources, each a `tolerance` term:
    the weighted sums: the numerator over n keys and the denominator (relative to itself, so to o)
               are recursive sums of terms <= p_j |v_j|: (2 n + n / 32 + 4) fp32 roundings (the
               online softmax rescales both once per block of 32 keys) of value_scale =
               sum_j p_j |v_j| / sum_j p_j, plus the output rounding u_out |o| and a few ops in rtol;
    the scores: each s_j is off by at most eps_s * sigma_j, sigma_j = 2 |q|_2 |k_j|_2 / sqrt(D) (which
               bounds sum_d |q_d| (|k_d| + |k_d'|), the dot product's and RoPE's error scales; d' is d's
               RoPE partner), eps_s = u_in (a new key rounded to the cache's dtype) + (2 D + 21) u32 (the
               dot product over D, q's and k's norms (D / 2 + 6 each, tol_normalization) and RoPE (2
               each), the exp2 argument); o's derivative d o / d s_j = p_j (v_j - o) / sum p turns that
               into score_scale = max_j sigma_j * sum_j p_j |v_j - o| / sum_j p_j.
    A key rounded once more or a softmax without its max subtracted stays inside; a wrong page, a
    missing causal mask or a wrong position moves o by the size of v itself.
Attention on the tensor cores (tol_attention(tensor_cores=); csrc/tasks/paged_attention.cuh attn_pairs_mma:
16-bit layers, requests of at least 16 (token, query head) pairs). q is rounded to T for the mma and P =
exp2(s - m) too, l summing the rounded p~, so o = sum_j p~_j v_j / sum_j p~_j; the tensor core adds in an
unspecified order and precision (docs/simt.md), and the online softmax rescales per block of 8 keys:
    the scores: q's rounding moves s_j by u_T sum_d |q_d k_jd| / sqrt(D) <= u_T sigma_j, and the dot
               product's D terms count twice: eps_s + u_T + D u32, times score_scale;
    the sums:  p~_j = p_j (1 + d_j), |d_j| <= u_T, moves o by sum_j pi_j (d_j - d) (v_j - o) / (1 + d),
               d = sum_j pi_j d_j: at most 2 u_T sum_j pi_j |v_j - o| <= 4 u_T value_scale; the numerator's
               keys count twice and the rescales are keys / 8: + (keys + keys / 8) u32 value_scale.
    The lse (tol_attention_lse): the scores' terms in log2 units, and log2 of sum p~ moves by at most
               u_T / ln 2.

Split-K accumulate (tol_splitk_linear): y = y_0 + sum_j p_j over s = grid.y K slices, p_j an fp32 partial
over `terms` = K / s products (csrc/tasks/splitk_linear.cuh), each added into y as
y <- round_T(y + p_j) in an order the schedule decides. Two error sources, each a `tolerance` term:
    the partials: p_j is a recursive fp32 sum, off by <= (terms + 1) u32 sum_k |x_k w_jk| (gamma_k, as
               tol_linear), and the s of them add up to (terms + 1) u32 * scale, scale = |x| @ |W|^T;
    the adds:  each one rounds the running value r_j = y_0 + p_1 + ... (any order) once in fp32 and
               once to T: <= (u32 + u_T) |r_j| <= (u32 + u_T) * acc_scale, acc_scale = |y_0| + sum_j |p_j|
               (the reference's), so s of them: s (u32 + u_T) acc_scale, whatever the order; as
               variances, s roundings of at most acc_scale each (scale2 = s acc_scale^2).
    The final rounding is one of the s adds: rtol = u_T + 2 u32 (the partials' ops) is there for
    `tolerance`'s form only. A lost partial, an overwrite of y_0 or a wrong K slice moves y by a
    partial's own size, ~|p_j|, far outside. A task run alone (kernel level) is the case s = 1 over its
    own slice: y_0 + p_j, one add.

Split-KV attention (tol_attention_lse, tol_attention_merge; csrc/tasks/paged_attention_split_kv*.cuh). Each
chunk c is an attention over its keys (tol_attention with that chunk's key count and scales) that also
writes lse_c = log2 sum_j exp(s_j) = m + log2 l in fp32 (m the max of the log2-scaled scores, l = sum_j
exp2(s_j - m) in [1, n]):
    lse's error (tol_attention_lse): the scores move a log-sum-exp by at most the largest score error, in
               log2 units log2(e) eps_s sigma_max (eps_s as above, sigma_max = max_j sigma_j over the chunk's
               keys: a `tolerance` term k = 2 D + 20, input_rounding = the cache's dtype, scale log2(e)
               sigma_max); l's relative error (n + n / 32 + 4 roundings of the online sum and its rescales, 4
               more for exp2's own) becomes log2(e) times it, absolute, and log2f's few ulps of log2 l <=
               log2 n: k = n + n / 32 + 8 of scale log2(e) + log2 n; m + log2 l rounds relative to |lse|
               (ops 4).
    the merge (tol_attention_merge): o = sum_c w_c o_c / W, w_c = 2^(lse_c - m), pi_c = w_c / W. A chunk
               output off by e_c (its budget, atol + rtol |o_c|: its attention and its rounding to the dtype,
               u_out in rtol) moves o by sum_c pi_c e_c; an lse_c off by D_c (its budget, plus the merge's
               own rounding of lse_c - m, u32 |lse_c - m|, and exp2f's few ulps, 3 u32 / ln 2) scales w_c by
               2^D_c, and d o / d ln w_c = pi_c (o_c - o) gives ln 2 sum_c pi_c |o_c - o| D_c (m's own error
               cancels in the ratio); the merge's fp32 sums over C chunks (numerator and denominator, the
               products and the division: k = 2 C + 1 of value_scale = sum_c pi_c |o_c|) and its output
               rounding (rtol). The statistical model adds the chunks' sigmas linearly (any correlation:
               Minkowski), the merge's own as independent roundings. A merge that ignores lse (equal weights)
               or takes lse in natural-log units moves o by pi_c |o_c - o| itself, far outside.

fp8 GEMMs (tol_fp8_quantized; csrc/tasks/moe_w13_fp8.cuh). The kernel reads e4m3 codes q and block scales
read as powers of two p (UE8M0), so x~ = q p is exact in float64 and the product of two codes exact in fp32:
against the reference on x~ and w~ the kernel's only errors are its fp32 sums and its output rounding, the
linear's budget (tol_linear over K, scale = |x~| @ |w~|^T). Against the operands before quantization, x and
w, each code adds its rounding: with p a power of two >= amax / 448 (no saturation), x / p rounds to e4m3
within half an ulp: 2^-4 |x| (p = 4 significand bits: u_e4m3) for a normal quotient, half the subnormal
spacing 2^-9 below 2^-6, so

    |x~ - x| <= d(x) = 2^-4 |x| + 2^-10 p           (e4m3_rounding_bound)
    |x~ w~ - x w| <= d(x) |w~| + |x| d(w)          per product, so per output
    quant_scale = d(x) @ |w~|^T + |x| @ d(w)^T      on top of the linear's budget,

with variance sum_k (d(x_k) w~_k)^2 / 3 + (x_k d(w_k))^2 / 3 for the rms ratio (independent roundings).
A scale that is not a power of two (amax / 448) is read as the power below it (MPK's kernel): x~ is then up
to 2x off x, by design, and only the first comparison applies. A dropped block, a wrong expert or a scale
read from the wrong row moves the output by the size of a block's own contribution, far outside both.

These are worst-case bounds, not fitted thresholds: a missed tile, a wrong column or a
dropped dependency produces errors of the size of |ref| itself, far outside them in fp32.
For bf16/fp16 chains the tight check is per layer (each layer's reference applied to the
kernel's own inputs); the end-to-end bound composes the layers' u_in terms.

Whole models (tol_peer). A model's intermediate against a float64 run of the model from the graph's
inputs inherits every upstream error, amplified by norms (1 / rms) and softmax by data-dependent factors,
so no product of per-layer bounds is tight or even finite in general. The budget instead has two parts:
the layer's own bound (its tol_* on its inputs) and twice the largest error a peer implementation makes
in the same dtype on the same inputs (the Hugging Face model run in it): the kernel's chain inherits
roughly what the peer's does, and the factor 2 is FlashAttention's test criterion. A wrong weight, norm
or position moves an intermediate by the size of the change itself, outside it (test_qwen3_decoder.py's
control: one q_norm weight 1% off).

Statistical check (the rms ratio). The worst-case bound grows like k: it assumes every
rounding at its maximum, all of one sign. A correct kernel's errors are independent roundings
that grow like sqrt(k), so at large k the worst-case bound has room for a systematic loss of
precision (a K=4096 fp32 linear that rounds its inputs to bf16; an RMSNorm that divides by
h-1 at h=4096). So each comparison also checks the errors against a statistical budget.

    Model: each element's error is a sum of independent, zero-mean roundings. A round to
    nearest of v is uniform within half an ulp, so its variance is (ulp/2)^2 / 3 <= (u v)^2 / 3
    (the same u that bounds it). Summing the terms of the worst-case budget as variances:

    sigma_i^2 = [ (u_out^2 + ops u32^2) ref_i^2     output rounding and `ops` fp32 operations
                  + (k + 1) u32^2 scale_i^2         k additions whose partial sums are <= scale_i
                                                    (+1: the products; exact for bf16/fp16 inputs)
                  + u_in^2 scale2_i                 rounded chain inputs: sum_j (x_j w_j)^2 if the
                                                    caller gives scale2, else scale_i^2 (>= it)
                  + (tiny_out / 2)^2 ] / 3          the output's subnormal floor

    Statistic: r = sqrt(sum_i err_i^2 / sum_i sigma_i^2), the "rms ratio"; it fails above
    RMS_LIMIT = 3 when n_eff = (sum_i sigma_i^2)^2 / sum_i sigma_i^4 (the number of elements,
    discounted for unequal sigma_i) is at least RMS_MIN_N = 64; below that only the worst-case
    bound applies. Every evidence line shows `rms_ratio=r/limit` ("-" for the limit when the
    check does not apply, `rms_ratio=-` for a hand-made Tolerance without a model).

    False alarms. S = sum_i err_i^2 has E[S] = sum_i s_i^2 <= V = sum_i sigma_i^2 (s_i: the
    true standard deviation, sigma_i bounds it) and, with independent errors of Gaussian-like
    4th moment (kurtosis <= 3; one uniform rounding has 1.8, a sum of them lies in between),
    Var[S] = sum_i (kurt_i - 1) s_i^4 <= 2 sum_i sigma_i^4. The check fails iff S > T^2 V with
    T = RMS_LIMIT, i.e. S - E[S] >= (T^2 - 1) V, so by Cantelli's inequality
        P(false alarm) <= Var[S] / ((T^2 - 1) V)^2 <= 2 / ((T^2 - 1)^2 n_eff) = 1 / (32 n_eff),
    at most 4.9e-4 at n_eff >= 64 (the minimum: a few hundred comparisons per suite run then
    give well under one expected false alarm even by this loose bound; from a few elements a
    bias cannot be told from noise anyway). Errors shared by many elements (the rsqrt of an
    RMSNorm row) make elements dependent: read n_eff as the number of independent groups (16
    rows: 2e-3); even one error shared by all gives <= 2 / (T^2 - 1)^2 = 3%. The true rates are
    far lower: sigma_i is an upper bound (every partial sum is taken at its maximum, `scale`; a
    rounding at u |v| >= half an ulp of v), so a correct kernel shows r well below 1 (bf16/fp16
    output rounding alone gives r ~ 0.74, fp32 linear ~ 0.01), and the inputs come from fixed seeds.

    What it assumes: roundings are independent and unbiased (round to nearest). What it cannot
    see: a bias smaller than the noise it hides in (a relative bias below about T sqrt(u_out^2
    / 3), ~0.7% in bf16, under bf16's own output rounding), or one confined to a few elements
    (the worst-case bound is the check for those).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..dtypes import DType, to_dtype

U32 = 2.0**-24
_TINY = {torch.bfloat16: 2.0**-133, torch.float16: 2.0**-24, torch.float32: 2.0**-149,
         torch.float8_e4m3fn: 2.0**-9}
RMS_LIMIT = 3.0         # the rms ratio's limit T (module doc: false alarms <= 2 / ((T^2 - 1)^2 n_eff))
RMS_MIN_N = 64          # the fewest effective elements for which the rms ratio is checked


@dataclass
class Tolerance:
    atol: torch.Tensor | float     # per element (broadcastable) or scalar
    rtol: float
    why: str                       # how the budget was derived, for the failure message
    # The statistical model (module doc): sigma_i^2 = var_abs + var_rel * ref_i^2. None: no model
    # (a hand-made budget, e.g. one carrying a worst-case upstream error): the rms ratio is not checked.
    var_abs: torch.Tensor | float | None = None
    var_rel: float = 0.0


def tolerance(dtype: DType | torch.dtype, *, k: int = 0, scale: torch.Tensor | float | None = None,
              ops: float = 4, input_rounding: DType | torch.dtype | None = None,
              scale2: torch.Tensor | float | None = None) -> Tolerance:
    """The one tolerance function: output rounding + fp32 accumulation over k terms, as a
    worst-case bound (atol, rtol) and as per-element variances for the rms ratio (module doc).

    scale2: sum of the squared terms per element (sum_j (x_j w_j)^2), for the input-rounding
    variance; default scale^2, which is never smaller."""
    d = to_dtype(dtype)
    u_in = to_dtype(input_rounding).unit_roundoff if input_rounding is not None else 0.0
    rtol = d.unit_roundoff + ops * U32
    floor = _TINY[d.torch] / 2
    var_rel = (d.unit_roundoff**2 + ops * U32**2) / 3
    if scale is None:
        atol: torch.Tensor | float = floor
        var_abs: torch.Tensor | float = floor**2 / 3
    else:
        s = scale.double() if isinstance(scale, torch.Tensor) else float(scale)
        s2 = s * s if scale2 is None else (scale2.double() if isinstance(scale2, torch.Tensor) else scale2)
        atol = ((k + 1) * U32 + u_in) * s + floor
        var_abs = ((k + 1) * U32**2 * s * s + u_in**2 * s2 + floor**2) / 3
    why = f"u_out={d.unit_roundoff:.3g}, k={k}, ops={ops:g}, u_in={u_in:.3g}"
    return Tolerance(atol, rtol, why, var_abs, var_rel)


def tol_peer(peer: torch.Tensor, ref: torch.Tensor, local: Tolerance) -> Tolerance:
    """A whole model against a float64 reference, where no chain of per-layer bounds composes (norms and
    softmax amplify upstream errors by data-dependent factors). An intermediate's error is its own layer's
    (within `local`, that layer's budget on its inputs) plus what it inherits from upstream, which a peer
    implementation in the same dtype (`peer`: the Hugging Face model run in it) estimates: allowed twice the
    peer's largest error (FlashAttention's criterion) plus the largest local bound. Worst case only."""
    peer_err = float((peer.double() - ref.double()).abs().max())
    own = float((local.atol + local.rtol * ref.double().abs()).max())
    return Tolerance(2 * peer_err + own, 0.0, f"2 x the peer's max error {peer_err:.3g} + the layer's own "
                                             f"{own:.3g} ({local.why})")


def tol_elementwise(dtype, scale: torch.Tensor | None = None, input_rounding=None) -> Tolerance:
    """add / silu_mul / copy: a few fp32 ops per element; scale = |a| + |b| for a sum."""
    k = 1 if scale is not None else 0
    return tolerance(dtype, k=k, scale=scale, ops=8, input_rounding=input_rounding)


def tol_linear(dtype, k: int, scale: torch.Tensor, input_rounding=None,
               tensor_cores: bool = False) -> Tolerance:
    """x @ W^T (+ residual): scale = |x| @ |W|^T (+ |residual|), k = in_features (+1).

    tensor_cores (the layer's params["tensor_cores"], csrc/tasks/mma_linear.cuh): a tensor core adds the
    exact products in an order and with a rounding the PTX ISA leaves open, truncating on some GPUs, whose
    unit roundoff 2^-23 is twice round-to-nearest's; gamma_k's bound then holds with k counted twice."""
    return tolerance(dtype, k=2 * k if tensor_cores else k, scale=scale, ops=2, input_rounding=input_rounding)


def tol_normalization(dtype: DType | torch.dtype, length: int, *, power: float = 0.5, ops: float = 6,
                      centered: torch.Tensor | float | None = None,
                      input_rounding: DType | torch.dtype | None = None) -> Tolerance:
    """A row normalization over `length` elements (module doc, "Normalizations"): the reduction of
    positive terms enters the per-row factor to `power` (1/2 under a (r)sqrt, 1 under a division),
    adding power * length fp32 ops relative to the result; `ops`: the other per-element operations.
    centered: per element, mean_j |x_j| * factor * |w|, the scale of a subtracted mean's error
    (layernorm), an absolute term of length + 1 roundings; None: no mean is subtracted."""
    k = length if centered is not None else 0
    return tolerance(dtype, k=k, scale=centered, ops=power * length + ops, input_rounding=input_rounding)


def tol_rmsnorm(dtype: DType | torch.dtype, hidden: int) -> Tolerance:
    """rmsnorm: the mean of squares under the rsqrt, relative to the result (tol_normalization)."""
    return tol_normalization(dtype, hidden)


def tol_rmsnorm_linear(dtype: DType | torch.dtype, hidden: int, scale: torch.Tensor,
                       tensor_cores: bool = False) -> Tolerance:
    """rmsnorm then linear, fused: each normalized n_k is within tol_rmsnorm's relative budget (u_T + (hidden
    / 2 + 6) u32) of the reference, which reaches the output times scale = sum_k |n_k W_jk|, on top of the
    linear's (hidden + 1) u32 scale and its output rounding: as input_rounding = dtype and hidden / 2 + 6 more
    terms of k (csrc/tasks/rmsnorm_linear.cuh). tensor_cores (the layer's params): the linear's hidden
    counted twice, as tol_linear."""
    dot = 2 * hidden if tensor_cores else hidden
    return tolerance(dtype, k=dot + (hidden + 1) // 2 + 6, scale=scale, ops=2, input_rounding=dtype)


def tol_attention(dtype: DType | torch.dtype, head_dim: int, keys: int, value_scale: torch.Tensor,
                  score_scale: torch.Tensor, score_var: torch.Tensor | None = None,
                  tensor_cores: bool | torch.Tensor = False) -> Tolerance:
    """Attention's output (module doc, "Attention"): the weighted sums' term over `keys` keys plus the
    scores' term; both scales per output element from the reference's probabilities. score_var: the
    statistical model's sum_j (p_j (v_j - o))^2 sum_d (q_d k_jd)^2 / D (independent key roundings;
    tolerance's scale2), default score_scale^2, which bounds it. tensor_cores: where the kernel took
    them (a bool, or a mask broadcast against the output: layers/paged_attention.py tensor_core_rows),
    the module doc's "Attention on the tensor cores" terms are added."""
    sums = tolerance(dtype, k=2 * keys + keys // 32 + 4, scale=value_scale, ops=4)
    scores = tolerance(dtype, k=2 * head_dim + 20, scale=score_scale, ops=0, input_rounding=dtype,
                       scale2=score_var)
    floor = _TINY[to_dtype(dtype).torch] / 2
    tol = Tolerance(sums.atol + scores.atol - floor, sums.rtol, f"attention over {keys} keys: {sums.why}; "
                    f"scores: {scores.why}", sums.var_abs + scores.var_abs - floor**2 / 3, sums.var_rel)
    u = to_dtype(dtype).unit_roundoff
    return _on_tensor_cores(tol, tensor_cores, ((keys + keys // 8) * U32 + 4 * u) * value_scale.double()
                            + (head_dim * U32 + u) * score_scale.double())


def _on_tensor_cores(tol: Tolerance, tensor_cores: bool | torch.Tensor, extra: torch.Tensor) -> Tolerance:
    """tol plus the worst-case term `extra` (and its variance as a uniform error) where tensor_cores (a
    bool or a mask) says attention ran on them (module doc, "Attention on the tensor cores")."""
    if tensor_cores is False:
        return tol
    tc = torch.as_tensor(tensor_cores, dtype=torch.float64, device=extra.device)
    why = tol.why + "; tensor cores: q and P rounded, D and the keys counted twice"
    return Tolerance(tol.atol + tc * extra, tol.rtol, why, tol.var_abs + tc * extra**2 / 3, tol.var_rel)


def tol_qk_norm_rope(dtype: DType | torch.dtype, head_dim: int, scale: torch.Tensor) -> Tolerance:
    """A key as attention stores it: RMSNorm over head_dim (relative error (head_dim / 2 + 6) u32,
    tol_normalization) then RoPE's a cos - b sin (3 ops), whose error is relative to scale = |n_a cos| +
    |n_b sin| (|n| without RoPE), not to the result, which may cancel; then rounded once to dtype."""
    return tolerance(dtype, k=head_dim // 2 + 9, scale=scale, ops=0)


def tol_splitk_linear(dtype: DType | torch.dtype, terms: int, adds: int, scale: torch.Tensor,
                      acc_scale: torch.Tensor, tensor_cores: bool = False) -> Tolerance:
    """y += x @ W^T split over K (module doc, "Split-K accumulate"): `adds` atomic adds into y, each of an
    fp32 partial over `terms` products; scale = |x| @ |W|^T, acc_scale = |y_0| + sum_j |partial_j|.
    tensor_cores: the partials' terms count twice (tol_linear)."""
    sums = tolerance(dtype, k=2 * terms if tensor_cores else terms, scale=scale, ops=2)
    rounds = tolerance(dtype, k=0, scale=adds * acc_scale, ops=0, input_rounding=dtype,
                       scale2=adds * acc_scale.double() ** 2)
    floor = _TINY[to_dtype(dtype).torch] / 2
    return Tolerance(sums.atol + rounds.atol - floor, sums.rtol, f"split-K, {adds} add(s): {sums.why}; adds: "
                     f"{rounds.why}", sums.var_abs + rounds.var_abs - floor**2 / 3, sums.var_rel)


def tol_attention_lse(dtype: DType | torch.dtype, head_dim: int, keys: int, sigma: torch.Tensor,
                      tensor_cores: bool | torch.Tensor = False) -> Tolerance:
    """A split-KV chunk's lse (float32, log2 units; module doc, "Split-KV attention"): sigma = max_j sigma_j
    per row and query head over the chunk's keys (0 without a key); keys: the most keys a row attends;
    dtype: the cache's (its new keys' rounding). tensor_cores: as tol_attention's."""
    scores = tolerance(torch.float32, k=2 * head_dim + 20, scale=sigma * (1 / math.log(2)), ops=0,
                       input_rounding=dtype)
    sums = tolerance(torch.float32, k=keys + keys // 32 + 8, scale=1 / math.log(2) + math.log2(max(keys, 2)),
                     ops=4)
    floor = _TINY[torch.float32] / 2
    tol = Tolerance(sums.atol + scores.atol - floor, sums.rtol, f"lse over {keys} keys: {sums.why}; scores: "
                    f"{scores.why}", sums.var_abs + scores.var_abs - floor**2 / 3, sums.var_rel)
    u = to_dtype(dtype).unit_roundoff
    return _on_tensor_cores(tol, tensor_cores, (head_dim * U32 + u) * sigma.double() / math.log(2)
                            + (keys // 8 * U32 + u) * (1 / math.log(2) + math.log2(max(keys, 2))))


def tol_attention_merge(dtype: DType | torch.dtype, head_dim: int, lse: list, outs: list, chunk_tols: list,
                        lse_tols: list) -> Tolerance:
    """The split-KV merge's output (module doc, "Split-KV attention"), per chunk c: lse[c] the reference lse
    [rows, Hq] (-inf: no key), outs[c] the reference partial output [rows, Hq * head_dim], chunk_tols[c]
    the budget of the kernel's partial output (same layout; None: exact) and lse_tols[c] of its lse
    ([rows, Hq]; None: exact)."""
    ls = [x.double().repeat_interleave(head_dim, dim=-1) for x in lse]
    m = torch.stack(ls).amax(0).nan_to_num(0.0, 0.0, 0.0)     # -inf (no chunk holds a key): 0
    w = [torch.where(torch.isinf(x), 0.0, torch.exp2(x - m)) for x in ls]
    total = sum(w)
    pi = [torch.where(total > 0, x / torch.where(total > 0, total, 1.0), 0.0) for x in w]
    o = sum(p * x.double() for p, x in zip(pi, outs))
    value_scale = sum(p * x.double().abs() for p, x in zip(pi, outs))
    merge = tolerance(dtype, k=2 * len(outs) + 1, scale=value_scale, ops=2)
    atol, sig = merge.atol, 0.0
    for p, x, l_c, ct, lt in zip(pi, (x.double() for x in outs), ls, chunk_tols, lse_tols):
        e, s = 0.0, 0.0
        if ct is not None:
            e = torch.as_tensor(ct.atol, dtype=torch.float64, device=x.device) + ct.rtol * x.abs()
            s = (torch.as_tensor(ct.var_abs, dtype=torch.float64, device=x.device)
                 + ct.var_rel * x * x).sqrt()
        own = U32 * ((l_c - m).abs() + 3 / math.log(2))
        d, sd = own, own / math.sqrt(3)
        if lt is not None:
            la, lv = (torch.as_tensor(t, dtype=torch.float64, device=l_c.device).expand(lse[0].shape)
                      .repeat_interleave(head_dim, -1) for t in (lt.atol, lt.var_abs))
            d, sd = d + la + lt.rtol * l_c.abs(), sd + (lv + lt.var_rel * l_c * l_c).sqrt()
        spread = math.log(2) * p * (x - o).abs()
        atol = atol + torch.where(p > 0, p * e + spread * d, 0.0)
        sig = sig + torch.where(p > 0, p * s + spread * sd, 0.0)
    return Tolerance(atol, merge.rtol, f"merge of {len(outs)} chunks: {merge.why}; the chunks' budgets",
                     merge.var_abs + sig * sig, merge.var_rel)


E4M3_HALF_SUBNORMAL = 2.0**-10     # half e4m3's subnormal spacing 2^-9: the absolute rounding floor of a code


def e4m3_rounding_bound(v: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """|code * p - v| for v rounded to e4m3 under the power-of-two block scale p (elementwise, broadcast,
    float64; module doc, "fp8 GEMMs"): half an ulp, 2^-4 |v| normal, 2^-10 p subnormal."""
    return to_dtype(torch.float8_e4m3fn).unit_roundoff * v.double().abs() + E4M3_HALF_SUBNORMAL * p.double()


def tol_fp8_quantized(dtype, k: int, scale: torch.Tensor, quant_scale: torch.Tensor,
                      quant_scale2: torch.Tensor, tensor_cores: bool = False) -> Tolerance:
    """An fp8 GEMM's output against the product of its operands before quantization (module doc, "fp8
    GEMMs"): the linear's budget over k terms of scale = |x~| @ |w~|^T (tol_linear, tensor_cores as there),
    plus quant_scale = d(x) @ |w~|^T + |x| @ d(w)^T (e4m3_rounding_bound) and, for the rms ratio,
    quant_scale2 = the sum of those terms squared."""
    own = tol_linear(dtype, k, scale, tensor_cores=tensor_cores)
    return Tolerance(own.atol + quant_scale.double(), own.rtol, f"{own.why}; e4m3 rounding of both operands "
                     f"(2^-4 |v| + 2^-10 p per code)", own.var_abs + quant_scale2.double() / 3, own.var_rel)
