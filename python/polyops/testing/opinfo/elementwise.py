"""The op table's elementwise entries: add, mul (broadcast binaries; add's alpha),
cast and cat.
"""

from __future__ import annotations

import torch

from polyops.testing import references as ref
from polyops.testing.opinfo.core import (
    Call,
    Case,
    Inputs,
    OpInfo,
)
from polyops.testing.references import (
    EXACT,
    ROUNDED,
)
from polyops.testing.tensors import (
    ALL_DTYPES,
    ARITH_DTYPES,
    BF16,
    F16,
    F32,
    F64,
    I8,
    I16,
    I32,
    I64,
    U8,
    dtype_name,
)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------
# add, mul


def _binary_cases(dtype: torch.dtype, alpha_cases: bool = False) -> list[Case]:
    def case(
        name, shape, other=None, *, a="contiguous", b="contiguous", out=None, inplace=None, **kw
    ):
        def build(inp: Inputs) -> Call:
            x = inp.tensor(shape, dtype, layout=a)
            y = inp.tensor(shape if other is None else other, dtype, layout=b)
            outputs = {} if inplace is None else {"out": x if inplace == "input" else y}
            if out is not None:
                result = torch.broadcast_shapes(x.shape, y.shape)
                outputs["out"] = inp.empty(result, dtype, out)
            return Call((x, y), kw, outputs)

        return Case(name, build)

    cases = [
        case("33x257+row", (33, 257), (257,)),
        case("2x4096", (2, 4096)),
        case("scalar", ()),
        case("1", (1,)),
        case("6x4x9+4x1", (6, 4, 9), (4, 1)),
        case("3x5x7-transposed+step", (3, 5, 7), a="transposed", b="step"),
        case("3x0x5", (3, 0, 5)),
        case("in-place-7x9+9", (7, 9), (9,), inplace="input"),
        case("out-step-5x11", (5, 11), out="step"),
        case("9x4099-parallel", (9, 4099)),
        # Both operands broadcast (torch rules).
        case("3x1+1x5", (3, 1), (1, 5)),
        case("5+2x3x5", (5,), (2, 3, 5)),
        case("scalar+4x6", (), (4, 6)),
        case("1x4x1+3x1x6-out-step", (1, 4, 1), (3, 1, 6), out="step"),
        case("row-1000+40x1000", (1000,), (40, 1000)),
        case("48x1-step+1x700-parallel", (48, 1), (1, 700), a="step"),
        case("in-place-out=other-9+7x9", (9,), (7, 9), inplace="other"),
    ]
    if not alpha_cases:
        return cases
    if dtype.is_floating_point:
        # 0.1 and 1/3 are not representable: rounded to the dtype first.
        alphas = [("0.1", 0.1), ("-2.5", -2.5), ("0.333", 1 / 3), ("-0.75", -0.75)]
    else:
        # uint8: -1 wraps to 255, as torch converts it.
        alphas = [("3", 3), ("-2", -2), ("-1", -1), ("0", 0)]
    (a1, v1), (a2, v2), (a3, v3), (a4, v4) = alphas
    return cases + [
        case(f"alpha={a1}-33x257+row", (33, 257), (257,), alpha=v1),
        case(f"alpha={a2}-9x4099-parallel", (9, 4099), alpha=v2),
        case(f"alpha={a3}-3x1+1x5", (3, 1), (1, 5), alpha=v3),
        case(f"alpha={a4}-3x5x7-transposed+step", (3, 5, 7), a="transposed", b="step", alpha=v4),
        case(f"alpha={a1}-in-place-7x9+9", (7, 9), (9,), inplace="input", alpha=v1),
    ]


# ---------------------------------------------------------------------------
# cast

CAST_TARGETS = [F64, F32, F16, BF16, I8, I16, I32, I64, U8, torch.bool]


def _cast_cases(src: torch.dtype) -> list[Case]:
    def case(name, shape, dst, *, layout="contiguous", out=None):
        def build(inp: Inputs) -> Call:
            # Floats (scale 20) stay in int8's range; to uint8 they are made
            # non-negative (float -> int out of range is not defined).
            x = inp.cpu(shape, src, scale=20.0)
            if dst == U8 and src.is_floating_point:
                x = x.abs()
            outputs = {} if out is None else {"out": inp.empty(shape, dst, out)}
            return Call((inp.put(x, layout), dst), outputs=outputs)

        return Case(name, build)

    cases = [case(f"to-{dtype_name(dst)}", (17, 33), dst) for dst in CAST_TARGETS]
    return cases + [
        case("to-float16-transposed-out-step", (6, 7, 9), F16, layout="transposed", out="step"),
        case("to-int32-step", (5, 12), I32, layout="step"),
        case("to-bfloat16-0x5", (0, 5), BF16),
        case("to-float32-scalar", (), F32),
    ]


# ---------------------------------------------------------------------------
# cat


def _cat_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shapes, dim, *, layouts=None, out=None):
        def build(inp: Inputs) -> Call:
            kinds = layouts or ["contiguous"] * len(shapes)
            pieces = [inp.tensor(s, dtype, layout=k) for s, k in zip(shapes, kinds, strict=True)]
            outputs = {}
            if out is not None:
                shape = list(shapes[0])
                shape[dim] = sum(s[dim] for s in shapes)
                outputs["out"] = inp.empty(shape, dtype, out)
            return Call((pieces, dim), outputs=outputs)

        return Case(name, build)

    return [
        case("dim0-3-pieces", [(2, 3, 4), (5, 3, 4), (1, 3, 4)], 0),
        case("dim1", [(2, 3, 4), (2, 1, 4), (2, 6, 4)], 1),
        case("dim-1-qkv-8x4096", [(8, 4096), (8, 1024), (8, 1024)], -1),
        case("dim-3", [(3, 2, 5), (1, 2, 5)], -3),
        case("strided-pieces", [(4, 3, 5), (4, 2, 5)], 1, layouts=["transposed", "step"]),
        case("zero-size-piece", [(2, 0, 4), (2, 3, 4)], 1),
        case("single", [(3, 5)], 0),
        case("9-pieces", [(1, 7)] * 9, 0),
        case("out-step", [(3, 4), (3, 5)], -1, out="step"),
    ]


INFOS: list[OpInfo] = [
    OpInfo(
        "add",
        ARITH_DTYPES,
        lambda dtype: _binary_cases(dtype, alpha_cases=True),
        ref.add_reference,
        ref.ADD,
        special_values=True,
    ),
    OpInfo("mul", ARITH_DTYPES, _binary_cases, ref.mul_reference, ROUNDED, special_values=True),
    OpInfo("cast", ALL_DTYPES, _cast_cases, ref.cast_reference, ROUNDED, special_values=True),
    OpInfo("cat", ALL_DTYPES, _cat_cases, ref.cat_reference, EXACT, special_values=True),
]
