"""References of add, mul, cast and cat, and add's own tolerance table (ADD)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import torch

from polyops.testing.references._common import Tensor, _f64
from polyops.testing.references.tolerances import ROUNDED, UNIT_ROUNDOFF, Tolerance
from polyops.testing.tensors import BF16, F16, F32, F64, I64

# ---------------------------------------------------------------------------
# add, mul: ADD / ROUNDED (floats), EXACT (integers, which wrap)

# add: as ROUNDED, except that with alpha != 1 float16/bfloat16 results are
# rounded twice, as torch's CPU kernel rounds them: to float32 (the fused
# input + alpha * other) and then to the dtype, which errs by at most
# u + u_f32 (1 + u) < u + 2 u_f32 relative; in bfloat16's subnormal range
# the float32 step adds up to half a float32 subnormal (2**-150). float32's
# reference is the float64 sum of input and the exact alpha * other, itself
# rounded once (2**-53 relative, so rtol u_f32 + 2**-52).
ADD = {
    F16: Tolerance(UNIT_ROUNDOFF[F16] + 2 * UNIT_ROUNDOFF[F32], 2.0**-25),
    BF16: Tolerance(UNIT_ROUNDOFF[BF16] + 2 * UNIT_ROUNDOFF[F32], 2.0**-134 + 2.0**-150),
    F32: Tolerance(UNIT_ROUNDOFF[F32] + 2.0**-52, 2.0**-150),
    F64: ROUNDED[F64],
}


def _wrap(values: Tensor, dtype: torch.dtype) -> Tensor:
    """Exact int64 values reduced modulo 2**bits into `dtype`'s range (two's complement)."""
    info = torch.iinfo(dtype)
    modulus = 1 << info.bits
    return (torch.remainder(values - info.min, modulus) + info.min).to(dtype)


def _integer_binary(op: str, a: Tensor, b: Tensor, alpha: int) -> Tensor:
    """Integer ``a + alpha * b`` or ``a * b`` wrapped modulo 2**bits (a and b of one shape):
    exact in int64 up to 32-bit operands (|alpha| < 2**31), in Python's unbounded
    integers for int64."""
    if a.dtype != I64:
        wide = a.long() + alpha * b.long() if op == "add" else a.long() * b.long()
        return _wrap(wide, a.dtype)
    left = a.reshape(-1).tolist()
    right = b.reshape(-1).tolist()
    apply = (lambda x, y: x + alpha * y) if op == "add" else (lambda x, y: x * y)
    wrapped = [(apply(x, y) + 2**63) % 2**64 - 2**63 for x, y in zip(left, right, strict=True)]
    return torch.tensor(wrapped, dtype=I64).reshape(a.shape)


def add_alpha(dtype: torch.dtype, alpha: float) -> float:
    """alpha as add applies it to `dtype` tensors: rounded to a float dtype, through
    float32 for float16/bfloat16 (torch's conversion); unchanged for integers."""
    if not dtype.is_floating_point or dtype == F64:
        return alpha
    return torch.tensor(float(alpha), dtype=F32).to(dtype).item()


def _fused_add(x: float, alpha: float, y: float) -> float:
    """x + alpha * y rounded once to float64 (a fused multiply-add), in exact rational
    arithmetic for finite operands."""
    if not (math.isfinite(alpha) and math.isfinite(y)):
        return x + alpha * y  # alpha * y is inf or NaN however it is computed
    if not math.isfinite(x):
        return x  # x plus a finite value, however large
    exact = Fraction(x) + Fraction(alpha) * Fraction(y)
    try:
        return float(exact)
    except OverflowError:
        return math.copysign(math.inf, exact)


def _binary(op: str, input: Tensor, other: Tensor, alpha: float = 1) -> Tensor:
    shape = torch.broadcast_shapes(input.shape, other.shape)
    a, b = input.cpu().expand(shape), other.cpu().expand(shape)
    if not a.dtype.is_floating_point:
        return _integer_binary(op, a, b, int(alpha))
    if op == "mul":
        # float64 holds the exact product of two values of a <= float32 format.
        return (_f64(a) * _f64(b)).clone()
    alpha = add_alpha(a.dtype, alpha)
    if a.dtype == F64 and alpha != 1:
        fused = [
            _fused_add(x, alpha, y)
            for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist(), strict=True)
        ]
        return torch.tensor(fused, dtype=F64).reshape(shape)
    # alpha * b is exact in float64 for a <= float32 format (two <= 24-bit
    # significands), the sum exact unless the exponents are far apart.
    return (_f64(a) + alpha * _f64(b)).clone()


def add_reference(input: Tensor, other: Tensor, *, alpha: float = 1) -> Tensor:
    """``input + alpha * other``, input and other broadcast to one shape: float64 (alpha
    rounded to the dtype first, see :func:`add_alpha`), or the wrapped integers."""
    return _binary("add", input, other, alpha)


def mul_reference(input: Tensor, other: Tensor) -> Tensor:
    """``input * other``, input and other broadcast to one shape: float64, or the
    wrapped integers."""
    return _binary("mul", input, other)


# ---------------------------------------------------------------------------
# cast: ROUNDED to a float dtype, EXACT to an integer or bool dtype


def cast_reference(input: Tensor, dtype: torch.dtype) -> Tensor:
    """`input` converted to `dtype`.

    To a float dtype: the exact value as float64 (the kernel must round it
    once), or +-inf where it rounds past the largest finite value: from
    (2 - 2**-p) * 2**emax on, p the dtype's precision. To bool: ``!= 0``. To an
    integer dtype: floats truncate toward zero (the cases keep them in range),
    integers wrap modulo 2**bits.
    """
    x = input.cpu()
    if dtype.is_floating_point:
        value = _f64(x)
        if dtype == F64:
            return value
        info = torch.finfo(dtype)
        precision = 1 - int(math.log2(info.eps))
        overflow = (2 - 2.0**-precision) * 2.0 ** int(math.log2(info.max))
        return torch.where(value.abs() >= overflow, value.sign() * math.inf, value)
    if dtype == torch.bool:
        return x != 0
    if x.dtype.is_floating_point:
        return torch.trunc(_f64(x)).to(dtype)
    return x.to(I64) if dtype == I64 else _wrap(x.to(I64), dtype)


# ---------------------------------------------------------------------------
# cat: EXACT (a copy)


def cat_reference(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The pieces written one after another into slices of a fresh tensor."""
    tensors = [t.cpu() for t in tensors]
    dim = dim % tensors[0].dim()
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    result = torch.empty(shape, dtype=tensors[0].dtype)
    offset = 0
    for tensor in tensors:
        result.narrow(dim, offset, tensor.shape[dim]).copy_(tensor)
        offset += tensor.shape[dim]
    return result
