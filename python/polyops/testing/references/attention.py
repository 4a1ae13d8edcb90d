"""References of flash_attention and paged_attention."""

from __future__ import annotations

import math

import torch

from polyops.testing.references._common import Tensor, _f64, _masked_softmax
from polyops.testing.tensors import F64

# ---------------------------------------------------------------------------
# flash_attention, paged_attention: ATTENTION


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float, visible: Tensor) -> Tensor:
    """softmax(q k^T * scale, masked) v for one sequence: q [Lq, Hq, D], k/v [Lk, Hkv, D]
    (query head h reads kv head h // (Hq / Hkv)), visible [Lq, Lk] bool; float64 [Lq, Hq, D].

    Hidden keys are left out of the sum, not weighted by 0; a visible key's value
    reaches the output even at weight 0 (0 * inf = NaN), as in IEEE arithmetic."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    probs = _masked_softmax(scores, visible[None], all_neg_inf_is_zero=True)  # [Hq, Lq, Lk]
    if bool(torch.isfinite(v).all()):
        return torch.einsum("hqk,khd->qhd", probs, v)
    # Elementwise, not a matrix product (which may skip zero weights or hidden keys'
    # NaN times 0): only with non-finite values, where it matters.
    terms = probs[..., None] * v.permute(1, 0, 2)[:, None]  # [Hq, Lq, Lk, D]
    return torch.where(visible[None, :, :, None], terms, 0.0).sum(dim=2).permute(1, 0, 2)


def _gather_paged(cache: Tensor, table_row: Tensor, length: int) -> Tensor:
    """Tokens 0..length-1 of one sequence from a paged cache [blocks, block_size, H, D]."""
    block_size = cache.shape[1]
    j = torch.arange(length)
    return cache[table_row.long()[j // block_size], j % block_size]


def flash_attention_reference(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    cu_seqlens_q: Tensor,
    cu_seqlens_kv: Tensor,
    block_table: Tensor | None = None,
    scale: float | None = None,
    causal: bool = True,
    window_left: int = -1,
    window_right: int = -1,
    sliding_window: int | None = None,
    cu_seqlens_q_host: Tensor | None = None,
    cu_seqlens_kv_host: Tensor | None = None,
) -> Tensor:
    """Varlen attention per sequence b: query rows cu_seqlens_q[b]:[b+1] over the kv
    tokens cu_seqlens_kv[b]:[b+1] (contiguous, or paged through block_table).
    Query row i of a sequence sits at position i + kv_len - q_len; key j is
    visible iff j <= pos (causal), j >= pos - window_left, j <= pos + window_right
    (a window side < 0 is unbounded; sliding_window=W means (W - 1, 0)).
    Rows that see no key are 0. The *_host copies equal cu_seqlens_q / cu_seqlens_kv
    by contract and are not read. float64 [Tq, Hq, D]."""
    if sliding_window is not None:
        window_left, window_right = sliding_window - 1, 0
    q, k, v = _f64(query), _f64(key), _f64(value)
    cu_q, cu_kv = cu_seqlens_q.tolist(), cu_seqlens_kv.tolist()
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = torch.zeros(q.shape, dtype=F64)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_kv[b], cu_kv[b + 1]
        q_len, kv_len = q1 - q0, k1 - k0
        if block_table is None:
            ks, vs = k[k0:k1], v[k0:k1]
        else:
            row = block_table[b].cpu()
            ks, vs = _gather_paged(k, row, kv_len), _gather_paged(v, row, kv_len)
        pos = torch.arange(q_len)[:, None] + kv_len - q_len
        j = torch.arange(kv_len)[None, :]
        visible = torch.ones(q_len, kv_len, dtype=torch.bool)
        if causal:
            visible &= j <= pos
        if window_left >= 0:
            visible &= j >= pos - window_left
        if window_right >= 0:
            visible &= j <= pos + window_right
        out[q0:q1] = _attend(q[q0:q1], ks, vs, scale, visible)
    return out


def paged_attention_reference(
    query: Tensor,
    key_cache: Tensor,
    value_cache: Tensor,
    seq_lens: Tensor,
    block_table: Tensor,
    *,
    scale: float | None = None,
    seq_lens_host: Tensor | None = None,
    block_table_host: Tensor | None = None,
) -> Tensor:
    """Decode: query row b [Hq, D] over the first seq_lens[b] tokens of its paged kv,
    no mask (length 0: zeros). The *_host copies equal seq_lens / block_table by
    contract and are not read. float64 [B, Hq, D]."""
    q, k, v = _f64(query), _f64(key_cache), _f64(value_cache)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = torch.zeros(q.shape, dtype=F64)
    table = block_table.cpu()
    for b, length in enumerate(seq_lens.tolist()):
        ks, vs = _gather_paged(k, table[b], length), _gather_paged(v, table[b], length)
        visible = torch.ones(1, length, dtype=torch.bool)
        out[b : b + 1] = _attend(q[b : b + 1], ks, vs, scale, visible)
    return out
