"""What the user reads: the ``--dry-run`` commands, the summary table and ``summary.json``."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import asdict
from pathlib import Path

from . import ownership
from .ownership import chown_argv
from .plan import (
    Run,
    container_name,
    docker_run_argv,
    image_build_argv,
    local_script,
    run_label,
    stage_env,
    volume_name,
)

# --- dry run ---------------------------------------------------------------------------------


def print_dry_run(run: Run) -> None:
    """Print what a run would execute, without running or creating anything."""
    print(f"# polyops CI dry run: platform {run.platform.name}, commit {run.commit}")
    print(f"# devices: {run.devices.text() or 'none'}")
    print(f"# results dir: {run.results_dir} (not created in a dry run)")
    if run.local:
        print("# --local: stages run with bash in a temporary copy of the checkout")
        print(f"# copy {run.checkout} -> $WORK/src, skipping {', '.join(run.config.copy_exclude)}")
        for stage in run.stages:
            env = stage_env(run, stage, str(run.checkout), "$WORK", str(run.results_dir))
            print(f"# stage {stage.name} (timeout {run.timeout(stage):g} s), in $WORK/src:")
            assignments = [f"{k}={v}" for k, v in env.items()]
            argv = ["env", *assignments, "bash", "-eo", "pipefail", "-c"]
            print(shlex.join([*argv, local_script(run.platform, stage)]))
        return
    assert run.image is not None
    print(f"# image {run.image}: built only if `docker image inspect` finds none, or --rebuild")
    print(shlex.join(["docker", "image", "inspect", run.image]))
    print(shlex.join(image_build_argv(run)))
    print(shlex.join(["docker", "volume", "create", *run_label(run), volume_name(run)]))
    for stage in run.stages:
        name = container_name(run, stage)
        print(f"# stage {stage.name} (timeout {run.timeout(stage):g} s)")
        print(shlex.join(docker_run_argv(run, stage)))
        print(shlex.join(["docker", "container", "inspect", "--format", "{{json .State}}", name]))
        print(shlex.join(["docker", "rm", "-f", name]))
    print(shlex.join(["docker", "volume", "rm", "-f", volume_name(run)]))
    owner = ownership.invoking_owner()
    if owner is not None and ownership._effective_uid() != 0:
        print(shlex.join(chown_argv(run, owner)))
    elif owner is not None and owner != (0, 0):
        print(f"# chown -R {owner[0]}:{owner[1]} {run.results_dir} (done by the runner)")


# --- summary ---------------------------------------------------------------------------------


def _display_path(path: str | None, base: Path) -> str:
    if not path:
        return "-"
    try:
        return os.path.relpath(path, base) if Path(path).is_relative_to(base) else path
    except ValueError:
        return path


def print_summary(run: Run) -> bool:
    """Print the per-stage table and the overall verdict; return whether the run passed."""
    passed = bool(run.results) and all(r.verdict == "PASS" for r in run.results)
    cwd = Path.cwd()
    rows = [("stage", "verdict", "passed", "failed", "skipped", "errors", "time", "log")]
    for r in run.results:
        c = r.counts
        nums = (c.passed, c.failed, c.skipped, c.errors) if c else ("-",) * 4
        verdict = "PASS*" if r.warning else r.verdict
        time_text = f"{r.seconds:.1f}s" if r.verdict != "SKIPPED" else "-"
        rows.append((r.stage, verdict, *map(str, nums), time_text, _display_path(r.log, cwd)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    mode = "local" if run.local else f"docker, image {run.image}"
    print()
    print("=" * 30 + " polyops CI summary " + "=" * 30)
    print(f"platform {run.platform.name} | commit {run.commit} | {mode}")
    print(f"devices  {run.devices.text() or 'none'}")
    print(f"results  {_display_path(str(run.results_dir), cwd)}")
    for row in rows:
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    for r in run.results:
        if r.warning:
            print(f"WARNING {r.stage}: {r.warning}")
        if r.verdict != "PASS":
            print(f"{r.verdict} {r.stage}: {r.reason}")
    for note in run.notes:
        print(f"NOTE {note}")
    if any(r.warning for r in run.results):
        print("PASS* = passed on the JUnit report after the container was killed at teardown")
    print(f"overall verdict: {'PASS' if passed else 'FAIL'}")
    return passed


def write_summary_json(run: Run, passed: bool) -> None:
    """Write ``summary.json`` into the results dir for tools."""
    data = {
        "platform": run.platform.name,
        "commit": run.commit,
        "mode": "local" if run.local else "docker",
        "image": run.image,
        "devices": run.devices.text(),
        "passed": passed,
        "notes": run.notes,
        "stages": [asdict(r) for r in run.results],
    }
    path = run.results_dir / "summary.json"
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
