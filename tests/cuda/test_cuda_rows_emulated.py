"""The row-wise CUDA slots' source, run on the CPU under a host emulation of CUDA.

No GPU is needed: the slot headers of rms_norm, add_rms_norm, swiglu,
silu_and_mul (both slots), causal_softmax, rotary_embedding,
apply_rotary_pos_emb and reshape_and_cache (src/cuda/<op>/*.cuh with
src/cuda/kernels/rows/rows.cuh and src/cuda/kernels/rotary/rotary.cuh) are copied with every
``kernel<<<grid, block, shared, stream>>>(args)`` rewritten into a call of
``EmulatedLaunch`` (tests/cuda/emulation/emulated_cuda.h: one
cooperative thread per CUDA thread, barriers for ``__syncthreads`` and the
warp shuffles), compiled
with the host compiler together with tests/cuda/emulation/rows_main.cc
(tests/cuda/emulation/harness.py builds and marshals), and
every case of the parity table (polyops.testing.OPS) for those ops is run
through it and compared with the float64 reference at the table's
tolerance. Inputs keep their storage, offsets, strides and aliasing (in-place
cases), and their pointer alignment modulo 64 bytes, so the 16-byte pack
paths and their scalar fallbacks run as they would on a GPU.

What it checks: the kernels' indexing, masks, pack/fallback choice, index
handling, barriers and in-place safety, and the slots' host code. What it
cannot check: nvcc, the GPU's scheduling and CUDA's own float functions
(``expf`` is the host's); the block reductions are cuda/runtime/common.cuh's own
shuffle trees, run through the emulated warp exchanges.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polyops.testing import OPS, Inputs, compare
from polyops.testing import references as ref
from polyops.testing.opinfo import Call, drop_none
from tests.conftest import dtype_id
from tests.cuda.emulation.harness import build_emulator, run_slot

#: Slot headers (and their shared headers) the driver includes.
HEADERS = [
    "cuda/kernels/elementwise/elementwise.cuh",
    "cuda/kernels/rows/rows.cuh",
    "cuda/kernels/rotary/rotary.cuh",
    "cuda/rms_norm/vector.cuh",
    "cuda/add_rms_norm/vector.cuh",
    "cuda/swiglu/vector.cuh",
    "cuda/silu_and_mul/vector.cuh",
    "cuda/silu_and_mul/vllm.cuh",
    "cuda/causal_softmax/vector.cuh",
    "cuda/rotary_embedding/token.cuh",
    "cuda/apply_rotary_pos_emb/token.cuh",
    "cuda/reshape_and_cache/vector.cuh",
]

#: Each op's arguments in the C++ constructor's order, with their defaults.
PARAMS: dict[str, list[tuple[str, object]]] = {
    "rms_norm": [("input", None), ("weight", None), ("eps", 1e-6), ("out", None)],
    "add_rms_norm": [
        ("x1", None),
        ("x2", None),
        ("gamma", None),
        ("eps", 1e-6),
        ("y_out", None),
        ("x_out", None),
    ],
    "swiglu": [("input", None), ("gate", None), ("out", None)],
    "silu_and_mul": [("input", None), ("out", None)],
    "causal_softmax": [("input", None), ("out", None)],
    "rotary_embedding": [
        ("positions", None),
        ("query", None),
        ("key", None),
        ("head_size", None),
        ("cos_sin_cache", None),
        ("is_neox_style", True),
        ("rotary_dim", None),
        ("query_out", None),
        ("key_out", None),
    ],
    "apply_rotary_pos_emb": [
        ("query", None),
        ("key", None),
        ("cos", None),
        ("sin", None),
        ("is_neox_style", True),
        ("query_out", None),
        ("key_out", None),
    ],
    "reshape_and_cache": [
        ("key", None),
        ("value", None),
        ("key_cache", None),
        ("value_cache", None),
        ("slot_mapping", None),
    ],
}

#: Outputs the bindings allocate (contiguous) when omitted; the driver gets them given.
ALLOCATED = {
    "rms_norm": ["out"],
    "add_rms_norm": ["y_out", "x_out"],
    "swiglu": ["out"],
    "silu_and_mul": ["out"],
    "causal_softmax": ["out"],
}

#: CUDA slots per op (index, name) as the headers define them.
SLOTS = {op: [(0, "vector")] for op in PARAMS}
SLOTS["silu_and_mul"] = [(0, "vector"), (1, "vllm")]
SLOTS["rotary_embedding"] = [(0, "token")]
SLOTS["apply_rotary_pos_emb"] = [(0, "token")]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> Path:
    """The driver built against the rewritten slot headers."""
    return build_emulator(tmp_path_factory.mktemp("cuda_rows_emulation"), HEADERS, "rows_main.cc")


def _results(op: str, given: dict) -> list:
    """The tensors to compare, in the reference's order."""
    if op in ALLOCATED:
        return [given[name] for name in ALLOCATED[op]]
    if op == "reshape_and_cache":
        return [given["key_cache"], given["value_cache"]]
    query = given["query_out"] if given["query_out"] is not None else given["query"]
    key = given["key_out"] if given["key_out"] is not None else given["key"]
    return [query, key]


def run_emulated(exe: Path, folder: Path, op: str, slot: int, call, expected) -> tuple:
    """One call of `op`'s CUDA slot `slot` under the emulation; its results."""
    dtype = call.args[0].dtype
    allocate = {
        name: (reference.shape, dtype)
        for name, reference in zip(ALLOCATED.get(op, []), expected, strict=False)
    }
    return run_slot(
        exe, folder, op, slot, PARAMS[op], call, allocate, lambda given: _results(op, given)
    )


def _params() -> list:
    return [
        pytest.param(op, slot, dtype, id=f"{op}-{slot}-{name}-{dtype_id(dtype)}")
        for op, slots in SLOTS.items()
        for slot, name in slots
        for dtype in OPS[op].dtypes
    ]


@pytest.mark.parametrize("op, slot, dtype", _params())
def test_emulated_cuda_slot_matches_reference(op, slot, dtype, emulator, tmp_path):
    info = OPS[op]
    failures = []
    for number, case in enumerate(info.all_cases(dtype)):
        call = case.build(Inputs(info.seed(dtype, case), "cpu"))
        expected = drop_none(info.reference(*call.args, **call.kwargs))
        if op == "silu_and_mul" and slot == 1:
            # vLLM's rounding: silu(gate) rounded to the dtype, then the product.
            x = call.args[0]
            d = x.shape[-1] // 2
            expected = (ref.silu_reference(x[..., :d]).to(dtype).double() * x[..., d:].double(),)
        folder = tmp_path / f"case{number}"
        try:
            results = run_emulated(emulator, folder, op, slot, call, expected)
        except RuntimeError as error:
            failures.append(f"{case.name}: {error}")
            continue
        if len(results) != len(expected):
            failures.append(f"{case.name}: {len(results)} results, expected {len(expected)}")
            continue
        for index, (got, want) in enumerate(zip(results, expected, strict=True)):
            tol = info.tolerance(got.dtype).scaled(case.atol_scale)
            outcome = compare(got, want, tol)
            if not outcome.ok:
                failures.append(f"{case.name} result {index}: {outcome.message}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------
# CUDA-specific paths the parity table does not reach


def _offset_copy(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """`tensor`'s values in a contiguous view `offset` elements into a buffer (misaligned base)."""
    buffer = torch.full((tensor.numel() + offset,), 777.0, dtype=tensor.dtype)
    view = buffer[offset:].view(tensor.shape)
    view.copy_(tensor)
    return view


def _randn(shape, dtype, gen, scale=1.0) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32], ids=dtype_id)
def test_emulated_misaligned_and_long_rows(dtype, emulator, tmp_path):
    """Packable strides with a base 2 or 4 bytes off a 16-byte boundary take the scalar
    fallback; rows longer than a block's packs loop; >= 256 rows use 256-thread blocks."""
    gen = torch.Generator().manual_seed(7)
    calls = []
    for offset, rows, hidden in [(1, 5, 1024), (0, 300, 4096), (1, 3, 2056)]:
        x = _offset_copy(_randn((rows, hidden), dtype, gen, 2.0), offset)
        x2 = _offset_copy(_randn((rows, hidden), dtype, gen), offset)
        w = _offset_copy(_randn((hidden,), dtype, gen), offset)
        scores = _offset_copy(_randn((2, rows, hidden // 8), dtype, gen, 3.0), offset)
        calls += [
            ("rms_norm", Call((x, w, 1e-6)), ref.rms_norm_reference(x, w)),
            ("add_rms_norm", Call((x, x2, w, 1e-6)), ref.add_rms_norm_reference(x, x2, w)),
            ("swiglu", Call((x, x2)), ref.swiglu_reference(x, x2)),
            ("silu_and_mul", Call((x,)), ref.silu_and_mul_reference(x)),
            ("causal_softmax", Call((scores,)), ref.causal_softmax_reference(scores)),
        ]
    failures = []
    for number, (op, call, expected) in enumerate(calls):
        expected = drop_none(expected)
        folder = tmp_path / f"call{number}"
        results = run_emulated(emulator, folder, op, 0, call, expected)
        for got, want in zip(results, expected, strict=True):
            outcome = compare(got, want, OPS[op].tolerance(dtype))
            if not outcome.ok:
                failures.append(f"{op} {tuple(call.args[0].shape)}: {outcome.message}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("index_dtype", [torch.int64, torch.int32], ids=dtype_id)
def test_emulated_out_of_range_indices(index_dtype, emulator, tmp_path):
    """Positions outside the table give NaN for their token; slots past the caches are
    skipped like padding; nothing else changes (no host check is possible on a GPU)."""
    dtype = torch.bfloat16
    gen = torch.Generator().manual_seed(11)
    tokens, heads, head_size, max_pos = 6, 3, 32, 16
    cache = _randn((max_pos, head_size), dtype, gen)
    positions = torch.randint(0, max_pos, (tokens,), generator=gen)
    bad = [1, 4]
    positions[1], positions[4] = max_pos, -3
    query = _randn((tokens, heads, head_size), dtype, gen)
    key = _randn((tokens, 1, head_size), dtype, gen)
    clamped = positions.clamp(0, max_pos - 1)
    expected = list(ref.rotary_embedding_reference(clamped, query, key, head_size, cache))
    for tensor in expected:
        tensor[bad] = float("nan")
    call = Call((positions.to(index_dtype), query, key, head_size, cache, True))
    results = run_emulated(emulator, tmp_path / "rotary", "rotary_embedding", 0, call, expected)
    tol = OPS["rotary_embedding"].tolerance(dtype)
    for got, want in zip(results, expected, strict=True):
        outcome = compare(got, want, tol)
        assert outcome.ok, f"rotary_embedding: {outcome.message}"

    blocks, block_size = 3, 4
    k = _randn((tokens, 2, 8), dtype, gen)
    v = _randn((tokens, 2, 8), dtype, gen)
    key_cache = torch.full((blocks, block_size, 2, 8), 5.0, dtype=dtype)
    value_cache = torch.full((blocks, block_size, 2, 8), -5.0, dtype=dtype)
    slots = torch.tensor([3, blocks * block_size, 0, -1, 500, 11])
    expected = ref.reshape_and_cache_reference(
        k, v, key_cache, value_cache, torch.where(slots >= blocks * block_size, -1, slots)
    )
    call = Call((k, v, key_cache, value_cache, slots.to(index_dtype)))
    results = run_emulated(emulator, tmp_path / "cache", "reshape_and_cache", 0, call, expected)
    for got, want in zip(results, expected, strict=True):
        assert torch.equal(got, want), "reshape_and_cache wrote where it must not"
