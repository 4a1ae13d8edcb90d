"""The op table's rotary embeddings: rotary_embedding (vLLM's cos/sin cache
layout) and apply_rotary_pos_emb.
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
    F32,
    F64,
    FLOAT_DTYPES,
    I32,
    I64,
)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------
# rotary_embedding, apply_rotary_pos_emb


def rope_cache(max_pos: int, rotary_dim: int, dtype: torch.dtype) -> Tensor:
    """A RoPE cos/sin cache [max_pos, rotary_dim] = [cos | sin] of base 10000, in `dtype`."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, rotary_dim, 2, dtype=F64) / rotary_dim))
    freqs = torch.arange(max_pos, dtype=F64)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


# name: (tokens, query heads, kv heads, head_size, rotary_dim)
ROPE_SHAPES = {
    "mha-5x4x16": (5, 4, 4, 16, 16),
    "gqa-6x8/2x32": (6, 8, 2, 32, 32),
    "partial-3x2/1x64r32": (3, 2, 1, 64, 32),
    "tiny-1x1x8r2": (1, 1, 1, 8, 2),
    "empty": (0, 2, 2, 8, 8),
    "llama-32x32/8x128": (32, 32, 8, 128, 128),
}


def _rope_variants(dtype: torch.dtype) -> list[tuple[str, tuple, dict]]:
    """(case name, shape, options) shared by both rotary ops."""
    variants = []
    for name, shape in ROPE_SHAPES.items():
        variants.append((f"neox-{name}", shape, {}))
        variants.append((f"gptj-3d-{name}", shape, {"neox": False, "three_d": True}))
    variants += [
        ("no-key", (7, 3, 1, 16, 16), {"no_key": True}),
        ("out-of-place", (5, 4, 2, 32, 32), {"out": True, "three_d": True}),
        ("rows-strided", (6, 4, 2, 32, 32), {"layout": "rows"}),
    ]
    if dtype != F32:
        variants.append(("float32-cache", (7, 4, 2, 32, 32), {"cache_dtype": F32}))
    return variants


def _rope_qk(inp, dtype, shape, options):
    tokens, hq, hkv, head_size, _ = shape
    if options.get("three_d"):
        q_shape, k_shape = (tokens, hq, head_size), (tokens, hkv, head_size)
    else:
        q_shape, k_shape = (tokens, hq * head_size), (tokens, hkv * head_size)
    layout = options.get("layout", "contiguous")
    query = inp.tensor(q_shape, dtype, layout=layout)
    key = None if options.get("no_key") else inp.tensor(k_shape, dtype, layout=layout)
    outputs = {}
    if options.get("out"):
        outputs = {"query_out": inp.empty(q_shape, dtype), "key_out": inp.empty(k_shape, dtype)}
    return query, key, outputs


def _rotary_embedding_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shape, options):
        def build(inp: Inputs) -> Call:
            tokens, _, _, head_size, rotary_dim = shape
            max_pos = 64
            cache = inp.put(rope_cache(max_pos, rotary_dim, options.get("cache_dtype", dtype)))
            pos_dtype = I32 if options.get("no_key") else I64  # both index dtypes
            positions = inp.put(
                torch.randint(0, max_pos, (tokens,), generator=inp.gen).to(pos_dtype)
            )
            query, key, outputs = _rope_qk(inp, dtype, shape, options)
            kwargs = {"rotary_dim": rotary_dim} if rotary_dim < head_size else {}
            neox = options.get("neox", True)
            return Call((positions, query, key, head_size, cache, neox), kwargs, outputs)

        return Case(name, build)

    return [case(*variant) for variant in _rope_variants(dtype)]


def _apply_rotary_pos_emb_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, shape, options):
        def build(inp: Inputs) -> Call:
            tokens, hq, hkv, head_size, rotary_dim = shape
            table = rope_cache(64, rotary_dim, options.get("cache_dtype", dtype))
            rows = table[torch.randint(0, 64, (tokens,), generator=inp.gen)]
            # Strided cos/sin (halves of one [T, R] buffer) for the rows-strided case.
            if options.get("layout") == "rows":
                both = inp.put(rows)
                cos, sin = both.chunk(2, dim=-1)
            else:
                cos, sin = (inp.put(half.contiguous()) for half in rows.chunk(2, dim=-1))
            # A 2-D query holds heads of size rotary_dim: partial rotary needs 3-D.
            three_d = options.get("three_d") or rotary_dim < head_size
            query, key, outputs = _rope_qk(inp, dtype, shape, {**options, "three_d": three_d})
            kwargs = {"is_neox_style": options.get("neox", True)}
            return Call((query, key, cos, sin), kwargs, outputs)

        return Case(name, build)

    return [case(*variant) for variant in _rope_variants(dtype)]


INFOS: list[OpInfo] = [
    OpInfo(
        "rotary_embedding",
        FLOAT_DTYPES,
        _rotary_embedding_cases,
        ref.rotary_embedding_reference,
        FLOAT32_COMPUTE,
        special_values=True,
    ),
    OpInfo(
        "apply_rotary_pos_emb",
        FLOAT_DTYPES,
        _apply_rotary_pos_emb_cases,
        ref.apply_rotary_pos_emb_reference,
        FLOAT32_COMPUTE,
        special_values=True,
    ),
]
