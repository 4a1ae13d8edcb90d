"""The framework around the ops: the registry and slot selection.

EXPECTED_OPS and EXPECTED_CPU_SLOTS are the ops and CPU slots the build must have, and
sample_call runs any op on small inputs; the other test_framework_*.py files (the
instance cache, the arguments, the environment variables) import them from here.
"""

from __future__ import annotations

import re

import pytest
import torch
from conftest import F32, assert_close, assert_equal, make_tensor

import polyops
from polyops.testing import references as ref

EXPECTED_OPS = sorted(
    [
        "add",
        "add_rms_norm",
        "apply_rotary_pos_emb",
        "cast",
        "cat",
        "causal_softmax",
        "flash_attention",
        "gemm",
        "linear",
        "matmul",
        "mul",
        "paged_attention",
        "reshape_and_cache",
        "rms_norm",
        "rotary_embedding",
        "silu_and_mul",
        "swiglu",
        "topk_topp_sampling",
    ]
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


def sample_call(op: str, n: int = 8, **kwargs):
    """Calls `op` on small float32 inputs of width `n` and returns (result, reference)."""
    x = torch.linspace(-2.0, 2.0, 3 * n).reshape(3, n)
    w = torch.linspace(0.5, 1.5, n)
    fn = getattr(polyops, op)
    if op in ("add", "mul"):
        return fn(x, w, **kwargs), getattr(ref, f"{op}_reference")(x, w)
    if op == "cast":
        return fn(x, torch.float64, **kwargs), ref.cast_reference(x, torch.float64)
    if op == "rms_norm":
        return fn(x, w, **kwargs), ref.rms_norm_reference(x, w)
    if op == "add_rms_norm":
        return fn(x, x, w, **kwargs)[0], ref.add_rms_norm_reference(x, x, w)[0]
    if op == "silu_and_mul":
        return fn(x, **kwargs), ref.silu_and_mul_reference(x)
    if op == "swiglu":
        return fn(x, x, **kwargs), ref.swiglu_reference(x, x)
    if op == "cat":
        return fn([x, w[None]], 0, **kwargs), ref.cat_reference([x, w[None]], 0)
    if op == "causal_softmax":
        return fn(x, **kwargs), ref.causal_softmax_reference(x)
    if op in ("rotary_embedding", "apply_rotary_pos_emb"):  # one neox head of size n
        positions = torch.tensor([2, 0, 1])
        cache = torch.linspace(-1.0, 1.0, 4 * n).reshape(4, n)
        cos, sin = cache[positions, : n // 2], cache[positions, n // 2 :]
        expected = ref.rotate_reference(x, cos, sin, n, True)
        if op == "rotary_embedding":
            return fn(positions, x.clone(), None, n, cache, **kwargs)[0], expected
        return fn(x.clone(), None, cos.contiguous(), sin.contiguous(), **kwargs)[0], expected
    if op == "reshape_and_cache":  # tokens 0, 1, 2 into slots 3, 0, 1 of 2 blocks of 2
        key_cache, value_cache = torch.zeros(2, 2, 1, n), torch.zeros(2, 2, 1, n)
        key, slots = x.reshape(3, 1, n), torch.tensor([3, 0, 1])
        expected = ref.reshape_and_cache_reference(key, key, key_cache, value_cache, slots)[0]
        fn(key, key, key_cache, value_cache, slots, **kwargs)
        return key_cache, expected
    if op == "topk_topp_sampling":
        # u = 0 picks each row's largest logit: the last of an increasing row.
        uniform = torch.zeros(3)
        return fn(x, 0, 1.0, uniform=uniform, **kwargs), torch.full((3,), n - 1)
    if op in ("matmul", "gemm"):
        return fn(x, x.T.contiguous(), **kwargs), ref.matmul_reference(x, x.T)
    if op == "linear":
        return fn(x, x, **kwargs), ref.linear_reference(x, x)
    if op in ("flash_attention", "paged_attention"):
        # One head of size n over 3 tokens; key = x / 2, value = x.
        q, k = x[:, None, :], (x / 2)[:, None, :]
        cu = torch.tensor([0, 3], dtype=torch.int32)
        expected = ref.flash_attention_reference(q, k, q, cu_seqlens_q=cu, cu_seqlens_kv=cu)
        if op == "flash_attention":
            return fn(q, k, q, cu_seqlens_q=cu, cu_seqlens_kv=cu, **kwargs), expected
        # Decode: token b sees the first b + 1 tokens, blocks of one token.
        lens = torch.tensor([1, 2, 3], dtype=torch.int32)
        table = torch.tensor([[0, 1, 2]] * 3, dtype=torch.int32)
        return fn(q, k[:, None], q[:, None], lens, table, **kwargs), expected
    raise AssertionError(op)


def assert_sample_result(result, expected):
    """sample_call's result against its reference: exact for integer results."""
    if result.dtype.is_floating_point:
        assert_close(result, expected, result.dtype)
    else:
        assert_equal(result, expected)


def cache_deltas(op, before, keys=("hits", "misses")):
    """Cache counter changes since `before`. Evictions are left out unless asked for: with
    a full cache (the suite fills it) every miss may evict an older entry."""
    after = polyops.cache_info(op)
    return {key: after[key] - before[key] for key in keys}


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
