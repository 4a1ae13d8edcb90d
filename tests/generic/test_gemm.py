"""matmul, gemm and linear against float64 references written from the math.

Tolerance: the float32 accumulation error of a length-k dot product grows
like sqrt(k) ulps of the terms' magnitudes, so results are compared with
rtol/atol scaled by sqrt(k) on top of the final rounding to the dtype
(float16/bfloat16 results are rounded once from float32).

Also the argument checks of the three ops. The CPU's own kernels and the
POLYOPS_CPU_GEMM override: test_gemm_own_kernels.py.
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing.references import gemm_reference, linear_reference
from polyops.testing.references import matmul_reference as ref_mm
from tests.conftest import (
    BF16,
    F16,
    F32,
    FLOAT_DTYPES,
    dtype_id,
    make_tensor,
    parallel_param,
    slot_params,
    transposed,
)
from tests.generic._gemm_cases import assert_product_close, column_major, mag_mm

# ---------------------------------------------------------------------------
# matmul

MATMUL_SHAPES = [
    ((1, 1), (1, 1)),
    ((3, 5), (5, 7)),
    ((17, 33), (33, 9)),
    ((64, 128), (128, 48)),
    ((4, 3, 5), (4, 5, 7)),
    ((2, 16, 31), (2, 31, 8)),
    ((3, 6, 5), (5, 4)),  # a 2-D other shared by the batch
    ((6, 5), (3, 5, 4)),  # a 2-D input shared by the batch
    ((1, 6, 5), (3, 5, 4)),  # a batch of one shared
    ((0, 5), (5, 3)),
    ((4, 0), (0, 3)),
    ((4, 5), (5, 0)),
    ((0, 4, 5), (0, 5, 3)),
    parallel_param(((64, 40, 24), (64, 24, 36)), id="batched-parallel"),
    parallel_param(((300, 257), (257, 129)), id="large-parallel"),
]


@pytest.mark.parametrize("slot", slot_params("matmul"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes, dtype, slot, gen):
    a = make_tensor(shapes[0], dtype, gen)
    b = make_tensor(shapes[1], dtype, gen)
    out = polyops.matmul(a, b, implementation_index=slot)
    assert out.is_contiguous()
    assert_product_close(out, ref_mm(a, b), dtype, a.shape[-1], mag_mm(a, b))


@pytest.mark.parametrize("slot", slot_params("matmul"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["a_t", "b_t", "both_t", "out_t", "row_padded", "batch_step"])
def test_matmul_layouts(layout, dtype, slot, gen):
    a = make_tensor((3, 9, 13), dtype, gen)
    b = make_tensor((3, 13, 6), dtype, gen)
    out = torch.full((3, 9, 6), 5.0, dtype=dtype)
    if layout in ("a_t", "both_t"):
        a = column_major(a)
    if layout in ("b_t", "both_t"):
        b = column_major(b)
    if layout == "out_t":
        out = column_major(out)
    if layout == "row_padded":
        a = torch.zeros(3, 9, 20, dtype=dtype)[..., :13].copy_(a)
        out = torch.zeros(3, 9, 11, dtype=dtype)[..., :6]
    if layout == "batch_step":  # every other matrix of a wider batch
        a = torch.zeros(6, 9, 13, dtype=dtype)[::2].copy_(a)
        b = column_major(torch.zeros(6, 13, 6, dtype=dtype))[1::2].copy_(b)
    result = polyops.matmul(a, b, out=out, implementation_index=slot)
    assert result.data_ptr() == out.data_ptr()
    assert_product_close(out, ref_mm(a, b), dtype, 13, mag_mm(a, b))


def test_matmul_out_row_padding_untouched(gen):
    a, b = make_tensor((5, 7), F32, gen), make_tensor((7, 3), F32, gen)
    base = torch.full((5, 8), 777.0)
    polyops.matmul(a, b, out=base[:, :3])
    assert torch.all(base[:, 3:] == 777.0)
    assert_product_close(base[:, :3], ref_mm(a, b), F32, 7, mag_mm(a, b))


# torch.matmul's 1-D operands and broadcast N-D batches.
TORCH_MATMUL_SHAPES = [
    ((7,), (7,)),  # dot: a 0-d result
    ((7,), (7, 5)),
    ((6, 7), (7,)),
    ((4, 6, 7), (7,)),
    ((7,), (3, 7, 5)),
    ((2, 3, 6, 7), (2, 3, 7, 5)),  # contiguous batch dims: one strided batch
    ((2, 3, 6, 7), (7, 5)),  # shared 2-D other
    ((6, 7), (2, 3, 7, 5)),  # shared 2-D input
    ((2, 1, 6, 7), (3, 7, 5)),  # [2, 1] against [3]: an outer loop
    ((1, 3, 6, 7), (2, 1, 7, 5)),
    ((2, 1, 2, 6, 7), (1, 3, 1, 7, 5)),  # two outer dims
    ((1, 1, 6, 7), (1, 7, 5)),  # batches of one
    ((2, 0, 6, 7), (1, 7, 5)),  # an empty batch
    ((0,), (0, 5)),  # k = 0: zeros
    ((2, 3, 6, 0), (3, 0, 5)),
]


@pytest.mark.parametrize("slot", slot_params("matmul"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("shapes", TORCH_MATMUL_SHAPES, ids=str)
def test_matmul_torch_semantics(shapes, dtype, slot, gen, api):
    a = make_tensor(shapes[0], dtype, gen)
    b = make_tensor(shapes[1], dtype, gen)
    out = api.matmul(a, b, implementation_index=slot)
    assert out.shape == torch.matmul(a.float(), b.float()).shape and out.is_contiguous()
    assert_product_close(out, ref_mm(a, b), dtype, a.shape[-1], mag_mm(a, b))
    # A given output, column-major where it has two dims.
    given = torch.full(out.shape, 5.0, dtype=dtype)
    if given.dim() >= 2:
        given = column_major(given)
    api.matmul(a, b, out=given, implementation_index=slot)
    assert_product_close(given, ref_mm(a, b), dtype, a.shape[-1], mag_mm(a, b))


@pytest.mark.parametrize("slot", slot_params("matmul"))
@pytest.mark.parametrize("dtype", [F32, BF16], ids=dtype_id)
def test_matmul_batch_layouts(dtype, slot, gen):
    """Batch dims in any strides: permuted (they do not merge), sliced, expanded (stride
    0, shared), vectors with a step; outputs with permuted batch dims."""
    a = make_tensor((3, 2, 6, 7), dtype, gen)
    b = make_tensor((2, 3, 7, 5), dtype, gen)
    cases = [
        (a.permute(1, 0, 2, 3), b),  # batch strides out of order
        (a[:, ::2], b[:1]),  # sliced batch, broadcast against [1, 3]
        (a[:1].expand(3, 2, 6, 7), b.permute(1, 0, 2, 3)),  # expanded input
        (a[0, 0], make_tensor((14,), dtype, gen)[::2]),  # matrix @ stepped vector
        (make_tensor((15,), dtype, gen)[1::2], column_major(b[0]).unsqueeze(0)),
    ]
    for x, y in cases:
        expected = ref_mm(x, y)
        out = polyops.matmul(x, y, implementation_index=slot)
        assert_product_close(out, expected, dtype, x.shape[-1], mag_mm(x, y))
        if expected.dim() >= 3:
            # out's batch dims permuted: they merge with neither input's.
            order = [1, 0, *range(2, expected.dim())]
            given = torch.zeros(expected.permute(order).shape, dtype=dtype).permute(order)
            polyops.matmul(x, y, out=given, implementation_index=slot)
            assert_product_close(given, expected, dtype, x.shape[-1], mag_mm(x, y))


@pytest.mark.parallel
@pytest.mark.parametrize("slot", slot_params("matmul"))
def test_matmul_outer_batches_parallel(slot, gen):
    # Outer batch indices each run a product large enough for the threaded kernels.
    a = make_tensor((2, 1, 64, 96), F32, gen)
    b = make_tensor((3, 96, 80), F32, gen)
    out = polyops.matmul(a, b, implementation_index=slot)
    assert out.shape == (2, 3, 64, 80)
    assert_product_close(out, ref_mm(a, b), F32, 96, mag_mm(a, b))


# ---------------------------------------------------------------------------
# gemm


@pytest.mark.parametrize("slot", slot_params("gemm"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize("batch", [None, 3])
def test_gemm_trans(batch, trans_b, trans_a, dtype, slot, gen):
    m, n, k = 7, 5, 11
    lead = () if batch is None else (batch,)
    a = make_tensor(lead + ((k, m) if trans_a else (m, k)), dtype, gen)
    b = make_tensor(lead + ((n, k) if trans_b else (k, n)), dtype, gen)
    c = make_tensor(lead + (m, n), dtype, gen)
    out = polyops.gemm(
        a, b, c, alpha=0.5, beta=-2.0, trans_a=trans_a, trans_b=trans_b, implementation_index=slot
    )
    expected = gemm_reference(a, b, c, alpha=0.5, beta=-2.0, trans_a=trans_a, trans_b=trans_b)
    op_a = a.double().mT if trans_a else a.double()
    op_b = b.double().mT if trans_b else b.double()
    magnitude = 0.5 * (op_a.abs() @ op_b.abs()) + 2.0 * c.double().abs()
    assert_product_close(out, expected, dtype, k, magnitude)


@pytest.mark.parametrize("slot", slot_params("gemm"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("mode", ["no_c", "c", "c_beta0_nan", "alpha0_nan", "inplace", "bias_row"])
def test_gemm_alpha_beta(mode, dtype, slot, gen):
    a, b = make_tensor((6, 9), dtype, gen), make_tensor((9, 4), dtype, gen)
    c = make_tensor((6, 4), dtype, gen)
    product = ref_mm(a, b)
    if mode == "no_c":
        out = polyops.gemm(a, b, alpha=1.5, implementation_index=slot)
        expected = 1.5 * product
    elif mode == "c":
        out = polyops.gemm(a, b, c, alpha=2.0, beta=0.25, implementation_index=slot)
        expected = 2.0 * product + 0.25 * c.double()
    elif mode == "c_beta0_nan":  # BLAS: beta == 0 does not read c
        c = torch.full_like(c, float("nan"))
        out = polyops.gemm(a, b, c, beta=0.0, implementation_index=slot)
        expected = product
    elif mode == "alpha0_nan":  # BLAS: alpha == 0 does not read a and b
        a = torch.full_like(a, float("nan"))
        out = polyops.gemm(a, b, c, alpha=0.0, beta=3.0, implementation_index=slot)
        expected = 3.0 * c.double()
    elif mode == "inplace":
        c_before = c.double()
        out = polyops.gemm(a, b, c, alpha=1.0, beta=1.0, out=c, implementation_index=slot)
        assert out.data_ptr() == c.data_ptr()
        expected = product + c_before
    else:  # a [n] c broadcast over the rows, like a bias
        row = make_tensor((4,), dtype, gen)
        out = polyops.gemm(a, b, row, beta=1.0, implementation_index=slot)
        expected = product + row.double()
    magnitude = 2.0 * mag_mm(a.nan_to_num(), b) + 3.0 * c.double().nan_to_num().abs()
    assert_product_close(out, expected, dtype, 9, magnitude)


@pytest.mark.parametrize("slot", slot_params("gemm"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_gemm_k0_is_beta_c(dtype, slot, gen):
    a, b = torch.empty(4, 0, dtype=dtype), torch.empty(0, 3, dtype=dtype)
    c = make_tensor((4, 3), dtype, gen)
    out = polyops.gemm(a, b, c, beta=2.0, implementation_index=slot)
    assert_product_close(out, 2.0 * c.double(), dtype, 0, 2.0 * c.double().abs())
    filled = torch.full((4, 3), 9.0, dtype=dtype)
    polyops.gemm(a, b, out=filled, implementation_index=slot)
    assert torch.all(filled == 0)


@pytest.mark.parametrize("slot", slot_params("gemm"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_gemm_batched_c_layouts(dtype, slot, gen):
    a = column_major(make_tensor((2, 8, 5), dtype, gen))
    b = transposed(make_tensor((5, 6), dtype, gen))
    c = transposed(make_tensor((2, 8, 6), dtype, gen))  # any strides, batch innermost
    out = column_major(torch.zeros(2, 8, 6, dtype=dtype))
    polyops.gemm(a, b, c, alpha=-1.0, beta=0.5, out=out, implementation_index=slot)
    expected = gemm_reference(a, b, c, alpha=-1.0, beta=0.5)
    assert_product_close(out, expected, dtype, 5, mag_mm(a, b) + 0.5 * c.double().abs())


# ---------------------------------------------------------------------------
# linear


@pytest.mark.parametrize("slot", slot_params("linear"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("bias", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize(
    "shape", [(1,), (13,), (5, 13), (2, 3, 13), (0, 13), (2, 0, 13), (2, 2, 3, 13)], ids=str
)
def test_linear(shape, bias, dtype, slot, gen):
    x = make_tensor(shape, dtype, gen)
    w = make_tensor((7, shape[-1]), dtype, gen)
    b = make_tensor((7,), dtype, gen) if bias else None
    out = polyops.linear(x, w, b, implementation_index=slot)
    expected = linear_reference(x, w, b)
    magnitude = mag_mm(x, w.T) + (b.double().abs() if bias else 0)
    assert_product_close(out, expected, dtype, shape[-1], magnitude)


@pytest.mark.parametrize("slot", slot_params("linear"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["sliced_rows", "weight_t", "input_t", "bias_step"])
def test_linear_layouts(layout, dtype, slot, gen):
    x = make_tensor((2, 6, 10), dtype, gen)
    w = make_tensor((4, 10), dtype, gen)
    b = make_tensor((4,), dtype, gen)
    if layout == "sliced_rows":  # leading dims that do not merge: (batch, rows)
        x = x[:, :5]
    if layout == "weight_t":
        w = transposed(w)
    if layout == "input_t":
        x = x.mT.contiguous().mT
    if layout == "bias_step":
        b = torch.zeros(8, dtype=dtype)[::2].copy_(b)
    out = polyops.linear(x, w, b, implementation_index=slot)
    expected = linear_reference(x, w, b)
    assert_product_close(out, expected, dtype, 10, mag_mm(x, w.T) + b.double().abs())


def test_linear_out_given(gen):
    x, w = make_tensor((3, 4, 8), F32, gen), make_tensor((5, 8), F32, gen)
    out = torch.empty(3, 4, 5)
    assert polyops.linear(x, w, out=out).data_ptr() == out.data_ptr()
    assert_product_close(out, linear_reference(x, w), F32, 8, mag_mm(x, w.T))


# ---------------------------------------------------------------------------
# Bad inputs


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: polyops.matmul(torch.ones(3, 4), torch.ones(5, 2)),
            ValueError,
            r"polyops\.matmul: other must have as many rows",
        ),
        (
            lambda: polyops.matmul(torch.ones(3, 4), torch.ones(4, 2, dtype=F16)),
            ValueError,
            r"polyops\.matmul: other must have the dtype of input",
        ),
        (
            lambda: polyops.matmul(torch.ones(2, 3, 4), torch.ones(3, 4, 2)),
            ValueError,
            r"polyops\.matmul: the batch dims of input \[2\] and other \[3\] do not broadcast",
        ),
        (
            lambda: polyops.matmul(torch.ones(5, 2, 3, 4), torch.ones(3, 2, 4, 2)),
            ValueError,
            r"polyops\.matmul: the batch dims of input \[5, 2\] and other \[3, 2\]",
        ),
        (
            lambda: polyops.matmul(torch.ones(4), torch.ones(5)),
            ValueError,
            r"polyops\.matmul: other must have as many elements as input has elements \(4\)",
        ),
        (
            lambda: polyops.matmul(torch.ones(3, 4), torch.ones(5)),
            ValueError,
            r"polyops\.matmul: other must have as many elements as input has columns",
        ),
        (
            lambda: polyops.matmul(torch.tensor(2.0), torch.ones(2)),
            ValueError,
            r"polyops\.matmul: input and other must have at least 1 dim each, got shapes \[\]",
        ),
        (
            lambda: polyops.matmul(torch.ones(4), torch.ones(4), out=torch.ones(1)),
            ValueError,
            r"polyops\.matmul: out must have shape \[\], got \[1\]",
        ),
        (
            lambda: polyops.matmul(torch.ones(2, 1, 3, 4), torch.ones(3, 4, 2)),
            None,
            None,
        ),
        (
            lambda: polyops.matmul(torch.ones(3, 8)[:, ::2], torch.ones(4, 2)),
            ValueError,
            r"polyops\.matmul: input must have unit stride in one of its last two dims",
        ),
        (
            lambda: polyops.matmul(torch.ones(3, 4), torch.ones(4, 2), out=torch.ones(3, 3)),
            ValueError,
            r"polyops\.matmul: out must have shape \[3, 2\]",
        ),
        (
            lambda: polyops.matmul(torch.ones(3, 4), torch.ones(4, 2), out=torch.ones(2, 3).T),
            None,
            None,
        ),
        (
            lambda: polyops.matmul(torch.ones(4).expand(3, 4), torch.ones(4)),
            ValueError,
            r"polyops\.matmul: input must have unit stride in one of its last two dims",
        ),
        (
            lambda: polyops.matmul(torch.ones(3, 4, dtype=torch.float64), torch.ones(4, 2)),
            NotImplementedError,
            r"polyops\.matmul is not supported for input of dtype float64",
        ),
        (
            lambda: polyops.gemm(torch.ones(3, 4), torch.ones(4, 2), beta=1.0),
            ValueError,
            r"polyops\.gemm: beta must be 0 when c is None",
        ),
        (
            lambda: polyops.gemm(torch.ones(3, 4), torch.ones(4, 2), torch.ones(3, 3), beta=1.0),
            ValueError,
            r"polyops\.gemm: c must have the result's shape \[3, 2\]",
        ),
        (
            lambda: polyops.gemm(torch.ones(3, 4), torch.ones(4, 2), alpha=float("inf")),
            ValueError,
            r"polyops\.gemm: alpha must be finite",
        ),
        (
            lambda: polyops.gemm(torch.ones(3, 4), torch.ones(3, 2), trans_a=False),
            ValueError,
            r"polyops\.gemm: b must have as many rows",
        ),
        (
            lambda: polyops.matmul(torch.ones(3, 4), torch.ones(1, 2).expand(4, 2)),
            ValueError,
            r"polyops\.matmul: other must have unit stride in one of its last two dims",
        ),
        (
            lambda: polyops.linear(torch.ones(3, 4), torch.ones(5, 4), torch.ones(4)),
            ValueError,
            r"polyops\.linear: bias must have shape \[5\]",
        ),
        (
            lambda: polyops.linear(torch.ones(3, 4), torch.ones(5, 3)),
            ValueError,
            r"polyops\.linear: weight must have shape \[out_features, 4\]",
        ),
        (
            lambda: polyops.linear(torch.ones(3, 4), torch.ones(5, 4, dtype=BF16)),
            ValueError,
            r"polyops\.linear: weight must have the dtype of input",
        ),
        (
            lambda: polyops.linear(torch.ones(3, 8)[:, ::2], torch.ones(5, 4)),
            ValueError,
            r"polyops\.linear: input must have unit stride in one of its last two dims",
        ),
        (
            lambda: polyops.linear(
                torch.ones(4, 6, 5, 4)[:, :2, :3], torch.ones(5, 4), out=torch.ones(4, 2, 3, 5)
            ),
            NotImplementedError,
            r"polyops\.linear is not supported for input of shape \[4, 2, 3, 4\]",
        ),
    ],
)
def test_bad_inputs(call, error, message):
    if error is None:  # a layout that looks odd but is accepted
        call()
        return
    with pytest.raises(error, match=message):
        call()


def test_out_overlap_rejected():
    a = torch.ones(4, 4)
    with pytest.raises(ValueError, match=r"polyops\.matmul: out and input are the same memory"):
        polyops.matmul(a, torch.ones(4, 4), out=a)
    c = torch.ones(4, 4)
    with pytest.raises(ValueError, match=r"polyops\.gemm: out and c overlap in memory"):
        polyops.gemm(torch.ones(4, 4), torch.ones(4, 4), c, beta=1.0, out=c.T)
