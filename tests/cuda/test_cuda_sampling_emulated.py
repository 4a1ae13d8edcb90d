"""The CUDA topk_topp_sampling kernel's source, run on the CPU under a host emulation of CUDA.

No GPU is needed: tests/cuda/emulation/emulated_cuda.h stands in for the CUDA
runtime (a block of 512 cooperative threads, barriers for __syncthreads and the
warp collectives -- shuffle, ballot, match_any -- with deadlock and divergence
detection, plain float32 arithmetic for the _rn intrinsics, built with
-ffp-contract=off), and tests/cuda/emulation/sampling_main.cc runs
src/cuda/kernels/sampling/sampling.cuh's SampleRows on float32 logits. The
tokens must equal the specification's reference (polyops.testing.references)
bit for bit. This checks the kernel's logic (radix select, stable compaction
and sort, chunked sequential sums, the grid-stride over rows, the -1 marker),
not nvcc's code generation or a GPU.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from polyops.testing.references import sampling_reference_row
from tests.cuda.emulation.harness import build_emulator


@pytest.fixture(scope="module")
def emulated_kernel(tmp_path_factory) -> Path:
    return build_emulator(tmp_path_factory.mktemp("sampling"), [], "sampling_main.cc")


def run_kernel(
    binary: Path, rows: np.ndarray, ks, ps, us, grid: int, out_bits: int = 64
) -> list[int]:
    """The emulated kernel's token per row (rows: float32 [B, V]), written to an
    int64 (out_bits 64) or int32 (32) out."""
    batch, vocab = rows.shape
    lines = [f"{batch} {vocab} {grid} {out_bits}"]
    for b in range(batch):
        p_bits = int(np.float32(ps[b]).view(np.uint32))
        u_bits = int(np.float32(us[b]).view(np.uint32))
        lines.append(f"{ks[b]} {p_bits:x} {u_bits:x}")
        lines.append(" ".join(f"{x:x}" for x in rows[b].view(np.uint32)))
    done = subprocess.run(
        [str(binary)], input="\n".join(lines), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return [int(token) for token in done.stdout.split()]


def hard_rows(batch: int, vocab: int, rng: np.random.Generator) -> np.ndarray:
    """float32 rows cycling through the contract's cases: plain, exact ties with -inf,
    a wide range (most tokens below max - 80), +inf and NaN, all -inf/NaN, signed zeros."""
    rows = []
    for b in range(batch):
        kind = b % 6
        if kind == 0:
            x = rng.normal(size=vocab) * 3
        elif kind == 1:
            x = rng.integers(-2, 3, size=vocab).astype(np.float64)
            x[rng.random(vocab) < 0.3] = -math.inf
        elif kind == 2:
            x = rng.normal(size=vocab) * 60
        elif kind == 3:
            x = rng.normal(size=vocab)
            x[rng.random(vocab) < 0.05] = math.inf
            x[rng.random(vocab) < 0.1] = math.nan
        elif kind == 4:
            x = np.full(vocab, -math.inf)
            x[rng.random(vocab) < 0.3] = math.nan
        else:
            x = rng.normal(size=vocab).astype(np.float16).astype(np.float64)
            x[rng.random(vocab) < 0.2] = 0.0
            x[rng.random(vocab) < 0.2] = -0.0
        rows.append(x)
    return np.array(rows, dtype=np.float32)


# (vocab, batch, grid): a single token; one warp; several 512-token tiles; more
# kept tokens than one 4096-weight chunk of the sequential sums. grid < batch
# exercises the grid-stride over rows (scratch reused by the next row).
SHAPES = [(1, 6, 2), (37, 12, 5), (700, 12, 3), (5000, 6, 2)]


# The int32 out (serving engines' token ids) on one shape: the store is the
# only difference.
CASES = [(*shape, 64) for shape in SHAPES] + [(*SHAPES[1], 32)]


@pytest.mark.parametrize(
    "vocab,batch,grid,out_bits", CASES, ids=[f"V{c[0]}-int{c[3]}" for c in CASES]
)
def test_emulated_kernel_matches_reference(emulated_kernel, vocab, batch, grid, out_bits):
    rng = np.random.default_rng(vocab)
    rows = hard_rows(batch, vocab, rng)
    ks = [int(rng.choice([0, 1, 3, 17, vocab - 1, vocab, -2, 2 * vocab])) for _ in range(batch)]
    ps = [float(rng.choice([1.0, 0.9, 0.3, 1e-30])) for _ in range(batch)]
    us = [float(np.float32(rng.random())) for _ in range(batch)]
    us[0] = 1.0 - 2.0**-24  # t rounds up to C_P
    got = run_kernel(emulated_kernel, rows, ks, ps, us, grid, out_bits)
    want = [
        sampling_reference_row(torch.from_numpy(rows[b].copy()), ks[b], ps[b], us[b])
        for b in range(batch)
    ]
    assert got == want


@pytest.mark.parametrize("out_bits", [64, 32])
def test_emulated_kernel_marks_out_of_range_rows(emulated_kernel, out_bits):
    rng = np.random.default_rng(7)
    rows = hard_rows(4, 50, rng)
    ks, ps = [0, 5, 0, 3], [0.9, 1.0, 0.0, 0.5]
    us = [0.25, 1.0, 0.5, math.nan]
    got = run_kernel(emulated_kernel, rows, ks, ps, us, grid=2, out_bits=out_bits)
    first = sampling_reference_row(torch.from_numpy(rows[0].copy()), ks[0], ps[0], us[0])
    assert got == [first, -1, -1, -1]


def test_emulated_kernel_draw_boundaries(emulated_kernel):
    # Equal logits: C_j = j exactly, so u = j / V puts t exactly on a prefix
    # sum, where only "C_{j+1} > t" (not >=) gives the specified token.
    vocab = 8
    rows = np.zeros((9, vocab), dtype=np.float32)
    us = [j / vocab for j in range(vocab)] + [1.0 - 2.0**-24]
    ks, ps = [0] * 9, [1.0] * 9
    got = run_kernel(emulated_kernel, rows, ks, ps, us, grid=4)
    want = [
        sampling_reference_row(torch.from_numpy(rows[b].copy()), 0, 1.0, us[b]) for b in range(9)
    ]
    assert want == list(range(vocab)) + [vocab - 1]
    assert got == want
