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

The runner itself is the package ``.ci/polyops_ci/`` next to this file, one module per concern
(its ``__init__`` lists them); this script puts ``.ci/`` on ``sys.path``, re-exports the
package's public names and runs :func:`polyops_ci.cli.main`.

Only the Python standard library and PyYAML are used.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

# ``python .ci/run.py`` already has .ci/ first on sys.path; importing this file by its path
# (as .ci/tests do) does not.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from polyops_ci.cli import (  # noqa: E402
    EXIT_FAIL,
    EXIT_PASS,
    EXIT_USAGE,
    build_parser,
    main,
    prepare,
)
from polyops_ci.config import (  # noqa: E402
    CI_DIR,
    DEFAULT_CONFIG,
    DEFAULT_COPY_EXCLUDE,
    DEFAULT_STAGE_TIMEOUT,
    PASSTHROUGH_KINDS,
    REPO_ROOT,
    REQUIRED_STAGES,
    CIError,
    Config,
    ConfigError,
    Passthrough,
    Platform,
    Stage,
    load_config,
    normalise_devices,
    parse_config,
)
from polyops_ci.devices import (  # noqa: E402
    Devices,
    device_docker_args,
    device_env,
    select_devices,
)
from polyops_ci.execute import (  # noqa: E402
    copy_checkout,
    ensure_image,
    inspect_container,
    outcome_from_state,
    run_docker,
    run_local,
    run_stage_docker,
    warn_missing_host_paths,
)
from polyops_ci.ownership import (  # noqa: E402
    chown_argv,
    fix_ownership,
    invoking_owner,
)
from polyops_ci.plan import (  # noqa: E402
    CONTAINER_RESULTS,
    CONTAINER_SRC,
    CONTAINER_WORK,
    Run,
    StageResult,
    container_name,
    container_script,
    docker_run_argv,
    git_commit,
    image_build_argv,
    image_tag_for,
    local_script,
    run_label,
    stage_env,
    volume_name,
)
from polyops_ci.process import (  # noqa: E402
    DOCKER_QUERY_TIMEOUT,
    ProcessEnd,
    docker,
    run_streaming,
)
from polyops_ci.report import (  # noqa: E402
    print_dry_run,
    print_summary,
    write_summary_json,
)
from polyops_ci.verdict import (  # noqa: E402
    PYTEST_NO_TESTS_COLLECTED,
    TEARDOWN_EXIT_CODES,
    JUnitCounts,
    Outcome,
    Verdict,
    judge,
    read_junit,
)

__all__ = [
    "CI_DIR",
    "REPO_ROOT",
    "DEFAULT_CONFIG",
    "REQUIRED_STAGES",
    "PASSTHROUGH_KINDS",
    "DEFAULT_STAGE_TIMEOUT",
    "DEFAULT_COPY_EXCLUDE",
    "CIError",
    "ConfigError",
    "Stage",
    "Passthrough",
    "Platform",
    "Config",
    "normalise_devices",
    "parse_config",
    "load_config",
    "TEARDOWN_EXIT_CODES",
    "PYTEST_NO_TESTS_COLLECTED",
    "JUnitCounts",
    "read_junit",
    "Outcome",
    "Verdict",
    "judge",
    "Devices",
    "select_devices",
    "device_docker_args",
    "device_env",
    "DOCKER_QUERY_TIMEOUT",
    "ProcessEnd",
    "run_streaming",
    "docker",
    "CONTAINER_SRC",
    "CONTAINER_WORK",
    "CONTAINER_RESULTS",
    "StageResult",
    "Run",
    "git_commit",
    "image_tag_for",
    "container_script",
    "local_script",
    "stage_env",
    "container_name",
    "volume_name",
    "run_label",
    "docker_run_argv",
    "image_build_argv",
    "invoking_owner",
    "chown_argv",
    "fix_ownership",
    "ensure_image",
    "inspect_container",
    "outcome_from_state",
    "run_stage_docker",
    "warn_missing_host_paths",
    "run_docker",
    "copy_checkout",
    "run_local",
    "print_dry_run",
    "print_summary",
    "write_summary_json",
    "EXIT_PASS",
    "EXIT_FAIL",
    "EXIT_USAGE",
    "build_parser",
    "prepare",
    "main",
]


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
