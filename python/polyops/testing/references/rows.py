"""References of the row ops: rms_norm, add_rms_norm, silu_and_mul, swiglu, causal_softmax."""

from __future__ import annotations

import torch

from polyops.testing.references._common import Tensor, _f64, _masked_softmax

# ---------------------------------------------------------------------------
# rms_norm, add_rms_norm: FLOAT32_COMPUTE


def rms_norm_reference(input: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight``, in float64."""
    x = _f64(input)
    mean_square = (x * x).mean(dim=-1, keepdim=True)
    return x / torch.sqrt(mean_square + eps) * _f64(weight)


def add_rms_norm_reference(
    x1: Tensor, x2: Tensor, gamma: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    """``(y, x)``: x = x1 + x2 rounded once to the dtype, as the contract says, and
    y = rms_norm(x, gamma, eps) of that rounded x. Both float64."""
    x = (_f64(x1) + _f64(x2)).to(x1.dtype)
    return rms_norm_reference(x, gamma, eps), _f64(x)


# ---------------------------------------------------------------------------
# silu_and_mul, swiglu: FLOAT32_COMPUTE


def silu_reference(x: Tensor) -> Tensor:
    """``x / (1 + exp(-x))`` in float64."""
    x = _f64(x)
    return x / (1.0 + torch.exp(-x))


def silu_and_mul_reference(input: Tensor) -> Tensor:
    """``silu(input[..., :d]) * input[..., d:]``, d = last dim // 2."""
    d = input.shape[-1] // 2
    return silu_reference(input[..., :d]) * _f64(input[..., d:])


def swiglu_reference(input: Tensor, gate: Tensor) -> Tensor:
    """``input * silu(gate)``."""
    return _f64(input) * silu_reference(gate)


# ---------------------------------------------------------------------------
# causal_softmax: FLOAT32_COMPUTE


def causal_softmax_reference(input: Tensor) -> Tensor:
    """Softmax over k of [..., q, k]; key j visible to row i iff j <= i + k - q."""
    q, k = input.shape[-2:]
    visible = torch.arange(k)[None, :] <= torch.arange(q)[:, None] + (k - q)
    return _masked_softmax(_f64(input), visible, all_neg_inf_is_zero=False)
