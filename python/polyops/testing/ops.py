"""The op table: for each of polyops' operators, its dtypes, cases, reference and tolerances.

An :class:`OpInfo` (after PyTorch's OpInfo) says everything the parity
harness needs to know about one operator; :data:`OPS` holds one per op.
Cases are cheap descriptions (a name and a builder): tensors are made only
when a case is built for a device, from a generator seeded by (op, dtype,
case), so every device and slot sees the same inputs.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from polyops.testing import references as ref
from polyops.testing.references import (
    ATTENTION,
    EXACT,
    FLOAT32_COMPUTE,
    ONE_MINUS,
    PRODUCT,
    ROUNDED,
    Tolerance,
)
from polyops.testing.tensors import (
    ALL_DTYPES,
    ARITH_DTYPES,
    BF16,
    F16,
    F32,
    F64,
    FLOAT_DTYPES,
    I8,
    I16,
    I32,
    I64,
    LAYOUTS,
    U8,
    combined_kv,
    cu_seqlens,
    dtype_name,
    make_tensor,
    paginate,
    sentinel,
)

Tensor = torch.Tensor


@dataclass
class Call:
    """One op call: positional and keyword inputs, and the output arguments.

    ``outputs`` (``out=``, ``query_out=``...) are passed to the op but not to
    the reference; an output may be one of the inputs (an in-place form).
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)


class Inputs:
    """The tensors of one case on one device, drawn from one seeded CPU generator."""

    def __init__(self, seed: int, device: str):
        self.gen = torch.Generator().manual_seed(seed)
        self.device = device

    def cpu(self, shape: Sequence[int], dtype: torch.dtype, scale: float = 1.0, **kw) -> Tensor:
        """Random CPU data (see :func:`make_tensor`), not yet on the device."""
        return make_tensor(shape, dtype, self.gen, scale=scale, **kw)

    def put(self, tensor: Tensor, layout: str | Callable = "contiguous") -> Tensor:
        """`tensor`'s values on the device, stored in `layout` (a name of LAYOUTS or a function)."""
        place = LAYOUTS[layout] if isinstance(layout, str) else layout
        return place(tensor.to(self.device))

    def tensor(
        self,
        shape: Sequence[int],
        dtype: torch.dtype,
        scale: float = 1.0,
        layout: str | Callable = "contiguous",
        **kw,
    ) -> Tensor:
        """Random data of `shape` on the device, stored in `layout`."""
        return self.put(self.cpu(shape, dtype, scale, **kw), layout)

    def empty(self, shape: Sequence[int], dtype: torch.dtype, layout: str = "contiguous") -> Tensor:
        """An output buffer on the device, filled with the sentinel (so unwritten elements show)."""
        return self.put(torch.full(tuple(shape), sentinel(dtype), dtype=dtype), layout)


@dataclass(frozen=True)
class Case:
    """A named input configuration; ``build(inputs)`` makes its tensors on inputs.device.

    ``atol_scale`` multiplies the op's atol for this case (the matrix products'
    atol is per accumulated term, so their cases set it to k).
    """

    name: str
    build: Callable[[Inputs], Call]
    atol_scale: float = 1.0


def drop_none(value: Any) -> tuple:
    """A result or tuple of results as a tuple, Nones dropped (e.g. key=None's key_out)."""
    items = value if isinstance(value, tuple) else (value,)
    return tuple(item for item in items if item is not None)


def _returned(returned: Any, call: Call) -> tuple:
    """The results of a call to compare: what the op returns."""
    return drop_none(returned)


@dataclass(frozen=True)
class OpInfo:
    """Everything the harness knows about one operator.

    name: the polyops function. dtypes: the input dtypes of the parity rows.
    cases(dtype): the cases of one row. reference: float64 reference taking the
    op's inputs (see :mod:`polyops.testing.references`). tolerances: by result
    dtype (a single Tolerance for all); integer and bool results are always
    exact. results(returned, call): the tensors to compare, in the reference's
    order (default: what the op returns). special_values: also run the first
    case of each float dtype with NaN, +inf and -inf written into its first
    float input (the comparison then requires NaN where the reference has NaN
    and equal infinities). device_rules: device -> a check that replaces the
    comparison with the reference on that device only, for an op whose
    contract declares that device inexact (topk_topp_sampling on npu:
    sampling_token_plausible). It takes the device's results and the inputs
    built on CPU (`rule(results, *args, **kwargs)`) and returns the failing
    rows; every other device keeps the reference comparison.
    """

    name: str
    dtypes: Sequence[torch.dtype]
    cases: Callable[[torch.dtype], list[Case]]
    reference: Callable[..., Any]
    tolerances: Mapping[torch.dtype, Tolerance] | Tolerance
    results: Callable[[Any, Call], tuple] = _returned
    special_values: bool = False
    device_rules: Mapping[str, Callable[..., list[int]]] = field(default_factory=dict)

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        """The tolerance of a result of `dtype`."""
        if not dtype.is_floating_point:
            return EXACT
        if isinstance(self.tolerances, Tolerance):
            return self.tolerances
        return self.tolerances[dtype]

    def all_cases(self, dtype: torch.dtype) -> list[Case]:
        """The cases of one (op, dtype) row, with the special-value case when enabled."""
        cases = self.cases(dtype)
        if self.special_values and dtype.is_floating_point and cases:
            cases = [*cases, _with_special_values(cases[0])]
        return cases

    def seed(self, dtype: torch.dtype, case: Case) -> int:
        """The seed of one case's inputs: the same on every device and every run."""
        return zlib.crc32(f"{self.name}/{dtype_name(dtype)}/{case.name}".encode())


def _first_float_tensor(items: Sequence) -> Tensor | None:
    for item in items:
        if isinstance(item, (list, tuple)):
            item = _first_float_tensor(item)
        if isinstance(item, Tensor) and item.dtype.is_floating_point and item.numel() >= 3:
            return item
    return None


def _with_special_values(case: Case) -> Case:
    def build(inputs: Inputs) -> Call:
        call = case.build(inputs)
        target = _first_float_tensor(call.args)
        if target is not None:
            flat = target.flatten().clone()
            n = flat.numel()
            flat[[0, n // 3, (2 * n) // 3]] = torch.tensor(
                [math.nan, math.inf, -math.inf], dtype=flat.dtype, device=flat.device
            )
            target.copy_(flat.view(target.shape))
        return call

    return Case(f"{case.name}-nan-inf", build, case.atol_scale)


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


# ---------------------------------------------------------------------------
# matmul, gemm, linear


def _column_major(t: Tensor) -> Tensor:
    """Each matrix stored column-major (the batch dim stays outermost)."""
    return t.mT.contiguous().mT


def _matmul_shape(a_shape: Sequence[int], b_shape: Sequence[int]) -> tuple[int, ...]:
    """torch.matmul's result shape: broadcast batch dims, a 1-D operand's dim dropped."""
    batch = torch.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    rows = tuple(a_shape[-2:-1]) if len(a_shape) >= 2 else ()
    columns = tuple(b_shape[-1:]) if len(b_shape) >= 2 else ()
    return (*batch, *rows, *columns)


def _matmul_cases(dtype: torch.dtype) -> list[Case]:
    def case(name, a_shape, b_shape, *, a="contiguous", b="contiguous", out=None):
        def build(inp: Inputs) -> Call:
            x, y = inp.tensor(a_shape, dtype, layout=a), inp.tensor(b_shape, dtype, layout=b)
            result = _matmul_shape(a_shape, b_shape)
            outputs = {} if out is None else {"out": inp.empty(result, dtype, out)}
            return Call((x, y), outputs=outputs)

        return Case(name, build, atol_scale=a_shape[-1])

    return [
        case("8x2048@2048x384", (8, 2048), (2048, 384)),
        case("1x1@1x1", (1, 1), (1, 1)),
        case("17x33@33x9", (17, 33), (33, 9)),
        case("4x3x5@4x5x7", (4, 3, 5), (4, 5, 7)),
        case("3x6x5@5x4-shared", (3, 6, 5), (5, 4)),
        case("1x6x5@3x5x4-batch-of-one", (1, 6, 5), (3, 5, 4)),
        case("0x5@5x3", (0, 5), (5, 3)),
        case("4x0@0x3", (4, 0), (0, 3)),
        case(
            "column-major-3x9x13@3x13x6", (3, 9, 13), (3, 13, 6), a=_column_major, b=_column_major
        ),
        case("out-rows-9x13@13x6", (9, 13), (13, 6), a="rows", out="rows"),
        # 1-D operands: a row vector, a column vector, or both (a 0-d dot product).
        case("64@64-dot", (64,), (64,)),
        case("33@33x9", (33,), (33, 9)),
        case("17x33@33-step", (17, 33), (33,), b="step"),
        case("4x6x5@5", (4, 6, 5), (5,)),
        case("5@3x5x4", (5,), (3, 5, 4)),
        # N-D batches, broadcast between the operands.
        case("2x3x4x5@2x3x5x6", (2, 3, 4, 5), (2, 3, 5, 6)),
        case("2x2x3x4x5@5x6-shared", (2, 2, 3, 4, 5), (5, 6)),
        case("2x1x6x5@3x5x4-outer", (2, 1, 6, 5), (3, 5, 4)),
        case("3x1x6x5@1x4x5x7-out-rows", (3, 1, 6, 5), (1, 4, 5, 7), out="rows"),
        case("2x0x4x5@1x5x3", (2, 0, 4, 5), (1, 5, 3)),
    ]


def _gemm_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        m,
        n,
        k,
        *,
        batch=(),
        trans=(False, False),
        alpha=1.0,
        beta=0.0,
        c=None,
        nan=None,
        inplace=False,
    ):
        def build(inp: Inputs) -> Call:
            a = inp.tensor((*batch, k, m) if trans[0] else (*batch, m, k), dtype)
            b = inp.tensor((*batch, n, k) if trans[1] else (*batch, k, n), dtype)
            c_tensor = None if c is None else inp.tensor(c, dtype)
            if nan == "a":  # alpha == 0: a is not read
                a.fill_(math.nan)
            if nan == "c":  # beta == 0: c is not read
                c_tensor.fill_(math.nan)
            kwargs = {"alpha": alpha, "beta": beta, "trans_a": trans[0], "trans_b": trans[1]}
            return Call((a, b, c_tensor), kwargs, {"out": c_tensor} if inplace else {})

        return Case(name, build, atol_scale=abs(alpha) * k + abs(beta))

    return [
        case("32x256x2048", 32, 256, 2048),
        case("7x5x11", 7, 5, 11, alpha=0.5, beta=-2.0, c=(7, 5)),
        case("trans_a", 7, 5, 11, trans=(True, False)),
        case("trans_b", 7, 5, 11, trans=(False, True), c=(7, 5), beta=1.0),
        case("trans_ab-batched", 7, 5, 11, batch=(3,), trans=(True, True), alpha=2.0),
        case("c-row-broadcast", 6, 4, 9, c=(4,), beta=1.0),
        case("beta0-nan-c", 6, 4, 9, c=(6, 4), beta=0.0, nan="c"),
        case("alpha0-nan-a", 6, 4, 9, alpha=0.0, beta=3.0, c=(6, 4), nan="a"),
        case("in-place-out=c", 6, 4, 9, c=(6, 4), beta=1.0, inplace=True),
        case("k0", 4, 3, 0, c=(4, 3), beta=2.0),
    ]


def _linear_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name, shape, out_features, *, bias=True, x="contiguous", w="contiguous", b="contiguous"
    ):
        def build(inp: Inputs) -> Call:
            weight = inp.tensor((out_features, shape[-1]), dtype, layout=w)
            b_tensor = inp.tensor((out_features,), dtype, layout=b) if bias else None
            return Call((inp.tensor(shape, dtype, layout=x), weight, b_tensor))

        return Case(name, build, atol_scale=shape[-1] + 1)

    return [
        case("4x4096->512", (4, 4096), 512),
        case("13->7-1d", (13,), 7),
        case("5x13->7-no-bias", (5, 13), 7, bias=False),
        case("2x3x13->7", (2, 3, 13), 7),
        case("0x13->7", (0, 13), 7),
        case(
            "sliced-rows-2x5x10", (2, 5, 10), 4, x=lambda t: t.new_zeros(2, 6, 10)[:, :5].copy_(t)
        ),
        case("weight-transposed-bias-step", (6, 10), 4, w="transposed", b="step"),
    ]


# ---------------------------------------------------------------------------
# flash_attention, paged_attention


def _flash_attention_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        q_lens,
        kv_lens,
        heads,
        kv_heads,
        head_size,
        *,
        paged=0,
        packed=False,
        kv_order=None,
        host=False,
        q_dtype=I32,
        kv_dtype=I32,
        **options,
    ):
        """q_dtype: cu_seqlens_q's (and its mirror's) dtype; kv_dtype: cu_seqlens_kv's and
        the block table's."""

        def build(inp: Inputs) -> Call:
            tq, tkv = sum(q_lens), sum(kv_lens)
            cu_q, cu_kv = cu_seqlens(q_lens).to(q_dtype), cu_seqlens(kv_lens).to(kv_dtype)
            if packed:  # q, k, v: slices of one qkv projection [T, Hq + 2 Hkv, D]
                qkv = inp.tensor((tq, heads + 2 * kv_heads, head_size), dtype)
                q, k, v = qkv.split([heads, kv_heads, kv_heads], dim=1)
            else:
                q = inp.tensor((tq, heads, head_size), dtype)
                k, v = (inp.cpu((tkv, kv_heads, head_size), dtype) for _ in range(2))
            kwargs = dict(cu_seqlens_q=inp.put(cu_q), cu_seqlens_kv=inp.put(cu_kv), **options)
            if host:  # *_host arguments are CPU tensors whatever the device
                kwargs.update(cu_seqlens_q_host=cu_q.clone(), cu_seqlens_kv_host=cu_kv.clone())
            if paged:
                k, v, table = paginate(k, v, kv_lens, paged, inp.gen)
                kwargs["block_table"] = inp.put(table.to(kv_dtype))
            k, v = inp.put(k), inp.put(v)
            if kv_order:  # vLLM's caches: views into one K/V allocation
                k, v = combined_kv(k, v, kv_order)
            return Call((q, k, v), kwargs)

        return Case(name, build)

    return [
        case("prefill-128x16/4x128", [128], [128], 16, 4, 128),
        case("mha-d64-causal", [1, 7, 70], [1, 7, 70], 2, 2, 64),
        case("gqa4-d128", [5, 33], [5, 33], 4, 1, 128),
        case("gqa8-full", [3, 40], [3, 40], 8, 1, 64, causal=False),
        case("prefix-cached", [1, 7, 40, 3], [5, 20, 150, 3], 8, 2, 64),
        case("rows-without-keys", [5, 0, 2], [2, 4, 0], 4, 2, 64),
        case("sliding-window-33", [1, 7, 120], [9, 7, 200], 4, 1, 64, sliding_window=33),
        case(
            "window-3-2-full",
            [7, 100],
            [12, 150],
            4,
            2,
            64,
            causal=False,
            window_left=3,
            window_right=2,
        ),
        case("paged-b16", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16),
        case("paged-b5-window20", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=5, sliding_window=20),
        case("paged-vllm-nhd", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16, kv_order="nhd"),
        case("paged-vllm-hnd", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16, kv_order="hnd"),
        case("packed-qkv-scale0.3", [3, 50], [3, 50], 4, 2, 64, packed=True, scale=0.3),
        case("d256", [4, 9], [4, 9], 2, 1, 256),
        case("host-lens-causal", [1, 7, 70], [1, 9, 70], 4, 2, 64, host=True),
        case("host-lens-empty-rows", [5, 0, 2], [2, 4, 0], 4, 2, 64, host=True, causal=False),
        case("host-lens-paged-b16", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16, host=True),
        case(
            "host-lens-paged-window",
            [3, 40],
            [50, 40],
            4,
            1,
            64,
            paged=8,
            host=True,
            sliding_window=9,
        ),
        # int64 lengths and block tables (torch.tensor's default dtype), also mixed.
        case("int64-lens-causal", [1, 7, 70], [1, 9, 70], 4, 2, 64, q_dtype=I64, kv_dtype=I64),
        case(
            "int64-lens-paged-b16-host",
            [1, 7, 60],
            [37, 7, 90],
            8,
            2,
            64,
            paged=16,
            host=True,
            q_dtype=I64,
            kv_dtype=I64,
        ),
        case("int64-q-int32-kv-paged-b5", [3, 40], [50, 40], 4, 1, 64, paged=5, q_dtype=I64),
    ]


def _paged_attention_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        seq_lens,
        heads,
        kv_heads,
        head_size,
        block_size,
        *,
        host=False,
        kv_order=None,
        index_dtype=I32,
        **options,
    ):
        """index_dtype: seq_lens' and block_table's (and their mirrors') dtype."""

        def build(inp: Inputs) -> Call:
            q = inp.tensor((len(seq_lens), heads, head_size), dtype)
            k, v = (inp.cpu((sum(seq_lens), kv_heads, head_size), dtype) for _ in range(2))
            k_cache, v_cache, table = paginate(k, v, seq_lens, block_size, inp.gen)
            lens, table = torch.tensor(seq_lens, dtype=index_dtype), table.to(index_dtype)
            if host:  # *_host arguments are CPU tensors whatever the device
                options.update(seq_lens_host=lens.clone(), block_table_host=table.clone())
            k_cache, v_cache = inp.put(k_cache), inp.put(v_cache)
            if kv_order:  # vLLM's caches: views into one K/V allocation
                k_cache, v_cache = combined_kv(k_cache, v_cache, kv_order)
            args = (q, k_cache, v_cache, inp.put(lens), inp.put(table))
            return Call(args, dict(options))

        return Case(name, build)

    return [
        case("decode-8x32/8x128-b16", [1, 300, 17, 512, 64, 5, 129, 250], 32, 8, 128, 16),
        case("mha-d64", [1, 7, 300, 16], 4, 4, 64, 16),
        case("gqa4-d128", [1, 7, 300, 16], 8, 2, 128, 16),
        case("gqa8-d64-scale0.2", [3, 40, 129], 16, 2, 64, 16, scale=0.2),
        case("zero-length-host-b8", [5, 0, 77], 8, 1, 64, 8, host=True),
        case("vllm-nhd-caches", [3, 40, 129], 8, 2, 64, 16, kv_order="nhd"),
        case("vllm-hnd-caches", [3, 40, 129], 8, 2, 64, 16, kv_order="hnd"),
        # int64 lengths and block tables (torch.tensor's default dtype).
        case("int64-lens-b16", [1, 7, 300, 16], 8, 2, 64, 16, index_dtype=I64),
        case("int64-lens-host-b8", [5, 0, 77], 8, 1, 64, 8, host=True, index_dtype=I64),
    ]


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


# ---------------------------------------------------------------------------
# The table

OPS: dict[str, OpInfo] = {
    info.name: info
    for info in [
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
        OpInfo(
            "reshape_and_cache",
            FLOAT_DTYPES,
            _reshape_and_cache_cases,
            ref.reshape_and_cache_reference,
            EXACT,
            _cache_results,
            special_values=True,
        ),
        OpInfo(
            "matmul",
            FLOAT_DTYPES,
            _matmul_cases,
            ref.matmul_reference,
            PRODUCT,
            special_values=True,
        ),
        OpInfo("gemm", FLOAT_DTYPES, _gemm_cases, ref.gemm_reference, PRODUCT, special_values=True),
        OpInfo(
            "linear",
            FLOAT_DTYPES,
            _linear_cases,
            ref.linear_reference,
            PRODUCT,
            special_values=True,
        ),
        OpInfo(
            "flash_attention",
            FLOAT_DTYPES,
            _flash_attention_cases,
            ref.flash_attention_reference,
            ATTENTION,
            special_values=True,
        ),
        OpInfo(
            "paged_attention",
            FLOAT_DTYPES,
            _paged_attention_cases,
            ref.paged_attention_reference,
            ATTENTION,
            special_values=True,
        ),
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
}
