"""matmul, gemm and linear at decode sizes through the AVX2 kernels (no AVX-512).

The ISA cap (POLYOPS_CPU_ISA) is read once per process, so the products run
in a subprocess with ``POLYOPS_CPU_ISA=avx2``: there every float32 and
bfloat16 product with at most 32 rows after orientation takes the
``*-dot-avx2`` (column-major b, e.g. ``x @ w.T``) or ``*-axpy-avx2``
(row-major b) path of src/cpu/kernels/gemm/gemm_kernels_avx2.cc, and bfloat16 products
with more rows run there in blocks of at most 32 rows. The inputs are made
here, the subprocess runs each case with 2 and with 1 thread and reports the
path, and the results are checked here against the float64 references at
tests/generic/test_gemm.py's tolerances, bitwise across the thread counts.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from polyops.testing.references import gemm_reference, linear_reference
from polyops.testing.references import matmul_reference as ref_mm
from tests.conftest import BF16, F16, F32, make_tensor
from tests.generic._gemm_cases import assert_product_close, column_major, mag_mm

SCRIPT = r"""
import sys, torch, polyops
cases = torch.load(sys.argv[1])
results = {}
for name, case in cases.items():
    fn = getattr(polyops, case["op"])
    outs, path = [], None
    for threads in (2, 1):
        torch.set_num_threads(threads)
        outs.append(fn(*case["args"], **case["kwargs"]).clone())
        path = path or polyops._C._cpu_gemm_path()
    results[name] = (outs[0], outs[1], path)
torch.save(results, sys.argv[2])
"""


def _path(dtype: torch.dtype, dot: bool) -> str:
    prefix = "f32" if dtype == F32 else "bf16"
    return f"{prefix}-{'dot' if dot else 'axpy'}-avx2"


def _padded(shape: tuple[int, int], dtype: torch.dtype, gen: torch.Generator, pad: int):
    """A [rows, cols] view with rows `cols + pad` elements apart."""
    rows, cols = shape
    return make_tensor((rows, cols + pad), dtype, gen)[:, :cols]


def _cases(gen: torch.Generator) -> dict[str, dict]:
    """name -> {op, args, kwargs, path (expected), ref (float64), k, magnitude}."""
    cases: dict[str, dict] = {}

    def matmul(name, a, b, path):
        cases[name] = dict(op="matmul", args=(a, b), kwargs={}, path=path, ref=ref_mm(a, b))
        cases[name].update(k=a.shape[-1], magnitude=mag_mm(a, b))

    def linear(name, x, w, bias, path, out=None):
        kwargs = {} if out is None else {"out": out}
        magnitude = mag_mm(x, w.T) + (0 if bias is None else bias.double().abs())
        cases[name] = dict(op="linear", args=(x, w, bias), kwargs=kwargs, path=path)
        cases[name].update(ref=linear_reference(x, w, bias), k=x.shape[-1], magnitude=magnitude)

    for dtype in (F32, BF16):
        d = str(dtype).removeprefix("torch.")
        # Every decode row count, odd n and k (partial tiles, the k tail), and
        # past 32 rows: float32 goes to OpenBLAS, bfloat16 runs in equal
        # blocks of at most 32 rows (33: 17 + 16; 100: 4 x 25).
        for m in (*range(1, 34), 65, 100):
            x = make_tensor((m, 131), dtype, gen)
            b = make_tensor((131, 67), dtype, gen)
            w = make_tensor((67, 131), dtype, gen)
            bias = make_tensor((67,), dtype, gen)
            small = m <= 32 or dtype == BF16
            matmul(f"matmul-{d}-{m}", x, b, _path(dtype, False) if small else "openblas")
            linear(f"linear-{d}-{m}", x, w, bias, _path(dtype, True) if small else "openblas")
        # Several column blocks and k passes (the dot form's 2 KiB passes
        # with a tail; the row form's 16- and 128-row passes).
        for m in (1, 2, 4, 5, 8, 9, 32):
            x = make_tensor((m, 1100), dtype, gen)
            matmul(
                f"matmul-wide-{d}-{m}", x, make_tensor((1100, 300), dtype, gen), _path(dtype, False)
            )
            linear(
                f"linear-wide-{d}-{m}",
                x,
                make_tensor((300, 1100), dtype, gen),
                None,
                _path(dtype, True),
            )
        # k shorter than one vector step.
        matmul(
            f"matmul-k3-{d}",
            make_tensor((5, 3), dtype, gen),
            make_tensor((3, 9), dtype, gen),
            _path(dtype, False),
        )
        linear(
            f"linear-k3-{d}",
            make_tensor((5, 3), dtype, gen),
            make_tensor((9, 3), dtype, gen),
            None,
            _path(dtype, True),
        )
        # Strided views: rows of a, b and the weight padded; a column-major
        # and a row-padded out.
        a = _padded((6, 100), dtype, gen, 9)
        matmul(f"matmul-strided-{d}", a, _padded((100, 45), dtype, gen, 3), _path(dtype, False))
        w = _padded((45, 100), dtype, gen, 7)
        bias = make_tensor((45,), dtype, gen)
        for kind, out in (
            ("colmajor", column_major(torch.empty(6, 45, dtype=dtype))),
            ("rowpadded", torch.empty(6, 48, dtype=dtype)[:, :45]),
        ):
            linear(f"linear-strided-{kind}-{d}", a, w, bias, _path(dtype, True), out=out)
        # Batches: b per matrix (row- and column-major) and shared.
        a = make_tensor((3, 5, 70), dtype, gen)
        matmul(f"matmul-batch-{d}", a, make_tensor((3, 70, 41), dtype, gen), _path(dtype, False))
        matmul(
            f"matmul-batch-col-{d}",
            a,
            column_major(make_tensor((3, 70, 41), dtype, gen)),
            _path(dtype, True),
        )
        matmul(
            f"matmul-batch-shared-{d}", a, make_tensor((70, 41), dtype, gen), _path(dtype, False)
        )
        # One row of a per matrix: whole rows of b per task, partial rows added.
        matmul(
            f"matmul-batch-m1-{d}",
            make_tensor((3, 1, 70), dtype, gen),
            make_tensor((3, 70, 41), dtype, gen),
            _path(dtype, False),
        )
        linear(
            f"linear-batch-{d}",
            a,
            make_tensor((41, 70), dtype, gen),
            make_tensor((41,), dtype, gen),
            _path(dtype, True),
        )
        # gemm: alpha, beta and c, every layout of a and b ("t": column-major).
        # "tt" runs as out^T = b^T a^T (n rows after orientation); "tn" has
        # no kernel form.
        m, n, k = 7, 29, 77
        if dtype == BF16:
            n = 71  # "tt": 71 rows after orientation, three row blocks
        for layout, path in (
            ("nn", _path(dtype, False)),
            ("nt", _path(dtype, True)),
            ("tt", _path(dtype, False)),
            ("tn", "openblas"),
        ):
            trans_a, trans_b = layout[0] == "t", layout[1] == "t"
            for alpha, beta in ((0.75, -0.5), (1.0, 0.0), (-2.0, 1.0)):
                a = make_tensor((k, m) if trans_a else (m, k), dtype, gen)
                b = make_tensor((n, k) if trans_b else (k, n), dtype, gen)
                c = make_tensor((m, n), dtype, gen)
                kwargs = dict(alpha=alpha, beta=beta, trans_a=trans_a, trans_b=trans_b)
                op_a = a.double().mT if trans_a else a.double()
                op_b = b.double().mT if trans_b else b.double()
                magnitude = abs(alpha) * (op_a.abs() @ op_b.abs()) + abs(beta) * c.double().abs()
                cases[f"gemm-{layout}-{alpha}-{beta}-{d}"] = dict(
                    op="gemm",
                    args=(a, b, c),
                    kwargs=kwargs,
                    path=path,
                    ref=gemm_reference(a, b, c, **kwargs),
                    k=k,
                    magnitude=magnitude,
                )
    # float16 has no own kernel.
    x, w = make_tensor((4, 50), F16, gen), make_tensor((30, 50), F16, gen)
    linear("linear-float16", x, w, None, "openblas")
    return cases


def _run_avx2(cases: dict[str, dict], tmp_path, isa: str = "avx2") -> dict:
    inputs = {name: {key: c[key] for key in ("op", "args", "kwargs")} for name, c in cases.items()}
    torch.save(inputs, tmp_path / "cases.pt")
    # The own kernels (and OpenBLAS past them), not oneDNN: on an AVX2 CPU auto would run
    # float32 past 32 rows on oneDNN (test_gemm_own_kernels.py::test_override_values).
    env = dict(os.environ, POLYOPS_CPU_ISA=isa, POLYOPS_CPU_GEMM="own")
    subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "cases.pt"), str(tmp_path / "out.pt")],
        env=env,
        check=True,
    )
    return torch.load(tmp_path / "out.pt")


def test_avx2_decode_products(tmp_path, gen):
    """Every case: its path, float64 agreement, and the same bits with 1 and 2 threads."""
    cases = _cases(gen)
    results = _run_avx2(cases, tmp_path)
    assert results.keys() == cases.keys()
    for name, case in cases.items():
        two, one, path = results[name]
        assert path == case["path"], (name, path)
        dtype = case["args"][0].dtype
        assert_product_close(two, case["ref"], dtype, case["k"], case["magnitude"])
        assert torch.equal(two, one), name


def test_avx2_non_finite(tmp_path, gen):
    """inf/nan reach exactly the outputs they reach in float64 (both forms, both dtypes)."""
    cases: dict[str, dict] = {}
    for dtype in (F32, BF16):
        for trans_b in (False, True):
            a = make_tensor((3, 33), dtype, gen)
            b = make_tensor((45, 33) if trans_b else (33, 45), dtype, gen)
            a[1, 5] = float("inf")
            a[2, 32] = float("-inf")  # the k tail
            b_view = b.mT if trans_b else b
            b_view[7, 40] = float("nan")
            cases[f"{dtype}-{trans_b}"] = dict(
                op="matmul", args=(a, b_view), kwargs={}, path=_path(dtype, trans_b)
            )
    results = _run_avx2(cases, tmp_path)
    for name, case in cases.items():
        out, _, path = results[name]
        a, b = case["args"]
        assert path == case["path"], (name, path)
        expected = ref_mm(a, b)
        assert torch.equal(out.isnan(), expected.isnan()), name
        assert torch.equal(out.isinf(), expected.isinf()), name
        assert torch.equal(out[out.isinf()], expected[expected.isinf()].to(a.dtype)), name
        finite = expected.isfinite()
        magnitude = mag_mm(a.nan_to_num(posinf=0.0, neginf=0.0), b.nan_to_num())
        assert_product_close(
            torch.where(finite, out, 0).to(a.dtype),
            torch.where(finite, expected, 0.0),
            a.dtype,
            33,
            magnitude,
        )


def test_avx512_without_bf16(tmp_path, gen):
    """AVX-512 without AVX512-BF16 (Skylake-X; POLYOPS_CPU_ISA=avx512): bfloat16 on AVX2 kernels.

    Neither the AVX512-BF16 kernels nor oneDNN's bfloat16 path (chosen past 32
    rows only with AVX512-BF16) may run; float32 keeps its AVX-512 paths.
    """
    cases = {
        name: case
        for name, case in _cases(gen).items()
        if case["args"][0].dtype == BF16 and "openblas" not in case["path"]
    }
    results = _run_avx2(cases, tmp_path, isa="avx512")
    for name, case in cases.items():
        two, one, path = results[name]
        assert path == case["path"], (name, path)
        assert_product_close(two, case["ref"], BF16, case["k"], case["magnitude"])
        assert torch.equal(two, one), name
