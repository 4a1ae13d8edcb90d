"""Reference of topk_topp_sampling, and the plausibility rule for devices that cannot
replay its float32 steps."""

from __future__ import annotations

import math
import struct

import torch

from polyops.testing.references._common import Tensor, _f64
from polyops.testing.tensors import F32, F64, I64

# ---------------------------------------------------------------------------
# topk_topp_sampling: EXACT token ids given `uniform` (or `seed`)
#
# The header src/base/topk_topp_sampling.h specifies every float32 step, so
# the reference replays it: torch's stable sort for the order, torch float32
# elementwise ops for the specified Exp, and a Python loop that rounds every
# partial sum to float32 (a float64 sum of two float32 values rounded once to
# float32 is the correctly rounded float32 sum, since 53 >= 2*24 + 2).
#
# A device whose kernel cannot replay those float32 steps bit for bit is
# judged by :func:`sampling_token_plausible` (the token's float64 probability
# interval within SAMPLING_EPS of u). That is the declared exception of npu
# (aclnn's softmax and cumsum round their own way; docs/backends/ascend.md); CPU and
# CUDA must match exactly. OpInfo.device_rules routes npu records to
# :func:`topk_topp_sampling_implausible_rows`.

SAMPLING_EPS = 1e-5
ONE_MINUS = 1.0 - 2.0**-24  # the largest float32 below 1


def _f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def _c(hex_literal: str) -> Tensor:
    return torch.tensor(float.fromhex(hex_literal), dtype=F32)


EXP_L = _c("0x1.715476p+0")
EXP_C1, EXP_C2 = _c("0x1.63p-1"), _c("-0x1.bd0106p-13")
EXP_P = [
    _c(h)
    for h in ("0x1.a0d2cep-13", "0x1.6e879cp-10", "0x1.11121p-7", "0x1.555382p-5", "0x1.555554p-3")
] + [_c("0x1.0p-1")]


def spec_exp(d: Tensor) -> Tensor:
    """The header's Exp(d) for float32 d <= 0, one rounded torch float32 op at a time."""
    if d.dtype != F32:
        raise ValueError(f"spec_exp: expected float32, got {d.dtype}")
    keep = d >= -80
    d = torch.where(keep, d, torch.zeros_like(d))
    n = torch.floor(d * EXP_L + _c("0x1p-1"))
    r = (d - n * EXP_C1) - n * EXP_C2
    q = EXP_P[0].expand_as(r)
    for coefficient in EXP_P[1:]:
        q = q * r + coefficient
    y = (q * (r * r) + r) + _c("0x1p0")
    scale = ((n.to(torch.int32) + 127) << 23).view(F32)
    return torch.where(keep, y * scale, torch.zeros_like(y))


def splitmix_uniform(seed: int, row: int) -> float:
    """The header's SplitMix64Uniform(seed, row) in [0, 1 - 2**-24]."""
    mask = (1 << 64) - 1
    z = (seed + (row + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z >> 40) * 2.0**-24


def _top_k(vocab: int, k: int) -> int:
    return vocab if k <= 0 or k >= vocab else k


def sampling_reference_row(x: Tensor, k: int, p: float, u: float) -> int:
    """The header's algorithm for one row of float32 logits: the sampled token id.

    NaN counts as -inf; tokens tied with the k-th largest logit are kept; +inf
    logits share the mass; a row with neither finite nor +inf logits is uniform."""
    x = torch.where(torch.isnan(x), -math.inf, x)
    order = torch.sort(x, descending=True, stable=True).indices
    xs = x[order]
    if xs[0] == math.inf:
        weights = (xs == math.inf).float()
    elif xs[0] == -math.inf:
        weights = torch.ones_like(xs)
    else:
        weights = spec_exp(xs - xs[0])
    top = _top_k(x.numel(), k)
    top = int((xs >= xs[top - 1]).sum())  # the k-th logit's ties are kept
    cumulative = [0.0]
    for weight in weights[:top].tolist():
        cumulative.append(_f32(cumulative[-1] + weight))
    p = _f32(p)
    prefix = top
    if p < 1.0:
        threshold = _f32(p * cumulative[top])
        prefix = next((j for j in range(1, top + 1) if cumulative[j] >= threshold), top)
    mass = cumulative[prefix]
    target = _f32(_f32(u) * mass)
    chosen = next(
        j for j in range(prefix) if cumulative[j + 1] > target or cumulative[j + 1] == mass
    )
    return int(order[chosen])


def _per_row(value, rows: int) -> list:
    return value.tolist() if isinstance(value, Tensor) else [value] * rows


def _sampling_rows(
    logits: Tensor, top_k, top_p, uniform: Tensor | None, seed: int | None
) -> tuple[list, list, list]:
    """Per row: k, p and u (from `uniform`, else splitmix64 of `seed`)."""
    rows = logits.shape[0]
    us = (
        uniform.tolist()
        if uniform is not None
        else [splitmix_uniform(seed, b) for b in range(rows)]
    )
    return _per_row(top_k, rows), _per_row(top_p, rows), us


def topk_topp_sampling_reference(
    logits: Tensor,
    top_k: int | Tensor,
    top_p: float | Tensor,
    uniform: Tensor | None = None,
    seed: int | None = None,
) -> Tensor:
    """int64 [B]: the token of each row, u from `uniform` or from `seed` (splitmix64)."""
    ks, ps, us = _sampling_rows(logits, top_k, top_p, uniform, seed)
    tokens = [
        sampling_reference_row(logits[b].cpu().float(), int(ks[b]), ps[b], us[b])
        for b in range(logits.shape[0])
    ]
    return torch.tensor(tokens, dtype=I64)


def sampling_token_plausible(
    x: Tensor, k: int, p: float, u: float, token: int, eps: float = SAMPLING_EPS
) -> bool:
    """Whether `token` is an acceptable draw for logits row `x` when exactness cannot be had.

    In float64: order the tokens as the header does, keep the top k, and
    normalize by the mass C_P of any prefix P the top-p rule could choose when
    p moves by `eps`. The token at rank j is plausible iff j < P and u lies
    within `eps` of its interval [C_j / C_P, C_{j+1} / C_P] for one such P.
    """
    x = _f64(x)
    x = torch.where(torch.isnan(x), -math.inf, x)
    order = torch.sort(x, descending=True, stable=True).indices
    xs = x[order]
    top = _top_k(x.numel(), k)
    top = int((xs >= xs[top - 1]).sum())
    if xs[0] == math.inf:
        weights = (xs == math.inf).double()[:top]
    elif xs[0] == -math.inf:
        weights = torch.ones(top, dtype=F64)
    else:
        weights = torch.exp(xs - xs[0])[:top]
    cumulative = torch.cat([torch.zeros(1, dtype=F64), weights.cumsum(0)]).tolist()
    total = cumulative[top]
    if _f32(p) >= 1.0:
        prefixes = [top]
    else:
        first = [
            next((j for j in range(1, top + 1) if cumulative[j] >= q * total), top)
            for q in (p - eps, p + eps)
        ]
        prefixes = range(first[0], first[1] + 1)
    rank = (order == token).nonzero().flatten().tolist()
    if not rank:
        return False
    j = rank[0]
    return any(
        j < prefix
        and cumulative[j] / cumulative[prefix] - eps
        <= u
        <= cumulative[j + 1] / cumulative[prefix] + eps
        for prefix in prefixes
    )


def topk_topp_sampling_implausible_rows(
    tokens: Tensor,
    logits: Tensor,
    top_k: int | Tensor,
    top_p: float | Tensor,
    uniform: Tensor | None = None,
    seed: int | None = None,
) -> list[int]:
    """The rows of int64 `tokens` [B] that :func:`sampling_token_plausible` rejects.

    logits [B, V] (any float dtype), top_k / top_p scalars or [B] tensors and
    uniform float32 [B] (or seed) as the op took them. u outside [0, 1) is
    judged as the clamped value the npu slot uses (u < 0 as 0, u >= 1 as the
    largest float32 below 1).
    """
    ks, ps, us = _sampling_rows(logits, top_k, top_p, uniform, seed)
    tokens = tokens.cpu().tolist()
    return [
        b
        for b in range(logits.shape[0])
        if not sampling_token_plausible(
            logits[b].cpu().float(), int(ks[b]), ps[b], min(max(us[b], 0.0), ONE_MINUS), tokens[b]
        )
    ]
