"""The CPU attention kernel's AVX-512 instantiation, run on any x86-64.

The tile kernel (src/cpu/kernels/attention/attention_tiles.h) is written in GCC vector
extensions; its AVX-512 variant is ``AttendTiles<4, 4, Float16v>``
(src/cpu/kernels/attention/attention.h). Development and CI machines often lack AVX-512, so
test_cpu_isa.py cannot run that variant there.
tests/cpu/cpu_wide_vectors/attention_main.cc compiles the same template
without the AVX-512 target (each Float16v lowered to xmm or ymm registers),
which executes the variant's own blocking, masking and tails, and checks
that it gives the bits of the baseline and AVX2 variants (and of the real
AVX-512 variant on a CPU that has it) over 96 cases per dtype (head sizes
64-256, grouped queries, causal and windowed masks, varlen batches, paged
blocks, NaN and inf inputs) and stays within a float64 reference.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CXX = os.environ.get("CXX", "g++")


def test_attention_16_lane_variant_agrees_bit_for_bit(tmp_path: Path) -> None:
    if shutil.which(CXX) is None:
        pytest.skip(f"no host C++ compiler {CXX!r} to build the harness")
    exe = tmp_path / "attention_wide"
    # The library's floating-point flags (CMakeLists.txt): no contraction, so
    # every variant rounds the same operations. -O1 keeps the build short;
    # the bits do not depend on the optimisation level.
    build = subprocess.run(
        [
            CXX,
            "-std=c++17",
            "-O1",
            "-ffp-contract=off",
            "-fno-trapping-math",
            "-fno-math-errno",
            "-Wno-psabi",
            "-Wno-unknown-pragmas",
            f"-I{ROOT / 'src'}",
            str(ROOT / "tests" / "cpu" / "cpu_wide_vectors" / "attention_main.cc"),
            str(ROOT / "src" / "cpu" / "runtime" / "convert.cc"),
            str(ROOT / "src" / "cpu" / "runtime" / "isa.cc"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert build.returncode == 0, f"building the harness failed:\n{build.stderr[-4000:]}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=False, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    lines = re.findall(
        r"^(\w+): (\d+) cases, (\d+) comparisons, (\d+) differ, (\d+) off", run.stdout, re.M
    )
    assert [line[0] for line in lines] == ["float32", "float16", "bfloat16"], run.stdout
    for _, cases, comparisons, differ, off in lines:
        assert int(cases) == 96 and int(comparisons) >= 96, run.stdout
        assert int(differ) == 0 and int(off) == 0, run.stdout
