"""The op table's matrix products: matmul, gemm, linear."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from polyops.testing import references as ref
from polyops.testing.opinfo.core import (
    Call,
    Case,
    Inputs,
    OpInfo,
)
from polyops.testing.references import (
    PRODUCT,
)
from polyops.testing.tensors import (
    FLOAT_DTYPES,
)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------
# matmul, gemm, linear


def _column_major(t: Tensor) -> Tensor:
    """Each matrix stored column-major (the batch dim stays outermost)."""
    return t.mT.contiguous().mT


def _matmul_shape(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[int, ...]:
    """torch.matmul's result shape: broadcast batch dims, a 1-D operand's dim dropped."""
    batch = torch.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    rows = tuple(a_shape[-2:-1]) if len(a_shape) >= 2 else ()
    columns = tuple(b_shape[-1:]) if len(b_shape) >= 2 else ()
    return (*batch, *rows, *columns)


def _matmul_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, a_shape, b_shape, *, a="contiguous", b="contiguous", out=None):
        def build(inp: Inputs) -> Call:
            x, y = inp.tensor(a_shape, dtype, layout=a), inp.tensor(b_shape, dtype, layout=b)
            result = _matmul_shape(a_shape, b_shape)
            outputs = {} if out is None else {"out": inp.empty(result, dtype, out)}
            return Call((x, y), outputs=outputs)

        return Case(name, build, atol_scale=a_shape[-1])

    return [
        case("8x2048@2048x384", (8, 2048), (2048, 384)),
        case("1x1@1x1", (1, 1), (1, 1)),
        case("17x33@33x9", (17, 33), (33, 9)),
        case("4x3x5@4x5x7", (4, 3, 5), (4, 5, 7)),
        case("3x6x5@5x4-shared", (3, 6, 5), (5, 4)),
        case("1x6x5@3x5x4-batch-of-one", (1, 6, 5), (3, 5, 4)),
        case("0x5@5x3", (0, 5), (5, 3)),
        case("4x0@0x3", (4, 0), (0, 3)),
        case(
            "column-major-3x9x13@3x13x6", (3, 9, 13), (3, 13, 6), a=_column_major, b=_column_major
        ),
        case("out-rows-9x13@13x6", (9, 13), (13, 6), a="rows", out="rows"),
        # 1-D operands: a row vector, a column vector, or both (a 0-d dot product).
        case("64@64-dot", (64,), (64,)),
        case("33@33x9", (33,), (33, 9)),
        case("17x33@33-step", (17, 33), (33,), b="step"),
        case("4x6x5@5", (4, 6, 5), (5,)),
        case("5@3x5x4", (5,), (3, 5, 4)),
        # N-D batches, broadcast between the operands.
        case("2x3x4x5@2x3x5x6", (2, 3, 4, 5), (2, 3, 5, 6)),
        case("2x2x3x4x5@5x6-shared", (2, 2, 3, 4, 5), (5, 6)),
        case("2x1x6x5@3x5x4-outer", (2, 1, 6, 5), (3, 5, 4)),
        case("3x1x6x5@1x4x5x7-out-rows", (3, 1, 6, 5), (1, 4, 5, 7), out="rows"),
        case("2x0x4x5@1x5x3", (2, 0, 4, 5), (1, 5, 3)),
    ]


def _gemm_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        m,
        n,
        k,
        *,
        batch=(),
        trans=(False, False),
        alpha=1.0,
        beta=0.0,
        c=None,
        nan=None,
        inplace=False,
    ):
        def build(inp: Inputs) -> Call:
            a = inp.tensor((*batch, k, m) if trans[0] else (*batch, m, k), dtype)
            b = inp.tensor((*batch, n, k) if trans[1] else (*batch, k, n), dtype)
            c_tensor = None if c is None else inp.tensor(c, dtype)
            if nan == "a":  # alpha == 0: a is not read
                a.fill_(math.nan)
            if nan == "c":  # beta == 0: c is not read
                c_tensor.fill_(math.nan)
            kwargs = {"alpha": alpha, "beta": beta, "trans_a": trans[0], "trans_b": trans[1]}
            return Call((a, b, c_tensor), kwargs, {"out": c_tensor} if inplace else {})

        return Case(name, build, atol_scale=abs(alpha) * k + abs(beta))

    return [
        case("32x256x2048", 32, 256, 2048),
        case("7x5x11", 7, 5, 11, alpha=0.5, beta=-2.0, c=(7, 5)),
        case("trans_a", 7, 5, 11, trans=(True, False)),
        case("trans_b", 7, 5, 11, trans=(False, True), c=(7, 5), beta=1.0),
        case("trans_ab-batched", 7, 5, 11, batch=(3,), trans=(True, True), alpha=2.0),
        case("c-row-broadcast", 6, 4, 9, c=(4,), beta=1.0),
        case("beta0-nan-c", 6, 4, 9, c=(6, 4), beta=0.0, nan="c"),
        case("alpha0-nan-a", 6, 4, 9, alpha=0.0, beta=3.0, c=(6, 4), nan="a"),
        case("in-place-out=c", 6, 4, 9, c=(6, 4), beta=1.0, inplace=True),
        case("k0", 4, 3, 0, c=(4, 3), beta=2.0),
    ]


def _linear_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name, shape, out_features, *, bias=True, x="contiguous", w="contiguous", b="contiguous"
    ):
        def build(inp: Inputs) -> Call:
            weight = inp.tensor((out_features, shape[-1]), dtype, layout=w)
            b_tensor = inp.tensor((out_features,), dtype, layout=b) if bias else None
            return Call((inp.tensor(shape, dtype, layout=x), weight, b_tensor))

        return Case(name, build, atol_scale=shape[-1] + 1)

    return [
        case("4x4096->512", (4, 4096), 512),
        case("13->7-1d", (13,), 7),
        case("5x13->7-no-bias", (5, 13), 7, bias=False),
        case("2x3x13->7", (2, 3, 13), 7),
        case("0x13->7", (0, 13), 7),
        case(
            "sliced-rows-2x5x10", (2, 5, 10), 4, x=lambda t: t.new_zeros(2, 6, 10)[:, :5].copy_(t)
        ),
        case("weight-transposed-bias-step", (6, 10), 4, w="transposed", b="step"),
    ]


INFOS: list[OpInfo] = [
    OpInfo(
        "matmul",
        FLOAT_DTYPES,
        _matmul_cases,
        ref.matmul_reference,
        PRODUCT,
        special_values=True,
    ),
    OpInfo("gemm", FLOAT_DTYPES, _gemm_cases, ref.gemm_reference, PRODUCT, special_values=True),
    OpInfo(
        "linear",
        FLOAT_DTYPES,
        _linear_cases,
        ref.linear_reference,
        PRODUCT,
        special_values=True,
    ),
]
