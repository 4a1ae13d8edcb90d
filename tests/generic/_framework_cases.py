"""What the framework tests share: the op list, a sample call per op and its check, and
the instance-cache counters.
"""

from __future__ import annotations

import torch

import polyops
from polyops.testing import references as ref
from tests.conftest import assert_close, assert_equal

EXPECTED_OPS = sorted(
    [
        "add",
        "add_rms_norm",
        "apply_rotary_pos_emb",
        "cast",
        "cat",
        "causal_softmax",
        "flash_attention",
        "gemm",
        "linear",
        "matmul",
        "mul",
        "paged_attention",
        "reshape_and_cache",
        "rms_norm",
        "rotary_embedding",
        "silu_and_mul",
        "swiglu",
        "topk_topp_sampling",
    ]
)


def sample_call(op: str, n: int = 8, **kwargs):
    """Calls `op` on small float32 inputs of width `n` and returns (result, reference)."""
    x = torch.linspace(-2.0, 2.0, 3 * n).reshape(3, n)
    w = torch.linspace(0.5, 1.5, n)
    fn = getattr(polyops, op)
    if op in ("add", "mul"):
        return fn(x, w, **kwargs), getattr(ref, f"{op}_reference")(x, w)
    if op == "cast":
        return fn(x, torch.float64, **kwargs), ref.cast_reference(x, torch.float64)
    if op == "rms_norm":
        return fn(x, w, **kwargs), ref.rms_norm_reference(x, w)
    if op == "add_rms_norm":
        return fn(x, x, w, **kwargs)[0], ref.add_rms_norm_reference(x, x, w)[0]
    if op == "silu_and_mul":
        return fn(x, **kwargs), ref.silu_and_mul_reference(x)
    if op == "swiglu":
        return fn(x, x, **kwargs), ref.swiglu_reference(x, x)
    if op == "cat":
        return fn([x, w[None]], 0, **kwargs), ref.cat_reference([x, w[None]], 0)
    if op == "causal_softmax":
        return fn(x, **kwargs), ref.causal_softmax_reference(x)
    if op in ("rotary_embedding", "apply_rotary_pos_emb"):  # one neox head of size n
        positions = torch.tensor([2, 0, 1])
        cache = torch.linspace(-1.0, 1.0, 4 * n).reshape(4, n)
        cos, sin = cache[positions, : n // 2], cache[positions, n // 2 :]
        expected = ref.rotate_reference(x, cos, sin, n, True)
        if op == "rotary_embedding":
            return fn(positions, x.clone(), None, n, cache, **kwargs)[0], expected
        return fn(x.clone(), None, cos.contiguous(), sin.contiguous(), **kwargs)[0], expected
    if op == "reshape_and_cache":  # tokens 0, 1, 2 into slots 3, 0, 1 of 2 blocks of 2
        key_cache, value_cache = torch.zeros(2, 2, 1, n), torch.zeros(2, 2, 1, n)
        key, slots = x.reshape(3, 1, n), torch.tensor([3, 0, 1])
        expected = ref.reshape_and_cache_reference(key, key, key_cache, value_cache, slots)[0]
        fn(key, key, key_cache, value_cache, slots, **kwargs)
        return key_cache, expected
    if op == "topk_topp_sampling":
        # u = 0 picks each row's largest logit: the last of an increasing row.
        uniform = torch.zeros(3)
        return fn(x, 0, 1.0, uniform=uniform, **kwargs), torch.full((3,), n - 1)
    if op in ("matmul", "gemm"):
        return fn(x, x.T.contiguous(), **kwargs), ref.matmul_reference(x, x.T)
    if op == "linear":
        return fn(x, x, **kwargs), ref.linear_reference(x, x)
    if op in ("flash_attention", "paged_attention"):
        # One head of size n over 3 tokens; key = x / 2, value = x.
        q, k = x[:, None, :], (x / 2)[:, None, :]
        cu = torch.tensor([0, 3], dtype=torch.int32)
        expected = ref.flash_attention_reference(q, k, q, cu_seqlens_q=cu, cu_seqlens_kv=cu)
        if op == "flash_attention":
            return fn(q, k, q, cu_seqlens_q=cu, cu_seqlens_kv=cu, **kwargs), expected
        # Decode: token b sees the first b + 1 tokens, blocks of one token.
        lens = torch.tensor([1, 2, 3], dtype=torch.int32)
        table = torch.tensor([[0, 1, 2]] * 3, dtype=torch.int32)
        return fn(q, k[:, None], q[:, None], lens, table, **kwargs), expected
    raise AssertionError(op)


def assert_sample_result(result, expected):
    """sample_call's result against its reference: exact for integer results."""
    if result.dtype.is_floating_point:
        assert_close(result, expected, result.dtype)
    else:
        assert_equal(result, expected)


def cache_deltas(op, before, keys=("hits", "misses")):
    """Cache counter changes since `before`. Evictions are left out unless asked for: with
    a full cache (the suite fills it) every miss may evict an older entry."""
    after = polyops.cache_info(op)
    return {key: after[key] - before[key] for key in keys}
