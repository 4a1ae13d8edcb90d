"""topk_topp_sampling against a reference written from the algorithm in its header.

The op is specified down to every float32 rounding (src/base/topk_topp_sampling.h),
so with `uniform` (or a seed) given the token ids must match exactly. The
reference (polyops.testing.references.topk_topp_sampling_reference) is
independent of the C++ code: torch's stable sort for the order, torch float32
elementwise ops for the specified exp, and a Python loop that rounds every
partial sum to float32.
"""

from __future__ import annotations

import math

import pytest
import torch

import polyops
from polyops.testing.opinfo import SAMPLING_FILTERS
from polyops.testing.references import (
    ONE_MINUS,
    sampling_token_plausible,
    spec_exp,
    splitmix_uniform,
)
from polyops.testing.references import topk_topp_sampling_reference as reference
from tests.conftest import (
    BF16,
    F16,
    F32,
    F64,
    FLOAT_DTYPES,
    I32,
    I64,
    dtype_id,
    parallel_param,
    row_strided,
    slot_params,
)

OP = "topk_topp_sampling"
SLOTS = slot_params(OP)


def make_logits(rows, vocab, dtype, gen, scale=3.0) -> torch.Tensor:
    return (torch.randn(rows, vocab, generator=gen, dtype=F64) * scale).to(dtype)


def make_uniform(rows, gen) -> torch.Tensor:
    return torch.rand(rows, generator=gen, dtype=F32)


# ---------------------------------------------------------------------------
# The spec's exp is a faithful exp


def test_spec_exp_is_accurate():
    d = torch.cat([-torch.linspace(0, 80, 200001, dtype=F64), torch.tensor([-1e-30, -1e-7])])
    d = d.to(F32)
    got = spec_exp(d).double()
    want = torch.exp(d.double())
    assert float(((got - want).abs() / want).max()) < 4 * 2.0**-24
    assert float(spec_exp(torch.tensor([0.0], dtype=F32))) == 1.0
    assert float(spec_exp(torch.tensor([-80.5, -math.inf], dtype=F32)).abs().max()) == 0.0


# ---------------------------------------------------------------------------
# Exact ids against the reference

CASES = SAMPLING_FILTERS  # name: (top_k, top_p)


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_reference(case, dtype, slot, gen):
    top_k, top_p = CASES[case]
    logits = make_logits(12, 257, dtype, gen)
    uniform = make_uniform(12, gen)
    got = polyops.topk_topp_sampling(
        logits, top_k, top_p, uniform=uniform, implementation_index=slot
    )
    assert got.dtype == I64 and got.shape == (12,)
    assert torch.equal(got, reference(logits, top_k, top_p, uniform)), case


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("k_dtype", [I32, I64], ids=dtype_id)
def test_per_row_tensors(k_dtype, dtype, slot, gen):
    rows, vocab = 10, 100
    top_k = torch.tensor([0, -3, 1, 2, 5, 99, 100, 150, 30, 7], dtype=k_dtype)
    top_p = torch.tensor([1.0, 0.5, 0.9, 1.0, 0.3, 0.99, 0.75, 1e-6, 0.6, 1.0], dtype=F32)
    logits = make_logits(rows, vocab, dtype, gen)
    uniform = make_uniform(rows, gen)
    got = polyops.topk_topp_sampling(
        logits, top_k, top_p, uniform=uniform, implementation_index=slot
    )
    assert torch.equal(got, reference(logits, top_k, top_p, uniform))
    # A per-row tensor equals the scalar applied row by row.
    for b in range(rows):
        one = polyops.topk_topp_sampling(
            logits[b : b + 1], int(top_k[b]), float(top_p[b]), uniform=uniform[b : b + 1]
        )
        assert int(one[0]) == int(got[b]), b


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_ties_and_masked_logits(dtype, slot, gen):
    # Integer logits in [-2, 2]: many exact ties; a third of each row masked to -inf.
    logits = torch.randint(-2, 3, (16, 64), generator=gen).to(dtype)
    logits[torch.rand(16, 64, generator=gen) < 0.3] = -math.inf
    logits[:, 0] = 2  # every row keeps a finite logit
    uniform = make_uniform(16, gen)
    for top_k, top_p in [(0, 1.0), (3, 1.0), (0, 0.5), (10, 0.7)]:
        got = polyops.topk_topp_sampling(
            logits, top_k, top_p, uniform=uniform, implementation_index=slot
        )
        assert torch.equal(got, reference(logits, top_k, top_p, uniform)), (top_k, top_p)


@pytest.mark.parametrize("slot", SLOTS)
def test_tie_order_is_lower_id_first(slot):
    # Equal logits (including -0.0 == +0.0) are ordered by id: u below half
    # the mass picks the lower id.
    logits = torch.tensor([[-0.0, 0.0], [0.0, -0.0], [1.0, 1.0]], dtype=F32)
    low = torch.zeros(3, dtype=F32)
    high = torch.full((3,), 0.75, dtype=F32)
    assert polyops.topk_topp_sampling(logits, 0, 1.0, uniform=low).tolist() == [0, 0, 0]
    assert polyops.topk_topp_sampling(logits, 0, 1.0, uniform=high).tolist() == [1, 1, 1]
    # top_k keeps every token tied with the k-th largest logit (vLLM, Hugging Face).
    assert polyops.topk_topp_sampling(logits, 1, 1.0, uniform=high).tolist() == [1, 1, 1]
    # The example: [1, 1, 1, 0] with k = 2 can draw token 2, never token 3.
    row = torch.tensor([[1.0, 1.0, 1.0, 0.0]] * 3)
    u = torch.tensor([0.1, 0.5, 0.9])
    assert polyops.topk_topp_sampling(row, 2, 1.0, uniform=u).tolist() == [0, 1, 2]


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_uniform_extremes(dtype, slot, gen):
    logits = make_logits(8, 50, dtype, gen)
    for top_k, top_p in [(0, 1.0), (6, 1.0), (0, 0.7), (6, 0.7)]:
        zero = torch.zeros(8, dtype=F32)
        got = polyops.topk_topp_sampling(
            logits, top_k, top_p, uniform=zero, implementation_index=slot
        )
        # u = 0: the largest logit, lowest id among ties.
        assert torch.equal(got, logits.float().argmax(dim=1))
        near_one = torch.full((8,), ONE_MINUS, dtype=F32)
        got = polyops.topk_topp_sampling(
            logits, top_k, top_p, uniform=near_one, implementation_index=slot
        )
        assert torch.equal(got, reference(logits, top_k, top_p, near_one))
    # Equal weights: u -> 1 picks the last kept token; all 50 tie, so every
    # top_k keeps all of them.
    flat = torch.zeros(3, 50, dtype=dtype)
    near_one = torch.full((3,), ONE_MINUS, dtype=F32)
    for top_k, last in [(0, 49), (6, 49), (1, 49), (50, 49)]:
        got = polyops.topk_topp_sampling(
            flat, top_k, 1.0, uniform=near_one, implementation_index=slot
        )
        assert got.tolist() == [last] * 3, top_k
    got = polyops.topk_topp_sampling(flat, 0, 0.1, uniform=near_one, implementation_index=slot)
    assert got.tolist() == [4] * 3  # 5 of 50 equal tokens reach p = 0.1


def test_known_probabilities():
    # probs 0.5, 0.3, 0.2: top_p=0.6 keeps {0, 1} renormalized to 0.625 / 0.375.
    logits = torch.tensor([[math.log(0.5), math.log(0.3), math.log(0.2)]], dtype=F32)

    def pick(u, top_k=0, top_p=1.0):
        uniform = torch.tensor([u], dtype=F32)
        return int(polyops.topk_topp_sampling(logits, top_k, top_p, uniform=uniform)[0])

    assert [pick(u, top_p=0.6) for u in (0.0, 0.6, 0.62, 0.63, 0.99)] == [0, 0, 0, 1, 1]
    assert [pick(u) for u in (0.49, 0.51, 0.79, 0.81)] == [0, 1, 1, 2]
    assert [pick(u, top_k=2) for u in (0.62, 0.63)] == [0, 1]
    assert [pick(u, top_k=1, top_p=0.01) for u in (0.0, ONE_MINUS)] == [0, 0]
    # p = 0.5 is reached by token 0 alone.
    assert pick(ONE_MINUS, top_p=0.5) == 0


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_single_token_vocab(dtype):
    logits = torch.tensor([[3.0], [-100.0], [0.0]], dtype=dtype)
    for u in (0.0, 0.5, ONE_MINUS):
        uniform = torch.full((3,), u, dtype=F32)
        for top_k, top_p in [(0, 1.0), (1, 0.1), (5, 0.5)]:
            got = polyops.topk_topp_sampling(logits, top_k, top_p, uniform=uniform)
            assert got.tolist() == [0, 0, 0]


def test_empty_batch():
    got = polyops.topk_topp_sampling(torch.zeros(0, 10), 5, 0.9, seed=1)
    assert got.shape == (0,) and got.dtype == I64


@pytest.mark.parametrize("slot", SLOTS)
def test_strided_rows_and_out(slot, gen):
    logits = make_logits(6, 40, BF16, gen)
    uniform = make_uniform(6, gen)
    strided = row_strided(logits, extra=5, fill=100.0)  # the padding would win every draw
    out = torch.full((6,), -1, dtype=I64)
    result = polyops.topk_topp_sampling(
        strided, 10, 0.9, uniform=uniform, out=out, implementation_index=slot
    )
    assert result is out
    assert torch.equal(out, reference(logits, 10, 0.9, uniform))
    # Strided per-row tensors.
    k = torch.tensor([3, 0, 5, 1, 2, 4, 0, 0, 9, 9, 1, 1], dtype=I64)[::2]
    p = torch.linspace(0.1, 1.0, 12, dtype=F32)[::2]
    u = torch.stack([uniform, uniform], dim=1)[:, 0]
    got = polyops.topk_topp_sampling(strided, k, p, uniform=u, implementation_index=slot)
    assert torch.equal(got, reference(logits, k, p, uniform))


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize("draw", ["uniform", "seed"])
def test_int32_out(draw, slot, api, gen):
    """int32 token ids, as serving engines and the FlashInfer / ATB samplers keep them:
    the same ids as the int64 reference; an omitted out stays int64."""
    rows = 12
    logits = make_logits(rows, 300, F16, gen)
    source = {"uniform": make_uniform(rows, gen)} if draw == "uniform" else {"seed": 77}
    k = torch.randint(-2, 320, (rows,), generator=gen, dtype=I32)
    expected = reference(logits, k, 0.8, **source)
    out = torch.full((rows,), -7, dtype=I32)
    returned = api.topk_topp_sampling(logits, k, 0.8, **source, out=out, implementation_index=slot)
    # The .out overload of torch.ops.polyops writes and returns nothing (docs/user/torch.md).
    assert returned is (out if api is polyops else None)
    assert out.dtype == I32 and torch.equal(out.long(), expected)
    default = api.topk_topp_sampling(logits, k, 0.8, **source, implementation_index=slot)
    assert default.dtype == I64 and torch.equal(default, expected)


def test_int32_out_opcheck(gen):
    """torch.library's checks (schema, aliasing, fake tensors) on the .out overloads with
    an int32 out."""
    logits, u = make_logits(3, 20, F32, gen), make_uniform(3, gen)
    k, p = torch.tensor([5, 0, 20]), torch.tensor([0.9, 1.0, 0.5])
    for overload, top_k, top_p in [("out", k, p), ("Scalar_Scalar_out", 5, 0.9)]:
        kwargs = {"uniform": u, "out": torch.empty(3, dtype=I32)}
        result = torch.library.opcheck(
            getattr(torch.ops.polyops.topk_topp_sampling, overload), (logits, top_k, top_p), kwargs
        )
        assert set(result.values()) == {"SUCCESS"}, (overload, result)


@pytest.mark.parametrize("slot", SLOTS)
@pytest.mark.parametrize(
    "shape", [pytest.param((3, 5000), id="3x5000"), parallel_param((48, 2048), id="48x2048")]
)
def test_larger_shapes(shape, slot, gen):
    rows, vocab = shape
    logits = make_logits(rows, vocab, F16, gen, scale=2.0)
    uniform = make_uniform(rows, gen)
    top_k = torch.randint(-5, vocab + 5, (rows,), generator=gen, dtype=I32)
    top_k[::3] = 0
    top_p = torch.rand(rows, generator=gen, dtype=F32).clamp(min=0.05)
    top_p[::4] = 1.0
    got = polyops.topk_topp_sampling(
        logits, top_k, top_p, uniform=uniform, implementation_index=slot
    )
    assert torch.equal(got, reference(logits, top_k, top_p, uniform))


# ---------------------------------------------------------------------------
# Seeded draws


@pytest.mark.parametrize("slot", SLOTS)
def test_seed_is_the_specified_splitmix(slot, gen):
    logits = make_logits(20, 64, F32, gen)
    for seed in (0, 1, -5, 2**63 - 1):
        got = polyops.topk_topp_sampling(logits, 8, 0.9, seed=seed, implementation_index=slot)
        uniform = torch.tensor([splitmix_uniform(seed % 2**64, b) for b in range(20)], dtype=F32)
        assert torch.equal(got, reference(logits, 8, 0.9, uniform)), seed
        again = polyops.topk_topp_sampling(logits, 8, 0.9, seed=seed, implementation_index=slot)
        assert torch.equal(got, again)


def test_new_seeds_reuse_the_cached_instance(gen):
    # The seed is read at call time, so a fresh seed per step (the usual serving
    # loop) hits the instance cache and still draws from that seed.
    logits = make_logits(6, 40, F32, gen)
    polyops.topk_topp_sampling(logits, 5, 0.8, seed=0)
    before = polyops.cache_info("topk_topp_sampling")
    for seed in range(1, 31):
        got = polyops.topk_topp_sampling(logits, 5, 0.8, seed=seed)
        uniform = torch.tensor([splitmix_uniform(seed, b) for b in range(6)], dtype=F32)
        assert torch.equal(got, reference(logits, 5, 0.8, uniform)), seed
    after = polyops.cache_info("topk_topp_sampling")
    assert after["misses"] == before["misses"]
    assert after["hits"] == before["hits"] + 30


def test_different_seeds_differ(gen):
    logits = torch.zeros(200, 32)  # uniform over 32 tokens
    first = polyops.topk_topp_sampling(logits, 0, 1.0, seed=1)
    second = polyops.topk_topp_sampling(logits, 0, 1.0, seed=2)
    # Two independent uniform draws agree with probability 1/32 per row.
    assert int((first == second).sum()) < 30
    assert len(set(first.tolist())) > 20


@pytest.mark.parametrize("slot", SLOTS)
def test_seeded_distribution(slot):
    rows = 20000
    base = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0], dtype=F64)
    top_k, top_p = 5, 0.8
    # Expected: softmax, keep 5 largest, renormalize, smallest prefix reaching 0.8.
    probs = torch.softmax(base, 0)[:top_k]
    probs = probs / probs.sum()
    prefix = int((torch.cumsum(probs, 0) < top_p).sum()) + 1
    expected = probs[:prefix] / probs[:prefix].sum()
    logits = base.to(F32).expand(rows, -1)
    got = polyops.topk_topp_sampling(logits, top_k, top_p, seed=12345, implementation_index=slot)
    counts = torch.bincount(got, minlength=base.numel()).double()
    assert counts[prefix:].sum() == 0, counts
    expected_counts = expected * rows
    chi_square = float(((counts[:prefix] - expected_counts) ** 2 / expected_counts).sum())
    # prefix - 1 degrees of freedom (3 here): P(chi2 > 30) ~ 1e-6.
    assert chi_square < 30, (counts, expected_counts)


# ---------------------------------------------------------------------------
# Bad inputs


def _call(logits=None, top_k=5, top_p=0.9, **kwargs):
    logits = torch.zeros(4, 16) if logits is None else logits
    if "uniform" not in kwargs and "seed" not in kwargs:
        kwargs["seed"] = 0
    return polyops.topk_topp_sampling(logits, top_k, top_p, **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\], got 0"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_p": -0.1}, r"top_p must be in \(0, 1\]"),
        ({"top_p": math.nan}, r"top_p must be in \(0, 1\]"),
        ({"top_p": torch.tensor([0.5, 0.0, 1.0, 1.0])}, r"top_p values must be in \(0, 1\]"),
        ({"top_p": torch.tensor([0.5, 1.01, 1.0, 1.0])}, r"top_p values must be in \(0, 1\]"),
        ({"top_p": torch.ones(4, dtype=F64)}, r"top_p must be a float or a float32 tensor"),
        ({"top_p": torch.ones(3)}, r"top_p must have shape \[4\]"),
        ({"top_k": 2.5}, r"top_k must be an integer, got 2.5"),
        ({"top_k": math.inf}, r"top_k must be an integer"),
        ({"top_k": torch.ones(4)}, r"top_k must be an int or an int32/int64 tensor"),
        ({"top_k": torch.ones(4, 1, dtype=I64)}, r"top_k must have shape \[4\]"),
        ({"uniform": torch.full((4,), 1.0)}, r"uniform values must be in \[0, 1\), got 1"),
        ({"uniform": torch.full((4,), -0.25)}, r"uniform values must be in \[0, 1\)"),
        ({"uniform": torch.full((4,), math.nan)}, r"uniform values must be in \[0, 1\)"),
        ({"uniform": torch.zeros(5)}, r"uniform must have shape \[4\]"),
        ({"uniform": torch.zeros(4, dtype=F64)}, r"uniform must have dtype float32"),
        ({"uniform": torch.zeros(4), "seed": 3}, r"pass exactly one of uniform= .* got both"),
        ({"out": torch.zeros(4, dtype=torch.int16)}, r"out must have dtype int64 or int32, got"),
        ({"out": torch.zeros(4)}, r"out must have dtype int64 or int32, got float32"),
        ({"out": torch.zeros(8, dtype=I32)[::2]}, r"out must be contiguous"),
        ({"out": torch.zeros(4, 1, dtype=I64)}, r"out must have shape \[4\]"),
        ({"out": torch.zeros(8, dtype=I64)[::2]}, r"out must be contiguous"),
        ({"logits": torch.zeros(16)}, r"logits must have shape \[B, V\]"),
        ({"logits": torch.zeros(2, 2, 4)}, r"logits must have shape \[B, V\]"),
        ({"logits": torch.zeros(4, 0)}, r"logits must have between 1 and"),
        ({"logits": torch.zeros(16, 4).t()}, r"logits must be contiguous in its last dim"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=r"polyops\.topk_topp_sampling: " + message):
        _call(**kwargs)


def test_neither_uniform_nor_seed():
    with pytest.raises(ValueError, match=r"polyops\.topk_topp_sampling: pass exactly one.*neither"):
        polyops.topk_topp_sampling(torch.zeros(2, 8), 0, 1.0)


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_bad_rows_never_fail_the_batch(bad, dtype, api):
    # NaN counts as -inf, +inf logits share the mass, a row with neither a finite nor
    # a +inf logit is uniform; the other rows are unchanged.
    gen = torch.Generator().manual_seed(5)
    logits = make_logits(5, 8, dtype, gen)
    u = torch.tensor([0.3, 0.999, 0.0, 0.5, 0.999])
    clean = api.topk_topp_sampling(logits, 0, 1.0, uniform=u)
    logits[1, 5] = bad
    logits[2, 3] = bad
    logits[3] = -math.inf
    logits[4] = math.nan
    got = api.topk_topp_sampling(logits, 0, 1.0, uniform=u)
    assert torch.equal(got, reference(logits, 0, 1.0, u))
    assert got[0] == clean[0]  # untouched row
    if bad == math.inf:
        assert got[1] == 5 and got[2] == 3  # all the mass on the +inf token
    else:
        assert got[1] != 5 and got[2] != 3  # a NaN token weighs nothing
    assert got[3] == 4 and got[4] == 7  # uniform over 8: u = 0.5 (C_5 = 5 > 4) and u -> 1


def test_wrong_types():
    with pytest.raises(NotImplementedError, match=r"polyops\.topk_topp_sampling .*logits"):
        _call(torch.zeros(4, 16, dtype=F64))
    with pytest.raises(TypeError, match=r"polyops\.topk_topp_sampling: seed must be an int"):
        _call(seed=1.5)
    with pytest.raises(TypeError, match=r"polyops\.topk_topp_sampling: top_p must be a float"):
        _call(top_p="0.5")
    # Integer-valued float top_k is accepted and equals the int.
    assert torch.equal(_call(top_k=3.0, seed=9), _call(top_k=3, seed=9))


def test_plausibility_rule_for_inexact_devices(gen):
    # The documented rule for a device that cannot replay the float32 steps:
    # the token's float64 probability interval must come within eps of u.
    logits = torch.tensor([math.log(0.5), math.log(0.3), math.log(0.2)], dtype=F32)
    assert [sampling_token_plausible(logits, 0, 1.0, 0.1, t) for t in range(3)] == [
        True,
        False,
        False,
    ]
    assert [sampling_token_plausible(logits, 0, 1.0, 0.5, t) for t in range(3)] == [
        True,
        True,
        False,
    ]
    assert [sampling_token_plausible(logits, 2, 1.0, 0.99, t) for t in range(3)] == [
        False,
        True,
        False,
    ]
    # top_p = 0.8 sits on the boundary of {0, 1}: within eps both prefixes count.
    assert sampling_token_plausible(logits, 0, 0.8, 0.99, 1)
    assert sampling_token_plausible(logits, 0, 0.8, 0.99, 2)
    assert not sampling_token_plausible(logits, 0, 0.7, 0.99, 2)
    # The exact reference's tokens are always plausible.
    rows = make_logits(6, 40, F32, gen)
    uniform = make_uniform(6, gen)
    tokens = reference(rows, 5, 0.8, uniform)
    for b in range(6):
        assert sampling_token_plausible(rows[b], 5, 0.8, float(uniform[b]), int(tokens[b]))
