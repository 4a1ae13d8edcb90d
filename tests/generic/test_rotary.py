"""rotary_embedding and apply_rotary_pos_emb against float64 references from the math."""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing.opinfo import rope_cache as make_cache
from polyops.testing.references import rotate_reference
from tests.conftest import (
    BF16,
    F16,
    F32,
    FLOAT_DTYPES,
    I32,
    assert_close,
    assert_equal,
    dtype_id,
    make_tensor,
    parallel_param,
    row_strided,
    slot_params,
    step_sliced,
)


def qk(tokens, hq, hkv, head_size, dtype, gen, three_d):
    if three_d:
        return (
            make_tensor((tokens, hq, head_size), dtype, gen),
            make_tensor((tokens, hkv, head_size), dtype, gen),
        )
    return (
        make_tensor((tokens, hq * head_size), dtype, gen),
        make_tensor((tokens, hkv * head_size), dtype, gen),
    )


CASES = [
    # tokens, hq, hkv, head_size, rotary_dim
    pytest.param((5, 4, 4, 16, 16), id="mha"),
    pytest.param((6, 8, 2, 32, 32), id="gqa"),
    pytest.param((3, 2, 1, 64, 32), id="partial"),
    pytest.param((1, 1, 1, 8, 2), id="tiny"),
    pytest.param((0, 2, 2, 8, 8), id="empty"),
    parallel_param((32, 8, 2, 128, 128), id="large"),
    parallel_param((4, 2, 2, 1536, 1280), id="wide-heads"),  # rotary_dim/2 > one block
]


@pytest.mark.parametrize("slot", slot_params("rotary_embedding"))
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("three_d", [False, True], ids=["2d", "3d"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_rotary_embedding_parity(dtype, three_d, neox, case, slot, gen):
    tokens, hq, hkv, head_size, rotary_dim = case
    max_pos = 50
    cache = make_cache(max_pos, rotary_dim, dtype)
    positions = torch.randint(0, max_pos, (tokens,), generator=gen)
    query, key = qk(tokens, hq, hkv, head_size, dtype, gen, three_d)
    cos, sin = cache[positions].chunk(2, dim=-1)
    expected_q = rotate_reference(query, cos, sin, head_size, neox)
    expected_k = rotate_reference(key, cos, sin, head_size, neox)
    # out of place: inputs untouched
    q_in, k_in = query.clone(), key.clone()
    q_out, k_out = torch.empty_like(query), torch.empty_like(key)
    result = polyops.rotary_embedding(
        positions,
        query,
        key,
        head_size,
        cache,
        neox,
        query_out=q_out,
        key_out=k_out,
        implementation_index=slot,
    )
    assert result[0] is q_out and result[1] is k_out
    assert_equal(query, q_in)
    assert_equal(key, k_in)
    assert_close(q_out, expected_q, dtype)
    assert_close(k_out, expected_k, dtype)
    # in place (the default): same bits as out of place
    q2, k2 = polyops.rotary_embedding(
        positions, query, key, head_size, cache, is_neox_style=neox, implementation_index=slot
    )
    assert q2 is query and k2 is key
    assert_equal(query, q_out)
    assert_equal(key, k_out)


@pytest.mark.parametrize("slot", slot_params("rotary_embedding"))
@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_rotary_embedding_float32_cache(dtype, slot, gen):
    cache = make_cache(20, 32, F32)
    positions = torch.randint(0, 20, (7,), generator=gen)
    query, key = qk(7, 4, 2, 32, dtype, gen, True)
    cos, sin = cache[positions].chunk(2, dim=-1)
    q, k = polyops.rotary_embedding(
        positions, query.clone(), key.clone(), 32, cache, implementation_index=slot
    )
    assert_close(q, rotate_reference(query, cos, sin, 32, True), dtype)
    assert_close(k, rotate_reference(key, cos, sin, 32, True), dtype)


@pytest.mark.parametrize("slot", slot_params("rotary_embedding"))
def test_rotary_embedding_int32_positions_and_no_key(slot, gen):
    cache = make_cache(30, 16, F32)
    positions = torch.randint(0, 30, (9,), generator=gen)
    query = make_tensor((9, 3, 16), F32, gen)
    a, none = polyops.rotary_embedding(
        positions, query.clone(), None, 16, cache, False, implementation_index=slot
    )
    assert none is None
    b, _ = polyops.rotary_embedding(
        step_sliced(positions.int()),
        query.clone(),
        None,
        16,
        cache,
        False,
        implementation_index=slot,
    )
    assert_equal(a, b)
    cos, sin = cache[positions].chunk(2, dim=-1)
    assert_close(a, rotate_reference(query, cos, sin, 16, False), F32)


@pytest.mark.parametrize("slot", slot_params("rotary_embedding"))
def test_rotary_embedding_strided(slot, gen):
    # query/key as slices of a fused qkv buffer, out written to a strided view
    cache = make_cache(10, 8, BF16)
    positions = torch.randint(0, 10, (5,), generator=gen)
    qkv = make_tensor((5, 3 * 4 * 16), BF16, gen)
    query, key = qkv[:, :64], qkv[:, 64:128].view(5, 4, 16)
    cos, sin = cache[positions].chunk(2, dim=-1)
    expected_q = rotate_reference(query, cos, sin, 16, True)
    expected_k = rotate_reference(key, cos, sin, 16, True)
    q_out = row_strided(torch.zeros(5, 64, dtype=BF16))
    value_before = qkv[:, 128:].clone()
    q, k = polyops.rotary_embedding(
        positions, query, key, 16, cache, rotary_dim=8, query_out=q_out, implementation_index=slot
    )
    assert q is q_out and k is key
    assert_close(q_out, expected_q, BF16)
    assert_close(key, expected_k, BF16)
    assert_equal(qkv[:, 128:], value_before)  # the value part of the buffer untouched


def test_rotary_embedding_bad_inputs(gen):
    cache = make_cache(8, 16, F32)
    positions = torch.tensor([0, 3, 7])
    q = make_tensor((3, 2, 16), F32, gen)
    k = make_tensor((3, 1, 16), F32, gen)
    op = polyops.rotary_embedding
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: positions\[1\] = 8 is out"):
        op(torch.tensor([0, 8, 1]), q, k, 16, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: positions\[2\] = -1 is"):
        op(torch.tensor([0, 1, -1], dtype=I32), q, k, 16, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: positions must have shape"):
        op(positions[:2], q, k, 16, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: positions must be int64"):
        op(positions.float(), q, k, 16, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: head_size must be > 0"):
        op(positions, q, k, 0, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: query must have head size"):
        op(positions, q, k, 32, make_cache(8, 32, F32))
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: query must be \[T, H \* 5\]"):
        op(positions, q.flatten(1), None, 5, make_cache(8, 4, F32))
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: rotary_dim must equal"):
        op(positions, q, k, 16, cache, rotary_dim=8)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: rotary_dim .* must be even"):
        op(positions, q, k, 16, make_cache(8, 18, F32)[:, :17])
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: key must have the dtype"):
        op(positions, q, k.half(), 16, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: key must have 3 tokens"):
        op(positions, q, k[:2], 16, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: cos_sin_cache must have the"):
        op(positions, q.half(), k.half(), 16, cache.double())
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: cos_sin_cache must be"):
        op(positions, q, k, 16, cache[0])
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: query must be contiguous"):
        op(positions, step_sliced(q), k, 16, cache)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: key_out must be None"):
        op(positions, q, None, 16, cache, key_out=k)
    with pytest.raises(ValueError, match=r"polyops\.rotary_embedding: query_out must have the sh"):
        op(positions, q, k, 16, cache, query_out=torch.empty(3, 32))
    with pytest.raises(NotImplementedError, match=r"polyops\.rotary_embedding"):
        op(positions, q.double(), k.double(), 16, cache.double())


# ---------------------------------------------------------------------------
# apply_rotary_pos_emb


@pytest.mark.parametrize("slot", slot_params("apply_rotary_pos_emb"))
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("table_dtype", ["same", "float32"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_apply_rotary_pos_emb_parity(dtype, table_dtype, neox, case, slot, gen):
    tokens, hq, hkv, head_size, rotary_dim = case
    table = dtype if table_dtype == "same" else F32
    cache = make_cache(40, rotary_dim, table)
    positions = torch.randint(0, 40, (tokens,), generator=gen)
    cos, sin = (c.contiguous() for c in cache[positions].chunk(2, dim=-1))
    query, key = qk(tokens, hq, hkv, head_size, dtype, gen, True)
    expected_q = rotate_reference(query, cos, sin, head_size, neox)
    expected_k = rotate_reference(key, cos, sin, head_size, neox)
    q_in = query.clone()
    q_out = torch.empty_like(query)
    q, k = polyops.apply_rotary_pos_emb(
        query,
        key.clone(),
        cos,
        sin,
        is_neox_style=neox,
        query_out=q_out,
        implementation_index=slot,
    )
    assert q is q_out
    assert_equal(query, q_in)
    assert_close(q_out, expected_q, dtype)
    assert_close(k, expected_k, dtype)
    # the same kernel as rotary_embedding: identical bits
    ref_q, ref_k = polyops.rotary_embedding(
        positions, query.clone(), key.clone(), head_size, cache, neox
    )
    assert_equal(q_out, ref_q)
    assert_equal(k, ref_k)


@pytest.mark.parametrize("slot", slot_params("apply_rotary_pos_emb"))
def test_apply_rotary_pos_emb_2d_and_no_key(slot, gen):
    # 2-D query: heads of D = rotary_dim
    cache = make_cache(12, 16, F16)
    positions = torch.randint(0, 12, (4,), generator=gen)
    cos, sin = cache[positions].chunk(2, dim=-1)  # strided rows
    query = make_tensor((4, 3 * 16), F16, gen)
    expected = rotate_reference(query, cos, sin, 16, False)
    q, k = polyops.apply_rotary_pos_emb(
        query, None, cos, sin, is_neox_style=False, implementation_index=slot
    )
    assert q is query and k is None
    assert_close(q, expected, F16)


def test_apply_rotary_pos_emb_bad_inputs(gen):
    q = make_tensor((3, 2, 16), F32, gen)
    cos = make_tensor((3, 8), F32, gen)
    op = polyops.apply_rotary_pos_emb
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: cos must be \[T, rot"):
        op(q, None, cos[0], cos[0])
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: sin must have the sha"):
        op(q, None, cos, cos[:, :4])
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: sin must have the dty"):
        op(q, None, cos, cos.half())
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: rotary_dim .* must not"):
        op(q, None, torch.zeros(3, 9), torch.zeros(3, 9))
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: cos must have 3 rows"):
        op(q, None, cos[:2], cos[:2])
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: cos must be contiguous"):
        op(q, None, step_sliced(cos), step_sliced(cos))
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: key must have head"):
        op(q, make_tensor((3, 2, 8), F32, gen), cos, cos)
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: key_out must be None"):
        op(q, None, cos, cos, key_out=q)
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: cos must have the dty"):
        op(q.half(), None, cos.double(), cos.double())
    with pytest.raises(NotImplementedError, match=r"polyops\.apply_rotary_pos_emb"):
        op(q.double(), None, cos.double(), cos.double())
    with pytest.raises(ValueError, match=r"polyops\.apply_rotary_pos_emb: query must be \[T, H"):
        op(make_tensor((3, 20), F32, gen), None, cos, cos)
