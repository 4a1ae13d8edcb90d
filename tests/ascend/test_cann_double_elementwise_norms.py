"""The CANN double's elementwise, norm and activation operators through ctypes: Add, Mul,
Cast, Cat, RmsNorm, AddRmsNorm, SwiGlu, Silu, Softmax, InplaceMaskedFillScalar and
InplaceCopy against float64 references, and their validation."""

from __future__ import annotations

import pytest
import torch

from tests.ascend._cann_double_bindings import (
    ACL_DTYPES,
    BF16,
    F16,
    F32,
    FLOATS,
    NULLPTR,
    PARAM_INVALID,
    VIEWS,
    Arg,
    assert_close,
    out_arg,
    rand,
)

# --- elementwise ---------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("view", VIEWS)
def test_add_mul_broadcast(cann, dtype, view):
    a = rand((4, 6), dtype, seed=1)
    b = rand((6,), dtype, seed=2)
    xa, xb = Arg(cann, a, view), Arg(cann, b)
    out = out_arg(cann, (4, 6), dtype, view)
    alpha = cann.scalar(0.75)
    cann.run("aclnnAdd", xa.desc, xb.desc, alpha, out.desc)
    assert_close(out.result(), a.double() + 0.75 * b.double(), dtype)
    cann.run("aclnnMul", xa.desc, xb.desc, out.desc)
    assert_close(out.result(), a.double() * b.double(), dtype)


def test_add_integers_and_promotion(cann):
    a = torch.tensor([[1, -2, 3]], dtype=torch.int64) * (2**40)
    b = torch.tensor([[5], [7]], dtype=torch.int32)
    out = out_arg(cann, (2, 3), torch.int64)
    cann.run(
        "aclnnAdd", Arg(cann, a).desc, Arg(cann, b).desc, cann.scalar(3, torch.int64), out.desc
    )
    assert torch.equal(out.result(), a + 3 * b.to(torch.int64))
    # float16 + float32 promotes to float32.
    h, f = rand((3,), F16, seed=3), rand((3,), F32, seed=4)
    out = out_arg(cann, (3,), F32)
    cann.run("aclnnAdd", Arg(cann, h).desc, Arg(cann, f).desc, cann.scalar(1.0), out.desc)
    assert_close(out.result(), h.double() + f.double(), F32)
    # A fractional alpha cannot be converted to an integer result: 161002.
    xi = Arg(cann, torch.ones(3, dtype=torch.int32))
    msg = cann.expect_fail(PARAM_INVALID, "aclnnAdd", xi.desc, xi.desc, cann.scalar(0.5), xi.desc)
    assert "alpha" in msg
    # float result into an int output is refused; bad broadcast too.
    fo = Arg(cann, torch.ones(3, dtype=F32))
    cann.expect_fail(PARAM_INVALID, "aclnnAdd", fo.desc, fo.desc, cann.scalar(1.0), xi.desc)
    bad = Arg(cann, torch.ones(4, dtype=F32))
    cann.expect_fail(PARAM_INVALID, "aclnnMul", fo.desc, bad.desc, fo.desc)
    cann.expect_fail(NULLPTR, "aclnnMul", None, bad.desc, fo.desc)


@pytest.mark.parametrize("src", [F32, F16, BF16, torch.int32, torch.float64])
@pytest.mark.parametrize("dst", [F32, F16, BF16, torch.int64, torch.bool])
def test_cast(cann, src, dst):
    x = (rand((3, 5), torch.float64, scale=40, seed=5)).to(src)
    out = out_arg(cann, (3, 5), dst)
    cann.run("aclnnCast", Arg(cann, x, "transposed").desc, ACL_DTYPES[dst], out.desc)
    expected = x.double()
    if dst == torch.bool:
        assert torch.equal(out.result(), x != 0)
    elif not dst.is_floating_point:
        assert torch.equal(out.result(), expected.trunc().to(dst))
    else:
        assert torch.equal(out.result(), expected.to(dst))  # one rounding, to nearest even
    cann.expect_fail(
        PARAM_INVALID, "aclnnCast", Arg(cann, x).desc, 3 if dst != torch.int32 else 0, out.desc
    )


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat(cann, dtype, dim):
    parts = [rand((3, 4, 2), dtype, seed=s) for s in range(3)]
    parts[1] = torch.cat([parts[1]] * 2, dim=dim)  # a different size along dim
    args = [Arg(cann, p, "offset" if i == 0 else "contiguous") for i, p in enumerate(parts)]
    expected = torch.cat(parts, dim=dim)
    out = out_arg(cann, expected.shape, dtype, "offset")
    cann.run("aclnnCat", cann.tensor_list([a.desc for a in args]), dim, out.desc)
    assert torch.equal(out.result(), expected)
    wrong = out_arg(cann, (1, 1, 1), dtype)
    lst = cann.tensor_list([Arg(cann, p).desc for p in parts])
    cann.expect_fail(PARAM_INVALID, "aclnnCat", lst, dim, wrong.desc)
    cann.expect_fail(PARAM_INVALID, "aclnnCat", lst, 3, out.desc)


# --- norms -----------------------------------------------------------------------


def rms_reference(x, gamma, eps, k):
    x = x.double()
    dims = tuple(range(x.dim() - k, x.dim()))
    rstd = torch.rsqrt(x.pow(2).mean(dim=dims, keepdim=True) + eps)
    return x * rstd * gamma.double(), rstd


@pytest.mark.parametrize(
    "dtype,gdtype", [(F16, F16), (BF16, BF16), (F32, F32), (F16, F32), (BF16, F32)]
)
@pytest.mark.parametrize("view", ["contiguous", "offset"])
def test_rms_norm(cann, dtype, gdtype, view):
    x = rand((2, 3, 16), dtype, seed=6)
    gamma = rand((16,), gdtype, seed=7) + 1
    y = out_arg(cann, x.shape, dtype, view)
    rstd = out_arg(cann, (2, 3, 1), F32)
    cann.run(
        "aclnnRmsNorm", Arg(cann, x, view).desc, Arg(cann, gamma).desc, 1e-6, y.desc, rstd.desc
    )
    ey, er = rms_reference(x, gamma, 1e-6, 1)
    assert_close(y.result(), ey, dtype)
    assert_close(rstd.result(), er, F32)
    # Two normalized dims: gamma (3, 16), rstd (2, 1, 1).
    gamma2 = rand((3, 16), gdtype, seed=8)
    rstd2 = out_arg(cann, (2, 1, 1), F32)
    cann.run("aclnnRmsNorm", Arg(cann, x).desc, Arg(cann, gamma2).desc, 1e-5, y.desc, rstd2.desc)
    ey, er = rms_reference(x, gamma2, 1e-5, 2)
    assert_close(y.result(), ey, dtype)
    assert_close(rstd2.result(), er, F32)


def test_rms_norm_rstd_is_mandatory_fp32_with_x_ndim(cann):
    x = Arg(cann, rand((2, 3, 8), F16))
    g = Arg(cann, rand((8,), F16))
    y = out_arg(cann, (2, 3, 8), F16)
    for shape, dtype in [((2, 3), F32), ((2, 3, 1), F16), ((6, 1), F32)]:
        bad = out_arg(cann, shape, dtype)
        assert "rstdOut" in cann.expect_fail(
            PARAM_INVALID, "aclnnRmsNorm", x.desc, g.desc, 1e-6, y.desc, bad.desc
        )
    cann.expect_fail(NULLPTR, "aclnnRmsNorm", x.desc, g.desc, 1e-6, y.desc, None)
    g32 = Arg(cann, rand((8,), F32))
    x32 = Arg(cann, rand((2, 3, 8), F32))
    y32 = out_arg(cann, (2, 3, 8), F32)
    rstd = out_arg(cann, (2, 3, 1), F32)
    cann.run("aclnnRmsNorm", x32.desc, g32.desc, 1e-6, y32.desc, rstd.desc)
    # float32 x with a float16 gamma is not a supported pair.
    g16 = Arg(cann, rand((8,), F16))
    cann.expect_fail(PARAM_INVALID, "aclnnRmsNorm", x32.desc, g16.desc, 1e-6, y32.desc, rstd.desc)


@pytest.mark.parametrize("dtype", FLOATS)
def test_add_rms_norm_and_inplace(cann, dtype):
    x1, x2 = rand((5, 32), dtype, seed=9), rand((5, 32), dtype, seed=10)
    gamma = rand((32,), dtype, seed=11)
    s = (x1.double() + x2.double()).to(dtype)  # the residual, rounded as stored
    ey, er = rms_reference(s, gamma, 1e-6, 1)
    y, rstd, xo = (
        out_arg(cann, (5, 32), dtype),
        out_arg(cann, (5, 1), F32),
        out_arg(cann, (5, 32), dtype),
    )
    a1, a2, g = Arg(cann, x1), Arg(cann, x2, "offset"), Arg(cann, gamma)
    cann.run("aclnnAddRmsNorm", a1.desc, a2.desc, g.desc, 1e-6, y.desc, rstd.desc, xo.desc)
    assert torch.equal(xo.result(), s)
    assert_close(y.result(), ey, dtype)
    assert_close(rstd.result(), er, F32)
    # In place: x1 <- normalized, x2 <- residual sum (vLLM fused_add_rms_norm).
    cann.run("aclnnInplaceAddRmsNorm", a1.desc, a2.desc, g.desc, 1e-6, rstd.desc)
    assert_close(a1.result(), ey, dtype)
    assert torch.equal(a2.result(), s)


# --- activations, softmax, masked fill, copy ---------------------------------------


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("view", ["contiguous", "offset"])
def test_swiglu_silu(cann, dtype, view):
    x = rand((3, 2, 16), dtype, scale=2, seed=12)
    xd = x.double()
    if view == "offset":
        # aclnnSwiGlu takes contiguous x and out only (padded rows are not).
        strided, plain = Arg(cann, x, view), Arg(cann, x)
        padded_out = out_arg(cann, (3, 2, 8), dtype, view)
        cann.expect_fail(
            PARAM_INVALID, "aclnnSwiGlu", strided.desc, -1, out_arg(cann, (3, 2, 8), dtype).desc
        )
        cann.expect_fail(PARAM_INVALID, "aclnnSwiGlu", plain.desc, -1, padded_out.desc)
    out = out_arg(cann, (3, 2, 8), dtype)
    cann.run("aclnnSwiGlu", Arg(cann, x).desc, -1, out.desc)
    assert_close(out.result(), torch.nn.functional.silu(xd[..., :8]) * xd[..., 8:], dtype)
    out0 = out_arg(cann, (3, 1, 16), dtype)
    cann.run("aclnnSwiGlu", Arg(cann, x).desc, 1, out0.desc)
    assert_close(out0.result(), torch.nn.functional.silu(xd[:, :1]) * xd[:, 1:], dtype)
    odd = Arg(cann, rand((3, 5), dtype))
    cann.expect_fail(PARAM_INVALID, "aclnnSwiGlu", odd.desc, -1, out.desc)
    so = out_arg(cann, x.shape, dtype, view)
    cann.run("aclnnSilu", Arg(cann, x, view).desc, so.desc)
    assert_close(so.result(), torch.nn.functional.silu(xd), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("dim", [-1, 0])
def test_softmax(cann, dtype, dim):
    x = rand((4, 7), dtype, scale=3, seed=13)
    out = out_arg(cann, (4, 7), dtype, "transposed")
    cann.run("aclnnSoftmax", Arg(cann, x, "offset").desc, dim, out.desc)
    assert_close(out.result(), torch.softmax(x.double(), dim), dtype)


@pytest.mark.parametrize("dtype", FLOATS)
def test_causal_softmax_sequence(cann, dtype):
    """IO's causal_softmax: copy, masked fill with -inf (end-aligned), softmax."""
    seq, total = 3, 5
    x = rand((2, seq, total), dtype, seed=14)
    work = out_arg(cann, x.shape, dtype)
    cann.run("aclnnInplaceCopy", work.desc, Arg(cann, x, "offset").desc)
    i = torch.arange(seq)[:, None]
    j = torch.arange(total)[None, :]
    mask = j > total - seq + i
    cann.run(
        "aclnnInplaceMaskedFillScalar", work.desc, Arg(cann, mask).desc, cann.scalar(float("-inf"))
    )
    out = out_arg(cann, x.shape, dtype)
    cann.run("aclnnSoftmax", work.desc, -1, out.desc)
    expected = torch.softmax(x.double().masked_fill(mask, float("-inf")), -1)
    assert_close(out.result(), expected, dtype)
    int_mask = Arg(cann, mask.to(torch.int8))
    cann.expect_fail(
        PARAM_INVALID, "aclnnInplaceMaskedFillScalar", work.desc, int_mask.desc, cann.scalar(0.0)
    )


def test_inplace_copy_casts_and_broadcasts(cann):
    dst = out_arg(cann, (3, 4), F16, "transposed")
    src = rand((4,), F32, seed=15)
    cann.run("aclnnInplaceCopy", dst.desc, Arg(cann, src).desc)
    assert torch.equal(dst.result(), src.to(F16).expand(3, 4))
