"""Running processes: a stage's streamed output and time limit, short ``docker`` calls."""

from __future__ import annotations

import codecs
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from .config import CIError

DOCKER_QUERY_TIMEOUT = 120  # seconds for docker inspect / rm / volume calls


@dataclass
class ProcessEnd:
    """How a streamed process ended."""

    returncode: int
    timed_out: bool
    seconds: float


def _pump(stream: IO[bytes], log: IO[bytes], echo: IO[str]) -> None:
    """Copy a process's output to the log and the terminal until it closes.

    It keeps reading even when writing fails (a closed terminal, a full disk): a reader
    that stopped would leave the process blocked on a full pipe.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    logging = echoing = True
    while True:
        chunk = stream.read1(65536)  # type: ignore[attr-defined]
        if not chunk:
            break
        if logging:
            try:
                log.write(chunk)
                log.flush()
            except (OSError, ValueError):
                logging = False
        if echoing:
            try:
                echo.write(decoder.decode(chunk))
                echo.flush()
            except (OSError, ValueError):
                echoing = False


def run_streaming(
    argv: Sequence[str],
    log_path: Path,
    timeout: float | None,
    *,
    on_timeout: Callable[[subprocess.Popen], None],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    new_session: bool = False,
) -> ProcessEnd:
    """Run ``argv``, copying its output to ``log_path`` and to stdout, within ``timeout``.

    On timeout (or Ctrl-C) ``on_timeout(process)`` is called to stop it. A process killed by
    signal N reports ``128 + N``, the convention of shells and Docker.
    """
    started = time.monotonic()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=new_session,
        )
        assert proc.stdout is not None
        pump = threading.Thread(target=_pump, args=(proc.stdout, log, sys.stdout), daemon=True)
        pump.start()
        timed_out = False
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            on_timeout(proc)
            try:
                returncode = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                returncode = proc.wait()
        except BaseException:
            on_timeout(proc)
            proc.kill()
            proc.wait()
            raise
        finally:
            pump.join(timeout=10)
            if not pump.is_alive():
                proc.stdout.close()
    if returncode < 0:
        returncode = 128 - returncode
    return ProcessEnd(returncode, timed_out, time.monotonic() - started)


def docker(
    args: Sequence[str], timeout: float = DOCKER_QUERY_TIMEOUT
) -> subprocess.CompletedProcess:
    """Run a short docker command and capture its output (never raises for its exit status)."""
    try:
        return subprocess.run(
            ["docker", *args],
            stdin=subprocess.DEVNULL,
            check=False,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except FileNotFoundError:
        raise CIError("docker not found on PATH: install Docker or run with --local") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(
            ["docker", *args], 124, "", f"docker {args[0]} did not answer in {timeout:g} s"
        )
