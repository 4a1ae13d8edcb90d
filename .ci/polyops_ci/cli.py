"""The command line: options, turning them into a :class:`~polyops_ci.plan.Run`, and ``main()``."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from .config import DEFAULT_CONFIG, REPO_ROOT, CIError, Platform, Stage, load_config
from .devices import select_devices
from .execute import run_docker, run_local
from .plan import Run, git_commit, image_tag_for
from .report import print_dry_run, print_summary, write_summary_json

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds as a number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(
        prog="run.py",
        description="Run polyops' CI stages for one platform in Docker (or locally) and "
        "judge them by exit state and JUnit XML. See docs/contributing/ci.md.",
    )
    parser.add_argument("--platform", required=True, help="platform from the config, e.g. nvidia")
    parser.add_argument(
        "--stage",
        action="append",
        metavar="NAME",
        help="run only this stage (repeatable; default: all stages in config order)",
    )
    parser.add_argument(
        "--image-tag", help="use this image tag instead of polyops-ci-<platform>:<hash>"
    )
    parser.add_argument(
        "--devices", help="device ids to pass through, e.g. '0,1', or 'all' (default: config)"
    )
    parser.add_argument(
        "--results-dir",
        type=Path,
        help="where logs and JUnit go (default: ci-results/<platform>-<commit>-<timestamp>)",
    )
    parser.add_argument(
        "--timeout", type=_positive_float, help="time limit of each stage in seconds"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the commands and exit without running"
    )
    parser.add_argument("--local", action="store_true", help="run the stages here, without Docker")
    parser.add_argument(
        "--rebuild", action="store_true", help="build the image even if it already exists"
    )
    parser.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help="CI config (default: .ci/config.yaml)"
    )
    parser.add_argument(
        "--checkout",
        type=Path,
        default=REPO_ROOT,
        help="the source tree to test (default: this repository; mainly for tests)",
    )
    return parser


def _select_stages(platform: Platform, requested: list[str] | None) -> list[Stage]:
    if not requested:
        return list(platform.stages)
    known = [s.name for s in platform.stages]
    unknown = [name for name in requested if name not in known]
    if unknown:
        raise CIError(
            f"unknown stage {unknown[0]!r} for platform {platform.name!r}; "
            f"expected one of: {', '.join(known)}"
        )
    return [s for s in platform.stages if s.name in requested]


def prepare(args: argparse.Namespace) -> Run:
    """Validate options and configuration into a :class:`Run` (creates nothing)."""
    checkout = args.checkout.resolve()
    if not checkout.is_dir():
        raise CIError(f"--checkout {args.checkout}: not a directory")
    config = load_config(args.config.resolve(), checkout)
    platform = config.platforms.get(args.platform)
    if platform is None:
        raise CIError(
            f"unknown platform {args.platform!r}; {config.path} defines: "
            f"{', '.join(config.platforms)}"
        )
    stages = _select_stages(platform, args.stage)
    devices = select_devices(platform.passthrough, args.devices)
    commit = git_commit(checkout)
    run_id = f"{platform.name}-{commit}-{time.strftime('%Y%m%d-%H%M%S')}"
    results = args.results_dir or checkout / "ci-results" / run_id
    image = None if args.local else (args.image_tag or image_tag_for(platform))
    return Run(
        config=config,
        platform=platform,
        stages=stages,
        checkout=checkout,
        results_dir=Path(os.path.abspath(results)),
        run_id=run_id,
        commit=commit,
        devices=devices,
        image=image,
        rebuild=args.rebuild,
        local=args.local,
        timeout_override=args.timeout,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status (0 pass, 1 fail, 2 usage/config error)."""
    args = build_parser().parse_args(argv)
    try:
        run = prepare(args)
        if args.dry_run:
            print_dry_run(run)
            return EXIT_PASS
        if not run.local and shutil.which("docker") is None:
            raise CIError(
                "docker not found on PATH: install Docker (plus the NVIDIA Container Toolkit "
                "for nvidia) or run the stages here with --local"
            )
        run.results_dir.mkdir(parents=True, exist_ok=True)
        print(f"==> polyops CI: platform {run.platform.name}, commit {run.commit}", flush=True)
        print(f"==> results in {run.results_dir}", flush=True)
        try:
            if run.local:
                run_local(run)
            else:
                run_docker(run)
        except KeyboardInterrupt:
            print("\ninterrupted: containers removed, no verdict", file=sys.stderr)
            return 130
        passed = print_summary(run)
        write_summary_json(run, passed)
        return EXIT_PASS if passed else EXIT_FAIL
    except CIError as exc:
        print(f"run.py: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
