"""A run: its stages' results, and the commands, scripts and environment each stage gets."""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .config import CIError, Config, Platform, Stage
from .devices import Devices, device_docker_args, device_env
from .verdict import JUnitCounts

# Where the runner puts things inside a container.
CONTAINER_SRC = "/polyops/src"  # the checkout, mounted read-only
CONTAINER_WORK = "/polyops/work"  # a Docker volume shared by the stages of one run
CONTAINER_RESULTS = "/polyops/results"  # the results dir, mounted read-write


@dataclass
class StageResult:
    """The result of one stage, as shown in the summary."""

    stage: str
    verdict: str  # PASS, FAIL or SKIPPED
    reason: str
    warning: str | None = None
    exit_code: int | None = None
    oom_killed: bool = False
    seconds: float = 0.0
    log: str | None = None
    junit: str | None = None
    counts: JUnitCounts | None = None


@dataclass
class Run:
    """Everything one invocation needs."""

    config: Config
    platform: Platform
    stages: list[Stage]
    checkout: Path
    results_dir: Path
    run_id: str
    commit: str
    devices: Devices
    image: str | None
    rebuild: bool
    local: bool
    timeout_override: float | None
    results: list[StageResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def timeout(self, stage: Stage) -> float:
        """The time limit of ``stage`` in seconds."""
        return self.timeout_override if self.timeout_override is not None else stage.timeout

    def log_path(self, stage: Stage) -> Path:
        """Where ``stage``'s output goes."""
        return self.results_dir / f"{stage.name}.log"


def git_commit(checkout: Path) -> str:
    """The short commit id of the checkout, '-dirty' when tracked files changed, or 'nogit'."""
    try:
        head = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short=12", "HEAD"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
        if head.returncode != 0 or not head.stdout.strip():
            return "nogit"
        status = subprocess.run(
            ["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "nogit"
    commit = head.stdout.strip()
    return f"{commit}-dirty" if status.returncode == 0 and status.stdout.strip() else commit


def image_tag_for(platform: Platform) -> str:
    """``polyops-ci-<platform>:<sha12>``, hashed over the Dockerfile's directory (its context)."""
    if not platform.dockerfile.is_file():
        raise CIError(
            f"platform {platform.name!r}: Dockerfile {platform.dockerfile} not found; "
            "expected .ci/images/<platform>/Dockerfile or a 'dockerfile' key in the config"
        )
    digest = hashlib.sha256()
    context = platform.dockerfile.parent
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return f"polyops-ci-{platform.name}:{digest.hexdigest()[:12]}"


def container_script(platform: Platform, stage: Stage, exclude: Sequence[str]) -> str:
    """The bash script a stage's container runs: copy the checkout once, then the stage."""
    excludes = " ".join(f"--exclude={shlex.quote(p)}" for p in exclude)
    lines = [
        "# copy the read-only checkout into the run's work volume (first stage only)",
        'if [ ! -d "$POLYOPS_CI_WORK/src" ]; then',
        '  mkdir -p "$POLYOPS_CI_WORK/src.partial"',
        f'  tar -C "$POLYOPS_CI_SRC" {excludes} -cf - . \\',
        '    | tar -C "$POLYOPS_CI_WORK/src.partial" -xf -',
        '  mv "$POLYOPS_CI_WORK/src.partial" "$POLYOPS_CI_WORK/src"',
        "fi",
        'cd "$POLYOPS_CI_WORK/src"',
    ]
    if platform.setup.strip():
        lines.append(platform.setup.rstrip())
    lines.append(stage.run.rstrip())
    return "\n".join(lines) + "\n"


def local_script(platform: Platform, stage: Stage) -> str:
    """The bash script a stage runs in ``--local`` mode (the copy is made by the runner)."""
    parts = [platform.setup.rstrip()] if platform.setup.strip() else []
    parts.append(stage.run.rstrip())
    return "\n".join(parts) + "\n"


def stage_env(run: Run, stage: Stage, src: str, work: str, results: str) -> dict[str, str]:
    """The variables a stage sees, besides the platform's ``env``."""
    env = dict(run.platform.env)
    env.update(
        {
            "POLYOPS_CI": "1",
            "POLYOPS_CI_PLATFORM": run.platform.name,
            "POLYOPS_CI_STAGE": stage.name,
            "POLYOPS_CI_SRC": src,
            "POLYOPS_CI_WORK": work,
            "POLYOPS_CI_RESULTS": results,
            "POLYOPS_CI_DEVICES": run.devices.text(),
        }
    )
    if stage.junit:
        env["POLYOPS_CI_JUNIT"] = f"{results.rstrip('/')}/{stage.junit}"
    env.update(device_env(run.platform.passthrough, run.devices, local=run.local))
    return env


def container_name(run: Run, stage: Stage) -> str:
    """A unique, valid container name for ``stage`` of this run."""
    return f"polyops-ci-{run.run_id}-{os.getpid()}-{stage.name}"


def volume_name(run: Run) -> str:
    """The Docker volume holding the checkout copy and build outputs shared by the stages."""
    return f"polyops-ci-work-{run.run_id}-{os.getpid()}"


def run_label(run: Run) -> list[str]:
    """The label put on this run's containers and volume (to find leftovers)."""
    return ["--label", f"polyops-ci.run={run.run_id}"]


def docker_run_argv(run: Run, stage: Stage) -> list[str]:
    """The full ``docker run`` command of a stage. Deliberately without ``--rm``."""
    assert run.image is not None
    for path in (run.checkout, run.results_dir):
        if ":" in str(path) or "," in str(path):
            raise CIError(f"cannot bind-mount {path}: the path contains ':' or ','")
    argv = [
        "docker",
        "run",
        "--name",
        container_name(run, stage),
        *run_label(run),
        "--init",
        *run.platform.docker_args,
        *device_docker_args(run.platform.passthrough, run.devices),
        "-v",
        f"{run.checkout}:{CONTAINER_SRC}:ro",
        "-v",
        f"{run.results_dir}:{CONTAINER_RESULTS}",
        "-v",
        f"{volume_name(run)}:{CONTAINER_WORK}",
    ]
    env = stage_env(run, stage, CONTAINER_SRC, CONTAINER_WORK, CONTAINER_RESULTS)
    for key, value in env.items():
        argv += ["-e", f"{key}={value}"]
    argv += [run.image, "bash", "-eo", "pipefail", "-c"]
    argv.append(container_script(run.platform, stage, run.config.copy_exclude))
    return argv


def image_build_argv(run: Run) -> list[str]:
    """The ``docker build`` command for the platform image."""
    assert run.image is not None
    dockerfile = run.platform.dockerfile
    return ["docker", "build", "-t", run.image, "-f", str(dockerfile), str(dockerfile.parent)]
