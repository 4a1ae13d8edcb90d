"""Running the selected stages: each in its own container, or with bash here (``--local``)."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .config import CIError, Passthrough, Stage
from .devices import Devices
from .ownership import fix_ownership
from .plan import (
    Run,
    StageResult,
    container_name,
    docker_run_argv,
    image_build_argv,
    local_script,
    run_label,
    stage_env,
    volume_name,
)
from .process import ProcessEnd, docker, run_streaming
from .verdict import Outcome, judge, read_junit


def _banner(text: str) -> None:
    print(f"\n==> {text}", flush=True)


# --- image -----------------------------------------------------------------------------------


def ensure_image(run: Run) -> str | None:
    """Build the image if it is missing or ``--rebuild`` was given; return a problem or None."""
    assert run.image is not None
    exists = docker(["image", "inspect", run.image]).returncode == 0
    if exists and not run.rebuild:
        print(f"==> using image {run.image} (its Dockerfile is unchanged)", flush=True)
        return None
    why = "--rebuild" if exists else "missing; the Dockerfile changed or was never built"
    _banner(f"building image {run.image} ({why})")
    log = run.results_dir / "image-build.log"
    end = run_streaming(image_build_argv(run), log, None, on_timeout=lambda p: p.kill())
    if end.returncode != 0:
        tail = log.read_text(errors="replace").strip().splitlines()[-1:] if log.exists() else []
        detail = f": {tail[0]}" if tail else ""
        return f"docker build exited {end.returncode}{detail} (log: {log})"
    return None


# --- stages in Docker ------------------------------------------------------------------------


def inspect_container(name: str) -> tuple[dict[str, Any] | None, str | None]:
    """The container's ``.State`` from ``docker inspect``, or ``(None, problem)``."""
    result = docker(["container", "inspect", "--format", "{{json .State}}", name])
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip() or f"exit {result.returncode}"
        return None, (
            f"the container's exit state could not be read (docker inspect: {detail}); "
            "it may have been removed before its exit code was read, which is never a pass"
        )
    try:
        state = json.loads(result.stdout)
        if isinstance(state, list):  # plain `docker inspect` output
            state = state[0].get("State", {})
        if not isinstance(state, dict):
            raise TypeError("not an object")
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        return None, f"docker inspect returned unreadable state ({exc}): {result.stdout[:200]!r}"
    return state, None


def outcome_from_state(
    state: dict[str, Any] | None, problem: str | None, end: ProcessEnd, timeout: float
) -> Outcome:
    """Turn ``docker inspect``'s state into an :class:`Outcome` (ignores the CLI exit code)."""
    if state is None:
        problem = f"{problem} (docker run exited {end.returncode})"
        return Outcome(None, timed_out=end.timed_out, timeout=timeout, problem=problem)
    status = state.get("Status")
    exit_code = state.get("ExitCode")
    oom = bool(state.get("OOMKilled"))
    if status != "exited" or not isinstance(exit_code, int) or isinstance(exit_code, bool):
        error = state.get("Error") or ""
        detail = f"; daemon error: {error}" if error else ""
        return Outcome(
            None,
            oom_killed=oom,
            timed_out=end.timed_out,
            timeout=timeout,
            problem=(
                f"the container did not run to completion (state {status!r}, "
                f"docker run exited {end.returncode}){detail}"
            ),
        )
    return Outcome(exit_code, oom_killed=oom, timed_out=end.timed_out, timeout=timeout)


def run_stage_docker(run: Run, stage: Stage) -> StageResult:
    """Run one stage in a fresh container and judge it."""
    name = container_name(run, stage)
    argv = docker_run_argv(run, stage)
    log = run.log_path(stage)
    junit = run.results_dir / stage.junit if stage.junit else None
    for stale in (log, junit):
        if stale is not None and stale.exists():
            stale.unlink()
    _banner(f"stage {stage.name}: container {name} (timeout {run.timeout(stage):g} s)")
    timeout = run.timeout(stage)
    try:
        end = run_streaming(argv, log, timeout, on_timeout=lambda _p: docker(["kill", name]))
        state, problem = inspect_container(name)
    finally:
        removed = docker(["rm", "-f", name])
        if removed.returncode != 0 and "no such container" not in removed.stderr.lower():
            print(
                f"warning: could not remove container {name}: {removed.stderr.strip()}; "
                f"remove it with: docker rm -f {name}",
                file=sys.stderr,
            )
    outcome = outcome_from_state(state, problem, end, timeout)
    return _judged(run, stage, outcome, end.seconds, junit)


def _judged(
    run: Run, stage: Stage, outcome: Outcome, seconds: float, junit: Path | None
) -> StageResult:
    counts, junit_problem = read_junit(junit) if junit is not None else (None, None)
    verdict = judge(outcome, junit is not None, counts, junit_problem)
    with open(run.log_path(stage), "a", encoding="utf-8") as log:
        log.write(
            f"\n# polyops CI: exit code {outcome.exit_code}, OOM-killed {outcome.oom_killed}, "
            f"timed out {outcome.timed_out}, {seconds:.1f} s\n"
            f"# polyops CI: verdict {'PASS' if verdict.passed else 'FAIL'}: {verdict.reason}\n"
        )
        if verdict.warning:
            log.write(f"# polyops CI: warning: {verdict.warning}\n")
    return StageResult(
        stage=stage.name,
        verdict="PASS" if verdict.passed else "FAIL",
        reason=verdict.reason,
        warning=verdict.warning,
        exit_code=outcome.exit_code,
        oom_killed=outcome.oom_killed,
        seconds=seconds,
        log=str(run.log_path(stage)),
        junit=str(junit) if junit is not None else None,
        counts=counts,
    )


def _skip_rest(run: Run, remaining: Sequence[Stage], reason: str) -> None:
    for stage in remaining:
        run.results.append(StageResult(stage=stage.name, verdict="SKIPPED", reason=reason))


def warn_missing_host_paths(passthrough: Passthrough, devices: Devices) -> None:
    """Warn early when device nodes or driver paths to pass through are absent on this host."""
    if passthrough.kind != "device-files":
        return
    assert passthrough.device_template is not None
    nodes = [passthrough.device_template.format(id=i) for i in devices.ids]
    for path in [*nodes, *passthrough.devices, *passthrough.mounts]:
        if not os.path.exists(path):
            print(
                f"warning: {path} does not exist on this host; docker run will fail "
                "(is the driver installed, and are the --devices ids right?)",
                file=sys.stderr,
            )


def run_docker(run: Run) -> None:
    """Build the image if needed and run the selected stages, each in its own container."""
    warn_missing_host_paths(run.platform.passthrough, run.devices)
    problem = ensure_image(run)
    if problem:
        run.notes.append(f"image build failed: {problem}")
        _skip_rest(run, run.stages, "not run: the image could not be built")
        return
    volume = volume_name(run)
    created = docker(["volume", "create", *run_label(run), volume])
    if created.returncode != 0:
        run.notes.append(f"docker volume create failed: {created.stderr.strip()}")
        _skip_rest(run, run.stages, "not run: the work volume could not be created")
        return
    try:
        for index, stage in enumerate(run.stages):
            result = run_stage_docker(run, stage)
            run.results.append(result)
            if result.verdict != "PASS":
                _skip_rest(run, run.stages[index + 1 :], f"not run: stage {stage.name!r} failed")
                break
    finally:
        docker(["volume", "rm", "-f", volume])
        fix_ownership(run)


# --- stages in the current environment -------------------------------------------------------


def _python_shim(bin_dir: Path) -> None:
    """Make ``python``/``python3`` in the stages mean the interpreter running this script."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
        shim.chmod(0o755)


def copy_checkout(checkout: Path, dest: Path, exclude: Sequence[str], results: Path) -> None:
    """Copy the checkout, skipping names matching ``exclude`` at any depth and the results."""
    inside = results.is_relative_to(checkout)

    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if any(fnmatch.fnmatch(n, p) for p in exclude)}
        if inside:
            skipped.update(n for n in names if Path(directory, n) == results)
        return skipped

    shutil.copytree(checkout, dest, symlinks=True, ignore=ignore)


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_local(run: Run) -> None:
    """Run the selected stages with bash in a temporary copy of the checkout."""
    bash = shutil.which("bash")
    if bash is None:
        raise CIError("--local needs bash on PATH to run the stage commands")
    work = Path(tempfile.mkdtemp(prefix="polyops-ci-"))
    try:
        src = work / "src"
        _banner(f"copying {run.checkout} to {src}")
        copy_checkout(run.checkout, src, run.config.copy_exclude, run.results_dir.resolve())
        _python_shim(work / "bin")
        for index, stage in enumerate(run.stages):
            env = dict(os.environ)
            env.update(stage_env(run, stage, str(run.checkout), str(work), str(run.results_dir)))
            env["PATH"] = f"{work / 'bin'}{os.pathsep}{env.get('PATH', '')}"
            env["POLYOPS_CI_PYTHON"] = sys.executable
            log = run.log_path(stage)
            junit = run.results_dir / stage.junit if stage.junit else None
            for stale in (log, junit):
                if stale is not None and stale.exists():
                    stale.unlink()
            timeout = run.timeout(stage)
            _banner(f"stage {stage.name}: local (timeout {timeout:g} s)")
            argv = [bash, "-eo", "pipefail", "-c", local_script(run.platform, stage)]
            end = run_streaming(
                argv, log, timeout, on_timeout=_kill_group, cwd=src, env=env, new_session=True
            )
            outcome = Outcome(
                end.returncode, timed_out=end.timed_out, timeout=timeout, in_container=False
            )
            result = _judged(run, stage, outcome, end.seconds, junit)
            run.results.append(result)
            if result.verdict != "PASS":
                _skip_rest(run, run.stages[index + 1 :], f"not run: stage {stage.name!r} failed")
                break
    finally:
        shutil.rmtree(work, ignore_errors=True)
        fix_ownership(run)
