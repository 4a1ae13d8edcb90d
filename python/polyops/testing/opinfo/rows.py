"""The op table's row ops: rms_norm, add_rms_norm, silu_and_mul, swiglu,
causal_softmax.
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
    FLOAT32_COMPUTE,
)
from polyops.testing.tensors import (
    FLOAT_DTYPES,
)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------
# rms_norm, add_rms_norm


def _rms_norm_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shape, *, layout="contiguous", out=None, eps=1e-6, scale=2.0):
        def build(inp: Inputs) -> Call:
            x = inp.tensor(shape, dtype, scale, layout)
            weight = inp.tensor(shape[-1:], dtype)
            outputs = {} if out is None else {"out": inp.empty(shape, dtype, out)}
            return Call((x, weight, eps), outputs=outputs)

        return Case(name, build)

    return [
        case("8x4096", (8, 4096)),
        case("1x1", (1, 1)),
        case("3x5x7", (3, 5, 7)),
        case("64", (64,)),
        case("0x64", (0, 64)),
        case("2x16500-blocked", (2, 16500)),
        case("rows-9x600-out-rows", (9, 600), layout="rows", out="rows"),
        case(
            "permuted-4x5x96",
            (4, 5, 96),
            layout=lambda t: t.transpose(0, 1).contiguous().transpose(0, 1),
        ),
        case("eps-1e-5", (6, 96), eps=1e-5),
        case("3x4096-scale300", (3, 4096), scale=300.0),
    ]


def _add_rms_norm_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shape, *, layout="contiguous", outputs="", inplace=False):
        def build(inp: Inputs) -> Call:
            x1 = inp.tensor(shape, dtype, layout=layout)
            x2 = inp.tensor(shape, dtype, 0.5, layout)
            gamma = inp.tensor(shape[-1:], dtype)
            given = {"x_out": x1} if inplace else {}
            if outputs:
                given = {arg: inp.empty(shape, dtype, outputs) for arg in ("y_out", "x_out")}
            return Call((x1, x2, gamma, 1e-6), outputs=given)

        return Case(name, build)

    return [
        case("8x4096", (8, 4096)),
        case("3x5x7", (3, 5, 7)),
        case("0x64", (0, 64)),
        case("2x16500-blocked", (2, 16500)),
        case("rows-9x600", (9, 600), layout="rows"),
        case("outputs-rows-5x130", (5, 130), outputs="rows"),
        case("in-place-x_out=x1-4x512", (4, 512), inplace=True),
    ]


# ---------------------------------------------------------------------------
# silu_and_mul, swiglu


def _silu_and_mul_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shape, *, layout="contiguous", out=None, scale=2.0):
        def build(inp: Inputs) -> Call:
            x = inp.tensor(shape, dtype, scale, layout)
            result_shape = (*shape[:-1], shape[-1] // 2)
            outputs = {} if out is None else {"out": inp.empty(result_shape, dtype, out)}
            return Call((x,), outputs=outputs)

        return Case(name, build)

    return [
        case("4x22016", (4, 22016)),
        case("1x2", (1, 2)),
        case("3x5x14", (3, 5, 14)),
        case("0x8", (0, 8)),
        case("transposed-6x10-out-step", (6, 10), layout="transposed", out="step"),
        case("saturation-5x66", (5, 66), scale=40.0),
    ]


def _swiglu_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shape, *, layouts=("contiguous", "contiguous"), inplace=False, scale=2.0):
        def build(inp: Inputs) -> Call:
            x = inp.tensor(shape, dtype, scale, layouts[0])
            gate = inp.tensor(shape, dtype, scale, layouts[1])
            return Call((x, gate), outputs={"out": x} if inplace else {})

        return Case(name, build)

    return [
        case("4x11008", (4, 11008)),
        case("3x5x7", (3, 5, 7)),
        case("0x8", (0, 8)),
        case("transposed+step-6x9", (6, 9), layouts=("transposed", "step")),
        case("in-place-5x33", (5, 33), inplace=True),
        case("saturation-4x40", (4, 40), scale=40.0),
    ]


# ---------------------------------------------------------------------------
# causal_softmax


def _causal_softmax_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shape, *, layout="contiguous", out=None, inplace=False, scale=3.0):
        def build(inp: Inputs) -> Call:
            x = inp.tensor(shape, dtype, scale, layout)
            outputs = {"out": x} if inplace else {}
            if out is not None:
                outputs["out"] = inp.empty(shape, dtype, out)
            return Call((x,), outputs=outputs)

        return Case(name, build)

    return [
        case("8x64x200", (8, 64, 200)),
        case("5x5", (5, 5)),
        case("3x8", (3, 8)),
        case("8x3-masked-rows", (8, 3)),
        case("2x4x6x6", (2, 4, 6, 6)),
        case("4x1", (4, 1)),
        case("1x40", (1, 40)),
        case("0x4", (0, 4)),
        case("rows-2x5x7-out-rows", (2, 5, 7), layout="rows", out="rows"),
        case("leading-transposed-5x2x7", (5, 2, 7), layout=lambda t: t.transpose(0, 1)),
        case("in-place-3x9", (3, 9), inplace=True),
        case("large-values-4x9", (4, 9), scale=200.0),
    ]


INFOS: list[OpInfo] = [
    OpInfo(
        "rms_norm",
        FLOAT_DTYPES,
        _rms_norm_cases,
        ref.rms_norm_reference,
        FLOAT32_COMPUTE,
        special_values=True,
    ),
    OpInfo(
        "add_rms_norm",
        FLOAT_DTYPES,
        _add_rms_norm_cases,
        ref.add_rms_norm_reference,
        FLOAT32_COMPUTE,
        special_values=True,
    ),
    OpInfo(
        "silu_and_mul",
        FLOAT_DTYPES,
        _silu_and_mul_cases,
        ref.silu_and_mul_reference,
        FLOAT32_COMPUTE,
        special_values=True,
    ),
    OpInfo(
        "swiglu",
        FLOAT_DTYPES,
        _swiglu_cases,
        ref.swiglu_reference,
        FLOAT32_COMPUTE,
        special_values=True,
    ),
    OpInfo(
        "causal_softmax",
        FLOAT_DTYPES,
        _causal_softmax_cases,
        ref.causal_softmax_reference,
        FLOAT32_COMPUTE,
        special_values=True,
    ),
]
