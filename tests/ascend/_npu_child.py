"""Running Ascend checks in a fresh interpreter on the CANN test double
(use_cann_double() is once per process), and when they cannot run here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import polyops

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


def _copy_double(tmp_path: pathlib.Path, names: dict[str, str]) -> pathlib.Path:
    source = _double_dir()
    for name, target in names.items():
        (tmp_path / name).symlink_to(source / target)
    return tmp_path
