"""Helpers shared by the matrix-product tests (tests/generic/test_gemm*.py,
tests/cpu/test_gemm_*.py): the float32-accumulation tolerance check, a column-major
copy and a float64 product of magnitudes.
"""

from __future__ import annotations

import math

from polyops.testing.references import UNIT_ROUNDOFF as ROUNDING


def assert_product_close(actual, expected, dtype, k, magnitude):
    """`actual` vs a float64 result: float32 accumulation over k terms, then one rounding.

    `magnitude` is the float64 sum of the terms' absolute values per element
    (e.g. ``|a| @ |b|``): float32 accumulation errs by about
    ``sqrt(k) * 2**-24 * magnitude``; the final rounding by half an ulp of the dtype.
    """
    assert actual.dtype == dtype
    assert actual.shape == expected.shape, (tuple(actual.shape), tuple(expected.shape))
    allowed = (
        4 * math.sqrt(max(k, 1)) * 2**-24 * magnitude + ROUNDING[dtype] * expected.abs() + 1e-7
    )
    error = (actual.double() - expected).abs()
    bad = ~(error <= allowed)
    assert not bad.any(), (
        f"{int(bad.sum())} of {bad.numel()} elements off; worst excess "
        f"{float((error - allowed).max())}"
    )


def column_major(tensor):
    """Same values, each matrix stored column-major (the batch dim stays outermost)."""
    return tensor.mT.contiguous().mT


def mag_mm(a, b):
    return a.double().abs() @ b.double().abs()
