"""The row-major to column-major mapping of the CUDA product slots, checked on the CPU.

src/cuda/kernels/gemm/blas_problem.h turns a GemmLayout (matmul / gemm / linear) into the
operands, transposes, leading dims and batch strides of one column-major
cuBLAS(Lt) call. tests/cuda/emulation/blas_problem_main.cc evaluates that call
with the documented cublasGemmStridedBatchedEx formula for every orientation
of a, b and out (row- or column-major, padded leading dims), batches with a
broadcast operand and size-1 dims, and compares with the logical product on
integer-valued data (exact). cuBLAS itself is not involved.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_column_major_mapping_of_every_layout(tmp_path):
    compiler = shutil.which("g++") or shutil.which("c++")
    if compiler is None:
        pytest.skip("needs a C++17 compiler (g++)")
    binary = tmp_path / "blas_problem"
    source = ROOT / "tests" / "cuda" / "emulation" / "blas_problem_main.cc"
    subprocess.run(
        [compiler, "-std=c++17", "-O1", f"-I{ROOT / 'src'}", str(source), "-o", str(binary)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    done = subprocess.run([str(binary)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert int(done.stdout) == 256  # 4 shapes x 2 batch sizes x 32 orientation/broadcast flags
