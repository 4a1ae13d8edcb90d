"""The CI runner's verdicts: through the whole runner (fake docker), JUnit counting and the
``judge()`` table.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ci_runner_support import PASSING, FakeDocker, container_names, junit_xml, values
from polyops_ci.verdict import JUnitCounts, Outcome, judge, read_junit


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    """A scripted fake docker first on PATH."""
    return FakeDocker(tmp_path, monkeypatch)


def test_clean_pass(docker: FakeDocker, capsys: pytest.CaptureFixture[str]) -> None:
    docker.script(build={"exit": 0}, test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu") == 0
    out = capsys.readouterr().out
    assert "overall verdict: PASS" in out
    assert re.search(r"^test\s+PASS\s+3\s+0\s+1\s+0\s", out, re.MULTILINE), out
    assert "WARNING" not in out
    runs = docker.stage_runs()
    assert [values(r, "-e") for r in runs][0].count("POLYOPS_CI_STAGE=build") == 1
    assert len(runs) == 2
    for run in runs:
        assert "--rm" not in run
    names = [values(r, "--name")[0] for r in runs]
    calls = docker.calls()
    assert container_names(calls, ["container", "inspect"]) == names
    assert container_names(calls, ["rm", "-f"]) == names
    summary = json.loads((docker.results / "summary.json").read_text())
    assert summary["passed"] is True
    assert [s["verdict"] for s in summary["stages"]] == ["PASS", "PASS"]
    assert (docker.results / "build.log").read_text().startswith("fake build output")
    assert (docker.results / "test.xml").exists()


def test_inspect_happens_before_rm(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test") == 0
    verbs = [c[0] if c[0] != "container" else "inspect" for c in docker.calls()]
    run_at = verbs.index("run")
    assert verbs[run_at : run_at + 3] == ["run", "inspect", "rm"]


def test_fail_exit_code(docker: FakeDocker, capsys: pytest.CaptureFixture[str]) -> None:
    docker.script(test={"exit": 1, "junit": junit_xml(passed=2, failed=1)})
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    out = capsys.readouterr().out
    assert "FAIL test: exit code 1" in out
    assert re.search(r"^test\s+FAIL\s+2\s+1\s+0\s+0\s", out, re.MULTILINE), out
    assert "overall verdict: FAIL" in out


@pytest.mark.parametrize("code", [137, 143])
def test_teardown_kill_with_passing_junit_passes_with_warning(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str], code: int
) -> None:
    docker.script(test={"exit": code, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test") == 0
    out = capsys.readouterr().out
    assert "WARNING test:" in out
    assert "verdict taken from JUnit" in out
    assert f"exited {code}" in out
    assert re.search(r"^test\s+PASS\*\s+3\s+0\s+1\s+0\s", out, re.MULTILINE), out
    assert "overall verdict: PASS" in out


@pytest.mark.parametrize(
    ("junit", "expected"),
    [
        pytest.param(junit_xml(passed=5, failed=1), "1 failed and 0 errored", id="failure"),
        pytest.param(junit_xml(passed=5, errors=1), "0 failed and 1 errored", id="setup-error"),
        pytest.param(None, "is missing", id="missing"),
        pytest.param(junit_xml(totals={"tests": 4}), "no test cases", id="zero-cases"),
        pytest.param("<testsuites><testsuite", "cannot be parsed", id="unparsable"),
        pytest.param(
            junit_xml(passed=2, failed=1, totals={"failures": 0}),
            "1 failed",
            id="suite-totals-lie",
        ),
    ],
)
def test_teardown_kill_with_bad_junit_fails(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str], junit: str | None, expected: str
) -> None:
    docker.script(test={"exit": 137, "junit": junit})
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    out = capsys.readouterr().out
    assert "FAIL test: container exited 137 (SIGKILL) and" in out
    assert expected in out
    assert "overall verdict: FAIL" in out


def test_oom_killed_fails_even_with_passing_junit(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    docker.script(test={"exit": 137, "oom": True, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    out = capsys.readouterr().out
    assert "out of memory" in out
    assert "overall verdict: FAIL" in out


def test_vanished_container_is_never_a_pass(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    # `docker run` claims success and the JUnit is clean, but the state is gone.
    docker.script(test={"exit": 0, "cli_exit": 0, "vanish": True, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    out = capsys.readouterr().out
    assert "could not be read" in out
    assert "No such container" in out
    assert "(docker run exited 0)" in out
    assert "overall verdict: FAIL" in out
    assert container_names(docker.calls(), ["rm", "-f"]), "rm must still be attempted"


def test_container_that_never_ran_fails(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    # A `created` container reports ExitCode 0; that must not read as a pass.
    docker.script(test={"exit": 0, "cli_exit": 125, "status": "created", "error": "no such device"})
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    out = capsys.readouterr().out
    assert "did not run to completion (state 'created', docker run exited 125)" in out
    assert "no such device" in out


def test_no_tests_collected_fails(docker: FakeDocker, capsys: pytest.CaptureFixture[str]) -> None:
    docker.script(test={"exit": 5, "junit": junit_xml()})
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    assert "exit code 5 (pytest: no tests were collected)" in capsys.readouterr().out


def test_exit_zero_without_junit_fails(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    docker.script(test={"exit": 0})
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    assert "exit code 0 but JUnit report" in capsys.readouterr().out


def test_stale_junit_from_an_earlier_run_is_not_trusted(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    docker.results.mkdir()
    (docker.results / "test.xml").write_text(PASSING)
    docker.script(test={"exit": 137})  # writes no report this time
    assert docker.main("--platform", "cpu", "--stage", "test") == 1
    assert "is missing" in capsys.readouterr().out


def test_killed_stage_without_junit_fails(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    docker.script(build={"exit": 137})
    assert docker.main("--platform", "cpu", "--stage", "build") == 1
    assert "writes no JUnit report to check" in capsys.readouterr().out


def test_failed_build_skips_test(docker: FakeDocker, capsys: pytest.CaptureFixture[str]) -> None:
    docker.script(build={"exit": 2}, test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu") == 1
    out = capsys.readouterr().out
    assert len(docker.stage_runs()) == 1
    assert re.search(r"^test\s+SKIPPED", out, re.MULTILINE), out
    assert "not run: stage 'build' failed" in out
    assert container_names(docker.calls(), ["volume", "rm", "-f"]), "volume must be removed"


def test_timeout_kills_and_fails(docker: FakeDocker, capsys: pytest.CaptureFixture[str]) -> None:
    docker.script(test={"exit": 0, "sleep": 30, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test", "--timeout", "0.5") == 1
    out = capsys.readouterr().out
    assert "timed out after 0.5 s" in out
    calls = docker.calls()
    name = values(docker.stage_runs()[0], "--name")[0]
    assert ["kill", name] in calls
    assert ["rm", "-f", name] in calls


# --------------------------------------------------------------------------------------------
# Units: JUnit counting, the verdict table
# --------------------------------------------------------------------------------------------


def test_read_junit_counts_test_cases(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    path.write_text(
        '<testsuite tests="99" failures="0" errors="0">'
        '<testcase name="a"/>'
        '<testcase name="b"><skipped/></testcase>'
        '<testcase name="c"><failure/><error/></testcase>'
        '<testcase name="d"><error/></testcase>'
        "</testsuite>"
    )
    counts, problem = read_junit(path)
    assert problem is None
    assert counts == JUnitCounts(tests=4, passed=1, failed=1, skipped=1, errors=2)


@pytest.mark.parametrize(
    ("outcome", "junit", "passed", "reason"),
    [
        (Outcome(0), True, True, "clean JUnit"),
        (Outcome(0, in_container=False), False, True, "exit code 0"),
        (Outcome(137), True, True, "passed by its JUnit report"),
        (Outcome(137, in_container=False), True, False, "JUnit fallback does not apply"),
        (Outcome(139), True, False, "killed by SIGSEGV"),
        (Outcome(137, oom_killed=True), True, False, "out of memory"),
        (Outcome(0, timed_out=True, timeout=5), True, False, "timed out after 5 s"),
        (Outcome(None, problem="gone"), True, False, "gone"),
        (Outcome(1), True, False, "exit code 1"),
    ],
)
def test_judge_table(outcome: object, junit: bool, passed: bool, reason: str) -> None:
    counts = JUnitCounts(tests=2, passed=2, failed=0, skipped=0, errors=0)
    verdict = judge(outcome, junit, counts if junit else None)
    assert verdict.passed is passed
    assert reason in verdict.reason
    assert (verdict.warning is not None) == verdict.from_junit
