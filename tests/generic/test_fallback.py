"""Slot fallback: a call without implementation_index whose default slot refuses the
arguments (its constructor raises NotImplementedError) runs the next slot that accepts
them; an explicit implementation_index never falls back.

Every CPU slot accepts every valid argument, so the tests make slots refuse through the
testing hook ``polyops._C._refuse_implementations`` (no fake slot ships in the library).
rms_norm's two CPU slots sum in different orders, so on this data their float32 results
differ in the last bits and the output shows which slot ran.
"""

from __future__ import annotations

import re

import pytest
import torch

import polyops
from polyops import _C, _support
from polyops.testing import OPS
from polyops.testing import references as ref
from polyops.testing.runner import run_case
from tests.conftest import F32, assert_close, assert_equal, make_tensor


@pytest.fixture
def refuse(default_slot_reset):
    """refuse(op, *slots): make those CPU slots of `op` refuse; undone (and the caches
    cleared, since refusals only act on cache misses) after the test."""
    touched: set[str] = set()

    def _refuse(op: str, *slots: int) -> None:
        touched.add(op)
        _C._refuse_implementations(op, "cpu", list(slots))
        polyops.clear_cache()

    polyops.clear_cache()
    try:
        yield _refuse
    finally:
        for op in touched:
            _C._refuse_implementations(op, "cpu", [])
        polyops.clear_cache()


@pytest.fixture
def rms_data():
    x = make_tensor((4, 3001), F32, torch.Generator().manual_seed(5))
    w = torch.ones(3001)
    by_slot = {s: polyops.rms_norm(x, w, implementation_index=s) for s in (0, 1)}
    assert not torch.equal(by_slot[0], by_slot[1]), "slots agree bitwise; pick other data"
    return x, w, by_slot


def _deltas(op: str, before: dict) -> dict:
    after = polyops.cache_info(op)
    return {key: after[key] - before[key] for key in ("hits", "misses")}


def test_default_slot_refusing_falls_back_and_is_cached(refuse, rms_data, api):
    x, w, by_slot = rms_data
    assert polyops.default_implementation("rms_norm") == 1
    refuse("rms_norm", 1)
    before = polyops.cache_info("rms_norm")
    out = api.rms_norm(x, w, 1e-6)
    assert_equal(out, by_slot[0])  # slot 0 ran
    assert_close(out, ref.rms_norm_reference(x, w, 1e-6), F32)
    assert _deltas("rms_norm", before) == {"hits": 0, "misses": 1}
    # Later calls with the same key hit the cached choice: no construction, same slot,
    # new data computed right.
    x2 = make_tensor((4, 3001), F32, torch.Generator().manual_seed(6))
    for data in (x, x2):
        assert_equal(api.rms_norm(data, w, 1e-6), polyops.rms_norm(data, w, 1e-6))
    assert _deltas("rms_norm", before)["misses"] == 1
    assert_close(api.rms_norm(x2, w, 1e-6), ref.rms_norm_reference(x2, w, 1e-6), F32)


def test_explicit_index_never_falls_back(refuse, rms_data):
    x, w, by_slot = rms_data
    refuse("rms_norm", 1)
    message = r"^polyops\.rms_norm: implementation_index=1 on device 'cpu' refuses"
    with pytest.raises(NotImplementedError, match=message):
        polyops.rms_norm(x, w, implementation_index=1)
    # Also once an automatic call has cached its fallback under slot 1's key.
    assert_equal(polyops.rms_norm(x, w), by_slot[0])
    before = polyops.cache_info("rms_norm")
    with pytest.raises(NotImplementedError, match=message):
        polyops.rms_norm(x, w, implementation_index=1)
    assert _deltas("rms_norm", before) == {"hits": 1, "misses": 0}
    assert_equal(polyops.rms_norm(x, w, implementation_index=0), by_slot[0])


def test_override_slot_refusing_falls_back(refuse, rms_data):
    x, w, by_slot = rms_data
    polyops.set_default_implementation("rms_norm", 0)
    refuse("rms_norm", 0)
    assert_equal(polyops.rms_norm(x, w), by_slot[1])
    polyops.set_default_implementation("rms_norm", None)
    assert_equal(polyops.rms_norm(x, w), by_slot[1])  # the default itself, no fallback


def test_no_fallback_when_default_accepts(refuse, rms_data):
    x, w, by_slot = rms_data
    refuse("rms_norm", 0)  # a non-default slot refusing changes nothing
    assert_equal(polyops.rms_norm(x, w), by_slot[1])
    with pytest.raises(NotImplementedError, match=r"implementation_index=0 on device 'cpu'"):
        polyops.rms_norm(x, w, implementation_index=0)


def test_every_slot_refusing_raises_with_each_reason(refuse, rms_data):
    x, w, _ = rms_data
    refuse("rms_norm", 0, 1)
    with pytest.raises(NotImplementedError) as info:
        polyops.rms_norm(x, w)
    text = str(info.value)
    assert text.startswith("polyops.rms_norm: implementation_index=1 on device 'cpu' refuses")
    assert "no other implementation on device 'cpu' accepts them either; 0 (loop): " in text
    assert "implementation_index=0 on device 'cpu' refuses" in text
    # Nothing was cached: once the slots accept again, the default runs.
    _C._refuse_implementations("rms_norm", "cpu", [])
    assert_close(polyops.rms_norm(x, w), ref.rms_norm_reference(x, w), F32)


def test_single_slot_refusal_keeps_its_message(refuse):
    x = torch.randn(3, 5)
    refuse("mul", 0)
    with pytest.raises(NotImplementedError) as info:
        polyops.mul(x, x)
    assert str(info.value) == (
        "polyops.mul: implementation_index=0 on device 'cpu' refuses these arguments "
        "(testing hook polyops._C._refuse_implementations)"
    )


def test_value_errors_do_not_fall_back(refuse):
    refuse("rms_norm", 1)
    # A wrong argument is wrong for every slot: ValueError from the first construction.
    with pytest.raises(ValueError, match=r"polyops\.rms_norm: weight"):
        polyops.rms_norm(torch.randn(3, 8), torch.ones(7))


def test_fallback_runs_the_other_attention_slot(refuse, gen):
    # flash_attention's default CPU slot (omp) refusing: the loop slot runs.
    q = make_tensor((7, 4, 16), F32, gen)
    k = make_tensor((9, 2, 16), F32, gen)
    v = make_tensor((9, 2, 16), F32, gen)
    cu_q = torch.tensor([0, 3, 7], dtype=torch.int32)
    cu_kv = torch.tensor([0, 4, 9], dtype=torch.int32)
    expected = polyops.flash_attention(
        q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv, implementation_index=0
    )
    refuse("flash_attention", 1)
    out = polyops.flash_attention(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    assert_equal(out, expected)
    reference = ref.flash_attention_reference(q, k, v, cu_seqlens_q=cu_q, cu_seqlens_kv=cu_kv)
    assert_close(out, reference, F32)


def test_refuse_hook_checks_its_arguments():
    with pytest.raises(ValueError, match=r"slot must be in \[0, 8\), got 9"):
        _C._refuse_implementations("rms_norm", "cpu", [9])
    with pytest.raises(ValueError, match=r"unknown op"):
        _C._refuse_implementations("nope", "cpu", [0])


# ---------------------------------------------------------------------------
# Declared refusals (polyops/_support.py)


def test_declarations_name_real_ops_and_slots():
    for d in _support.NOT_SUPPORTED:
        assert d.op in polyops.operators(), d
        re.compile(d.refusal)
        assert d.reason, d
        if d.device in _C._built_devices:
            assert d.slot in polyops.implementations(d.op, d.device).values(), d


def test_implementations_verbose():
    for op in polyops.operators():
        plain = polyops.implementations(op)
        verbose = polyops.implementations(op, verbose=True)
        assert {slot: entry["name"] for slot, entry in verbose.items()} == plain
        defaults = [slot for slot, entry in verbose.items() if entry["default"]]
        assert defaults == [polyops.default_implementation(op)]
        # Every CPU slot accepts every valid argument: nothing declared.
        assert all(entry["not_supported"] == [] for entry in verbose.values())
    if "npu" in _C._built_devices:
        [fia] = polyops.implementations("flash_attention", "npu", verbose=True).values()
        assert [n["reason"] for n in fia["not_supported"]] == [
            "the fused attention APIs take float16 and bfloat16 only"
        ]


def test_undeclared_refusal_is_an_error_not_na(refuse):
    # A slot refusing a case it never declared fails the parity table instead of
    # turning into n/a.
    info = OPS["rms_norm"]
    case = info.all_cases(torch.float32)[0]
    refuse("rms_norm", 0)
    [record] = run_case(info, torch.float32, case, [("cpu", 0)])
    assert record.status == "error"
    assert record.message.startswith("undeclared refusal (polyops/_support.py): ")
    assert _support.declared_refusal("rms_norm", "cpu", "loop", record.message) is None
    # A declared one matches its declaration.
    declaration = _support.declared_refusal(
        "flash_attention",
        "npu",
        "fia_v3",
        "polyops.flash_attention on npu (aclnnFusedInferAttentionScoreV3) is not supported "
        "for dtype float32: the API takes float16 and bfloat16",
    )
    assert declaration is not None and declaration.slot == "fia_v3"
