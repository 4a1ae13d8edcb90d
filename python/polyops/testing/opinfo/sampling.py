"""The op table's topk_topp_sampling."""

from __future__ import annotations

import math
from typing import Any

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
    ONE_MINUS,
)
from polyops.testing.tensors import (
    F32,
    FLOAT_DTYPES,
    I32,
    I64,
)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------
# topk_topp_sampling

# name: (top_k, top_p)
SAMPLING_FILTERS = {
    "k_off_p_off": (0, 1.0),
    "k_negative": (-7, 1.0),
    "k_only": (5, 1.0),
    "p_only": (0, 0.9),
    "both": (20, 0.8),
    "k_above_v": (10_000, 0.95),
    "k_one": (1, 0.5),
    "tiny_p": (0, 1e-30),
}


def _sampling_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        rows,
        vocab,
        top_k,
        top_p,
        *,
        layout="contiguous",
        uniform="random",
        ties=False,
        out_dtype=None,
    ):
        """out_dtype: given, the tokens go to an ``out`` of that dtype."""

        def build(inp: Inputs) -> Call:
            if ties:  # integer logits: many exact ties; some masked to -inf
                logits = torch.randint(-2, 3, (rows, vocab), generator=inp.gen).to(dtype)
                logits[torch.rand(rows, vocab, generator=inp.gen) < 0.3] = -math.inf
                logits[:, 0] = 2  # every row keeps a finite logit
            else:
                logits = inp.cpu((rows, vocab), dtype, scale=3.0)
            k, p = top_k, top_p
            if isinstance(k, torch.dtype):  # per-row tensors
                k = inp.put(torch.randint(-3, vocab + 20, (rows,), generator=inp.gen).to(k))
                p = inp.put(torch.rand(rows, generator=inp.gen, dtype=F32).clamp(min=1e-6))
            outputs = {} if out_dtype is None else {"out": inp.empty((rows,), out_dtype)}
            if uniform == "seed":
                return Call((inp.put(logits, layout), k, p), {"seed": 1234}, outputs)
            u = {
                "random": lambda: torch.rand(rows, generator=inp.gen, dtype=F32),
                "extremes": lambda: torch.tensor([0.0, ONE_MINUS] * (rows // 2), dtype=F32),
            }[uniform]()
            return Call((inp.put(logits, layout), k, p), {"uniform": inp.put(u)}, outputs)

        return Case(name, build)

    return [case(name, 12, 257, k, p) for name, (k, p) in SAMPLING_FILTERS.items()] + [
        case("vocab-32000-k50-p0.9", 4, 32000, 50, 0.9),
        case("vocab-32000-full", 2, 32000, 0, 1.0),
        case("per-row-int32", 10, 100, I32, None),
        case("per-row-int64", 10, 100, I64, None),
        case("ties-and-masked", 16, 64, 10, 0.7, ties=True),
        case("rows-strided", 6, 130, 8, 0.9, layout="rows"),
        case("seed", 5, 300, 0, 0.95, uniform="seed"),
        case("u-0-and-near-1", 8, 50, 6, 0.7, uniform="extremes"),
        # int32 token ids, as serving engines and the FlashInfer / ATB samplers keep them.
        case("int32-out", 12, 257, 20, 0.8, out_dtype=I32),
        case("int32-out-seed", 5, 300, 0, 0.95, uniform="seed", out_dtype=I32),
        case("int64-out", 6, 130, 8, 0.9, out_dtype=I64),
    ]


def _sampling_results(returned: Any, call: Call) -> tuple:
    """The tokens to compare with the int64 reference: a case's int32 ``out`` holds the
    same ids, widened here (a result in another dtype than that ``out`` still fails)."""
    out = call.outputs.get("out")
    if out is not None and out.dtype == I32 and returned.dtype == I32:
        return (returned.to(I64),)
    return (returned,)


def _sampling_rule(results: tuple, *args: Any, **kwargs: Any) -> list[int]:
    """npu's rule for topk_topp_sampling: every row's token is a plausible draw."""
    return ref.topk_topp_sampling_implausible_rows(results[0], *args, **kwargs)


INFOS: list[OpInfo] = [
    OpInfo(
        "topk_topp_sampling",
        FLOAT_DTYPES,
        _sampling_cases,
        ref.topk_topp_sampling_reference,
        EXACT,
        _sampling_results,
        special_values=True,
        device_rules={"npu": _sampling_rule},
    ),
]
