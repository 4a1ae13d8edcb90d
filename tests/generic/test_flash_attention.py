"""flash_attention's results against the float64 reference (_attention_cases.py): varlen
batches, prefix caching, causal and sliding windows, paged kv, strided operands, the slots
and the parallel path. Argument checks and index tensors: test_flash_attention_arguments.py.
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing.tensors import cu_seqlens as cu
from polyops.testing.tensors import paginate
from tests.conftest import BF16, F32, parallel_param, slot_params
from tests.generic._attention_cases import (
    DTYPES,
    FA,
    assert_attention_close,
    make_inputs,
    reference,
)

# (heads, kv_heads, head_size, causal): GQA ratios 1, 3, 4 and 8.
CONFIGS = [
    pytest.param(2, 2, 64, True, id="mha-d64-causal"),
    pytest.param(4, 1, 128, True, id="gqa4-d128-causal"),
    pytest.param(8, 1, 64, False, id="gqa8-d64-full"),
    pytest.param(8, 2, 128, False, id="gqa4-d128-full"),
    # 126-row tiles (rows in groups of 8, 4 and 2) and a 16-dim tail past 2 * 32.
    pytest.param(3, 1, 80, True, id="gqa3-d80-causal"),
]


@pytest.mark.parametrize("slot", slot_params(FA))
@pytest.mark.parametrize("heads, kv_heads, head_size, causal", CONFIGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_varlen(dtype, heads, kv_heads, head_size, causal, slot, gen):
    lengths = [1, 7, 300]
    q, k, v, cu_q, cu_kv = make_inputs(lengths, lengths, heads, kv_heads, head_size, dtype, gen)
    out = polyops.flash_attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, causal=causal, implementation_index=slot
    )
    expected = reference(q, k, v, cu_q, cu_kv, causal=causal)
    assert_attention_close(out, expected, dtype)


@pytest.mark.parametrize("slot", slot_params(FA))
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_prefix_cached(dtype, causal, slot, gen):
    # q_len < kv_len: a chunk continuing a cached prefix; the causal mask is
    # aligned to the end of the kv sequence.
    q_lens, kv_lens = [1, 7, 40, 3], [5, 20, 300, 3]
    q, k, v, cu_q, cu_kv = make_inputs(q_lens, kv_lens, 8, 2, 64, dtype, gen)
    out = polyops.flash_attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, causal=causal, implementation_index=slot
    )
    assert_attention_close(out, reference(q, k, v, cu_q, cu_kv, causal=causal), dtype)


@pytest.mark.parametrize("slot", slot_params(FA))
def test_flash_attention_rows_without_keys_are_zero(slot, gen):
    # q_len > kv_len under the causal mask: the first q_len - kv_len rows see
    # nothing; an empty sequence and a 0-token query sequence are fine too.
    q_lens, kv_lens = [5, 0, 2], [2, 4, 0]
    q, k, v, cu_q, cu_kv = make_inputs(q_lens, kv_lens, 4, 2, 64, F32, gen)
    out = torch.full_like(q, 5.0)
    polyops.flash_attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, out=out, implementation_index=slot
    )
    expected = reference(q, k, v, cu_q, cu_kv)
    assert torch.equal(out[:3], torch.zeros_like(out[:3]))
    assert torch.equal(out[5:], torch.zeros_like(out[5:]))
    assert_attention_close(out, expected, F32)


@pytest.mark.parametrize("slot", slot_params(FA))
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_sliding_window_spellings(dtype, slot, gen):
    q_lens, kv_lens = [1, 7, 120], [9, 7, 200]
    q, k, v, cu_q, cu_kv = make_inputs(q_lens, kv_lens, 4, 1, 64, dtype, gen)
    args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, implementation_index=slot)
    by_size = polyops.flash_attention(q, k, v, sliding_window=33, **args)
    by_pair = polyops.flash_attention(q, k, v, window_left=32, window_right=0, **args)
    both = polyops.flash_attention(
        q, k, v, window_left=32, window_right=0, sliding_window=33, **args
    )
    assert torch.equal(by_size, by_pair)
    assert torch.equal(both, by_pair)
    assert_attention_close(by_size, reference(q, k, v, cu_q, cu_kv, window=(32, 0)), dtype)


@pytest.mark.parametrize("slot", slot_params(FA))
@pytest.mark.parametrize(
    "causal, window",
    [(False, (3, 2)), (False, (-1, 5)), (False, (40, -1)), (True, (0, 0)), (True, (70, 9))],
    ids=["full-3-2", "full-inf-5", "full-40-inf", "causal-0-0", "causal-70-9"],
)
def test_flash_attention_explicit_windows(causal, window, slot, gen):
    q_lens, kv_lens = [7, 100], [12, 150]
    q, k, v, cu_q, cu_kv = make_inputs(q_lens, kv_lens, 4, 2, 64, F32, gen)
    out = polyops.flash_attention(
        q,
        k,
        v,
        cu_seqlens_q=cu_q,
        cu_seqlens_kv=cu_kv,
        causal=causal,
        window_left=window[0],
        window_right=window[1],
        implementation_index=slot,
    )
    expected = reference(q, k, v, cu_q, cu_kv, causal=causal, window=window)
    assert_attention_close(out, expected, F32)


@pytest.mark.parametrize("slot", slot_params(FA))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("block_size", [16, 5])
def test_flash_attention_paged_matches_contiguous(dtype, block_size, slot, gen):
    q_lens, kv_lens = [1, 7, 60], [37, 7, 90]  # partially filled last blocks
    q, k, v, cu_q, cu_kv = make_inputs(q_lens, kv_lens, 8, 2, 64, dtype, gen)
    k_cache, v_cache, table = paginate(k, v, kv_lens, block_size, gen)
    args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, implementation_index=slot)
    contiguous = polyops.flash_attention(q, k, v, **args)
    paged = polyops.flash_attention(q, k_cache, v_cache, block_table=table, **args)
    assert torch.equal(paged, contiguous)
    windowed = polyops.flash_attention(
        q, k_cache, v_cache, block_table=table, sliding_window=20, **args
    )
    assert_attention_close(paged, reference(q, k, v, cu_q, cu_kv), dtype)
    assert_attention_close(windowed, reference(q, k, v, cu_q, cu_kv, window=(19, 0)), dtype)


@pytest.mark.parametrize("slot", slot_params(FA))
def test_flash_attention_strided_operands(slot, gen):
    # q, k, v as slices of one packed qkv projection; out a slice of a wider buffer.
    heads, kv_heads, head_size = 4, 2, 64
    lengths = [3, 50]
    qkv = torch.randn(sum(lengths), heads + 2 * kv_heads, head_size, generator=gen)
    q, k, v = qkv[:, :heads], qkv[:, heads : heads + kv_heads], qkv[:, heads + kv_heads :]
    wide = torch.full((sum(lengths), heads, head_size + 8), 7.0)
    out = wide[..., :head_size]
    args = dict(cu_seqlens_q=cu(lengths), cu_seqlens_kv=cu(lengths), implementation_index=slot)
    polyops.flash_attention(q, k, v, out=out, scale=0.3, **args)
    expected = reference(q, k, v, cu(lengths), cu(lengths), scale=0.3)
    assert_attention_close(out, expected, F32)
    assert torch.equal(wide[..., head_size:], torch.full_like(wide[..., head_size:], 7.0))


def test_flash_attention_slots_agree_and_default(gen, default_slot_reset):
    assert polyops.default_implementation(FA) == 1
    q, k, v, cu_q, cu_kv = make_inputs([7, 33], [7, 33], 8, 4, 64, F32, gen)
    args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    loop = polyops.flash_attention(q, k, v, implementation_index=0, **args)
    omp = polyops.flash_attention(q, k, v, **args)
    torch.testing.assert_close(omp, loop, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "dtype", [parallel_param(F32, id="float32"), parallel_param(BF16, id="bfloat16")]
)
def test_flash_attention_parallel_many_tiles(dtype, gen):
    # Many (sequence, kv head, query tile) work items over >= 2 threads.
    lengths = [130, 1, 257, 64]
    q, k, v, cu_q, cu_kv = make_inputs(lengths, lengths, 16, 2, 128, dtype, gen)
    out = polyops.flash_attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    assert_attention_close(out, reference(q, k, v, cu_q, cu_kv), dtype)
