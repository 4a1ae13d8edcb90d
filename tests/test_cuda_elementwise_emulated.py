"""The CUDA add, mul, cast and cat slots' source, run on the CPU under a host emulation of CUDA.

No GPU is needed: src/cuda/{add,mul}/vector.cuh (over
src/cuda/binary_elementwise.cuh), src/cuda/cast/loop.cuh and
src/cuda/cat/copy.cuh (over src/cuda/elementwise.cuh) are copied with every
launch rewritten into ``EmulatedLaunch`` (tests/cuda_emulation_rows/
emulated_cuda.h; cudaMemcpyAsync / cudaMemcpy2DAsync as host copies), built
with tests/cuda_emulation_rows/elementwise_main.cc, and every case of the
parity table (polyops.testing.OPS: every dtype, broadcast, transposed and
stepped operands, in-place, strided outputs, empty and scalar tensors, the
NaN/inf case) is run through it and compared with the float64 reference at
the table's tolerance. Storages keep their alignment modulo 64 bytes, so the
16-byte vector path and its scalar fallback are chosen as on a GPU.

What it checks: the grid-stride loops and their tails, the strided indexer,
the vector/scalar choice, the dtype conversions (round to odd, integer
wraparound), the cat copy selection (1D, pitched 2D, strided kernel). What it
cannot check: nvcc, a GPU, CUDA's own conversion intrinsics (the host's
casts are used: float to integer out of range differs from a GPU's).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import dtype_id
from cuda_emulation_rows.harness import build_emulator, run_slot

from polyops.testing import OPS, Inputs, compare
from polyops.testing.ops import drop_none

HEADERS = [
    "cuda/elementwise.cuh",
    "cuda/binary_elementwise.cuh",
    "cuda/add/vector.cuh",
    "cuda/mul/vector.cuh",
    "cuda/cast/loop.cuh",
    "cuda/cat/copy.cuh",
]

#: Each op's arguments in the C++ constructor's order, with their defaults.
PARAMS: dict[str, list[tuple[str, object]]] = {
    "add": [("input", None), ("other", None), ("out", None)],
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
    info = OPS[op]
    failures = []
    cases = info.all_cases(dtype)
    assert cases
    for number, case in enumerate(cases):
        call = case.build(Inputs(info.seed(dtype, case), "cpu"))
        expected = drop_none(info.reference(*call.args, **call.kwargs))
        out_dtype = call.args[1] if op == "cast" else dtype
        allocate = {"out": (expected[0].shape, out_dtype)}
        try:
            results = run_slot(
                emulator,
                tmp_path / f"case{number}",
                op,
                SLOT,
                PARAMS[op],
                call,
                allocate,
                lambda given: [given["out"]],
            )
        except RuntimeError as error:
            failures.append(f"{case.name}: {error}")
            continue
        for index, (got, want) in enumerate(zip(results, expected, strict=True)):
            assert got.dtype == out_dtype
            tol = info.tolerance(got.dtype).scaled(case.atol_scale)
            outcome = compare(got, want, tol)
            if not outcome.ok:
                failures.append(f"{case.name} result {index}: {outcome.message}")
    assert not failures, "\n".join(failures)
