"""The CANN double's attention through ctypes: FusedInferAttentionScoreV3 (TND, sparse
modes, paged kv caches) and IncreFlashAttentionV4 (decode) against a float64 reference,
and their bookkeeping errors."""

from __future__ import annotations

import pytest
import torch

from tests.ascend._cann_double_bindings import (
    BF16,
    F16,
    F32,
    PARAM_INVALID,
    TILING,
    Arg,
    assert_close,
    out_arg,
    rand,
)


def attention_reference(q, k, v, q_lens, kv_lens, scale, mode=0, pre=0, nxt=0):
    """Per request: q [Sq, N, D], k/v [Skv, Nkv, D]; bottom-right aligned masks.

    sparseMode 4 (band): query i sees keys [diag - pre, diag + nxt] with diag = i + Skv - Sq.
    Returns the output [T, N, Dv] and the log-sum-exp [T, N, 1] (-inf for a query that sees no
    key, whose output is 0).
    """
    outs, lses = [], []
    q_start = kv_start = 0
    for sq, skv in zip(q_lens, kv_lens, strict=True):
        qr = q[q_start : q_start + sq].double()
        kr = k[kv_start : kv_start + skv].double()
        vr = v[kv_start : kv_start + skv].double()
        q_start, kv_start = q_start + sq, kv_start + skv
        group = qr.shape[1] // kr.shape[1]
        kr, vr = kr.repeat_interleave(group, 1), vr.repeat_interleave(group, 1)
        scores = torch.einsum("qhd,khd->hqk", qr, kr) * scale
        i = torch.arange(sq)[:, None]
        j = torch.arange(skv)[None, :]
        diag = i + skv - sq
        visible = torch.ones(sq, skv, dtype=torch.bool)
        if mode == 3:
            visible = j <= diag
        elif mode == 4:
            visible = (j >= diag - pre) & (j <= diag + nxt)
        scores = scores.masked_fill(~visible, float("-inf"))
        lse = torch.logsumexp(scores, -1)  # [h, q]
        probs = torch.nan_to_num(torch.exp(scores - lse[..., None]), nan=0.0)
        outs.append(torch.einsum("hqk,khd->qhd", probs, vr))
        lses.append(lse.transpose(0, 1)[..., None])
    return torch.cat(outs), torch.cat(lses)


@pytest.fixture(scope="module")
def causal_mask(cann):
    return Arg(cann, torch.ones(2048, 2048, dtype=torch.bool).triu(1))


def fia(
    cann,
    q,
    key_desc,
    value_desc,
    mask,
    q_ends,
    kv_values,
    heads,
    kv_heads,
    scale,
    pre,
    nxt,
    mode,
    block_table=None,
    block_size=0,
    out=None,
    lse=None,
):
    """aclnnFusedInferAttentionScoreV3 phase 1 with TND and the unused optionals NULL."""
    args = [
        q,
        cann.tensor_list([key_desc]),
        cann.tensor_list([value_desc]),
        None,
        mask,
        cann.int_array(q_ends),
        cann.int_array(kv_values),
    ] + [None] * 7
    args += [block_table] + [None] * 12
    args += [heads, scale, pre, nxt, b"TND", kv_heads, mode, 0, block_size, 0, lse is not None]
    args += [0, 0, out, lse]
    return cann.phase_one("aclnnFusedInferAttentionScoreV3", *args)


def launch_and_sync(cann, name, status_ws_ex):
    status, ws, ex = status_ws_ex
    assert status == 0, cann.error()
    assert cann.launch(name, ws, ex) == 0, cann.error()
    assert cann.sync_stream(None) == 0, cann.error()


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("mode,pre,nxt", [(0, 0, 0), (3, 0, 0), (4, 2, 0), (4, 1, 1)])
def test_fia_v3_tnd(cann, causal_mask, dtype, mode, pre, nxt):
    heads, kv_heads, d = 4, 2, 16
    q_lens, kv_lens = [3, 1, 4], [5, 2, 4]
    q = rand((sum(q_lens), heads, d), dtype, seed=50)
    k = rand((sum(kv_lens), kv_heads, d), dtype, seed=51)
    v = rand((sum(kv_lens), kv_heads, d), dtype, seed=52)
    out = out_arg(cann, q.shape, dtype)
    lse = out_arg(cann, (sum(q_lens), heads, 1), F32)
    q_ends = torch.tensor(q_lens).cumsum(0).tolist()
    kv_ends = torch.tensor(kv_lens).cumsum(0).tolist()
    scale = d**-0.5
    result = fia(
        cann,
        Arg(cann, q).desc,
        Arg(cann, k).desc,
        Arg(cann, v).desc,
        causal_mask.desc if mode else None,
        q_ends,
        kv_ends,
        heads,
        kv_heads,
        scale,
        pre,
        nxt,
        mode,
        out=out.desc,
        lse=lse.desc,
    )
    launch_and_sync(cann, "aclnnFusedInferAttentionScoreV3", result)
    eo, el = attention_reference(q, k, v, q_lens, kv_lens, scale, mode, pre, nxt)
    assert_close(out.result(), eo, dtype)
    assert_close(lse.result(), el, F32 if dtype == F16 else BF16)


def _paged_cache(k, v, lens, table, blocks, block_size):
    """k, v [tokens, kv_heads, d] of the requests of `lens`, written into zeroed caches
    [blocks, block_size, kv_heads, d] at the blocks their rows of `table` name."""
    kc = torch.zeros(blocks, block_size, *k.shape[1:], dtype=k.dtype)
    vc = torch.zeros_like(kc)
    start = 0
    for r, n in enumerate(lens):
        for j in range(n):
            kc[table[r, j // block_size], j % block_size] = k[start + j]
            vc[table[r, j // block_size], j % block_size] = v[start + j]
        start += n
    return kc, vc


@pytest.mark.parametrize("dtype", [F16, BF16])
@pytest.mark.parametrize("cache_layout", ["BSH", "BNSD"])
def test_fia_v3_paged(cann, causal_mask, dtype, cache_layout):
    heads, kv_heads, d, block_size, blocks = 4, 1, 16, 4, 8
    q_lens, kv_lens = [2, 3], [7, 3]
    k = rand((sum(kv_lens), kv_heads, d), dtype, seed=53)
    v = rand((sum(kv_lens), kv_heads, d), dtype, seed=54)
    q = rand((sum(q_lens), heads, d), dtype, seed=55)
    # Request 0 in blocks 5, 2; request 1 in block 6.
    table = torch.tensor([[5, 2], [6, 0]], dtype=torch.int32)
    kc, vc = _paged_cache(k, v, kv_lens, table, blocks, block_size)
    if cache_layout == "BSH":
        kc, vc = (
            kc.view(blocks, block_size, kv_heads * d),
            vc.view(blocks, block_size, kv_heads * d),
        )
    else:
        kc, vc = kc.transpose(1, 2).contiguous(), vc.transpose(1, 2).contiguous()
    out = out_arg(cann, q.shape, dtype)
    scale = 0.3
    result = fia(
        cann,
        Arg(cann, q).desc,
        Arg(cann, kc).desc,
        Arg(cann, vc).desc,
        causal_mask.desc,
        torch.tensor(q_lens).cumsum(0).tolist(),
        kv_lens,
        heads,
        kv_heads,
        scale,
        0,
        0,
        3,
        Arg(cann, table).desc,
        block_size,
        out.desc,
    )
    launch_and_sync(cann, "aclnnFusedInferAttentionScoreV3", result)
    eo, _ = attention_reference(q, k, v, q_lens, kv_lens, scale, 3)
    assert_close(out.result(), eo, dtype)


def test_fia_v3_bookkeeping_errors(cann, causal_mask):
    heads, d = 2, 16
    q = Arg(cann, rand((4, heads, d), F16))
    k = Arg(cann, rand((6, heads, d), F16))
    out = out_arg(cann, (4, heads, d), F16)
    common = (heads, heads, 0.25, 0, 0)
    # Sum of query lengths != T, kv lengths count != batch: 561002 (trap 7).
    st, _, _ = fia(cann, q.desc, k.desc, k.desc, None, [1, 3], [2, 6], *common, 0, out=out.desc)
    assert st == TILING, cann.error()
    st, _, _ = fia(cann, q.desc, k.desc, k.desc, None, [1, 4], [6], *common, 0, out=out.desc)
    assert st == TILING, cann.error()
    # numHeads % numKeyValueHeads != 0; sparseMode 3 without the mask; softmaxLse missing.
    st, _, _ = fia(
        cann, q.desc, k.desc, k.desc, None, [1, 4], [2, 6], heads, 3, 0.25, 0, 0, 0, out=out.desc
    )
    assert st == PARAM_INVALID
    st, _, _ = fia(cann, q.desc, k.desc, k.desc, None, [1, 4], [2, 6], *common, 3, out=out.desc)
    assert st == PARAM_INVALID
    # Paged: block table rows != batch.
    cache = Arg(cann, rand((3, 4, heads * d), F16))
    table = Arg(cann, torch.zeros(3, 2, dtype=torch.int32))
    st, _, _ = fia(
        cann,
        q.desc,
        cache.desc,
        cache.desc,
        None,
        [1, 4],
        [2, 6],
        *common,
        0,
        block_table=table.desc,
        block_size=4,
        out=out.desc,
    )
    assert st == TILING, cann.error()
    # A mask that is not triu(1) faults when the op runs.
    wrong = Arg(cann, torch.zeros(2048, 2048, dtype=torch.bool))
    st, ws, ex = fia(
        cann, q.desc, k.desc, k.desc, wrong.desc, [1, 4], [2, 6], *common, 3, out=out.desc
    )
    assert st == 0 and cann.launch("aclnnFusedInferAttentionScoreV3", ws, ex) == 0
    assert cann.sync_stream(None) == 507899
    assert "triu" in cann.error()


def ifa(
    cann, q, key_desc, value_desc, lens, table, heads, kv_heads, scale, layout, block_size, out
):
    args = [
        q,
        cann.tensor_list([key_desc]),
        cann.tensor_list([value_desc]),
        None,
        None,
        cann.int_array(lens) if lens is not None else None,
    ] + [None] * 7
    args += [table, None, heads, scale, layout, kv_heads, block_size, 0, out]
    return cann.phase_one("aclnnIncreFlashAttentionV4", *args)


@pytest.mark.parametrize("dtype", [F16, BF16])
def test_ifa_v4_paged_decode(cann, dtype):
    batch, heads, kv_heads, d, block_size, blocks = 3, 4, 2, 16, 2, 6
    lens = [3, 1, 4]
    k = rand((sum(lens), kv_heads, d), dtype, seed=60)
    v = rand((sum(lens), kv_heads, d), dtype, seed=61)
    q = rand((batch, 1, heads * d), dtype, seed=62)
    table = torch.tensor([[4, 1], [0, 0], [2, 5]], dtype=torch.int32)
    kc, vc = _paged_cache(k, v, lens, table, blocks, block_size)
    flat = (blocks, block_size, kv_heads * d)
    out = out_arg(cann, q.shape, dtype)
    result = ifa(
        cann,
        Arg(cann, q).desc,
        Arg(cann, kc.view(flat)).desc,
        Arg(cann, vc.view(flat)).desc,
        lens,
        Arg(cann, table).desc,
        heads,
        kv_heads,
        0.5,
        b"BSH",
        block_size,
        out.desc,
    )
    launch_and_sync(cann, "aclnnIncreFlashAttentionV4", result)
    eo, _ = attention_reference(q.view(batch, heads, d), k, v, [1] * batch, lens, 0.5)
    assert_close(out.result(), eo.reshape(q.shape), dtype)


def test_ifa_v4_contiguous_bnsd(cann):
    batch, heads, d, seq = 2, 2, 16, 5
    q = rand((batch, heads, 1, d), F16, seed=63)
    k, v = rand((batch, heads, seq, d), F16, seed=64), rand((batch, heads, seq, d), F16, seed=65)
    out = out_arg(cann, q.shape, F16)
    result = ifa(
        cann,
        Arg(cann, q).desc,
        Arg(cann, k).desc,
        Arg(cann, v).desc,
        [5, 3],
        None,
        heads,
        heads,
        0.25,
        b"BNSD",
        0,
        out.desc,
    )
    launch_and_sync(cann, "aclnnIncreFlashAttentionV4", result)
    kt, vt = k.transpose(1, 2), v.transpose(1, 2)  # [B, S, N, D]
    keys = torch.cat([kt[0, :5], kt[1, :3]])
    values = torch.cat([vt[0, :5], vt[1, :3]])
    eo, _ = attention_reference(q.view(batch, heads, d), keys, values, [1, 1], [5, 3], 0.25)
    assert_close(out.result(), eo.view(batch, heads, 1, d), F16)
