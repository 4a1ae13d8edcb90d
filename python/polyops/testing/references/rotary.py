"""References of rotary_embedding and apply_rotary_pos_emb."""

from __future__ import annotations

from polyops.testing.references._common import Tensor, _f64

# ---------------------------------------------------------------------------
# rotary_embedding, apply_rotary_pos_emb: FLOAT32_COMPUTE


def rotate_reference(x: Tensor, cos: Tensor, sin: Tensor, head_size: int, neox: bool) -> Tensor:
    """x: [T, H*D] or [T, H, D]; cos/sin: [T, R/2]; rotates the first R dims of each head.

    neox pairs (i, i + R/2), interleaved (GPT-J) pairs (2i, 2i + 1):
    x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin. float64, x's shape."""
    shape = x.shape
    x = _f64(x).reshape(shape[0], shape[1:].numel() // head_size, head_size).clone()
    cos, sin = _f64(cos)[:, None, :], _f64(sin)[:, None, :]
    half = cos.shape[-1]
    if neox:
        i1, i2 = slice(0, half), slice(half, 2 * half)
    else:
        i1, i2 = slice(0, 2 * half, 2), slice(1, 2 * half, 2)
    x1, x2 = x[..., i1].clone(), x[..., i2].clone()
    x[..., i1] = x1 * cos - x2 * sin
    x[..., i2] = x2 * cos + x1 * sin
    return x.reshape(shape)


def rotary_embedding_reference(
    positions: Tensor,
    query: Tensor,
    key: Tensor | None,
    head_size: int,
    cos_sin_cache: Tensor,
    is_neox_style: bool = True,
    *,
    rotary_dim: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """vLLM RoPE: token t uses row positions[t] of cos_sin_cache [max_pos, R] = [cos | sin]."""
    rows = cos_sin_cache.cpu()[positions.cpu().long()]
    half = rows.shape[-1] // 2
    cos, sin = rows[:, :half], rows[:, half:]
    rotated_key = None if key is None else rotate_reference(key, cos, sin, head_size, is_neox_style)
    return rotate_reference(query, cos, sin, head_size, is_neox_style), rotated_key


def apply_rotary_pos_emb_reference(
    query: Tensor,
    key: Tensor | None,
    cos: Tensor,
    sin: Tensor,
    *,
    is_neox_style: bool = True,
) -> tuple[Tensor, Tensor | None]:
    """As :func:`rotary_embedding_reference` with per-token cos/sin [T, R/2]; a 2-D
    query holds heads of size R."""
    head_size = query.shape[-1] if query.dim() == 3 else 2 * cos.shape[-1]
    rotated_key = None if key is None else rotate_reference(key, cos, sin, head_size, is_neox_style)
    return rotate_reference(query, cos, sin, head_size, is_neox_style), rotated_key
