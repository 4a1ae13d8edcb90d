"""The framework around the ops: the registry and slot selection.

EXPECTED_OPS and EXPECTED_CPU_SLOTS are the ops and CPU slots the build must have, and
sample_call runs any op on small inputs; the other test_framework_*.py files (the
instance cache, the arguments, the environment variables) import them from here.
"""

from __future__ import annotations

import re

import pytest
import torch

import polyops
from tests.conftest import F32, assert_close, assert_equal, make_tensor
from tests.generic._framework_cases import (
    EXPECTED_OPS,
    assert_sample_result,
    cache_deltas,
    sample_call,
)

# The CPU slots of the API contract (a build may add more, never lose these).
EXPECTED_CPU_SLOTS = {
    "add": {0: "loop", 1: "omp"},
    "mul": {0: "omp"},
    "cast": {0: "loop"},
    "rms_norm": {0: "loop", 1: "omp"},
    "add_rms_norm": {0: "loop", 1: "omp"},
    "silu_and_mul": {0: "omp"},
    "swiglu": {0: "omp"},
    "cat": {0: "omp"},
    "causal_softmax": {0: "omp"},
    "rotary_embedding": {0: "omp"},
    "apply_rotary_pos_emb": {0: "omp"},
    "reshape_and_cache": {0: "omp"},
    "topk_topp_sampling": {0: "sort"},
    "matmul": {0: "blas"},
    "gemm": {0: "blas"},
    "linear": {0: "blas"},
    "flash_attention": {0: "loop", 1: "omp"},
    "paged_attention": {0: "omp"},
}


# ---------------------------------------------------------------------------
# Registry


def test_operators_lists_every_op_as_a_function():
    assert sorted(polyops.operators()) == EXPECTED_OPS
    for op in polyops.operators():
        fn = getattr(polyops, op)
        assert callable(fn)
        assert fn.__name__ == op
        assert op in polyops.__all__
        assert fn.__doc__ and fn.__doc__.strip(), f"{op} has no docstring"


def test_devices():
    devices = polyops.devices()
    assert "cpu" in devices
    assert set(devices) <= {"cpu", "cuda", "npu"}


@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_implementations_and_defaults(op):
    slots = polyops.implementations(op)
    assert slots == polyops.implementations(op, "cpu")
    for slot, name in EXPECTED_CPU_SLOTS[op].items():
        assert slots.get(slot) == name, f"{op}: {slots}"
    assert all(isinstance(s, int) and isinstance(n, str) and n for s, n in slots.items())
    assert polyops.default_implementation(op) in slots
    assert polyops.default_implementation(op, "cpu") == polyops.default_implementation(op)


def test_documented_defaults(default_slot_reset):
    assert polyops.default_implementation("rms_norm") == 1
    assert polyops.default_implementation("add_rms_norm") == 1


@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_every_slot_computes(op):
    for slot in polyops.implementations(op):
        result, expected = sample_call(op, implementation_index=slot)
        assert_sample_result(result, expected)


@pytest.mark.parametrize("bad", [-1, 7, 8, 100])
@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_invalid_implementation_index(op, bad):
    available = ", ".join(f"{s} ({n})" for s, n in sorted(polyops.implementations(op).items()))
    message = (
        f"polyops.{op}: implementation_index={bad} does not exist on device 'cpu'; "
        f"available: {available}"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        sample_call(op, implementation_index=bad)


def test_invalid_implementation_index_lists_names():
    with pytest.raises(ValueError, match=r"available: 0 \(loop\), 1 \(omp\)"):
        sample_call("add", implementation_index=2)
    with pytest.raises(ValueError, match=r"polyops\.add: implementation_index does not fit"):
        sample_call("add", implementation_index=2**70)


@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_implementation_by_name_is_that_slot(op):
    """implementation="<name>" runs the slot of that name and, like an explicit index,
    never another: with that slot made to refuse, the call raises instead of falling back."""
    slots = polyops.implementations(op)
    try:
        for slot, name in slots.items():
            result, expected = sample_call(op, implementation=name)
            assert_sample_result(result, expected)
            polyops._C._refuse_implementations(op, "cpu", [slot])
            polyops.clear_cache()
            with pytest.raises(NotImplementedError, match=f"implementation_index={slot} "):
                sample_call(op, implementation=name)
            for other, other_name in slots.items():
                if other != slot:
                    assert_sample_result(*sample_call(op, implementation=other_name))
    finally:
        polyops._C._refuse_implementations(op, "cpu", [])
        polyops.clear_cache()


def test_implementation_by_name_errors():
    message = "polyops.add: implementation='fast' does not exist on device 'cpu'; available: "
    with pytest.raises(ValueError, match="^" + re.escape(message) + r"0 \(loop\), 1 \(omp\)$"):
        sample_call("add", implementation="fast")
    with pytest.raises(TypeError, match=r"^polyops\.add: implementation must be a str .*got int$"):
        sample_call("add", implementation=1)
    with pytest.raises(TypeError, match="pass implementation_index or implementation, not both"):
        sample_call("add", implementation="omp", implementation_index=1)


def test_unknown_op_and_device():
    with pytest.raises(ValueError, match=r"unknown op 'nope'; known ops: add, "):
        polyops.implementations("nope")
    with pytest.raises(ValueError, match=r"polyops\.default_implementation: unknown op 'nope'"):
        polyops.default_implementation("nope")
    with pytest.raises(ValueError, match=r"polyops\.cache_info: unknown op 'nope'"):
        polyops.cache_info("nope")
    with pytest.raises(ValueError, match=r"unknown op 'nope'"):
        polyops.set_default_implementation("nope", 0)
    with pytest.raises(ValueError, match=r"unknown op 'nope'"):
        polyops.set_default_implementation("nope", None, device="cpu")
    with pytest.raises(ValueError, match=r"polyops\.implementations: unknown device 'tpu'"):
        polyops.implementations("add", "tpu")
    with pytest.raises(ValueError, match=r"polyops\.default_implementation: unknown device 'tpu'"):
        polyops.default_implementation("add", "tpu")
    with pytest.raises(
        ValueError, match=r"polyops\.set_default_implementation: unknown device 'tpu'"
    ):
        polyops.set_default_implementation("add", 0, device="tpu")


# ---------------------------------------------------------------------------
# Slot selection


def test_set_default_implementation_selects_the_slot(default_slot_reset):
    assert polyops.default_implementation("add") == 1
    a = torch.randn(3, 1237)
    b = torch.randn(1237)
    polyops.set_default_implementation("add", 0)
    assert polyops.default_implementation("add") == 0
    before = polyops.cache_info("add")
    assert_close(polyops.add(a, b), a.double() + b.double(), F32)  # runs slot 0: a new key
    assert cache_deltas("add", before) == {"hits": 0, "misses": 1}
    polyops.add(a, b, implementation_index=0)  # the same instance
    assert cache_deltas("add", before) == {"hits": 1, "misses": 1}
    polyops.add(a, b, implementation_index=1)  # the other slot: a new instance
    assert cache_deltas("add", before) == {"hits": 1, "misses": 2}
    # An explicit device works too, and None restores the build's default.
    polyops.set_default_implementation("add", None, device="cpu")
    assert polyops.default_implementation("add") == 1
    polyops.add(a, b)  # slot 1 again: cached
    assert cache_deltas("add", before) == {"hits": 2, "misses": 2}
    polyops.set_default_implementation("add", 0, device="cpu")
    assert polyops.default_implementation("add") == 0
    polyops.set_default_implementation("add", None)
    assert polyops.default_implementation("add") == 1


def test_set_default_implementation_changes_which_kernel_runs(default_slot_reset):
    # rms_norm's two slots sum in different orders: float32 results over a long
    # row differ in the last bits, so the override is visible in the output.
    x = make_tensor((4, 3001), F32, torch.Generator().manual_seed(5))
    w = torch.ones(3001)
    by_slot = {s: polyops.rms_norm(x, w, implementation_index=s) for s in (0, 1)}
    assert not torch.equal(by_slot[0], by_slot[1]), "slots agree bitwise; pick other data"
    for slot in (0, 1):
        polyops.set_default_implementation("rms_norm", slot)
        assert_equal(polyops.rms_norm(x, w), by_slot[slot])
    polyops.set_default_implementation("rms_norm", None)
    assert_equal(polyops.rms_norm(x, w), by_slot[1])


def test_set_default_implementation_rejects_missing_slots(default_slot_reset):
    with pytest.raises(
        ValueError,
        match=r"^polyops\.set_default_implementation: add has no implementation_index=5 "
        r"on any built device",
    ):
        polyops.set_default_implementation("add", 5)
    with pytest.raises(
        ValueError,
        match=r"^polyops\.set_default_implementation: mul has no implementation_index=1 on "
        r"device 'cpu'; available: 0 \(omp\)",
    ):
        polyops.set_default_implementation("mul", 1, device="cpu")
    assert polyops.default_implementation("add") == 1
    assert polyops.default_implementation("mul") == 0


def test_set_default_implementation_typo_names_the_function_and_the_closest_op():
    with pytest.raises(
        ValueError,
        match=r"^polyops\.set_default_implementation: unknown op 'rms_nrom' "
        r"\(did you mean 'rms_norm'\?\); known ops: add, ",
    ):
        polyops.set_default_implementation("rms_nrom", 0)
    with pytest.raises(ValueError, match=r"^polyops\.implementations: unknown op 'swigl' \(did"):
        polyops.implementations("swigl")


def test_a_dtype_every_slot_refuses_is_explained_once():
    # rms_norm's two CPU slots refuse int32 for the same reason: said once.
    x, w = torch.ones(3, 8, dtype=torch.int32), torch.ones(8, dtype=torch.int32)
    with pytest.raises(NotImplementedError) as info:
        polyops.rms_norm(x, w)
    assert str(info.value) == (
        "polyops.rms_norm is not supported for input of dtype int32 because it is implemented "
        "for float16, bfloat16 and float32 only (no other implementation on device 'cpu' "
        "accepts them either)"
    )
