"""cat, causal_softmax and reshape_and_cache against references written from the math."""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing.references import (
    cat_reference,
    causal_softmax_reference,
    reshape_and_cache_reference,
)
from tests.conftest import (
    ALL_DTYPES,
    BF16,
    F16,
    F32,
    FLOAT_DTYPES,
    I32,
    I64,
    assert_close,
    assert_equal,
    dtype_id,
    make_tensor,
    parallel_param,
    row_strided,
    sentinel,
    slot_params,
    step_sliced,
    transposed,
)

# ---------------------------------------------------------------------------
# cat


@pytest.mark.parametrize("slot", slot_params("cat"))
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=dtype_id)
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_cat_parity(dtype, dim, slot, gen):
    sizes = [3, 0, 5, 1]
    tensors = []
    for size in sizes:
        shape = [4, 6, 7]
        shape[dim % 3] = size
        tensors.append(make_tensor(shape, dtype, gen))
    result = polyops.cat(tensors, dim, implementation_index=slot)
    assert result.is_contiguous()
    assert_equal(result, cat_reference(tensors, dim))
    out = torch.empty_like(result)
    assert polyops.cat(tuple(tensors), dim=dim, out=out, implementation_index=slot) is out
    assert_equal(out, result)


@pytest.mark.parametrize("slot", slot_params("cat"))
@pytest.mark.parametrize("dtype", [F16, F32, I64, torch.bool], ids=dtype_id)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_cat_strided(dtype, dim, slot, gen):
    base = [make_tensor((5, 8), dtype, gen) for _ in range(4)]
    if dim % 2 == 0:
        pieces = [transposed(base[0]), step_sliced(base[1]), row_strided(base[2]), base[3]]
    else:
        pieces = [
            transposed(base[0]),
            step_sliced(base[1]),
            base[2][:, :3],
            make_tensor((8, 5), dtype, gen).t(),
        ]
    result = polyops.cat(pieces, dim, implementation_index=slot)
    assert_equal(result, cat_reference(pieces, dim))
    out = transposed(torch.zeros_like(result))
    polyops.cat(pieces, dim, out=out, implementation_index=slot)
    assert_equal(out, result)


@pytest.mark.parametrize("slot", slot_params("cat"))
@pytest.mark.parametrize(
    "shapes,dim",
    [
        parallel_param([(300, 257), (1, 257), (400, 257)], 0, id="rows"),
        parallel_param([(64, 1000), (64, 3), (64, 2000)], 1, id="cols"),
        parallel_param([(70000,), (130000,)], 0, id="long-1d"),
    ],
)
def test_cat_large(shapes, dim, slot, gen):
    tensors = [make_tensor(s, F32, gen) for s in shapes]
    tensors[1] = step_sliced(tensors[1])
    assert_equal(polyops.cat(tensors, dim, implementation_index=slot), cat_reference(tensors, dim))


def test_cat_single_and_many(gen):
    one = make_tensor((3, 4), BF16, gen)
    assert_equal(polyops.cat([one]), one)
    many = [make_tensor((2, i % 3), F16, gen) for i in range(100)]
    assert_equal(polyops.cat(many, 1), cat_reference(many, 1))


def test_cat_bad_inputs(gen):
    a = make_tensor((2, 3), F32, gen)
    with pytest.raises(ValueError, match=r"polyops\.cat: .*empty"):
        polyops.cat([])
    with pytest.raises(ValueError, match=r"polyops\.cat: .*empty"):
        polyops.cat([], out=a)
    with pytest.raises(ValueError, match=r"polyops\.cat: tensors\[1\] must have the dtype"):
        polyops.cat([a, a.double()])
    with pytest.raises(ValueError, match=r"polyops\.cat: tensors\[2\] must have the shape"):
        polyops.cat([a, a, make_tensor((3, 3), F32, gen)], 1)
    with pytest.raises(ValueError, match=r"polyops\.cat: tensors\[1\] must have the shape"):
        polyops.cat([a, make_tensor((2, 3, 1), F32, gen)])
    with pytest.raises(ValueError, match=r"polyops\.cat: dim must be in \[-2, 2\)"):
        polyops.cat([a, a], 2)
    with pytest.raises(ValueError, match=r"polyops\.cat: dim"):
        polyops.cat([a, a], -3)
    with pytest.raises(ValueError, match=r"polyops\.cat: tensors\[0\] must have at least 1 dim"):
        polyops.cat([torch.tensor(1.0), torch.tensor(2.0)])
    with pytest.raises(ValueError, match=r"polyops\.cat: out must have shape \[4, 3\]"):
        polyops.cat([a, a], out=torch.empty(4, 4))
    with pytest.raises(ValueError, match=r"polyops\.cat: out must have the dtype"):
        polyops.cat([a, a], out=torch.empty(4, 3, dtype=F16))
    with pytest.raises(TypeError):
        polyops.cat(a)


# ---------------------------------------------------------------------------
# causal_softmax


SOFTMAX_SHAPES = [
    pytest.param(shape, id="x".join(map(str, shape)))
    for shape in [(5, 5), (3, 8), (8, 3), (2, 4, 6, 6), (2, 3, 1, 17), (4, 1), (1, 40), (0, 4)]
] + [
    parallel_param((4, 64, 200), id="4x64x200"),
    parallel_param((2, 20000), id="2x20000-blocked"),
]


@pytest.mark.parametrize("slot", slot_params("causal_softmax"))
@pytest.mark.parametrize("shape", SOFTMAX_SHAPES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_causal_softmax_parity(dtype, shape, slot, gen):
    x = make_tensor(shape, dtype, gen, scale=3.0)
    result = polyops.causal_softmax(x, implementation_index=slot)
    expected = causal_softmax_reference(x)
    assert_close(result, expected, dtype)
    out = torch.full_like(x, sentinel(dtype))
    assert polyops.causal_softmax(x, out=out, implementation_index=slot) is out
    assert_equal(out, result)


@pytest.mark.parametrize("slot", slot_params("causal_softmax"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_causal_softmax_fully_masked_rows_are_zero(dtype, slot, gen):
    x = make_tensor((3, 6, 2), dtype, gen)  # q=6 > k=2: rows 0..3 see nothing
    result = polyops.causal_softmax(x, implementation_index=slot)
    assert torch.equal(result[:, :4].float(), torch.zeros(3, 4, 2))
    assert torch.equal(result[:, 5].float().sum(-1) > 0.99, torch.ones(3, dtype=torch.bool))
    assert_close(result, causal_softmax_reference(x), dtype)


@pytest.mark.parametrize("slot", slot_params("causal_softmax"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_causal_softmax_strided_and_in_place(dtype, slot, gen):
    x = row_strided(make_tensor((2, 5, 7), dtype, gen))
    expected = causal_softmax_reference(x)
    assert_close(polyops.causal_softmax(x, implementation_index=slot), expected, dtype)
    # leading dims transposed (last dim still stride 1)
    y = make_tensor((5, 2, 7), dtype, gen).transpose(0, 1)
    assert_close(
        polyops.causal_softmax(y, implementation_index=slot), causal_softmax_reference(y), dtype
    )
    out = row_strided(torch.zeros(2, 5, 7, dtype=dtype))
    polyops.causal_softmax(x, out=out, implementation_index=slot)
    assert_close(out, expected, dtype)
    z = x.clone()
    polyops.causal_softmax(z, out=z, implementation_index=slot)
    assert_close(z, expected, dtype)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_causal_softmax_large_values(dtype, gen):
    # Score gaps past 151 / log2(e): exps below float32's range, which the
    # 16-bit rows' base-2 exp takes to 0 without a clamp.
    x = make_tensor((4, 9, 40), dtype, gen, scale=200.0)
    assert_close(polyops.causal_softmax(x), causal_softmax_reference(x), dtype)


@pytest.mark.parametrize("slot", slot_params("causal_softmax"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
def test_causal_softmax_rows_are_independent(dtype, slot):
    # Row 0 turns NaN; row 1 must not see row 0's staged values. (bfloat16
    # staging wrote floats through a uint32_t pointer, and GCC read row 1's
    # first element before those stores: row 1 came out NaN.)
    x = torch.tensor([[1.0, float("nan"), 2.0], [200.0, 201.0, 202.0]], dtype=dtype)
    result = polyops.causal_softmax(x[None], implementation_index=slot)[0]
    assert result[0, :2].isnan().all()
    assert_close(result[1], causal_softmax_reference(x[1:])[0], dtype)


def test_causal_softmax_bad_inputs(gen):
    x = make_tensor((4, 4), F32, gen)
    with pytest.raises(ValueError, match=r"polyops\.causal_softmax: input must have at least 2"):
        polyops.causal_softmax(make_tensor((4,), F32, gen))
    with pytest.raises(NotImplementedError, match=r"polyops\.causal_softmax"):
        polyops.causal_softmax(x.double())
    with pytest.raises(ValueError, match=r"polyops\.causal_softmax: input must be contiguous in"):
        polyops.causal_softmax(step_sliced(x))
    with pytest.raises(ValueError, match=r"polyops\.causal_softmax: out must be contiguous in"):
        polyops.causal_softmax(x, out=step_sliced(torch.empty(4, 4)))
    with pytest.raises(ValueError, match=r"polyops\.causal_softmax: out must have the shape"):
        polyops.causal_softmax(x, out=torch.empty(4, 5))
    with pytest.raises(ValueError, match=r"polyops\.causal_softmax: out must have the dtype"):
        polyops.causal_softmax(x, out=torch.empty(4, 4, dtype=F16))


# ---------------------------------------------------------------------------
# reshape_and_cache


def _caches(num_blocks, block_size, heads, head_size, dtype):
    shape = (num_blocks, block_size, heads, head_size)
    return torch.full(shape, sentinel(dtype), dtype=dtype), torch.full(
        shape, -sentinel(dtype), dtype=dtype
    )


@pytest.mark.parametrize("slot", slot_params("reshape_and_cache"))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    "tokens,heads,head_size,num_blocks,block_size",
    [
        (7, 2, 8, 4, 4),
        (1, 1, 16, 1, 2),
        (0, 2, 8, 2, 4),
        parallel_param(300, 8, 64, 40, 16, id="large"),
    ],
)
def test_reshape_and_cache_parity(
    dtype, tokens, heads, head_size, num_blocks, block_size, slot, gen
):
    key = make_tensor((tokens, heads, head_size), dtype, gen)
    value = make_tensor((tokens, heads, head_size), dtype, gen)
    slots = torch.randperm(num_blocks * block_size, generator=gen)[:tokens]
    if tokens > 2:
        slots[1] = -1  # padding
    key_cache, value_cache = _caches(num_blocks, block_size, heads, head_size, dtype)
    expected = reshape_and_cache_reference(key, value, key_cache, value_cache, slots)
    results = []
    for slot_dtype in (I64, I32):
        kc, vc = key_cache.clone(), value_cache.clone()
        assert (
            polyops.reshape_and_cache(
                key, value, kc, vc, slots.to(slot_dtype), implementation_index=slot
            )
            is None
        )
        assert_equal(kc, expected[0])
        assert_equal(vc, expected[1])
        results.append((kc, vc))
    assert_equal(results[0][0], results[1][0])
    assert_equal(results[0][1], results[1][1])


@pytest.mark.parametrize("slot", slot_params("reshape_and_cache"))
def test_reshape_and_cache_strided_inputs(slot, gen):
    # key/value as slices of a fused qkv buffer: strided over tokens and heads
    qkv = make_tensor((6, 3, 4, 8), BF16, gen)
    key, value = qkv[:, 1], qkv[:, 2]
    key = key.transpose(0, 1).contiguous().transpose(0, 1)  # heads outermost
    slots = step_sliced(torch.tensor([5, -3, 0, 9, 2, 11]), fill=-100)
    key_cache, value_cache = _caches(3, 4, 4, 8, BF16)
    expected = reshape_and_cache_reference(key, value, key_cache, value_cache, slots)
    polyops.reshape_and_cache(key, value, key_cache, value_cache, slots, implementation_index=slot)
    assert_equal(key_cache, expected[0])
    assert_equal(value_cache, expected[1])


def test_reshape_and_cache_out_of_range(gen):
    key = make_tensor((3, 2, 4), F32, gen)
    key_cache, value_cache = _caches(2, 2, 2, 4, F32)
    before = key_cache.clone()
    for dtype in (I64, I32):
        slots = torch.tensor([0, 4, 1], dtype=dtype)
        with pytest.raises(
            ValueError, match=r"polyops\.reshape_and_cache: slot_mapping\[1\] = 4 is out of range"
        ):
            polyops.reshape_and_cache(key, key, key_cache, value_cache, slots)
    assert_equal(key_cache, before)  # nothing written


def test_reshape_and_cache_bad_inputs(gen):
    key = make_tensor((3, 2, 4), F32, gen)
    kc, vc = _caches(2, 2, 2, 4, F32)
    slots = torch.tensor([0, 1, 2])
    op = polyops.reshape_and_cache
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: key must be \[T, Hkv, D\]"):
        op(key.flatten(1), key.flatten(1), kc, vc, slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: value must have the dtype"):
        op(key, key.half(), kc, vc, slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: value must have the shape"):
        op(key, key[:2], kc, vc, slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: key_cache must be"):
        op(key, key, kc[..., :2], vc, slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: key_cache must have the"):
        op(key, key, kc.half(), vc, slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: value_cache must have the"):
        op(key, key, kc, vc[:1], slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: key_cache must be contig"):
        op(key, key, transposed(kc), vc, slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: key must be contiguous in"):
        op(step_sliced(key), key, kc, vc, slots)
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: slot_mapping must have"):
        op(key, key, kc, vc, slots[:2])
    with pytest.raises(ValueError, match=r"polyops\.reshape_and_cache: slot_mapping must be int"):
        op(key, key, kc, vc, slots.float())
    with pytest.raises(NotImplementedError, match=r"polyops\.reshape_and_cache"):
        op(key.double(), key.double(), kc.double(), vc.double(), slots)
