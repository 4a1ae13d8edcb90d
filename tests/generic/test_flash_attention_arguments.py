"""flash_attention's arguments: the errors of bad ones, the host copies of cu_seqlens, and
int64 index tensors (torch.tensor's default dtype), whose values must never wrap."""

from __future__ import annotations

import math

import pytest
import torch

import polyops
from polyops.testing.tensors import paginate
from tests.conftest import BF16, F16, F32, I32, I64, slot_params
from tests.generic._attention_cases import FA, WRAP, assert_attention_close, make_inputs, reference


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
