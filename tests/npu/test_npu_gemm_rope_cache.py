"""The Ascend matmul/gemm/linear, RoPE and KV-cache slots beyond the parity table, on the
CANN test double: the host path of the multi-launch slots (phase 1 once per geometry;
no synchronization or copy on a hit), the stream pool growing before a multi-launch
unit's first launch, and the forms the parity table reaches only on other dtypes.
References are float64 computations of the math.
The double is active for this process (tests/npu/conftest.py); the CANN version gate of
reshape_and_cache, read once per process, is checked in fresh ones
(tests/ascend/test_ascend_gemm_rope_cache.py).
"""

from __future__ import annotations

import torch

import polyops
from polyops.testing import cann_calls, clear_cann_calls
from polyops.testing.references import matmul_reference


def test_repeated_calls_skip_phase_one_and_never_synchronize():
    # Every slot, including the multi-launch ones (int32 positions, key None,
    # strided key/value, out-of-place apply_rotary_pos_emb), on a second call
    # with new tensors of the same geometry.
    def inputs():
        a, b = torch.randn(3, 4, 5).to("npu"), torch.randn(5, 6).to("npu")
        c, weight = torch.randn(6).to("npu"), torch.randn(6, 5).to("npu")
        positions = torch.randint(0, 16, (5,), dtype=torch.int32).to("npu")
        rope = torch.randn(5, 2 * 32, dtype=torch.float16).to("npu")
        cache = torch.randn(16, 32, dtype=torch.float16).to("npu")
        query = torch.randn(4, 2, 128).to("npu")
        cos, sin = torch.randn(4, 64).to("npu"), torch.randn(4, 64).to("npu")
        qkv = torch.randn(3, 3, 2, 16, dtype=torch.bfloat16).to("npu")
        caches = [torch.zeros(2, 4, 2, 16, dtype=torch.bfloat16).to("npu") for _ in "kv"]
        slots = torch.tensor([5, 0, 7]).to("npu")
        return (
            a,
            b,
            c,
            weight,
            positions,
            rope,
            cache,
            query,
            cos,
            sin,
            torch.empty_like(query),
            qkv,
            caches,
            slots,
        )

    def run(a, b, c, weight, positions, rope, cache, query, cos, sin, out, qkv, caches, slots):
        polyops.gemm(a, b, c, alpha=0.5, beta=2.0)
        polyops.gemm(a, b, alpha=0.0)
        polyops.gemm(a[0], b, c, beta=1.0)
        polyops.linear(a[:, :3], weight, c)
        polyops.matmul(a, b)
        polyops.rotary_embedding(positions, rope, None, 32, cache)
        polyops.apply_rotary_pos_emb(query, None, cos, sin, query_out=out)
        polyops.reshape_and_cache(qkv[:, 1], qkv[:, 2], *caches, slots)

    run(*inputs())
    second = inputs()
    clear_cann_calls()
    run(*second)
    calls = [c["function"] for c in cann_calls()]
    assert not any(f.endswith("GetWorkspaceSize") for f in calls), calls
    assert not any(f in ("aclrtSynchronizeStream", "aclrtMemcpy") for f in calls), calls
    for api in (
        "aclnnAddmm",
        "aclnnBaddbmm",
        "aclnnMatmul",
        "aclnnCast",
        "aclnnRopeWithSinCosCache",
        "aclnnApplyRotaryPosEmbV2",
        "aclnnScatterPaKvCache",
    ):
        assert api in calls
    assert calls.count("aclnnInplaceCopy") == 5  # q_out, cos, sin, key, value


def test_multi_launch_pool_grows_before_the_first_launch():
    # The first call after clear_cache (which frees the stream pools; conftest calls it
    # before each test) needs a pool larger than its first 1 MiB block. The whole unit
    # (aclnnCast writing int64 positions into scratch, aclnnRopeWithSinCosCache reading
    # them) is bound first, so the pool grows before anything is queued and nothing
    # runs between the launches.
    torch.manual_seed(0)
    tokens, heads = 20000, 4
    query = torch.randn(tokens, heads * 32, dtype=torch.float16)
    cache = torch.randn(64, 32, dtype=torch.float16)
    positions = torch.randint(0, 64, (tokens,), dtype=torch.int32)
    q, p, c = query.to("npu"), positions.to("npu"), cache.to("npu")
    clear_cann_calls()
    polyops.rotary_embedding(p, q, None, 32, c)
    calls = [c["function"] for c in cann_calls()]
    cast, rope = calls.index("aclnnCast"), calls.index("aclnnRopeWithSinCosCache")
    mallocs = [i for i, name in enumerate(calls) if name == "aclrtMalloc"]
    x = query.double().view(tokens, heads, 32)
    cos, sin = cache.double()[positions.long()].chunk(2, dim=-1)
    x1, x2 = x[..., :16], x[..., 16:]
    expected = torch.cat(
        [x1 * cos[:, None] - x2 * sin[:, None], x2 * cos[:, None] + x1 * sin[:, None]], -1
    )
    error = (q.cpu().double().view(tokens, heads, 32) - expected).abs().max().item()
    result = {"error": error, "mallocs": mallocs, "cast": cast, "between": calls[cast + 1 : rope]}
    assert len(result["mallocs"]) >= 2 and result["mallocs"][-1] < result["cast"], result
    assert result["between"] == [], result
    assert result["error"] < 2e-2


def test_rotary_embedding_key_none_int32_positions_and_outputs():
    # The parity table's key=None case has head size 16, which float16 cannot run.
    torch.manual_seed(1)
    tokens, heads, head_size, rotary = 6, 3, 64, 32
    query = torch.randn(tokens, heads, head_size, dtype=torch.bfloat16)
    cache = torch.randn(20, rotary, dtype=torch.bfloat16)
    positions = torch.randint(0, 20, (tokens,), dtype=torch.int32)
    q = query.to("npu")
    out = torch.full_like(q, float("nan"))
    got = polyops.rotary_embedding(
        positions.to("npu"),
        q,
        None,
        head_size,
        cache.to("npu"),
        False,
        rotary_dim=rotary,
        query_out=out,
    )
    x = query.double()
    cos, sin = cache.double()[positions.long()].chunk(2, dim=-1)
    x1, x2 = x[..., 0:rotary:2], x[..., 1:rotary:2]
    expected = x.clone()
    expected[..., 0:rotary:2] = x1 * cos[:, None] - x2 * sin[:, None]
    expected[..., 1:rotary:2] = x2 * cos[:, None] + x1 * sin[:, None]
    error = (out.cpu().double() - expected).abs().max().item()
    input_kept = torch.equal(q.cpu(), query)
    key_out = got[1] is None
    assert error < 5e-2 and input_kept and key_out


def test_apply_rotary_pos_emb_key_none_and_out_of_place():
    torch.manual_seed(2)
    tokens, heads = 5, 2
    query = torch.randn(tokens, heads, 128)
    key = torch.randn(tokens, 1, 128)
    cos, sin = torch.randn(tokens, 64), torch.randn(tokens, 64)

    def reference(x, neox):
        x = x.double()
        c, s = cos.double()[:, None], sin.double()[:, None]
        if neox:
            x1, x2 = x[..., :64], x[..., 64:]
            return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)
        out = x.clone()
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out[..., 0::2], out[..., 1::2] = x1 * c - x2 * s, x2 * c + x1 * s
        return out

    errors = []
    for neox in (True, False):
        q, k = query.to("npu"), key.to("npu")
        q_out, k_out = torch.empty_like(q), torch.empty_like(k)
        polyops.apply_rotary_pos_emb(
            q,
            k,
            cos.to("npu"),
            sin.to("npu"),
            is_neox_style=neox,
            query_out=q_out,
            key_out=k_out,
        )
        errors.append((q_out.cpu().double() - reference(query, neox)).abs().max().item())
        errors.append((k_out.cpu().double() - reference(key, neox)).abs().max().item())
        errors.append(0.0 if torch.equal(q.cpu(), query) else 1.0)
        q = query.to("npu")
        polyops.apply_rotary_pos_emb(q, None, cos.to("npu"), sin.to("npu"), is_neox_style=neox)
        errors.append((q.cpu().double() - reference(query, neox)).abs().max().item())
    assert max(errors) < 1e-4


def test_matmul_torch_semantics_in_both_call_forms():
    # 1-D operands and broadcast batch dims go to aclnnMatmul as they are.
    g = torch.Generator().manual_seed(9)
    shapes = [
        ((7,), (7,)),
        ((7,), (7, 5)),
        ((6, 7), (7,)),
        ((2, 1, 6, 7), (3, 7, 5)),
        ((5,), (2, 3, 5, 4)),
        ((2, 3, 6, 7), (7, 5)),
    ]
    for x_shape, y_shape in shapes:
        a = torch.randn(*x_shape, generator=g)
        b = torch.randn(*y_shape, generator=g)
        want = matmul_reference(a, b)
        for name, api in (("polyops", polyops), ("torch.ops", torch.ops.polyops)):
            got = api.matmul(a.to("npu"), b.to("npu")).cpu()
            key = f"{x_shape}@{y_shape}-{name}"
            error = float((got.double() - want).abs().max())
            assert list(got.shape) == list(want.shape), key
            assert error <= 1e-5, (key, error)
