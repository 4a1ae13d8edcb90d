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
(its ``__init__`` lists them); this script puts ``.ci/`` on ``sys.path`` and runs
:func:`polyops_ci.cli.main`.

Only the Python standard library and PyYAML are used.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

# ``python .ci/run.py`` already has .ci/ first on sys.path; loading this file any other way
# (runpy, an import by path) may not.
_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)

from polyops_ci.cli import EXIT_FAIL, main  # noqa: E402


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
