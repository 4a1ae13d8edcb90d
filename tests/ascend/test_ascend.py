"""The Ascend backend's build and loader: every op has an npu slot, and the loader's
errors when the CANN libraries are incomplete.

The tests that run on the CANN test double and the test "npu" device live in tests/npu/,
a pytest process of its own with the double active (``use_cann_double()`` is once per
process). The loader checks here need a process whose first npu call loads another
library directory, so each runs in a fresh interpreter (:func:`run_child`, also used by
tests that need a fresh process for the same reason, an environment variable read when
the libraries load). Skipped with a reason where the double or the device is not built.
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
from polyops.testing import OPS

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


def test_every_op_has_an_ascend_slot():
    assert sorted(ASCEND_OPS) == sorted(OPS), sorted(set(OPS) - set(ASCEND_OPS))


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
