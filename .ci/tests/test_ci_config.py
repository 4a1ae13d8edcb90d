"""The CI runner's configuration and command line: config and usage errors, the repository's
config, device selection and the commit id.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ci_runner_support import REPO
from polyops_ci.cli import main
from polyops_ci.config import (
    DEFAULT_CONFIG,
    CIError,
    ConfigError,
    Passthrough,
    load_config,
    parse_config,
)
from polyops_ci.devices import device_env, select_devices
from polyops_ci.plan import git_commit

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
    with pytest.raises(ConfigError) as info:
        parse_config(data, Path("cfg.yaml"), REPO)
    assert message in str(info.value)
    assert str(info.value).startswith("cfg.yaml")


def test_config_error_through_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("platforms:\n  cpu:\n    stages: [\n")
    assert main(["--platform", "cpu", "--config", str(config), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "invalid YAML" in err and str(config) in err


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nope.yaml"
    assert main(["--platform", "cpu", "--config", str(missing), "--dry-run"]) == 2
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
    assert main([*args, "--dry-run"]) == 2
    assert message in capsys.readouterr().err


def test_missing_pyyaml_is_explained(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    assert main(["--platform", "cpu", "--dry-run"]) == 2
    assert "pip install pyyaml" in capsys.readouterr().err


def test_missing_docker_is_explained(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert main(["--platform", "cpu", "--results-dir", str(tmp_path / "r")]) == 2
    assert "docker not found on PATH" in capsys.readouterr().err


def test_repository_config_is_valid() -> None:
    config = load_config(DEFAULT_CONFIG, REPO)
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
# Units: devices, commit id
# --------------------------------------------------------------------------------------------


def test_devices_all_for_device_files_reads_the_host(tmp_path: Path) -> None:
    for name in ("npu0", "npu3", "npu_manager"):
        (tmp_path / name).touch()
    passthrough = Passthrough("device-files", "0", str(tmp_path / "npu{id}"))
    devices = select_devices(passthrough, "all")
    assert devices.ids == ("0", "3")
    with pytest.raises(CIError, match="no /nonexistent/dev<N> device found"):
        select_devices(Passthrough("device-files", "0", "/nonexistent/dev{id}"), "all")


def test_local_device_env_only_for_explicit_selection() -> None:
    passthrough = Passthrough("gpus", "all", local_visible_devices_env="CUDA_VISIBLE_DEVICES")
    chosen = select_devices(passthrough, "1,2")
    assert device_env(passthrough, chosen, local=True) == {"CUDA_VISIBLE_DEVICES": "1,2"}
    default = select_devices(passthrough, None)
    assert device_env(passthrough, default, local=True) == {}


def test_git_commit(tmp_path: Path) -> None:
    assert git_commit(tmp_path) == "nogit"
    git = ["git", "-C", str(tmp_path), "-c", "user.name=ci", "-c", "user.email=ci@example.com"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "f").write_text("1")
    subprocess.run([*git, "add", "f"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    commit = git_commit(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{12}", commit)
    (tmp_path / "f").write_text("2")
    assert git_commit(tmp_path) == f"{commit}-dirty"
