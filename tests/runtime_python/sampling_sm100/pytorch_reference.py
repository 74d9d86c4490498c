"""sampling_sm100 reference: the published generator and the Gumbel-max trick in plain PyTorch.

Philox4x32-10 as its paper defines it (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as
1, 2, 3", SC'11), checked against Random123's known answers (KAT: tests/kat_vectors of Random123, the
"philox4x32 10" rows); the layer's key layout (key = seed's two halves, counter = (token, position,
request, 0), word 0: layers/sampling_sm100.py) and the Gumbel transform computed in float64; the draw is
torch.argmax of logits + noise (float64). torch only.
"""
import torch

M0, M1 = 0xD2511F53, 0xCD9E8D57        # Philox4x32's multipliers
W0, W1 = 0x9E3779B9, 0xBB67AE85        # its key schedule's increments
MASK = 0xFFFFFFFF
PAD_REQUEST = 0xFFFFFFFF               # the key of a row past the batch's tokens (position = the row)
# Random123 tests/kat_vectors, "philox4x32 10": counter[4], key[2] -> output[4]
KAT = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
       ((MASK,) * 4, (MASK, MASK), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
       ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]


def _mulhilo(m: int, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of m * a for a 32-bit constant m and int64 tensor a of 32-bit values,
    in int64 without overflow (m split in 16-bit halves)."""
    upper, lower = a * (m >> 16), a * (m & 0xFFFF)          # each below 2^48
    t = ((upper & 0xFFFF) << 16) + lower                     # below 2^49
    return (upper >> 16) + (t >> 32), t & MASK


def philox4x32_10(counter: list[torch.Tensor], key: tuple[int, int]) -> list[torch.Tensor]:
    """The four output words (int64 tensors of 32-bit values) for counters of the same shape."""
    c = [x.to(torch.int64) & MASK for x in counter]
    k0, k1 = key
    for _ in range(10):
        hi0, lo0 = _mulhilo(M0, c[0])
        hi1, lo1 = _mulhilo(M1, c[2])
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0, k1 = (k0 + W0) & MASK, (k1 + W1) & MASK
    return c


def check_kat() -> None:
    for ctr, key, want in KAT:
        got = philox4x32_10([torch.tensor([v]) for v in ctr], key)
        assert [int(g) for g in got] == list(want), (ctr, key, [hex(int(g)) for g in got],
                                                     [hex(w) for w in want])


def gumbel(w: torch.Tensor) -> torch.Tensor:
    """The layer's transform in float64: u = (w + 1/2) / 2^32, g = -log(-log u), with -log u as
    -log1p(-(1 - u)) in the upper half (1 - u exact from the integer)."""
    w = w.to(torch.float64)
    low = -torch.log((w + 0.5) * 2.0 ** -32)
    high = -torch.log1p(-((MASK - w) + 0.5) * 2.0 ** -32)
    return -torch.log(torch.where(w < 2 ** 31, low, high))


def noise(seed: int, requests, positions, vocab: int) -> torch.Tensor:
    """[rows, vocab] float64 Gumbel noise for rows keyed (request, position)."""
    req = torch.as_tensor(requests, dtype=torch.int64).reshape(-1, 1)
    pos = torch.as_tensor(positions, dtype=torch.int64).reshape(-1, 1)
    tok = torch.arange(vocab, dtype=torch.int64).reshape(1, -1)
    shape = (req.shape[0], vocab)
    words = philox4x32_10([tok.expand(shape), pos.expand(shape), req.expand(shape),
                           torch.zeros(shape, dtype=torch.int64)], (seed & MASK, (seed >> 32) & MASK))
    return gumbel(words[0])


def scores(logits: torch.Tensor, seed: int, requests, positions) -> torch.Tensor:
    return logits.double() + noise(seed, requests, positions, logits.shape[1])


def sample(logits: torch.Tensor, seed: int, requests, positions) -> torch.Tensor:
    """[batch, 1] int64: torch.argmax of logits + noise (the first maximum; a NaN row's first NaN)."""
    return torch.argmax(scores(logits, seed, requests, positions), dim=-1, keepdim=True)


GAP = 1e-4   # a kernel scoring in fp32 errs by under 1e-5 here (|score| < 40: ulp 3.8e-6, two logs, one add)


def expected(got: torch.Tensor, logits: torch.Tensor, seed: int, requests,
             positions) -> tuple[torch.Tensor, int]:
    """The ids a correct kernel draws: sample(), except that a row whose two best finite scores lie within
    GAP (fp32 rounding may order them either way) accepts the second best too. Returns (ids to compare
    exactly with `got`, number of such near-tie rows)."""
    s = scores(logits, seed, requests, positions)
    want = torch.argmax(s, dim=-1, keepdim=True)
    finite = torch.where(torch.isfinite(s), s, torch.full_like(s, -float("inf")))
    top = torch.topk(torch.cat([finite, torch.full_like(s[:, :1], -float("inf"))], 1), 2, dim=-1)
    near = (top.values[:, 1] > -float("inf")) & (top.values[:, 0] - top.values[:, 1] < GAP) \
        & ~torch.isnan(s).any(-1) & ~torch.isposinf(s).any(-1)
    second = near & (got.flatten() == top.indices[:, 1])
    want[second, 0] = top.indices[second, 1]
    return want, int(near.sum())


def batch_keys(chunks, rows: int) -> tuple[list[int], list[int]]:
    """(request, position) of each of `rows` batch rows from (request, first position, count) chunks in
    slot order; rows past them: (PAD_REQUEST, row)."""
    req, pos = [], []
    for r, p, n in chunks:
        req += [r] * n
        pos += list(range(p, p + n))
    pad = range(len(req), rows)
    return req + [PAD_REQUEST] * len(pad), pos + list(pad)
