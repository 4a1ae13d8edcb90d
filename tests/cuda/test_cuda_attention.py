"""CUDA attention slots (src/cuda/flash_attention, src/cuda/paged_attention): what the
parity table (tests/generic/test_parity.py) does not cover -- the NaN/Inf rules, odd head sizes,
long contexts through paged_attention's split-K merge, CUDA graph capture (no host
synchronization on a cache hit), and what malformed device metadata does (it cannot
raise ValueError without a device-to-host copy: NaN rows instead, never an
out-of-bounds read). Every test compares against the float64 references of
polyops.testing. Skipped where no CUDA device is usable.
"""

from __future__ import annotations

import math

import pytest
import torch

import polyops
from polyops.testing import references as ref
from polyops.testing.tensors import paginate
from tests.conftest import BF16, F16, F32, FLOAT_DTYPES, TOLERANCES, dtype_id
from tests.generic._nan_inf_cases import (
    ATTENTION_ATOL,
    CASES,
    _attention_inputs,
    _cu,
    _decode_inputs,
    assert_specials_close,
    attention_reference,
)

pytestmark = pytest.mark.skipif(
    "cuda" not in polyops.devices(), reason="needs a CUDA build of polyops and a usable GPU"
)

DTYPES = [pytest.param(d, id=dtype_id(d)) for d in FLOAT_DTYPES]
CUDA = "cuda"


def _close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, msg: str = ""):
    """Attention outputs are convex combinations of values: absolute tolerance per dtype."""
    tol = dict(TOLERANCES[dtype], atol=ATTENTION_ATOL[dtype])
    torch.testing.assert_close(actual.cpu().double(), expected.double(), **tol, msg=msg or None)


def _on_cuda(*tensors):
    return [t.to(CUDA) for t in tensors]


def test_cuda_slots_are_listed():
    # Slot 0 is the own kernel; other slots (a library's) may follow.
    assert polyops.implementations("flash_attention", CUDA)[0] == "flash"
    assert polyops.implementations("paged_attention", CUDA)[0] == "flash"


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_nan_inf(dtype, case, gen):
    q, k, v, cu_q, cu_kv = _attention_inputs(case, dtype, gen)
    args = dict(cu_seqlens_q=cu_q.to(CUDA), cu_seqlens_kv=cu_kv.to(CUDA))
    qd, kd, vd = _on_cuda(q, k, v)
    out = polyops.flash_attention(qd, kd, vd, **args)
    expected = attention_reference(q, k, v, cu_q, cu_kv)
    assert_specials_close(out.cpu(), expected, dtype, ATTENTION_ATOL[dtype], msg=case)
    out = polyops.flash_attention(qd, kd, vd, window_left=20, **args)
    expected = attention_reference(q, k, v, cu_q, cu_kv, window=(20, -1))
    assert_specials_close(out.cpu(), expected, dtype, ATTENTION_ATOL[dtype], msg=f"{case} w")


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention_nan_inf(dtype, case, gen):
    q, k_cache, v_cache, lens, table, expected = _decode_inputs(case, dtype, gen)
    for host in (None, lens):  # with and without seq_lens_host
        out = polyops.paged_attention(
            *_on_cuda(q, k_cache, v_cache, lens, table), seq_lens_host=host
        )
        assert_specials_close(out.cpu(), expected, dtype, ATTENTION_ATOL[dtype], msg=case)
    # The paged flash_attention path over the same caches.
    out = polyops.flash_attention(
        *_on_cuda(q, k_cache, v_cache),
        cu_seqlens_q=_cu([1, 1, 1]).to(CUDA),
        cu_seqlens_kv=_cu(lens.tolist()).to(CUDA),
        block_table=table.to(CUDA),
    )
    assert_specials_close(out.cpu(), expected, dtype, ATTENTION_ATOL[dtype], msg=case)


def test_flash_attention_masked_keys_never_contribute(gen):
    q = torch.randn(70, 2, 64, generator=gen).to(CUDA)
    k = torch.randn(70, 1, 64, generator=gen).to(CUDA)
    v = torch.randn(70, 1, 64, generator=gen).to(CUDA)
    cu = _cu([70]).to(CUDA)
    expected = polyops.flash_attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu)
    for i in (0, 5, 15, 16, 31, 32, 33, 63, 64, 69):
        k_poisoned, v_poisoned = k.clone(), v.clone()
        k_poisoned[i + 1 :], v_poisoned[i + 1 :] = math.nan, math.inf
        out = polyops.flash_attention(q, k_poisoned, v_poisoned, cu_seqlens_q=cu, cu_seqlens_kv=cu)
        assert torch.equal(out[: i + 1], expected[: i + 1]), f"row {i}"


# Head sizes around the kernels' instantiation bounds (64, 128, 256) and odd ones.
HEAD_SIZES = [1, 7, 32, 63, 64, 65, 96, 127, 128, 129, 200, 255, 256]


@pytest.mark.parametrize("head_size", HEAD_SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_head_sizes(dtype, head_size, gen):
    q_lens, kv_lens = [1, 17, 40], [9, 17, 75]
    q = torch.randn(sum(q_lens), 6, head_size, generator=gen).to(dtype)
    k = torch.randn(sum(kv_lens), 2, head_size, generator=gen).to(dtype)
    v = torch.randn(sum(kv_lens), 2, head_size, generator=gen).to(dtype)
    cu_q, cu_kv = _cu(q_lens), _cu(kv_lens)
    for options in ({}, {"causal": False, "window_left": 5, "window_right": 3}):
        expected = ref.flash_attention_reference(
            q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, **options
        )
        out = polyops.flash_attention(
            *_on_cuda(q, k, v), cu_seqlens_q=cu_q.to(CUDA), cu_seqlens_kv=cu_kv.to(CUDA), **options
        )
        _close(out, expected, dtype, f"D={head_size} {options}")


@pytest.mark.parametrize("head_size", [1, 65, 200, 256])
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention_head_sizes_and_groups(dtype, head_size, gen):
    lens = [1, 33, 700]
    for heads, kv_heads in ((4, 4), (20, 1), (40, 2)):  # groups above 16 heads: two blocks
        q = torch.randn(len(lens), heads, head_size, generator=gen).to(dtype)
        k = torch.randn(sum(lens), kv_heads, head_size, generator=gen).to(dtype)
        v = torch.randn(sum(lens), kv_heads, head_size, generator=gen).to(dtype)
        k_cache, v_cache, table = paginate(k, v, lens, 16, gen)
        seq_lens = torch.tensor(lens, dtype=torch.int32)
        expected = ref.paged_attention_reference(q, k_cache, v_cache, seq_lens, table)
        out = polyops.paged_attention(*_on_cuda(q, k_cache, v_cache, seq_lens, table))
        _close(out, expected, dtype, f"D={head_size} {heads}/{kv_heads}")


@pytest.mark.parametrize("dtype", [F16, BF16, F32], ids=dtype_id)
def test_paged_attention_long_contexts_split(dtype, gen):
    # Few sequences, long contexts: many splits, merged by the reduce kernel; a
    # zero-length and a one-token sequence next to them.
    lens = [4000, 0, 1, 2049]
    q = torch.randn(len(lens), 8, 128, generator=gen).to(dtype)
    k = torch.randn(sum(lens), 2, 128, generator=gen).to(dtype)
    v = torch.randn(sum(lens), 2, 128, generator=gen).to(dtype)
    k_cache, v_cache, table = paginate(k, v, lens, 16, gen)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    expected = ref.paged_attention_reference(q, k_cache, v_cache, seq_lens, table)
    for host in (None, seq_lens):
        out = polyops.paged_attention(
            *_on_cuda(q, k_cache, v_cache, seq_lens, table), seq_lens_host=host
        )
        _close(out, expected, dtype, f"host={host is not None}")


def test_paged_attention_is_graph_capturable(gen):
    lens = [300, 2000, 17]
    q = torch.randn(3, 8, 64, generator=gen).to(F16)
    k = torch.randn(sum(lens), 2, 64, generator=gen).to(F16)
    v = torch.randn(sum(lens), 2, 64, generator=gen).to(F16)
    k_cache, v_cache, table = paginate(k, v, lens, 16, gen)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    args = _on_cuda(q, k_cache, v_cache, seq_lens, table)
    out = torch.empty_like(args[0])

    def call():
        polyops.paged_attention(*args, seq_lens_host=seq_lens, out=out)

    _capture_and_replay(
        call,
        args[0],
        out,
        lambda: ref.paged_attention_reference(args[0].cpu(), k_cache, v_cache, seq_lens, table),
    )


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
def test_flash_attention_is_graph_capturable(paged, gen):
    q_lens, kv_lens = [5, 40], [30, 40]
    q = torch.randn(sum(q_lens), 4, 64, generator=gen).to(BF16)
    k = torch.randn(sum(kv_lens), 2, 64, generator=gen).to(BF16)
    v = torch.randn(sum(kv_lens), 2, 64, generator=gen).to(BF16)
    cu_q, cu_kv = _cu(q_lens), _cu(kv_lens)
    kwargs = {}
    if paged:
        k, v, table = paginate(k, v, kv_lens, 16, gen)
        kwargs["block_table"] = table
    qd, kd, vd = _on_cuda(q, k, v)
    device_kwargs = {name: t.to(CUDA) for name, t in kwargs.items()}
    cu_q_d, cu_kv_d = cu_q.to(CUDA), cu_kv.to(CUDA)
    out = torch.empty_like(qd)

    def call():
        polyops.flash_attention(
            qd,
            kd,
            vd,
            cu_seqlens_q=cu_q_d,
            cu_seqlens_kv=cu_kv_d,
            cu_seqlens_q_host=cu_q,
            cu_seqlens_kv_host=cu_kv,
            out=out,
            **device_kwargs,
        )

    _capture_and_replay(
        call,
        qd,
        out,
        lambda: ref.flash_attention_reference(
            qd.cpu(), k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, **kwargs
        ),
    )


def _capture_and_replay(call, query, out, reference):
    """Warm up (constructs the cached instance), capture one call in a CUDA graph, then
    replay it on new query data: the result must follow the new data."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        call()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    for seed in (1, 2):
        new = torch.randn(query.shape, generator=torch.Generator().manual_seed(seed))
        query.copy_(new.to(query.dtype))
        graph.replay()
        torch.cuda.synchronize()
        _close(out, reference(), query.dtype, f"replay {seed}")


def test_malformed_device_metadata_gives_nan_rows_not_faults(gen):
    # The CPU slots raise ValueError; on CUDA the values are only on the device, so the
    # affected sequence's rows are NaN and the others are still right.
    lens = [40, 20]
    q = torch.randn(2, 4, 64, generator=gen)
    k = torch.randn(sum(lens), 2, 64, generator=gen)
    v = torch.randn(sum(lens), 2, 64, generator=gen)
    k_cache, v_cache, table = paginate(k, v, lens, 16, gen)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    expected = ref.paged_attention_reference(q, k_cache, v_cache, seq_lens, table)
    bad_block = table.clone()
    bad_block[0, 1] = k_cache.shape[0] + 100  # a block id outside the cache
    too_long = torch.tensor([lens[0], table.shape[1] * 16 + 1], dtype=torch.int32)
    for bad_table, bad_lens, row in ((bad_block, seq_lens, 0), (table, too_long, 1)):
        out = polyops.paged_attention(*_on_cuda(q, k_cache, v_cache, bad_lens, bad_table))
        torch.cuda.synchronize()
        assert out[row].isnan().all(), "the malformed sequence's rows are NaN"
        _close(out[1 - row], expected[1 - row], F32, "the other sequence")
    # flash_attention: cu_seqlens_kv running past the kv tensor.
    cu_q, cu_kv = _cu([1, 1]), torch.tensor([0, 40, 61], dtype=torch.int32)
    out = polyops.flash_attention(
        *_on_cuda(q, k, v), cu_seqlens_q=cu_q.to(CUDA), cu_seqlens_kv=cu_kv.to(CUDA)
    )
    torch.cuda.synchronize()
    assert out[1].isnan().all()
    good = ref.flash_attention_reference(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=_cu(lens))
    _close(out[0], good[0], F32)
