"""What the flash_attention and paged_attention tests share: the float64 references of
polyops.testing, random inputs and the comparison.

The references build the mask explicitly (causal aligned to the end of each
kv sequence, then the window) and run softmax in float64 on the inputs'
exact values; they never call torch's fused attention. Tolerances:
polyops.testing.references.ATTENTION (atol scaled to max |v|).
"""

from __future__ import annotations

import pytest
import torch

from polyops.testing.references import ATTENTION, flash_attention_reference
from polyops.testing.tensors import cu_seqlens as cu
from tests.conftest import FLOAT_DTYPES, dtype_id

FA = "flash_attention"
DTYPES = [pytest.param(d, id=dtype_id(d)) for d in FLOAT_DTYPES]
#: 2**32: an int64 value that wraps (mod 2**32) onto the int32 value it is added to.
WRAP = 2**32


def assert_attention_close(actual, expected, dtype, msg=""):
    assert actual.dtype == dtype
    assert actual.shape == expected.shape
    torch.testing.assert_close(
        actual.double(),
        expected,
        **ATTENTION[dtype]._asdict(),
        msg=(lambda m: f"{msg}\n{m}") if msg else None,
    )


def reference(q, k, v, cu_q, cu_kv, *, window=(-1, -1), **options):
    """flash_attention_reference over contiguous kv, the window as a (left, right) pair."""
    return flash_attention_reference(
        q,
        k,
        v,
        cu_seqlens_q=cu_q,
        cu_seqlens_kv=cu_kv,
        window_left=window[0],
        window_right=window[1],
        **options,
    )


def make_inputs(q_lens, kv_lens, heads, kv_heads, head_size, dtype, gen):
    q = torch.randn(sum(q_lens), heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
    k = torch.randn(sum(kv_lens), kv_heads, head_size, generator=gen, dtype=torch.float64)
    v = torch.randn(sum(kv_lens), kv_heads, head_size, generator=gen, dtype=torch.float64)
    return q, k.to(dtype), v.to(dtype), cu(q_lens), cu(kv_lens)
