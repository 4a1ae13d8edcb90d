"""flash_attention and paged_attention against the float64 references of polyops.testing.

The references build the mask explicitly (causal aligned to the end of each
kv sequence, then the window) and run softmax in float64 on the inputs'
exact values; they never call torch's fused attention. Tolerances:
polyops.testing.references.ATTENTION (atol scaled to max |v|).
"""

from __future__ import annotations

import math

import pytest
import torch
from conftest import (
    BF16,
    F16,
    F32,
    FLOAT_DTYPES,
    I32,
    I64,
    dtype_id,
    parallel_param,
    slot_params,
)

import polyops
from polyops.testing.references import (
    ATTENTION,
    flash_attention_reference,
    paged_attention_reference,
)
from polyops.testing.tensors import cu_seqlens as cu
from polyops.testing.tensors import paginate


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


FA = "flash_attention"
PA = "paged_attention"
DTYPES = [pytest.param(d, id=dtype_id(d)) for d in FLOAT_DTYPES]
#: 2**32: an int64 value that wraps (mod 2**32) onto the int32 value it is added to.
WRAP = 2**32

# (heads, kv_heads, head_size, causal): GQA ratios 1, 3, 4 and 8.
CONFIGS = [
    pytest.param(2, 2, 64, True, id="mha-d64-causal"),
    pytest.param(4, 1, 128, True, id="gqa4-d128-causal"),
    pytest.param(8, 1, 64, False, id="gqa8-d64-full"),
    pytest.param(8, 2, 128, False, id="gqa4-d128-full"),
    # 126-row tiles (rows in groups of 8, 4 and 2) and a 16-dim tail past 2 * 32.
    pytest.param(3, 1, 80, True, id="gqa3-d80-causal"),
]


# ---------------------------------------------------------------------------
# flash_attention


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


def test_flash_attention_bad_arguments(gen):
    q, k, v, cu_q, cu_kv = make_inputs([3, 4], [3, 4], 4, 2, 64, F32, gen)
    fa = polyops.flash_attention
    args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)

    def raises(match, *tensors, error=ValueError, **kwargs):
        with pytest.raises(error, match=r"polyops\.flash_attention" + match):
            fa(*tensors, **{**args, **kwargs})

    raises(
        r" is not supported for query of dtype int32",
        q.int(),
        k.int(),
        v.int(),
        error=NotImplementedError,
    )
    raises(r": key must have the dtype of query", q, k.half(), v)
    raises(r": value must have the dtype of query", q, k, v.double())
    raises(
        r": the number of query heads \(4\) must be a multiple of the number of kv heads \(3\)",
        q,
        torch.zeros(7, 3, 64),
        torch.zeros(7, 3, 64),
    )
    raises(r": key must have head size D = 64", q, k[..., :32], v[..., :32])
    raises(r": value must have the shape of key", q, k, v[:, :1])
    raises(r": query must have shape \[Tq, Hq, D\]", q[0], k, v)
    raises(
        r" is not supported for head size 512 because",
        torch.zeros(7, 4, 512),
        torch.zeros(7, 2, 512),
        torch.zeros(7, 2, 512),
        error=NotImplementedError,
    )
    raises(
        r": cu_seqlens_q must have dtype int32 or int64, got float32",
        q,
        k,
        v,
        cu_seqlens_q=cu_q.float(),
    )
    raises(
        r": cu_seqlens_kv must have dtype int32 or int64, got int16",
        q,
        k,
        v,
        cu_seqlens_kv=cu_kv.short(),
    )
    raises(r": cu_seqlens_q must have shape \[B\+1\]", q, k, v, cu_seqlens_q=cu_q[None])
    raises(r": cu_seqlens_kv must have the shape of cu_seqlens_q", q, k, v, cu_seqlens_kv=cu_kv[:2])
    raises(r": cu_seqlens_q must start at 0", q, k, v, cu_seqlens_q=cu_q + 1)
    bad = torch.tensor([0, 5, 3], dtype=torch.int32)
    raises(
        r": cu_seqlens_kv must be non-decreasing, got cu_seqlens_kv\[2\] = 3 < ",
        q,
        k,
        v,
        cu_seqlens_kv=bad,
    )
    raises(
        r": cu_seqlens_q must end at the number of query tokens 7, got cu_seqlens_q\[2\] = 6",
        q,
        k,
        v,
        cu_seqlens_q=torch.tensor([0, 3, 6], dtype=torch.int32),
    )
    raises(
        r": cu_seqlens_kv must end at the number of kv tokens 7",
        q,
        k,
        v,
        cu_seqlens_kv=torch.tensor([0, 3, 8], dtype=torch.int32),
    )
    raises(
        r": sliding_window=8 means \(window_left, window_right\) = \(7, 0\), which disagrees",
        q,
        k,
        v,
        sliding_window=8,
        window_left=4,
    )
    raises(r": sliding_window=8 means", q, k, v, sliding_window=8, window_left=7, window_right=1)
    raises(r": sliding_window must be >= 1, got 0", q, k, v, sliding_window=0)
    raises(r": window_left and window_right must be >= -1", q, k, v, window_left=-2)
    raises(r": scale must be finite", q, k, v, scale=math.inf)
    raises(r": out must have the shape of query", q, k, v, out=torch.empty(7, 4, 32))
    raises(r": out must have the dtype of query", q, k, v, out=torch.empty(7, 4, 64, dtype=F16))
    raises(
        r": query must be contiguous in its last dim",
        q.transpose(1, 2).contiguous().transpose(1, 2),
        k,
        v,
    )
    # Paged.
    k_cache, v_cache, table = paginate(k, v, [3, 4], 2, gen)
    raises(r": key must have shape \[num_blocks, block_size, Hkv, D\]", q, k, v, block_table=table)
    raises(
        r": block_table must have dtype int32 or int64, got uint8",
        q,
        k_cache,
        v_cache,
        block_table=table.to(torch.uint8),
    )
    raises(
        r": block_table must have shape \[2, max_blocks\]",
        q,
        k_cache,
        v_cache,
        block_table=table[:1],
    )
    wrong = table.clone()
    wrong[1, 1] = k_cache.shape[0]
    raises(
        r": block_table\[1\]\[1\] = 7 is not a block of the cache \(must be in \[0, 7\)\)",
        q,
        k_cache,
        v_cache,
        block_table=wrong,
    )
    too_long = torch.tensor([0, 3, 3 + 2 * table.shape[1] + 1], dtype=torch.int32)
    raises(
        r": sequence 1 has 7 kv tokens, more than its block_table row holds \(3 blocks of 2\)",
        q,
        k_cache,
        v_cache,
        block_table=table,
        cu_seqlens_kv=too_long,
    )
    with pytest.raises(TypeError):
        fa(q, k, v, cu_q, cu_kv)  # cu_seqlens are keyword-only
    with pytest.raises(TypeError):
        fa(q, k, v, cu_seqlens_q=cu_q)  # and required


@pytest.mark.parametrize("slot", slot_params(FA))
@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_flash_attention_host_copies_identical(paged, slot, gen):
    q_lens, kv_lens = [1, 7, 40], [5, 7, 90]
    q, k, v, cu_q, cu_kv = make_inputs(q_lens, kv_lens, 4, 2, 64, BF16, gen)
    args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, implementation_index=slot)
    if paged:
        k, v, args["block_table"] = paginate(k, v, kv_lens, 8, gen)
    plain = polyops.flash_attention(q, k, v, **args)
    hosted = polyops.flash_attention(
        q, k, v, cu_seqlens_q_host=cu_q.clone(), cu_seqlens_kv_host=cu_kv.clone(), **args
    )
    assert torch.equal(hosted, plain)


def test_flash_attention_host_copies_checked(gen):
    q, k, v, cu_q, cu_kv = make_inputs([3, 4], [3, 4], 4, 2, 64, F32, gen)
    args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)

    def raises(match, **kwargs):
        with pytest.raises(ValueError, match=r"polyops\.flash_attention" + match):
            polyops.flash_attention(q, k, v, **{**args, **kwargs})

    raises(
        r": cu_seqlens_q_host must have the dtype of cu_seqlens_q", cu_seqlens_q_host=cu_q.long()
    )
    raises(
        r": cu_seqlens_kv_host must have the shape of cu_seqlens_kv", cu_seqlens_kv_host=cu_kv[:2]
    )
    raises(r": cu_seqlens_q_host must be contiguous", cu_seqlens_q_host=cu_q.repeat(2)[::2])
    # On CPU both sides are host memory, so a copy that disagrees is caught.
    raises(
        r": cu_seqlens_kv_host must hold the values of cu_seqlens_kv, but cu_seqlens_kv_host\[1\] "
        r"= 2 and cu_seqlens_kv\[1\] = 3",
        cu_seqlens_kv_host=torch.tensor([0, 2, 7], dtype=torch.int32),
    )
    raises(
        r": cu_seqlens_q_host must hold the values of cu_seqlens_q, but cu_seqlens_q_host\[1\] = 4",
        cu_seqlens_q_host=torch.tensor([0, 4, 7], dtype=torch.int32),
    )


@pytest.mark.parametrize("slot", slot_params(FA))
@pytest.mark.parametrize(
    "paged, host",
    [(False, False), (False, True), (True, False), (True, True)],
    ids=["contiguous", "contiguous-host", "paged", "paged-host"],
)
def test_flash_attention_int64_indices(paged, host, slot, api, gen):
    """int64 cu_seqlens, block tables and host mirrors (torch.tensor's default dtype),
    alone or mixed with int32 ones: the bits of the int32 call, and the reference."""
    q_lens, kv_lens = [1, 7, 40], [5, 7, 90]
    q, k, v, cu_q, cu_kv = make_inputs(q_lens, kv_lens, 4, 2, 64, BF16, gen)
    expected = reference(q, k, v, cu_q, cu_kv)
    k_in, v_in, table = (*paginate(k, v, kv_lens, 8, gen),) if paged else (k, v, None)

    def call(q_dtype, kv_dtype):
        """cu_seqlens_q (and its mirror) in q_dtype; cu_seqlens_kv and the table in kv_dtype."""
        args = dict(cu_seqlens_q=cu_q.to(q_dtype), cu_seqlens_kv=cu_kv.to(kv_dtype))
        if paged:
            args["block_table"] = table.to(kv_dtype)
        if host:
            args.update(cu_seqlens_q_host=cu_q.to(q_dtype), cu_seqlens_kv_host=cu_kv.to(kv_dtype))
        return api.flash_attention(q, k_in, v_in, **args, implementation_index=slot)

    narrow = call(I32, I32)
    assert_attention_close(narrow, expected, BF16)
    for q_dtype, kv_dtype in [(I64, I64), (I64, I32), (I32, I64)]:
        assert torch.equal(call(q_dtype, kv_dtype), narrow), (q_dtype, kv_dtype)


def test_flash_attention_takes_torch_tensor_lengths(gen):
    """The first call a torch user writes: lengths from torch.tensor([...]) (int64)."""
    q, k, v, _, _ = make_inputs([8, 12, 4], [8, 12, 4], 4, 2, 64, F32, gen)
    lengths = torch.tensor([0, 8, 20, 24])
    out = polyops.flash_attention(q, k, v, cu_seqlens_q=lengths, cu_seqlens_kv=lengths)
    assert_attention_close(out, reference(q, k, v, lengths, lengths), F32)


def test_flash_attention_int64_values_never_wrap(api, gen):
    """int64 entries that would wrap (mod 2**32) onto valid int32 ones are ValueErrors
    naming their full value: every slot checks them as int64."""
    q, k, v, cu_q, cu_kv = make_inputs([3, 4], [3, 4], 4, 2, 64, F32, gen)
    k_cache, v_cache, table = paginate(k, v, [3, 4], 2, gen)
    cu_q, cu_kv, table = cu_q.long(), cu_kv.long(), table.long()

    def raises(match, key, value, **kwargs):
        args = {"cu_seqlens_q": cu_q, "cu_seqlens_kv": cu_kv, **kwargs}
        for slot in polyops.implementations(FA, "cpu"):
            with pytest.raises(ValueError, match=r"polyops\.flash_attention" + match):
                api.flash_attention(q, key, value, **args, implementation_index=slot)

    raises(
        rf": cu_seqlens_kv must be non-decreasing, got cu_seqlens_kv\[2\] = 7 < "
        rf"cu_seqlens_kv\[1\] = {3 + WRAP}",
        k,
        v,
        cu_seqlens_kv=torch.tensor([0, 3 + WRAP, 7]),
    )
    raises(
        rf": cu_seqlens_q must end at the number of query tokens 7, got cu_seqlens_q\[2\] = "
        rf"{7 + WRAP}",
        k,
        v,
        cu_seqlens_q=torch.tensor([0, 3, 7 + WRAP]),
    )
    raises(
        rf": sequence 0 has {3 + WRAP} kv tokens, more than its block_table row holds",
        k_cache,
        v_cache,
        block_table=table,
        cu_seqlens_kv=torch.tensor([0, 3 + WRAP, 7 + WRAP]),
    )
    wrapped = table.clone()
    wrapped[1, 0] += WRAP
    raises(
        rf": block_table\[1\]\[0\] = {wrapped[1, 0].item()} is not a block of the cache",
        k_cache,
        v_cache,
        block_table=wrapped,
    )
    raises(
        rf": cu_seqlens_kv_host must hold the values of cu_seqlens_kv, but "
        rf"cu_seqlens_kv_host\[1\] = {3 + WRAP}",
        k,
        v,
        cu_seqlens_kv_host=torch.tensor([0, 3 + WRAP, 7]),
    )
    with pytest.raises(ValueError, match=r"cu_seqlens_q_host must have the dtype of cu_seqlens_q"):
        api.flash_attention(
            q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, cu_seqlens_q_host=cu_q.int()
        )


# ---------------------------------------------------------------------------
# paged_attention


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
