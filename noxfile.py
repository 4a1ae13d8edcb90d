"""Developer sessions: ``nox -s tests`` (build + full test suite), ``nox -s lint`` and
``nox -s cuda_build`` (the CUDA compile check; needs nvcc, no GPU)."""

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
# oneDNN (matmul, gemm, linear; docs/backends/cpu_gemm.md): headers at build time,
# the library opened at run time. pyproject.toml lists both, but this
# session installs with --no-deps and without build isolation.
X86_LINUX = "; sys_platform == 'linux' and platform_machine == 'x86_64'"
ONEDNN = ["onednn-devel-cpu-gomp==2023.2.0" + X86_LINUX, "onednn-cpu-gomp==2023.2.0" + X86_LINUX]
BUILD_REQUIREMENTS = ["scikit-build-core>=1.1", "pybind11>=2.12", "ninja", "cmake>=3.18"]
# The CUDA compile check (`nox -s cuda_build`, or `nox -s tests -- --cuda`):
# cuBLAS headers and libraries for the cuBLAS slots come from this wheel
# (installed in ~25 s from the package index; the machine's toolkit may lack
# cuBLAS).
CUBLAS = "nvidia-cublas==13.1.1.3"
# The FlashInfer attention slots in the compile check: headers fetched from
# PyPI at configure time, one dtype, one head size and one architecture, i.e.
# two instantiation TUs (30 s of nvcc user time, measured) that still cover
# every launcher template (ragged and paged, both masks, both tiles). The full
# default set would add about 6 CPU-minutes.
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
# The tests that check a CUDA build without a GPU (slots listed, FlashInfer
# compiled in, errors without a usable GPU); the GPU tests in them skip with
# a reason. The emulated CUDA kernels need no CUDA build: `nox -s tests`
# runs them.
CUDA_BUILD_TESTS = ["tests/cuda/test_cuda.py", "tests/cuda/test_cuda_ops.py"]
# The tests on the CANN test double, a pytest process of their own (see _npu_tests).
NPU_TESTS = "tests/npu"
# Upper bound of one install step (compile included), in seconds: the CPU
# build takes about 5 min on 2 cores, the CUDA-enabled one about 15 min on 2
# loaded cores (docs/contributing/ci.md).
BUILD_TIMEOUT_S = 1500


def _build_and_test(session: nox.Session, cuda: bool, pytest_args: list[str]) -> None:
    """Install the test dependencies, build polyops against the session's torch (with the
    CUDA backend when `cuda`), and run pytest with `pytest_args`."""
    session.install(TORCH, OPENBLAS, *ONEDNN, *BUILD_REQUIREMENTS, "pytest>=7", "pyyaml", "numpy")
    config = []
    env = {}
    if cuda:
        nvcc = os.environ.get("CUDACXX") or shutil.which("nvcc")
        if not nvcc:
            session.error("the CUDA compile check needs nvcc (set CUDACXX or put it on PATH)")
        session.log(f"nvcc: {nvcc}; building with WITH_CUDA=ON (compile check, no GPU needed)")
        session.install(CUBLAS)
        config = ["-C", "cmake.define.WITH_CUDA=ON", *FLASHINFER_CI]
        env["POLYOPS_EXPECT_FLASHINFER"] = "1"  # tests/cuda/test_cuda.py checks the slot is listed
    else:
        # A CPU-only torch never builds the CUDA backend (WITH_CUDA=AUTO), but say so
        # explicitly: a CUDA torch in this venv would otherwise add the CUDA compile.
        config = ["-C", "cmake.define.WITH_CUDA=OFF"]
    # No build isolation: compile against the torch installed above. `timeout`
    # bounds the compile so a stuck or slow build fails CI instead of hanging it.
    install = ["python", "-m", "pip", "install", "--no-build-isolation", "--no-deps", *config, "."]
    if shutil.which("timeout"):
        session.run("timeout", str(BUILD_TIMEOUT_S), *install, external=True)
    else:
        session.run(*install)
    # The package source lives in python/polyops, so `import polyops` here is
    # the installed build; testpaths come from pyproject.toml.
    session.run("python", "-m", "pytest", *pytest_args, env=env)


def _npu_tests(session: nox.Session, pytest_args: list[str]) -> None:
    """tests/npu, as a second pytest process: it activates the CANN test double and the
    test "npu" device for the whole process (use_cann_double() is once per process), so
    tests/conftest.py keeps it out of the main run. Skipped with a reason where the build
    has no Ascend backend or test device."""
    # A junit report of its own, next to the main run's (same name, "-npu" added).
    args = [
        arg.replace(".xml", "-npu.xml") if arg.startswith(("--junitxml=", "--junit-xml=")) else arg
        for arg in pytest_args
    ]
    session.run("python", "-m", "pytest", *args, NPU_TESTS)


@nox.session
def tests(session: nox.Session) -> None:
    """Build polyops (CPU backend, Ascend backend and its CANN test double) against the
    session's torch and run every test: tests/ and .ci/tests/, then tests/npu as a
    second pytest process (the CANN test double active in it). `nox -s tests -- --cuda`
    also compiles the CUDA backend (needs nvcc; adds about 10-15 min on 2 cores); other
    arguments after `--` go to pytest (test paths among them: only those, in one
    process)."""
    cuda = "--cuda" in session.posargs
    pytest_args = [arg for arg in session.posargs if arg != "--cuda"]
    _build_and_test(session, cuda, pytest_args)
    if not any(pathlib.Path(arg.split("::")[0]).exists() for arg in pytest_args):
        # The whole suite (no test path given): tests/npu in its own process, after it.
        _npu_tests(session, pytest_args)


@nox.session
def cuda_build(session: nox.Session) -> None:
    """The CUDA compile check: build with the CUDA backend and the FlashInfer slots (needs
    nvcc, no GPU) and run the tests that check that build. CI runs it as its own step."""
    _build_and_test(session, True, [*CUDA_BUILD_TESTS, *session.posargs])


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
