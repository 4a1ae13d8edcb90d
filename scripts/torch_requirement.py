"""scikit-build-core dynamic-metadata provider: the package's run-time dependencies.

polyops._C is compiled against torch's C++ API, whose ABI changes between
minor versions, so the wheel requires the torch major.minor it was built
against (``torch>=X.Y,<X.Y+1``), read from the torch importable at build time:
the isolated build's ``torch==2.13.0`` or, with ``--no-build-isolation``, the
installed one. ``also`` lists the other dependencies (pyproject.toml).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any


def torch_requirement(version: str) -> str:
    """``torch>=X.Y,<X.(Y+1)`` for a torch version such as ``2.13.0+cpu``."""
    match = re.match(r"(\d+)\.(\d+)", version)
    if not match:
        raise RuntimeError(f"polyops: cannot read major.minor from torch version {version!r}")
    major, minor = int(match.group(1)), int(match.group(2))
    return f"torch>={major}.{minor},<{major}.{minor + 1}"


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    """The ``dependencies`` field: the torch requirement, then ``also``."""
    del project  # unused: nothing depends on other fields
    field = settings.get("field", "dependencies")
    if field != "dependencies":
        raise RuntimeError(f"torch_requirement provides 'dependencies', not {field!r}")
    import torch  # the build's torch; imported only when metadata is computed

    return {"dependencies": [torch_requirement(torch.__version__), *settings.get("also", [])]}


def dynamic_wheel(settings: Mapping[str, Any]) -> dict[str, bool]:
    """An sdist's dependencies are not final: each wheel records the torch it was built with."""
    del settings
    return {"dependencies": True}
