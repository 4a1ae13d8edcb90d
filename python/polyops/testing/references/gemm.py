"""References of the matrix products: matmul, gemm, linear."""

from __future__ import annotations

import torch

from polyops.testing.references._common import Tensor, _f64
from polyops.testing.tensors import F64

# ---------------------------------------------------------------------------
# matmul, gemm, linear: PRODUCT


def matmul_reference(input: Tensor, other: Tensor) -> Tensor:
    """The float64 matrix product, a 2-D operand (or a batch of one) shared by the batch.

    float64 torch matmul (exact products, 53-bit sums): a different algorithm
    and precision from the float32 BLAS kernel, its error ~k 2**-53 is far
    below PRODUCT.
    """
    return _f64(input) @ _f64(other)


def gemm_reference(
    a: Tensor,
    b: Tensor,
    c: Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    trans_b: bool = False,
) -> Tensor:
    """``alpha op(a) op(b) + beta c`` with BLAS conventions: alpha == 0 does not read a, b;
    beta == 0 (or c None) does not read c; c broadcasts to the result."""
    op_a = _f64(a).mT if trans_a else _f64(a)
    op_b = _f64(b).mT if trans_b else _f64(b)
    batch = torch.broadcast_shapes(op_a.shape[:-2], op_b.shape[:-2])
    result = torch.zeros((*batch, op_a.shape[-2], op_b.shape[-1]), dtype=F64)
    if alpha != 0:
        result = result + alpha * (op_a @ op_b)
    if c is not None and beta != 0:
        result = result + beta * _f64(c)
    return result


def linear_reference(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``."""
    result = _f64(input) @ _f64(weight).T
    return result if bias is None else result + _f64(bias)
