"""topk_topp_sampling's Ascend slot on the CANN test double, beyond the parity table.

The npu token is not bit-exact (docs/backends/ascend.md): it is judged by
polyops.testing.references.sampling_token_plausible, except where the contract's
draw is deterministic whatever the rounding (bad rows, ties, u at a bin's
centre), where it must be exactly the contract's token. Checked here:
- many shapes (V from 1 to 50257, B from 1 to 64), float16/bfloat16/float32,
  scalar and int32/int64/float32 tensor top_k / top_p, strided rows;
- the contract's bad-row rules (NaN as -inf, +inf rows, rows with no finite logit),
  the ties of the k-th largest logit, a top-p cut inside a group of tied logits;
- what out-of-range u and top_p values give (they cannot be checked without a
  device-to-host copy), and that seed= is refused with the way out;
- the host path: a repeated call runs no phase 1, copy, allocation or synchronization.
The double is active for this process (tests/npu/conftest.py); a missing operator
library is checked in a fresh process (tests/ascend/test_ascend_sampling.py).
"""

from __future__ import annotations

import math

import pytest
import torch

import polyops
from polyops.testing import cann_calls, clear_cann_calls
from polyops.testing.references import (
    ONE_MINUS,
    topk_topp_sampling_implausible_rows,
)

# The launches of one call, in order, for float32 logits with an int32 (or scalar) top_k
# (float16/bfloat16 logits add a leading aclnnCast, an int64 top_k a Clamp and a Cast;
# the NanToNum and Clamp before ApplyTopKTopP bring top_p into [0, 1]).
LAUNCHES = [
    "aclnnNanToNum",
    "aclnnFlip",
    "aclnnSort",
    "aclnnNanToNum",
    "aclnnClamp",
    "aclnnApplyTopKTopP",
    "aclnnSoftmax",
    "aclnnCumsum",
    "aclnnClamp",
    "aclnnRsubs",
    "aclnnSearchSorted",
    "aclnnGather",
    "aclnnRsubs",
]


def sample(logits, k, p, u, **kwargs):
    def put(t):
        return t.to("npu") if isinstance(t, torch.Tensor) else t

    return polyops.topk_topp_sampling(put(logits), put(k), put(p), uniform=put(u), **kwargs).cpu()


def test_many_shapes_dtypes_and_filters_give_plausible_tokens():
    gen = torch.Generator().manual_seed(11)
    bad = []
    checked = 0
    shapes = [
        (1, 1),
        (5, 1),
        (3, 2),
        (4, 3),
        (17, 7),
        (64, 64),
        (8, 257),
        (3, 1000),
        (2, 4096),
        (4, 32000),
        (64, 50257),
    ]
    for rows, vocab in shapes:
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            if rows * vocab > 200_000 and dtype != torch.float32:
                continue  # the largest shape once: the double is slow
            scale = 4.0 if dtype == torch.float32 else 2.0
            logits = (torch.randn(rows, vocab, generator=gen) * scale).to(dtype)
            u = torch.rand(rows, generator=gen)
            filters = [
                (0, 1.0),
                (5, 1.0),
                (0, 0.9),
                (20, 0.8),
                (1, 0.5),
                (vocab + 3, 0.95),
                (
                    torch.randint(-3, vocab + 3, (rows,), generator=gen, dtype=torch.int32),
                    torch.rand(rows, generator=gen).clamp(min=1e-3),
                ),
                (torch.randint(-3, vocab + 3, (rows,), generator=gen, dtype=torch.int64), 0.7),
            ]
            if rows * vocab > 200_000:
                filters = filters[2:4] + filters[6:]
            for k, p in filters:
                tokens = sample(logits, k, p, u)
                assert tokens.dtype == torch.int64 and tokens.shape == (rows,)
                rows_bad = topk_topp_sampling_implausible_rows(tokens, logits, k, p, u)
                checked += 1
                if rows_bad:
                    bad.append([rows, vocab, str(dtype), str(k)[:40], str(p)[:40], rows_bad])
    # Strided rows (a slice of a wider tensor), float16 logits.
    wide = torch.randn(6, 300, generator=gen).to(torch.float16).to("npu")
    view = wide[:, 20:150]
    u = torch.rand(6, generator=gen)
    tokens = polyops.topk_topp_sampling(view, 8, 0.9, uniform=u.to("npu")).cpu()
    rows_bad = topk_topp_sampling_implausible_rows(tokens, view.cpu(), 8, 0.9, u)
    if rows_bad:
        bad.append(["strided", rows_bad])
    checked += 1
    assert checked > 100
    assert bad == []


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["f16", "bf16", "f32"]
)
def test_bad_rows_follow_the_contract_exactly(dtype):
    inf, nan = math.inf, math.nan
    v = 8
    centres = [(i + 0.5) / v for i in range(v)]
    # One +inf among finite, NaN and -inf logits: always that token.
    row = torch.tensor([1.0, nan, -inf, 5.0, inf, 3.0, nan, 0.0])
    logits = row.repeat(v, 1).to(dtype)
    assert sample(logits, 0, 1.0, torch.tensor(centres)).tolist() == [4] * 8
    # Two +inf: they share the mass (u < 1/2 the first id, else the second); k = 3
    # keeps the 5.0 too, with no mass.
    row = torch.tensor([1.0, inf, -inf, 5.0, nan, inf, 3.0, 0.0])
    logits = row.repeat(4, 1).to(dtype)
    u = torch.tensor([0.1, 0.4, 0.6, 0.9])
    assert sample(logits, 3, 1.0, u).tolist() == [1, 1, 5, 5]
    # No finite or +inf logit (NaN and -inf mixed, all NaN, all -inf): uniform, so
    # u at the centre of bin i gives token i.
    for label, row in (
        ("mixed", torch.tensor([nan, -inf, nan, nan, -inf, -inf, nan, -inf])),
        ("all-nan", torch.full((v,), nan)),
        ("all-neg-inf", torch.full((v,), -inf)),
    ):
        logits = row.repeat(v, 1).to(dtype)
        assert sample(logits, 0, 1.0, torch.tensor(centres)).tolist() == list(range(8)), label
    # NaN never drawn next to a finite logit, even with u near 1.
    logits = torch.tensor([[nan, 2.0, nan, -inf]] * 3).to(dtype)
    assert sample(logits, 0, 1.0, torch.tensor([0.0, 0.5, ONE_MINUS])).tolist() == [1, 1, 1]


@pytest.mark.parametrize(
    "dtype", [torch.float16, torch.bfloat16, torch.float32], ids=["f16", "bf16", "f32"]
)
def test_ties_of_the_kth_logit_and_a_top_p_cut_inside_ties(dtype):
    # k = 2: the k-th largest is 2, tied three times, so ids 0..3 stay; u near 1
    # draws the last kept one, id 3 (never 4 or 5).
    logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 1.0, 0.0]] * 3).to(dtype)
    assert sample(logits, 2, 1.0, torch.tensor([0.0, 0.999, ONE_MINUS])).tolist() == [0, 3, 3]
    # Eight equal logits and p = 1/2: the contract keeps ids 0..3 (the order breaks
    # ties by id), so u draws id floor(4u): the cut falls inside one tied group.
    logits = torch.zeros(6, 8, dtype=dtype)
    u = torch.tensor([0.1, 0.3, 0.6, 0.9, 0.99, ONE_MINUS])
    assert sample(logits, 0, 0.5, u).tolist() == [0, 1, 2, 3, 3, 3]
    # Integer logits with many ties under both filters: plausible on every row.
    gen = torch.Generator().manual_seed(3)
    logits = torch.randint(-2, 3, (32, 40), generator=gen).to(dtype)
    logits[torch.rand(32, 40, generator=gen) < 0.3] = -math.inf
    logits[:, 0] = 2
    u = torch.rand(32, generator=gen)
    for k, p in ((10, 0.7), (3, 0.3), (0, 0.55)):
        tokens = sample(logits, k, p, u)
        rows = topk_topp_sampling_implausible_rows(tokens, logits, k, p, u)
        assert rows == [], f"{dtype}/ints-{k}-{p}"


LOGITS = [[0.0, 4.0, 1.0, 3.0, -2.0]] * 6


def test_out_of_range_u_is_clamped():
    logits = torch.tensor(LOGITS)
    # u is clamped to [0, 1 - 2**-24]: below 0 draws the top token (id 1), at or above
    # 1 the last kept one (k = 3 keeps ids 1, 3, 2: id 2), NaN the top token.
    u = torch.tensor([-0.5, -1e30, 1.0, 1.5, math.inf, math.nan])
    assert sample(logits, 3, 1.0, u).tolist() == [1, 1, 2, 2, 2, 1]


def test_out_of_range_top_p_is_brought_into_range():
    logits = torch.tensor(LOGITS)
    # top_p is brought into [0, 1] (ApplyTopKTopP's range): p <= 0 keeps only the top
    # token, p > 1 and NaN filter nothing (u near 1 then draws the last token of the
    # order, id 4).
    p = torch.tensor([0.0, -1.0, 2.0, math.nan])
    assert sample(logits[:4], 0, p, torch.full((4,), ONE_MINUS)).tolist() == [1, 1, 4, 4]


def test_seed_is_refused_with_the_way_out():
    logits = torch.tensor(LOGITS)
    try:
        polyops.topk_topp_sampling(logits.to("npu"), 0, 1.0, seed=5)
        seed = "no error"
    except Exception as error:
        seed = type(error).__name__ + ": " + str(error)
    assert seed.startswith("NotImplementedError")
    assert "seed=" in seed and "uniform=" in seed
    assert "npu" in seed


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32], ids=["int64", "int32"])
def test_torch_ops_with_an_out_tensor(dtype):
    # torch.ops path and an explicit out tensor, int64 and int32.
    logits = torch.tensor(LOGITS)
    o = torch.empty(6, dtype=dtype, device="npu")
    torch.ops.polyops.topk_topp_sampling(
        logits.to("npu"), 0, 1.0, uniform=torch.zeros(6, device="npu"), out=o
    )
    assert [str(o.dtype), o.cpu().tolist()] == [str(dtype), [1] * 6]


def _forbidden(calls):
    return [
        c["function"]
        for c in calls
        if c["function"]
        in (
            "aclrtSynchronizeStream",
            "aclrtSynchronizeDevice",
            "aclrtMemcpy",
            "aclrtMemcpyAsync",
            "aclrtMalloc",
            "aclrtFree",
        )
    ]


@pytest.mark.parametrize(
    "k_kind, out_dtype",
    [("scalar", "int64"), ("int32", "int64"), ("int64", "int64"), ("int64", "int32")],
    ids=["k-scalar", "k-int32", "k-int64", "k-int64-out-int32"],
)
def test_a_repeated_call_runs_no_phase_one_copy_or_sync(k_kind, out_dtype):
    # An int32 out (serving engines' token ids) is written by the last Rsubs directly:
    # the same launches, also in the longest chain (bfloat16 logits, int64 top_k).
    rows, vocab = 5, 300

    def inputs(seed):
        gen = torch.Generator().manual_seed(seed)
        logits = torch.randn(rows, vocab, generator=gen).to(torch.bfloat16).to("npu")
        u = torch.rand(rows, generator=gen).to("npu")
        if k_kind == "scalar":
            k, p = 7, 0.9
        else:
            dtype = torch.int32 if k_kind == "int32" else torch.int64
            k = torch.randint(0, vocab, (rows,), generator=gen, dtype=dtype).to("npu")
            p = torch.rand(rows, generator=gen).clamp(min=0.1).to("npu")
        out = torch.empty(rows, dtype=getattr(torch, out_dtype), device="npu")
        return logits, k, p, u, out

    first, second = inputs(1), inputs(2)

    def call(logits, k, p, u, out):
        polyops.topk_topp_sampling(logits, k, p, uniform=u, out=out)

    clear_cann_calls()
    call(*first)
    miss = cann_calls()
    clear_cann_calls()
    call(*second)
    hit = cann_calls()
    tokens = second[4].cpu()
    logits, k, p, u, _ = second
    bad = topk_topp_sampling_implausible_rows(
        tokens,
        logits.cpu(),
        k.cpu() if isinstance(k, torch.Tensor) else k,
        p.cpu() if isinstance(p, torch.Tensor) else p,
        u.cpu(),
    )
    expected = ["aclnnCast", *LAUNCHES]
    if k_kind == "int64":
        at = expected.index("aclnnSort") + 1
        expected[at:at] = ["aclnnClamp", "aclnnCast"]
    assert [c for c in miss + hit if c.get("status", 0) != 0] == []
    assert bad == []
    assert str(tokens.dtype) == "torch." + out_dtype
    assert len([c["function"] for c in miss if c.get("phase") == 1]) == len(expected)
    # Scalar top_k / top_p are uploaded once, on the miss; tensors need no copy at all.
    miss_copies = [c["function"] for c in miss if c["function"] == "aclrtMemcpy"]
    assert len(miss_copies) == (2 if k_kind == "scalar" else 0)
    assert [c["function"] for c in hit if c.get("phase") == 1] == []
    assert _forbidden(hit) == []
    assert [c["function"] for c in hit if c.get("phase") == 2] == expected
    assert sum(c["function"] == "aclSetInputTensorAddr" for c in hit) > 0
