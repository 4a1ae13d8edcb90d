"""Tests of the hardware CI runner ``.ci/run.py``.

No Docker, network or polyops build is needed: a fake ``docker`` executable (``fake_docker.py``
behind a shell wrapper) is put first on ``PATH``, scripted per case, and records the argv of
every call; the ``--local`` cases run a tiny generated pytest project.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
CI_DIR = HERE.parent
REPO = CI_DIR.parent
RUN_PY = CI_DIR / "run.py"
FAKE_DOCKER = HERE / "fake_docker.py"


def _load_runner():
    """Import ``.ci/run.py`` under a unique module name (it is not a package)."""
    name = "polyops_ci_run"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, RUN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ci = _load_runner()


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


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
        return ci.main([*args, "--results-dir", str(self.results)])

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


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    """A scripted fake docker first on PATH."""
    return FakeDocker(tmp_path, monkeypatch)


PASSING = junit_xml(passed=3, skipped=1)


# --------------------------------------------------------------------------------------------
# Verdicts through the whole runner (fake docker)
# --------------------------------------------------------------------------------------------


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
# Images
# --------------------------------------------------------------------------------------------


def test_missing_image_is_built_with_content_tag(docker: FakeDocker) -> None:
    docker.script(image_exists=False, test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "nvidia", "--stage", "test") == 0
    calls = docker.calls()
    builds = [c for c in calls if c[0] == "build"]
    dockerfile = REPO / ".ci" / "images" / "nvidia" / "Dockerfile"
    assert len(builds) == 1
    tag = builds[0][2]
    assert re.fullmatch(r"polyops-ci-nvidia:[0-9a-f]{12}", tag)
    assert builds[0] == ["build", "-t", tag, "-f", str(dockerfile), str(dockerfile.parent)]
    assert docker.stage_runs()[0][-6] == tag
    assert (docker.results / "image-build.log").exists()


def test_existing_image_is_reused(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test") == 0
    assert not [c for c in docker.calls() if c[0] == "build"]


def test_rebuild_forces_build(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test", "--rebuild") == 0
    assert len([c for c in docker.calls() if c[0] == "build"]) == 1


def test_failed_image_build_fails_without_running(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str]
) -> None:
    docker.script(image_exists=False, build_exit=1)
    assert docker.main("--platform", "cpu") == 1
    out = capsys.readouterr().out
    assert "image build failed: docker build exited 1" in out
    assert docker.stage_runs() == []


def test_image_tag_override(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test", "--image-tag", "mine:1") == 0
    assert ["image", "inspect", "mine:1"] in docker.calls()
    assert "mine:1" in docker.stage_runs()[0]


def test_image_tag_follows_dockerfile_content(tmp_path: Path) -> None:
    dockerfile = tmp_path / "images" / "x" / "Dockerfile"
    dockerfile.parent.mkdir(parents=True)
    dockerfile.write_text("FROM python:3.11-slim\n")
    platform = ci.Platform("x", dockerfile, ci.Passthrough("none"), {}, "", (), ())
    first = ci.image_tag_for(platform)
    assert first == ci.image_tag_for(platform)
    dockerfile.write_text("FROM python:3.12-slim\n")
    assert ci.image_tag_for(platform) != first


# --------------------------------------------------------------------------------------------
# The docker run argv of each platform
# --------------------------------------------------------------------------------------------


def _common_run_checks(run: list[str], results: Path, stage: str) -> dict[str, str]:
    assert run[0] == "run"
    assert "--rm" not in run
    assert "--init" in run
    mounts = values(run, "-v")
    assert f"{REPO}:/polyops/src:ro" in mounts
    assert f"{results}:/polyops/results" in mounts
    assert any(m.endswith(":/polyops/work") and m.startswith("polyops-ci-work-") for m in mounts)
    env = dict(e.split("=", 1) for e in values(run, "-e"))
    assert env["POLYOPS_CI_STAGE"] == stage
    assert env["POLYOPS_CI_SRC"] == "/polyops/src"
    assert env["POLYOPS_CI_WORK"] == "/polyops/work"
    assert env["POLYOPS_CI_RESULTS"] == "/polyops/results"
    assert run[-5:-1] == ["bash", "-eo", "pipefail", "-c"]
    script = run[-1]
    assert 'cd "$POLYOPS_CI_WORK/src"' in script
    assert "--exclude=.git" in script
    return env


def test_argv_cpu(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu") == 0
    build, test = docker.stage_runs()
    _common_run_checks(build, docker.results, "build")
    env = _common_run_checks(test, docker.results, "test")
    assert env["POLYOPS_CI_JUNIT"] == "/polyops/results/test.xml"
    assert env["POLYOPS_CI_PLATFORM"] == "cpu"
    for run in (build, test):
        assert "--gpus" not in run
        assert "--device" not in run
    assert "--no-build-isolation" in build[-1]
    assert '--junitxml="$POLYOPS_CI_JUNIT"' in test[-1]


def test_argv_nvidia_all_gpus(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "nvidia") == 0
    build, test = docker.stage_runs()
    for run, stage in ((build, "build"), (test, "test")):
        env = _common_run_checks(run, docker.results, stage)
        assert values(run, "--gpus") == ["all"]
        assert env["POLYOPS_CI_DEVICES"] == "all"
        assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
        assert "CUDA_VISIBLE_DEVICES" not in env  # --gpus already renumbers inside
    assert "--config-settings=cmake.define.WITH_CUDA=ON" in build[-1]


def test_argv_nvidia_selected_gpus(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "nvidia", "--stage", "test", "--devices", "1, 3") == 0
    (run,) = docker.stage_runs()
    # Quoted so that docker's CSV parsing keeps "device=1,3" as one field.
    assert values(run, "--gpus") == ['"device=1,3"']


def test_argv_ascend(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "ascend", "--devices", "0,1") == 0
    build, test = docker.stage_runs()
    for run, stage in ((build, "build"), (test, "test")):
        env = _common_run_checks(run, docker.results, stage)
        assert values(run, "--device") == [
            "/dev/davinci0",
            "/dev/davinci1",
            "/dev/davinci_manager",
            "/dev/devmm_svm",
            "/dev/hisi_hdc",
        ]
        mounts = values(run, "-v")
        for path in ("/usr/local/Ascend/driver", "/usr/local/dcmi", "/usr/local/bin/npu-smi"):
            assert f"{path}:{path}:ro" in mounts
        assert env["ASCEND_VISIBLE_DEVICES"] == "0,1"
        assert "--gpus" not in run
        assert "ascend-toolkit/set_env.sh" in run[-1]
    assert "--config-settings=cmake.define.WITH_ASCEND=ON" in build[-1]


def test_argv_ascend_default_device(docker: FakeDocker) -> None:
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "ascend", "--stage", "test") == 0
    (run,) = docker.stage_runs()
    assert values(run, "--device")[0] == "/dev/davinci0"
    assert "-e" in run and "ASCEND_VISIBLE_DEVICES=0" in run


def test_results_ownership_handed_back_by_helper_container(
    docker: FakeDocker, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ci, "_effective_uid", lambda: 1000)
    monkeypatch.setattr(ci, "invoking_owner", lambda: (1000, 1001))
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test") == 0
    helpers = [c for c in docker.calls() if c[0] == "run" and "--rm" in c]
    assert len(helpers) == 1
    assert helpers[0][-4:] == ["chown", "-R", "1000:1001", "/polyops/results"]
    assert f"{docker.results}:/polyops/results" in values(helpers[0], "-v")


# --------------------------------------------------------------------------------------------
# --dry-run
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("platform", "expected"),
    [
        ("cpu", []),
        ("nvidia", ["--gpus all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]),
        (
            "ascend",
            [
                "--device /dev/davinci0 --device /dev/davinci_manager --device /dev/devmm_svm "
                "--device /dev/hisi_hdc",
                "-v /usr/local/Ascend/driver:/usr/local/Ascend/driver:ro",
                "-v /usr/local/dcmi:/usr/local/dcmi:ro",
                "-v /usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro",
                "-e ASCEND_VISIBLE_DEVICES=0",
            ],
        ),
    ],
)
def test_dry_run_prints_docker_commands_only(
    docker: FakeDocker, capsys: pytest.CaptureFixture[str], platform: str, expected: list[str]
) -> None:
    assert ci.main(["--platform", platform, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert docker.calls() == [], "a dry run must not call docker"
    match = re.search(r"^# results dir: (\S+) \(not created", out, re.MULTILINE)
    assert match
    results = Path(match.group(1))
    assert results.parent == REPO / "ci-results"
    assert re.fullmatch(rf"{platform}-[0-9a-z-]+-\d{{8}}-\d{{6}}", results.name)
    assert not results.exists()
    assert out.count("docker run --name") == 2
    assert f"-v {REPO}:/polyops/src:ro" in out
    assert "docker build -t polyops-ci-" in out
    assert out.count("docker rm -f") == 2
    assert "--rm " not in out.replace("docker run --rm --network none", "")
    for text in expected:
        assert text in out
    if platform == "cpu":
        assert "--gpus" not in out and "--device" not in out


def test_dry_run_local(docker: FakeDocker, capsys: pytest.CaptureFixture[str]) -> None:
    assert ci.main(["--platform", "cpu", "--dry-run", "--local"]) == 0
    out = capsys.readouterr().out
    assert docker.calls() == []
    assert "docker" not in out
    assert "bash -eo pipefail -c" in out
    assert "--junitxml=" in out


def test_dry_run_as_a_script() -> None:
    proc = subprocess.run(
        [sys.executable, str(RUN_PY), "--platform", "ascend", "--dry-run", "--devices", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "--device /dev/davinci2" in proc.stdout
    assert "-e ASCEND_VISIBLE_DEVICES=2" in proc.stdout


# --------------------------------------------------------------------------------------------
# --local on a tiny pytest project
# --------------------------------------------------------------------------------------------

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
    assert ci.main(argv) == 0
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
    assert ci.main([*argv, "--results-dir", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert re.search(r"^test\s+FAIL\s+1\s+1\s+0\s+0\s", out, re.MULTILINE), out
    assert "FAIL test: exit code 1" in out
    assert "overall verdict: FAIL" in out


def test_local_timeout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    project, _ = _tiny_project(tmp_path, "assert True")
    config = tmp_path / "slow.yaml"
    config.write_text(TINY_CONFIG.replace('test "$TINY_FLAG" = on', "sleep 30"))
    argv = ["--local", "--platform", "cpu", "--config", str(config), "--checkout", str(project)]
    assert ci.main([*argv, "--timeout", "0.5", "--results-dir", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "FAIL build: timed out after 0.5 s" in out
    assert re.search(r"^test\s+SKIPPED", out, re.MULTILINE), out


# --------------------------------------------------------------------------------------------
# Configuration and command line errors
# --------------------------------------------------------------------------------------------

GOOD_PLATFORM = {
    "stages": [
        {"name": "build", "run": "true"},
        {"name": "test", "run": "pytest", "junit": "test.xml"},
    ]
}


def _with(**changes: object) -> dict:
    platform = json.loads(json.dumps(GOOD_PLATFORM))
    platform.update(changes)
    return {"version": 1, "platforms": {"cpu": platform}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        pytest.param(None, "the file is empty", id="empty"),
        pytest.param([], "expected a mapping, got list", id="not-a-mapping"),
        pytest.param({"version": 1}, "missing required key 'platforms'", id="no-platforms"),
        pytest.param(
            {"platform": {}, "platforms": {}}, "unknown key 'platform'", id="unknown-top-key"
        ),
        pytest.param({"version": 2, "platforms": {}}, "unsupported version 2", id="version"),
        pytest.param({"platforms": {"CPU": GOOD_PLATFORM}}, "platform names", id="bad-name"),
        pytest.param(_with(stages=[]), "non-empty list of stages", id="no-stages"),
        pytest.param(
            _with(stages=[{"name": "build"}, GOOD_PLATFORM["stages"][1]]),
            "stages[0]: missing required key 'run'",
            id="stage-without-run",
        ),
        pytest.param(
            _with(stages=[GOOD_PLATFORM["stages"][0]]),
            "missing the 'test' stage",
            id="no-test-stage",
        ),
        pytest.param(
            _with(stages=[GOOD_PLATFORM["stages"][0], {"name": "test", "run": "pytest"}]),
            "needs 'junit: <file>.xml'",
            id="test-without-junit",
        ),
        pytest.param(
            _with(stages=[*GOOD_PLATFORM["stages"], {"name": "build", "run": "x"}]),
            "stage 'build' is defined more than once",
            id="duplicate-stage",
        ),
        pytest.param(
            _with(stages=[{"name": "build", "run": "x", "junit": "/abs.xml"}]),
            "expected a relative '.xml' file name",
            id="absolute-junit",
        ),
        pytest.param(
            _with(stages=[{"name": "build", "run": "x", "timeout": -1}]),
            "positive number of seconds",
            id="negative-timeout",
        ),
        pytest.param(_with(passthrough={"kind": "tpu"}), "unknown passthrough kind", id="kind"),
        pytest.param(
            _with(passthrough={"kind": "device-files"}),
            "needs 'device_template'",
            id="no-template",
        ),
        pytest.param(
            _with(passthrough={"kind": "gpus", "default_devices": "x"}),
            "expected 'all' or comma-separated device ids",
            id="bad-default-devices",
        ),
        pytest.param(
            _with(passthrough={"kind": "gpus", "mounts": ["/x"]}),
            "kind 'gpus' uses docker's --gpus",
            id="gpus-with-mounts",
        ),
        pytest.param(
            _with(
                passthrough={
                    "kind": "device-files",
                    "device_template": "/dev/x{id}",
                    "mounts": ["rel"],
                }
            ),
            "expected an absolute path",
            id="relative-mount",
        ),
        pytest.param(_with(docker_args=["--rm"]), "--rm is not allowed", id="rm"),
        pytest.param(_with(env={"POLYOPS_CI_SRC": "x"}), "set by the runner", id="reserved-env"),
        pytest.param(_with(env={"A": [1]}), "expected a scalar value", id="env-list"),
    ],
)
def test_config_errors(data: object, message: str) -> None:
    with pytest.raises(ci.ConfigError) as info:
        ci.parse_config(data, Path("cfg.yaml"), REPO)
    assert message in str(info.value)
    assert str(info.value).startswith("cfg.yaml")


def test_config_error_through_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("platforms:\n  cpu:\n    stages: [\n")
    assert ci.main(["--platform", "cpu", "--config", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "invalid YAML" in err and str(config) in err


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert ci.main(["--platform", "cpu", "--config", str(missing), "--dry-run"]) == 2
    assert "cannot read the CI configuration" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--platform", "tpu"], "unknown platform 'tpu'"),
        (["--platform", "cpu", "--stage", "lint"], "unknown stage 'lint'"),
        (["--platform", "nvidia", "--devices", "gpu0"], "expected 'all' or comma-separated"),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    assert ci.main([*args, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_missing_pyyaml_is_explained(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert ci.main(["--platform", "cpu", "--dry-run"]) == 2
    assert "pip install pyyaml" in capsys.readouterr().err


def test_missing_docker_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert ci.main(["--platform", "cpu", "--results-dir", str(tmp_path / "r")]) == 2
    assert "docker not found on PATH" in capsys.readouterr().err


def test_repository_config_is_valid() -> None:
    config = ci.load_config(ci.DEFAULT_CONFIG, REPO)
    assert {"cpu", "nvidia", "ascend"} <= set(config.platforms)
    for name, platform in config.platforms.items():
        assert platform.dockerfile == REPO / ".ci" / "images" / name / "Dockerfile"
        assert platform.dockerfile.is_file()
        assert [s.name for s in platform.stages][:2] == ["build", "test"]
    images = {
        name: (REPO / ".ci" / "images" / name / "Dockerfile").read_text()
        for name in ("cpu", "nvidia", "ascend")
    }
    assert re.search(r"^FROM python:", images["cpu"], re.MULTILINE)
    assert re.search(r"^ARG CUDA_IMAGE=nvidia/cuda:[^\s]*-devel-", images["nvidia"], re.MULTILINE)
    assert re.search(r"^ARG CANN_IMAGE=[^\s]*cann:", images["ascend"], re.MULTILINE)
    assert "torch-npu==" in images["ascend"]


# --------------------------------------------------------------------------------------------
# Units: JUnit counting, the verdict table, devices, commit id
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
    counts, problem = ci.read_junit(path)
    assert problem is None
    assert counts == ci.JUnitCounts(tests=4, passed=1, failed=1, skipped=1, errors=2)


@pytest.mark.parametrize(
    ("outcome", "junit", "passed", "reason"),
    [
        (ci.Outcome(0), True, True, "clean JUnit"),
        (ci.Outcome(0, in_container=False), False, True, "exit code 0"),
        (ci.Outcome(137), True, True, "passed by its JUnit report"),
        (ci.Outcome(137, in_container=False), True, False, "JUnit fallback does not apply"),
        (ci.Outcome(139), True, False, "killed by SIGSEGV"),
        (ci.Outcome(137, oom_killed=True), True, False, "out of memory"),
        (ci.Outcome(0, timed_out=True, timeout=5), True, False, "timed out after 5 s"),
        (ci.Outcome(None, problem="gone"), True, False, "gone"),
        (ci.Outcome(1), True, False, "exit code 1"),
    ],
)
def test_judge_table(outcome: object, junit: bool, passed: bool, reason: str) -> None:
    counts = ci.JUnitCounts(tests=2, passed=2, failed=0, skipped=0, errors=0)
    verdict = ci.judge(outcome, junit, counts if junit else None)
    assert verdict.passed is passed
    assert reason in verdict.reason
    assert (verdict.warning is not None) == verdict.from_junit


def test_devices_all_for_device_files_reads_the_host(tmp_path: Path) -> None:
    for name in ("npu0", "npu3", "npu_manager"):
        (tmp_path / name).touch()
    passthrough = ci.Passthrough("device-files", "0", str(tmp_path / "npu{id}"))
    devices = ci.select_devices(passthrough, "all")
    assert devices.ids == ("0", "3")
    with pytest.raises(ci.CIError, match="no /nonexistent/dev<N> device found"):
        ci.select_devices(ci.Passthrough("device-files", "0", "/nonexistent/dev{id}"), "all")


def test_local_device_env_only_for_explicit_selection() -> None:
    passthrough = ci.Passthrough("gpus", "all", local_visible_devices_env="CUDA_VISIBLE_DEVICES")
    chosen = ci.select_devices(passthrough, "1,2")
    assert ci.device_env(passthrough, chosen, local=True) == {"CUDA_VISIBLE_DEVICES": "1,2"}
    default = ci.select_devices(passthrough, None)
    assert ci.device_env(passthrough, default, local=True) == {}


def test_git_commit(tmp_path: Path) -> None:
    assert ci.git_commit(tmp_path) == "nogit"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = ci.git_commit(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{12}", commit)
    (tmp_path / "f").write_text("2")
    assert ci.git_commit(tmp_path) == f"{commit}-dirty"
