"""The Ascend backend on the CANN test double and the test "npu" device.

``use_cann_double()`` is once per process, so every check runs in a fresh
interpreter: the parity table on npu (each op's npu slots against float64
and against CPU), and the host path read from the double's call log (phase 1
once per geometry, no device-to-host copy or synchronization on a hit) and
the loader's errors. Skipped with a reason where the double or the device
is not built.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import polyops
from polyops.testing import OPS, known_deviation

MARKER = "ASCEND-RESULT:"


def _double_dir() -> pathlib.Path | None:
    directory = pathlib.Path(
        os.environ.get("POLYOPS_CANN_DOUBLE_DIR")
        or pathlib.Path(polyops.__file__).parent / "_cann_double"
    )
    return directory if (directory / "libascendcl.so").is_file() else None


def _skip_reason() -> str | None:
    if "npu" not in polyops._C._built_devices:
        return "polyops was built without the Ascend backend (WITH_ASCEND=OFF)"
    if importlib.util.find_spec("polyops._npu_device") is None:
        return "polyops was built without its npu test device (WITH_NPU_TEST_DEVICE=OFF)"
    if _double_dir() is None:
        return "the CANN test double is not built (no _cann_double/libascendcl.so)"
    if importlib.util.find_spec("torch_npu") is not None:
        return "torch_npu is installed: torch.npu is torch_npu's, not the test device"
    if polyops._torch_library._stable:
        return (
            "npu tensors need polyops._torch_ops, which the stable torch.ops form (a torch "
            "other than the build's, or POLYOPS_TORCH_STABLE=1) does not load"
        )
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def run_child(body: str, env: dict[str, str] | None = None) -> object:
    """Runs `body` after use_cann_double() in a fresh interpreter; returns what it
    passed to report(...). The interpreter must exit cleanly."""
    script = (
        "import json, torch, polyops\n"
        "from polyops.testing import use_cann_double, cann_calls, clear_cann_calls\n"
        "use_cann_double()\n"
        f"def report(value):\n    print({MARKER!r} + json.dumps(value), flush=True)\n"
        + textwrap.dedent(body)
    )
    child = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, **(env or {})),
    )
    lines = [line for line in child.stdout.splitlines() if line.startswith(MARKER)]
    assert child.returncode == 0 and lines, (
        f"the child failed ({child.returncode}):\n{child.stdout[-3000:]}\n{child.stderr[-3000:]}"
    )
    return json.loads(lines[-1][len(MARKER) :])


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
    return run_child(
        """
        import dataclasses
        from polyops.testing import run_parity
        report([dataclasses.asdict(r) for r in run_parity(devices=["npu"])])
        """
    )


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


def test_every_op_has_an_ascend_slot():
    assert sorted(ASCEND_OPS) == sorted(OPS), sorted(set(OPS) - set(ASCEND_OPS))


def test_a_repeated_call_reuses_its_executor_without_phase_one():
    calls = run_child(
        """
        a, b = torch.randn(33, 70).to("npu"), torch.randn(70).to("npu")
        polyops.add(a, b)
        clear_cann_calls()
        for _ in range(3):
            out = polyops.add(a, b)
        hit = [c["function"] for c in cann_calls()]
        c = torch.randn(33, 70).to("npu")  # another address, same geometry
        clear_cann_calls()
        polyops.add(c, b)
        moved = [c["function"] for c in cann_calls()]
        report({"hit": hit, "moved": moved})
        """
    )
    for functions in (calls["hit"], calls["moved"]):
        assert "aclnnAdd" in functions
        assert not any(f.endswith("GetWorkspaceSize") for f in functions), functions
        assert not any(f in ("aclrtSynchronizeStream", "aclrtMemcpy") for f in functions)
        assert "aclSetInputTensorAddr" in functions
    assert calls["hit"].count("aclnnAdd") == 3


def test_work_runs_on_the_current_stream_and_on_stream_argument():
    result = run_child(
        """
        a = torch.randn(8, 16).to("npu")
        side = torch.npu.Stream()
        clear_cann_calls()
        with torch.npu.stream(side):
            polyops.add(a, a)
        on_side = [c for c in cann_calls() if c["function"] == "aclnnAdd"]
        clear_cann_calls()
        polyops.add(a, a, stream=side.npu_stream)
        explicit = [c for c in cann_calls() if c["function"] == "aclnnAdd"]
        clear_cann_calls()
        polyops.add(a, a)
        default = [c for c in cann_calls() if c["function"] == "aclnnAdd"]
        report([on_side[0]["stream"], explicit[0]["stream"], default[0]["stream"]])
        """
    )
    side, explicit, default = result
    assert side == explicit and side != default


def test_add_mul_broadcast_and_alpha_in_both_call_forms():
    # Two-sided broadcasting and alpha reach aclnnAdd / aclnnMul; the alpha
    # scalar is the dtype's value (0.1 in bfloat16) or an INT64 that wraps.
    result = run_child(
        """
        from polyops.testing.references import add_reference, mul_reference
        g = torch.Generator().manual_seed(5)
        worst = {}
        for dtype in (torch.bfloat16, torch.float32, torch.float64):
            a = torch.randn(3, 1, 7, generator=g, dtype=torch.float64).to(dtype)
            b = torch.randn(4, 1, generator=g, dtype=torch.float64).to(dtype)
            for name, api in (("polyops", polyops), ("torch.ops", torch.ops.polyops)):
                got = api.add(a.to("npu"), b.to("npu"), alpha=0.1).cpu()
                want = add_reference(a, b, alpha=0.1)
                worst[f"add-{name}-{dtype}"] = [list(got.shape), float(
                    ((got.double() - want).abs() / want.abs().clamp(min=1e-3)).max())]
                got = api.mul(b.to("npu"), a.to("npu")).cpu()
                want = mul_reference(b, a)
                worst[f"mul-{name}-{dtype}"] = [list(got.shape), float(
                    ((got.double() - want).abs() / want.abs().clamp(min=1e-3)).max())]
        u8 = torch.tensor([1, 200, 0], dtype=torch.uint8)
        wrapped = polyops.add(u8.to("npu"), u8.flip(0).to("npu"), alpha=-1).cpu().tolist()
        clear_cann_calls()
        polyops.add(torch.ones(2).to("npu"), torch.ones(2).to("npu"), alpha=0.5)
        report({"worst": worst, "wrapped": wrapped,
                "calls": [c["function"] for c in cann_calls()]})
        """
    )
    bound = {"bfloat16": 2.0**-8 + 2.0**-23, "float32": 2.0**-23, "float64": 2.0**-52}
    for key, (shape, error) in result["worst"].items():
        assert shape == [3, 4, 7], key
        assert error <= bound[key.split("torch.")[-1]], (key, error)
    assert result["wrapped"] == [1, 0, 255]  # 1 - 0, 200 - 200, 0 - 1
    assert "aclnnAddGetWorkspaceSize" in result["calls"], result["calls"]


def _copy_double(tmp_path: pathlib.Path, names: dict[str, str]) -> pathlib.Path:
    source = _double_dir()
    for name, target in names.items():
        (tmp_path / name).symlink_to(source / target)
    return tmp_path


def test_missing_operator_library_is_a_runtime_error(tmp_path):
    # The runtime and nnopbase are there, no libopapi*.so: the first npu call says so,
    # the interpreter survives, CPU calls still work.
    broken = _copy_double(
        tmp_path, {"libascendcl.so": "libascendcl.so", "libnnopbase.so": "libnnopbase.so"}
    )
    result = run_child(
        f"""
        import os
        os.environ["POLYOPS_CANN_LIB_DIR"] = {str(broken)!r}
        a = torch.ones(4).to("npu")
        try:
            polyops.add(a, a)
            message = None
        except RuntimeError as error:
            message = str(error)
        report([message, polyops.add(torch.ones(2), torch.ones(2)).tolist()])
        """
    )
    assert "no operator library" in result[0] and "libopapi.so" in result[0]
    assert result[1] == [2.0, 2.0]


def test_missing_symbol_names_it_and_the_cann_version(tmp_path):
    # An operator library without aclnn ops (nnopbase stands in for it).
    broken = _copy_double(
        tmp_path,
        {
            "libascendcl.so": "libascendcl.so",
            "libnnopbase.so": "libnnopbase.so",
            "libopapi.so": "libnnopbase.so",
        },
    )
    message = run_child(
        f"""
        import os
        os.environ["POLYOPS_CANN_LIB_DIR"] = {str(broken)!r}
        a = torch.ones(4).to("npu")
        try:
            polyops.mul(a, a)
            report(None)
        except RuntimeError as error:
            report(str(error))
        """
    )
    assert "aclnnMul" in message and "libopapi.so" in message and "from CANN" in message


def test_mixed_devices_and_cpu_tensors_are_value_errors():
    message = run_child(
        """
        try:
            polyops.add(torch.ones(4).to("npu"), torch.ones(4))
            report(None)
        except ValueError as error:
            report(str(error))
        """
    )
    assert message is not None and "npu" in message and "cpu" in message
