"""The CANN double's rotary embeddings and kv cache writes through ctypes:
RopeWithSinCosCache, ApplyRotaryPosEmbV2 and ScatterPaKvCache against references, their
validation and their run-time faults."""

from __future__ import annotations

import pytest
import torch

from tests.ascend._cann_double_bindings import (
    BF16,
    F16,
    F32,
    FLOATS,
    PARAM_INVALID,
    Arg,
    assert_close,
    out_arg,
    rand,
)


def rope_reference(positions, x, cache, head_size, neox):
    tokens = x.shape[0]
    xd = x.double().view(tokens, -1, head_size)
    rot = cache.shape[1]
    c = cache.double()[positions]
    cos, sin = c[:, None, : rot // 2], c[:, None, rot // 2 :]
    r = xd[..., :rot]
    if neox:
        x1, x2 = r[..., : rot // 2], r[..., rot // 2 :]
        out = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
    else:
        x1, x2 = r[..., 0::2], r[..., 1::2]
        out = torch.stack([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1).flatten(-2)
    return torch.cat([out, xd[..., rot:]], -1).view(tokens, -1)


@pytest.mark.parametrize("dtype,head,rot", [(F16, 64, 32), (BF16, 64, 64), (F32, 48, 16)])
@pytest.mark.parametrize("neox", [True, False])
def test_rope_with_sin_cos_cache(cann, dtype, head, rot, neox):
    tokens, nq, nk, max_pos = 5, 4, 2, 16
    positions = torch.tensor([3, 0, 15, 7, 7])
    q, k = rand((tokens, nq * head), dtype, seed=30), rand((tokens, nk * head), dtype, seed=31)
    cache = rand((max_pos, rot), dtype, seed=32)
    qo, ko = out_arg(cann, q.shape, dtype, "offset"), out_arg(cann, k.shape, dtype)
    cann.run(
        "aclnnRopeWithSinCosCache",
        Arg(cann, positions).desc,
        Arg(cann, q, "offset").desc,
        Arg(cann, k).desc,
        Arg(cann, cache).desc,
        None,
        head,
        neox,
        qo.desc,
        ko.desc,
    )
    assert_close(qo.result(), rope_reference(positions, q, cache, head, neox), dtype)
    assert_close(ko.result(), rope_reference(positions, k, cache, head, neox), dtype)


def test_rope_with_sin_cos_cache_validation(cann):
    pos = Arg(cann, torch.zeros(2, dtype=torch.int64))
    q = Arg(cann, rand((2, 96), F16))
    cache = Arg(cann, rand((4, 48), F16))
    out = out_arg(cann, (2, 96), F16)
    # 48 is not a multiple of 32 for float16.
    msg = cann.expect_fail(
        PARAM_INVALID,
        "aclnnRopeWithSinCosCache",
        pos.desc,
        q.desc,
        q.desc,
        cache.desc,
        None,
        48,
        True,
        out.desc,
        out.desc,
    )
    assert "multiples of 32" in msg
    q3 = Arg(cann, rand((2, 3, 32), F16))
    c32 = Arg(cann, rand((4, 32), F16))
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnRopeWithSinCosCache",
        pos.desc,
        q3.desc,
        q3.desc,
        c32.desc,
        None,
        32,
        True,
        out.desc,
        out.desc,
    )
    # A position past the cache is a run-time fault reported by the sync.
    bad_pos = Arg(cann, torch.tensor([0, 9]))
    q64 = Arg(cann, rand((2, 64), F16))
    out64 = out_arg(cann, (2, 64), F16)
    status, ws, ex = cann.phase_one(
        "aclnnRopeWithSinCosCache",
        bad_pos.desc,
        q64.desc,
        q64.desc,
        c32.desc,
        None,
        32,
        True,
        out64.desc,
        out64.desc,
    )
    assert status == 0
    assert cann.launch("aclnnRopeWithSinCosCache", ws, ex) == 0
    assert cann.sync_stream(None) == 507899
    assert "position 9" in cann.error()


def rotate_reference(x, cos, sin, mode):
    x, cos, sin = x.double(), cos.double(), sin.double()
    if mode == "half":
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    else:
        rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
    return x * cos + rotated * sin


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("mode", ["half", "interleave"])
def test_apply_rotary_pos_emb_v2(cann, dtype, mode):
    tokens, d = 3, 128
    q, k = rand((tokens, 4, d), dtype, seed=33), rand((tokens, 2, d), dtype, seed=34)
    cos, sin = rand((tokens, 1, d), dtype, seed=35), rand((tokens, 1, d), dtype, seed=36)
    aq, ak = Arg(cann, q), Arg(cann, k, "offset")
    cann.run(
        "aclnnApplyRotaryPosEmbV2",
        aq.desc,
        ak.desc,
        Arg(cann, cos).desc,
        Arg(cann, sin).desc,
        4,
        mode.encode(),
    )
    assert_close(aq.result(), rotate_reference(q, cos, sin, mode), dtype)
    assert_close(ak.result(), rotate_reference(k, cos, sin, mode), dtype)
    # BSND (layout 1) with cos [B, S, 1, D].
    q4 = rand((2, 3, 4, d), dtype, seed=37)
    c4, s4 = rand((2, 3, 1, d), dtype, seed=38), rand((2, 3, 1, d), dtype, seed=39)
    a4 = Arg(cann, q4)
    cann.run(
        "aclnnApplyRotaryPosEmbV2",
        a4.desc,
        a4.desc,
        Arg(cann, c4).desc,
        Arg(cann, s4).desc,
        1,
        mode.encode(),
    )
    # query and key alias here: rotated twice.
    twice = rotate_reference(rotate_reference(q4, c4, s4, mode).to(dtype), c4, s4, mode)
    assert_close(a4.result(), twice, dtype)


def test_apply_rotary_pos_emb_v2_validation(cann):
    q = Arg(cann, rand((3, 2, 64), F16))
    c = Arg(cann, rand((3, 1, 64), F16))
    assert "128" in cann.expect_fail(
        PARAM_INVALID, "aclnnApplyRotaryPosEmbV2", q.desc, q.desc, c.desc, c.desc, 4, b"half"
    )
    q = Arg(cann, rand((3, 2, 128), F16))
    c = Arg(cann, rand((3, 1, 128), F16))
    cann.expect_fail(
        PARAM_INVALID, "aclnnApplyRotaryPosEmbV2", q.desc, q.desc, c.desc, c.desc, 4, b"quarter"
    )
    cann.expect_fail(
        PARAM_INVALID, "aclnnApplyRotaryPosEmbV2", q.desc, q.desc, c.desc, c.desc, 1, b"half"
    )


# --- KV cache --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [F16, BF16, torch.int8])
@pytest.mark.parametrize("slot_dtype", [torch.int32, torch.int64])
def test_scatter_pa_kv_cache(cann, dtype, slot_dtype):
    blocks, block_size, nkv, d, dv = 3, 4, 2, 16, 8
    key = (rand((5, nkv, d), torch.float64, scale=20, seed=40)).to(dtype)
    value = (rand((5, nkv, dv), torch.float64, scale=20, seed=41)).to(dtype)
    slots = torch.tensor([0, 5, -1, 11, 6], dtype=slot_dtype)
    kc = Arg(cann, torch.zeros(blocks, block_size, nkv, d, dtype=dtype))
    vc = Arg(cann, torch.zeros(blocks, block_size, nkv, dv, dtype=dtype))
    strides, offsets = cann.int_array([1, 1]), cann.int_array([0, 0])
    cann.run(
        "aclnnScatterPaKvCache",
        Arg(cann, key).desc,
        kc.desc,
        Arg(cann, slots).desc,
        Arg(cann, value).desc,
        vc.desc,
        None,
        None,
        None,
        b"Norm",
        b"None",
        strides,
        offsets,
    )
    ek = torch.zeros(blocks * block_size, nkv, d, dtype=dtype)
    ev = torch.zeros(blocks * block_size, nkv, dv, dtype=dtype)
    for t, s in enumerate(slots.tolist()):
        if s >= 0:
            ek[s], ev[s] = key[t], value[t]
    assert torch.equal(kc.result(), ek.view(blocks, block_size, nkv, d))
    assert torch.equal(vc.result(), ev.view(blocks, block_size, nkv, dv))


def test_scatter_pa_kv_cache_validation(cann):
    key32 = Arg(cann, rand((2, 1, 16), F32))
    kc32 = Arg(cann, torch.zeros(2, 2, 1, 16))
    slots = Arg(cann, torch.tensor([0, 1], dtype=torch.int32))
    args = (None, None, None, b"Norm", b"None", None, None)
    msg = cann.expect_fail(
        PARAM_INVALID,
        "aclnnScatterPaKvCache",
        key32.desc,
        kc32.desc,
        slots.desc,
        key32.desc,
        kc32.desc,
        *args,
    )
    assert "FLOAT16" in msg
    key = Arg(cann, rand((2, 1, 16), F16), "offset")  # padded rows: not contiguous
    kc = Arg(cann, torch.zeros(2, 2, 1, 16, dtype=F16))
    assert "contiguous" in cann.expect_fail(
        PARAM_INVALID,
        "aclnnScatterPaKvCache",
        key.desc,
        kc.desc,
        slots.desc,
        key.desc,
        kc.desc,
        *args,
    )
    # 8.3.RC1.alpha003 modes are refused; an out-of-range slot faults at the sync.
    good = Arg(cann, rand((2, 1, 16), F16))
    cann.expect_fail(
        PARAM_INVALID,
        "aclnnScatterPaKvCache",
        good.desc,
        kc.desc,
        slots.desc,
        good.desc,
        kc.desc,
        None,
        None,
        None,
        b"PA_NZ",
        b"None",
        None,
        None,
    )
    far = Arg(cann, torch.tensor([0, 4], dtype=torch.int32))
    status, ws, ex = cann.phase_one(
        "aclnnScatterPaKvCache", good.desc, kc.desc, far.desc, good.desc, kc.desc, *args
    )
    assert status == 0 and cann.launch("aclnnScatterPaKvCache", ws, ex) == 0
    assert cann.sync_device() == 507899
    assert "slotMapping[1] = 4" in cann.error()
