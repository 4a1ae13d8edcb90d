"""paged_attention (decode over a paged kv cache) against the float64 reference of
polyops.testing: the slots, host mirrors, agreement with flash_attention, the parallel
path, argument checks and int64 index tensors."""

from __future__ import annotations

import math

import pytest
import torch

import polyops
from polyops.testing.references import paged_attention_reference
from polyops.testing.tensors import cu_seqlens as cu
from polyops.testing.tensors import paginate
from tests.conftest import BF16, F16, F32, I32, I64, parallel_param, slot_params
from tests.generic._attention_cases import DTYPES, WRAP, assert_attention_close

PA = "paged_attention"


def decode_inputs(seq_lens, heads, kv_heads, head_size, block_size, dtype, gen):
    q = torch.randn(len(seq_lens), heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
    total = sum(seq_lens)
    k = torch.randn(total, kv_heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
    v = torch.randn(total, kv_heads, head_size, generator=gen, dtype=torch.float64).to(dtype)
    k_cache, v_cache, table = paginate(k, v, seq_lens, block_size, gen)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    expected = paged_attention_reference(q, k_cache, v_cache, lens, table)
    return q, k_cache, v_cache, lens, table, expected


@pytest.mark.parametrize("slot", slot_params(PA))
@pytest.mark.parametrize(
    "heads, kv_heads, head_size",
    [(4, 4, 64), (8, 2, 128), (16, 2, 64)],
    ids=["mha-d64", "gqa4-d128", "gqa8-d64"],
)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention(dtype, heads, kv_heads, head_size, slot, gen):
    seq_lens = [1, 7, 300, 16]
    q, k_cache, v_cache, lens, table, expected = decode_inputs(
        seq_lens, heads, kv_heads, head_size, 16, dtype, gen
    )
    out = polyops.paged_attention(q, k_cache, v_cache, lens, table, implementation_index=slot)
    assert_attention_close(out, expected, dtype)


@pytest.mark.parametrize("slot", slot_params(PA))
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention_host_tensors_identical(dtype, slot, gen):
    seq_lens = [5, 0, 77]
    q, k_cache, v_cache, lens, table, expected = decode_inputs(seq_lens, 8, 1, 64, 8, dtype, gen)
    plain = polyops.paged_attention(q, k_cache, v_cache, lens, table, implementation_index=slot)
    hosted = polyops.paged_attention(
        q,
        k_cache,
        v_cache,
        lens,
        table,
        seq_lens_host=lens.clone(),
        block_table_host=table.clone(),
        implementation_index=slot,
    )
    assert torch.equal(hosted, plain)
    assert torch.equal(plain[1], torch.zeros_like(plain[1]))  # length 0 -> zeros
    assert_attention_close(plain, expected, dtype)


@pytest.mark.parametrize("slot", slot_params(PA))
def test_paged_attention_matches_flash_attention_decode(slot, gen):
    seq_lens = [3, 40, 129]
    q, k_cache, v_cache, lens, table, _ = decode_inputs(seq_lens, 8, 2, 64, 16, BF16, gen)
    out = polyops.paged_attention(
        q, k_cache, v_cache, lens, table, scale=0.2, implementation_index=slot
    )
    flash = polyops.flash_attention(
        q,
        k_cache,
        v_cache,
        cu_seqlens_q=cu([1, 1, 1]),
        cu_seqlens_kv=cu(seq_lens),
        block_table=table,
        scale=0.2,
        implementation_index=1,
    )
    assert torch.equal(out, flash)


@pytest.mark.parametrize("dtype", [parallel_param(F16, id="float16")])
def test_paged_attention_parallel(dtype, gen):
    seq_lens = [300, 2, 170, 64, 9]
    q, k_cache, v_cache, lens, table, expected = decode_inputs(seq_lens, 32, 4, 128, 16, dtype, gen)
    out = torch.empty_like(q)
    result = polyops.paged_attention(q, k_cache, v_cache, lens, table, out=out)
    assert result is out
    assert_attention_close(out, expected, dtype)


def test_paged_attention_bad_arguments(gen):
    q, k_cache, v_cache, lens, table, _ = decode_inputs([3, 9], 4, 2, 64, 4, F32, gen)
    pa = polyops.paged_attention

    def raises(match, *args, error=ValueError, **kwargs):
        with pytest.raises(error, match=r"polyops\.paged_attention" + match):
            pa(*args, **kwargs)

    raises(
        r" is not supported for query of dtype float64",
        q.double(),
        k_cache.double(),
        v_cache.double(),
        lens,
        table,
        error=NotImplementedError,
    )
    raises(r": key_cache must have the dtype of query", q, k_cache.half(), v_cache, lens, table)
    raises(
        r": the number of query heads \(4\) must be a multiple of the number of kv heads \(3\)",
        q,
        torch.zeros(5, 4, 3, 64),
        torch.zeros(5, 4, 3, 64),
        lens,
        table,
    )
    raises(
        r": key_cache must have head size D = 64",
        q,
        k_cache[..., :16],
        v_cache[..., :16],
        lens,
        table,
    )
    raises(r": value_cache must have the shape of key_cache", q, k_cache, v_cache[:1], lens, table)
    raises(
        r": key_cache must have shape \[num_blocks, block_size, Hkv, D\]",
        q,
        k_cache[0],
        v_cache[0],
        lens,
        table,
    )
    raises(
        r": seq_lens must have dtype int32 or int64, got float32",
        q,
        k_cache,
        v_cache,
        lens.float(),
        table,
    )
    raises(r": seq_lens must have shape \[2\]", q, k_cache, v_cache, lens[:1], table)
    raises(
        r": block_table must have dtype int32 or int64, got int16",
        q,
        k_cache,
        v_cache,
        lens,
        table.short(),
    )
    raises(r": block_table must have shape \[2, max_blocks\]", q, k_cache, v_cache, lens, table[0])
    raises(
        r": seq_lens_host must have the dtype of seq_lens",
        q,
        k_cache,
        v_cache,
        lens,
        table,
        seq_lens_host=lens.long(),
    )
    raises(
        r": seq_lens_host must have the shape of seq_lens",
        q,
        k_cache,
        v_cache,
        lens,
        table,
        seq_lens_host=lens[:1],
    )
    raises(
        r": block_table_host must have the shape of block_table",
        q,
        k_cache,
        v_cache,
        lens,
        table,
        block_table_host=table[:, :1],
    )
    raises(
        r": block_table_host must have the dtype of block_table",
        q,
        k_cache,
        v_cache,
        lens,
        table,
        block_table_host=table.long(),
    )
    raises(r": scale must be finite", q, k_cache, v_cache, lens, table, scale=math.nan)
    big = torch.zeros(2, 4, 320)
    raises(
        r" is not supported for head size 320 because",
        big,
        big[:, None, :2],
        big[:, None, :2],
        lens,
        table,
        error=NotImplementedError,
    )
    capacity = table.shape[1] * 4
    raises(
        rf": sequence 1 has {capacity + 1} kv tokens, more than its block_table row holds",
        q,
        k_cache,
        v_cache,
        torch.tensor([3, capacity + 1], dtype=torch.int32),
        table,
    )
    raises(
        r": seq_lens_host\[0\] must be >= 0, got -1",
        q,
        k_cache,
        v_cache,
        lens,
        table,
        seq_lens_host=torch.tensor([-1, 9], dtype=torch.int32),
    )
    wrong = table.clone()
    wrong[0, 0] = -3
    raises(
        r": block_table_host\[0\]\[0\] = -3 is not a block of the cache",
        q,
        k_cache,
        v_cache,
        lens,
        table,
        block_table_host=wrong,
    )
    raises(r": block_table\[0\]\[0\] = -3 is not a block", q, k_cache, v_cache, lens, wrong)
    with pytest.raises(TypeError):
        pa(q, k_cache, v_cache, lens, table, 0.1)  # scale is keyword-only


@pytest.mark.parametrize("slot", slot_params(PA))
@pytest.mark.parametrize("host", [False, True], ids=["device", "host"])
def test_paged_attention_int64_indices(host, slot, api, gen):
    """int64 seq_lens, block tables and host mirrors (torch.tensor's default dtype),
    alone or mixed with int32 ones: the bits of the int32 call, and the reference."""
    q, k_cache, v_cache, lens, table, expected = decode_inputs(
        [5, 0, 77, 300], 8, 2, 64, 16, BF16, gen
    )

    def call(lens_dtype, table_dtype):
        lens_t, table_t = lens.to(lens_dtype), table.to(table_dtype)
        kwargs = dict(seq_lens_host=lens_t, block_table_host=table_t) if host else {}
        return api.paged_attention(
            q, k_cache, v_cache, lens_t, table_t, **kwargs, implementation_index=slot
        )

    narrow = call(I32, I32)
    assert_attention_close(narrow, expected, BF16)
    for dtypes in [(I64, I64), (I64, I32), (I32, I64)]:
        assert torch.equal(call(*dtypes), narrow), dtypes


def test_paged_attention_int64_values_never_wrap(api, gen):
    """int64 lengths and block ids that would wrap (mod 2**32) onto valid int32 ones,
    on the device tensors or the host mirrors, are ValueErrors naming their value."""
    q, k_cache, v_cache, lens, table, _ = decode_inputs([3, 9], 4, 2, 64, 4, F32, gen)
    lens, table = lens.long(), table.long()
    wrapped = table.clone()
    wrapped[1, 2] += WRAP

    def raises(match, seq_lens, block_table, **kwargs):
        for slot in polyops.implementations(PA, "cpu"):
            with pytest.raises(ValueError, match=r"polyops\.paged_attention" + match):
                api.paged_attention(
                    q, k_cache, v_cache, seq_lens, block_table, **kwargs, implementation_index=slot
                )

    long_lens = torch.tensor([3, 9 + WRAP])
    raises(rf": sequence 1 has {9 + WRAP} kv tokens, more than its", long_lens, table)
    raises(rf": seq_lens\[0\] must be >= 0, got {3 - WRAP}", torch.tensor([3 - WRAP, 9]), table)
    raises(
        rf": block_table\[1\]\[2\] = {wrapped[1, 2].item()} is not a block of the cache",
        lens,
        wrapped,
    )
    raises(
        rf": sequence 1 has {9 + WRAP} kv tokens",
        lens,
        table,
        seq_lens_host=long_lens,
        block_table_host=table,
    )
    raises(
        r": block_table_host\[1\]\[2\] = ",
        lens,
        table,
        seq_lens_host=lens,
        block_table_host=wrapped,
    )
