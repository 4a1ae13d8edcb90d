"""add's alpha against float64 references and torch.add's bits: float and integer alphas,
rounding to the dtype, wraparound, special values and bad alphas."""

from __future__ import annotations

import math

import pytest
import torch

import polyops
from polyops.testing.references import add_reference
from tests.conftest import (
    BF16,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    assert_equal,
    dtype_id,
    make_tensor,
    slot_params,
    step_sliced,
    transposed,
)
from tests.generic._elementwise_cases import binary_reference, check_binary

ADD_SLOTS = slot_params("add")
# Non-representable (0.1, 1/3: rounded to the dtype first), negative, zero,
# and beyond float16's step size near 1.
FLOAT_ALPHAS = [0.1, -2.5, 1 / 3, 0.0, -1.0, 1e-3, 1000.0]


def _alpha_layouts(dtype, shape, gen):
    """(name, input, other) in the layouts the slots take different paths for."""
    a, b = make_tensor(shape, dtype, gen), make_tensor(shape, dtype, gen)
    row = make_tensor(shape[-1:], dtype, gen)
    return [
        ("contiguous", a, b),  # the AVX loops (rows >= 32)
        ("transposed", transposed(a), b),  # staged blocks
        ("step", step_sliced(a), step_sliced(b)),
        ("row", a, row),
        ("row-as-input", row, b),
    ]


@pytest.mark.parametrize("alpha", FLOAT_ALPHAS, ids=str)
@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64], ids=dtype_id)
@pytest.mark.parametrize("slot", ADD_SLOTS)
def test_add_alpha_float(slot, dtype, alpha, gen, api):
    for name, a, b in _alpha_layouts(dtype, (6, 70), gen):
        result = api.add(a, b, alpha=alpha, implementation_index=slot)
        # One rounding of the exact input + alpha * other, where alpha is the
        # dtype's value; 16-bit results pass through float32 first, so they are
        # within one ulp of the directly rounded value.
        check_binary("add", result, a, b, alpha)
        if dtype in (F32, F64):  # fused: exactly the correctly rounded value
            assert_equal(result, binary_reference("add", a, b, alpha), f"{name} {alpha}")


# 0.1 in each dtype: float16 and bfloat16 round float32's 0.1 again.
ALPHA_0_1 = {F16: 0.0999755859375, BF16: 0.10009765625, F32: 0.100000001490116119384765625}


@pytest.mark.parametrize("dtype", [F16, BF16, F32], ids=dtype_id)
@pytest.mark.parametrize("slot", ADD_SLOTS)
def test_add_alpha_is_rounded_to_the_dtype(slot, dtype, api):
    # 0 + alpha * 1 is alpha as the op applies it.
    ones = torch.ones(64, dtype=dtype)
    result = api.add(torch.zeros(64, dtype=dtype), ones, alpha=0.1, implementation_index=slot)
    assert result.double().tolist() == [ALPHA_0_1[dtype]] * 64


@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64], ids=dtype_id)
@pytest.mark.parametrize("alpha", [0.1, -2.5, 1 / 3, 3.0], ids=str)
def test_add_alpha_matches_torch_bits(alpha, dtype, gen):
    """torch.add's CPU bits on contiguous operands (its vectorized loop: a fused
    multiply-add in float32/float64, float32 then the dtype for 16-bit floats, alpha
    rounded to the dtype), for every polyops layout and slot. Lengths are multiples of
    64 so that torch runs no scalar tail, which rounds 16-bit alpha * other first."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("torch's vectorized CPU loop fuses only with AVX2 or AVX-512")
    a, b = make_tensor((8, 256), dtype, gen), make_tensor((8, 256), dtype, gen)
    expected = torch.add(a, b, alpha=alpha)
    for slot in polyops.implementations("add"):
        for name, x, y in [("contiguous", a, b), ("transposed", transposed(a), transposed(b))]:
            got = polyops.add(x, y, alpha=alpha, implementation_index=slot)
            assert_equal(got, expected, f"slot {slot} {name}")


@pytest.mark.parametrize("slot", ADD_SLOTS)
def test_add_alpha_integer_wraps(slot, api):
    cases = [
        (I8, [1, 100, -128], [1, 2, 1], 127, [-128, 98, -1]),
        (I8, [5, 0, 7], [3, 1, -128], -128, [-123, -128, 7]),
        (U8, [1, 200, 0], [1, 100, 3], -1, [0, 100, 253]),  # -1 wraps to 255
        (U8, [0, 1], [2, 1], 255, [254, 0]),
        (I16, [30000], [2], 2000, [30000 + 4000 - 65536]),
        (I32, [2**31 - 1], [1], 3, [-(2**31) + 2]),
        (I64, [2**62, 5], [2, -3], 2**52, [2**62 + 2**53, 5 - 3 * 2**52]),
        (I64, [1, 2], [2**62, 1], -4, [1, 2 - 4]),  # -4 * 2**62 = -2**64 wraps to 0
    ]
    for dtype, left, right, alpha, wrapped in cases:
        a, b = torch.tensor(left, dtype=dtype), torch.tensor(right, dtype=dtype)
        result = api.add(a, b, alpha=alpha, implementation_index=slot)
        assert_equal(result, torch.tensor(wrapped, dtype=dtype), f"{dtype} alpha={alpha}")
        assert_equal(result, add_reference(a, b, alpha=alpha), f"{dtype} reference")


@pytest.mark.parametrize("dtype", [I8, I16, I32, I64, U8], ids=dtype_id)
@pytest.mark.parametrize("slot", ADD_SLOTS)
def test_add_alpha_integer_layouts(slot, dtype, gen):
    for name, a, b in _alpha_layouts(dtype, (5, 40), gen):
        for alpha in (3, -2, 0):
            result = polyops.add(a, b, alpha=alpha, implementation_index=slot)
            assert_equal(result, add_reference(a, b, alpha=alpha), f"{name} alpha={alpha}")


@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64], ids=dtype_id)
def test_add_alpha_special_values(dtype, api):
    # inf and NaN alphas pass (as torch's), and IEEE rules follow: inf * 0 = NaN.
    a = torch.tensor([1.0, 1.0, -2.0, 0.0], dtype=dtype)
    b = torch.tensor([1.0, 0.0, -1.0, 2.0], dtype=dtype)
    for alpha in (math.inf, -math.inf, math.nan):
        for slot in polyops.implementations("add"):
            result = api.add(a, b, alpha=alpha, implementation_index=slot)
            assert_equal(result, add_reference(a, b, alpha=alpha).to(dtype), f"alpha={alpha}")


def test_add_bad_alpha(api):
    ints = torch.ones(3, dtype=I8)
    halves = torch.ones(3, dtype=F16)
    bad = [
        (ints, 0.5, r"alpha must be an integer in \[-128, 127\] for int8 tensors, got 0\.5"),
        (ints, 300, r"alpha must be an integer in \[-128, 127\] for int8 tensors, got 300"),
        (ints.to(U8), -256, r"alpha must be an integer in \[-255, 255\] for uint8"),
        (
            ints.long(),
            2.0**53,
            r"alpha must be an integer in \[-9007199254740991, 9007199254740991\] "
            r"for int64 tensors, got 9007199254740992$",
        ),
        (ints.int(), math.inf, r"alpha must be an integer .* for int32 tensors, got inf"),
        (ints.int(), math.nan, r"alpha must be an integer .* for int32 tensors, got nan"),
        (halves, 65505.0, r"alpha must be at most 65504 in magnitude \(or inf or nan\)"),
        (halves.bfloat16(), 1e39, r"alpha must be at most .* for bfloat16 tensors, got 1e\+39"),
        (halves.float(), -1e39, r"alpha must be at most .* for float32 tensors, got -1e\+39"),
    ]
    for tensor, alpha, message in bad:
        with pytest.raises(ValueError, match=rf"^polyops\.add: {message}"):
            api.add(tensor, tensor, alpha=alpha)
    # The largest finite values themselves pass.
    assert torch.isfinite(api.add(torch.zeros(3, dtype=F16), halves, alpha=65504.0)).all()
    assert api.add(ints.long(), ints.long(), alpha=2**53 - 1).tolist() == [2**53] * 3
    if api is polyops:
        with pytest.raises(TypeError, match=r"alpha"):
            polyops.add(halves, halves, alpha="2")
        with pytest.raises(TypeError, match=r"takes at most 2 positional argument"):
            polyops.add(halves, halves, 2.0)  # alpha is keyword-only, as in torch.add
