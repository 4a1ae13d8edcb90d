"""add and mul against float64 references written from the math: shapes, broadcasting,
layouts, in-place forms, integer wraparound, special values and bad arguments.
add's alpha: test_add_alpha.py."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import polyops
from tests.conftest import (
    ARITH_DTYPES,
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
    expanded,
    make_tensor,
    parallel_param,
    sentinel,
    slot_params,
    step_gaps,
    step_sliced,
)
from tests.generic._elementwise_cases import (
    LARGE_SHAPE,
    SHAPES,
    binary_reference,
    check_binary,
    shape_id,
)

BINARY_OPS = ["add", "mul"]
BINARY_CASES = [
    pytest.param(op, slot, id=f"{op}-{p.id}")
    for op in BINARY_OPS
    for p in slot_params(op)
    for slot in p.values
]


def _operands(dtype, shape, gen):
    a = make_tensor(shape, dtype, gen)
    b = make_tensor(shape, dtype, gen)
    return a, b


# ---------------------------------------------------------------------------
# add / mul


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
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
    ids=shape_id,
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


@pytest.mark.parametrize("shapes", TWO_SIDED, ids=lambda s: f"{shape_id(s[0])}+{shape_id(s[1])}")
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


@pytest.mark.parametrize("op", BINARY_OPS)
def test_binary_unsupported_dtypes(op):
    fn = getattr(polyops, op)
    flags = torch.tensor([True, False])
    with pytest.raises(NotImplementedError, match=rf"^polyops\.{op} .*bool"):
        fn(flags, flags)
    z = torch.ones(2, dtype=torch.complex64)
    with pytest.raises(NotImplementedError, match=rf"^polyops\.{op} .*input"):
        fn(z, z)
