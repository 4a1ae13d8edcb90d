"""The CI configuration (``.ci/config.yaml``): its data classes, validation and errors."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CI_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = CI_DIR.parent
DEFAULT_CONFIG = CI_DIR / "config.yaml"

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


def normalise_devices(text: str) -> str:
    """Turn '--devices' text into 'all' or a comma-separated list of ids ('0,1')."""
    text = text.strip()
    if text.lower() == "all":
        return "all"
    ids = [part.strip() for part in re.split(r"[,\s]+", text) if part.strip()]
    if not ids or not all(_DEVICE_ID_RE.match(i) for i in ids):
        raise CIError(f"expected 'all' or comma-separated device ids like '0,1', got {text!r}")
    return ",".join(dict.fromkeys(str(int(i)) for i in ids))


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
