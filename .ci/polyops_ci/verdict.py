"""JUnit reports and the verdict of a stage (``judge()``, the rules of docs/contributing/ci.md)."""

from __future__ import annotations

import contextlib
import signal
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

# Container exits that some Docker hosts produce while tearing a container down after its
# command already finished (SIGKILL, SIGTERM). Only these may be rescued by the JUnit report.
TEARDOWN_EXIT_CODES = {137: "SIGKILL", 143: "SIGTERM"}
PYTEST_NO_TESTS_COLLECTED = 5


@dataclass(frozen=True)
class JUnitCounts:
    """Counts taken from the ``<testcase>`` elements themselves, never the suite totals."""

    tests: int
    passed: int
    failed: int
    skipped: int
    errors: int


def read_junit(path: Path) -> tuple[JUnitCounts | None, str | None]:
    """Count the test cases of a JUnit XML file.

    Returns ``(counts, None)`` or ``(None, problem)`` when the file is missing or unparsable.
    A test case counts as failed if it has a ``<failure>``, errored if it has an ``<error>``
    (pytest records setup/teardown errors that way; a case can be both), skipped if it has a
    ``<skipped>`` and neither, and passed otherwise.
    """
    if not path.is_file():
        return None, f"JUnit report {path} is missing"
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        return None, f"JUnit report {path} cannot be parsed: {exc}"
    tests = passed = failed = skipped = errors = 0
    for case in root.iter("testcase"):
        tests += 1
        tags = {child.tag for child in case}
        if "failure" in tags:
            failed += 1
        if "error" in tags:
            errors += 1
        if not tags & {"failure", "error"}:
            if "skipped" in tags:
                skipped += 1
            else:
                passed += 1
    return JUnitCounts(tests, passed, failed, skipped, errors), None


@dataclass(frozen=True)
class Outcome:
    """What is known about how a stage's process or container ended."""

    exit_code: int | None  # None: the exit state could not be read
    oom_killed: bool = False
    timed_out: bool = False
    timeout: float | None = None
    in_container: bool = True
    problem: str | None = None  # why exit_code is None or the state is unusable


@dataclass(frozen=True)
class Verdict:
    """The judgement of one stage."""

    passed: bool
    reason: str
    warning: str | None = None
    from_junit: bool = False


def _describe_exit(code: int) -> str:
    text = f"exit code {code}"
    if code == PYTEST_NO_TESTS_COLLECTED:
        return f"{text} (pytest: no tests were collected)"
    if code > 128:
        with contextlib.suppress(ValueError):
            text += f" (killed by {signal.Signals(code - 128).name})"
    return text


def _junit_problem(counts: JUnitCounts | None, problem: str | None) -> str | None:
    """Why the report cannot vouch for a pass, or None when it can."""
    if counts is None:
        return problem or "JUnit report is missing"
    if counts.tests == 0:
        return "JUnit report holds no test cases"
    if counts.failed or counts.errors:
        return f"JUnit report has {counts.failed} failed and {counts.errors} errored test cases"
    return None


def judge(
    outcome: Outcome,
    expects_junit: bool,
    counts: JUnitCounts | None = None,
    junit_problem: str | None = None,
) -> Verdict:
    """Decide whether a stage passed.

    The rules, in order:

    1. timed out → fail;
    2. exit state unknown (e.g. the container vanished before ``docker inspect``) → fail;
    3. OOM-killed → fail ("out of memory");
    4. exit 0 → pass, if the stage writes JUnit only when the report exists, parses, holds at
       least one test case and none failed or errored;
    5. exit 137/143 in a container → pass only under the same JUnit conditions, with a warning
       that the verdict came from JUnit (a stage without JUnit fails);
    6. anything else (including pytest's 5, "no tests collected") → fail.
    """
    if outcome.timed_out:
        return Verdict(False, f"timed out after {outcome.timeout:g} s and was killed")
    if outcome.exit_code is None:
        return Verdict(False, outcome.problem or "the exit state could not be read")
    code = outcome.exit_code
    if outcome.oom_killed:
        return Verdict(
            False, f"out of memory: the container was OOM-killed ({_describe_exit(code)})"
        )
    if code == 0:
        if not expects_junit:
            return Verdict(True, "exit code 0")
        issue = _junit_problem(counts, junit_problem)
        if issue:
            return Verdict(False, f"exit code 0 but {issue}")
        return Verdict(True, "exit code 0 and a clean JUnit report")
    if code in TEARDOWN_EXIT_CODES and outcome.in_container:
        killed = f"container exited {code} ({TEARDOWN_EXIT_CODES[code]})"
        if not expects_junit:
            return Verdict(False, f"{killed} and the stage writes no JUnit report to check")
        issue = _junit_problem(counts, junit_problem)
        if issue:
            return Verdict(False, f"{killed} and {issue}")
        assert counts is not None  # guaranteed by _junit_problem returning None
        warning = (
            f"{killed}, not OOM-killed; verdict taken from JUnit: {counts.tests} test cases, "
            "0 failed, 0 errors"
        )
        return Verdict(True, "passed by its JUnit report", warning=warning, from_junit=True)
    reason = _describe_exit(code)
    if code in TEARDOWN_EXIT_CODES:
        reason += "; outside a container the JUnit fallback does not apply"
    if counts is not None and (counts.failed or counts.errors):
        reason += f"; JUnit: {counts.failed} failed, {counts.errors} errors"
    return Verdict(False, reason)
