"""The CI runner's Docker side: image tags and builds, the ``docker run`` argv of each platform,
handing the results back to the invoking user.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ci_runner_support import PASSING, REPO, FakeDocker, values
from polyops_ci import ownership
from polyops_ci.config import Passthrough, Platform
from polyops_ci.plan import image_tag_for


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    """A scripted fake docker first on PATH."""
    return FakeDocker(tmp_path, monkeypatch)


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
    platform = Platform("x", dockerfile, Passthrough("none"), {}, "", (), ())
    first = image_tag_for(platform)
    assert first == image_tag_for(platform)
    dockerfile.write_text("FROM python:3.12-slim\n")
    assert image_tag_for(platform) != first


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
    monkeypatch.setattr(ownership, "_effective_uid", lambda: 1000)
    monkeypatch.setattr(ownership, "invoking_owner", lambda: (1000, 1001))
    docker.script(test={"exit": 0, "junit": PASSING})
    assert docker.main("--platform", "cpu", "--stage", "test") == 0
    helpers = [c for c in docker.calls() if c[0] == "run" and "--rm" in c]
    assert len(helpers) == 1
    assert helpers[0][-4:] == ["chown", "-R", "1000:1001", "/polyops/results"]
    assert f"{docker.results}:/polyops/results" in values(helpers[0], "-v")
