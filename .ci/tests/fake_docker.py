"""A scripted stand-in for the ``docker`` CLI, used by the CI runner's tests.

The tests put a ``docker`` shell wrapper that execs this file first on ``PATH``. It is driven
by environment variables:

- ``FAKE_DOCKER_LOG``: every invocation's argv is appended here, one Python list literal a line.
- ``FAKE_DOCKER_STATE``: a directory holding one file per "container" (a dict literal).
- ``FAKE_DOCKER_SCRIPT``: a file holding a Python dict literal describing the case::

    {
      "image_exists": true,          # `docker image inspect` succeeds
      "build_exit": 0,               # `docker build` exit status
      "stages": {                    # keyed by the POLYOPS_CI_STAGE passed with -e
        "test": {
          "exit": 137,               # the container's exit code, as `inspect` reports it
          "cli_exit": 137,           # what `docker run` itself returns (default: exit)
          "oom": false,              # State.OOMKilled
          "status": "exited",        # State.Status
          "junit": "<xml .../>",     # written to $POLYOPS_CI_JUNIT on the mounted results dir
          "output": "text",          # printed by `docker run`
          "vanish": false,           # the container is gone before `inspect`
          "sleep": 0                 # seconds `docker run` blocks (until `docker kill`)
        }
      }
    }

It runs with ``python -S`` and imports nothing heavier than ``os`` and ``sys`` (no ``json``,
which alone would double its start-up time): it is started several times per test case.
Its inputs are written by the tests themselves, so reading them with ``eval`` is safe.
"""

from __future__ import annotations

import os
import sys
import time

VALUE_FLAGS = {
    "--name",
    "--label",
    "-v",
    "--volume",
    "-e",
    "--env",
    "--device",
    "--gpus",
    "-w",
    "--workdir",
    "--network",
    "--entrypoint",
    "--user",
    "-u",
    "--shm-size",
    "--mount",
}
RESULTS_MOUNT = "/polyops/results"


def _state_path(name: str) -> str:
    return os.path.join(os.environ["FAKE_DOCKER_STATE"], f"{name}.state")


def _write_state(name: str, state: dict) -> None:
    with open(_state_path(name), "w", encoding="utf-8") as handle:
        handle.write(repr(state))


def _read_state(name: str) -> dict | None:
    try:
        with open(_state_path(name), encoding="utf-8") as handle:
            return eval(handle.read())  # written by _write_state
    except FileNotFoundError:
        return None


def _to_json(state: dict) -> str:
    """Serialise a flat dict of str/int/bool values as JSON, without importing json."""
    items = []
    for key, value in state.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, int):
            text = str(value)
        else:
            text = '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'
        items.append(f'"{key}": {text}')
    return "{" + ", ".join(items) + "}"


def _parse_run(args: list[str]) -> tuple[dict[str, list[str]], list[str], list[str]]:
    """Split ``docker run`` arguments into options, flags and the image + command."""
    options: dict[str, list[str]] = {}
    flags: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if not arg.startswith("-"):
            return options, flags, args[i:]
        if "=" in arg and arg.startswith("--"):
            key, value = arg.split("=", 1)
            options.setdefault(key, []).append(value)
        elif arg in VALUE_FLAGS:
            options.setdefault(arg, []).append(args[i + 1])
            i += 1
        else:
            flags.append(arg)
        i += 1
    return options, flags, []


def _run(args: list[str], script: dict) -> int:
    options, flags, rest = _parse_run(args)
    if "--rm" in flags:  # the runner's ownership helper; it plays no part in verdicts
        return 0
    env = dict(item.split("=", 1) for item in options.get("-e", []))
    stage = env.get("POLYOPS_CI_STAGE", "")
    spec = script.get("stages", {}).get(stage, {})
    name = options["--name"][0]
    exit_code = spec.get("exit", 0)
    results_host = None
    for mount in options.get("-v", []):
        host, _, rest_of_mount = mount.partition(":")
        if rest_of_mount.split(":")[0] == RESULTS_MOUNT:
            results_host = host
    if spec.get("junit") is not None and "POLYOPS_CI_JUNIT" in env and results_host:
        relative = os.path.relpath(env["POLYOPS_CI_JUNIT"], RESULTS_MOUNT)
        with open(os.path.join(results_host, relative), "w", encoding="utf-8") as handle:
            handle.write(spec["junit"])
    print(spec.get("output", f"fake {stage} output for image {rest[0] if rest else '?'}"))
    sys.stdout.flush()
    if spec.get("sleep"):
        _write_state(name, {"Status": "running", "ExitCode": 0, "Pid": os.getpid()})
        time.sleep(spec["sleep"])
    state = {
        "Status": spec.get("status", "exited"),
        "ExitCode": exit_code,
        "OOMKilled": bool(spec.get("oom", False)),
        "Error": spec.get("error", ""),
    }
    if not spec.get("vanish"):
        _write_state(name, state)
    return spec.get("cli_exit", exit_code)


def _inspect(name: str) -> int:
    state = _read_state(name)
    if state is None:
        print(f"Error: No such container: {name}", file=sys.stderr)
        return 1
    print(_to_json(state))
    return 0


def _kill(name: str) -> int:
    state = _read_state(name)
    if state is None:
        print(f"Error: No such container: {name}", file=sys.stderr)
        return 1
    _write_state(name, {"Status": "exited", "ExitCode": 137, "OOMKilled": False, "Error": ""})
    pid = state.get("Pid")
    if pid:
        import signal

        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return 0


def main(argv: list[str]) -> int:
    """Pretend to be ``docker argv...``."""
    with open(os.environ["FAKE_DOCKER_LOG"], "a", encoding="utf-8") as log:
        log.write(repr(argv) + "\n")
    script_path = os.environ.get("FAKE_DOCKER_SCRIPT", "")
    script = {}
    if script_path and os.path.exists(script_path):
        with open(script_path, encoding="utf-8") as handle:
            script = eval(handle.read())  # a dict literal written by the test
    command = argv[:2]
    if command == ["image", "inspect"]:
        if script.get("image_exists", True):
            print("[{}]")
            return 0
        print(f"Error: No such image: {argv[2]}", file=sys.stderr)
        return 1
    if argv[:1] == ["build"]:
        print("fake docker build")
        return script.get("build_exit", 0)
    if command in (["volume", "create"], ["volume", "rm"]):
        print(argv[-1])
        return 0
    if argv[:1] == ["run"]:
        return _run(argv[1:], script)
    if command == ["container", "inspect"]:
        return _inspect(argv[-1])
    if argv[:1] == ["kill"]:
        return _kill(argv[-1])
    if argv[:1] == ["rm"]:
        name = argv[-1]
        if os.path.exists(_state_path(name)):
            os.remove(_state_path(name))
            return 0
        print(f"Error response from daemon: No such container: {name}", file=sys.stderr)
        return 1
    print(f"fake docker: unsupported command {argv}", file=sys.stderr)
    return 99


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
