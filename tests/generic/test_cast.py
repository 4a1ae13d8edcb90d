"""cast between every pair of dtypes against exact values and float64 references:
rounding to nearest even (once), truncation, special values, layouts and bad arguments."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

import polyops
from tests.conftest import (
    ALL_DTYPES,
    BF16,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    NONCONTIG_LAYOUTS,
    U8,
    assert_equal,
    dtype_id,
    empty_like_strided,
    make_tensor,
    slot_params,
)
from tests.generic._elementwise_cases import SHAPES, shape_id

CAST_SLOTS = slot_params("cast")
SIGNED = [I8, I16, I32, I64, F16, BF16, F32, F64]


def _cast_pairs(sources, targets):
    return [
        pytest.param(src, dst, id=f"{dtype_id(src)}-to-{dtype_id(dst)}")
        for src in sources
        for dst in targets
    ]


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src,dst", _cast_pairs(ALL_DTYPES, ALL_DTYPES))
def test_cast_all_pairs_exact_values(src, dst, slot):
    # Values exactly representable in every dtype (bool: 0 and 1).
    values = [0, 1, 1, 0, 1] if src == torch.bool else [0, 1, 2, 3, 7, 42, 100, 127, 5, 64]
    x = torch.tensor(values, dtype=src).reshape(-1, 5 if src == torch.bool else 2)
    result = polyops.cast(x, dst, implementation_index=slot)
    if dst == torch.bool:
        expected = torch.tensor([v != 0 for v in values]).reshape(x.shape)
    else:
        expected = torch.tensor(values, dtype=dst).reshape(x.shape)
    assert result.is_contiguous()
    assert_equal(result, expected, f"{src} -> {dst}")


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src,dst", _cast_pairs(SIGNED, SIGNED))
def test_cast_negative_exact_values(src, dst, slot):
    values = [-1, -2, -7, -100, -128, 0, 64, -64]
    x = torch.tensor(values, dtype=src)
    assert_equal(polyops.cast(x, dst, implementation_index=slot), torch.tensor(values, dtype=dst))


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src,dst", _cast_pairs([F16, BF16, F32, F64], [I8, I16, I32, I64]))
def test_cast_float_to_int_truncates(src, dst, slot):
    values = [-3.75, -2.5, -0.5, -0.0, 0.75, 2.5, 3.75, 100.5, -100.5, 0.25]
    x = torch.tensor(values, dtype=F64).to(src)
    assert x.double().tolist() == values  # exactly representable inputs
    expected = torch.tensor([math.trunc(v) for v in values], dtype=dst)
    assert_equal(polyops.cast(x, dst, implementation_index=slot), expected)


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src", [F16, BF16, F32, F64], ids=dtype_id)
def test_cast_float_to_uint8_truncates(src, slot):
    values = [0.0, 0.75, 2.5, 3.75, 100.5, 254.0, 255.0]
    x = torch.tensor(values, dtype=F64).to(src)
    assert x.double().tolist() == values
    expected = torch.tensor([math.trunc(v) for v in values], dtype=U8)
    assert_equal(polyops.cast(x, U8, implementation_index=slot), expected)


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src", ALL_DTYPES, ids=dtype_id)
def test_cast_to_bool_is_nonzero(src, slot):
    if src == torch.bool:
        values = [True, False]
    elif src.is_floating_point:
        values = [0.0, -0.0, 0.5, -2.0, math.nan, math.inf, -math.inf, 2.0**-24]
    elif src == U8:
        values = [0, 1, 255, 128]
    else:
        values = [0, 1, -1, 2, torch.iinfo(src).min, torch.iinfo(src).max]
    x = torch.tensor(values, dtype=F64 if src.is_floating_point else None).to(src)
    expected = torch.tensor([bool(v != 0) for v in values])
    assert_equal(polyops.cast(x, torch.bool, implementation_index=slot), expected)


@pytest.mark.parametrize("slot", CAST_SLOTS)
def test_cast_float32_to_bfloat16_round_to_nearest_even(slot):
    u = 2.0**-8  # half an ulp of bfloat16 at 1
    cases = [
        (1 + u, 1.0),  # tie -> even (1.0)
        (1 + 3 * u, 1 + 4 * u),  # tie -> even (1 + 2**-6)
        (1 + u + 2.0**-20, 1 + 2 * u),  # just above the tie
        (1 + u - 2.0**-20, 1.0),  # just below the tie
        (-(1 + u), -1.0),
        (-(1 + 3 * u), -(1 + 4 * u)),
        (2 - u, 2.0),  # rounds up into the next binade
        (3.4e38, math.inf),  # past the largest bfloat16 + half an ulp
    ]
    x = torch.tensor([c[0] for c in cases], dtype=F32)
    expected = torch.tensor([c[1] for c in cases], dtype=F64).to(BF16)
    result = polyops.cast(x, BF16, implementation_index=slot)
    assert_equal(result, expected)
    assert_equal(result, x.to(BF16))  # torch's float32 -> bfloat16 is RNE too


@pytest.mark.parametrize("slot", CAST_SLOTS)
def test_cast_float32_to_float16_round_to_nearest_even(slot):
    u = 2.0**-11  # half an ulp of float16 at 1
    tiny = 2.0**-24  # the smallest float16 subnormal
    cases = [
        (1 + u, 1.0),
        (1 + 3 * u, 1 + 4 * u),
        (1 + u + 2.0**-20, 1 + 2 * u),
        (-(1 + 3 * u), -(1 + 4 * u)),
        (2049.0, 2048.0),  # ulp 2 at 2048: tie -> even
        (2051.0, 2052.0),
        (tiny / 2, 0.0),  # subnormal tie -> 0
        (3 * tiny / 2, 2 * tiny),  # subnormal tie -> even
        (3 * tiny / 4, tiny),
        (2.0**-14 - tiny / 2, 2.0**-14),  # largest subnormal tie -> smallest normal
        (65519.0, 65504.0),
        (65520.0, math.inf),  # tie between 65504 and 2**16 -> even -> overflow
        (-65520.0, -math.inf),
        (1.0e6, math.inf),
    ]
    x = torch.tensor([c[0] for c in cases], dtype=F32)
    assert x.double().tolist() == [c[0] for c in cases]
    expected = torch.tensor([c[1] for c in cases], dtype=F64).to(F16)
    assert expected.double().tolist() == [c[1] for c in cases]
    result = polyops.cast(x, F16, implementation_index=slot)
    assert_equal(result, expected)
    assert_equal(result, x.to(F16))


@pytest.mark.parametrize("slot", CAST_SLOTS)
def test_cast_float16_subnormals_widen_exactly(slot):
    bits = torch.tensor([0x0001, 0x03FF, 0x0200, 0x8001 - 0x10000, 0x0400, 0x7BFF], dtype=I16)
    x = bits.view(F16)
    expected = [2.0**-24, 1023 * 2.0**-24, 2.0**-15, -(2.0**-24), 2.0**-14, 65504.0]
    for dst in (F32, F64):
        assert polyops.cast(x, dst, implementation_index=slot).double().tolist() == expected


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("dst", [F16, BF16], ids=dtype_id)
def test_cast_float64_rounds_directly_no_double_rounding(dst, slot):
    # A float64 just above a half-way point of the 16-bit format: float64 ->
    # float32 would land exactly on the tie, and the tie would then go to even
    # (down). The correctly rounded result goes up. Expectations are written
    # by hand: torch's own float64 -> float16 conversion double-rounds here.
    half_ulp = 2.0**-11 if dst == F16 else 2.0**-8
    cases = [
        (1 + half_ulp + 2.0**-40, 1 + 2 * half_ulp),
        (-(1 + half_ulp + 2.0**-40), -(1 + 2 * half_ulp)),
        (1 + half_ulp - 2.0**-40, 1.0),
        (1 + half_ulp, 1.0),  # an exact tie still goes to even
        (1 + 3 * half_ulp, 1 + 4 * half_ulp),
    ]
    if dst == F16:
        cases += [(2.0**-25 + 2.0**-60, 2.0**-24), (2.0**-25, 0.0)]  # subnormal range
    else:
        # bfloat16's smallest subnormal is 2**-133: a tie at 2**-134, nudged up.
        cases += [(2.0**-134 + 2.0**-170, 2.0**-133), (2.0**-134, 0.0)]
    x = torch.tensor([c[0] for c in cases], dtype=F64)
    result = polyops.cast(x, dst, implementation_index=slot)
    assert result.double().tolist() == [c[1] for c in cases]


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src", [I32, I64], ids=dtype_id)
def test_cast_integer_to_half_precision_rounds_directly(src, slot):
    # 2**24 + 2**16 + 1 is just above the bfloat16 tie between 2**24 and
    # 2**24 + 2**17; via float32 it would first round onto the tie.
    x = torch.tensor([2**24 + 2**16 + 1, 2**24 + 2**16, -(2**24 + 2**16 + 1)], dtype=src)
    result = polyops.cast(x, BF16, implementation_index=slot)
    assert result.double().tolist() == [2**24 + 2**17, 2**24, -(2**24 + 2**17)]
    y = torch.tensor([2049, 2051, 2047, 65519, 65520, -70000], dtype=src)
    result = polyops.cast(y, F16, implementation_index=slot)
    assert result.double().tolist() == [2048, 2052, 2047, 65504, math.inf, -math.inf]


@pytest.mark.parametrize("slot", CAST_SLOTS)
def test_cast_int64_beyond_float64_precision_to_bfloat16(slot):
    # 2**62 + 2**54 + 1 lies just above the bfloat16 tie between 2**62 and
    # 2**62 + 2**55. It is not a float64: rounding it to float64 first lands
    # exactly on the tie, which then goes to even (down). Rounded once, it goes up.
    v = 2**62 + 2**54 + 1
    x = torch.tensor([v, -v, 2**62 + 2**54, 2**62 + 2**54 - 1], dtype=I64)
    result = polyops.cast(x, BF16, implementation_index=slot)
    assert result.double().tolist() == [2**62 + 2**55, -(2**62 + 2**55), 2**62, 2**62]


# (significand bits incl. the implicit one, smallest normal exponent, largest finite)
FORMATS = {F16: (11, -14, 65504.0), BF16: (8, -126, float(Fraction(2**8 - 1, 2**7) * 2**127))}


def round_to_format(value, dtype) -> float:
    """`value` (int or float) rounded once, to nearest even, to float16/bfloat16: exact math."""
    bits, emin, largest = FORMATS[dtype]
    exact = Fraction(value)
    if exact == 0:
        return math.copysign(0.0, value)
    magnitude = abs(exact)
    exponent = magnitude.numerator.bit_length() - magnitude.denominator.bit_length()
    if Fraction(2) ** exponent > magnitude:
        exponent -= 1  # now 2**exponent <= magnitude < 2**(exponent + 1)
    quantum = Fraction(2) ** (max(exponent, emin) - (bits - 1))
    rounded = round(magnitude / quantum) * quantum  # round() on a Fraction: half to even
    result = math.inf if rounded > largest else float(rounded)
    return math.copysign(result, value)


def _near_ties(dtype, gen, count):
    """Float64 values at and around the half-way points between neighbouring `dtype` values."""
    bits, emin, _ = FORMATS[dtype]
    lo_exp = emin - bits if dtype == F16 else -140
    exponents = torch.randint(lo_exp, 16 if dtype == F16 else 120, (count,), generator=gen)
    mantissas = torch.randint(2 ** (bits - 1), 2**bits, (count,), generator=gen)
    nudges = torch.randint(20, 45, (count,), generator=gen)
    signs = torch.randint(0, 2, (count,), generator=gen)
    values = []
    columns = (exponents.tolist(), mantissas.tolist(), nudges.tolist(), signs.tolist())
    for e, m, k, s in zip(*columns, strict=True):
        quantum = 2.0 ** (max(e, emin) - (bits - 1))
        tie = m * 2.0 ** (e - (bits - 1)) + quantum / 2
        sign = -1.0 if s else 1.0
        values += [sign * tie, sign * (tie + quantum * 2.0**-k), sign * (tie - quantum * 2.0**-k)]
    return values


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("dst", [F16, BF16], ids=dtype_id)
def test_cast_float64_near_ties_rounds_once(dst, slot, gen):
    values = _near_ties(dst, gen, 700)
    values += (torch.randn(500, generator=gen, dtype=F64) * 1000).tolist()
    result = polyops.cast(torch.tensor(values, dtype=F64), dst, implementation_index=slot)
    expected = torch.tensor([round_to_format(v, dst) for v in values], dtype=F64).to(dst)
    assert torch.equal(expected.double(), torch.tensor([round_to_format(v, dst) for v in values]))
    assert_equal(result, expected)


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src", [I32, I64], ids=dtype_id)
def test_cast_integers_near_ties_round_once(src, slot, gen):
    # Integers at and around bfloat16 half-way points (and float16's, below 65520).
    top = 31 if src == I32 else 63
    values = []
    for dst, high in ((BF16, top), (F16, 16)):
        bits = FORMATS[dst][0]
        for e in range(bits, high):
            quantum = 2 ** (e - (bits - 1))
            base = int(torch.randint(2 ** (bits - 1), 2**bits, (1,), generator=gen)) * quantum
            tie = base + quantum // 2
            values += [tie, tie + 1, tie - 1, -tie - 1]
    values = [v for v in values if -(2**top) <= v < 2**top]
    x = torch.tensor(values, dtype=src)
    for dst in (BF16, F16):
        result = polyops.cast(x, dst, implementation_index=slot)
        assert result.double().tolist() == [round_to_format(v, dst) for v in values], dst


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("src", [F16, BF16, F32, F64], ids=dtype_id)
@pytest.mark.parametrize("dst", [F16, BF16, F32, F64], ids=dtype_id)
def test_cast_nan_inf_signed_zero(src, dst, slot):
    x = torch.tensor([math.nan, math.inf, -math.inf, -0.0, 0.0, -math.nan], dtype=F64).to(src)
    result = polyops.cast(x, dst, implementation_index=slot)
    assert torch.isnan(result[0]) and torch.isnan(result[5])
    assert result[1].item() == math.inf and result[2].item() == -math.inf
    assert result[3].item() == 0 and torch.signbit(result[3])
    assert result[4].item() == 0 and not torch.signbit(result[4])


@pytest.mark.parametrize("slot", CAST_SLOTS)
def test_cast_overflow_and_underflow_from_float64(slot):
    x = torch.tensor([1e300, -1e300, 1e-300, -1e-300, 1e39], dtype=F64)
    for dst in (F16, BF16, F32):
        result = polyops.cast(x, dst, implementation_index=slot)
        assert result[:2].tolist() == [math.inf, -math.inf], dst
        assert result[2:4].tolist() == [0.0, 0.0], dst
        assert not torch.signbit(result[2]) and torch.signbit(result[3]), dst
        assert result[4].item() == math.inf, dst


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("in_kind", list(NONCONTIG_LAYOUTS))
@pytest.mark.parametrize("out_kind", ["contiguous", "transposed", "step"])
@pytest.mark.parametrize("src,dst", [(F32, BF16), (F16, F64), (I32, F16), (BF16, I8)])
def test_cast_noncontiguous(src, dst, in_kind, out_kind, slot, gen):
    x = make_tensor((6, 7, 9), F64, gen, scale=20.0).round()
    x = NONCONTIG_LAYOUTS[in_kind](x.to(src))
    out = empty_like_strided((6, 7, 9), dst, out_kind)
    result = polyops.cast(x, dst, out=out, implementation_index=slot)
    assert result is out
    # |x| <= ~100 integers: exact in every dtype here.
    assert_equal(out, x.double().to(dst))


@pytest.mark.parametrize("slot", CAST_SLOTS)
@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
def test_cast_shapes(shape, slot, gen):
    x = make_tensor(shape, F32, gen)
    result = polyops.cast(x, F64, implementation_index=slot)
    assert result.shape == x.shape and result.dtype == F64
    assert_equal(result, x.double())
    back = polyops.cast(result, F32, implementation_index=slot)
    assert_equal(back, x)


@pytest.mark.parametrize("slot", CAST_SLOTS)
def test_cast_random_float32_to_16bit_matches_rne(slot, gen):
    # Random float32 values spanning normal and subnormal 16-bit ranges;
    # torch's float32 -> float16/bfloat16 conversion is an independent RNE.
    x = (torch.randn(8192, generator=gen) * torch.logspace(-9, 4, 8192)).float()
    for dst in (F16, BF16):
        assert_equal(polyops.cast(x, dst, implementation_index=slot), x.to(dst))
    # float64 inputs whose float32 rounding is exact take the same route.
    assert_equal(polyops.cast(x.double(), F16, implementation_index=slot), x.to(F16))


def test_cast_bad_arguments():
    x = torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"^polyops\.cast: out must have dtype float16"):
        polyops.cast(x, F16, out=torch.empty(2, 3, dtype=F32))
    with pytest.raises(ValueError, match=r"^polyops\.cast: out must have the shape of input"):
        polyops.cast(x, F16, out=torch.empty(3, 2, dtype=F16))
    with pytest.raises(NotImplementedError, match=r"^polyops\.cast .*dtype"):
        polyops.cast(x, torch.complex64)
    with pytest.raises(NotImplementedError, match=r"^polyops\.cast .*input"):
        polyops.cast(torch.ones(2, dtype=torch.complex64), F32)
    with pytest.raises(TypeError, match=r"polyops\.cast.*dtype"):
        polyops.cast(x, "float16")


def test_cast_same_dtype_copies(gen):
    x = make_tensor((4, 5), BF16, gen)
    result = polyops.cast(x, BF16)
    assert result.data_ptr() != x.data_ptr()
    assert_equal(result, x)
