"""The :class:`Tolerance` type and the tolerance tables the references are judged with.

In the notation used here, ``u`` is the unit roundoff of the result dtype, half an
ulp relative: 2**-11 (float16), 2**-8 (bfloat16), 2**-24 (float32), 2**-53 (float64).
"""

from __future__ import annotations

from typing import NamedTuple

from polyops.testing.tensors import BF16, F16, F32, F64


class Tolerance(NamedTuple):
    """Allowed error of one element: ``|actual - expected| <= atol + rtol * |expected|``."""

    rtol: float
    atol: float

    def scaled(self, atol_scale: float) -> Tolerance:
        """The same rtol with atol multiplied by `atol_scale` (see ``Case.atol_scale``)."""
        return Tolerance(self.rtol, self.atol * atol_scale)


# Bit-exact: integer results, copies (cat, reshape_and_cache), sampled token ids.
EXACT = Tolerance(0.0, 0.0)

UNIT_ROUNDOFF = {F16: 2.0**-11, BF16: 2.0**-8, F32: 2.0**-24, F64: 2.0**-53}

# Correctly rounded results (add, mul, cast to a float dtype): the exact value
# rounded once, to nearest, is within u * |exact| of it; below the normal
# range within half the smallest subnormal (atol). float64 add/mul are
# exact in the reference's own float64 arithmetic, so float64 is bit-exact too.
ROUNDED = {
    F16: Tolerance(UNIT_ROUNDOFF[F16], 2.0**-25),
    BF16: Tolerance(UNIT_ROUNDOFF[BF16], 2.0**-134),
    F32: Tolerance(UNIT_ROUNDOFF[F32], 2.0**-150),
    F64: Tolerance(UNIT_ROUNDOFF[F64], 0.0),
}

# Ops that compute in float32 and round once to the result dtype (rms_norm,
# add_rms_norm, silu_and_mul, swiglu, causal_softmax, the rotary ops): the
# final rounding (u) plus float32 arithmetic. float16/bfloat16 allow four
# half-ulps (2e-3, 1.6e-2); float32 allows 1e-5, about 170 u, which covers
# rms_norm's float32 sum of up to ~16k squares (error ~ sqrt(n) u) and the
# few-ulp exp of silu and softmax. atol covers results near zero.
FLOAT32_COMPUTE = {
    F16: Tolerance(2e-3, 1e-5),
    BF16: Tolerance(1.6e-2, 1e-5),
    F32: Tolerance(1e-5, 1e-6),
    F64: Tolerance(1e-12, 1e-12),
}

# matmul, gemm, linear: float32 accumulation (float16/bfloat16 through float32
# workspaces, rounded once). A length-k dot product of unit-normal terms errs
# by about k * u_f32 in the worst case of a recursive sum, whatever the
# result's own size, so atol is given per accumulated term (4 u_f32) and each
# case multiplies it by its k (Case.atol_scale; for gemm |alpha| k + |beta|);
# rtol is the final rounding, as FLOAT32_COMPUTE.
PRODUCT = {
    F16: Tolerance(2e-3, 4 * UNIT_ROUNDOFF[F32]),
    BF16: Tolerance(1.6e-2, 4 * UNIT_ROUNDOFF[F32]),
    F32: Tolerance(1e-5, 4 * UNIT_ROUNDOFF[F32]),
}

# flash_attention, paged_attention: an output row is a convex combination of
# value rows, so its float32 error scales with max |v| (about 4 for the
# unit-normal values of the cases), not with the output itself: the atol says
# so (float16/bfloat16: the rounding of P before P @ V in the tile kernel).
ATTENTION = {
    F16: Tolerance(2e-3, 2e-3),
    BF16: Tolerance(1.6e-2, 1e-2),
    F32: Tolerance(1e-5, 2e-5),
}
