"""Independent float64 references for every polyops operator, with their tolerances.

Each ``<op>_reference`` takes the op's own arguments (minus ``out``-style
outputs, ``implementation_index`` and ``stream``) and returns what the op
returns, computed in plain float64 torch from the math: never a call of the
polyops op, nor of the torch function the kernel mirrors (no
``F.scaled_dot_product_attention``, ``F.silu``, ``torch.softmax``, ``torch.cat``).
Inputs are the op's own low-precision tensors, upcast exactly to float64, so
the reference sees the rounded values the kernel sees. Float results come
back as float64 (unrounded); integer, bool and copied results come back in
their own dtype and are compared exactly.

A :class:`Tolerance` judges one result element: ``|actual - expected| <= atol
+ rtol * |expected|`` (NaN must meet NaN, an infinity the same infinity).
Every table below says why its numbers are what they are. In the notation
used there, ``u`` is the unit roundoff of the result dtype, half an ulp
relative: 2**-11 (float16), 2**-8 (bfloat16), 2**-24 (float32), 2**-53 (float64).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from fractions import Fraction
from typing import NamedTuple

import torch

from polyops.testing.tensors import BF16, F16, F32, F64, I64

Tensor = torch.Tensor


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


def _f64(tensor: Tensor) -> Tensor:
    return tensor.to(device="cpu", dtype=F64)


# ---------------------------------------------------------------------------
# add, mul: ADD / ROUNDED (floats), EXACT (integers, which wrap)

# add: as ROUNDED, except that with alpha != 1 float16/bfloat16 results are
# rounded twice, as torch's CPU kernel rounds them: to float32 (the fused
# input + alpha * other) and then to the dtype, which errs by at most
# u + u_f32 (1 + u) < u + 2 u_f32 relative; in bfloat16's subnormal range
# the float32 step adds up to half a float32 subnormal (2**-150). float32's
# reference is the float64 sum of input and the exact alpha * other, itself
# rounded once (2**-53 relative, so rtol u_f32 + 2**-52).
ADD = {
    F16: Tolerance(UNIT_ROUNDOFF[F16] + 2 * UNIT_ROUNDOFF[F32], 2.0**-25),
    BF16: Tolerance(UNIT_ROUNDOFF[BF16] + 2 * UNIT_ROUNDOFF[F32], 2.0**-134 + 2.0**-150),
    F32: Tolerance(UNIT_ROUNDOFF[F32] + 2.0**-52, 2.0**-150),
    F64: ROUNDED[F64],
}


def _wrap(values: Tensor, dtype: torch.dtype) -> Tensor:
    """Exact int64 values reduced modulo 2**bits into `dtype`'s range (two's complement)."""
    info = torch.iinfo(dtype)
    modulus = 1 << info.bits
    return (torch.remainder(values - info.min, modulus) + info.min).to(dtype)


def _integer_binary(op: str, a: Tensor, b: Tensor, alpha: int) -> Tensor:
    """Integer ``a + alpha * b`` or ``a * b`` wrapped modulo 2**bits (a and b of one shape):
    exact in int64 up to 32-bit operands (|alpha| < 2**31), in Python's unbounded
    integers for int64."""
    if a.dtype != I64:
        wide = a.long() + alpha * b.long() if op == "add" else a.long() * b.long()
        return _wrap(wide, a.dtype)
    left = a.reshape(-1).tolist()
    right = b.reshape(-1).tolist()
    apply = (lambda x, y: x + alpha * y) if op == "add" else (lambda x, y: x * y)
    wrapped = [(apply(x, y) + 2**63) % 2**64 - 2**63 for x, y in zip(left, right, strict=True)]
    return torch.tensor(wrapped, dtype=I64).reshape(a.shape)


def add_alpha(dtype: torch.dtype, alpha: float) -> float:
    """alpha as add applies it to `dtype` tensors: rounded to a float dtype, through
    float32 for float16/bfloat16 (torch's conversion); unchanged for integers."""
    if not dtype.is_floating_point or dtype == F64:
        return alpha
    return torch.tensor(float(alpha), dtype=F32).to(dtype).item()


def _fused_add(x: float, alpha: float, y: float) -> float:
    """x + alpha * y rounded once to float64 (a fused multiply-add), in exact rational
    arithmetic for finite operands."""
    if not (math.isfinite(alpha) and math.isfinite(y)):
        return x + alpha * y  # alpha * y is inf or NaN however it is computed
    if not math.isfinite(x):
        return x  # x plus a finite value, however large
    exact = Fraction(x) + Fraction(alpha) * Fraction(y)
    try:
        return float(exact)
    except OverflowError:
        return math.copysign(math.inf, exact)


def _binary(op: str, input: Tensor, other: Tensor, alpha: float = 1) -> Tensor:
    shape = torch.broadcast_shapes(input.shape, other.shape)
    a, b = input.cpu().expand(shape), other.cpu().expand(shape)
    if not a.dtype.is_floating_point:
        return _integer_binary(op, a, b, int(alpha))
    if op == "mul":
        # float64 holds the exact product of two values of a <= float32 format.
        return (_f64(a) * _f64(b)).clone()
    alpha = add_alpha(a.dtype, alpha)
    if a.dtype == F64 and alpha != 1:
        fused = [
            _fused_add(x, alpha, y)
            for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist(), strict=True)
        ]
        return torch.tensor(fused, dtype=F64).reshape(shape)
    # alpha * b is exact in float64 for a <= float32 format (two <= 24-bit
    # significands), the sum exact unless the exponents are far apart.
    return (_f64(a) + alpha * _f64(b)).clone()


def add_reference(input: Tensor, other: Tensor, *, alpha: float = 1) -> Tensor:
    """``input + alpha * other``, input and other broadcast to one shape: float64 (alpha
    rounded to the dtype first, see :func:`add_alpha`), or the wrapped integers."""
    return _binary("add", input, other, alpha)


def mul_reference(input: Tensor, other: Tensor) -> Tensor:
    """``input * other``, input and other broadcast to one shape: float64, or the
    wrapped integers."""
    return _binary("mul", input, other)


# ---------------------------------------------------------------------------
# cast: ROUNDED to a float dtype, EXACT to an integer or bool dtype


def cast_reference(input: Tensor, dtype: torch.dtype) -> Tensor:
    """`input` converted to `dtype`.

    To a float dtype: the exact value as float64 (the kernel must round it
    once), or +-inf where it rounds past the largest finite value: from
    (2 - 2**-p) * 2**emax on, p the dtype's precision. To bool: ``!= 0``. To an
    integer dtype: floats truncate toward zero (the cases keep them in range),
    integers wrap modulo 2**bits.
    """
    x = input.cpu()
    if dtype.is_floating_point:
        value = _f64(x)
        if dtype == F64:
            return value
        info = torch.finfo(dtype)
        precision = 1 - int(math.log2(info.eps))
        overflow = (2 - 2.0**-precision) * 2.0 ** int(math.log2(info.max))
        return torch.where(value.abs() >= overflow, value.sign() * math.inf, value)
    if dtype == torch.bool:
        return x != 0
    if x.dtype.is_floating_point:
        return torch.trunc(_f64(x)).to(dtype)
    return x.to(I64) if dtype == I64 else _wrap(x.to(I64), dtype)


# ---------------------------------------------------------------------------
# cat, reshape_and_cache: EXACT (copies)


def cat_reference(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    """The pieces written one after another into slices of a fresh tensor."""
    tensors = [t.cpu() for t in tensors]
    dim = dim % tensors[0].dim()
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    result = torch.empty(shape, dtype=tensors[0].dtype)
    offset = 0
    for tensor in tensors:
        result.narrow(dim, offset, tensor.shape[dim]).copy_(tensor)
        offset += tensor.shape[dim]
    return result


def reshape_and_cache_reference(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> tuple[Tensor, Tensor]:
    """The caches after the write: token t goes to block slot // B, offset slot % B
    of both caches (B = block_size; slot < 0 skips the token)."""
    key_cache, value_cache = key_cache.cpu().clone(), value_cache.cpu().clone()
    block_size = key_cache.shape[1]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        key_cache[slot // block_size, slot % block_size] = key[t].cpu()
        value_cache[slot // block_size, slot % block_size] = value[t].cpu()
    return key_cache, value_cache


# ---------------------------------------------------------------------------
# rms_norm, add_rms_norm: FLOAT32_COMPUTE


def rms_norm_reference(input: Tensor, weight: Tensor, eps: float = 1e-6) -> Tensor:
    """``x / sqrt(mean(x**2, -1) + eps) * weight``, in float64."""
    x = _f64(input)
    mean_square = (x * x).mean(dim=-1, keepdim=True)
    return x / torch.sqrt(mean_square + eps) * _f64(weight)


def add_rms_norm_reference(
    x1: Tensor, x2: Tensor, gamma: Tensor, eps: float = 1e-6
) -> tuple[Tensor, Tensor]:
    """``(y, x)``: x = x1 + x2 rounded once to the dtype, as the contract says, and
    y = rms_norm(x, gamma, eps) of that rounded x. Both float64."""
    x = (_f64(x1) + _f64(x2)).to(x1.dtype)
    return rms_norm_reference(x, gamma, eps), _f64(x)


# ---------------------------------------------------------------------------
# silu_and_mul, swiglu: FLOAT32_COMPUTE


def silu_reference(x: Tensor) -> Tensor:
    """``x / (1 + exp(-x))`` in float64."""
    x = _f64(x)
    return x / (1.0 + torch.exp(-x))


def silu_and_mul_reference(input: Tensor) -> Tensor:
    """``silu(input[..., :d]) * input[..., d:]``, d = last dim // 2."""
    d = input.shape[-1] // 2
    return silu_reference(input[..., :d]) * _f64(input[..., d:])


def swiglu_reference(input: Tensor, gate: Tensor) -> Tensor:
    """``input * silu(gate)``."""
    return _f64(input) * silu_reference(gate)


# ---------------------------------------------------------------------------
# causal_softmax: FLOAT32_COMPUTE; attention: ATTENTION


def _masked_softmax(scores: Tensor, visible: Tensor, *, all_neg_inf_is_zero: bool) -> Tensor:
    """softmax over the last dim of the visible entries, as torch.softmax computes it:
    exp(s - max) / sum, so a NaN or +inf visible entry makes the row NaN. A row whose
    visible entries are all -inf is NaN (0 / 0, torch.softmax; causal_softmax) or, with
    `all_neg_inf_is_zero`, 0 (SDPA; attention). Rows that see nothing are 0, and hidden
    entries are 0 whatever they hold (docs/user/api.md, "NaN and Inf")."""
    if scores.shape[-1] == 0:
        return torch.zeros_like(scores)
    masked = scores.masked_fill(~visible, -math.inf)
    row_max = masked.amax(dim=-1, keepdim=True)  # NaN if the row holds one
    if all_neg_inf_is_zero:
        row_max = torch.where(row_max == -math.inf, 0.0, row_max)
    e = torch.where(visible, torch.exp(masked - row_max), 0.0)
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(visible & (total != 0), e / total, 0.0)


def causal_softmax_reference(input: Tensor) -> Tensor:
    """Softmax over k of [..., q, k]; key j visible to row i iff j <= i + k - q."""
    q, k = input.shape[-2:]
    visible = torch.arange(k)[None, :] <= torch.arange(q)[:, None] + (k - q)
    return _masked_softmax(_f64(input), visible, all_neg_inf_is_zero=False)


def _attend(q: Tensor, k: Tensor, v: Tensor, scale: float, visible: Tensor) -> Tensor:
    """softmax(q k^T * scale, masked) v for one sequence: q [Lq, Hq, D], k/v [Lk, Hkv, D]
    (query head h reads kv head h // (Hq / Hkv)), visible [Lq, Lk] bool; float64 [Lq, Hq, D].

    Hidden keys are left out of the sum, not weighted by 0; a visible key's value
    reaches the output even at weight 0 (0 * inf = NaN), as in IEEE arithmetic."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    probs = _masked_softmax(scores, visible[None], all_neg_inf_is_zero=True)  # [Hq, Lq, Lk]
    if bool(torch.isfinite(v).all()):
        return torch.einsum("hqk,khd->qhd", probs, v)
    # Elementwise, not a matrix product (which may skip zero weights or hidden keys'
    # NaN times 0): only with non-finite values, where it matters.
    terms = probs[..., None] * v.permute(1, 0, 2)[:, None]  # [Hq, Lq, Lk, D]
    return torch.where(visible[None, :, :, None], terms, 0.0).sum(dim=2).permute(1, 0, 2)


def _gather_paged(cache: Tensor, table_row: Tensor, length: int) -> Tensor:
    """Tokens 0..length-1 of one sequence from a paged cache [blocks, block_size, H, D]."""
    block_size = cache.shape[1]
    j = torch.arange(length)
    return cache[table_row.long()[j // block_size], j % block_size]


def flash_attention_reference(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    cu_seqlens_q: Tensor,
    cu_seqlens_kv: Tensor,
    block_table: Tensor | None = None,
    scale: float | None = None,
    causal: bool = True,
    window_left: int = -1,
    window_right: int = -1,
    sliding_window: int | None = None,
    cu_seqlens_q_host: Tensor | None = None,
    cu_seqlens_kv_host: Tensor | None = None,
) -> Tensor:
    """Varlen attention per sequence b: query rows cu_seqlens_q[b]:[b+1] over the kv
    tokens cu_seqlens_kv[b]:[b+1] (contiguous, or paged through block_table).
    Query row i of a sequence sits at position i + kv_len - q_len; key j is
    visible iff j <= pos (causal), j >= pos - window_left, j <= pos + window_right
    (a window side < 0 is unbounded; sliding_window=W means (W - 1, 0)).
    Rows that see no key are 0. The *_host copies equal cu_seqlens_q / cu_seqlens_kv
    by contract and are not read. float64 [Tq, Hq, D]."""
    if sliding_window is not None:
        window_left, window_right = sliding_window - 1, 0
    q, k, v = _f64(query), _f64(key), _f64(value)
    cu_q, cu_kv = cu_seqlens_q.tolist(), cu_seqlens_kv.tolist()
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = torch.zeros(q.shape, dtype=F64)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = cu_q[b], cu_q[b + 1], cu_kv[b], cu_kv[b + 1]
        q_len, kv_len = q1 - q0, k1 - k0
        if block_table is None:
            ks, vs = k[k0:k1], v[k0:k1]
        else:
            row = block_table[b].cpu()
            ks, vs = _gather_paged(k, row, kv_len), _gather_paged(v, row, kv_len)
        pos = torch.arange(q_len)[:, None] + kv_len - q_len
        j = torch.arange(kv_len)[None, :]
        visible = torch.ones(q_len, kv_len, dtype=torch.bool)
        if causal:
            visible &= j <= pos
        if window_left >= 0:
            visible &= j >= pos - window_left
        if window_right >= 0:
            visible &= j <= pos + window_right
        out[q0:q1] = _attend(q[q0:q1], ks, vs, scale, visible)
    return out


def paged_attention_reference(
    query: Tensor,
    key_cache: Tensor,
    value_cache: Tensor,
    seq_lens: Tensor,
    block_table: Tensor,
    *,
    scale: float | None = None,
    seq_lens_host: Tensor | None = None,
    block_table_host: Tensor | None = None,
) -> Tensor:
    """Decode: query row b [Hq, D] over the first seq_lens[b] tokens of its paged kv,
    no mask (length 0: zeros). The *_host copies equal seq_lens / block_table by
    contract and are not read. float64 [B, Hq, D]."""
    q, k, v = _f64(query), _f64(key_cache), _f64(value_cache)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    out = torch.zeros(q.shape, dtype=F64)
    table = block_table.cpu()
    for b, length in enumerate(seq_lens.tolist()):
        ks, vs = _gather_paged(k, table[b], length), _gather_paged(v, table[b], length)
        visible = torch.ones(1, length, dtype=torch.bool)
        out[b : b + 1] = _attend(q[b : b + 1], ks, vs, scale, visible)
    return out


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


# ---------------------------------------------------------------------------
# matmul, gemm, linear: PRODUCT


def matmul_reference(input: Tensor, other: Tensor) -> Tensor:
    """The float64 matrix product, a 2-D operand (or a batch of one) shared by the batch.

    float64 torch matmul (exact products, 53-bit sums): a different algorithm
    and precision from the float32 BLAS kernel, its error ~k 2**-53 is far
    below PRODUCT.
    """
    return _f64(input) @ _f64(other)


def gemm_reference(
    a: Tensor,
    b: Tensor,
    c: Tensor | None = None,
    *,
    alpha: float = 1.0,
    beta: float = 0.0,
    trans_a: bool = False,
    trans_b: bool = False,
) -> Tensor:
    """``alpha op(a) op(b) + beta c`` with BLAS conventions: alpha == 0 does not read a, b;
    beta == 0 (or c None) does not read c; c broadcasts to the result."""
    op_a = _f64(a).mT if trans_a else _f64(a)
    op_b = _f64(b).mT if trans_b else _f64(b)
    batch = torch.broadcast_shapes(op_a.shape[:-2], op_b.shape[:-2])
    result = torch.zeros((*batch, op_a.shape[-2], op_b.shape[-1]), dtype=F64)
    if alpha != 0:
        result = result + alpha * (op_a @ op_b)
    if c is not None and beta != 0:
        result = result + beta * _f64(c)
    return result


def linear_reference(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``."""
    result = _f64(input) @ _f64(weight).T
    return result if bias is None else result + _f64(bias)


# ---------------------------------------------------------------------------
# topk_topp_sampling: EXACT token ids given `uniform` (or `seed`)
#
# The header src/base/topk_topp_sampling.h specifies every float32 step, so
# the reference replays it: torch's stable sort for the order, torch float32
# elementwise ops for the specified Exp, and a Python loop that rounds every
# partial sum to float32 (a float64 sum of two float32 values rounded once to
# float32 is the correctly rounded float32 sum, since 53 >= 2*24 + 2).
#
# A device whose kernel cannot replay those float32 steps bit for bit is
# judged by :func:`sampling_token_plausible` (the token's float64 probability
# interval within SAMPLING_EPS of u). That is the declared exception of npu
# (aclnn's softmax and cumsum round their own way; docs/backends/ascend.md); CPU and
# CUDA must match exactly. OpInfo.device_rules routes npu records to
# :func:`topk_topp_sampling_implausible_rows`.

SAMPLING_EPS = 1e-5
ONE_MINUS = 1.0 - 2.0**-24  # the largest float32 below 1


def _f32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def _c(hex_literal: str) -> Tensor:
    return torch.tensor(float.fromhex(hex_literal), dtype=F32)


EXP_L = _c("0x1.715476p+0")
EXP_C1, EXP_C2 = _c("0x1.63p-1"), _c("-0x1.bd0106p-13")
EXP_P = [
    _c(h)
    for h in ("0x1.a0d2cep-13", "0x1.6e879cp-10", "0x1.11121p-7", "0x1.555382p-5", "0x1.555554p-3")
] + [_c("0x1.0p-1")]


def spec_exp(d: Tensor) -> Tensor:
    """The header's Exp(d) for float32 d <= 0, one rounded torch float32 op at a time."""
    if d.dtype != F32:
        raise ValueError(f"spec_exp: expected float32, got {d.dtype}")
    keep = d >= -80
    d = torch.where(keep, d, torch.zeros_like(d))
    n = torch.floor(d * EXP_L + _c("0x1p-1"))
    r = (d - n * EXP_C1) - n * EXP_C2
    q = EXP_P[0].expand_as(r)
    for coefficient in EXP_P[1:]:
        q = q * r + coefficient
    y = (q * (r * r) + r) + _c("0x1p0")
    scale = ((n.to(torch.int32) + 127) << 23).view(F32)
    return torch.where(keep, y * scale, torch.zeros_like(y))


def splitmix_uniform(seed: int, row: int) -> float:
    """The header's SplitMix64Uniform(seed, row) in [0, 1 - 2**-24]."""
    mask = (1 << 64) - 1
    z = (seed + (row + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    z ^= z >> 31
    return (z >> 40) * 2.0**-24


def _top_k(vocab: int, k: int) -> int:
    return vocab if k <= 0 or k >= vocab else k


def sampling_reference_row(x: Tensor, k: int, p: float, u: float) -> int:
    """The header's algorithm for one row of float32 logits: the sampled token id.

    NaN counts as -inf; tokens tied with the k-th largest logit are kept; +inf
    logits share the mass; a row with neither finite nor +inf logits is uniform."""
    x = torch.where(torch.isnan(x), -math.inf, x)
    order = torch.sort(x, descending=True, stable=True).indices
    xs = x[order]
    if xs[0] == math.inf:
        weights = (xs == math.inf).float()
    elif xs[0] == -math.inf:
        weights = torch.ones_like(xs)
    else:
        weights = spec_exp(xs - xs[0])
    top = _top_k(x.numel(), k)
    top = int((xs >= xs[top - 1]).sum())  # the k-th logit's ties are kept
    cumulative = [0.0]
    for weight in weights[:top].tolist():
        cumulative.append(_f32(cumulative[-1] + weight))
    p = _f32(p)
    prefix = top
    if p < 1.0:
        threshold = _f32(p * cumulative[top])
        prefix = next((j for j in range(1, top + 1) if cumulative[j] >= threshold), top)
    mass = cumulative[prefix]
    target = _f32(_f32(u) * mass)
    chosen = next(
        j for j in range(prefix) if cumulative[j + 1] > target or cumulative[j + 1] == mass
    )
    return int(order[chosen])


def _per_row(value, rows: int) -> list:
    return value.tolist() if isinstance(value, Tensor) else [value] * rows


def _sampling_rows(
    logits: Tensor, top_k, top_p, uniform: Tensor | None, seed: int | None
) -> tuple[list, list, list]:
    """Per row: k, p and u (from `uniform`, else splitmix64 of `seed`)."""
    rows = logits.shape[0]
    us = (
        uniform.tolist()
        if uniform is not None
        else [splitmix_uniform(seed, b) for b in range(rows)]
    )
    return _per_row(top_k, rows), _per_row(top_p, rows), us


def topk_topp_sampling_reference(
    logits: Tensor,
    top_k: int | Tensor,
    top_p: float | Tensor,
    uniform: Tensor | None = None,
    seed: int | None = None,
) -> Tensor:
    """int64 [B]: the token of each row, u from `uniform` or from `seed` (splitmix64)."""
    ks, ps, us = _sampling_rows(logits, top_k, top_p, uniform, seed)
    tokens = [
        sampling_reference_row(logits[b].cpu().float(), int(ks[b]), ps[b], us[b])
        for b in range(logits.shape[0])
    ]
    return torch.tensor(tokens, dtype=I64)


def sampling_token_plausible(
    x: Tensor, k: int, p: float, u: float, token: int, eps: float = SAMPLING_EPS
) -> bool:
    """Whether `token` is an acceptable draw for logits row `x` when exactness cannot be had.

    In float64: order the tokens as the header does, keep the top k, and
    normalize by the mass C_P of any prefix P the top-p rule could choose when
    p moves by `eps`. The token at rank j is plausible iff j < P and u lies
    within `eps` of its interval [C_j / C_P, C_{j+1} / C_P] for one such P.
    """
    x = _f64(x)
    x = torch.where(torch.isnan(x), -math.inf, x)
    order = torch.sort(x, descending=True, stable=True).indices
    xs = x[order]
    top = _top_k(x.numel(), k)
    top = int((xs >= xs[top - 1]).sum())
    if xs[0] == math.inf:
        weights = (xs == math.inf).double()[:top]
    elif xs[0] == -math.inf:
        weights = torch.ones(top, dtype=F64)
    else:
        weights = torch.exp(xs - xs[0])[:top]
    cumulative = torch.cat([torch.zeros(1, dtype=F64), weights.cumsum(0)]).tolist()
    total = cumulative[top]
    if _f32(p) >= 1.0:
        prefixes = [top]
    else:
        first = [
            next((j for j in range(1, top + 1) if cumulative[j] >= q * total), top)
            for q in (p - eps, p + eps)
        ]
        prefixes = range(first[0], first[1] + 1)
    rank = (order == token).nonzero().flatten().tolist()
    if not rank:
        return False
    j = rank[0]
    return any(
        j < prefix
        and cumulative[j] / cumulative[prefix] - eps
        <= u
        <= cumulative[j + 1] / cumulative[prefix] + eps
        for prefix in prefixes
    )


def topk_topp_sampling_implausible_rows(
    tokens: Tensor,
    logits: Tensor,
    top_k: int | Tensor,
    top_p: float | Tensor,
    uniform: Tensor | None = None,
    seed: int | None = None,
) -> list[int]:
    """The rows of int64 `tokens` [B] that :func:`sampling_token_plausible` rejects.

    logits [B, V] (any float dtype), top_k / top_p scalars or [B] tensors and
    uniform float32 [B] (or seed) as the op took them. u outside [0, 1) is
    judged as the clamped value the npu slot uses (u < 0 as 0, u >= 1 as the
    largest float32 below 1).
    """
    ks, ps, us = _sampling_rows(logits, top_k, top_p, uniform, seed)
    tokens = tokens.cpu().tolist()
    return [
        b
        for b in range(logits.shape[0])
        if not sampling_token_plausible(
            logits[b].cpu().float(), int(ks[b]), ps[b], min(max(us[b], 0.0), ONE_MINUS), tokens[b]
        )
    ]
