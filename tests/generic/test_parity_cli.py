"""``python -m polyops parity`` and ``python -m polyops``: tables, JSON, filters, failures."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

import polyops
from polyops import __main__ as cli_main
from polyops import _support
from polyops.testing import OPS, Call, Case, cli, deviations, run_parity
from polyops.testing.references import rms_norm_reference
from polyops.testing.tensors import F16, F64, parse_dtypes

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
    table = out[out.index("parity against") :].splitlines()
    rows = [line for line in table if line.startswith("  ") and "-----" not in line]
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


def test_undeclared_not_implemented_is_an_error(capsys, monkeypatch):
    # A refusal no slot declares (polyops/_support.py) fails the run.
    monkeypatch.setitem(
        OPS, "rms_norm", dataclasses.replace(OPS["rms_norm"], cases=_float64_rms_norm_case)
    )
    code, out = run_cli(capsys, "parity", "--op", "rms_norm", "--dtype", "float32")
    assert code == 1
    assert table_rows(out, "rms_norm")[0].split()[2:] == ["error", "error"]
    assert "undeclared refusal (polyops/_support.py): NotImplementedError: polyops.rms_norm" in out


def test_not_implemented_is_na_with_reason_under_verbose(capsys, monkeypatch):
    monkeypatch.setitem(
        OPS, "rms_norm", dataclasses.replace(OPS["rms_norm"], cases=_float64_rms_norm_case)
    )
    monkeypatch.setattr(
        _support,
        "NOT_SUPPORTED",
        tuple(
            _support.NotSupported("cpu", "rms_norm", slot, "float64", "a test declaration")
            for slot in ("loop", "omp")
        ),
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


# ---------------------------------------------------------------------------
# Usage errors: one line on stderr, exit status 2, before anything runs


def _usage_error(capsys, monkeypatch, *args: str) -> str:
    """Runs the parity command, which must refuse `args` before running a check."""

    def no_run(**kwargs):
        raise AssertionError("the checks ran before the usage error")

    monkeypatch.setattr(cli, "run_parity", no_run)
    with pytest.raises(SystemExit) as exit_info:
        cli_main.main(["parity", *args])
    captured = capsys.readouterr()
    assert exit_info.value.code == 2 and not captured.out, captured
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m polyops parity: error: "), lines
    return lines[0]


def test_unwritable_json_path_is_refused_before_the_run(capsys, monkeypatch, tmp_path):
    a_file = tmp_path / "file.txt"
    a_file.write_text("kept")
    for path, why in [
        (tmp_path / "missing" / "x.json", "No such file or directory"),
        (tmp_path, "Is a directory"),
        (a_file / "x.json", "Not a directory"),
    ]:
        line = _usage_error(capsys, monkeypatch, "--op", "add", "--json", str(path))
        assert f"--json {str(path)!r} cannot be written: {why}" in line
    assert not (tmp_path / "missing").exists() and a_file.read_text() == "kept"
    for path in ("", "  "):
        line = _usage_error(capsys, monkeypatch, "--op", "add", "--json", path)
        assert f"--json needs a file path, got {path!r}" in line


def test_unwritable_file_is_refused(capsys, monkeypatch, tmp_path):
    path = tmp_path / "read-only.json"
    path.write_text("[]")
    path.chmod(0o444)
    if os.access(path, os.W_OK):  # root writes read-only files: take one nobody may write
        path = pathlib.Path("/proc/version")
        if not path.is_file():
            pytest.skip("root may write a read-only file here, and there is no /proc/version")
    line = _usage_error(capsys, monkeypatch, "--op", "add", "--json", str(path))
    assert f"--json {str(path)!r} cannot be written: " in line


def test_json_checked_then_written(capsys, tmp_path):
    # The check leaves no file behind if the run does not finish; the run writes it.
    path = tmp_path / "new.json"
    code, _ = run_cli(capsys, "parity", "--op", "cat", "--dtype", "bool", "--json", str(path))
    assert code == 0 and {r["op"] for r in json.loads(path.read_text())} == {"cat"}


def test_json_write_failing_after_the_run_is_one_line(capsys, monkeypatch, tmp_path):
    def full_disk(records, path):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "write_json", full_disk)
    code = cli_main.main(
        ["parity", "--op", "cat", "--dtype", "bool", "--json", str(tmp_path) + "/x.json"]
    )
    out, err = capsys.readouterr()
    assert code == 2 and "checks:" in out
    assert err.strip().endswith("No space left on device") and len(err.splitlines()) == 1


def test_filters_that_select_nothing_are_usage_errors(capsys, monkeypatch):
    for args, message in [
        (["--op", ""], "--op '' names nothing"),
        (["--op", ",,"], "--op ',,' names nothing"),
        (["--dtype", ""], "--dtype: no dtype named in ''"),
        (["--device", ","], "--device ',' names nothing"),
        (["--op", "add", "--dtype", "bool"], "no check matches --op add --dtype bool (add takes"),
        (["--op", "rms_norm,swiglu", "--dtype", "i8"], "no check matches --op rms_norm,swiglu"),
    ]:
        line = _usage_error(capsys, monkeypatch, *args)
        assert message in line, (args, line)


def test_short_dtype_names(capsys):
    code, out = run_cli(capsys, "parity", "--op", "swiglu", "--dtype", "bf16", "--dtype", "F32")
    assert code == 0
    rows = [row.split()[1] for row in table_rows(out, "swiglu")]
    assert rows[:2] == ["bfloat16", "float32"]


def test_parse_dtypes():
    assert parse_dtypes("f32, bfloat16,torch.float16,f32") == [torch.float32, torch.bfloat16, F16]
    assert parse_dtypes(["i8,u8", "bool", "F64"]) == [torch.int8, torch.uint8, torch.bool, F64]
    assert parse_dtypes("bf16", allowed=[torch.bfloat16]) == [torch.bfloat16]
    for text, message in [
        ("float8", "unknown dtype 'float8'; choose from bool (bool), f16 (float16), bf16"),
        ("", "no dtype named in ''"),
        (",", "no dtype named in ','"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            parse_dtypes(text)
    with pytest.raises(ValueError, match=r"dtype not accepted here: 'f64'; choose from f32"):
        parse_dtypes("f64", allowed=[torch.float32])


# ---------------------------------------------------------------------------
# Known deviations: xfail with the reason, counted apart, exit 0


def _declare_rms_norm(monkeypatch, fails_with: str) -> None:
    """A wrong reference for rms_norm, and its bfloat16 8x4096 case on cpu declared
    a known deviation that fails with `fails_with`."""
    declared = deviations.KnownDeviation(
        "rms_norm", "cpu", "8x4096", "the reference is wrong on purpose", fails_with
    )
    monkeypatch.setattr(deviations, "KNOWN_DEVIATIONS", (declared,))

    def wrong(*args, **kwargs):
        return rms_norm_reference(*args, **kwargs) * 1.1

    monkeypatch.setitem(OPS, "rms_norm", dataclasses.replace(OPS["rms_norm"], reference=wrong))


def _run_rms_norm_8x4096(capsys, monkeypatch) -> tuple[int, str]:
    info = OPS["rms_norm"]
    only = dataclasses.replace(
        info, cases=lambda dtype: [c for c in info.cases(dtype) if c.name == "8x4096"]
    )
    monkeypatch.setitem(OPS, "rms_norm", dataclasses.replace(only, special_values=False))
    return run_cli(capsys, "parity", "--op", "rms_norm", "--dtype", "bf16")


def test_declared_deviation_is_xfail_and_exits_0(capsys, monkeypatch, tmp_path):
    _declare_rms_norm(monkeypatch, "elements off")
    code, out = _run_rms_norm_8x4096(capsys, monkeypatch)
    slots = polyops.implementations("rms_norm")
    assert code == 0, out
    assert table_rows(out, "rms_norm")[0].count(" xfail") == len(slots)
    for slot, name in slots.items():
        assert (
            f"XFAIL  rms_norm cpu slot {slot} ({name}) bfloat16 case 8x4096: known deviation: "
            "the reference is wrong on purpose; " in out
        )
    n = len(slots)
    assert f"{n} checks: 0 ok, 0 fail, 0 error, 0 n/a, {n} xfail (known deviations)" in out


def test_declared_deviation_failing_otherwise_is_a_failure(capsys, monkeypatch):
    _declare_rms_norm(monkeypatch, "NaN/inf positions")
    code, out = _run_rms_norm_8x4096(capsys, monkeypatch)
    assert code == 1 and "FAIL   rms_norm cpu slot 0" in out
    assert "XFAIL" not in out and "known deviation:" not in out


def test_declared_deviation_that_passes_is_reported(capsys, monkeypatch):
    _declare_rms_norm(monkeypatch, "elements off")
    monkeypatch.setitem(
        OPS, "rms_norm", dataclasses.replace(OPS["rms_norm"], reference=rms_norm_reference)
    )
    code, out = _run_rms_norm_8x4096(capsys, monkeypatch)
    n = len(polyops.implementations("rms_norm"))
    assert code == 0 and f", {n} xpass" in out
    assert "XPASS  rms_norm cpu slot 0 (loop) bfloat16 case 8x4096: passed, but is declared" in out


# ---------------------------------------------------------------------------
# What the main job says it tested


def test_overview_says_what_it_did_not_test(capsys, monkeypatch):
    monkeypatch.setattr(
        cli_main, "run_parity", lambda: run_parity(ops=["cat"], dtypes=[torch.bool])
    )
    code, out = run_cli(capsys)
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.split()[:3] == ["device", "built", "usable"])
    assert "tested now" in header and "run on real hardware" in header
    rows = {
        line.split()[0]: line for line in lines if line.split()[:1] in (["cpu"], ["cuda"], ["npu"])
    }
    built = polyops._C._built_devices
    assert rows["cpu"].split()[1:4] == ["yes", "yes", "yes"]
    for device in ("cuda", "npu"):
        row = rows[device]
        assert row.split()[1] == ("yes" if device in built else "no")
        if device not in polyops.devices():
            assert "no (" in row, row  # why it is not usable
        assert "never" in row, row
    if "npu" in built and "npu" not in polyops.devices():
        assert "python -m polyops parity --cann-double" in out
    legend = next(line for line in lines if line.strip().startswith("legend:"))
    assert "- = no such slot" in legend and "rtol" in legend and "xfail" in legend


def test_absent_npu_points_at_the_cann_double(capsys, monkeypatch):
    if "npu" in polyops.devices():
        pytest.skip("an npu device is present here")
    line = _usage_error(capsys, monkeypatch, "--device", "npu")
    assert "device 'npu' is not present here" in line and "--cann-double" in line


def _cann_double_reason() -> str | None:
    if "npu" not in polyops._C._built_devices:
        return "polyops was built without the Ascend backend"
    if importlib.util.find_spec("polyops._npu_device") is None:
        return "polyops was built without its npu test device"
    if not (pathlib.Path(polyops.__file__).parent / "_cann_double" / "libascendcl.so").is_file():
        return "the CANN test double is not built"
    if importlib.util.find_spec("torch_npu") is not None:
        return "torch_npu is installed"
    return None


def _module(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "polyops", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=600,
    )


def test_cann_double_runs_npu_and_labels_the_known_deviations():
    if reason := _cann_double_reason():
        pytest.skip(reason)
    done = _module("parity", "--cann-double", "--op", "paged_attention,flash_attention,add")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "npu:0" in done.stdout and "npu:1" in done.stdout  # paged_attention's two slots
    xfails = [line for line in done.stdout.splitlines() if line.startswith("XFAIL")]
    # The special-value case of flash_attention (1 npu slot) and paged_attention (2),
    # in float16 and bfloat16 (float32 is n/a on npu): docs/backends/ascend.md.
    assert len(xfails) == 6, xfails
    assert all("-nan-inf: known deviation: " in line and " npu " in line for line in xfails)
    assert ", 6 xfail (known deviations)" in done.stdout and "0 fail, 0 error" in done.stdout


def test_the_main_job_is_quiet():
    # No warning on stderr (torch warns without numpy, which is why polyops depends on it).
    done = _module("parity", "--op", "cat", "--dtype", "bool")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    requirements = importlib.metadata.requires("polyops") or []
    assert any(re.match(r"numpy\b", r) for r in requirements), requirements
