"""The op table's paged KV-cache write, reshape_and_cache."""

from __future__ import annotations

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
)
from polyops.testing.tensors import (
    FLOAT_DTYPES,
    I32,
    I64,
    combined_kv,
    sentinel,
)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------
# reshape_and_cache


def _reshape_and_cache_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        tokens,
        heads,
        head_size,
        blocks,
        block_size,
        *,
        pad=False,
        slot_dtype=I64,
        strided=False,
        kv_order=None,
    ):
        def build(inp: Inputs) -> Call:
            if strided:  # key / value: slices of one fused qkv buffer
                qkv = inp.tensor((tokens, 3, heads, head_size), dtype)
                key, value = qkv[:, 1], qkv[:, 2]
            else:
                key = inp.tensor((tokens, heads, head_size), dtype)
                value = inp.tensor((tokens, heads, head_size), dtype)
            slots = torch.randperm(blocks * block_size, generator=inp.gen)[:tokens]
            if pad and tokens > 2:
                slots[1] = -1  # a padding token: skipped
            shape = (blocks, block_size, heads, head_size)
            key_cache = inp.put(torch.full(shape, sentinel(dtype), dtype=dtype))
            value_cache = inp.put(torch.full(shape, -sentinel(dtype), dtype=dtype))
            if kv_order:  # vLLM's caches: views into one K/V allocation
                key_cache, value_cache = combined_kv(key_cache, value_cache, kv_order)
            return Call((key, value, key_cache, value_cache, inp.put(slots.to(slot_dtype))))

        return Case(name, build)

    return [
        case("7x2x8-4blocks-of-4", 7, 2, 8, 4, 4),
        case("padding-slot", 9, 2, 8, 4, 4, pad=True),
        case("int32-slots", 5, 1, 16, 3, 2, slot_dtype=I32),
        case("strided-qkv", 6, 4, 8, 3, 4, strided=True, pad=True),
        case("vllm-nhd-caches", 11, 2, 16, 4, 4, pad=True, kv_order="nhd"),
        case("vllm-hnd-caches", 11, 2, 16, 4, 4, pad=True, kv_order="hnd"),
        case("vllm-hnd-1head", 9, 1, 32, 3, 4, kv_order="hnd"),
        case("0-tokens", 0, 2, 8, 2, 4),
        case("llama-64x8x128-b16", 64, 8, 128, 6, 16),
    ]


def _cache_results(returned: Any, call: Call) -> tuple:
    """reshape_and_cache returns None: compare the caches it wrote."""
    return call.args[2], call.args[3]


INFOS: list[OpInfo] = [
    OpInfo(
        "reshape_and_cache",
        FLOAT_DTYPES,
        _reshape_and_cache_cases,
        ref.reshape_and_cache_reference,
        EXACT,
        _cache_results,
        special_values=True,
    ),
]
