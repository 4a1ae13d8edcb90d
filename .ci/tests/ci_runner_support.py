"""Shared helpers of the tests of the hardware CI runner ``.ci/run.py`` (not a test module).

No Docker, network or polyops build is needed: a fake ``docker`` executable (``fake_docker.py``
behind a shell wrapper) is put first on ``PATH``, scripted per case, and records the argv of
every call; the ``--local`` cases run a tiny generated pytest project. The test modules
(``test_ci_*.py``) import this one by name: pytest puts ``.ci/tests`` on ``sys.path``.
"""

from __future__ import annotations

import ast
import os
import shlex
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CI_DIR = HERE.parent
REPO = CI_DIR.parent
RUN_PY = CI_DIR / "run.py"
FAKE_DOCKER = HERE / "fake_docker.py"


# The runner's package, .ci/polyops_ci, imported by the test modules by name.
if str(CI_DIR) not in sys.path:
    sys.path.insert(0, str(CI_DIR))

from polyops_ci import cli  # noqa: E402


def junit_xml(
    passed: int = 0,
    failed: int = 0,
    errors: int = 0,
    skipped: int = 0,
    totals: dict[str, int] | None = None,
) -> str:
    """A pytest-style JUnit report; ``totals`` overrides the suite's claimed counts."""
    cases = []
    for i in range(passed):
        cases.append(f'<testcase classname="t" name="test_pass_{i}" time="0.01"/>')
    for i in range(failed):
        cases.append(
            f'<testcase classname="t" name="test_fail_{i}"><failure message="boom">'
            "AssertionError</failure></testcase>"
        )
    for i in range(errors):
        cases.append(
            f'<testcase classname="t" name="test_error_{i}"><error message="failed on setup">'
            "fixture error</error></testcase>"
        )
    for i in range(skipped):
        cases.append(
            f'<testcase classname="t" name="test_skip_{i}"><skipped message="no npu"/></testcase>'
        )
    claimed = {
        "tests": passed + failed + errors + skipped,
        "failures": failed,
        "errors": errors,
        "skipped": skipped,
    }
    claimed.update(totals or {})
    attrs = " ".join(f'{k}="{v}"' for k, v in claimed.items())
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="pytest" {attrs}>{"".join(cases)}</testsuite></testsuites>'
    )


class FakeDocker:
    """The fake ``docker`` on PATH plus the results dir of one test."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir()
        wrapper = bin_dir / "docker"
        wrapper.write_text(
            "#!/bin/sh\n"
            f'exec {shlex.quote(sys.executable)} -S -E {shlex.quote(str(FAKE_DOCKER))} "$@"\n'
        )
        wrapper.chmod(0o755)
        self.log = tmp_path / "docker-calls.jsonl"
        self.log.touch()
        self.script_path = tmp_path / "docker-script.json"
        state = tmp_path / "docker-state"
        state.mkdir()
        self.results = tmp_path / "results"
        monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        monkeypatch.setenv("FAKE_DOCKER_LOG", str(self.log))
        monkeypatch.setenv("FAKE_DOCKER_STATE", str(state))
        monkeypatch.setenv("FAKE_DOCKER_SCRIPT", str(self.script_path))
        self.script()

    def script(self, image_exists: bool = True, build_exit: int = 0, **stages: dict) -> None:
        """Describe what the fake docker does; ``stages`` maps a stage name to its behaviour."""
        data = {"image_exists": image_exists, "build_exit": build_exit, "stages": stages}
        self.script_path.write_text(repr(data))

    def main(self, *args: str) -> int:
        """Run the runner in-process with the results dir of this test."""
        return cli.main([*args, "--results-dir", str(self.results)])

    def calls(self) -> list[list[str]]:
        """The argv of every docker invocation so far (without the leading 'docker')."""
        return [ast.literal_eval(line) for line in self.log.read_text().splitlines()]

    def stage_runs(self) -> list[list[str]]:
        """The ``docker run`` calls that ran a stage (not the ownership helper)."""
        return [
            c
            for c in self.calls()
            if c[0] == "run" and any(a.startswith("POLYOPS_CI_STAGE=") for a in c)
        ]


def values(argv: list[str], flag: str) -> list[str]:
    """Every value following ``flag`` in ``argv``."""
    return [argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == flag]


def container_names(calls: list[list[str]], command: list[str]) -> list[str]:
    """The last argument of every call starting with ``command``."""
    return [c[-1] for c in calls if c[: len(command)] == command]


PASSING = junit_xml(passed=3, skipped=1)
