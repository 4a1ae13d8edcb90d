"""Helpers every reference family shares: the exact float64 upcast and the masked softmax
of causal_softmax and attention."""

from __future__ import annotations

import math

import torch

from polyops.testing.tensors import F64

Tensor = torch.Tensor


def _f64(tensor: Tensor) -> Tensor:
    return tensor.to(device="cpu", dtype=F64)


def _masked_softmax(scores: Tensor, visible: Tensor, *, all_neg_inf_is_zero: bool) -> Tensor:
    """softmax over the last dim of the visible entries, as torch.softmax computes it:
    exp(s - max) / sum, so a NaN or +inf visible entry makes the row NaN. A row whose
    visible entries are all -inf is NaN (0 / 0, torch.softmax; causal_softmax) or, with
    `all_neg_inf_is_zero`, 0 (SDPA; attention). Rows that see nothing are 0, and hidden
    entries are 0 whatever they hold (docs/user/api.md, "NaN and Inf")."""
    if scores.shape[-1] == 0:
        return torch.zeros_like(scores)
    masked = scores.masked_fill(~visible, -math.inf)
    row_max = masked.amax(dim=-1, keepdim=True)  # NaN if the row holds one
    if all_neg_inf_is_zero:
        row_max = torch.where(row_max == -math.inf, 0.0, row_max)
    e = torch.where(visible, torch.exp(masked - row_max), 0.0)
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(visible & (total != 0), e / total, 0.0)
