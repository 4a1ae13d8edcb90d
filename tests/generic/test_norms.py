"""rms_norm and add_rms_norm against float64 references written from the math."""

from __future__ import annotations

import math

import pytest
import torch

import polyops
from polyops.testing.references import add_rms_norm_reference, rms_norm_reference
from tests.conftest import (
    BF16,
    F16,
    F32,
    F64,
    FLOAT_DTYPES,
    I32,
    assert_close,
    assert_equal,
    dtype_id,
    make_tensor,
    parallel_param,
    row_strided,
    sentinel,
    slot_params,
    step_sliced,
)

# (2, 16500): rows longer than the kernels stage whole (16384 floats) take a blocked path.
NORM_SHAPES = [
    pytest.param(shape, id="x".join(map(str, shape)))
    for shape in [(1, 1), (1, 8), (3, 5, 7), (2, 4096), (0, 64), (64,), (2, 0)]
] + [parallel_param((17, 4095), id="17x4095"), parallel_param((2, 16500), id="2x16500")]


def _padding(view: torch.Tensor, hidden: int) -> torch.Tensor:
    """The elements of a row_strided view's buffer past each row's first `hidden`."""
    rows = view.shape[:-1].numel()
    stride = view.stride(-2)
    base = view.as_strided((rows, stride), (stride, 1), view.storage_offset())
    return base[:, hidden:]


# ---------------------------------------------------------------------------
# rms_norm


@pytest.mark.parametrize("slot", slot_params("rms_norm"))
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_rms_norm_parity(dtype, shape, slot, gen):
    x = make_tensor(shape, dtype, gen, scale=2.0)
    weight = make_tensor(shape[-1:], dtype, gen)
    result = polyops.rms_norm(x, weight, implementation_index=slot)
    assert result.shape == x.shape and result.is_contiguous()
    assert_close(result, rms_norm_reference(x, weight, 1e-6), dtype)
    explicit = polyops.rms_norm(x, weight, 1e-6, out=torch.empty_like(x), implementation_index=slot)
    assert_equal(explicit, result)


@pytest.mark.parametrize("slot", slot_params("rms_norm"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_rms_norm_new_data_same_shape(dtype, slot, gen):
    # The cached instance (keyed on shapes, not data) must serve fresh data.
    weight = make_tensor((96,), dtype, gen)
    for scale in (1.0, 30.0, 0.01):
        x = make_tensor((6, 96), dtype, gen, scale=scale)
        result = polyops.rms_norm(x, weight, implementation_index=slot)
        assert_close(result, rms_norm_reference(x, weight, 1e-6), dtype)


@pytest.mark.parametrize("slot", slot_params("rms_norm"))
@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_rms_norm_accumulates_in_float32(dtype, slot, gen):
    # Squares of ~300 summed over 4096 columns far exceed float16's range
    # (65504): only a float32 accumulator gets this right.
    x = make_tensor((3, 4096), dtype, gen, scale=300.0)
    weight = make_tensor((4096,), dtype, gen)
    result = polyops.rms_norm(x, weight, implementation_index=slot)
    assert torch.isfinite(result).all()
    assert_close(result, rms_norm_reference(x, weight, 1e-6), dtype)


@pytest.mark.parametrize("slot", slot_params("rms_norm"))
@pytest.mark.parametrize("hidden", [600, parallel_param(16400)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_rms_norm_row_strided_input_and_output(dtype, hidden, slot, gen):
    weight = make_tensor((hidden,), dtype, gen)
    # A slice big[:, :hidden] of a wider buffer.
    x = row_strided(make_tensor((9, hidden), dtype, gen), extra=40)
    assert x.stride() == (hidden + 40, 1)
    assert_close(
        polyops.rms_norm(x, weight, implementation_index=slot),
        rms_norm_reference(x, weight, 1e-6),
        dtype,
    )
    # Every other row, and an output whose rows are padded.
    rows = make_tensor((18, hidden), dtype, gen)[::2]
    out = row_strided(torch.zeros(9, hidden, dtype=dtype), extra=5)
    result = polyops.rms_norm(rows, weight, out=out, implementation_index=slot)
    assert result is out
    assert_close(out, rms_norm_reference(rows, weight, 1e-6), dtype)
    assert torch.all(_padding(out, hidden) == sentinel(dtype)), "wrote past a row"
    # Permuted leading dims (stride-1 last dim).
    base = make_tensor((5, 4, hidden), dtype, gen)
    permuted = base.permute(1, 0, 2)
    assert not permuted.is_contiguous()
    assert_close(
        polyops.rms_norm(permuted, weight, implementation_index=slot),
        rms_norm_reference(permuted, weight, 1e-6),
        dtype,
    )


@pytest.mark.parametrize("slot", slot_params("rms_norm"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_rms_norm_eps_is_part_of_the_result(dtype, slot, gen):
    # Magnitudes ~1e-3: mean(x**2) ~1e-6, so eps=1e-6 and eps=1e-5 differ a lot.
    x = make_tensor((5, 64), dtype, gen, scale=1e-3)
    weight = make_tensor((64,), dtype, gen)
    small = polyops.rms_norm(x, weight, 1e-6, implementation_index=slot)
    large = polyops.rms_norm(x, weight, 1e-5, implementation_index=slot)
    assert_close(small, rms_norm_reference(x, weight, 1e-6), dtype)
    assert_close(large, rms_norm_reference(x, weight, 1e-5), dtype)
    assert (small.double() - large.double()).abs().max() > 0.1
    # And back: the eps=1e-6 instance still gives its own result.
    again = polyops.rms_norm(x, weight, eps=1e-6, implementation_index=slot)
    assert_equal(again, small)
    zero = polyops.rms_norm(x, weight, 0.0, implementation_index=slot)
    assert_close(zero, rms_norm_reference(x, weight, 0.0), dtype)


@pytest.mark.parametrize("slot", slot_params("rms_norm"))
def test_rms_norm_zero_rows_with_eps(slot):
    x = torch.zeros(2, 16)
    weight = torch.ones(16)
    assert_equal(polyops.rms_norm(x, weight, implementation_index=slot), torch.zeros(2, 16))


@pytest.mark.parallel
def test_rms_norm_slots_agree(gen):
    x = make_tensor((33, 1000), F32, gen)
    weight = make_tensor((1000,), F32, gen)
    results = [
        polyops.rms_norm(x, weight, implementation_index=slot)
        for slot in polyops.implementations("rms_norm")
    ]
    for result in results[1:]:
        torch.testing.assert_close(result, results[0], rtol=1e-5, atol=1e-6)


def test_rms_norm_bad_arguments():
    x = torch.ones(4, 64)
    w = torch.ones(64)
    last_dim = "must be contiguous in its last dim"
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: weight must have shape \[64\]"):
        polyops.rms_norm(x, torch.ones(63))
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: weight must have shape \[64\]"):
        polyops.rms_norm(x, torch.ones(1, 64))
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: weight must have the dtype of in"):
        polyops.rms_norm(x, w.to(F16))
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: weight must be contiguous"):
        polyops.rms_norm(x, torch.ones(128)[::2])
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: input " + last_dim):
        polyops.rms_norm(torch.ones(64, 4).t(), w)
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: input " + last_dim):
        polyops.rms_norm(step_sliced(x), w)
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: out " + last_dim):
        polyops.rms_norm(x, w, out=torch.empty(64, 4).t())
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: out must have the shape of input"):
        polyops.rms_norm(x, w, out=torch.empty(4, 32))
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: out must have the dtype of input"):
        polyops.rms_norm(x, w, out=torch.empty(4, 64, dtype=BF16))
    for eps in (-1e-6, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"^polyops\.rms_norm: eps must be finite and >= 0"):
            polyops.rms_norm(x, w, eps)
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: input must have at least 1 dim"):
        polyops.rms_norm(torch.tensor(1.0), torch.ones(1))
    with pytest.raises(NotImplementedError, match=r"^polyops\.rms_norm .*input.*float64"):
        polyops.rms_norm(x.double(), w.double())
    with pytest.raises(NotImplementedError, match=r"^polyops\.rms_norm .*input.*int32"):
        polyops.rms_norm(x.to(I32), w.to(I32))


@pytest.mark.skipif(
    "cuda" not in polyops.devices(), reason="mixing devices needs a CUDA build and GPU"
)
def test_rms_norm_device_mismatch():
    x = torch.ones(4, 64, device="cuda")
    with pytest.raises(ValueError, match=r"^polyops\.rms_norm: weight is on cpu:0"):
        polyops.rms_norm(x, torch.ones(64))


# ---------------------------------------------------------------------------
# add_rms_norm


def check_add_rms_norm(y, x, x1, x2, gamma, eps, dtype):
    y_expected, x_expected = add_rms_norm_reference(x1, x2, gamma, eps)
    assert_equal(x, x_expected.to(dtype), "x = x1 + x2 rounded to the dtype")
    assert_close(y, y_expected, dtype)


@pytest.mark.parametrize("slot", slot_params("add_rms_norm"))
@pytest.mark.parametrize("shape", NORM_SHAPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_add_rms_norm_parity(dtype, shape, slot, gen):
    x1 = make_tensor(shape, dtype, gen)
    x2 = make_tensor(shape, dtype, gen, scale=0.5)
    gamma = make_tensor(shape[-1:], dtype, gen)
    x1_before, x2_before = x1.clone(), x2.clone()
    y, x = polyops.add_rms_norm(x1, x2, gamma, implementation_index=slot)
    assert y.shape == x.shape == x1.shape and y.is_contiguous() and x.is_contiguous()
    check_add_rms_norm(y, x, x1_before, x2_before, gamma, 1e-6, dtype)
    assert_equal(x1, x1_before, "x1 modified")
    assert_equal(x2, x2_before, "x2 modified")


@pytest.mark.parametrize("slot", slot_params("add_rms_norm"))
@pytest.mark.parametrize("hidden", [13, 1500, parallel_param(16384), parallel_param(16500)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_add_rms_norm_y_equals_rms_norm_of_x(dtype, hidden, slot, gen):
    # The documented contract: y is rms_norm(x_out) bit for bit (same kind of slot).
    name = polyops.implementations("add_rms_norm")[slot]
    twin = {n: s for s, n in polyops.implementations("rms_norm").items()}.get(name)
    assert twin is not None, f"rms_norm has no '{name}' slot to compare with"
    x1 = make_tensor((5, hidden), dtype, gen)
    x2 = make_tensor((5, hidden), dtype, gen)
    gamma = make_tensor((hidden,), dtype, gen)
    y, x = polyops.add_rms_norm(x1, x2, gamma, 1e-5, implementation_index=slot)
    assert_equal(y, polyops.rms_norm(x, gamma, 1e-5, implementation_index=twin))


@pytest.mark.parametrize("slot", slot_params("add_rms_norm"))
@pytest.mark.parametrize("hidden", [700, parallel_param(16400)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_add_rms_norm_in_place_residual(dtype, hidden, slot, gen):
    # vLLM: the residual stream x1 is updated in place with x1 + x2.
    x1 = make_tensor((5, hidden), dtype, gen)
    x2 = make_tensor((5, hidden), dtype, gen)
    gamma = make_tensor((hidden,), dtype, gen)
    original = x1.clone()
    y, x = polyops.add_rms_norm(x1, x2, gamma, x_out=x1, implementation_index=slot)
    assert x is x1
    check_add_rms_norm(y, x1, original, x2, gamma, 1e-6, dtype)
    # x_out aliasing x2 instead.
    x1 = make_tensor((5, hidden), dtype, gen)
    original2 = x2.clone()
    y, x = polyops.add_rms_norm(x1, x2, gamma, x_out=x2, implementation_index=slot)
    assert x is x2
    check_add_rms_norm(y, x2, x1, original2, gamma, 1e-6, dtype)


@pytest.mark.parametrize("slot", slot_params("add_rms_norm"))
@pytest.mark.parametrize("hidden", [530, parallel_param(16400)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_add_rms_norm_strided_rows_and_outputs(dtype, hidden, slot, gen):
    gamma = make_tensor((hidden,), dtype, gen)
    x1 = row_strided(make_tensor((6, hidden), dtype, gen), extra=7)
    x2 = make_tensor((12, hidden), dtype, gen)[::2]
    y_out = row_strided(torch.zeros(6, hidden, dtype=dtype), extra=3)
    x_out = make_tensor((6, 2, hidden), dtype, gen)[:, 1]
    y, x = polyops.add_rms_norm(
        x1, x2, gamma, 1e-5, y_out=y_out, x_out=x_out, implementation_index=slot
    )
    assert y is y_out and x is x_out
    check_add_rms_norm(y_out, x_out, x1, x2, gamma, 1e-5, dtype)
    assert torch.all(_padding(y_out, hidden) == sentinel(dtype)), "wrote past a row"


@pytest.mark.parametrize("slot", slot_params("add_rms_norm"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_add_rms_norm_eps_keyed_by_value(dtype, slot, gen):
    x1 = make_tensor((4, 128), dtype, gen, scale=1e-3)
    x2 = make_tensor((4, 128), dtype, gen, scale=1e-3)
    gamma = make_tensor((128,), dtype, gen)
    y_small, x_small = polyops.add_rms_norm(x1, x2, gamma, 1e-6, implementation_index=slot)
    y_large, x_large = polyops.add_rms_norm(x1, x2, gamma, eps=1e-5, implementation_index=slot)
    check_add_rms_norm(y_small, x_small, x1, x2, gamma, 1e-6, dtype)
    check_add_rms_norm(y_large, x_large, x1, x2, gamma, 1e-5, dtype)
    assert (y_small.double() - y_large.double()).abs().max() > 0.1


@pytest.mark.parametrize("slot", slot_params("add_rms_norm"))
@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_add_rms_norm_uses_the_rounded_sum(dtype, slot, gen):
    # x1 + x2 needs more bits than the dtype has: y must be normalized from the
    # rounded x, not from the exact sum.
    x1 = torch.full((2, 256), 1.0, dtype=dtype)
    tiny = 2.0**-12 if dtype == F16 else 2.0**-9  # below half an ulp at 1
    x2 = (make_tensor((2, 256), F64, gen).sign() * tiny).to(dtype)
    gamma = torch.ones(256, dtype=dtype)
    y, x = polyops.add_rms_norm(x1, x2, gamma, 0.0, implementation_index=slot)
    assert_equal(x, torch.ones(2, 256, dtype=dtype))
    assert_equal(y, torch.ones(2, 256, dtype=dtype))


def test_add_rms_norm_bad_arguments():
    x1 = torch.ones(4, 64)
    g = torch.ones(64)
    op = r"^polyops\.add_rms_norm: "
    with pytest.raises(ValueError, match=op + r"x2 must have the shape of x1"):
        polyops.add_rms_norm(x1, torch.ones(4, 63), g)
    with pytest.raises(ValueError, match=op + r"x2 must have the dtype of x1"):
        polyops.add_rms_norm(x1, x1.to(BF16), g)
    with pytest.raises(ValueError, match=op + r"gamma must have shape \[64\]"):
        polyops.add_rms_norm(x1, x1, torch.ones(32))
    with pytest.raises(ValueError, match=op + r"gamma must have the dtype of x1"):
        polyops.add_rms_norm(x1, x1, g.to(F16))
    with pytest.raises(ValueError, match=op + r"gamma must be contiguous"):
        polyops.add_rms_norm(x1, x1, torch.ones(128)[::2])
    with pytest.raises(ValueError, match=op + r"y_out must have the shape of x1"):
        polyops.add_rms_norm(x1, x1, g, y_out=torch.empty(4, 32))
    with pytest.raises(ValueError, match=op + r"x_out must have the shape of x1"):
        polyops.add_rms_norm(x1, x1, g, x_out=torch.empty(2, 64))
    with pytest.raises(ValueError, match=op + r"x_out must have the dtype of x1"):
        polyops.add_rms_norm(x1, x1, g, x_out=torch.empty(4, 64, dtype=F16))
    with pytest.raises(ValueError, match=op + r"x1 must be contiguous in its last dim"):
        polyops.add_rms_norm(torch.ones(64, 4).t(), x1, g)
    with pytest.raises(ValueError, match=op + r"x2 must be contiguous in its last dim"):
        polyops.add_rms_norm(x1, step_sliced(x1), g)
    with pytest.raises(ValueError, match=op + r"x_out must be contiguous in its last dim"):
        polyops.add_rms_norm(x1, x1, g, x_out=torch.empty(64, 4).t())
    with pytest.raises(ValueError, match=op + r"eps must be finite and >= 0"):
        polyops.add_rms_norm(x1, x1, g, -1.0)
    with pytest.raises(NotImplementedError, match=r"^polyops\.add_rms_norm .*x1.*float64"):
        polyops.add_rms_norm(x1.double(), x1.double(), g.double())
