"""The parity table on npu (the CANN test double): each op's npu slots against float64
and against CPU, one test per op. The double is active for this process
(tests/npu/conftest.py)."""

from __future__ import annotations

import dataclasses

import pytest

import polyops
from polyops.testing import OPS, known_deviation, run_parity

ASCEND_OPS = sorted(op for op in OPS if polyops.implementations(op, "npu"))

# Ops whose Ascend slot refuses every input on purpose, with the reason
# (NotImplementedError): no aclnn route gives polyops' result. None today.
REFUSED_ON_NPU: dict[str, str] = {}

# (op, case name fragment): n/a on npu for a documented reason other than a dtype
# (docs/backends/ascend.md): seeded sampling needs 64-bit integer arithmetic aclnn lacks.
REFUSED_CASES_ON_NPU = {
    ("topk_topp_sampling", "seed"): "seed=",
}


@pytest.fixture(scope="module")
def npu_records() -> list[dict]:
    """The parity run's records on npu (one run for the module)."""
    return [dataclasses.asdict(r) for r in run_parity(devices=["npu"])]


def test_every_ascend_slot_is_in_the_parity_run(npu_records):
    assert ASCEND_OPS, "no op has an Ascend slot"
    seen = {(r["op"], r["slot"]) for r in npu_records if r["device"] == "npu"}
    for op in ASCEND_OPS:
        for slot in polyops.implementations(op, "npu"):
            assert (op, slot) in seen, (op, slot)


@pytest.mark.parametrize("op", ASCEND_OPS)
def test_npu_parity_against_float64_and_cpu(npu_records, op):
    records = [r for r in npu_records if r["op"] == op and r["device"] == "npu"]
    assert records
    if op in REFUSED_ON_NPU:
        for r in records:
            assert r["status"] == "n/a" and "not supported on npu" in r["message"], r
        return
    compared = 0
    for r in records:
        where = f"{op} npu:{r['slot']} {r['dtype']} {r['case']}"
        # Declared known deviations (polyops.testing.deviations, docs/backends/ascend.md) are
        # xfail when they fail as declared; xpass (fixed) or a plain fail must show up.
        if known_deviation(op, "npu", r["dtype"], r["case"]) and r["status"] != "n/a":
            assert r["status"] == "xfail", f"{where}: {r['status']} {r['message']}"
            continue
        if r["status"] == "n/a":
            refused = [
                text
                for (o, case), text in REFUSED_CASES_ON_NPU.items()
                if o == op and case in r["case"]
            ]
            if refused:
                assert refused[0] in r["message"], where
                continue
            # Only a dtype the aclnn API lacks may be n/a, and it says so.
            assert "NotImplementedError" in r["message"] and r["dtype"] in r["message"], where
            continue
        assert r["status"] == "ok", f"{where}: {r['status']} {r['message']}"
        if "npu" in OPS[op].device_rules:
            # Judged by its own rule (e.g. sampling_token_plausible): npu vs cpu is
            # reported in the record, not required to match.
            compared += r["vs_cpu_max_rel_err"] is not None
            continue
        if r["vs_cpu_max_rel_err"] is not None:
            limit = 2 * r["tolerance"] * (1 + r["tolerance"])
            assert r["vs_cpu_max_rel_err"] <= limit, f"{where}: vs cpu {r['vs_cpu_max_rel_err']}"
            compared += 1
    assert compared, f"{op}: no case compared npu against cpu"
