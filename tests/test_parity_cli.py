"""``python -m polyops parity`` and ``python -m polyops``: tables, JSON, filters, failures."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest
import torch

import polyops
from polyops import __main__ as cli_main
from polyops.testing import OPS, Call, Case, run_parity
from polyops.testing.references import rms_norm_reference

FIELDS = {
    "op",
    "device",
    "slot",
    "slot_name",
    "dtype",
    "case",
    "max_abs_err",
    "max_rel_err",
    "tolerance",
    "status",
}


def run_cli(capsys, *args: str) -> tuple[int, str]:
    code = cli_main.main(list(args))
    return code, capsys.readouterr().out


def table_rows(out: str, op: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"  {op} ")]


def test_human_table(capsys):
    code, out = run_cli(
        capsys, "parity", "--op", "rms_norm,topk_topp_sampling", "--dtype", "float16"
    )
    assert code == 0
    header = next(line for line in out.splitlines() if line.lstrip().startswith("op "))
    assert "cpu:0" in header and "cpu:1" in header
    rms, sampling = table_rows(out, "rms_norm"), table_rows(out, "topk_topp_sampling")
    assert len(rms) == len(sampling) == 1
    # One row per (op, dtype): the dtype and cell columns line up whatever the op name.
    assert rms[0].index("float16") == sampling[0].index("float16") == header.index("dtype")
    assert rms[0].index(" ok", rms[0].index("float16")) > 0 and rms[0].count(" ok") == 2
    assert sampling[0].rstrip().endswith("-")  # no slot 1
    assert "0 fail, 0 error" in out


def test_json_records(capsys, tmp_path):
    path = tmp_path / "parity.json"
    code, out = run_cli(capsys, "parity", "--op", "add", "--op", "cast", "--json", str(path))
    assert code == 0 and str(path) in out
    records = json.loads(path.read_text())
    assert isinstance(records, list) and records
    for record in records:
        assert FIELDS <= set(record), record
        assert record["status"] == "ok"
        assert record["device"] == "cpu" and record["op"] in ("add", "cast")
        assert record["max_rel_err"] <= record["tolerance"]
        assert record["slot_name"] == polyops.implementations(record["op"])[record["slot"]]
    expected = sum(
        len(OPS[op].all_cases(dtype)) * len(polyops.implementations(op))
        for op in ("add", "cast")
        for dtype in OPS[op].dtypes
    )
    assert len(records) == expected
    assert {r["dtype"] for r in records if r["op"] == "cast"} >= {"bool", "int64", "bfloat16"}


def test_filters_and_bad_names(capsys):
    code, out = run_cli(
        capsys, "parity", "--device", "cpu", "--op", "swiglu", "--dtype", "bfloat16"
    )
    assert code == 0
    rows = [line for line in out.splitlines() if line.startswith("  ") and "-----" not in line]
    assert [row.split()[:2] for row in rows[1:]] == [["swiglu", "bfloat16"]]
    for args, message in [
        (["--op", "softmax"], "unknown op 'softmax'"),
        (["--dtype", "float8"], "unknown dtype 'float8'"),
        (["--device", "tpu"], "unknown device 'tpu'"),
    ]:
        with pytest.raises(SystemExit) as exit_info:
            cli_main.main(["parity", *args])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err
    absent = [d for d in ("cuda", "npu") if d not in polyops.devices()]
    if not absent:
        pytest.skip("every known device is present: no absent device to name")
    with pytest.raises(SystemExit):
        cli_main.main(["parity", "--device", absent[0]])
    assert "is not present here" in capsys.readouterr().err


def _float64_rms_norm_case(dtype):
    # rms_norm does not take float64: NotImplementedError, shown as n/a.
    def build(inputs):
        x = inputs.tensor((3, 8), torch.float64)
        return Call((x, inputs.tensor((8,), torch.float64), 1e-6))

    return [Case("float64-input", build)]


def test_not_implemented_is_na_with_reason_under_verbose(capsys, monkeypatch):
    monkeypatch.setitem(
        OPS, "rms_norm", dataclasses.replace(OPS["rms_norm"], cases=_float64_rms_norm_case)
    )
    code, out = run_cli(capsys, "parity", "--op", "rms_norm", "--dtype", "float32")
    assert code == 0  # n/a is not a failure
    assert table_rows(out, "rms_norm")[0].split()[2:] == ["n/a", "n/a"]
    assert "not supported" not in out
    code, out = run_cli(capsys, "parity", "--op", "rms_norm", "--dtype", "float32", "--verbose")
    reasons = [line for line in out.splitlines() if line.startswith("n/a")]
    # The case and its special-value twin, on both slots.
    assert len(reasons) == 4 and "slot 0 (loop)" in reasons[0] and "slot 1 (omp)" in reasons[1]
    assert all("float64-input" in r and "polyops.rms_norm" in r for r in reasons)


def test_other_exceptions_are_errors(capsys, monkeypatch, tmp_path):
    def bad_weight(dtype):
        def build(inputs):  # a float32 weight for float16 input: ValueError from the op
            return Call((inputs.tensor((3, 8), dtype), inputs.tensor((8,), torch.float32), 1e-6))

        return [Case("bad-weight", build)]

    monkeypatch.setitem(OPS, "rms_norm", dataclasses.replace(OPS["rms_norm"], cases=bad_weight))
    path = tmp_path / "errors.json"
    code, out = run_cli(
        capsys, "parity", "--op", "rms_norm", "--dtype", "float16", "--json", str(path)
    )
    assert code == 1
    assert table_rows(out, "rms_norm")[0].split()[2:] == ["error", "error"]
    assert (
        "ERROR  rms_norm cpu slot 0 (loop) float16 case bad-weight: ValueError: polyops.rms_norm"
        in out
    )
    assert {r["status"] for r in json.loads(path.read_text())} == {"error"}


def test_corrupted_reference_fails(capsys, monkeypatch, tmp_path):
    def wrong(*args, **kwargs):
        return rms_norm_reference(*args, **kwargs) * 1.1

    monkeypatch.setitem(OPS, "rms_norm", dataclasses.replace(OPS["rms_norm"], reference=wrong))
    path = tmp_path / "fail.json"
    code, out = run_cli(
        capsys, "parity", "--op", "rms_norm", "--dtype", "bfloat16", "--json", str(path)
    )
    assert code == 1
    assert table_rows(out, "rms_norm")[0].count("FAIL") == 2
    for slot, name in polyops.implementations("rms_norm").items():
        assert f"FAIL   rms_norm cpu slot {slot} ({name}) bfloat16 case 8x4096" in out
    records = json.loads(path.read_text())
    assert {r["status"] for r in records if r["case"] != "0x64"} == {"fail"}
    assert all(r["max_rel_err"] > r["tolerance"] for r in records if r["status"] == "fail")


def test_corrupted_output_of_one_slot_fails_that_slot(capsys, monkeypatch):
    real = polyops.rms_norm

    def corrupt_slot_1(*args, implementation_index=None, **kwargs):
        result = real(*args, implementation_index=implementation_index, **kwargs)
        if implementation_index == 1 and result.numel():
            result[(0,) * result.dim()] += 1  # one element wrong
        return result

    monkeypatch.setattr(polyops, "rms_norm", corrupt_slot_1)
    code, out = run_cli(capsys, "parity", "--op", "rms_norm", "--dtype", "float32")
    assert code == 1
    row = table_rows(out, "rms_norm")[0]
    assert row.split()[3] == "ok" and row.split()[5] == "FAIL"
    assert "FAIL   rms_norm cpu slot 1 (omp) float32 case 8x4096" in out
    assert "slot 0 (loop)" not in out


def test_overview_runs_parity_of_every_op(capsys, monkeypatch):
    # python -m polyops: the info lines, then one summary line per op (here a
    # quick subset), aligned for the longest op name.
    def subset():
        return run_parity(ops=["topk_topp_sampling", "add"], dtypes=[torch.float32, torch.int8])

    monkeypatch.setattr(cli_main, "run_parity", subset)
    code, out = run_cli(capsys)
    assert code == 0
    assert "operators and implementations (every built device):" in out
    assert "  apply_rotary_pos_emb  cpu: 0=omp" in out
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("op ") and "cases" in line)
    add, sampling = table_rows(out, "add")[-1], table_rows(out, "topk_topp_sampling")[-1]
    assert add.index("ok") == sampling.index("ok") == header.index("cpu:0")
    assert sampling.split()[1:3] == [
        "1",
        str(len(OPS["topk_topp_sampling"].all_cases(torch.float32))),
    ]

    def broken():
        records = subset()
        records[0].status = "fail"
        return records

    monkeypatch.setattr(cli_main, "run_parity", broken)
    code, out = run_cli(capsys)
    assert code == 1 and "FAIL" in out


def test_module_entry_point(tmp_path):
    # The real command line, in a fresh process.
    path = tmp_path / "cat.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    command = [sys.executable, "-m", "polyops", "parity", "--op", "cat", "--dtype", "bool"]
    done = subprocess.run([*command, "--json", str(path)], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    assert "  cat " in done.stdout
    assert {r["op"] for r in json.loads(path.read_text())} == {"cat"}
