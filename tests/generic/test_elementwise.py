"""add, mul, cast, silu_and_mul, swiglu against float64 references written from the math."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
import torch
from conftest import (
    ALL_DTYPES,
    ARITH_DTYPES,
    BF16,
    F16,
    F32,
    F64,
    FLOAT_DTYPES,
    I8,
    I16,
    I32,
    I64,
    NONCONTIG_LAYOUTS,
    U8,
    assert_close,
    assert_equal,
    assert_within_ulp,
    dtype_id,
    empty_like_strided,
    expanded,
    make_tensor,
    parallel_param,
    sentinel,
    slot_params,
    step_gaps,
    step_sliced,
    transposed,
)

import polyops
from polyops.testing.references import (
    add_reference,
    mul_reference,
    silu_and_mul_reference,
    swiglu_reference,
)

SHAPES = [(), (1,), (1, 1), (3, 5, 7), (4096,), (2, 4096), (0,), (3, 0, 5)]
# > 32768 elements with ragged 512-element blocks: the parallel, blocked path.
LARGE_SHAPE = (9, 4099)
BINARY_OPS = ["add", "mul"]
BINARY_CASES = [
    pytest.param(op, slot, id=f"{op}-{p.id}")
    for op in BINARY_OPS
    for p in slot_params(op)
    for slot in p.values
]


def _shape_id(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


# ---------------------------------------------------------------------------
# References


def binary_reference(op: str, a: torch.Tensor, b: torch.Tensor, alpha=1) -> torch.Tensor:
    """The op's reference rounded once to the dtype (integers: already exact)."""
    exact = add_reference(a, b, alpha=alpha) if op == "add" else mul_reference(a, b)
    return exact.to(a.dtype)


def check_binary(op, result, a, b, alpha=1):
    expected = binary_reference(op, a, b, alpha)
    if a.dtype.is_floating_point:
        assert_within_ulp(result, expected, max_ulp=1, msg=f"{op} {a.dtype}")
    else:
        assert_equal(result, expected, msg=f"{op} {a.dtype}")


def _operands(dtype, shape, gen):
    a = make_tensor(shape, dtype, gen)
    b = make_tensor(shape, dtype, gen)
    return a, b


# ---------------------------------------------------------------------------
# add / mul


@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
@pytest.mark.parametrize("dtype", ARITH_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_parity(op, slot, dtype, shape, gen):
    a, b = _operands(dtype, shape, gen)
    a_before, b_before = a.clone(), b.clone()
    result = getattr(polyops, op)(a, b, implementation_index=slot)
    assert result.shape == a.shape and result.dtype == dtype and result.is_contiguous()
    check_binary(op, result, a, b)
    assert_equal(a, a_before, "input modified")
    assert_equal(b, b_before, "other modified")


@pytest.mark.parallel
@pytest.mark.parametrize("dtype", [F16, BF16, F32, I8, U8], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_parity_large(op, slot, dtype, gen):
    a, b = _operands(dtype, LARGE_SHAPE, gen)
    check_binary(op, getattr(polyops, op)(a, b, implementation_index=slot), a, b)


@pytest.mark.parametrize("dtype", ARITH_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_reuses_cached_instance_with_new_data(op, slot, dtype, gen):
    # Same shapes/strides/dtype three times: one cached instance, three data sets.
    fn = getattr(polyops, op)
    for _ in range(3):
        a, b = _operands(dtype, (5, 33), gen)
        check_binary(op, fn(a, b, implementation_index=slot), a, b)


@pytest.mark.parametrize(
    "other_shape",
    [(7,), (5, 1), (1,), (), (1, 5, 7), (3, 1, 7), (3, 5, 1), (5, 7), (1, 1, 1)],
    ids=_shape_id,
)
@pytest.mark.parametrize("dtype", [F32, BF16, I32, U8], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_broadcast(op, slot, dtype, other_shape, gen):
    a = make_tensor((3, 5, 7), dtype, gen)
    b = make_tensor(other_shape, dtype, gen)
    result = getattr(polyops, op)(a, b, implementation_index=slot)
    assert result.shape == a.shape
    check_binary(op, result, a, b)


# Both operands broadcast: (input shape, other shape).
TWO_SIDED = [
    ((3, 1), (1, 5)),
    ((5,), (2, 3, 5)),
    ((), (4, 6)),
    ((2, 1, 7), (3, 1)),
    ((1, 4, 1), (3, 1, 6)),
    ((4, 1, 1, 2), (1, 3, 5, 1)),
    ((0, 1), (1, 5)),
    ((1, 40), (33, 1)),  # rows of 40: the vector loops' inner run, input row broadcast
]


@pytest.mark.parametrize("shapes", TWO_SIDED, ids=lambda s: f"{_shape_id(s[0])}+{_shape_id(s[1])}")
@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64, I16, U8], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_broadcast_both(op, slot, dtype, shapes, gen, api):
    a = make_tensor(shapes[0], dtype, gen)
    b = make_tensor(shapes[1], dtype, gen)
    result = getattr(api, op)(a, b, implementation_index=slot)
    assert result.shape == torch.broadcast_shapes(a.shape, b.shape) and result.is_contiguous()
    check_binary(op, result, a, b)
    # The same into a given strided output, and with the operands swapped.
    out = empty_like_strided(result.shape, dtype, "transposed")
    getattr(api, op)(b, a, out=out, implementation_index=slot)
    check_binary(op, out, b, a)


@pytest.mark.parallel
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_broadcast_input_rows_parallel(op, slot, gen):
    # A broadcast row or column as *input*, enough elements for the parallel paths.
    fn = getattr(polyops, op)
    for dtype in (F32, BF16):
        row, column = make_tensor((1000,), dtype, gen), make_tensor((40, 1), dtype, gen)
        full = make_tensor((40, 1000), dtype, gen)
        check_binary(op, fn(row, full, implementation_index=slot), row, full)
        check_binary(op, fn(column, full, implementation_index=slot), column, full)
        check_binary(op, fn(column, row, implementation_index=slot), column, row)


@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_in_place_into_other(op, slot, gen, api):
    # out = other is an in-place form when other has the broadcast shape.
    a = make_tensor((9,), F32, gen)
    b = make_tensor((7, 9), F32, gen)
    original = b.clone()
    result = getattr(api, op)(a, b, out=b, implementation_index=slot)
    if api is polyops:
        assert result is b
    check_binary(op, b, a, original)


@pytest.mark.parallel
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_broadcast_large_rows(op, slot, gen):
    # A bias-like row broadcast over enough elements for the parallel path.
    a = make_tensor((40, 1000), F32, gen)
    b = make_tensor((1000,), F32, gen)
    check_binary(op, getattr(polyops, op)(a, b, implementation_index=slot), a, b)
    column = make_tensor((40, 1), F32, gen)
    check_binary(op, getattr(polyops, op)(a, column, implementation_index=slot), a, column)


@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_expanded_and_strided_other(op, slot, gen):
    a = make_tensor((4, 6, 10), F32, gen)
    row = make_tensor((10,), F32, gen)
    fn = getattr(polyops, op)
    # A stride-0 view of the full shape.
    check_binary(op, fn(a, expanded(row, (4, 6, 10)), implementation_index=slot), a, row)
    # Broadcastable others that are themselves strided views.
    column = make_tensor((12, 1), F32, gen)[::2]
    assert column.stride(0) == 2
    check_binary(op, fn(a, column, implementation_index=slot), a, column)
    strided = step_sliced(make_tensor((6, 10), F32, gen), step=3)
    check_binary(op, fn(a, strided, implementation_index=slot), a, strided)
    # An expanded (stride 0) *input* with a separate output.
    base = make_tensor((1, 6, 10), F32, gen)
    wide_input = expanded(base, (4, 6, 10))
    other = make_tensor((4, 6, 10), F32, gen)
    check_binary(op, fn(wide_input, other, implementation_index=slot), wide_input, other)


# Every layout combination on a small shape; a few on a shape large enough for
# the blocked/parallel paths (> 32768 elements, rows longer than one block).
NONCONTIG_CASES = [
    pytest.param((3, 5, 7), layouts, id="3x5x7-in_{}-other_{}-out_{}".format(*layouts))
    for layouts in itertools.product(NONCONTIG_LAYOUTS, repeat=3)
] + [
    parallel_param((48, 700), layouts, id="48x700-in_{}-other_{}-out_{}".format(*layouts))
    for layouts in [
        ("transposed", "transposed", "transposed"),
        ("step", "step", "step"),
        ("transposed", "step", "contiguous"),
        ("contiguous", "contiguous", "step"),
    ]
]


@pytest.mark.parametrize("shape,layouts", NONCONTIG_CASES)
@pytest.mark.parametrize("dtype", [F16, F32, I16], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_noncontiguous(op, slot, dtype, layouts, shape, gen):
    in_kind, other_kind, out_kind = layouts
    a = NONCONTIG_LAYOUTS[in_kind](make_tensor(shape, dtype, gen))
    b = NONCONTIG_LAYOUTS[other_kind](make_tensor(shape, dtype, gen))
    out = empty_like_strided(shape, dtype, out_kind)
    result = getattr(polyops, op)(a, b, out=out, implementation_index=slot)
    assert result is out
    check_binary(op, out, a, b)
    if out_kind == "step":
        # The gaps between the strided output's elements must be untouched.
        assert torch.all(step_gaps(out) == sentinel(dtype))


@pytest.mark.parametrize("dtype", [BF16, F64, I8], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_out_given_vs_omitted(op, slot, dtype, gen):
    fn = getattr(polyops, op)
    a, b = _operands(dtype, (6, 11), gen)
    omitted = fn(a, b, implementation_index=slot)
    explicit_none = fn(a, b, out=None, implementation_index=slot)
    out = torch.empty_like(a)
    given = fn(a, b, out=out, implementation_index=slot)
    assert given is out
    assert omitted.data_ptr() not in (a.data_ptr(), b.data_ptr(), out.data_ptr())
    assert_equal(omitted, given)
    assert_equal(explicit_none, given)
    check_binary(op, given, a, b)


@pytest.mark.parametrize("layout", list(NONCONTIG_LAYOUTS))
@pytest.mark.parametrize("dtype", [F16, F32, I64], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_in_place(op, slot, dtype, layout, gen):
    a = NONCONTIG_LAYOUTS[layout](make_tensor((8, 130), dtype, gen))
    b = make_tensor((130,), dtype, gen)
    original = a.clone()
    result = getattr(polyops, op)(a, b, out=a, implementation_index=slot)
    assert result is a
    check_binary(op, a, original, b)


@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_eight_dims_and_offset_views(op, slot, gen):
    fn = getattr(polyops, op)
    a, b = _operands(F32, (2, 1, 2, 1, 2, 3, 2, 3), gen)
    check_binary(op, fn(a, b, implementation_index=slot), a, b)
    # Views that start inside their storage (non-zero storage offset).
    big = make_tensor((7, 6, 10), F32, gen)
    a, b = big[2:], make_tensor((9, 10), F32, gen)[3:]
    assert a.storage_offset() and b.storage_offset()
    check_binary(op, fn(a, b, implementation_index=slot), a, b)
    out = torch.zeros(8, 6, 10)[1:6]
    assert fn(a, b, out=out, implementation_index=slot) is out
    check_binary(op, out, a, b)


@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_integer_wraparound(op, slot):
    fn = getattr(polyops, op)
    if op == "add":
        cases = [
            (I8, [127, -128, 100, -100], [1, -1, 100, -100], [-128, 127, -56, 56]),
            (U8, [255, 200, 0], [1, 100, 0], [0, 44, 0]),
            (I16, [32767], [1], [-32768]),
            (I32, [2**31 - 1], [1], [-(2**31)]),
            (I64, [2**63 - 1, -(2**63)], [1, -1], [-(2**63), 2**63 - 1]),
        ]
    else:
        cases = [
            (I8, [16, -128, 64, 11], [16, -1, 3, 12], [0, -128, -64, -124]),
            (U8, [16, 255, 15], [16, 255, 17], [0, 1, 255]),
            (I16, [256, 182], [256, 182], [0, -32412]),
            (I32, [65536, -(2**31)], [65536, -1], [0, -(2**31)]),
            (I64, [2**32, 2**62], [2**32, 4], [0, 0]),
        ]
    for dtype, left, right, wrapped in cases:
        a = torch.tensor(left, dtype=dtype)
        b = torch.tensor(right, dtype=dtype)
        result = fn(a, b, implementation_index=slot)
        assert_equal(result, torch.tensor(wrapped, dtype=dtype), f"{op} {dtype}")


@pytest.mark.parametrize("dtype", [F16, BF16, F32, F64], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_special_values(op, slot, dtype):
    inf, nan = math.inf, math.nan
    left = [inf, -inf, inf, nan, 0.0, -0.0, 1.0, 0.0]
    right = [1.0, 2.0, -inf, 1.0, -0.0, -0.0, nan, inf]
    a = torch.tensor(left, dtype=F64).to(dtype)
    b = torch.tensor(right, dtype=F64).to(dtype)
    result = getattr(polyops, op)(a, b, implementation_index=slot)
    check_binary(op, result, a, b)
    expected = binary_reference(op, a, b)
    # Signed zeros: -0 + -0 = -0, 0 + -0 = +0; 0 * -0 = -0, -0 * -0 = +0.
    assert torch.equal(torch.signbit(result[4:6]), torch.signbit(expected[4:6]))


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
@pytest.mark.parametrize("op,slot", BINARY_CASES)
def test_binary_rounds_once_on_ties(op, slot, dtype):
    # Exact results that sit on, or just past, a half-way point of the dtype;
    # expectations written out by hand (u: the ulp on [1, 2), 2u: on [2, 4)).
    u = 2.0 ** (1 - (11 if dtype == F16 else 8))
    if op == "add":
        cases = [
            (1.0, u / 2, 1.0),  # tie -> even
            (1.0, 3 * u / 2, 1 + 2 * u),  # tie -> even
            (1 + u, u / 2, 1 + 2 * u),  # tie -> even
            (1.0, u / 2 + u * u, 1 + u),  # just past the tie
            (-1.0, -u / 2, -1.0),
        ]
    else:
        cases = [  # 3 * (1 + k u) = 3 + 1.5 k (2u): a tie for odd k
            (3.0, 1 + u, 3 + 2 * (2 * u)),
            (3.0, 1 + 3 * u, 3 + 4 * (2 * u)),
            (3.0, 1 + 5 * u, 3 + 8 * (2 * u)),
            (-3.0, 1 + u, -(3 + 2 * (2 * u))),
            (1 + u, 1 + u, 1 + 2 * u),  # 1 + 2u + u*u: just past 1 + 2u
        ]
    left, right, expected = (torch.tensor(column, dtype=F64) for column in zip(*cases, strict=True))
    a, b = left.to(dtype), right.to(dtype)
    assert torch.equal(a.double(), left) and torch.equal(b.double(), right)  # exact inputs
    result = getattr(polyops, op)(a, b, implementation_index=slot)
    assert result.double().tolist() == expected.tolist(), f"{op} {dtype}"
    assert_equal(result, binary_reference(op, a, b), f"{op} {dtype} reference")


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_bad_arguments(op, api):
    fn = getattr(api, op)
    a = torch.ones(3, 5, 7)
    with pytest.raises(ValueError, match=rf"^polyops\.{op}: other must have the dtype of input"):
        fn(a, torch.ones(3, 5, 7, dtype=F64))
    with pytest.raises(ValueError, match=rf"^polyops\.{op}: out must have the dtype of input"):
        fn(a, a, out=torch.empty(3, 5, 7, dtype=F16))
    with pytest.raises(
        ValueError, match=rf"^polyops\.{op}: out must have the broadcast shape .* \[3, 5, 7\]"
    ):
        fn(a, a, out=torch.empty(3, 5, 6))
    with pytest.raises(
        ValueError, match=rf"^polyops\.{op}: input of shape \[3, 5, 7\] and other of shape \[6\]"
    ):
        fn(a, torch.ones(6))
    with pytest.raises(ValueError, match=rf"^polyops\.{op}: .* other of shape \[2, 5, 7\] do not"):
        fn(a, torch.ones(2, 5, 7))
    # The result takes the broadcast shape, so out=input is in place only when
    # input already has it (torch's add_ rule).
    narrow = torch.ones(3, 1, 7)
    with pytest.raises(
        ValueError, match=rf"^polyops\.{op}: out must have the broadcast shape .* \[3, 5, 7\]"
    ):
        fn(narrow, a, out=narrow)
    with pytest.raises(ValueError, match=rf"^polyops\.{op}: out must have the broadcast shape"):
        fn(torch.ones(3, 1), torch.ones(1, 5), out=torch.empty(5, 3))
    if api is polyops:  # the dispatcher checks these before polyops sees them
        with pytest.raises(ValueError, match=rf"^polyops\.{op}: input has 9 dims"):
            fn(torch.ones([1] * 9), torch.ones(1))
        with pytest.raises(ValueError, match=rf"^polyops\.{op}: input must be a dense"):
            fn(torch.eye(3).to_sparse(), torch.ones(3))


# ---------------------------------------------------------------------------
# add: alpha

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


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_unsupported_dtypes(op):
    fn = getattr(polyops, op)
    flags = torch.tensor([True, False])
    with pytest.raises(NotImplementedError, match=rf"^polyops\.{op} .*bool"):
        fn(flags, flags)
    z = torch.ones(2, dtype=torch.complex64)
    with pytest.raises(NotImplementedError, match=rf"^polyops\.{op} .*input"):
        fn(z, z)


# ---------------------------------------------------------------------------
# cast

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
@pytest.mark.parametrize("shape", SHAPES, ids=_shape_id)
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


# ---------------------------------------------------------------------------
# silu_and_mul / swiglu

SILU_SHAPES = [(1, 2), (2,), (3, 5, 14), (2, 8192), (0, 8), (4, 0)]
LARGE_DTYPES = [BF16, F32]  # the large shapes run for these only, to save time


def _with_large(shapes, large_shape):
    """(dtype, shape) params: every small shape for every dtype, the large one for a few."""
    params = [
        pytest.param(dtype, shape, id=f"{dtype_id(dtype)}-{_shape_id(shape)}")
        for dtype in FLOAT_DTYPES
        for shape in shapes
    ]
    return params + [
        parallel_param(dtype, large_shape, id=f"{dtype_id(dtype)}-{_shape_id(large_shape)}")
        for dtype in LARGE_DTYPES
    ]


@pytest.mark.parametrize("slot", slot_params("silu_and_mul"))
@pytest.mark.parametrize("dtype,shape", _with_large(SILU_SHAPES, (9, 8200)))
def test_silu_and_mul_parity(dtype, shape, slot, gen):
    x = make_tensor(shape, dtype, gen, scale=3.0)
    result = polyops.silu_and_mul(x, implementation_index=slot)
    assert result.shape == (*shape[:-1], shape[-1] // 2) and result.is_contiguous()
    assert_close(result, silu_and_mul_reference(x), dtype)


@pytest.mark.parametrize("slot", slot_params("silu_and_mul"))
@pytest.mark.parametrize("in_kind", list(NONCONTIG_LAYOUTS))
@pytest.mark.parametrize("out_kind", ["contiguous", "transposed", "step"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_silu_and_mul_strided(dtype, in_kind, out_kind, slot, gen):
    x = NONCONTIG_LAYOUTS[in_kind](make_tensor((5, 6, 40), dtype, gen))
    out = empty_like_strided((5, 6, 20), dtype, out_kind)
    result = polyops.silu_and_mul(x, out=out, implementation_index=slot)
    assert result is out
    assert_close(out, silu_and_mul_reference(x), dtype)


@pytest.mark.parametrize("slot", slot_params("silu_and_mul"))
def test_silu_and_mul_row_slices_of_wider_buffer(slot, gen):
    # vLLM-style: the [tokens, 2*d] input is a column slice of a wider projection.
    big = make_tensor((7, 300), F32, gen)
    x = big[:, 20:276]
    out = polyops.silu_and_mul(x, implementation_index=slot)
    assert_close(out, silu_and_mul_reference(x), F32)


@pytest.mark.parametrize("slot", slot_params("silu_and_mul"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_silu_and_mul_saturation(dtype, slot):
    gate = torch.tensor([-100.0, -20.0, 0.0, 20.0, 60.0, -0.5], dtype=F64)
    up = torch.tensor([1.0, 2.0, 3.0, 0.5, 1.0, -4.0], dtype=F64)
    x = torch.cat([gate, up]).to(dtype)
    result = polyops.silu_and_mul(x, implementation_index=slot)
    assert torch.isfinite(result).all()
    assert_close(result, silu_and_mul_reference(x), dtype)


def test_silu_and_mul_bad_arguments():
    with pytest.raises(ValueError, match=r"^polyops\.silu_and_mul: the last dim of input"):
        polyops.silu_and_mul(torch.ones(4, 7))
    with pytest.raises(ValueError, match=r"^polyops\.silu_and_mul: out must have shape \[4, 3\]"):
        polyops.silu_and_mul(torch.ones(4, 6), out=torch.empty(4, 6))
    with pytest.raises(ValueError, match=r"^polyops\.silu_and_mul: out must have the dtype"):
        polyops.silu_and_mul(torch.ones(4, 6), out=torch.empty(4, 3, dtype=F16))
    with pytest.raises(ValueError, match=r"^polyops\.silu_and_mul: input must have at least 1"):
        polyops.silu_and_mul(torch.tensor(1.0))
    with pytest.raises(NotImplementedError, match=r"^polyops\.silu_and_mul .*input.*float64"):
        polyops.silu_and_mul(torch.ones(4, 6, dtype=F64))
    with pytest.raises(NotImplementedError, match=r"^polyops\.silu_and_mul .*input.*int32"):
        polyops.silu_and_mul(torch.ones(4, 6, dtype=I32))


@pytest.mark.parametrize("slot", slot_params("swiglu"))
@pytest.mark.parametrize("dtype,shape", _with_large(SHAPES, LARGE_SHAPE))
def test_swiglu_parity(dtype, shape, slot, gen):
    x = make_tensor(shape, dtype, gen, scale=2.0)
    gate = make_tensor(shape, dtype, gen, scale=3.0)
    result = polyops.swiglu(x, gate, implementation_index=slot)
    assert result.shape == x.shape and result.dtype == dtype and result.is_contiguous()
    assert_close(result, swiglu_reference(x, gate), dtype)


@pytest.mark.parametrize("slot", slot_params("swiglu"))
@pytest.mark.parametrize(
    "layouts",
    list(itertools.product(NONCONTIG_LAYOUTS, repeat=3)),
    ids=lambda t: "in_{}-gate_{}-out_{}".format(*t),
)
@pytest.mark.parametrize("dtype", [F16, F32], ids=dtype_id)
def test_swiglu_strided(dtype, layouts, slot, gen):
    in_kind, gate_kind, out_kind = layouts
    x = NONCONTIG_LAYOUTS[in_kind](make_tensor((4, 9, 33), dtype, gen))
    gate = NONCONTIG_LAYOUTS[gate_kind](make_tensor((4, 9, 33), dtype, gen))
    out = empty_like_strided((4, 9, 33), dtype, out_kind)
    assert polyops.swiglu(x, gate, out=out, implementation_index=slot) is out
    assert_close(out, swiglu_reference(x, gate), dtype)


@pytest.mark.parametrize("slot", slot_params("swiglu"))
def test_swiglu_in_place(slot, gen):
    x = make_tensor((16, 257), BF16, gen)
    gate = make_tensor((16, 257), BF16, gen)
    original = x.clone()
    assert polyops.swiglu(x, gate, out=x, implementation_index=slot) is x
    assert_close(x, swiglu_reference(original, gate), BF16)


def test_swiglu_bad_arguments():
    x = torch.ones(4, 6)
    with pytest.raises(ValueError, match=r"^polyops\.swiglu: gate must have the shape of input"):
        polyops.swiglu(x, torch.ones(4, 5))
    with pytest.raises(ValueError, match=r"^polyops\.swiglu: gate must have the dtype of input"):
        polyops.swiglu(x, torch.ones(4, 6, dtype=BF16))
    with pytest.raises(ValueError, match=r"^polyops\.swiglu: out must have the shape of input"):
        polyops.swiglu(x, x, out=torch.empty(4, 3))
    with pytest.raises(NotImplementedError, match=r"^polyops\.swiglu .*input.*float64"):
        polyops.swiglu(x.double(), x.double())
