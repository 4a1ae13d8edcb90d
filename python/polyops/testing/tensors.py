"""Input tensors for parity cases: dtype groups, seeded random data, strided layouts.

Random data is always drawn on CPU from a seeded ``torch.Generator`` and then
copied to the target device, so every device sees bit-identical inputs. The
layout helpers allocate their wider buffers on the tensor's own device.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

F16, BF16, F32, F64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
I8, I16, I32, I64, U8 = torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8

# The three dtypes of the float-only ops (rms_norm, silu_and_mul, ...).
FLOAT_DTYPES = [F16, BF16, F32]
INT_DTYPES = [I8, I16, I32, I64, U8]
# add / mul: everything but bool.
ARITH_DTYPES = [F16, BF16, F32, F64, *INT_DTYPES]
# cast, cat: the ten dtypes polyops handles.
ALL_DTYPES = [torch.bool, *ARITH_DTYPES]


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float16`` -> ``"float16"``."""
    return str(dtype).removeprefix("torch.")


DTYPES_BY_NAME = {dtype_name(d): d for d in ALL_DTYPES}

#: The short names the benchmarks and tables print, e.g. ``torch.bfloat16`` -> ``"bf16"``.
SHORT_NAMES = {
    F16: "f16",
    BF16: "bf16",
    F32: "f32",
    F64: "f64",
    I8: "i8",
    I16: "i16",
    I32: "i32",
    I64: "i64",
    U8: "u8",
    torch.bool: "bool",
}

_BY_ANY_NAME = {
    **DTYPES_BY_NAME,
    **{short: dtype for dtype, short in SHORT_NAMES.items()},
    **{f"torch.{name}": dtype for name, dtype in DTYPES_BY_NAME.items()},
}


def parse_dtypes(
    text: str | Sequence[str], allowed: Sequence[torch.dtype] = ALL_DTYPES
) -> list[torch.dtype]:
    """Dtype names, comma-separated in one string or a list of such strings, in
    order and without repeats: torch's names (``float32``, ``torch.float32``) or
    the short ones (``f32``, ``bf16``, ``i8``, ``u8``, ...); case and spaces do
    not matter. Every parser of dtype names in polyops (the parity command, the
    benchmarks) goes through here.

    Raises ValueError for a name outside `allowed`, or when no name is given.
    """
    values = [text] if isinstance(text, str) else list(text)
    names = [n.strip() for value in values for n in value.split(",") if n.strip()]
    if not names:
        raise ValueError(f"no dtype named in {', '.join(map(repr, values)) or 'nothing'}")
    allowed = list(allowed)
    chosen: list[torch.dtype] = []
    for name in names:
        dtype = _BY_ANY_NAME.get(name.lower())
        if dtype not in allowed:
            choices = ", ".join(f"{SHORT_NAMES[d]} ({dtype_name(d)})" for d in allowed)
            what = "unknown dtype" if dtype is None else "dtype not accepted here:"
            raise ValueError(f"{what} {name!r}; choose from {choices}")
        if dtype not in chosen:
            chosen.append(dtype)
    return chosen


def make_tensor(
    shape: Sequence[int],
    dtype: torch.dtype,
    gen: torch.Generator,
    *,
    scale: float = 1.0,
    low: int | None = None,
    high: int | None = None,
) -> torch.Tensor:
    """A random contiguous CPU tensor of `shape` and `dtype`.

    Floats: standard normal times `scale`, drawn in float64 and rounded once.
    Integers: uniform over ``[low, high]`` (default: the dtype's whole range).
    bool: fair coin flips.
    """
    shape = tuple(shape)
    if dtype.is_floating_point:
        return (torch.randn(shape, generator=gen, dtype=F64) * scale).to(dtype)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    info = torch.iinfo(dtype)
    low = info.min if low is None else low
    high = info.max if high is None else high
    if dtype == I64 and low == info.min and high == info.max:
        # randint's exclusive upper bound cannot exceed int64: draw 64 random bits.
        hi = torch.randint(-(2**31), 2**31, shape, generator=gen, dtype=I64)
        lo = torch.randint(0, 2**32, shape, generator=gen, dtype=I64)
        return (hi << 32) | lo
    return torch.randint(low, high + 1, shape, generator=gen, dtype=I64).to(dtype)


def sentinel(dtype: torch.dtype) -> bool | int | float:
    """The filler of the gaps of a strided buffer: a value no kernel should produce there."""
    if dtype == torch.bool:
        return True
    if dtype.is_floating_point:
        return 777.0 if dtype != BF16 else 768.0
    return 77


def transposed(tensor: torch.Tensor) -> torch.Tensor:
    """Same shape and values, all strides reversed (column-major storage)."""
    dims = list(range(tensor.dim()))[::-1]
    base = torch.empty([tensor.shape[d] for d in dims], dtype=tensor.dtype, device=tensor.device)
    view = base.permute(dims)
    view.copy_(tensor)
    return view


def step_sliced(tensor: torch.Tensor, step: int = 2, fill=None) -> torch.Tensor:
    """Same shape and values, stored every `step`-th element of a wider buffer (last dim).

    The gaps hold `fill` (default: :func:`sentinel`) so that a kernel reading or
    writing them shows up.
    """
    if tensor.dim() == 0:
        return tensor.clone()
    shape = list(tensor.shape)
    wide = shape[:-1] + [shape[-1] * step]
    fill = sentinel(tensor.dtype) if fill is None else fill
    base = torch.full(wide, fill, dtype=tensor.dtype, device=tensor.device)
    view = base[..., ::step]
    view.copy_(tensor)
    return view


def row_strided(tensor: torch.Tensor, extra: int = 3, fill=None) -> torch.Tensor:
    """Same shape and values, rows padded: a slice ``big[..., :hidden]`` of a wider buffer."""
    shape = list(tensor.shape)
    fill = sentinel(tensor.dtype) if fill is None else fill
    base = torch.full(
        shape[:-1] + [shape[-1] + extra], fill, dtype=tensor.dtype, device=tensor.device
    )
    view = base[..., : shape[-1]]
    view.copy_(tensor)
    return view


# name -> function(contiguous tensor) -> same values in that layout
LAYOUTS = {
    "contiguous": lambda t: t,
    "transposed": transposed,
    "step": step_sliced,
    "rows": row_strided,
}


def cu_seqlens(lengths: Sequence[int], device: str | torch.device = "cpu") -> torch.Tensor:
    """Cumulative offsets ``[0, l0, l0 + l1, ...]``, int32: flash_attention's cu_seqlens."""
    offsets = [0]
    for length in lengths:
        offsets.append(offsets[-1] + int(length))
    return torch.tensor(offsets, dtype=I32, device=device)


def paginate(
    key: torch.Tensor,
    value: torch.Tensor,
    kv_lens: Sequence[int],
    block_size: int,
    gen: torch.Generator,
    spare_blocks: int = 3,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Scatter contiguous kv [T, Hkv, D] into paged caches through a random block table.

    Returns ``(key_cache, value_cache, block_table)``: caches [num_blocks,
    block_size, Hkv, D] of key's dtype, block_table int32 [B, max_blocks] (-1
    past each sequence's blocks). Unused cache slots (partially filled last
    blocks, spare blocks) hold NaN, so a kernel that reads past a sequence's
    length shows up. CPU tensors; the block order comes from `gen`.
    """
    needed = [(n + block_size - 1) // block_size for n in kv_lens]
    num_blocks = sum(needed) + spare_blocks
    max_blocks = max(needed, default=0) + 1
    shape = (num_blocks, block_size, *key.shape[1:])
    key_cache = torch.full(shape, math.nan, dtype=key.dtype)
    value_cache = torch.full(shape, math.nan, dtype=value.dtype)
    ids = torch.randperm(num_blocks, generator=gen).to(I32)
    table = torch.full((len(kv_lens), max_blocks), -1, dtype=I32)
    start, used = 0, 0
    for b, n in enumerate(kv_lens):
        table[b, : needed[b]] = ids[used : used + needed[b]]
        used += needed[b]
        for j in range(n):
            block, offset = int(table[b, j // block_size]), j % block_size
            key_cache[block, offset] = key[start + j]
            value_cache[block, offset] = value[start + j]
        start += n
    return key_cache, value_cache, table


def combined_kv(
    key_cache: torch.Tensor, value_cache: torch.Tensor, order: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same caches [num_blocks, block_size, Hkv, D] as vLLM allocates them: views into
    one buffer, K and V side by side in each block ([num_blocks, 2, ...] sliced on dim 1),
    with tokens outside heads ("nhd") or heads outside tokens ("hnd", a permuted view).
    Neither view is contiguous; D stays the unit-stride dim. On the caches' device."""
    blocks, block_size, heads, head_size = key_cache.shape
    if order == "nhd":
        both = torch.empty(
            (blocks, 2, block_size, heads, head_size),
            dtype=key_cache.dtype,
            device=key_cache.device,
        )
        key, value = both[:, 0], both[:, 1]
    elif order == "hnd":
        both = torch.empty(
            (blocks, 2, heads, block_size, head_size),
            dtype=key_cache.dtype,
            device=key_cache.device,
        )
        key, value = both[:, 0].transpose(1, 2), both[:, 1].transpose(1, 2)
    else:
        raise ValueError(f"combined_kv: order must be 'nhd' or 'hnd', got {order!r}")
    key.copy_(key_cache)
    value.copy_(value_cache)
    return key, value
