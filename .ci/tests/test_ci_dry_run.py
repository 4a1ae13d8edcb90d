"""The CI runner's ``--dry-run``: the commands printed, nothing run or created."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from ci_runner_support import REPO, RUN_PY, FakeDocker
from polyops_ci.cli import main


@pytest.fixture
def docker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeDocker:
    """A scripted fake docker first on PATH."""
    return FakeDocker(tmp_path, monkeypatch)


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
    assert main(["--platform", platform, "--dry-run"]) == 0
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
    assert main(["--platform", "cpu", "--dry-run", "--local"]) == 0
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
