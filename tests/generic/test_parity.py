"""Device-generic parity: every case of polyops.testing.OPS x device x slot x dtype.

The parameters come from the op table and from polyops.devices() /
polyops.implementations(), so a new device or slot gets every case with no
edit here. Devices polyops knows but this machine lacks are skipped with a
reason, never passed. Cases declared in polyops.testing.deviations are
``xfail(strict=True)``: they must fail as declared (any other failure fails
the test), and one that starts passing fails the run as XPASS(strict).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import polyops
from polyops.testing import OPS, Inputs, Tolerance, compare, deviations, run_case, targets_of
from polyops.testing.cli import KNOWN_DEVICES
from polyops.testing.tensors import dtype_name


class KnownDeviationFailed(AssertionError):
    """A declared known deviation failed as declared: the only failure its xfail mark excuses."""


def _marks(op: str, device: str, dtype: torch.dtype, case_name: str) -> list:
    # Run with >= 2 threads: the large cases take the kernels' parallel paths.
    marks = [pytest.mark.parallel]
    declared = deviations.known_deviation(op, device, dtype_name(dtype), case_name)
    if declared is not None:
        marks.append(
            pytest.mark.xfail(strict=True, raises=KnownDeviationFailed, reason=declared.reason)
        )
    return marks


def _present(device: str) -> str | None:
    """None if `device` is usable here, else the reason it is skipped."""
    if device in polyops.devices():
        return None
    return f"device {device!r} is not present here (polyops.devices() = {polyops.devices()})"


def _parity_params() -> list:
    params = []
    for op, info in OPS.items():
        for device in KNOWN_DEVICES:
            absent = _present(device) or (
                None
                if polyops.implementations(op, device)
                else f"{op} has no implementation on {device}"
            )
            if absent:
                skip = pytest.mark.skip(reason=absent)
                params.append(
                    pytest.param(info, device, None, None, None, id=f"{op}-{device}", marks=skip)
                )
                continue
            for slot, name in sorted(polyops.implementations(op, device).items()):
                for dtype in info.dtypes:
                    for case in info.all_cases(dtype):
                        case_id = f"{op}-{device}:{slot}-{name}-{dtype_name(dtype)}-{case.name}"
                        marks = _marks(op, device, dtype, case.name)
                        params.append(
                            pytest.param(info, device, slot, dtype, case, id=case_id, marks=marks)
                        )
    return params


@pytest.mark.parametrize("info, device, slot, dtype, case", _parity_params())
def test_parity(info, device, slot, dtype, case):
    [record] = run_case(info, dtype, case, [(device, slot)])
    if record.status == "n/a" and device != "cpu":
        # n/a only for a refusal the slot declares (polyops/_support.py); an
        # undeclared one is an error record and fails below.
        pytest.skip(f"declared n/a on {device}: {record.message}")
    if record.status == "xfail":
        raise KnownDeviationFailed(record.message)
    # xpass: a declared deviation passed; its strict xfail mark fails the run.
    assert record.status in ("ok", "xpass"), (
        f"{record.status}: max rel err {record.max_rel_err} (tolerance {record.tolerance}, "
        f"atol {record.atol}); {record.message}"
    )


@pytest.mark.parametrize("device", [d for d in KNOWN_DEVICES if d != "cpu"])
@pytest.mark.parametrize("op", sorted(OPS))
def test_device_matches_cpu(op, device):
    # Same inputs on the device and on CPU: each within tolerance of float64, so
    # their difference within the sum of the two allowances.
    if reason := _present(device):
        pytest.skip(reason)
    targets = targets_of(op, [device])
    if not targets:
        pytest.skip(f"{op} has no implementation on {device}")
    info = OPS[op]
    compared = 0
    for dtype in info.dtypes:
        for case in info.all_cases(dtype):
            for r in run_case(info, dtype, case, targets):
                if r.status in ("n/a", "xfail"):  # xfail: test_parity holds it to its declaration
                    continue
                assert r.status in ("ok", "xpass"), f"{r.slot} {r.dtype} {r.case}: {r.message}"
                limit = 2 * r.tolerance * (1 + r.tolerance)
                assert r.vs_cpu_max_rel_err <= limit, (r.slot, r.dtype, r.case)
                compared += 1
    if not compared:
        pytest.skip(f"every case of {op} is n/a on {device}")


# ---------------------------------------------------------------------------
# The table itself


def test_every_operator_has_an_entry():
    assert sorted(OPS) == sorted(polyops.operators())


@pytest.mark.parametrize("op", sorted(OPS))
def test_entry_cases(op):
    info = OPS[op]
    assert info.dtypes
    for dtype in info.dtypes:
        names = [case.name for case in info.all_cases(dtype)]
        assert len(names) >= 4, (dtype, names)
        assert len(set(names)) == len(names), f"duplicate case names for {dtype}: {names}"


def test_dtypes_cover_the_documented_ones():
    floats = {torch.float16, torch.bfloat16, torch.float32}
    for info in OPS.values():
        assert floats <= set(info.dtypes), info.name
    ints = {torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.float64}
    for op in ("add", "mul", "cast", "cat"):
        assert ints <= set(OPS[op].dtypes), op
    assert torch.bool in OPS["cast"].dtypes and torch.bool in OPS["cat"].dtypes


def test_cases_are_deterministic():
    # The same case built twice (or on another device) holds the same values.
    info = OPS["flash_attention"]
    case = info.all_cases(torch.bfloat16)[0]
    seed = info.seed(torch.bfloat16, case)
    first, second = (case.build(Inputs(seed, "cpu")) for _ in range(2))
    for a, b in zip(first.args, second.args, strict=True):
        assert torch.equal(a, b)


def test_special_value_cases():
    flagged = {op for op, info in OPS.items() if info.special_values}
    assert {"add", "mul", "cast", "cat", "rms_norm", "add_rms_norm"} <= flagged
    case = OPS["rms_norm"].all_cases(torch.float32)[-1]
    assert case.name.endswith("-nan-inf")
    x = case.build(Inputs(0, "cpu")).args[0]
    assert torch.isnan(x).any() and torch.isposinf(x).any() and torch.isneginf(x).any()
    assert not any(c.name.endswith("-nan-inf") for c in OPS["cast"].all_cases(torch.int32))


# ---------------------------------------------------------------------------
# compare()


def test_compare_tolerance_and_specials():
    tol = Tolerance(1e-3, 1e-6)
    expected = torch.tensor([1.0, -2.0, 0.0, math.nan, math.inf, -math.inf], dtype=torch.float64)
    good = torch.tensor([1.0009, -2.0, 1e-6, math.nan, math.inf, -math.inf])
    result = compare(good, expected, tol)
    assert result.ok and result.max_rel_err <= tol.rtol
    assert result.max_abs_err == pytest.approx(9e-4, rel=1e-3)
    for bad, why in [
        (torch.tensor([1.0011, -2.0, 0.0, math.nan, math.inf, -math.inf]), "elements off"),
        (torch.tensor([1.0, -2.0, 0.0, 5.0, math.inf, -math.inf]), "NaN/inf"),
        (torch.tensor([1.0, -2.0, math.nan, math.nan, math.inf, -math.inf]), "NaN/inf"),
        (torch.tensor([1.0, -2.0, 0.0, math.nan, -math.inf, -math.inf]), "NaN/inf"),
        (torch.tensor([1.0, -2.0, math.inf, math.nan, math.inf, -math.inf]), "elements off"),
        (torch.tensor([1.0, -2.0, 0.0]), "shape"),
    ]:
        result = compare(bad, expected, tol)
        assert not result.ok and why in result.message, (bad, result)


def test_compare_exact_integers():
    expected = torch.tensor([2**62 + 1, -5, 0], dtype=torch.int64)
    assert compare(expected.clone(), expected, Tolerance(0, 0)).ok
    off = torch.tensor([2**62, -5, 0], dtype=torch.int64)  # equal as float64
    result = compare(off, expected, Tolerance(0, 0))
    assert not result.ok and result.max_abs_err == 1.0
    assert not compare(expected.int(), expected, Tolerance(0, 0)).ok  # wrong dtype


# ---------------------------------------------------------------------------
# Declared known deviations (polyops.testing.deviations)


def test_known_deviations_name_real_ops_devices_and_cases():
    for d in deviations.KNOWN_DEVIATIONS:
        assert d.op in OPS and d.device in KNOWN_DEVICES and d.reason and d.fails_with, d
        cases = {c.name for dt in OPS[d.op].dtypes for c in OPS[d.op].all_cases(dt)}
        assert any(deviations.known_deviation(d.op, d.device, "float16", c) for c in cases), d


def test_the_npu_attention_deviations_are_declared():
    # The six npu rows docs/backends/ascend.md describes: the special-value case of
    # flash_attention (one slot) and paged_attention (two), float16 and bfloat16.
    for op in ("flash_attention", "paged_attention"):
        case = OPS[op].all_cases(torch.float16)[-1].name
        assert case.endswith("-nan-inf")
        declared = deviations.known_deviation(op, "npu", "bfloat16", case)
        assert declared is not None and "NaN" in declared.reason
        assert deviations.known_deviation(op, "cpu", "bfloat16", case) is None
        assert deviations.known_deviation(op, "npu", "bfloat16", case[: -len("-nan-inf")]) is None


def _declare(monkeypatch, fails_with: str = "elements off") -> None:
    """Declares rms_norm's 8x4096 float32 case on cpu a known deviation."""
    declared = deviations.KnownDeviation(
        "rms_norm", "cpu", "8x4096", "a test declaration", fails_with, ("float32",)
    )
    monkeypatch.setattr(deviations, "KNOWN_DEVIATIONS", (declared,))


def _rms_norm_case(monkeypatch, scale: float):
    """rms_norm's 8x4096 float32 case, its reference scaled by `scale` (1.1: wrong)."""
    info = OPS["rms_norm"]
    reference = info.reference
    wrong = dataclasses.replace(info, reference=lambda *a, **k: reference(*a, **k) * scale)
    monkeypatch.setitem(OPS, "rms_norm", wrong)
    [case] = [c for c in wrong.all_cases(torch.float32) if c.name == "8x4096"]
    return wrong, case


def test_declared_cases_are_strict_xfails(monkeypatch):
    _declare(monkeypatch)
    params = [
        p
        for p in _parity_params()
        if p.id.startswith("rms_norm-cpu") and p.id.endswith("float32-8x4096")
    ]
    assert len(params) == len(polyops.implementations("rms_norm"))
    for param in params:
        [xfail] = [m for m in param.marks if m.name == "xfail"]
        assert xfail.kwargs == {
            "strict": True,
            "raises": KnownDeviationFailed,
            "reason": "a test declaration",
        }
    others = [p for p in _parity_params() if "rms_norm-cpu" in p.id and "float16" in p.id]
    assert others and not any(m.name == "xfail" for p in others for m in p.marks)


def test_a_declared_failure_raises_the_excused_exception(monkeypatch):
    _declare(monkeypatch)
    info, case = _rms_norm_case(monkeypatch, 1.1)
    with pytest.raises(KnownDeviationFailed, match="known deviation: a test declaration"):
        test_parity(info, "cpu", 0, torch.float32, case)


def test_a_declared_case_failing_otherwise_is_a_plain_failure(monkeypatch):
    # Declared to fail on NaN/inf positions, it fails on values: not excused.
    _declare(monkeypatch, fails_with="NaN/inf positions")
    info, case = _rms_norm_case(monkeypatch, 1.1)
    with pytest.raises(AssertionError) as failure:
        test_parity(info, "cpu", 0, torch.float32, case)
    assert not isinstance(failure.value, KnownDeviationFailed)
    assert failure.value.args[0].startswith("fail:")


def test_a_declared_case_that_passes_is_xpass(monkeypatch):
    # The body passes; the strict xfail mark turns that into a failed run.
    _declare(monkeypatch)
    info, case = _rms_norm_case(monkeypatch, 1.0)
    [record] = run_case(info, torch.float32, case, [("cpu", 0)])
    assert record.status == "xpass" and "a test declaration" in record.message
    test_parity(info, "cpu", 0, torch.float32, case)
