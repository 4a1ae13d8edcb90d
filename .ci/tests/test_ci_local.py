"""The CI runner's ``--local`` mode, on a tiny generated pytest project."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from polyops_ci.cli import main

TINY_CONFIG = """
version: 1
platforms:
  cpu:
    env:
      TINY_FLAG: "on"
      PYTEST_DISABLE_PLUGIN_AUTOLOAD: "1"
    stages:
      - name: build
        run: |
          test "$TINY_FLAG" = on
          echo "building in $PWD"
          touch built-marker
          mkdir -p "$POLYOPS_CI_WORK/site" && echo "VALUE = 42" > "$POLYOPS_CI_WORK/site/tiny.py"
      - name: test
        junit: test.xml
        run: |
          export PYTHONPATH="$POLYOPS_CI_WORK/site"
          python -m pytest -q -p no:cacheprovider --junitxml="$POLYOPS_CI_JUNIT"
"""


def _tiny_project(tmp_path: Path, test_body: str) -> tuple[Path, Path]:
    project = tmp_path / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_tiny.py").write_text(
        textwrap.dedent(
            f"""
            import tiny

            def test_built_module():
                assert tiny.VALUE == 42

            def test_body():
            {textwrap.indent(test_body, "    ")}
            """
        )
    )
    config = tmp_path / "tiny-config.yaml"
    config.write_text(TINY_CONFIG)
    return project, config


def _snapshot(path: Path) -> dict[str, float]:
    return {str(p.relative_to(path)): p.stat().st_mtime for p in path.rglob("*")}


def test_local_passing_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project, config = _tiny_project(tmp_path, "assert True")
    before = _snapshot(project)
    argv = ["--local", "--platform", "cpu", "--config", str(config), "--checkout", str(project)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "overall verdict: PASS" in out
    assert re.search(r"^test\s+PASS\s+2\s+0\s+0\s+0\s", out, re.MULTILINE), out
    # Default results dir inside the checkout; nothing else in the checkout changed.
    (results,) = (project / "ci-results").iterdir()
    assert re.fullmatch(r"cpu-nogit-\d{8}-\d{6}", results.name)
    assert (results / "test.xml").exists()
    assert "building in" in (results / "build.log").read_text()
    after = {k: v for k, v in _snapshot(project).items() if not k.startswith("ci-results")}
    assert after == before


def test_local_failing_project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project, config = _tiny_project(tmp_path, "assert 1 == 2")
    argv = ["--local", "--platform", "cpu", "--config", str(config), "--checkout", str(project)]
    assert main([*argv, "--results-dir", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^test\s+FAIL\s+1\s+1\s+0\s+0\s", out, re.MULTILINE), out
    assert "FAIL test: exit code 1" in out
    assert "overall verdict: FAIL" in out


def test_local_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = _tiny_project(tmp_path, "assert True")
    config = tmp_path / "slow.yaml"
    config.write_text(TINY_CONFIG.replace('test "$TINY_FLAG" = on', "sleep 30"))
    argv = ["--local", "--platform", "cpu", "--config", str(config), "--checkout", str(project)]
    assert main([*argv, "--timeout", "0.5", "--results-dir", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "FAIL build: timed out after 0.5 s" in out
    assert re.search(r"^test\s+SKIPPED", out, re.MULTILINE), out
