"""The cases of ``memory_bound.py``: one op at one dtype, set up on its tensors.

Each ``setup_<op>(dtype, scale)`` builds the op's inputs and outputs (sizes divided by
``scale`` in ``--quick`` mode) and returns a :class:`Setup`: the polyops call and the torch
equivalent to time, the bytes one call moves, and a small correctness check run before
timing. The shapes and the byte counts are documented in ``memory_bound.py``'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

import polyops

EPS = 1e-6

Fn = Callable[[], object]


@dataclass
class Setup:
    """One op at one dtype: what to time, how many bytes it moves, how to check it."""

    op: str
    shape: str
    nbytes: int
    polyops_fn: Fn
    torch_name: str
    torch_fn: Fn
    check: Callable[[], None]


def _tol(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}


def setup_rms_norm(dtype: torch.dtype, scale: int) -> Setup:
    """x [4096, 4096] (quick: [4096 / scale, 4096]) -> y."""
    rows, cols = 4096 // scale, 4096
    x = torch.randn(rows, cols).to(dtype)
    w = torch.randn(cols).to(dtype)
    y = torch.empty_like(x)
    rms_norm = torch.nn.functional.rms_norm

    def check() -> None:
        expected = rms_norm(x[:64].float(), (cols,), w.float(), EPS)
        got = polyops.rms_norm(x[:64], w, EPS)
        torch.testing.assert_close(got.float(), expected, **_tol(dtype))

    return Setup(
        "rms_norm",
        f"{rows}x{cols}",
        2 * x.numel() * x.element_size(),
        lambda: polyops.rms_norm(x, w, EPS, out=y),
        "F.rms_norm",
        lambda: rms_norm(x, (cols,), w, EPS),
        check,
    )


def setup_add_rms_norm(dtype: torch.dtype, scale: int) -> Setup:
    """x1, x2 [4096, 4096] (quick: [4096 / scale, 4096]) -> y, x = x1 + x2."""
    rows, cols = 4096 // scale, 4096
    x1 = torch.randn(rows, cols).to(dtype)
    x2 = torch.randn(rows, cols).to(dtype)
    w = torch.randn(cols).to(dtype)
    y, x = torch.empty_like(x1), torch.empty_like(x1)
    rms_norm = torch.nn.functional.rms_norm

    def torch_fn() -> object:
        s = x1 + x2
        return rms_norm(s, (cols,), w, EPS), s

    def check() -> None:
        s = (x1[:64] + x2[:64]).float()
        got_y, got_x = polyops.add_rms_norm(x1[:64], x2[:64], w, EPS)
        torch.testing.assert_close(got_x.float(), s, rtol=0, atol=0)
        expected = rms_norm(s, (cols,), w.float(), EPS)
        torch.testing.assert_close(got_y.float(), expected, **_tol(dtype))

    return Setup(
        "add_rms_norm",
        f"{rows}x{cols}",
        4 * x1.numel() * x1.element_size(),
        lambda: polyops.add_rms_norm(x1, x2, w, EPS, y_out=y, x_out=x),
        "x1 + x2, F.rms_norm",
        torch_fn,
        check,
    )


def setup_mul(dtype: torch.dtype, scale: int) -> Setup:
    """a * b, [4096, 4096] each (quick: [4096 / scale, 4096])."""
    rows, cols = 4096 // scale, 4096
    a = torch.randn(rows, cols).to(dtype)
    b = torch.randn(rows, cols).to(dtype)
    y, y_ref = torch.empty_like(a), torch.empty_like(a)

    def check() -> None:
        torch.testing.assert_close(polyops.mul(a[:64], b[:64]), a[:64] * b[:64], rtol=0, atol=0)

    return Setup(
        "mul",
        f"{rows}x{cols}",
        3 * a.numel() * a.element_size(),
        lambda: polyops.mul(a, b, out=y),
        "torch.mul(out=)",
        lambda: torch.mul(a, b, out=y_ref),
        check,
    )


def setup_causal_softmax(dtype: torch.dtype, scale: int) -> Setup:
    """[32, 1024, 1024] (quick: [4, 1024 / scale, 1024 / scale])."""
    b, q = (32, 1024) if scale == 1 else (4, 1024 // scale)
    x = torch.randn(b, q, q).to(dtype)
    y = torch.empty_like(x)
    mask = torch.ones(q, q, dtype=torch.bool).triu(1)

    def ref(t: torch.Tensor) -> torch.Tensor:
        return torch.softmax(t.masked_fill(mask, float("-inf")), -1)

    def check() -> None:
        part = x[:2]
        expected = ref(part.float())
        torch.testing.assert_close(polyops.causal_softmax(part).float(), expected, **_tol(dtype))

    return Setup(
        "causal_softmax",
        f"{b}x{q}x{q}",
        2 * x.numel() * x.element_size(),
        lambda: polyops.causal_softmax(x, out=y),
        "softmax(masked_fill)",
        lambda: ref(x),
        check,
    )


def _torch_rope(
    positions: torch.Tensor, x: torch.Tensor, cache: torch.Tensor, head: int
) -> torch.Tensor:
    """Neox rotary of x [T, H * head] with cos_sin_cache [P, head]; returns a new tensor."""
    t = x.shape[0]
    half = head // 2
    xs = x.view(t, -1, head)
    rows = cache.index_select(0, positions)
    cos = rows[:, :half].unsqueeze(1)
    sin = rows[:, half:].unsqueeze(1)
    x1, x2 = xs[..., :half], xs[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).view(t, -1)


def setup_rotary_embedding(dtype: torch.dtype, scale: int) -> Setup:
    """T = 4096 tokens, 32 heads of 128 for query and key, neox, in place."""
    t, heads, head = 4096 // scale, 32, 128
    positions = torch.arange(t, dtype=torch.int64)
    theta = 1.0 / (10000.0 ** (torch.arange(0, head, 2, dtype=torch.float64) / head))
    freqs = torch.outer(torch.arange(t, dtype=torch.float64), theta)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)
    q = torch.randn(t, heads * head).to(dtype)
    k = torch.randn(t, heads * head).to(dtype)
    q_ref, k_ref = q.clone(), k.clone()

    def torch_inplace() -> None:
        q_ref.copy_(_torch_rope(positions, q_ref, cache, head))
        k_ref.copy_(_torch_rope(positions, k_ref, cache, head))

    def check() -> None:
        qc, kc = q[:64].clone(), k[:64].clone()
        polyops.rotary_embedding(positions[:64], qc, kc, head, cache, True)
        # Compare against the float32 torch formula on the same inputs.
        c32 = cache.float()
        eq = _torch_rope(positions[:64], q[:64].float(), c32, head)
        ek = _torch_rope(positions[:64], k[:64].float(), c32, head)
        torch.testing.assert_close(qc.float(), eq, **_tol(dtype))
        torch.testing.assert_close(kc.float(), ek, **_tol(dtype))

    s = q.element_size()
    nbytes = 2 * (q.numel() + k.numel()) * s + t * head * cache.element_size() + t * 8
    return Setup(
        "rotary_embedding",
        f"T{t} 2x{heads}x{head}",
        nbytes,
        lambda: polyops.rotary_embedding(positions, q, k, head, cache, True),
        "rope with torch ops",
        torch_inplace,
        check,
    )


def setup_silu_and_mul(dtype: torch.dtype, scale: int, slot: int | None = None) -> Setup:
    """x [4096, 2 * 11008] -> [4096, 11008]; `slot` picks the implementation (default)."""
    t, d = 4096 // scale, 11008
    x = torch.randn(t, 2 * d).to(dtype)
    y = torch.empty(t, d, dtype=dtype)
    silu = torch.nn.functional.silu

    def check() -> None:
        part = x[:64]
        expected = silu(part[..., :d].float()) * part[..., d:].float()
        got = polyops.silu_and_mul(part, implementation_index=slot)
        torch.testing.assert_close(got.float(), expected, **_tol(dtype))

    return Setup(
        "silu_and_mul" if slot is None else "silu_and_mul_vllm",
        f"{t}x{2 * d}",
        (x.numel() + y.numel()) * x.element_size(),
        lambda: polyops.silu_and_mul(x, out=y, implementation_index=slot),
        "F.silu(a) * b",
        lambda: silu(x[..., :d]) * x[..., d:],
        check,
    )


def setup_reshape_and_cache(dtype: torch.dtype, scale: int) -> Setup:
    """T = 4096, Hkv = 8, D = 128, block 16, twice as many cache slots as tokens."""
    t, hkv, head, block = 4096 // scale, 8, 128, 16
    num_blocks = 2 * t // block
    gen = torch.Generator().manual_seed(0)
    key = torch.randn(t, hkv, head, generator=gen).to(dtype)
    value = torch.randn(t, hkv, head, generator=gen).to(dtype)
    slots = torch.randperm(num_blocks * block, generator=gen)[:t].to(torch.int64)
    caches = [torch.zeros(num_blocks, block, hkv, head, dtype=dtype) for _ in range(4)]
    key_cache, value_cache, key_ref, value_ref = caches

    def torch_fn() -> None:
        key_ref.view(-1, hkv, head).index_copy_(0, slots, key)
        value_ref.view(-1, hkv, head).index_copy_(0, slots, value)

    def check() -> None:
        polyops.reshape_and_cache(key, value, key_cache, value_cache, slots)
        torch_fn()
        torch.testing.assert_close(key_cache, key_ref, rtol=0, atol=0)
        torch.testing.assert_close(value_cache, value_ref, rtol=0, atol=0)

    return Setup(
        "reshape_and_cache",
        f"T{t} {hkv}x{head} blk{block}",
        2 * (key.numel() + value.numel()) * key.element_size() + t * 8,
        lambda: polyops.reshape_and_cache(key, value, key_cache, value_cache, slots),
        "index_copy_",
        torch_fn,
        check,
    )


def setup_cat(dtype: torch.dtype, scale: int) -> Setup:
    """4 pieces [4096, 2048] -> [4096, 8192] along the last dim."""
    rows, cols, pieces_n = 4096 // scale, 8192, 4
    pieces = [torch.randn(rows, cols // pieces_n).to(dtype) for _ in range(pieces_n)]
    y = torch.empty(rows, cols, dtype=dtype)
    y_ref = torch.empty_like(y)

    def check() -> None:
        part = [p[:64] for p in pieces]
        torch.testing.assert_close(polyops.cat(part, -1), torch.cat(part, -1), rtol=0, atol=0)

    return Setup(
        "cat",
        f"4x{rows}x{cols // pieces_n}->{rows}x{cols}",
        2 * y.numel() * y.element_size(),
        lambda: polyops.cat(pieces, -1, out=y),
        "torch.cat(out=)",
        lambda: torch.cat(pieces, -1, out=y_ref),
        check,
    )


def _vllm_slot() -> int:
    slots = polyops.implementations("silu_and_mul", "cpu")
    return next(slot for slot, name in slots.items() if name == "vllm")


SETUPS: dict[str, Callable[[torch.dtype, int], Setup]] = {
    "rms_norm": setup_rms_norm,
    "add_rms_norm": setup_add_rms_norm,
    "mul": setup_mul,
    "causal_softmax": setup_causal_softmax,
    "rotary_embedding": setup_rotary_embedding,
    "silu_and_mul": setup_silu_and_mul,
    # The "vllm" slot: silu rounded to the dtype before the multiply (vLLM's order).
    "silu_and_mul_vllm": lambda dtype, scale: setup_silu_and_mul(dtype, scale, _vllm_slot()),
    "reshape_and_cache": setup_reshape_and_cache,
    "cat": setup_cat,
}
