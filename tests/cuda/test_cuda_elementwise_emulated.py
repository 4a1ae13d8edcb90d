"""The CUDA add, mul, cast and cat slots' source, run on the CPU under a host emulation of CUDA.

No GPU is needed: src/cuda/{add,mul}/vector.cuh (over
src/cuda/kernels/elementwise/binary_elementwise.cuh), src/cuda/cast/loop.cuh and
src/cuda/cat/copy.cuh (over src/cuda/kernels/elementwise/elementwise.cuh) are copied with every
launch rewritten into ``EmulatedLaunch`` (tests/cuda/emulation/
emulated_cuda.h; cudaMemcpyAsync / cudaMemcpy2DAsync as host copies), built
with tests/cuda/emulation/elementwise_main.cc, and every case of the
parity table (polyops.testing.OPS: every dtype, broadcast, transposed and
stepped operands, in-place, strided outputs, empty and scalar tensors, the
NaN/inf case) is run through it and compared with the float64 reference at
the table's tolerance, plus misaligned bases (the scalar kernel) and tails.
Storages keep their alignment modulo 64 bytes, so the 16-byte vector path
and its scalar fallback are chosen as on a GPU.

What it checks: the grid-stride loops and their tails, the strided indexer,
the vector/scalar choice, the dtype conversions (round to odd, integer
wraparound), the cat copy selection (1D, pitched 2D, strided kernel). What it
cannot check: nvcc, a GPU, CUDA's own conversion intrinsics (the host's
casts are used: float to integer out of range differs from a GPU's).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polyops.testing import OPS, compare
from polyops.testing import references as ref
from polyops.testing.opinfo import Call
from polyops.testing.tensors import make_tensor
from tests.conftest import dtype_id
from tests.cuda.emulation.harness import build_emulator, parity_failures, run_slot

HEADERS = [
    "cuda/kernels/elementwise/elementwise.cuh",
    "cuda/kernels/elementwise/binary_elementwise.cuh",
    "cuda/add/vector.cuh",
    "cuda/mul/vector.cuh",
    "cuda/cast/loop.cuh",
    "cuda/cat/copy.cuh",
]

#: Each op's arguments in the C++ constructor's order, with their defaults.
PARAMS: dict[str, list[tuple[str, object]]] = {
    "add": [("input", None), ("other", None), ("alpha", 1.0), ("out", None)],
    "mul": [("input", None), ("other", None), ("out", None)],
    "cast": [("input", None), ("dtype", None), ("out", None)],
    "cat": [("tensors", None), ("dim", 0), ("out", None)],
}

#: The one CUDA slot of each op (index 0: vector, vector, loop, copy).
SLOT = 0


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> Path:
    """The driver built against the rewritten elementwise headers."""
    return build_emulator(
        tmp_path_factory.mktemp("cuda_elementwise_emulation"), HEADERS, "elementwise_main.cc"
    )


def _params() -> list:
    return [
        pytest.param(op, dtype, id=f"{op}-{dtype_id(dtype)}")
        for op in PARAMS
        for dtype in OPS[op].dtypes
    ]


@pytest.mark.parametrize("op, dtype", _params())
def test_emulated_cuda_elementwise_matches_reference(op, dtype, emulator, tmp_path):
    def out_dtype(call):
        return call.args[1] if op == "cast" else dtype

    failures = parity_failures(emulator, tmp_path, op, dtype, SLOT, PARAMS[op], out_dtype)
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------
# CUDA-specific paths the parity table does not reach


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64], ids=dtype_id)
def test_emulated_misaligned_operands(dtype, emulator, tmp_path):
    """Contiguous operands whose base is 1 element off a 16-byte boundary (any one of the
    three) take the scalar kernel instead of 16-byte vectors; lengths around the vector
    width leave tails of every size; cast and cat read from such bases too."""
    gen = torch.Generator().manual_seed(3)
    runs = []
    for n in (1, 7, 8, 9, 1031):
        for shifted in ("input", "other", "out", None):
            base = {
                name: _shifted(make_tensor((n,), dtype, gen), name == shifted)
                for name in ("input", "other")
            }
            out = _shifted(torch.zeros(n, dtype=dtype), shifted == "out")
            for op in ("add", "mul"):
                call = Call((base["input"], base["other"]), outputs={"out": out})
                expected = OPS[op].reference(base["input"], base["other"])
                runs.append((f"{op}-{n}-{shifted}", op, call, expected, dtype))
        x = _shifted(make_tensor((n,), dtype, gen), True)
        for target in (torch.float32, torch.bfloat16, torch.int32):
            call = Call((x, target), outputs={"out": torch.zeros(n, dtype=target)})
            runs.append(
                (f"cast-{n}-to-{target}", "cast", call, ref.cast_reference(x, target), target)
            )
        pieces = [_shifted(make_tensor((2, n), dtype, gen), True) for _ in range(2)]
        call = Call((pieces, 1))
        runs.append((f"cat-{n}", "cat", call, ref.cat_reference(pieces, 1), dtype))
    failures = []
    for number, (name, op, call, expected, out_dtype) in enumerate(runs):
        allocate = {"out": (expected.shape, out_dtype)}
        (got,) = run_slot(
            emulator,
            tmp_path / f"run{number}",
            op,
            SLOT,
            PARAMS[op],
            call,
            allocate,
            lambda given: [given["out"]],
        )
        outcome = compare(got, expected, OPS[op].tolerance(out_dtype))
        if not outcome.ok:
            failures.append(f"{name}: {outcome.message}")
    assert not failures, "\n".join(failures)


def _shifted(tensor: torch.Tensor, shift: bool) -> torch.Tensor:
    """`tensor`'s values, one element past a 64-byte aligned base when `shift`."""
    if not shift:
        return tensor.clone()
    buffer = torch.zeros(tensor.numel() + 1, dtype=tensor.dtype)
    view = buffer[1:].view(tensor.shape)
    view.copy_(tensor)
    return view
