"""The CPU's own gemm kernels, and POLYOPS_CPU_GEMM, which picks the path of a product.

The own AVX-512 kernels (src/cpu/kernels/gemm/gemm_kernels.cc, docs/backends/cpu_gemm.md):
shapes that exercise their tiles, k tails, k passes and row/column blocks, in every
layout; on a CPU without the ISA the same cases run OpenBLAS. Forced with
POLYOPS_CPU_GEMM=own (the kernel_path fixture); test_gemm_onednn.py reruns them with
oneDNN forced. Results are compared at test_gemm.py's tolerances.
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing.references import gemm_reference, linear_reference
from polyops.testing.references import matmul_reference as ref_mm
from tests.conftest import BF16, F16, F32, FLOAT_DTYPES, dtype_id, make_tensor, parallel_param
from tests.generic._gemm_cases import assert_product_close, column_major, mag_mm


# (m, n, k): decode rows (m <= 32: b read in place), a k tail
# under one vector, m past the decode blocking (the packed path: 12-row
# tiles and their row tails, 32-column panels and their column tails, an odd
# k, k split into passes (past 4096 bfloat16 / 2048 float32 values; the odd
# one in the last pass), several column strips of 256 and row blocks of up
# to 192).
@pytest.fixture
def kernel_path(monkeypatch):
    """The kernel tests below run the own kernels (auto would take oneDNN for float32 past
    the decode rows); test_gemm_onednn.py reruns them with oneDNN forced."""
    monkeypatch.setenv("POLYOPS_CPU_GEMM", "own")


KERNEL_SHAPES = [
    (1, 1, 1),
    (1, 7, 33),
    (1, 300, 70),
    (2, 65, 31),
    (5, 70, 64),
    (8, 129, 100),
    (32, 100, 257),
    parallel_param((33, 40, 1100), id="(33, 40, 1100)"),
    parallel_param((70, 300, 1100), id="(70, 300, 1100)"),
    (37, 33, 7),
    parallel_param((45, 70, 257), id="(45, 70, 257)"),
    parallel_param((200, 520, 129), id="(200, 520, 129)"),
    parallel_param((397, 36, 300), id="(397, 36, 300)"),
    parallel_param((37, 20, 4099), id="(37, 20, 4099)"),
]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("layout", ["nn", "nt", "tt", "tn"])
@pytest.mark.parametrize("shape", KERNEL_SHAPES, ids=str)
def test_kernel_shapes_and_layouts(shape, layout, dtype, gen, kernel_path):
    """gemm with c, alpha and beta; trans flags give column-major a / b ("t")."""
    m, n, k = shape
    trans_a, trans_b = layout[0] == "t", layout[1] == "t"
    a = make_tensor((k, m) if trans_a else (m, k), dtype, gen)
    b = make_tensor((n, k) if trans_b else (k, n), dtype, gen)
    c = make_tensor((m, n), dtype, gen)
    out = polyops.gemm(a, b, c, alpha=0.75, beta=-0.5, trans_a=trans_a, trans_b=trans_b)
    expected = gemm_reference(a, b, c, alpha=0.75, beta=-0.5, trans_a=trans_a, trans_b=trans_b)
    op_a = a.double().mT if trans_a else a.double()
    op_b = b.double().mT if trans_b else b.double()
    magnitude = 0.75 * (op_a.abs() @ op_b.abs()) + 0.5 * c.double().abs()
    assert_product_close(out, expected, dtype, k, magnitude)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("rows", [1, 3, 8, 32, 33])
def test_kernel_decode_linear(rows, dtype, gen, kernel_path):
    """linear at decode rows with bias, into a column-major and a row-padded out."""
    x = make_tensor((rows, 200), dtype, gen)
    w = make_tensor((90, 200), dtype, gen)
    bias = make_tensor((90,), dtype, gen)
    expected = linear_reference(x, w, bias)
    magnitude = mag_mm(x, w.T) + bias.double().abs()
    for out in (
        column_major(torch.empty(rows, 90, dtype=dtype)),
        torch.empty(rows, 96, dtype=dtype)[:, :90],
    ):
        polyops.linear(x, w, bias, out=out)
        assert_product_close(out, expected, dtype, 200, magnitude)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("b_shared", [False, True], ids=["batched_b", "shared_b"])
@pytest.mark.parametrize("b_t", [False, True], ids=["b_row", "b_col"])
def test_kernel_batched(b_t, b_shared, dtype, gen, kernel_path):
    """Batches of products spread over the kernels' tasks, b per matrix or shared."""
    a = make_tensor((4, 40, 70), dtype, gen)  # m > 32: row-major b is packed
    b = make_tensor((70, 40) if b_shared else (4, 70, 40), dtype, gen)
    if b_t:
        b = column_major(b)
    out = polyops.matmul(a, b)
    assert_product_close(out, ref_mm(a, b), dtype, 70, mag_mm(a, b))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("m", [3, 50], ids=["decode", "packed"])
@pytest.mark.parametrize("trans_b", [False, True], ids=["b_row", "b_col"])
def test_kernel_non_finite(m, trans_b, dtype, gen, kernel_path):
    """inf/nan reach exactly the outputs they reach in float64.

    n = 45 and k = 33 leave zero padding in the packed panels (columns past n,
    the second value of the odd last k): an inf of a must not meet it as
    inf * 0 in a stored column.
    """
    a = make_tensor((m, 33), dtype, gen)
    b = make_tensor((45, 33) if trans_b else (33, 45), dtype, gen)
    a[1, 5] = float("inf")
    a[m - 1, 32] = float("-inf")  # the odd last k
    b_view = b.mT if trans_b else b
    b_view[7, 40] = float("nan")
    out = polyops.matmul(a, b_view)
    expected = ref_mm(a, b_view)
    assert torch.equal(out.isnan(), expected.isnan())
    assert torch.equal(out.isinf(), expected.isinf())
    assert torch.equal(out[out.isinf()], expected[expected.isinf()].to(dtype))
    finite = expected.isfinite()
    magnitude = mag_mm(a.nan_to_num(posinf=0.0, neginf=0.0), b_view.nan_to_num())
    assert_product_close(
        torch.where(finite, out, 0).to(dtype),
        torch.where(finite, expected, 0.0),
        dtype,
        33,
        magnitude,
    )


@pytest.mark.skipif(
    polyops._C._cpu_isa() != "avx512" or not polyops._C._cpu_gemm_bf16(),
    reason="the AVX-512 kernels' paths: needs AVX-512 with AVX512-BF16 (POLYOPS_CPU_ISA applied)",
)
def test_kernel_paths_taken(gen, monkeypatch):
    """Which path each kind of call takes on a CPU with AVX512-BF16 (docs/backends/cpu_gemm.md).

    POLYOPS_CPU_GEMM=own: auto runs the m > 32 rows on oneDNN where it is loaded.
    """
    monkeypatch.setenv("POLYOPS_CPU_GEMM", "own")

    def linear(dtype, m):
        polyops.linear(make_tensor((m, 64), dtype, gen), make_tensor((16, 64), dtype, gen))

    def matmul(dtype, m):
        polyops.matmul(make_tensor((m, 64), dtype, gen), make_tensor((64, 16), dtype, gen))

    for call, form in [(linear, "dot"), (matmul, None)]:
        expected = [
            (BF16, 1, "bf16-dot" if form else "bf16-pair"),
            (BF16, 100, "bf16-packed"),
            (F32, 32, "f32-dot" if form else "f32-axpy"),
            (F32, 33, "f32-packed"),
            (F16, 1, "openblas"),
        ]
        for dtype, m, path in expected:
            call(dtype, m)
            assert polyops._C._cpu_gemm_path() == path, (call.__name__, dtype, m)
    # A column-major a with a row-major b has no kernel form.
    polyops.matmul(column_major(make_tensor((4, 64), BF16, gen)), make_tensor((64, 16), BF16, gen))
    assert polyops._C._cpu_gemm_path() == "openblas"


@pytest.mark.parametrize(
    "dtype, m",
    [(F32, 1), (F32, 70), (BF16, 1), (BF16, 70)],
    ids=["float32-1", "float32-70", "bfloat16-1", "bfloat16-70"],
)
def test_kernel_deterministic_across_threads(dtype, m, gen, monkeypatch):
    """The own kernels give bitwise the same result with 1 and 2 threads, and when repeated.

    Forced to the own kernels: oneDNN (auto's path past 32 rows) does not
    promise a summation order independent of the thread count.
    """
    monkeypatch.setenv("POLYOPS_CPU_GEMM", "own")
    n, k = 300, 1100
    x, w = make_tensor((m, k), dtype, gen), make_tensor((n, k), dtype, gen)
    b = make_tensor((k, n), dtype, gen)
    results = []
    for threads in (1, 2, 2):
        torch.set_num_threads(threads)
        results.append((polyops.linear(x, w), polyops.matmul(x, b)))
    for other in results[1:]:
        assert torch.equal(other[0], results[0][0]) and torch.equal(other[1], results[0][1])


# ---------------------------------------------------------------------------
# POLYOPS_CPU_GEMM (docs/backends/cpu_gemm.md; the forced onednn path: test_gemm_onednn.py)


@pytest.mark.parametrize("value", ["own", "openblas", "auto", ""])
def test_override_values(value, gen, monkeypatch):
    """Each value runs the path it names; auto/unset run a float32 product past the decode
    rows on oneDNN where it loads with the CPU's AVX-512, or AVX2 on a CPU without AVX-512
    (bfloat16: AVX512-BF16), else on the own kernels (OpenBLAS without AVX-512), and decode
    rows on the own kernels."""
    info = polyops._C._onednn_info()
    # The facts PreferOneDnn (src/cpu/kernels/gemm/blas_gemm.cc) reads: polyops' ISA (the CPU's,
    # capped by POLYOPS_CPU_ISA) and oneDNN's (capped by DNNL_MAX_CPU_ISA).
    # float32 on oneDNN: polyops and oneDNN both at AVX-512, or both at AVX2.
    isa = polyops._C._cpu_isa()
    onednn_f32 = info["available"] and (
        (isa == "avx512" and info["isa"].startswith("avx512"))
        or (isa == "avx2" and info["isa"].startswith("avx2"))
    )
    auto = ("onednn",) if onednn_f32 else ("f32-packed", "openblas")
    expected = {"own": ("f32-packed", "openblas"), "openblas": ("openblas",)}
    monkeypatch.setenv("POLYOPS_CPU_GEMM", value)
    a, b = make_tensor((40, 24), F32, gen), make_tensor((24, 36), F32, gen)
    out = torch.ops.polyops.matmul(a, b)
    assert polyops._C._cpu_gemm_path() in expected.get(value, auto), value
    assert_product_close(out, ref_mm(a, b), F32, 24, mag_mm(a, b))
    decode = make_tensor((8, 24), F32, gen)
    out = torch.ops.polyops.matmul(decode, b)
    # Own decode kernels: AVX-512, else AVX2 + FMA (a CPU without AVX-512).
    decode_paths = {"openblas": ("openblas",)}.get(value, ("f32-axpy", "f32-axpy-avx2", "openblas"))
    assert polyops._C._cpu_gemm_path() in decode_paths, value
    assert_product_close(out, ref_mm(decode, b), F32, 24, mag_mm(decode, b))
    # bfloat16 past the decode rows: oneDNN where both polyops and oneDNN see
    # AVX512-BF16 (AMX included), else the own kernels.
    bf16_isas = {"avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx", "avx512_core_amx_fp16"}
    onednn_bf16 = info["available"] and info["isa"] in bf16_isas and polyops._C._cpu_gemm_bf16()
    own_bf16 = ("bf16-packed", "bf16-axpy-avx2", "openblas")
    auto_bf16 = ("onednn",) if onednn_bf16 else own_bf16
    a, b = make_tensor((40, 24), BF16, gen), make_tensor((24, 36), BF16, gen)
    out = torch.ops.polyops.matmul(a, b)
    bf16_paths = {"own": own_bf16, "openblas": ("openblas",)}.get(value, auto_bf16)
    assert polyops._C._cpu_gemm_path() in bf16_paths, value
    assert_product_close(out, ref_mm(a, b), BF16, 24, mag_mm(a, b))


def test_override_bad_value(monkeypatch):
    monkeypatch.setenv("POLYOPS_CPU_GEMM", "mkl")
    with pytest.raises(ValueError, match="polyops.matmul: .*POLYOPS_CPU_GEMM .*'mkl'"):
        torch.ops.polyops.matmul(torch.ones(2, 2), torch.ones(2, 2))
