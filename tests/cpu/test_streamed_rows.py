"""Ops whose outputs reach 16 MiB take the non-temporal store path on CPUs with
AVX-512 (rms_norm, add_rms_norm, causal_softmax: src/cpu/kernels/rows/avx512_rows.h; add and
mul: src/cpu/kernels/elementwise/binary_vector.h),
fenced once per thread instead of once per row, while the next row is fetched
ahead. Rows are independent, so the rows of such a call must equal, bit for bit,
the same rows computed in a call small enough to use ordinary stores, and match
float64. Misaligned outputs (the ordinary-store fallback of the streamed call)
are checked the same way. On CPUs without AVX-512 the same checks hold for the
other kernels.
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing.references import (
    FLOAT32_COMPUTE,
    add_rms_norm_reference,
    causal_softmax_reference,
    rms_norm_reference,
)

STREAMING_BYTES = 16 << 20
HIDDEN = 4096
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _rows_for(row_bytes: int) -> int:
    """A few rows more than the output that reaches the streaming threshold."""
    return STREAMING_BYTES // row_bytes + 3


def _misaligned(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An empty tensor whose data is 2 bytes (f16/bf16) or 4 bytes off 64-byte alignment."""
    numel = 1
    for d in shape:
        numel *= d
    return torch.empty(numel + 1, dtype=dtype)[1:].view(shape)


def _check(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype) -> None:
    tol = FLOAT32_COMPUTE[dtype]
    torch.testing.assert_close(
        actual.double(), expected, rtol=tol.rtol, atol=tol.atol, equal_nan=True
    )


def _sample(rows: int) -> list[int]:
    """Rows checked against float64: the ends, the thread split and a stride."""
    return sorted({0, 1, rows // 2 - 1, rows // 2, rows - 2, rows - 1, *range(5, rows, 97)})


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "misaligned"])
def test_rms_norm_streamed_rows(dtype: torch.dtype, aligned: bool) -> None:
    g = torch.Generator().manual_seed(11)
    rows = _rows_for(HIDDEN * dtype.itemsize)
    x = (torch.randn(rows, HIDDEN, generator=g) * 3).to(dtype)
    w = torch.randn(HIDDEN, generator=g).to(dtype)
    out = torch.empty_like(x) if aligned else _misaligned(x.shape, dtype)
    y = polyops.rms_norm(x, w, 1e-6, out=out)
    assert y.data_ptr() == out.data_ptr()
    for lo, hi in ((0, 64), (rows // 2 - 32, rows // 2 + 32), (rows - 64, rows)):
        assert torch.equal(y[lo:hi], polyops.rms_norm(x[lo:hi], w, 1e-6)), (lo, hi)
    picked = _sample(rows)
    _check(y[picked], rms_norm_reference(x[picked], w), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "misaligned"])
def test_add_rms_norm_streamed_rows(dtype: torch.dtype, aligned: bool) -> None:
    g = torch.Generator().manual_seed(12)
    rows = _rows_for(2 * HIDDEN * dtype.itemsize)
    a = torch.randn(rows, HIDDEN, generator=g).to(dtype)
    b = torch.randn(rows, HIDDEN, generator=g).to(dtype)
    w = torch.randn(HIDDEN, generator=g).to(dtype)
    make = torch.empty_like if aligned else (lambda t: _misaligned(t.shape, dtype))
    y, x = polyops.add_rms_norm(a, b, w, 1e-6, y_out=make(a), x_out=make(a))
    for lo, hi in ((0, 64), (rows // 2 - 32, rows // 2 + 32), (rows - 64, rows)):
        y_small, x_small = polyops.add_rms_norm(a[lo:hi], b[lo:hi], w, 1e-6)
        assert torch.equal(y[lo:hi], y_small) and torch.equal(x[lo:hi], x_small), (lo, hi)
    picked = _sample(rows)
    y_ref, x_ref = add_rms_norm_reference(a[picked], b[picked], w)
    _check(y[picked], y_ref, dtype)
    assert torch.equal(x[picked].double(), x_ref)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "misaligned"])
def test_causal_softmax_streamed_rows(dtype: torch.dtype, aligned: bool) -> None:
    g = torch.Generator().manual_seed(13)
    keys = 1024
    batches = STREAMING_BYTES // (keys * keys * dtype.itemsize) + 1
    x = (torch.randn(batches, keys, keys, generator=g) * 4).to(dtype)
    x[-1, 700, 3] = float("nan")  # a NaN row in the streamed call
    out = torch.empty_like(x) if aligned else _misaligned(x.shape, dtype)
    y = polyops.causal_softmax(x, out=out)
    assert y.data_ptr() == out.data_ptr()
    # One [1024, 1024] matrix is 2-4 MiB: ordinary stores. NaN compares equal here.
    for b in (0, batches // 2, batches - 1):
        small = polyops.causal_softmax(x[b])
        assert torch.equal(y[b].nan_to_num(7.0), small.nan_to_num(7.0)), b
    _check(y[-1, ::37], causal_softmax_reference(x[-1])[::37], dtype)
    assert torch.isnan(y[-1, 700, :701]).all() and (y[-1, 700, 701:] == 0).all()


def _binary_operands(dtype: torch.dtype, kind: str, g: torch.Generator):
    """add / mul operands whose output reaches the streaming threshold, with
    NaN, inf and results in the subnormal range among normal data."""
    # Rows of 4099: a vector tail, and most rows off 64-byte alignment.
    numel = (STREAMING_BYTES // dtype.itemsize // 4099 + 2) * 4099
    a = torch.randn(numel, generator=g).to(dtype)
    b = torch.randn(numel, generator=g).to(dtype)
    a[7], a[numel // 2], b[100] = float("nan"), float("inf"), float("-inf")
    tiny = 1e-20 if dtype != torch.float16 else 1e-3
    a[200:260], b[200:260] = tiny, tiny  # products below the normal range
    if kind == "broadcast":
        return a.view(-1, 4099), b[:4099]  # b a row broadcast over a's rows
    return a, b


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("kind", ["aligned", "misaligned", "in_place", "broadcast"])
def test_binary_streamed(dtype: torch.dtype, op: str, kind: str) -> None:
    """The streamed call equals float64 rounded once to the dtype, bit for bit:
    the float sum or product of two float32 / float16 / bfloat16 values,
    rounded once, is the correctly rounded result (float32 carries more than
    twice their significand plus two bits), so no tolerance is needed."""
    g = torch.Generator().manual_seed(14)
    a, b = _binary_operands(dtype, kind, g)
    expected = (a.double() + b.double() if op == "add" else a.double() * b.double()).to(dtype)
    fn = getattr(polyops, op)
    if kind == "in_place":
        a_copy = a.clone()
        y = fn(a, b, out=a)
        assert y.data_ptr() == a.data_ptr()
        a = a_copy
    else:
        out = torch.empty_like(a) if kind != "misaligned" else _misaligned(a.shape, dtype)
        y = fn(a, b, out=out)
        assert y.data_ptr() == out.data_ptr()
    nan = expected.isnan()
    assert nan.any() and torch.equal(y.isnan(), nan)
    assert torch.equal(y[~nan], expected[~nan])
    if op == "mul":  # the rounding of subnormal results (VCVTNE2PS2BF16 flushes them)
        assert (y[~nan] != 0).logical_and(y[~nan].abs() < torch.finfo(dtype).tiny).any()
    # Small calls (ordinary stores) give the same bits as the streamed one.
    bits = torch.int16 if dtype.itemsize == 2 else torch.int32
    rows = a.shape[0] if a.dim() == 2 else a.numel() // 4099
    for lo in (0, rows // 2 - 1, rows - 2):
        if a.dim() == 2:
            part_a, part_b, part_y = a[lo : lo + 2], b, y[lo : lo + 2]
        else:
            span = slice(lo * 4099, (lo + 2) * 4099)
            part_a, part_b, part_y = a[span], b[span], y[span]
        assert torch.equal(fn(part_a, part_b).view(bits), part_y.view(bits)), lo
