#!/usr/bin/env python3
"""polyops hardware CI runner.

Builds the Docker image of one platform (``cpu``, ``nvidia``, ``ascend``, ... as listed in
``.ci/config.yaml``), runs that platform's stages in containers with the accelerators passed
through, and gives one verdict judged from each container's real exit state and from the JUnit
XML that the ``test`` stage writes.

Examples::

    python .ci/run.py --platform nvidia                  # build the image if needed, run all stages
    python .ci/run.py --platform ascend --devices 0,1    # use /dev/davinci0 and /dev/davinci1
    python .ci/run.py --platform nvidia --dry-run        # print the docker commands only
    python .ci/run.py --platform cpu --local             # same stages, no Docker

Exit status: 0 when every selected stage passed, 1 when a stage failed (or could not be judged),
2 for a usage or configuration error. See docs/contributing/ci.md for the meaning of each verdict.

Only the Python standard library and PyYAML are used.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import fnmatch
import glob
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

CI_DIR = Path(__file__).resolve().parent
REPO_ROOT = CI_DIR.parent
DEFAULT_CONFIG = CI_DIR / "config.yaml"

# Where the runner puts things inside a container.
CONTAINER_SRC = "/polyops/src"  # the checkout, mounted read-only
CONTAINER_WORK = "/polyops/work"  # a Docker volume shared by the stages of one run
CONTAINER_RESULTS = "/polyops/results"  # the results dir, mounted read-write

# Container exits that some Docker hosts produce while tearing a container down after its
# command already finished (SIGKILL, SIGTERM). Only these may be rescued by the JUnit report.
TEARDOWN_EXIT_CODES = {137: "SIGKILL", 143: "SIGTERM"}
PYTEST_NO_TESTS_COLLECTED = 5

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_USAGE = 2

DOCKER_QUERY_TIMEOUT = 120  # seconds for docker inspect / rm / volume calls
REQUIRED_STAGES = ("build", "test")
PASSTHROUGH_KINDS = ("none", "gpus", "device-files")
DEFAULT_STAGE_TIMEOUT = 3600.0
DEFAULT_COPY_EXCLUDE = (".git", "build", "ci-results", ".nox", "__pycache__")

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DEVICE_ID_RE = re.compile(r"^[0-9]+$")


class CIError(Exception):
    """A problem the user has to fix (bad option, bad config, missing tool); exit status 2."""


class ConfigError(CIError):
    """The CI configuration file is invalid."""


# --------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stage:
    """One step of a platform: a shell command, optionally producing a JUnit XML report."""

    name: str
    run: str
    junit: str | None  # file name relative to the results dir
    timeout: float  # seconds


@dataclass(frozen=True)
class Passthrough:
    """How a platform's accelerators are handed to the container.

    ``none``: nothing. ``gpus``: ``docker run --gpus`` (NVIDIA Container Toolkit).
    ``device-files``: ``--device`` for each selected ``device_template`` id plus the fixed
    ``devices``, read-only bind mounts of ``mounts`` (same path inside) and the selected ids
    exported as ``visible_devices_env``.
    """

    kind: str
    default_devices: str = ""
    device_template: str | None = None
    devices: tuple[str, ...] = ()
    mounts: tuple[str, ...] = ()
    visible_devices_env: str | None = None
    local_visible_devices_env: str | None = None


@dataclass(frozen=True)
class Platform:
    """A target platform: its image, device passthrough, environment and stages."""

    name: str
    dockerfile: Path
    passthrough: Passthrough
    env: dict[str, str]
    setup: str
    docker_args: tuple[str, ...]
    stages: tuple[Stage, ...]


@dataclass(frozen=True)
class Config:
    """The whole CI configuration."""

    path: Path
    copy_exclude: tuple[str, ...]
    platforms: dict[str, Platform]


class _Where:
    """Builds 'config.yaml: platforms.nvidia.stages[1].run: ...' style error messages."""

    def __init__(self, path: Path, location: str = "") -> None:
        self.path = path
        self.location = location

    def __truediv__(self, part: str | int) -> _Where:
        if isinstance(part, int):
            return _Where(self.path, f"{self.location}[{part}]")
        return _Where(self.path, f"{self.location}.{part}" if self.location else part)

    def error(self, message: str) -> ConfigError:
        where = f"{self.path}: {self.location}" if self.location else str(self.path)
        return ConfigError(f"{where}: {message}")


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _mapping(
    value: object, where: _Where, allowed: Sequence[str], required: Sequence[str] = ()
) -> dict[Any, Any]:
    if not isinstance(value, dict):
        raise where.error(f"expected a mapping, got {_type_name(value)}")
    for key in value:
        if key not in allowed:
            raise where.error(f"unknown key {key!r}; expected one of: {', '.join(sorted(allowed))}")
    for key in required:
        if key not in value:
            raise where.error(f"missing required key {key!r}")
    return value


def _string(value: object, where: _Where, *, nonempty: bool = True) -> str:
    if not isinstance(value, str):
        raise where.error(f"expected a string, got {_type_name(value)}")
    if nonempty and not value.strip():
        raise where.error("expected a non-empty string")
    return value


def _string_list(value: object, where: _Where) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise where.error(f"expected a list of strings, got {_type_name(value)}")
    return tuple(_string(item, where / i) for i, item in enumerate(value))


def _abs_paths(value: object, where: _Where) -> tuple[str, ...]:
    paths = _string_list(value, where)
    for i, item in enumerate(paths):
        if not item.startswith("/") or ":" in item or "," in item:
            raise (where / i).error(f"expected an absolute path without ':' or ',', got {item!r}")
    return paths


def _device_ids(value: object, where: _Where) -> str:
    """Normalise a device selection ('all', 0, '0,1', [0, 1]) to 'all' or '0,1'."""
    if isinstance(value, bool):
        raise where.error("expected 'all' or device ids like '0,1', got a boolean")
    if isinstance(value, int):
        value = str(value)
    if isinstance(value, list):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise where.error(f"expected 'all' or device ids like '0,1', got {_type_name(value)}")
    try:
        return normalise_devices(value)
    except CIError as exc:
        raise where.error(str(exc)) from None


def _timeout(value: object, where: _Where) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise where.error(f"expected a positive number of seconds, got {value!r}")
    return float(value)


def _parse_passthrough(value: object, where: _Where) -> Passthrough:
    if value is None:
        return Passthrough(kind="none")
    allowed = (
        "kind",
        "default_devices",
        "device_template",
        "devices",
        "mounts",
        "visible_devices_env",
        "local_visible_devices_env",
    )
    data = _mapping(value, where, allowed, required=("kind",))
    kind = data["kind"]
    if kind not in PASSTHROUGH_KINDS:
        raise (where / "kind").error(
            f"unknown passthrough kind {kind!r}; expected one of: {', '.join(PASSTHROUGH_KINDS)}"
        )
    env_names = {}
    for key in ("visible_devices_env", "local_visible_devices_env"):
        if key in data:
            name = _string(data[key], where / key)
            if not _ENV_NAME_RE.match(name):
                raise (where / key).error(f"expected an environment variable name, got {name!r}")
            env_names[key] = name
    if kind == "none":
        extra = sorted(set(data) - {"kind"})
        if extra:
            raise where.error(f"kind 'none' takes no other keys, got: {', '.join(extra)}")
        return Passthrough(kind="none")
    default = _device_ids(data.get("default_devices", "all"), where / "default_devices")
    if kind == "gpus":
        extra = sorted(set(data) & {"device_template", "devices", "mounts"})
        if extra:
            raise where.error(
                f"kind 'gpus' uses docker's --gpus and takes no {', '.join(extra)}; "
                "use kind 'device-files' to pass device nodes"
            )
        return Passthrough(kind="gpus", default_devices=default, **env_names)
    if "device_template" not in data:
        raise where.error("kind 'device-files' needs 'device_template', e.g. '/dev/davinci{id}'")
    template = _string(data["device_template"], where / "device_template")
    if "{id}" not in template or not template.startswith("/"):
        raise (where / "device_template").error(
            f"expected an absolute device path containing '{{id}}', got {template!r}"
        )
    return Passthrough(
        kind="device-files",
        default_devices=default,
        device_template=template,
        devices=_abs_paths(data.get("devices", []), where / "devices"),
        mounts=_abs_paths(data.get("mounts", []), where / "mounts"),
        **env_names,
    )


def _parse_stage(value: object, where: _Where, default_timeout: float) -> Stage:
    data = _mapping(value, where, ("name", "run", "junit", "timeout"), required=("name", "run"))
    name = _string(data["name"], where / "name")
    if not _NAME_RE.match(name):
        raise (where / "name").error(
            f"expected a lowercase name of letters, digits, '-' or '_', got {name!r}"
        )
    junit = None
    if data.get("junit") is not None:
        junit = _string(data["junit"], where / "junit")
        parts = Path(junit).parts
        if junit.startswith("/") or ".." in parts or not junit.endswith(".xml"):
            raise (where / "junit").error(
                f"expected a relative '.xml' file name inside the results dir, got {junit!r}"
            )
    timeout = default_timeout
    if "timeout" in data:
        timeout = _timeout(data["timeout"], where / "timeout")
    return Stage(name=name, run=_string(data["run"], where / "run"), junit=junit, timeout=timeout)


def _parse_platform(
    name: str, value: object, where: _Where, checkout: Path, default_timeout: float
) -> Platform:
    allowed = ("dockerfile", "passthrough", "env", "setup", "docker_args", "stages")
    data = _mapping(value, where, allowed, required=("stages",))
    dockerfile = Path(
        _string(data.get("dockerfile", f".ci/images/{name}/Dockerfile"), where / "dockerfile")
    )
    if not dockerfile.is_absolute():
        dockerfile = checkout / dockerfile

    env: dict[str, str] = {}
    raw_env = data.get("env") or {}
    if not isinstance(raw_env, dict):
        raise (where / "env").error(f"expected a mapping, got {_type_name(raw_env)}")
    for key, val in raw_env.items():
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            raise (where / "env").error(f"expected environment variable names, got {key!r}")
        if key.startswith("POLYOPS_CI_"):
            raise (where / "env" / key).error("POLYOPS_CI_* variables are set by the runner")
        if not isinstance(val, (str, int, float)):
            raise (where / "env" / key).error(f"expected a scalar value, got {_type_name(val)}")
        env[key] = ("1" if val else "0") if isinstance(val, bool) else str(val)

    docker_args = _string_list(data.get("docker_args", []), where / "docker_args")
    for i, arg in enumerate(docker_args):
        if arg == "--rm" or arg.startswith("--rm="):
            raise (where / "docker_args" / i).error(
                "--rm is not allowed: the runner must read the container's exit state "
                "before the container is removed"
            )

    stages_raw = data["stages"]
    if not isinstance(stages_raw, list) or not stages_raw:
        raise (where / "stages").error("expected a non-empty list of stages")
    stages = tuple(
        _parse_stage(item, where / "stages" / i, default_timeout)
        for i, item in enumerate(stages_raw)
    )
    names = [stage.name for stage in stages]
    for stage_name in names:
        if names.count(stage_name) > 1:
            raise (where / "stages").error(f"stage {stage_name!r} is defined more than once")
    for required in REQUIRED_STAGES:
        if required not in names:
            raise (where / "stages").error(
                f"missing the {required!r} stage; every platform needs: "
                f"{', '.join(REQUIRED_STAGES)}"
            )
    test_stage = stages[names.index("test")]
    if test_stage.junit is None:
        raise (where / "stages" / names.index("test")).error(
            "the 'test' stage needs 'junit: <file>.xml' (and must run pytest with "
            '--junitxml="$POLYOPS_CI_JUNIT"): its verdict depends on the report'
        )
    setup = data.get("setup") or ""
    return Platform(
        name=name,
        dockerfile=dockerfile,
        passthrough=_parse_passthrough(data.get("passthrough"), where / "passthrough"),
        env=env,
        setup=_string(setup, where / "setup", nonempty=False),
        docker_args=docker_args,
        stages=stages,
    )


def parse_config(data: object, path: Path, checkout: Path) -> Config:
    """Validate the decoded YAML document ``data`` and build a :class:`Config`.

    Raises :class:`ConfigError` naming the offending key and what was expected.
    """
    where = _Where(path)
    if data is None:
        raise where.error("the file is empty; expected a mapping with 'platforms'")
    top = _mapping(
        data, where, ("version", "defaults", "copy_exclude", "platforms"), required=("platforms",)
    )
    if top.get("version", 1) != 1:
        raise (where / "version").error(f"unsupported version {top['version']!r}; expected 1")
    defaults = _mapping(top.get("defaults") or {}, where / "defaults", ("timeout",))
    default_timeout = DEFAULT_STAGE_TIMEOUT
    if "timeout" in defaults:
        default_timeout = _timeout(defaults["timeout"], where / "defaults" / "timeout")
    copy_exclude = DEFAULT_COPY_EXCLUDE
    if "copy_exclude" in top:
        copy_exclude = _string_list(top["copy_exclude"], where / "copy_exclude")
    platforms_raw = top["platforms"]
    if not isinstance(platforms_raw, dict) or not platforms_raw:
        raise (where / "platforms").error("expected a non-empty mapping of platform names")
    platforms = {}
    for name, value in platforms_raw.items():
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise (where / "platforms").error(
                f"platform names must be lowercase letters, digits, '-' or '_', got {name!r}"
            )
        platforms[name] = _parse_platform(
            name, value, where / "platforms" / name, checkout, default_timeout
        )
    return Config(path=path, copy_exclude=copy_exclude, platforms=platforms)


def load_config(path: Path, checkout: Path) -> Config:
    """Read and validate the YAML configuration at ``path``."""
    try:
        import yaml
    except ImportError:
        raise CIError(
            "the CI runner needs PyYAML to read its configuration: pip install pyyaml"
        ) from None
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the CI configuration {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None
    return parse_config(data, path, checkout)


# --------------------------------------------------------------------------------------------
# JUnit reports and the verdict
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JUnitCounts:
    """Counts taken from the ``<testcase>`` elements themselves, never the suite totals."""

    tests: int
    passed: int
    failed: int
    skipped: int
    errors: int


def read_junit(path: Path) -> tuple[JUnitCounts | None, str | None]:
    """Count the test cases of a JUnit XML file.

    Returns ``(counts, None)`` or ``(None, problem)`` when the file is missing or unparsable.
    A test case counts as failed if it has a ``<failure>``, errored if it has an ``<error>``
    (pytest records setup/teardown errors that way; a case can be both), skipped if it has a
    ``<skipped>`` and neither, and passed otherwise.
    """
    if not path.is_file():
        return None, f"JUnit report {path} is missing"
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError) as exc:
        return None, f"JUnit report {path} cannot be parsed: {exc}"
    tests = passed = failed = skipped = errors = 0
    for case in root.iter("testcase"):
        tests += 1
        tags = {child.tag for child in case}
        if "failure" in tags:
            failed += 1
        if "error" in tags:
            errors += 1
        if not tags & {"failure", "error"}:
            if "skipped" in tags:
                skipped += 1
            else:
                passed += 1
    return JUnitCounts(tests, passed, failed, skipped, errors), None


@dataclass(frozen=True)
class Outcome:
    """What is known about how a stage's process or container ended."""

    exit_code: int | None  # None: the exit state could not be read
    oom_killed: bool = False
    timed_out: bool = False
    timeout: float | None = None
    in_container: bool = True
    problem: str | None = None  # why exit_code is None or the state is unusable


@dataclass(frozen=True)
class Verdict:
    """The judgement of one stage."""

    passed: bool
    reason: str
    warning: str | None = None
    from_junit: bool = False


def _describe_exit(code: int) -> str:
    text = f"exit code {code}"
    if code == PYTEST_NO_TESTS_COLLECTED:
        return f"{text} (pytest: no tests were collected)"
    if code > 128:
        with contextlib.suppress(ValueError):
            text += f" (killed by {signal.Signals(code - 128).name})"
    return text


def _junit_problem(counts: JUnitCounts | None, problem: str | None) -> str | None:
    """Why the report cannot vouch for a pass, or None when it can."""
    if counts is None:
        return problem or "JUnit report is missing"
    if counts.tests == 0:
        return "JUnit report holds no test cases"
    if counts.failed or counts.errors:
        return f"JUnit report has {counts.failed} failed and {counts.errors} errored test cases"
    return None


def judge(
    outcome: Outcome,
    expects_junit: bool,
    counts: JUnitCounts | None = None,
    junit_problem: str | None = None,
) -> Verdict:
    """Decide whether a stage passed.

    The rules, in order:

    1. timed out → fail;
    2. exit state unknown (e.g. the container vanished before ``docker inspect``) → fail;
    3. OOM-killed → fail ("out of memory");
    4. exit 0 → pass, if the stage writes JUnit only when the report exists, parses, holds at
       least one test case and none failed or errored;
    5. exit 137/143 in a container → pass only under the same JUnit conditions, with a warning
       that the verdict came from JUnit (a stage without JUnit fails);
    6. anything else (including pytest's 5, "no tests collected") → fail.
    """
    if outcome.timed_out:
        return Verdict(False, f"timed out after {outcome.timeout:g} s and was killed")
    if outcome.exit_code is None:
        return Verdict(False, outcome.problem or "the exit state could not be read")
    code = outcome.exit_code
    if outcome.oom_killed:
        return Verdict(
            False, f"out of memory: the container was OOM-killed ({_describe_exit(code)})"
        )
    if code == 0:
        if not expects_junit:
            return Verdict(True, "exit code 0")
        issue = _junit_problem(counts, junit_problem)
        if issue:
            return Verdict(False, f"exit code 0 but {issue}")
        return Verdict(True, "exit code 0 and a clean JUnit report")
    if code in TEARDOWN_EXIT_CODES and outcome.in_container:
        killed = f"container exited {code} ({TEARDOWN_EXIT_CODES[code]})"
        if not expects_junit:
            return Verdict(False, f"{killed} and the stage writes no JUnit report to check")
        issue = _junit_problem(counts, junit_problem)
        if issue:
            return Verdict(False, f"{killed} and {issue}")
        assert counts is not None  # guaranteed by _junit_problem returning None
        warning = (
            f"{killed}, not OOM-killed; verdict taken from JUnit: {counts.tests} test cases, "
            "0 failed, 0 errors"
        )
        return Verdict(True, "passed by its JUnit report", warning=warning, from_junit=True)
    reason = _describe_exit(code)
    if code in TEARDOWN_EXIT_CODES:
        reason += "; outside a container the JUnit fallback does not apply"
    if counts is not None and (counts.failed or counts.errors):
        reason += f"; JUnit: {counts.failed} failed, {counts.errors} errors"
    return Verdict(False, reason)


# --------------------------------------------------------------------------------------------
# Devices
# --------------------------------------------------------------------------------------------


def normalise_devices(text: str) -> str:
    """Turn '--devices' text into 'all' or a comma-separated list of ids ('0,1')."""
    text = text.strip()
    if text.lower() == "all":
        return "all"
    ids = [part.strip() for part in re.split(r"[,\s]+", text) if part.strip()]
    if not ids or not all(_DEVICE_ID_RE.match(i) for i in ids):
        raise CIError(f"expected 'all' or comma-separated device ids like '0,1', got {text!r}")
    return ",".join(dict.fromkeys(str(int(i)) for i in ids))


@dataclass(frozen=True)
class Devices:
    """The devices selected for a run: ``ids`` is empty when ``all`` is true or none apply."""

    all: bool
    ids: tuple[str, ...]
    explicit: bool  # chosen with --devices rather than the config default

    def text(self) -> str:
        """The selection as exported in POLYOPS_CI_DEVICES."""
        return "all" if self.all else ",".join(self.ids)


def select_devices(passthrough: Passthrough, requested: str | None) -> Devices:
    """Resolve ``--devices`` (or the platform default) for a passthrough kind."""
    if passthrough.kind == "none":
        if requested is not None:
            print(
                "warning: --devices has no effect: this platform passes no devices through",
                file=sys.stderr,
            )
        return Devices(all=False, ids=(), explicit=False)
    text = normalise_devices(requested if requested is not None else passthrough.default_devices)
    explicit = requested is not None
    if text != "all":
        return Devices(all=False, ids=tuple(text.split(",")), explicit=explicit)
    if passthrough.kind == "gpus":
        return Devices(all=True, ids=(), explicit=explicit)
    # device-files: 'all' means every matching device node on this host.
    assert passthrough.device_template is not None
    prefix, _, suffix = passthrough.device_template.partition("{id}")
    found = []
    for node in glob.glob(glob.escape(prefix) + "*" + glob.escape(suffix)):
        middle = node[len(prefix) : len(node) - len(suffix)]
        if _DEVICE_ID_RE.match(middle):
            found.append(int(middle))
    if not found:
        raise CIError(
            f"--devices all: no {passthrough.device_template.format(id='<N>')} device "
            "found on this host; is the driver installed? Pass explicit ids with --devices"
        )
    return Devices(all=False, ids=tuple(str(i) for i in sorted(found)), explicit=explicit)


def device_docker_args(passthrough: Passthrough, devices: Devices) -> list[str]:
    """The ``docker run`` arguments that pass the selected devices through."""
    if passthrough.kind == "gpus":
        # The value is parsed as CSV by docker; a list of ids must be quoted to stay one field.
        return ["--gpus", "all" if devices.all else f'"device={",".join(devices.ids)}"']
    if passthrough.kind == "device-files":
        assert passthrough.device_template is not None
        args = []
        for device_id in devices.ids:
            args += ["--device", passthrough.device_template.format(id=device_id)]
        for node in passthrough.devices:
            args += ["--device", node]
        for mount in passthrough.mounts:
            args += ["-v", f"{mount}:{mount}:ro"]
        return args
    return []


def device_env(passthrough: Passthrough, devices: Devices, *, local: bool) -> dict[str, str]:
    """Environment variables naming the selected devices."""
    if passthrough.kind == "none":
        return {}
    if local:
        name = passthrough.local_visible_devices_env
        if name and devices.explicit and not devices.all:
            return {name: devices.text()}
        return {}
    name = passthrough.visible_devices_env
    return {name: devices.text()} if name else {}


# --------------------------------------------------------------------------------------------
# Running processes
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# A run
# --------------------------------------------------------------------------------------------


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


def _banner(text: str) -> None:
    print(f"\n==> {text}", flush=True)


# --- image -----------------------------------------------------------------------------------


def image_build_argv(run: Run) -> list[str]:
    """The ``docker build`` command for the platform image."""
    assert run.image is not None
    dockerfile = run.platform.dockerfile
    return ["docker", "build", "-t", run.image, "-f", str(dockerfile), str(dockerfile.parent)]


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
    owner = invoking_owner()
    if owner is not None and _effective_uid() != 0:
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


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


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


def _terminate(signum: int, _frame: object) -> None:
    """Turn SIGTERM into KeyboardInterrupt so the ``finally`` blocks remove the containers."""
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _terminate)
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:  # e.g. `run.py --dry-run ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        status = EXIT_FAIL
    sys.exit(status)
