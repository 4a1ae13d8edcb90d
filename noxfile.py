"""Developer sessions: ``nox -s tests`` (build + full test suite) and ``nox -s lint``."""

from __future__ import annotations

import pathlib

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

# The extension is compiled against torch's C++ API; this is the torch the
# project is developed and tested with (the CPU wheel on CPU-only machines).
TORCH = "torch==2.13.0"
# OpenBLAS (matmul, gemm, linear): linked at build time, loaded at run time.
OPENBLAS = "scipy-openblas32>=0.3.27"
BUILD_REQUIREMENTS = ["scikit-build-core>=0.10", "pybind11>=2.12", "ninja", "cmake>=3.18"]


@nox.session
def tests(session: nox.Session) -> None:
    """Build polyops against the session's torch and run every test (tests/ and .ci/tests/)."""
    session.install(TORCH, OPENBLAS, *BUILD_REQUIREMENTS, "pytest>=7", "pyyaml")
    # No build isolation: compile against the torch installed above.
    session.install("--no-build-isolation", "--no-deps", ".")
    # The package source lives in python/polyops, so `import polyops` here is
    # the installed build; testpaths come from pyproject.toml.
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format) and clang-format, in check mode."""
    session.install("ruff", "clang-format")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    sources = sorted(
        str(path)
        for pattern in ("src/**/*.h", "src/**/*.cc", "src/**/*.cu")
        for path in pathlib.Path(".").glob(pattern)
    )
    session.run("clang-format", "--dry-run", "--Werror", *sources)
