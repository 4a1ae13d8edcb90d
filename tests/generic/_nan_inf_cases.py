"""What the NaN/infinity tests of the attention ops share with the CUDA attention tests:
the special-value check, the float64 reference and the cases.
"""

from __future__ import annotations

import math

import torch

from polyops.testing.references import (
    flash_attention_reference,
)
from tests.conftest import BF16, F16, F32, TOLERANCES

INF, NAN = math.inf, math.nan

# Attention outputs are convex combinations of values: absolute tolerances
# scale with max |v| (as in _attention_cases.py).
ATTENTION_ATOL = {F16: 2e-3, BF16: 1e-2, F32: 2e-5}


def assert_specials_close(actual, expected, dtype, atol=None, msg=""):
    """NaN at the same positions, infinities equal, finite values within tolerance."""
    assert actual.dtype == dtype
    assert actual.shape == expected.shape
    actual = actual.double()
    nan_a, nan_e = actual.isnan(), expected.isnan()
    if not torch.equal(nan_a, nan_e):
        where = (nan_a != nan_e).nonzero()[:8].tolist()
        raise AssertionError(f"{msg} NaN positions differ at {where}")
    inf_e = expected.isinf()
    assert torch.equal(actual[inf_e], expected[inf_e]), f"{msg} infinities differ"
    assert not actual[~inf_e].isinf().any(), f"{msg} unexpected infinity"
    tol = dict(TOLERANCES[dtype])
    if atol is not None:
        tol["atol"] = atol
    finite = ~(nan_e | inf_e)
    torch.testing.assert_close(actual[finite], expected[finite], **tol, msg=msg or None)


def attention_reference(q, k, v, cu_q, cu_kv, *, causal=True, window=(-1, -1)):
    """varlen attention, q [Tq, Hq, D], k/v [Tkv, Hkv, D]; hidden keys never contribute."""
    return flash_attention_reference(
        q,
        k,
        v,
        cu_seqlens_q=cu_q,
        cu_seqlens_kv=cu_kv,
        causal=causal,
        window_left=window[0],
        window_right=window[1],
    )


def _cu(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


# Specials placed into q/k/v (float64, before the cast), keyed by case name.
# Sequence 0 is causal prefill of 70 tokens (three 32-key pieces), sequence
# 1 a chunk of 5 queries over 90 keys; 2 kv heads, 4 query heads, D = 48
# (one 32-dim vector block and a scalar tail). q[..., 0] > 0, so an
# infinite k[j, h, 0] gives an infinite score of the same sign.
def _place_specials(case, q, k, v):
    if case == "nan_key":
        k[40, 0, 3] = NAN  # rows 40.. of seq 0 see it: NaN; rows < 40: masked, finite
        k[69, 1, 0] = NAN  # only the last row of seq 0 sees it
    elif case == "nan_value":
        v[33, 1, 2] = NAN  # visible: NaN in dim 2 of rows 33..; masked: nothing
        v[70 + 89, 0, 40] = NAN  # last key of seq 1: only its last row sees it
    elif case == "inf_value":
        v[10, 0, 5] = INF  # rows seeing key 10 (weight > 0): +inf in dim 5
        v[50, 0, 5] = -INF  # rows seeing both: NaN in dim 5
        v[20, 1, 47] = -INF
    elif case == "pos_inf_score":
        k[45, 0, 0] = INF  # rows seeing key 45: exp(inf - inf) = NaN
        k[70 + 80, 1, 0] = INF
    elif case == "neg_inf_score":
        k[0, 0, 0] = -INF  # row 0 of seq 0 sees only key 0: all -inf, zeros
        k[35, 0, 0] = -INF  # weight 0 for the rows that see it
        k[70 + 3, 1, 0] = -INF
    elif case == "neg_inf_score_inf_value":
        k[0, 1, 0] = -INF
        v[0, 1, 6] = INF  # weight 0 * inf = NaN in dim 6 for every row seeing key 0
        k[70 + 40, 0, 0] = -INF
        v[70 + 40, 0, 7] = NAN
    elif case == "nan_query":
        q[3, 2, 9] = NAN
        q[70 + 4, 0, 1] = NAN
    else:
        raise ValueError(case)


CASES = [
    "nan_key",
    "nan_value",
    "inf_value",
    "pos_inf_score",
    "neg_inf_score",
    "neg_inf_score_inf_value",
    "nan_query",
]


def _attention_inputs(case, dtype, gen):
    q_lens, kv_lens = [70, 5], [70, 90]
    q = torch.randn(sum(q_lens), 4, 48, generator=gen, dtype=torch.float64)
    k = torch.randn(sum(kv_lens), 2, 48, generator=gen, dtype=torch.float64)
    v = torch.randn(sum(kv_lens), 2, 48, generator=gen, dtype=torch.float64)
    q[..., 0] = q[..., 0].abs() + 0.5
    _place_specials(case, q, k, v)
    return q.to(dtype), k.to(dtype), v.to(dtype), _cu(q_lens), _cu(kv_lens)


def _decode_inputs(case, dtype, gen, block_size=16):
    seq_lens = [40, 3, 70]
    q = torch.randn(3, 4, 48, generator=gen, dtype=torch.float64)
    q[..., 0] = q[..., 0].abs() + 0.5
    num_blocks = 12
    k_cache = torch.randn(num_blocks, block_size, 2, 48, generator=gen, dtype=torch.float64)
    v_cache = torch.randn(num_blocks, block_size, 2, 48, generator=gen, dtype=torch.float64)
    table = torch.tensor(
        [[4, 0, 7, -1, -1], [9, -1, -1, -1, -1], [1, 2, 3, 5, 6]], dtype=torch.int32
    )

    def at(b, j):
        return int(table[b, j // block_size]), j % block_size

    # Past each sequence's length, in its last block: hidden, must not matter.
    k_cache[at(0, 41)], v_cache[at(0, 45)] = NAN, INF
    k_cache[at(1, 3)], v_cache[at(1, 3)] = INF, NAN
    if case == "nan_key":
        k_cache[at(0, 17)][0, 3] = NAN
    elif case == "nan_value":
        v_cache[at(2, 69)][1, 2] = NAN
    elif case == "inf_value":
        v_cache[at(2, 10)][0, 5], v_cache[at(2, 50)][0, 5] = INF, -INF
        v_cache[at(0, 0)][1, 1] = INF
    elif case == "pos_inf_score":
        k_cache[at(0, 33)][1, 0] = INF
    elif case == "neg_inf_score":
        k_cache[at(1, 0)][0, 0] = -INF
        k_cache[at(1, 1)][0, 0] = -INF
        k_cache[at(1, 2)][0, 0] = -INF  # sequence 1, kv head 0: all -inf, zeros
        k_cache[at(2, 64)][1, 0] = -INF
    elif case == "neg_inf_score_inf_value":
        k_cache[at(2, 20)][0, 0] = -INF
        v_cache[at(2, 20)][0, 6] = -INF
    elif case == "nan_query":
        q[1, 3, 9] = NAN
    # Contiguous k/v in sequence order, for the reference.
    ks = [torch.stack([k_cache[at(b, j)] for j in range(n)]) for b, n in enumerate(seq_lens)]
    vs = [torch.stack([v_cache[at(b, j)] for j in range(n)]) for b, n in enumerate(seq_lens)]
    k_cache, v_cache, q = k_cache.to(dtype), v_cache.to(dtype), q.to(dtype)
    k, v = torch.cat(ks).to(dtype), torch.cat(vs).to(dtype)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    expected = attention_reference(q, k, v, _cu([1, 1, 1]), _cu(seq_lens), causal=False)
    return q, k_cache, v_cache, lens, table, expected
