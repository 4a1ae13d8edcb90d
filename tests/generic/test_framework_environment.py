"""The environment variables read when polyops loads or first runs: POLYOPS_IMPLEMENTATIONS,
POLYOPS_CPU_ISA, POLYOPS_CANN_DOUBLE_DIR and POLYOPS_CANN_LIB_DIR, good and bad values."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

import polyops

BAD_ENVIRONMENT = {
    "bad_slot": ("rms_norm=9", r"rms_norm has no implementation_index=9"),
    "malformed": ("rms_norm", r"expected entries like 'rms_norm=1', got 'rms_norm'"),
    "not_a_number": ("add=one", r"expected entries like 'rms_norm=1', got 'add=one'"),
    "unknown_op": ("no_such_op=1", r"unknown op 'no_such_op'"),
}

GOOD_ENVIRONMENT = " rms_norm=0, add=0 ,"  # spaces and a trailing comma are allowed

# Imports polyops under each POLYOPS_IMPLEMENTATIONS value in turn, in one
# interpreter (torch is imported once): first the good value, in a fresh
# interpreter, then each bad one, which must fail the import with ValueError.
# A failed import leaves no `polyops` in sys.modules, so the next attempt runs
# polyops/__init__.py again.
_ENVIRONMENT_SCRIPT = """
import json, os, sys
results = {}
for name, spec in json.loads(sys.argv[1]):
    os.environ["POLYOPS_IMPLEMENTATIONS"] = spec
    try:
        import polyops
    except ValueError as error:
        results[name] = {"error": str(error)}
    else:
        results[name] = {op: polyops.default_implementation(op) for op in polyops.operators()}
        del sys.modules["polyops"]
print(json.dumps(results))
"""


#: POLYOPS_CPU_ISA values that must fail the import: only baseline, avx2 and
#: avx512, exactly, are accepted (unset or empty: no cap).
BAD_ISA = ["AVX2", "avx2 ", " ", "bogus", "avx512bf16"]

# Imports polyops under each POLYOPS_CPU_ISA value in turn, in one interpreter:
# the variable is read once, by the import, and a failed read is retried.
_ISA_SCRIPT = """
import json, os, sys
os.environ.pop("POLYOPS_IMPLEMENTATIONS")
results = {}
for value in json.loads(sys.argv[1]):
    os.environ["POLYOPS_CPU_ISA"] = value
    try:
        import polyops
    except ValueError as error:
        results[value] = {"error": str(error)}
    else:
        results[value] = {"isa": polyops._C._cpu_isa()}
        del sys.modules["polyops"]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def environment_runs():
    """Fresh interpreters (same executable, PYTHONPATH inherited) importing polyops
    under POLYOPS_IMPLEMENTATIONS values; started together, as each imports torch."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(polyops.__file__)))
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    specs = [("good", GOOD_ENVIRONMENT)] + [(k, v[0]) for k, v in BAD_ENVIRONMENT.items()]
    commands = {
        "imports": [sys.executable, "-c", _ENVIRONMENT_SCRIPT, json.dumps(specs)],
        # A plain `import polyops` with a bad value, left uncaught.
        "crash": [sys.executable, "-c", "import polyops"],
        "isa": [sys.executable, "-c", _ISA_SCRIPT, json.dumps([*BAD_ISA, "avx2"])],
    }
    processes = {
        name: subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": path, "POLYOPS_IMPLEMENTATIONS": "rms_norm=9"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, command in commands.items()
    }
    results = {}
    for name, process in processes.items():
        out, err = process.communicate(timeout=120)
        results[name] = (process.returncode, out, err)
    return results


def test_environment_override(environment_runs):
    code, out, err = environment_runs["imports"]
    assert code == 0, err
    defaults = json.loads(out)["good"]
    assert defaults["rms_norm"] == 0
    assert defaults["add"] == 0
    assert defaults["add_rms_norm"] == 1  # untouched


def test_environment_override_bad_value_fails_the_import(environment_runs):
    code, out, err = environment_runs["crash"]
    assert code != 0 and not out
    last_line = err.strip().splitlines()[-1]
    assert last_line.startswith("ValueError: POLYOPS_IMPLEMENTATIONS='rms_norm=9'"), err
    assert "rms_norm has no implementation_index=9" in last_line


@pytest.mark.parametrize("case", sorted(BAD_ENVIRONMENT))
def test_environment_override_rejects_bad_values(environment_runs, case):
    code, out, err = environment_runs["imports"]
    assert code == 0, err
    result = json.loads(out)[case]
    assert "error" in result, f"import succeeded with {BAD_ENVIRONMENT[case][0]!r}: {result}"
    message = result["error"]
    assert message.startswith("POLYOPS_IMPLEMENTATIONS"), message
    assert re.search(BAD_ENVIRONMENT[case][1], message), message


@pytest.mark.parametrize("value", BAD_ISA)
def test_bad_cpu_isa_fails_the_import(environment_runs, value):
    code, out, err = environment_runs["isa"]
    assert code == 0, err
    assert json.loads(out)[value] == {
        "error": "environment variable POLYOPS_CPU_ISA must be baseline, avx2 or avx512 "
        f"(or unset: the CPU's own best), got '{value}'"
    }


def test_good_cpu_isa_after_bad_ones(environment_runs):
    code, out, err = environment_runs["isa"]
    assert code == 0, err
    # avx2 caps the variant at AVX2 (baseline on a CPU without AVX2 + FMA + F16C).
    assert json.loads(out)["avx2"]["isa"] in ("avx2", "baseline")


def test_bad_cann_double_dir_is_a_value_error(monkeypatch, tmp_path):
    # Refused before anything loads, so it is safe in this process.
    from polyops.testing import use_cann_double

    monkeypatch.setenv("POLYOPS_CANN_DOUBLE_DIR", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"^POLYOPS_CANN_DOUBLE_DIR='.*missing': expected the"):
        use_cann_double()


_LIB_DIR_SCRIPT = """
import os, torch, polyops
from polyops.testing import use_cann_double
use_cann_double()
good = os.environ["POLYOPS_CANN_LIB_DIR"]
a = torch.ones(4).to("npu")
os.environ["POLYOPS_CANN_LIB_DIR"] = os.path.join(good, "missing")
try:
    polyops.add(a, a)
except ValueError as error:
    print(error)
os.environ["POLYOPS_CANN_LIB_DIR"] = good  # the failed load is retried
print(polyops.add(a, a).cpu().tolist())
"""


def test_bad_cann_lib_dir_is_a_value_error_at_the_first_npu_op():
    double = os.path.join(os.path.dirname(polyops.__file__), "_cann_double", "libascendcl.so")
    if "npu" not in polyops._C._built_devices or not os.path.isfile(double):
        pytest.skip("polyops was built without the Ascend backend or its CANN test double")
    child = subprocess.run(
        [sys.executable, "-c", _LIB_DIR_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == 0, child.stderr
    message, result = child.stdout.splitlines()[-2:]
    assert message.startswith(
        "environment variable POLYOPS_CANN_LIB_DIR must name a directory holding CANN's "
        "libascendcl.so (or libacl_rt.so), got '"
    ), message
    assert "missing" in message and result == "[2.0, 2.0, 2.0, 2.0]"
