"""The CANN double's operators that topk_topp_sampling's Ascend slot chains around
aclnnApplyTopKTopP (src/cann_double/ops_sampling.cc), driven through the ctypes bindings of
tests/ascend/_cann_double_bindings.py: NanToNum, Flip, Sort, Cumsum, Clamp, Rsubs, SearchSorted and
Gather against torch on the CPU (exact where the op is exact, float64 references
otherwise), and their validation (161001 / 161002) and run-time faults (507899).
"""

from __future__ import annotations

import ctypes
import math

import pytest
import torch

import tests.ascend._cann_double_bindings as base
from tests.ascend._cann_double_bindings import (
    BF16,
    F16,
    F32,
    FLOATS,
    NULLPTR,
    PARAM_INVALID,
    Arg,
    out_arg,
    rand,
)

P, I32, I64 = ctypes.c_void_p, ctypes.c_int32, ctypes.c_int64
F, B = ctypes.c_float, ctypes.c_bool

SAMPLING_OPS = {
    "aclnnNanToNum": [P, F, F, F, P],
    "aclnnFlip": [P, P, P],
    "aclnnSort": [P, B, I64, B, P, P],
    "aclnnCumsum": [P, I64, I32, P],
    "aclnnClamp": [P, P, P, P],
    "aclnnRsubs": [P, P, P, P],
    "aclnnSearchSorted": [P, P, B, B, P, P],
    "aclnnGather": [P, I64, P, P],
}


@pytest.fixture(scope="module")
def cann() -> base.Cann:
    directory = base.find_library_dir()
    if directory is None:
        pytest.skip("the CANN double is not built (cmake -DWITH_CANN_DOUBLE=ON; ninja cann_double)")
    base.OP_ARGS.update(SAMPLING_OPS)
    return base.Cann(directory)


@pytest.mark.parametrize("dtype", FLOATS)
def test_nan_to_num(cann, dtype):
    x = torch.tensor([[math.nan, math.inf, -math.inf, 1.5], [0.0, -2.0, math.nan, 3.0]]).to(dtype)
    out = out_arg(cann, (2, 4), dtype)
    cann.run("aclnnNanToNum", Arg(cann, x, "offset").desc, -3.0, 7.0, -9.0, out.desc)
    expected = torch.nan_to_num(x.double(), nan=-3.0, posinf=7.0, neginf=-9.0).to(dtype)
    assert torch.equal(out.result(), expected)
    wrong = out_arg(cann, (2, 4), F32 if dtype != F32 else F16)
    cann.expect_fail(PARAM_INVALID, "aclnnNanToNum", Arg(cann, x).desc, 0.0, 0.0, 0.0, wrong.desc)


@pytest.mark.parametrize("dtype", [F32, torch.int64])
def test_flip(cann, dtype):
    x = (torch.arange(15).view(3, 5) * 3 - 7).to(dtype)
    for dims in ([1], [0], [-1, 0]):
        out = out_arg(cann, (3, 5), dtype)
        cann.run("aclnnFlip", Arg(cann, x, "offset").desc, cann.int_array(dims), out.desc)
        assert torch.equal(out.result(), torch.flip(x, dims))
    out = out_arg(cann, (3, 5), dtype)
    cann.expect_fail(
        PARAM_INVALID, "aclnnFlip", Arg(cann, x).desc, cann.int_array([1, -1]), out.desc
    )
    cann.expect_fail(PARAM_INVALID, "aclnnFlip", Arg(cann, x).desc, cann.int_array([2]), out.desc)
    cann.expect_fail(NULLPTR, "aclnnFlip", Arg(cann, x).desc, None, out.desc)


@pytest.mark.parametrize("dtype", [F16, F32, torch.int32])
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_matches_torch(cann, dtype, descending):
    g = torch.Generator().manual_seed(5)
    x = torch.randint(-4, 5, (6, 40), generator=g).to(dtype)  # many ties
    if dtype.is_floating_point:
        x[0, 3] = math.nan
        x[1, :4] = torch.tensor([-0.0, 0.0, -0.0, 0.0])
        x[2, 7] = math.inf
    values, indices = out_arg(cann, (6, 40), dtype), out_arg(cann, (6, 40), torch.int64)
    cann.run(
        "aclnnSort", Arg(cann, x, "offset").desc, True, -1, descending, values.desc, indices.desc
    )
    expected = torch.sort(x, dim=-1, descending=descending, stable=True)
    assert torch.equal(indices.result(), expected.indices)
    assert torch.allclose(
        values.result().double(), expected.values.double(), equal_nan=True, atol=0, rtol=0
    )


def test_unstable_sort_reverses_ties_and_sort_validates(cann):
    x = torch.tensor([[2.0, 1.0, 2.0, 1.0, 2.0]])
    values, indices = out_arg(cann, (1, 5), F32), out_arg(cann, (1, 5), torch.int64)
    cann.run("aclnnSort", Arg(cann, x).desc, False, 1, False, values.desc, indices.desc)
    assert indices.result().tolist() == [[3, 1, 4, 2, 0]]
    bf = Arg(cann, x.to(BF16))
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnSort",
        bf.desc,
        True,
        1,
        False,
        out_arg(cann, (1, 5), BF16).desc,
        indices.desc,
    )
    i32 = out_arg(cann, (1, 5), torch.int32)
    cann.expect_fail(
        PARAM_INVALID, "aclnnSort", Arg(cann, x).desc, True, 1, False, values.desc, i32.desc
    )
    cann.expect_fail(
        PARAM_INVALID, "aclnnSort", Arg(cann, x).desc, True, 2, False, values.desc, indices.desc
    )


@pytest.mark.parametrize("dtype", FLOATS)
def test_cumsum(cann, dtype):
    x = rand((5, 300), dtype, seed=2).abs()
    out = out_arg(cann, (5, 300), F32)
    cann.run("aclnnCumsum", Arg(cann, x, "offset").desc, 1, 0, out.desc)
    expected = torch.cumsum(x.double(), dim=1)
    torch.testing.assert_close(out.result().double(), expected, rtol=1e-6, atol=1e-6)
    cann.expect_fail(PARAM_INVALID, "aclnnCumsum", Arg(cann, x).desc, 1, 1, out.desc)


def test_clamp_and_rsubs(cann):
    x = torch.tensor([-1.5, 0.25, 0.999, 1.0, 7.0, math.nan, -math.inf])
    out = out_arg(cann, (7,), F32)
    low, high = cann.scalar(0.0), cann.scalar(1.0 - 2.0**-24)
    cann.run("aclnnClamp", Arg(cann, x).desc, low, high, out.desc)
    expected = torch.clamp(x, 0.0, 1.0 - 2.0**-24)
    assert torch.allclose(out.result(), expected, equal_nan=True, atol=0, rtol=0)
    one = cann.scalar(1.0)
    cann.run("aclnnRsubs", Arg(cann, x).desc, one, one, out.desc)
    assert torch.allclose(out.result(), 1.0 - x, equal_nan=True, atol=0, rtol=0)
    # int64: exact, with int64 scalars (the slot's clamp of top_k and its id = (V-1) - pos).
    big = torch.tensor([-(2**40), -3, 0, 5, 2**40 + 7])
    out64 = out_arg(cann, (5,), torch.int64)
    lo64, hi64 = cann.scalar(0, torch.int64), cann.scalar(1000, torch.int64)
    cann.run("aclnnClamp", Arg(cann, big).desc, lo64, hi64, out64.desc)
    assert out64.result().tolist() == [0, 0, 0, 5, 1000]
    last, unit = cann.scalar(49999, torch.int64), cann.scalar(1, torch.int64)
    cann.run("aclnnRsubs", Arg(cann, big).desc, last, unit, out64.desc)
    assert out64.result().tolist() == (49999 - big).tolist()
    cann.expect_fail(NULLPTR, "aclnnClamp", Arg(cann, x).desc, None, None, out.desc)
    cann.expect_fail(PARAM_INVALID, "aclnnRsubs", Arg(cann, big).desc, one, one, out64.desc)


@pytest.mark.parametrize("right", [False, True])
def test_search_sorted(cann, right):
    g = torch.Generator().manual_seed(9)
    seq = torch.sort(torch.rand(4, 30, generator=g), dim=1).values
    seq[:, 10:13] = seq[:, 10:11]  # equal runs: left and right differ
    values = torch.cat([seq[:, 11:12], torch.rand(4, 2, generator=g)], dim=1)
    values[0, 1] = math.nan
    values[1, 1] = 2.0
    values[2, 1] = -1.0
    out = out_arg(cann, (4, 3), torch.int64)
    cann.run(
        "aclnnSearchSorted",
        Arg(cann, seq, "offset").desc,
        Arg(cann, values).desc,
        False,
        right,
        None,
        out.desc,
    )
    expected = torch.searchsorted(seq, values, right=right)
    assert torch.equal(out.result(), expected)
    # One shared 1-D sequence, INT32 out, and an empty sequence (everything at 0).
    out32 = out_arg(cann, (4, 3), torch.int32)
    cann.run(
        "aclnnSearchSorted",
        Arg(cann, seq[0]).desc,
        Arg(cann, values).desc,
        True,
        right,
        None,
        out32.desc,
    )
    assert torch.equal(
        out32.result(), torch.searchsorted(seq[0], values, right=right, out_int32=True)
    )
    empty = cann.empty(1, F32)
    empty_desc = cann.tensor(empty, [4, 0], [1, 1])
    cann.run("aclnnSearchSorted", empty_desc, Arg(cann, values).desc, False, right, None, out.desc)
    assert out.result().eq(0).all()
    sorter = Arg(cann, torch.zeros(4, 30, dtype=torch.int64))
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnSearchSorted",
        Arg(cann, seq).desc,
        Arg(cann, values).desc,
        False,
        right,
        sorter.desc,
        out.desc,
    )
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnSearchSorted",
        Arg(cann, seq).desc,
        Arg(cann, values).desc,
        True,
        right,
        None,
        out.desc,
    )
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnSearchSorted",
        Arg(cann, seq[:3]).desc,
        Arg(cann, values).desc,
        False,
        right,
        None,
        out.desc,
    )


def test_gather_and_its_runtime_fault(cann):
    g = torch.Generator().manual_seed(4)
    x = torch.randint(0, 1000, (5, 40), generator=g)
    index = torch.randint(-40, 40, (5, 3), generator=g)
    out = out_arg(cann, (5, 3), torch.int64)
    cann.run("aclnnGather", Arg(cann, x, "offset").desc, 1, Arg(cann, index).desc, out.desc)
    assert torch.equal(out.result(), torch.gather(x, 1, index % 40))
    bad = Arg(cann, torch.tensor([[0], [40], [1], [2], [3]]))
    out1 = out_arg(cann, (5, 1), torch.int64)
    status, ws, ex = cann.phase_one("aclnnGather", Arg(cann, x).desc, 1, bad.desc, out1.desc)
    assert status == 0
    assert cann.launch("aclnnGather", ws, ex) == 0
    assert cann.sync_stream(None) == 507899
    assert "index 40" in cann.error()
    f32_index = Arg(cann, index.float())
    cann.expect_fail(PARAM_INVALID, "aclnnGather", Arg(cann, x).desc, 1, f32_index.desc, out.desc)


def test_apply_top_k_top_p_faults_on_p_outside_its_range(cann):
    logits = Arg(cann, rand((3, 8), F32))
    for bad in (1.5, -0.25, math.nan):
        p = Arg(cann, torch.tensor([0.5, bad, 1.0]))
        out = out_arg(cann, (3, 8), F32)
        status, ws, ex = cann.phase_one("aclnnApplyTopKTopP", logits.desc, p.desc, None, out.desc)
        assert status == 0
        assert cann.launch("aclnnApplyTopKTopP", ws, ex) == 0
        assert cann.sync_stream(None) == 507899
        assert "p[1]" in cann.error() and "outside [0, 1]" in cann.error()
