"""The FlashInfer slots' host planner (``MakePlan``) on the CPU.

The planner: src/cuda/kernels/flashinfer/flashinfer_plan.cu.

tests/cuda/flashinfer_plan/plan_main.cu plans 20000 random batches (ragged and paged kv,
GQA groups, causal or not, left windows, empty sequences, head sizes 64/128/256) for a
132-SM GPU and checks the schedule's invariants: each (sequence, query tile, kv chunk)
exactly once, indptrs and last-page lengths that reproduce the host lengths, merge and
output indptrs that agree, no kv split with a window or with rows that see no key. The
planner is host code in a file nvcc compiles (its kernels sit next to it), so the test
needs nvcc and skips without it; no GPU, no FlashInfer headers.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVCC = os.environ.get("CUDACXX") or shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc not found (CUDACXX or PATH)")
def test_planner_invariants(tmp_path):
    binary = tmp_path / "plan_main"
    sources = [
        ROOT / "tests/cuda/flashinfer_plan/plan_main.cu",
        ROOT / "src/cuda/kernels/flashinfer/flashinfer_plan.cu",
        ROOT / "src/cuda/runtime/workspace.cu",  # Execute's Workspace, linked, not called
    ]
    command = [NVCC, "-O1", "-std=c++17", "-DPOLYOPS_WITH_FLASHINFER", f"-I{ROOT / 'src'}"]
    build = subprocess.run(
        [*command, *map(str, sources), "-o", str(binary)], capture_output=True, text=True
    )
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "failures 0" in run.stdout
    splits = int(run.stdout.split("splits ")[1].split()[0])
    assert splits > 0, "no random case split kv: the split path went unchecked"
