"""silu_and_mul and swiglu against float64 references written from the math: shapes,
strided and in-place forms, saturation and bad arguments."""

from __future__ import annotations

import itertools

import pytest
import torch

import polyops
from polyops.testing.references import silu_and_mul_reference, swiglu_reference
from tests.conftest import (
    BF16,
    F16,
    F32,
    F64,
    FLOAT_DTYPES,
    I32,
    NONCONTIG_LAYOUTS,
    assert_close,
    dtype_id,
    empty_like_strided,
    make_tensor,
    parallel_param,
    slot_params,
)
from tests.generic._elementwise_cases import LARGE_SHAPE, SHAPES, shape_id

SILU_SHAPES = [(1, 2), (2,), (3, 5, 14), (2, 8192), (0, 8), (4, 0)]
LARGE_DTYPES = [BF16, F32]  # the large shapes run for these only, to save time


def _with_large(shapes, large_shape):
    """(dtype, shape) params: every small shape for every dtype, the large one for a few."""
    params = [
        pytest.param(dtype, shape, id=f"{dtype_id(dtype)}-{shape_id(shape)}")
        for dtype in FLOAT_DTYPES
        for shape in shapes
    ]
    return params + [
        parallel_param(dtype, large_shape, id=f"{dtype_id(dtype)}-{shape_id(large_shape)}")
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
