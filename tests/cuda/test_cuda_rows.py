"""CUDA behaviour of the row-wise slots that the parity table does not reach.

tests/generic/test_parity.py runs every case of the op table on CUDA already. This
file covers what is specific to the CUDA kernels of rms_norm, add_rms_norm,
swiglu, silu_and_mul, causal_softmax, the rotary ops and reshape_and_cache
(src/cuda/<op>/, src/cuda/kernels/rows/rows.cuh, src/cuda/kernels/rotary/rotary.cuh):

* the 16-byte pack path and its scalar fallback for the *same* cached
  instance (the cache keys on shapes and strides, never on pointers, so the
  alignment is checked per call);
* launch geometry edges: >= 256 rows (256-thread blocks), > 65535 rows (the
  2-D grid's y loop), rows longer than 1024 packs, softmax rows with q > k;
* index tensors that cannot be checked on the host without a copy:
  out-of-range positions give NaN for that token, out-of-range slots are
  skipped, and nothing outside the outputs is written;
* silu_and_mul's "vllm" slot (silu rounded to the dtype before the product).

Graph capture and streams are tested for every op in tests/cuda/test_cuda.py.

Every test skips, with the reason, where polyops has no CUDA device.
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing import references as ref
from tests.conftest import BF16, F16, F32, I32, I64, assert_close, assert_equal, dtype_id

pytestmark = pytest.mark.skipif(
    "cuda" not in polyops.devices(),
    reason=f"no CUDA device here (polyops.devices() = {polyops.devices()})",
)

DTYPES = [F16, BF16, F32]
GUARD = 777.0


def _randn(shape, dtype, gen, scale=1.0):
    """Seeded CPU normal data rounded to `dtype`, moved to CUDA."""
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(dtype).cuda()


def _offset_view(tensor: torch.Tensor, offset: int) -> torch.Tensor:
    """`tensor`'s values in a contiguous view starting `offset` elements into a buffer.

    With offset 1 the base pointer is 2 or 4 bytes past a 16-byte boundary
    while every stride still is a multiple of a 16-byte pack.
    """
    buffer = torch.full((tensor.numel() + offset,), GUARD, dtype=tensor.dtype, device="cuda")
    view = buffer[offset:].view(tensor.shape)
    view.copy_(tensor)
    return view


# ---------------------------------------------------------------------------
# Pack path and scalar fallback on one cached instance


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_packs_and_misaligned_fallback_share_an_instance(dtype, gen):
    shape = (5, 1024)
    for offset in (0, 1, 0):  # aligned, misaligned, aligned again: same cache entry
        x = _offset_view(_randn(shape, dtype, gen, 2.0), offset)
        x2 = _offset_view(_randn(shape, dtype, gen), offset)
        w = _offset_view(_randn(shape[-1:], dtype, gen), offset)
        tag = f"offset {offset}"

        assert_close(polyops.rms_norm(x, w, 1e-6).cpu(), ref.rms_norm_reference(x, w), dtype, tag)

        y, s = polyops.add_rms_norm(x, x2, w, 1e-6)
        y_ref, s_ref = ref.add_rms_norm_reference(x, x2, w)
        assert_close(s.cpu(), s_ref, dtype, tag)
        assert_close(y.cpu(), y_ref, dtype, tag)

        assert_close(polyops.swiglu(x, x2).cpu(), ref.swiglu_reference(x, x2), dtype, tag)
        assert_close(polyops.silu_and_mul(x).cpu(), ref.silu_and_mul_reference(x), dtype, tag)

        scores = _offset_view(_randn((2, 8, 1024), dtype, gen, 3.0), offset)
        assert_close(
            polyops.causal_softmax(scores).cpu(), ref.causal_softmax_reference(scores), dtype, tag
        )


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_in_place_forms_with_packs(dtype, gen):
    x = _randn((4, 2048), dtype, gen, 2.0)
    w = _randn((2048,), dtype, gen)
    expected = ref.rms_norm_reference(x, w)
    polyops.rms_norm(x, w, 1e-6, out=x)
    assert_close(x.cpu(), expected, dtype, "rms_norm out=input")

    x1, x2 = _randn((4, 2048), dtype, gen), _randn((4, 2048), dtype, gen)
    y_ref, s_ref = ref.add_rms_norm_reference(x1, x2, w)
    polyops.add_rms_norm(x1, x2, w, 1e-6, y_out=x1, x_out=x2)  # both outputs in place
    assert_close(x2.cpu(), s_ref, dtype, "add_rms_norm x_out=x2")
    assert_close(x1.cpu(), y_ref, dtype, "add_rms_norm y_out=x1")

    scores = _randn((3, 64, 64), dtype, gen, 3.0)
    expected = ref.causal_softmax_reference(scores)
    polyops.causal_softmax(scores, out=scores)
    assert_close(scores.cpu(), expected, dtype, "causal_softmax out=input")


# ---------------------------------------------------------------------------
# Launch geometry edges


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    "rows, hidden",
    [(300, 4096), (257, 100), (3, 20000), (1, 8), (1, 16384 + 8)],
    ids=lambda v: str(v),
)
def test_norm_geometry(rows, hidden, dtype, gen):
    x = _randn((rows, hidden), dtype, gen, 2.0)
    x2 = _randn((rows, hidden), dtype, gen)
    w = _randn((hidden,), dtype, gen)
    assert_close(polyops.rms_norm(x, w, 1e-5).cpu(), ref.rms_norm_reference(x, w, 1e-5), dtype)
    y, s = polyops.add_rms_norm(x, x2, w, 1e-5)
    y_ref, s_ref = ref.add_rms_norm_reference(x, x2, w, 1e-5)
    assert_close(s.cpu(), s_ref, dtype)
    assert_close(y.cpu(), y_ref, dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_activation_more_rows_than_grid_y(dtype, gen):
    # out [70000, 16] of input [70000, 32]: rows do not merge, 70000 > 65535 grid rows.
    x = _randn((70000, 32), dtype, gen, 2.0)
    assert_close(polyops.silu_and_mul(x).cpu(), ref.silu_and_mul_reference(x), dtype)
    a, g = x[:, :16], x[:, 16:]  # row stride 32, last dim contiguous
    assert_close(polyops.swiglu(a, g).cpu(), ref.swiglu_reference(a, g), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
@pytest.mark.parametrize(
    "shape",
    [(2, 3, 20000), (3, 40, 24), (70, 13), (9, 1024 * 9 + 3), (300, 64)],
    ids=lambda v: "x".join(map(str, v)),
)
def test_causal_softmax_geometry(shape, dtype, gen):
    scores = _randn(shape, dtype, gen, 3.0)
    assert_close(polyops.causal_softmax(scores).cpu(), ref.causal_softmax_reference(scores), dtype)


# ---------------------------------------------------------------------------
# Index tensors that cannot be checked on the host


@pytest.mark.parametrize("pos_dtype", [I64, I32], ids=dtype_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_rotary_out_of_range_position_gives_nan(dtype, pos_dtype, gen):
    tokens, heads, head_size, max_pos = 6, 4, 64, 32
    cache = torch.randn((max_pos, head_size), generator=gen, dtype=torch.float64).to(dtype).cuda()
    positions = torch.randint(0, max_pos, (tokens,), generator=gen)
    positions[2], positions[4] = max_pos, -1
    positions = positions.to(pos_dtype).cuda()
    query = _randn((tokens, heads * head_size), dtype, gen)
    key = _randn((tokens, heads * head_size), dtype, gen)
    query_out, key_out = torch.empty_like(query), torch.empty_like(key)
    polyops.rotary_embedding(
        positions, query, key, head_size, cache, True, query_out=query_out, key_out=key_out
    )
    good = torch.tensor([0, 1, 3, 5])
    expected_q, expected_k = ref.rotary_embedding_reference(
        positions.cpu()[good], query.cpu()[good], key.cpu()[good], head_size, cache.cpu()
    )
    assert_close(query_out.cpu()[good], expected_q, dtype)
    assert_close(key_out.cpu()[good], expected_k, dtype)
    for bad in (2, 4):
        assert torch.isnan(query_out[bad]).all(), f"query token {bad}"
        assert torch.isnan(key_out[bad]).all(), f"key token {bad}"


@pytest.mark.parametrize("slot_dtype", [I64, I32], ids=dtype_id)
@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_reshape_and_cache_out_of_range_slot_is_skipped(dtype, slot_dtype, gen):
    tokens, heads, head_size, blocks, block_size = 9, 2, 16, 3, 4
    num_slots = blocks * block_size
    key = _randn((tokens, heads, head_size), dtype, gen)
    value = _randn((tokens, heads, head_size), dtype, gen)
    slots = torch.randperm(num_slots, generator=gen)[:tokens]
    slots[3], slots[5], slots[7] = num_slots, num_slots + 1000, -1
    shape = (blocks, block_size, heads, head_size)
    guard = 64  # elements before and after each cache
    caches = []
    for _ in range(2):
        buffer = torch.full((2 * guard + blocks * block_size * heads * head_size,), GUARD)
        buffer = buffer.to(dtype).cuda()
        caches.append((buffer, buffer[guard:-guard].view(shape)))
    (k_buffer, key_cache), (v_buffer, value_cache) = caches
    key_cache.fill_(0.0)
    value_cache.fill_(0.0)
    expected_k, expected_v = ref.reshape_and_cache_reference(
        key, value, key_cache, value_cache, torch.where(slots >= num_slots, -1, slots)
    )
    polyops.reshape_and_cache(key, value, key_cache, value_cache, slots.to(slot_dtype).cuda())
    assert_equal(key_cache.cpu(), expected_k)
    assert_equal(value_cache.cpu(), expected_v)
    for buffer in (k_buffer, v_buffer):
        guards = torch.cat([buffer[:guard], buffer[-guard:]]).cpu()
        assert_equal(guards, torch.full_like(guards, GUARD))


# ---------------------------------------------------------------------------
# silu_and_mul's "vllm" slot


def _vllm_slot() -> int:
    names = {name: slot for slot, name in polyops.implementations("silu_and_mul", "cuda").items()}
    if "vllm" not in names:
        pytest.skip("silu_and_mul has no 'vllm' slot on cuda in this build")
    return names["vllm"]


@pytest.mark.parametrize("dtype", DTYPES, ids=dtype_id)
def test_silu_and_mul_vllm_slot_rounds_silu_first(dtype, gen):
    x = _randn((7, 2 * 520), dtype, gen, 3.0)
    d = x.shape[-1] // 2
    # vLLM: silu(gate) rounded to the dtype, times up, rounded again.
    expected = ref.silu_reference(x[..., :d]).to(dtype).double() * x[..., d:].double().cpu()
    got = polyops.silu_and_mul(x, implementation_index=_vllm_slot())
    assert_close(got.cpu(), expected, dtype)
