"""NaN and Inf inputs: every CPU slot against float64 references written from the math.

The contract (docs/user/api.md, "NaN and Inf") is torch's behaviour in IEEE
arithmetic: a NaN reaches every output that depends on it, an infinity
propagates through the formula (so 0 * inf and inf - inf are NaN), except
that keys hidden by a mask never contribute, whatever they hold.

The references are the shared float64 ones of polyops.testing (which the
parity table also runs with NaN/Inf cases); these tests place the specials
where they exercise each rule. The comparison requires NaNs at the same
positions and infinities exactly equal; finite values use the usual
tolerances.
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing.references import (
    causal_softmax_reference,
    rms_norm_reference,
    silu_and_mul_reference,
    swiglu_reference,
)
from tests.conftest import F32, FLOAT_DTYPES, dtype_id, slot_params
from tests.generic._nan_inf_cases import (
    ATTENTION_ATOL,
    CASES,
    INF,
    NAN,
    _attention_inputs,
    _cu,
    _decode_inputs,
    assert_specials_close,
    attention_reference,
)

DTYPES = [pytest.param(d, id=dtype_id(d)) for d in FLOAT_DTYPES]


# ---------------------------------------------------------------------------
# References: the shared float64 ones (polyops.testing), which write the NaN/Inf
# contract out; attention_reference adapts flash_attention_reference's signature.


# ---------------------------------------------------------------------------
# silu_and_mul, swiglu

# Gate values and what silu makes of them: NaN, -inf (NaN), +inf (inf), and
# finite values where exp(-g) overflows float32.
GATES = [NAN, -INF, INF, -100.0, -88.5, 90.0, 0.0, 1.0]


def _gate_inputs(dtype, gen, cols=37):
    """Rows of GATES (one special per row, spread over vector and tail lanes)
    and multipliers with 0, inf and NaN in some rows."""
    gate = torch.randn(len(GATES), cols, generator=gen, dtype=torch.float64)
    mult = torch.randn(len(GATES), cols, generator=gen, dtype=torch.float64)
    for r, g in enumerate(GATES):
        gate[r, r % 3 :: 5] = g
    mult[0, 1] = 0.0  # silu(inf) * 0 = NaN when the gate row is +inf
    mult[2, ::5] = 0.0
    mult[3, 4] = INF
    mult[5, 7] = NAN
    mult[6, 0::7] = -INF  # silu(0) = 0: 0 * -inf = NaN
    return gate.to(dtype), mult.to(dtype)


@pytest.mark.parametrize("slot", slot_params("silu_and_mul"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_and_mul_nan_inf(dtype, slot, gen, api):
    gate, mult = _gate_inputs(dtype, gen)
    x = torch.cat([gate, mult], dim=-1)
    out = api.silu_and_mul(x, implementation_index=slot)
    expected = silu_and_mul_reference(x)
    assert expected[1].isnan().any()  # silu(-inf) = NaN
    assert_specials_close(out, expected, dtype)


@pytest.mark.parametrize("slot", slot_params("swiglu"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_swiglu_nan_inf(dtype, slot, gen, api):
    gate, mult = _gate_inputs(dtype, gen)
    out = api.swiglu(mult, gate, implementation_index=slot)
    assert_specials_close(out, swiglu_reference(mult, gate), dtype)
    # The roles swapped: specials in `input` multiply finite silu values.
    out = api.swiglu(gate, mult.nan_to_num(0.0, 0.0, 0.0), implementation_index=slot)
    assert_specials_close(out, swiglu_reference(gate, mult.nan_to_num(0.0, 0.0, 0.0)), dtype)


# ---------------------------------------------------------------------------
# rms_norm, add_rms_norm


def _norm_inputs(dtype, gen, hidden=80):
    x = torch.randn(6, hidden, generator=gen, dtype=torch.float64)
    x[1, 5] = NAN
    x[2, 70] = INF  # row: NaN there, zeros elsewhere
    x[3, 0] = -INF
    x[4, 3], x[4, 9] = INF, -INF
    w = torch.randn(hidden, generator=gen, dtype=torch.float64)
    w[11] = INF  # column: +-inf for finite rows
    w[12] = NAN
    return x.to(dtype), w.to(dtype)


@pytest.mark.parametrize("slot", slot_params("rms_norm"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_nan_inf(dtype, slot, gen, api):
    x, w = _norm_inputs(dtype, gen)
    out = api.rms_norm(x, w, 1e-6, implementation_index=slot)
    assert_specials_close(out, rms_norm_reference(x, w, 1e-6), dtype)


@pytest.mark.parametrize("slot", slot_params("add_rms_norm"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_rms_norm_nan_inf(dtype, slot, gen, api):
    x1, w = _norm_inputs(dtype, gen)
    x2 = torch.randn(x1.shape, generator=gen, dtype=torch.float64).to(dtype)
    x2[5, 7], x1[5, 7] = -INF, INF  # inf + -inf = NaN in the sum
    y, x = api.add_rms_norm(x1, x2, w, 1e-6, implementation_index=slot)
    summed = (x1.double() + x2.double()).to(dtype)
    assert_specials_close(x, summed.double(), dtype)
    assert_specials_close(y, rms_norm_reference(summed, w, 1e-6), dtype)


# ---------------------------------------------------------------------------
# causal_softmax


@pytest.mark.parametrize("slot", slot_params("causal_softmax"))
@pytest.mark.parametrize("dtype", DTYPES)
def test_causal_softmax_nan_inf(dtype, slot, gen, api):
    q, k = 9, 40  # row i sees keys [0, i + 31]
    x = torch.randn(2, q, k, generator=gen, dtype=torch.float64)
    x[0, 0, 35] = NAN  # hidden from row 0 (sees 32 keys): must not matter
    x[0, 1, 5] = NAN  # visible: row NaN
    x[0, 2, 20] = INF  # row NaN (inf - inf)
    x[0, 3, 0], x[0, 3, 17], x[0, 3, 33] = -INF, -INF, -INF  # probabilities exactly 0
    x[0, 4, :36] = -INF  # every visible key -inf: 0 / 0 = NaN, as torch.softmax
    x[0, 4, 36:] = NAN  # hidden
    x[1, 8, 39] = -INF  # the last key of the last row
    x[1, 0, 32:] = INF  # hidden from row 0
    x = x.to(dtype)
    out = api.causal_softmax(x, implementation_index=slot)
    expected = causal_softmax_reference(x)
    assert_specials_close(out, expected, dtype)
    assert not expected[0, 0].isnan().any() and expected[0, 4, :36].isnan().all()
    minus_inf = x.double() == -INF
    visible = torch.ones(q, k, dtype=torch.bool).tril(k - q).expand_as(x)
    # A -inf logit gets exactly 0, not exp's smallest normal.
    assert (out[minus_inf & visible & ~expected.isnan()] == 0).all()


# ---------------------------------------------------------------------------
# flash_attention, paged_attention


@pytest.mark.parametrize("slot", slot_params("flash_attention"))
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_nan_inf(dtype, case, slot, gen, api):
    q, k, v, cu_q, cu_kv = _attention_inputs(case, dtype, gen)
    args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, implementation_index=slot)
    out = api.flash_attention(q, k, v, **args)
    expected = attention_reference(q, k, v, cu_q, cu_kv)
    assert_specials_close(out, expected, dtype, ATTENTION_ATOL[dtype], msg=case)
    # A window hides keys on the left too: NaN/inf there must not matter.
    out = api.flash_attention(q, k, v, window_left=20, **args)
    expected = attention_reference(q, k, v, cu_q, cu_kv, window=(20, -1))
    assert_specials_close(out, expected, dtype, ATTENTION_ATOL[dtype], msg=f"{case} window")


@pytest.mark.parametrize("slot", slot_params("flash_attention"))
def test_flash_attention_masked_keys_never_contribute(slot, gen, api):
    # Every hidden key and value NaN: each row must equal attention over its
    # visible keys alone.
    lengths = [70]
    q = torch.randn(70, 2, 64, generator=gen)
    k = torch.randn(70, 1, 64, generator=gen)
    v = torch.randn(70, 1, 64, generator=gen)
    args = dict(cu_seqlens_q=_cu(lengths), cu_seqlens_kv=_cu(lengths), implementation_index=slot)
    expected = api.flash_attention(q, k, v, **args)
    for i in (0, 5, 31, 32, 33, 63, 64, 69):
        k_poisoned, v_poisoned = k.clone(), v.clone()
        k_poisoned[i + 1 :], v_poisoned[i + 1 :] = NAN, INF
        out = api.flash_attention(q, k_poisoned, v_poisoned, **args)
        assert torch.equal(out[: i + 1], expected[: i + 1]), f"row {i}"


@pytest.mark.parametrize("dtype", DTYPES)
def test_flash_attention_slots_agree_on_specials(dtype, gen):
    # Every slot puts NaN and inf where the reference slot (0) does.
    for case in CASES:
        q, k, v, cu_q, cu_kv = _attention_inputs(case, dtype, gen)
        args = dict(cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
        reference_slot = polyops.flash_attention(q, k, v, implementation_index=0, **args)
        for slot in polyops.implementations("flash_attention"):
            out = polyops.flash_attention(q, k, v, implementation_index=slot, **args)
            assert torch.equal(out.isnan(), reference_slot.isnan()), (case, slot)
            assert torch.equal(out.isinf(), reference_slot.isinf()), (case, slot)


@pytest.mark.parametrize("slot", slot_params("paged_attention"))
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_paged_attention_nan_inf(dtype, case, slot, gen, api):
    q, k_cache, v_cache, lens, table, expected = _decode_inputs(case, dtype, gen)
    out = api.paged_attention(q, k_cache, v_cache, lens, table, implementation_index=slot)
    assert_specials_close(out, expected, dtype, ATTENTION_ATOL[dtype], msg=case)


@pytest.mark.parametrize("slot", slot_params("flash_attention"))
@pytest.mark.parametrize("case", CASES)
def test_flash_attention_paged_nan_inf(case, slot, gen, api):
    # The paged flash_attention path over the same caches (decode rows).
    q, k_cache, v_cache, lens, table, expected = _decode_inputs(case, F32, gen)
    out = api.flash_attention(
        q,
        k_cache,
        v_cache,
        cu_seqlens_q=_cu([1, 1, 1]),
        cu_seqlens_kv=_cu(lens.tolist()),
        block_table=table,
        implementation_index=slot,
    )
    assert_specials_close(out, expected, F32, ATTENTION_ATOL[F32], msg=case)
