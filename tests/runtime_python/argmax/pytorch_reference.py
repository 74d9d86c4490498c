"""argmax reference: torch.argmax itself (the first maximum, a NaN row's first NaN), and the planted
logits rows the three argmax layers' tests share; torch only."""
import torch

PEAK = 8.0         # above every testing.randn value (unit normal), exact in bf16 / fp16
NAN, INF = float("nan"), float("inf")


def argmax(x: torch.Tensor) -> torch.Tensor:
    """[batch, vocab] -> [batch, 1] int64 (float64 compares as the dtype does: the conversion is exact)."""
    return torch.argmax(x.double(), dim=-1, keepdim=True)


def plant(x: torch.Tensor, kind: str, chunk: int) -> torch.Tensor:
    """Row x (in place, returned) made a case; chunk: a partial task's vocabulary range (boundaries)."""
    n = x.shape[0]
    if kind == "tie":             # equal maxima in one thread's scan (256 apart), one task: the lower
        x[[3, 259] if chunk > 259 else [0, 1]] = PEAK
    elif kind == "tie_boundary":  # equal maxima on both sides of the first task boundary, one higher later
        x[[chunk - 1, chunk]] = PEAK
    elif kind == "first":
        x[0] = PEAK
    elif kind == "last":
        x[n - 1] = PEAK
    elif kind == "nan":           # the first NaN, not the +inf nor the later NaN
        x[[1, n - 1]] = INF
        x[[n // 2, n - 2]] = NAN
    elif kind == "neg_inf":       # all -inf: index 0
        x[:] = -INF
    elif kind == "zeros":         # -inf around equal zeros: -0 first, then +0: the -0
        x[:] = -INF
        x[2], x[5] = -0.0, 0.0
    elif kind != "random":
        raise ValueError(kind)
    return x


KINDS = ["random", "tie", "tie_boundary", "first", "last", "nan", "neg_inf", "zeros"]


def logits(batch: int, vocab: int, dtype, gen, chunk: int | None = None, kinds=KINDS) -> torch.Tensor:
    """[batch, vocab] unit-normal logits (the `randn` of mirage.mpk.testing, passed in), row b planted
    as kinds[b % len(kinds)]; chunk: the partial split's range (default vocab // 2)."""
    from mirage.mpk import testing

    x = testing.randn((batch, vocab), dtype, gen)
    for b in range(batch):
        plant(x[b], kinds[b % len(kinds)], chunk or vocab // 2)
    return x
