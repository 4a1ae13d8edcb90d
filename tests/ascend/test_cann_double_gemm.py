"""The CANN double's matrix products through ctypes: Mm and Matmul (batched, broadcast,
1-D operands, cubeMathType), Addmm and Baddbmm against float64 references."""

from __future__ import annotations

import pytest
import torch

from tests.ascend._cann_double_bindings import (
    BF16,
    F32,
    FLOATS,
    PARAM_INVALID,
    Arg,
    assert_close,
    out_arg,
    rand,
)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(
    "va,vb", [("contiguous", "contiguous"), ("transposed", "offset"), ("offset", "transposed")]
)
def test_mm_matmul(cann, dtype, va, vb):
    a, b = rand((5, 12), dtype, seed=16), rand((12, 7), dtype, seed=17)
    out = out_arg(cann, (5, 7), dtype)
    expected = a.double() @ b.double()
    tol = dtype if dtype != F32 else torch.float64
    for op in ("aclnnMm", "aclnnMatmul"):
        cann.run(op, Arg(cann, a, va).desc, Arg(cann, b, vb).desc, out.desc, 0)
        assert_close(out.result(), expected, dtype if dtype != F32 else F32)
    del tol
    # Batched matmul with batch broadcasting and a 1-D operand.
    x, w = rand((2, 3, 4, 6), dtype, seed=18), rand((3, 6, 5), dtype, seed=19)
    out = out_arg(cann, (2, 3, 4, 5), dtype)
    cann.run("aclnnMatmul", Arg(cann, x).desc, Arg(cann, w, "transposed").desc, out.desc, 0)
    assert_close(out.result(), x.double() @ w.double(), dtype)
    v = rand((6,), dtype, seed=20)
    out = out_arg(cann, (2, 3, 4), dtype)
    cann.run("aclnnMatmul", Arg(cann, x).desc, Arg(cann, v).desc, out.desc, 0)
    assert_close(out.result(), x.double() @ v.double(), dtype)
    bad = Arg(cann, rand((5, 5), dtype))
    cann.expect_fail(PARAM_INVALID, "aclnnMm", bad.desc, Arg(cann, b).desc, out.desc, 0)


def test_matmul_cube_math_type(cann):
    # Mantissas with more than 10 significant bits: HF32 (cubeMathType 1) rounds them.
    a = torch.full((2, 2), 1 + 2**-12, dtype=F32)
    b = torch.eye(2, dtype=F32)
    out = out_arg(cann, (2, 2), F32)
    cann.run("aclnnMm", Arg(cann, a).desc, Arg(cann, b).desc, out.desc, 0)
    assert torch.equal(out.result(), a)  # KEEP_DTYPE is fp32-exact
    cann.run("aclnnMm", Arg(cann, a).desc, Arg(cann, b).desc, out.desc, 1)
    assert torch.equal(out.result(), torch.ones(2, 2))
    bf = Arg(cann, a.to(BF16))
    bout = out_arg(cann, (2, 2), BF16)
    cann.expect_fail(PARAM_INVALID, "aclnnMm", bf.desc, bf.desc, bout.desc, 2)
    cann.expect_fail(PARAM_INVALID, "aclnnMm", bf.desc, bf.desc, bout.desc, 7)


@pytest.mark.parametrize("dtype", FLOATS)
def test_addmm_baddbmm(cann, dtype):
    bias, m1, m2 = (
        rand((7,), dtype, seed=21),
        rand((5, 9), dtype, seed=22),
        rand((9, 7), dtype, seed=23),
    )
    out = out_arg(cann, (5, 7), dtype)
    beta, alpha = cann.scalar(0.5), cann.scalar(2.0)
    cann.run(
        "aclnnAddmm",
        Arg(cann, bias).desc,
        Arg(cann, m1, "transposed").desc,
        Arg(cann, m2).desc,
        beta,
        alpha,
        out.desc,
        0,
    )
    assert_close(out.result(), 0.5 * bias.double() + 2.0 * (m1.double() @ m2.double()), dtype)
    b3, b1, b2 = (
        rand((3, 1, 4), dtype, seed=24),
        rand((3, 2, 6), dtype, seed=25),
        rand((3, 6, 4), dtype, seed=26),
    )
    out = out_arg(cann, (3, 2, 4), dtype)
    cann.run(
        "aclnnBaddbmm",
        Arg(cann, b3).desc,
        Arg(cann, b1).desc,
        Arg(cann, b2, "transposed").desc,
        cann.scalar(-1.0),
        cann.scalar(0.25),
        out.desc,
        0,
    )
    assert_close(out.result(), -b3.double() + 0.25 * (b1.double() @ b2.double()), dtype)
    # beta = 0 ignores self, even NaN.
    nan_bias = Arg(cann, torch.full((5, 7), float("nan"), dtype=dtype))
    out = out_arg(cann, (5, 7), dtype)
    cann.run(
        "aclnnAddmm",
        nan_bias.desc,
        Arg(cann, m1).desc,
        Arg(cann, m2).desc,
        cann.scalar(0.0),
        cann.scalar(1.0),
        out.desc,
        0,
    )
    assert_close(out.result(), m1.double() @ m2.double(), dtype)
