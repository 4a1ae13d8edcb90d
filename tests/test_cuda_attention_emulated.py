"""The own CUDA attention slots' source, run on the CPU under a host emulation of CUDA.

No GPU is needed: flash_attention's and paged_attention's slot 0 ``flash``
(src/cuda/{flash_attention,paged_attention}/flash.cuh over
src/cuda/attention.cuh) are copied with every launch rewritten into
``EmulatedLaunch`` and the dynamic shared memory into a per-launch buffer
(tests/cuda_emulation_rows/emulated_cuda.h: one cooperative thread per CUDA
thread, barriers for ``__syncthreads`` and for the warp shuffles of
WarpMax/WarpSum and the weight broadcast), built with
tests/cuda_emulation_rows/attention_main.cc, and every case of the parity
table (polyops.testing.OPS: GQA, varlen, causal and windows, paged and
vLLM-layout caches, packed qkv, the NaN/inf case, host mirrors, split-K
decode) is run through it and compared with the float64 reference at the
table's tolerance. The FlashInfer slots (tensor-core PTX) are not covered.

What it checks: the tile's indexing, the online softmax and its special
values, the warp layout of the rows and the shuffles' lanes, the barriers
(a divergent one is reported as a deadlock), the split-K partials and their
merge, the slots' host code. What it cannot check: nvcc, a GPU's scheduling
and memory model, CUDA's expf (the host's is used).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import dtype_id
from cuda_emulation_rows.harness import build_emulator, run_slot

from polyops.testing import OPS, Inputs, compare
from polyops.testing.ops import drop_none

HEADERS = [
    "cuda/attention.cuh",
    "cuda/flash_attention/flash.cuh",
    "cuda/paged_attention/flash.cuh",
]

#: Each op's arguments in the C++ constructor's order, with their defaults.
PARAMS: dict[str, list[tuple[str, object]]] = {
    "flash_attention": [
        ("query", None),
        ("key", None),
        ("value", None),
        ("cu_seqlens_q", None),
        ("cu_seqlens_kv", None),
        ("block_table", None),
        ("scale", None),
        ("causal", True),
        ("window_left", -1),
        ("window_right", -1),
        ("sliding_window", None),
        ("cu_seqlens_q_host", None),
        ("cu_seqlens_kv_host", None),
        ("out", None),
    ],
    "paged_attention": [
        ("query", None),
        ("key_cache", None),
        ("value_cache", None),
        ("seq_lens", None),
        ("block_table", None),
        ("scale", None),
        ("seq_lens_host", None),
        ("block_table_host", None),
        ("out", None),
    ],
}

#: The own slot of each op (index 0, "flash"); the FlashInfer slots are PTX.
SLOT = 0


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> Path:
    """The driver built against the rewritten attention headers."""
    return build_emulator(
        tmp_path_factory.mktemp("cuda_attention_emulation"), HEADERS, "attention_main.cc"
    )


def _params() -> list:
    return [
        pytest.param(op, dtype, id=f"{op}-{dtype_id(dtype)}")
        for op in PARAMS
        for dtype in OPS[op].dtypes
    ]


@pytest.mark.parametrize("op, dtype", _params())
def test_emulated_cuda_attention_matches_reference(op, dtype, emulator, tmp_path):
    info = OPS[op]
    failures = []
    cases = info.all_cases(dtype)
    assert cases
    for number, case in enumerate(cases):
        call = case.build(Inputs(info.seed(dtype, case), "cpu"))
        expected = drop_none(info.reference(*call.args, **call.kwargs))
        query = call.args[0]
        allocate = {"out": (expected[0].shape, query.dtype)}
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
            tol = info.tolerance(got.dtype).scaled(case.atol_scale)
            outcome = compare(got, want, tol)
            if not outcome.ok:
                failures.append(f"{case.name} result {index}: {outcome.message}")
    assert not failures, "\n".join(failures)
