"""The oneDNN path of the CPU matrix products (docs/backends/cpu_gemm.md), forced on.

Every matmul / gemm / linear case of test_gemm.py and test_gemm_own_kernels.py
runs again here with ``POLYOPS_CPU_GEMM=onednn``, against the same float64
references, and each call that computes a product asserts that oneDNN ran it.
Then: a library that cannot be loaded falls back to the own kernels, and what
``_onednn_info()`` reports (the override's other values: test_gemm_own_kernels.py).
"""

from __future__ import annotations

import os

import pytest
import torch

import polyops
from polyops import _onednn
from polyops.testing.references import matmul_reference as ref_mm
from tests.conftest import BF16, F16, F32, make_tensor
from tests.generic.test_gemm import (  # noqa: F401  (collected again, with oneDNN forced)
    assert_product_close,
    mag_mm,
    test_gemm_alpha_beta,
    test_gemm_batched_c_layouts,
    test_gemm_k0_is_beta_c,
    test_gemm_trans,
    test_linear,
    test_linear_layouts,
    test_linear_out_given,
    test_matmul,
    test_matmul_layouts,
    test_matmul_out_row_padding_untouched,
)
from tests.generic.test_gemm_own_kernels import (  # noqa: F401  (collected again, with oneDNN forced)
    test_kernel_batched,
    test_kernel_decode_linear,
    test_kernel_non_finite,
    test_kernel_shapes_and_layouts,
)

INFO = polyops._C._onednn_info()

pytestmark = pytest.mark.skipif(
    not INFO["compiled"], reason=f"oneDNN is compiled out: {INFO['reason']}"
)


#: Under POLYOPS_CPU_GEMM=onednn a product runs on oneDNN exactly when oneDNN has a
#: non-reference implementation for its dtype, layout and post-ops; otherwise
#: ``onednn::Gemm`` declines (``_onednn_info()["declined"]`` says why: "unimplemented" or
#: the reference kernel it offered) and the own kernels or OpenBLAS run it. Which
#: products oneDNN covers depends on its ISA and version (float16 on AVX512-FP16 / AMX
#: covers a plain contiguous product but not every strided layout or the bias sum), so
#: the test checks that rule on every ISA, and in addition requires oneDNN outright
#: where its coverage was measured complete for this suite: float32 on AVX2 and
#: AVX-512 (the alpha/beta post-ops as a pass after the plain product where they are
#: reference-only), bfloat16 on AVX512-BF16 and AMX (AMD Zen 4, Intel Sapphire Rapids).
ONEDNN_AVX512 = INFO["isa"].startswith("avx512")
ONEDNN_F32 = ONEDNN_AVX512 or INFO["isa"].startswith("avx2")
ONEDNN_BF16 = INFO["isa"].startswith(("avx512_core_bf16", "avx512_core_fp16", "avx512_core_amx"))
#: Products oneDNN must run itself on this machine's ISA.
ONEDNN_REQUIRED = {F32: ONEDNN_F32, BF16: ONEDNN_BF16, F16: False}
#: The own kernels' paths (AVX-512 and AVX2 variants; src/cpu/gemm_kernels*.cc) and OpenBLAS.
FALLBACK_PATHS = (
    *("f32-packed", "f32-dot", "f32-axpy", "f32-dot-avx2", "f32-axpy-avx2"),
    *("bf16-packed", "bf16-dot", "bf16-pair", "bf16-dot-avx2", "bf16-axpy-avx2"),
    "openblas",
)


def _check_path(dtype: torch.dtype) -> str:
    """The path this thread's last product took, checked against the routing rule above."""
    path = polyops._C._cpu_gemm_path()
    declined = polyops._C._onednn_info()["declined"]
    if path == "onednn":
        assert not declined, declined
    else:
        assert not ONEDNN_REQUIRED[dtype], (path, dtype, INFO["isa"], declined)
        assert declined, f"{path} ran for {dtype} but oneDNN did not decline the product"
        assert path in FALLBACK_PATHS, path
    return path


def _has_product(result: torch.Tensor, k: int, alpha: float) -> bool:
    return result.numel() > 0 and k > 0 and alpha != 0


@pytest.fixture(autouse=True)
def onednn_forced(monkeypatch):
    """POLYOPS_CPU_GEMM=onednn, and matmul/gemm/linear wrapped to check the path each call took."""
    assert INFO["available"], f"oneDNN is compiled in but not loadable: {INFO['reason']}"
    monkeypatch.setenv("POLYOPS_CPU_GEMM", "onednn")
    calls = []

    def check(result, k, alpha):
        if _has_product(result, k, alpha):
            calls.append(_check_path(result.dtype))
        return result

    matmul, gemm, linear = polyops.matmul, polyops.gemm, polyops.linear

    def checked_matmul(a, b, **kwargs):
        return check(matmul(a, b, **kwargs), a.shape[-1], 1.0)

    def checked_gemm(a, b, c=None, **kwargs):
        k = a.shape[-2] if kwargs.get("trans_a", False) else a.shape[-1]
        return check(gemm(a, b, c, **kwargs), k, kwargs.get("alpha", 1.0))

    def checked_linear(x, w, bias=None, **kwargs):
        return check(linear(x, w, bias, **kwargs), x.shape[-1], 1.0)

    monkeypatch.setattr(polyops, "matmul", checked_matmul)
    monkeypatch.setattr(polyops, "gemm", checked_gemm)
    monkeypatch.setattr(polyops, "linear", checked_linear)
    yield calls


@pytest.fixture
def kernel_path():
    """test_gemm_own_kernels.py's kernel tests force the own kernels; here onednn_forced has
    set oneDNN."""


def test_onednn_info():
    """The loaded library reports a version, an ISA and the primitive it ran."""
    assert INFO["available"], INFO["reason"]
    assert INFO["version"].startswith("3."), INFO
    assert INFO["isa"] not in ("", "other"), INFO
    # bfloat16 where oneDNN has AVX512-BF16; a plain float32 product runs on every ISA.
    dtype = BF16 if ONEDNN_BF16 else F32
    polyops.matmul(torch.ones(40, 64, dtype=dtype), torch.ones(64, 48, dtype=dtype))
    assert polyops._C._cpu_gemm_path() == "onednn"
    info = polyops._C._onednn_info()
    assert info["last_impl"] and not info["last_impl"].startswith("ref"), info
    assert info["amx"] == info["isa"].startswith("avx512_core_amx"), info


def test_wheel_library_located():
    """The package hands the onednn-cpu-gomp wheel's library to the C++ side."""
    path = _onednn.library_path()
    if path is None:
        assert INFO["library"] == "libdnnl.so.3", INFO  # the loader's search path
    else:
        assert os.path.samefile(INFO["library"], path), (INFO, path)


def test_single_openmp_runtime():
    """oneDNN runs on the libgomp that torch and polyops use: one OpenMP pool."""
    polyops.matmul(torch.ones(64, 64), torch.ones(64, 64))
    with open("/proc/self/maps", encoding="utf-8") as maps:
        gomp = {line.split()[-1] for line in maps if "libgomp" in line}
    assert len(gomp) == 1, gomp


def test_unloadable_library_falls_back(gen, onednn_forced):
    """A libdnnl.so.3 that cannot be opened: the own kernels (or OpenBLAS) run, and say so."""
    a, b = make_tensor((40, 24), BF16, gen), make_tensor((24, 36), BF16, gen)
    good = INFO["library"]
    try:
        polyops._C._onednn_set_library("/nonexistent/libdnnl.so.3")
        info = polyops._C._onednn_info()
        assert not info["available"] and "dlopen" in info["reason"], info
        out = torch.ops.polyops.matmul(a, b)
        assert polyops._C._onednn_info()["declined"] == "unavailable"
        assert polyops._C._cpu_gemm_path() in FALLBACK_PATHS
        assert_product_close(out, ref_mm(a, b), BF16, 24, mag_mm(a, b))
    finally:
        polyops._C._onednn_set_library(good if good != "libdnnl.so.3" else "")
    assert polyops._C._onednn_info()["available"]
    polyops.matmul(a.float(), b.float())  # a plain float32 product: oneDNN on every ISA
    assert onednn_forced[-1] == "onednn"


def test_primitive_reuse_across_shapes(gen):
    """More shapes than the primitive cache holds, then the first again: results stay right."""
    first = (make_tensor((5, 7), F32, gen), make_tensor((7, 3), F32, gen))
    for n in range(1, 80):
        a, b = make_tensor((3, 4), F32, gen), make_tensor((4, n), F32, gen)
        assert_product_close(polyops.matmul(a, b), ref_mm(a, b), F32, 4, mag_mm(a, b))
    a, b = first
    assert_product_close(polyops.matmul(a, b), ref_mm(a, b), F32, 7, mag_mm(a, b))
