"""What the elementwise tests (test_add_mul.py, test_add_alpha.py, test_cast.py,
test_silu_and_mul_swiglu.py) share: shapes, their ids, and the add/mul check."""

from __future__ import annotations

import torch

from polyops.testing.references import add_reference, mul_reference
from tests.conftest import assert_equal, assert_within_ulp

SHAPES = [(), (1,), (1, 1), (3, 5, 7), (4096,), (2, 4096), (0,), (3, 0, 5)]
# > 32768 elements with ragged 512-element blocks: the parallel, blocked path.
LARGE_SHAPE = (9, 4099)


def shape_id(shape) -> str:
    return "x".join(map(str, shape)) or "scalar"


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
