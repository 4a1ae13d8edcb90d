"""One small call per torch.ops.polyops overload, shared by the torch.library,
torch.compile and reliability tests.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

import polyops


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _randn(*shape: int, dtype: torch.dtype = torch.float32, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed)).to(dtype)


@dataclass
class Case:
    """Arguments of the default overload; `outputs` builds the `.out` overload's outputs."""

    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)
    outputs: Callable[[], dict[str, torch.Tensor]] = dict


def _rotary_case() -> Case:
    t, d = 5, 8
    query, key = _randn(t, 2 * d, seed=1), _randn(t, d, seed=2)
    cache = _randn(16, d, seed=3)
    positions = torch.tensor([0, 3, 7, 15, 2])
    return Case(
        (positions, query, key, d, cache, True),
        outputs=lambda: {"query_out": torch.empty_like(query), "key_out": torch.empty_like(key)},
    )


def _apply_rotary_case() -> Case:
    query, key = _randn(5, 2, 8, seed=1), _randn(5, 1, 8, seed=2)
    cos, sin = _randn(5, 4, seed=3), _randn(5, 4, seed=4)
    return Case(
        (query, key, cos, sin),
        {"is_neox_style": False},
        outputs=lambda: {"query_out": torch.empty_like(query), "key_out": torch.empty_like(key)},
    )


def _paged_case() -> Case:
    key_cache, value_cache = _randn(4, 4, 2, 8, seed=1), _randn(4, 4, 2, 8, seed=2)
    block_table = torch.tensor([[2, 0], [1, 3]], dtype=torch.int32)
    seq_lens = torch.tensor([3, 6], dtype=torch.int32)
    return Case(
        (_randn(2, 4, 8), key_cache, value_cache, seq_lens, block_table),
        {"scale": 0.5},
        outputs=lambda: {"out": torch.empty(2, 4, 8)},
    )


def _flash_case() -> Case:
    cu = torch.tensor([0, 2, 5], dtype=torch.int32)
    return Case(
        (_randn(5, 4, 8), _randn(5, 2, 8, seed=1), _randn(5, 2, 8, seed=2)),
        {"cu_seqlens_q": cu, "cu_seqlens_kv": cu, "causal": True},
        outputs=lambda: {"out": torch.empty(5, 4, 8)},
    )


def _cache_case() -> Case:
    return Case(
        (
            _randn(3, 2, 8),
            _randn(3, 2, 8, seed=1),
            torch.zeros(4, 4, 2, 8),
            torch.zeros(4, 4, 2, 8),
            torch.tensor([5, -1, 13]),
        )
    )


def _like(shape: tuple[int, ...], dtype: torch.dtype = torch.float32):
    return lambda: {"out": torch.empty(shape, dtype=dtype)}


# op -> representative cases (functions, so every test gets fresh tensors).
CASES: dict[str, list[Callable[[], Case]]] = {
    "add": [
        lambda: Case((_randn(4, 8), _randn(8, seed=1)), outputs=_like((4, 8))),
        lambda: Case(
            (_randn(3, 1), _randn(2, 1, 5, seed=1)), {"alpha": -0.5}, outputs=_like((2, 3, 5))
        ),
    ],
    "mul": [
        lambda: Case(
            (_randn(4, 8, dtype=torch.bfloat16), _randn(4, 1, dtype=torch.bfloat16)),
            outputs=_like((4, 8), torch.bfloat16),
        ),
        lambda: Case((_randn(8), _randn(3, 1, seed=1)), outputs=_like((3, 8))),
    ],
    "cast": [lambda: Case((_randn(4, 8), torch.float16), outputs=_like((4, 8), torch.float16))],
    "cat": [
        lambda: Case(([_randn(2, 8), _randn(3, 8, seed=1)],), outputs=_like((5, 8))),
        lambda: Case(([_randn(2, 3), _randn(2, 5, seed=1)], -1), outputs=_like((2, 8))),
    ],
    "matmul": [
        lambda: Case((_randn(4, 8), _randn(8, 5, seed=1)), outputs=_like((4, 5))),
        lambda: Case((_randn(1, 4, 8), _randn(3, 8, 5, seed=1)), outputs=_like((3, 4, 5))),
        lambda: Case((_randn(8), _randn(8, seed=1)), outputs=_like(())),
        lambda: Case((_randn(8), _randn(2, 8, 5, seed=1)), outputs=_like((2, 5))),
        lambda: Case((_randn(2, 1, 4, 8), _randn(3, 8, 5, seed=1)), outputs=_like((2, 3, 4, 5))),
    ],
    "gemm": [
        lambda: Case(
            (_randn(8, 4), _randn(5, 8, seed=1), _randn(4, 5, seed=2)),
            {"alpha": 0.5, "beta": 2.0, "trans_a": True, "trans_b": True},
            outputs=_like((4, 5)),
        )
    ],
    "linear": [
        lambda: Case(
            (_randn(2, 3, 8), _randn(6, 8, seed=1), _randn(6, seed=2)), outputs=_like((2, 3, 6))
        )
    ],
    "rms_norm": [lambda: Case((_randn(3, 16), _randn(16, seed=1), 1e-5), outputs=_like((3, 16)))],
    "add_rms_norm": [
        lambda: Case(
            (_randn(3, 16), _randn(3, 16, seed=1), _randn(16, seed=2)),
            outputs=lambda: {"y_out": torch.empty(3, 16), "x_out": torch.empty(3, 16)},
        )
    ],
    "silu_and_mul": [
        lambda: Case((_randn(3, 16, dtype=torch.float16),), outputs=_like((3, 8), torch.float16))
    ],
    "swiglu": [lambda: Case((_randn(3, 8), _randn(3, 8, seed=1)), outputs=_like((3, 8)))],
    "causal_softmax": [lambda: Case((_randn(2, 3, 5),), outputs=_like((2, 3, 5)))],
    "rotary_embedding": [_rotary_case],
    "apply_rotary_pos_emb": [_apply_rotary_case],
    "reshape_and_cache": [_cache_case],
    "flash_attention": [_flash_case],
    "paged_attention": [_paged_case],
    "topk_topp_sampling": [
        lambda: Case(
            (_randn(3, 20), torch.tensor([5, 0, 20]), torch.tensor([0.9, 1.0, 0.5])),
            {"uniform": torch.tensor([0.1, 0.5, 0.99])},
            outputs=lambda: {"out": torch.empty(3, dtype=torch.int64)},
        )
    ],
}


OVERLOADS = [(op, overload) for op, overload, _, _ in polyops._C._torch_overloads]


def _overload_case(op: str, overload: str, make: Callable[[], Case]) -> tuple[tuple, dict]:
    """(args, kwargs) of `make`'s case adapted to `overload` (Scalar variants, outputs)."""
    case = make()
    args, kwargs = list(case.args), dict(case.kwargs)
    if op == "topk_topp_sampling":  # overload names list each of top_k, top_p's kind
        kinds = overload.removesuffix("out").strip("_").split("_") if "Scalar" in overload else []
        if kinds and kinds[0] == "Scalar":
            args[1] = 5
        if kinds and kinds[1] == "Scalar":
            args[2] = 0.9
    if overload.endswith("out"):
        kwargs.update(case.outputs())
    return tuple(args), kwargs
