"""CUDA-only behaviour of matmul/gemm/linear (cuBLASLt and cuBLAS slots) and of
topk_topp_sampling that the parity table (tests/generic/test_parity.py) does not reach:
misaligned and column-major operands (the two cuBLASLt algorithms), vocabularies
of LLM size bit for bit against the reference, the out-of-range `uniform` row
marker, CUDA graph capture after one warm-up call and torch's current stream.

The slot listing runs in any WITH_CUDA build (also compile-only); the rest
skips without a CUDA GPU. Written without a GPU: the GPU tests have never run
(see docs/backends/cuda_ops.md).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import polyops
from polyops.testing.references import (
    PRODUCT,
    gemm_reference,
    linear_reference,
    matmul_reference,
    topk_topp_sampling_reference,
)
from tests.conftest import BF16, F16, F32, F64, FLOAT_DTYPES, I32, I64, dtype_id

BUILT = "cuda" in polyops._C._built_devices
needs_gpu = pytest.mark.skipif(
    "cuda" not in polyops.devices(),
    reason="needs a CUDA GPU and polyops built with -DWITH_CUDA=ON",
)

BLAS_OPS = ("matmul", "gemm", "linear")


def assert_product_close(got: torch.Tensor, want: torch.Tensor, dtype, k: int, scale=1.0):
    tol = PRODUCT[dtype]
    torch.testing.assert_close(
        got.cpu().double(), want.double(), rtol=tol.rtol, atol=tol.atol * max(k, 1) * scale
    )


def offset_matrix(rows: int, cols: int, dtype, gen, *, offset: int, column_major: bool):
    """A [rows, cols] cuda view starting `offset` elements into its storage."""
    shape = (cols, rows) if column_major else (rows, cols)
    values = torch.randn(shape[0] * shape[1] + offset, generator=gen, dtype=F64).to(dtype)
    view = values.cuda()[offset:].view(shape)
    return view.t() if column_major else view


@pytest.mark.skipif(not BUILT, reason="polyops was built without the CUDA backend")
def test_slots_are_listed_with_cublaslt_default():
    # Runs in a compile-only build too. The product slots exist only where
    # the build found cuBLAS (POLYOPS_WITH_CUBLAS, docs/backends/cuda.md): then both.
    for op in BLAS_OPS:
        slots = polyops.implementations(op, "cuda")
        assert slots in ({}, {0: "cublaslt", 1: "cublas"}), (op, slots)
        if slots:
            assert polyops.default_implementation(op, "cuda") == 0
    assert polyops.implementations("topk_topp_sampling", "cuda") == {0: "radix"}
    assert polyops.default_implementation("topk_topp_sampling", "cuda") == 0


@needs_gpu
@pytest.mark.parametrize("slot", [0, 1])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_gemm_alignment_and_orientation(slot, dtype):
    # offset 1 gives 2- or 4-byte aligned data pointers: cuBLASLt must take
    # its element-aligned algorithm; offset 8 (16 bytes for 16-bit dtypes)
    # the aligned one. Every orientation of a, b and out, with a broadcast c.
    gen = torch.Generator().manual_seed(0)
    m, n, k = 37, 24, 72
    for trans_a, trans_b, a_col, b_col, col_out, offset in itertools.product(
        (False, True), (False, True), (False, True), (False, True), (False, True), (0, 1, 8)
    ):
        a_shape = (k, m) if trans_a else (m, k)
        b_shape = (n, k) if trans_b else (k, n)
        a = offset_matrix(*a_shape, dtype, gen, offset=offset, column_major=a_col)
        b = offset_matrix(*b_shape, dtype, gen, offset=offset, column_major=b_col)
        c = torch.randn(n, generator=gen, dtype=F64).to(dtype).cuda()
        out = torch.empty((n, m) if col_out else (m, n), dtype=dtype, device="cuda")
        out = out.t() if col_out else out
        got = polyops.gemm(
            a,
            b,
            c,
            alpha=0.5,
            beta=-1.5,
            trans_a=trans_a,
            trans_b=trans_b,
            out=out,
            implementation_index=slot,
        )
        assert got.data_ptr() == out.data_ptr()
        want = gemm_reference(
            a.cpu(), b.cpu(), c.cpu(), alpha=0.5, beta=-1.5, trans_a=trans_a, trans_b=trans_b
        )
        assert_product_close(got, want, dtype, k, scale=2.0)


@needs_gpu
@pytest.mark.parametrize("slot", [0, 1])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_batched_broadcast_and_linear_3d(slot, dtype):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 9, 48, generator=gen, dtype=F64).to(dtype)
    w = torch.randn(48, 33, generator=gen, dtype=F64).to(dtype)
    got = polyops.matmul(x.cuda(), w.cuda(), implementation_index=slot)
    assert_product_close(got, matmul_reference(x, w), dtype, 48)
    got = polyops.matmul(x.cuda()[:1], torch.stack([w] * 4).cuda(), implementation_index=slot)
    assert_product_close(got, matmul_reference(x[:1], torch.stack([w] * 4)), dtype, 48)
    weight = w.t().contiguous()
    bias = torch.randn(66, generator=gen, dtype=F64).to(dtype)[::2]  # strided bias
    got = polyops.linear(x.cuda(), weight.cuda(), bias.cuda(), implementation_index=slot)
    assert_product_close(got, linear_reference(x, weight, bias), dtype, 48)


def sampling_rows(rows: int, vocab: int, dtype, gen) -> torch.Tensor:
    """Logits of LLM-like size with the contract's hard rows: exact ties, NaN, +inf, all -inf."""
    logits = (torch.randn(rows, vocab, generator=gen, dtype=F64) * 4).to(dtype)
    logits[1] = logits[1].round()  # thousands of exact ties, across the top_k boundary
    logits[2, ::7] = math.nan
    logits[3, 100:105] = math.inf
    logits[4] = -math.inf
    logits[4, ::3] = math.nan
    logits[5] = (torch.randn(vocab, generator=gen, dtype=F64) * 100).to(dtype)  # most below max-80
    return logits


@needs_gpu
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_sampling_large_vocab_is_exact(dtype):
    gen = torch.Generator().manual_seed(2)
    rows, vocab = 6, 152_064
    logits = sampling_rows(rows, vocab, dtype, gen)
    on_gpu = logits.cuda()
    for top_k, top_p in [(0, 1.0), (50, 0.9), (0, 0.95), (1, 1.0), (100_000, 0.5)]:
        uniform = torch.rand(rows, generator=gen, dtype=F32)
        uniform[0] = 1.0 - 2.0**-24
        got = polyops.topk_topp_sampling(on_gpu, top_k, top_p, uniform=uniform.cuda())
        want = topk_topp_sampling_reference(logits, top_k, top_p, uniform=uniform)
        assert torch.equal(got.cpu(), want), (top_k, top_p)
    got = polyops.topk_topp_sampling(on_gpu, 40, 0.8, seed=1234)
    assert torch.equal(got.cpu(), topk_topp_sampling_reference(logits, 40, 0.8, seed=1234))


@needs_gpu
@pytest.mark.parametrize("k_dtype", [I32, I64], ids=dtype_id)
def test_sampling_per_row_tensors_and_strided_rows(k_dtype):
    gen = torch.Generator().manual_seed(3)
    rows, vocab = 8, 5000
    base = sampling_rows(rows, 2 * vocab, BF16, gen)
    logits = base[:, :vocab]  # row stride 2 * vocab
    top_k = torch.tensor([0, 1, 7, -3, 4999, 5000, 10_000, 20], dtype=k_dtype)
    top_p = torch.tensor([1.0, 0.5, 0.9, 1e-30, 0.99, 1.0, 0.3, 0.7], dtype=F32)
    uniform = torch.rand(rows, generator=gen, dtype=F32)
    got = polyops.topk_topp_sampling(
        logits.cuda(), top_k.cuda(), top_p.cuda(), uniform=uniform.cuda()
    )
    want = topk_topp_sampling_reference(logits, top_k, top_p, uniform=uniform)
    assert torch.equal(got.cpu(), want)


@needs_gpu
def test_sampling_out_of_range_uniform_marks_the_row():
    # On cuda the value check cannot raise without a host synchronization:
    # the row gets -1 (documented in docs/backends/cuda_ops.md), the others their token.
    logits = torch.randn(3, 100, device="cuda")
    uniform = torch.tensor([0.5, 1.0, math.nan], device="cuda")
    got = polyops.topk_topp_sampling(logits, 0, 1.0, uniform=uniform).cpu()
    want = topk_topp_sampling_reference(logits.cpu()[:1], 0, 1.0, uniform=uniform.cpu()[:1])
    assert got.tolist() == [int(want[0]), -1, -1]


@needs_gpu
def test_cuda_graph_capture_after_warm_up():
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(16, 64, generator=gen).to(F16).cuda()
    w = torch.randn(96, 64, generator=gen).to(F16).cuda()
    bias = torch.randn(96, generator=gen).to(F16).cuda()
    logits = torch.randn(4, 3000, generator=gen).cuda()
    uniform = torch.rand(4, generator=gen).cuda()
    outs = {
        "linear": torch.empty(16, 96, dtype=F16, device="cuda"),
        "linear_cublas": torch.empty(16, 96, dtype=F16, device="cuda"),
        "sample": torch.empty(4, dtype=I64, device="cuda"),
    }

    def step():
        polyops.linear(x, w, bias, out=outs["linear"])
        polyops.linear(x, w, bias, out=outs["linear_cublas"], implementation_index=1)
        polyops.topk_topp_sampling(logits, 20, 0.9, uniform=uniform, out=outs["sample"])

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up: builds every instance (the cache miss)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    x.copy_(torch.randn(16, 64, generator=gen).to(F16).cuda())
    logits.copy_(torch.randn(4, 3000, generator=gen).cuda())
    graph.replay()
    torch.cuda.synchronize()
    want = linear_reference(x.cpu(), w.cpu(), bias.cpu())
    assert_product_close(outs["linear"], want, F16, 64)
    assert_product_close(outs["linear_cublas"], want, F16, 64)
    sampled = topk_topp_sampling_reference(logits.cpu(), 20, 0.9, uniform=uniform.cpu())
    assert torch.equal(outs["sample"].cpu(), sampled)


@needs_gpu
def test_runs_on_the_current_stream():
    gen = torch.Generator().manual_seed(5)
    a = torch.randn(256, 512, generator=gen, dtype=F64).to(F32)
    b = torch.randn(512, 384, generator=gen, dtype=F64).to(F32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        a_gpu, b_gpu = a.cuda(), b.cuda()
        outs = [polyops.matmul(a_gpu, b_gpu, implementation_index=s) for s in (0, 1)]
    side.synchronize()
    for out in outs:
        # float32 stays float32 (no TF32): the float32 tolerance holds.
        assert_product_close(out, matmul_reference(a, b), F32, 512)
