"""Giving the container-written results dir back to the invoking user."""

from __future__ import annotations

import os
import sys

from .plan import CONTAINER_RESULTS, Run
from .process import docker


def invoking_owner() -> tuple[int, int] | None:
    """The uid/gid that should own the results: the sudo caller when run with sudo."""
    if not hasattr(os, "getuid"):
        return None
    uid, gid = os.getuid(), os.getgid()
    if uid == 0 and os.environ.get("SUDO_UID", "").isdigit():
        uid = int(os.environ["SUDO_UID"])
        gid = int(os.environ.get("SUDO_GID", str(uid)) or uid)
    return uid, gid


def _effective_uid() -> int:
    return os.geteuid() if hasattr(os, "geteuid") else 0


def chown_argv(run: Run, owner: tuple[int, int]) -> list[str]:
    """A throw-away container that hands the container-written results back to ``owner``."""
    assert run.image is not None
    return [
        "docker",
        "run",
        "--rm",
        "--network",
        "none",
        "-v",
        f"{run.results_dir}:{CONTAINER_RESULTS}",
        run.image,
        "chown",
        "-R",
        f"{owner[0]}:{owner[1]}",
        CONTAINER_RESULTS,
    ]


def fix_ownership(run: Run) -> None:
    """Give the results dir back to the invoking user.

    Containers run as root, so their files in the results dir are root-owned. When the runner
    itself is root (e.g. under sudo) it chowns them directly; otherwise it needs root, which it
    gets from a throw-away container of the same image (``chown_argv``). Its exit code does not
    take part in any verdict, so ``--rm`` is harmless there.
    """
    owner = invoking_owner()
    if owner is None:
        return
    if _effective_uid() == 0:
        if owner == (0, 0):
            return
        for path in [run.results_dir, *run.results_dir.rglob("*")]:
            try:
                os.chown(path, *owner, follow_symlinks=False)
            except OSError as exc:
                print(f"warning: cannot chown {path}: {exc}", file=sys.stderr)
        return
    if run.local or run.image is None:
        return  # everything was written by this very user
    result = docker(chown_argv(run, owner)[1:], timeout=600)
    if result.returncode != 0:
        print(
            f"warning: could not give {run.results_dir} back to uid {owner[0]}: "
            f"{result.stderr.strip()}",
            file=sys.stderr,
        )
