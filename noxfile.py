"""Developer sessions: ``nox -s tests`` (build + full test suite) and ``nox -s lint``."""

from __future__ import annotations

import os
import pathlib
import shutil

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True

# The extension is compiled against torch's C++ API; this is the torch the
# project is developed and tested with (the CPU wheel on CPU-only machines).
TORCH = "torch==2.13.0"
# OpenBLAS (matmul, gemm, linear): linked at build time, loaded at run time.
OPENBLAS = "scipy-openblas32>=0.3.27"
# oneDNN (matmul, gemm, linear; docs/cpu_gemm.md): headers at build time,
# the library opened at run time. pyproject.toml lists both, but this
# session installs with --no-deps and without build isolation.
X86_LINUX = "; sys_platform == 'linux' and platform_machine == 'x86_64'"
ONEDNN = ["onednn-devel-cpu-gomp==2023.2.0" + X86_LINUX, "onednn-cpu-gomp==2023.2.0" + X86_LINUX]
BUILD_REQUIREMENTS = ["scikit-build-core>=1.1", "pybind11>=2.12", "ninja", "cmake>=3.18"]
# With nvcc on the machine the tests run against a build that also compiles
# the CUDA backend (compile-only without a GPU; docs/cuda.md). cuBLAS headers
# and libraries for the cuBLAS slots come from this wheel (installed in ~25 s
# from the package index; the machine's toolkit may lack cuBLAS).
CUBLAS = "nvidia-cublas==13.1.1.3"
# The FlashInfer attention slots (docs/cuda.md, "FlashInfer") in the compile
# check: headers fetched from PyPI at configure time, one dtype, one head size
# and one architecture, i.e. two instantiation TUs (30 s of nvcc user time,
# measured) that still cover every launcher template (ragged and paged, both
# masks, both tiles). The full default set would add about 6 CPU-minutes.
FLASHINFER_CI = [
    "-C",
    "cmake.define.POLYOPS_FLASHINFER=ON",
    "-C",
    "cmake.define.POLYOPS_FLASHINFER_DTYPES=bfloat16",
    "-C",
    "cmake.define.POLYOPS_FLASHINFER_HEAD_DIMS=128",
    "-C",
    "cmake.define.POLYOPS_FLASHINFER_ARCHITECTURES=90",
]
# Upper bound of the whole install step (compile included), in seconds; the
# CUDA-enabled build takes about 15 min on 2 shared cores (docs/ci.md).
BUILD_TIMEOUT_S = 1500


@nox.session
def tests(session: nox.Session) -> None:
    """Build polyops against the session's torch and run every test (tests/ and .ci/tests/)."""
    session.install(TORCH, OPENBLAS, *ONEDNN, *BUILD_REQUIREMENTS, "pytest>=7", "pyyaml", "numpy")
    nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc")
    config = []
    env = {}
    if nvcc:
        session.log(f"nvcc found ({nvcc}): building with WITH_CUDA=ON (compile check)")
        session.install(CUBLAS)
        config = ["-C", "cmake.define.WITH_CUDA=ON", *FLASHINFER_CI]
        env["POLYOPS_EXPECT_FLASHINFER"] = "1"  # tests/test_cuda.py checks the slot is listed
    # No build isolation: compile against the torch installed above. `timeout`
    # bounds the compile so a stuck or slow build fails CI instead of hanging it.
    install = ["python", "-m", "pip", "install", "--no-build-isolation", "--no-deps", *config, "."]
    if shutil.which("timeout"):
        session.run("timeout", str(BUILD_TIMEOUT_S), *install, external=True)
    else:
        session.run(*install)
    # The package source lives in python/polyops, so `import polyops` here is
    # the installed build; testpaths come from pyproject.toml.
    session.run("python", "-m", "pytest", *session.posargs, env=env)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format) and clang-format, in check mode."""
    session.install("ruff", "clang-format")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    sources = sorted(
        str(path)
        for pattern in ("src/**/*.h", "src/**/*.cc", "src/**/*.cu", "src/**/*.cuh")
        for path in pathlib.Path(".").glob(pattern)
    )
    session.run("clang-format", "--dry-run", "--Werror", *sources)
