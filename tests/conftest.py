"""Shared helpers for the polyops test suite.

References are float64 torch computations written from the math; results are
compared through :func:`assert_close` (tolerance from the single
:data:`TOLERANCES` table) or :func:`assert_within_ulp` (bit-level distance in
the result dtype).

Threads: torch runs single-threaded in most tests, so that the float64
references do not fight polyops' OpenMP threads for the cores (torch and
polyops share one OpenMP runtime, whose thread count is per calling thread).
Tests marked ``parallel`` -- the shapes above the kernels' parallel grain --
run with at least two OpenMP threads, so the kernels' parallel paths run
multi-threaded.

The instance caches are deliberately *not* cleared between tests: the suite
runs many shapes and data in one process with warm caches, since the cache
keys on shapes, strides and dtypes but never on data, and a reused instance
must still compute the right answer for new data.
"""

from __future__ import annotations

import contextlib
import pathlib

import pytest
import torch

import polyops
from polyops.testing.references import FLOAT32_COMPUTE
from polyops.testing.tensors import (  # noqa: F401 - re-exported to the test files
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
    INT_DTYPES,
    U8,
    make_tensor,
    row_strided,
    sentinel,
    step_sliced,
    transposed,
)
from polyops.testing.tensors import dtype_name as dtype_id  # noqa: F401 - ids: 'float16'

# Tolerances against a float64 reference: |actual - expected| <= atol + rtol * |expected|,
# the table polyops.testing documents for the ops that compute in float32.
TOLERANCES = {dtype: tol._asdict() for dtype, tol in FLOAT32_COMPUTE.items()}

# Bits of the same-width signed integer, for ulp distances.
_BITS_VIEW = {F16: torch.int16, BF16: torch.int16, F32: torch.int32, F64: torch.int64}


def parallel_param(*values, id=None):
    """A pytest.param large enough for the kernels' parallel paths (marked ``parallel``)."""
    return pytest.param(*values, id=id, marks=pytest.mark.parallel)


def slot_params(op: str) -> list:
    """pytest params for every CPU slot of `op`, with the slot name in the id."""
    return [
        pytest.param(slot, id=f"{slot}-{name}")
        for slot, name in sorted(polyops.implementations(op, "cpu").items())
    ]


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype, msg: str = ""):
    """`actual` (of `dtype`) against a float64 reference, with the table tolerance.

    NaNs must sit at the same positions; infinities must match exactly.
    """
    assert actual.dtype == dtype, f"result dtype {actual.dtype}, expected {dtype}"
    assert actual.shape == expected.shape, f"shape {tuple(actual.shape)} != {tuple(expected)}"
    torch.testing.assert_close(
        actual.double(),
        expected.double(),
        equal_nan=True,
        msg=(lambda m: f"{msg}\n{m}") if msg else None,
        **TOLERANCES[dtype],
    )


def ordered_bits(tensor: torch.Tensor) -> torch.Tensor:
    """Float bits mapped to int64 so that adjacent floats differ by exactly 1."""
    bits = tensor.contiguous().view(_BITS_VIEW[tensor.dtype]).long()
    width = tensor.element_size() * 8
    magnitude = bits & ((1 << (width - 1)) - 1)
    return torch.where(bits < 0, -magnitude, magnitude)


def assert_within_ulp(actual: torch.Tensor, expected: torch.Tensor, max_ulp: int = 1, msg=""):
    """Floats of one dtype no more than `max_ulp` representable values apart (NaN == NaN)."""
    assert actual.dtype == expected.dtype, f"{actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{tuple(actual.shape)} != {tuple(expected.shape)}"
    if actual.numel() == 0:
        return
    nan_a, nan_e = torch.isnan(actual), torch.isnan(expected)
    assert torch.equal(nan_a, nan_e), f"{msg} NaN positions differ"
    distance = (ordered_bits(actual) - ordered_bits(expected)).abs()
    distance = torch.where(nan_e, torch.zeros_like(distance), distance)
    worst = int(distance.max())
    if worst > max_ulp:
        index = int(distance.flatten().argmax())
        raise AssertionError(
            f"{msg} {worst} ulp apart (allowed {max_ulp}) at flat index {index}: "
            f"got {actual.flatten()[index].item()!r}, "
            f"expected {expected.flatten()[index].item()!r}"
        )


def assert_equal(actual: torch.Tensor, expected: torch.Tensor, msg: str = ""):
    """Bitwise-exact equality of values, dtype and shape (NaN == NaN)."""
    assert actual.dtype == expected.dtype, f"{msg} dtype {actual.dtype} != {expected.dtype}"
    assert actual.shape == expected.shape, f"{msg} {tuple(actual.shape)} != {expected.shape}"
    torch.testing.assert_close(actual, expected, rtol=0, atol=0, equal_nan=True, msg=msg or None)


# ---------------------------------------------------------------------------
# Inputs


def step_gaps(view: torch.Tensor) -> torch.Tensor:
    """The filler elements between the elements of a :func:`step_sliced` (step 2) view."""
    return view.as_strided((view.numel(),), (2,), view.storage_offset() + 1)


def expanded(tensor: torch.Tensor, shape) -> torch.Tensor:
    """A stride-0 broadcast view of `tensor` with `shape`."""
    return tensor.expand(*shape)


def empty_like_strided(shape, dtype, kind: str) -> torch.Tensor:
    """An uninitialized output of `shape` stored as `kind`: contiguous/transposed/step."""
    filler = torch.zeros(shape, dtype=dtype)
    if kind == "contiguous":
        return filler
    if kind == "transposed":
        return transposed(filler)
    if kind == "step":
        return step_sliced(filler)
    raise ValueError(kind)


NONCONTIG_LAYOUTS = {
    "contiguous": lambda t: t.clone(),
    "transposed": transposed,
    "step": step_sliced,
}


# ---------------------------------------------------------------------------
# Fixtures

PARALLEL_THREADS = max(2, torch.get_num_threads())


# tests/npu activates the CANN test double and the test "npu" torch device for its whole
# process (use_cann_double() is once per process): it runs as a pytest process of its own
# (`python -m pytest tests/npu`, which nox -s tests runs after the main suite), never
# collected with the other tests, which the double would leak into.
NPU_TESTS = pathlib.Path(__file__).resolve().parent / "npu"
_NPU_PROCESS = pytest.StashKey[bool]()


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "parallel: run with >= 2 OpenMP threads (the kernels' parallel paths)"
    )
    config.stash[_NPU_PROCESS] = _runs_npu_tests(config)


def _runs_npu_tests(config) -> bool:
    """Whether this process runs tests/npu: every path argument lies inside it. Refuses a
    mix of tests/npu and other tests (the double would leak into those)."""
    paths = [(config.invocation_params.dir / arg.split("::")[0]).resolve() for arg in config.args]
    inside = [path == NPU_TESTS or NPU_TESTS in path.parents for path in paths]
    if any(inside) and not all(inside):
        raise pytest.UsageError(
            "tests/npu runs as its own pytest process (`python -m pytest tests/npu`): "
            "it activates the CANN test double for the whole process"
        )
    return any(inside)


def pytest_ignore_collect(collection_path, config):
    """tests/npu only in its own process (see NPU_TESTS)."""
    if collection_path == NPU_TESTS and not config.stash[_NPU_PROCESS]:
        return True
    return None


@pytest.fixture(autouse=True)
def _openmp_threads(request):
    """One torch/OpenMP thread, or PARALLEL_THREADS for tests marked ``parallel``."""
    parallel = request.node.get_closest_marker("parallel") is not None
    torch.set_num_threads(PARALLEL_THREADS if parallel else 1)
    yield


@contextlib.contextmanager
def portable_tensor_flags():
    """The fast functions reading the negative bit, autograd state and version counters
    through torch's Python-level functions, as they do under a torch other than the one
    polyops was built with (docs/user/torch.md, "Torch versions"), instead of through
    polyops._torch_ops."""
    polyops._C._use_portable_tensor_flags()
    try:
        yield
    finally:
        if not polyops._torch_library._stable:  # else polyops._torch_ops is not loaded
            polyops._torch_ops._use_torch_tensor_flags()


@pytest.fixture(params=["polyops", "polyops-portable", "torch.ops"])
def api(request):
    """Both call forms: the fast ``polyops.<op>`` functions (with polyops._torch_ops'
    tensor reads, and with the portable ones) and ``torch.ops.polyops.<op>`` (same kernels
    through torch's dispatcher)."""
    if request.param == "torch.ops":
        yield torch.ops.polyops
    elif request.param == "polyops-portable":
        with portable_tensor_flags():
            yield polyops
    else:
        yield polyops


@pytest.fixture
def gen() -> torch.Generator:
    """A freshly seeded generator per test: every test sees the same data every run."""
    return torch.Generator().manual_seed(20240531)


@pytest.fixture
def cache_capacity():
    """Lets a test change the per-op cache capacity; restores the default 256 afterwards."""
    try:
        yield polyops.set_cache_capacity
    finally:
        polyops.set_cache_capacity(256)


@pytest.fixture
def default_slot_reset():
    """Starts a test from the build's default slots (no overrides, whatever
    POLYOPS_IMPLEMENTATIONS said) and puts the previous choices back afterwards."""
    saved = {op: polyops.default_implementation(op) for op in polyops.operators()}
    for op in saved:
        polyops.set_default_implementation(op, None)
    try:
        yield
    finally:
        for op, slot in saved.items():
            polyops.set_default_implementation(op, slot, device="cpu")
