"""Index tensors (slot_mapping, positions) are bounds-checked on the values the kernel uses.

The CPU kernels read each index once into a copy, check the copy and use
only the copy: another Python thread changing the index tensor during a call
(the GIL is released for large calls) can make the call raise ValueError,
never write or read outside the caches. The caches and tables here are views
into the middle of larger buffers whose guard regions must stay untouched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import BF16, F32, I32, I64, assert_equal, dtype_id, parallel_param

GUARD = 777.0


def guarded(shape, dtype, fill, guard_elements):
    """A contiguous tensor of `shape` filled with `fill`, inside a buffer whose
    first and last `guard_elements` hold GUARD. Returns (view, buffer)."""
    numel = torch.Size(shape).numel()
    buffer = torch.full((numel + 2 * guard_elements,), GUARD, dtype=dtype)
    view = buffer[guard_elements : guard_elements + numel].view(shape)
    view.fill_(fill)
    return view, buffer


def assert_guards_intact(buffer, guard_elements, msg=""):
    expected = torch.full((guard_elements,), GUARD, dtype=buffer.dtype)
    assert_equal(buffer[:guard_elements], expected, msg=f"{msg} guard before")
    assert_equal(buffer[-guard_elements:], expected, msg=f"{msg} guard after")


# ---------------------------------------------------------------------------
# reshape_and_cache


@pytest.mark.parametrize("slot_dtype", [I64, I32], ids=dtype_id)
@pytest.mark.parametrize(
    "tokens, bad_at",
    [
        (7, 0),
        (7, 3),
        (7, 6),
        parallel_param(5000, 0, id="5000-first"),
        parallel_param(5000, 2711, id="5000-middle"),
        parallel_param(5000, 4999, id="5000-last"),
    ],
)
def test_reshape_and_cache_out_of_range_writes_nothing(tokens, bad_at, slot_dtype, gen, api):
    heads, head_size, block_size = 2, 16, 16
    num_blocks = (tokens + block_size - 1) // block_size + 1
    num_slots = num_blocks * block_size
    shape = (num_blocks, block_size, heads, head_size)
    row = heads * head_size
    key_cache, key_buffer = guarded(shape, BF16, -1.0, 4 * row)
    value_cache, value_buffer = guarded(shape, BF16, -2.0, 4 * row)
    key = torch.randn(tokens, heads, head_size, generator=gen).to(BF16)
    slots = torch.randperm(num_slots, generator=gen)[:tokens].to(slot_dtype)
    for bad in (num_slots, num_slots + 3, 2**31 - 1):
        slots_bad = slots.clone()
        slots_bad[bad_at] = bad
        before_k, before_v = key_buffer.clone(), value_buffer.clone()
        with pytest.raises(
            ValueError,
            match=rf"polyops\.reshape_and_cache: slot_mapping\[{bad_at}\] = {bad} is out of range",
        ):
            api.reshape_and_cache(key, key, key_cache, value_cache, slots_bad)
        assert_equal(key_buffer, before_k)  # nothing written, guards included
        assert_equal(value_buffer, before_v)
    api.reshape_and_cache(key, key, key_cache, value_cache, slots)
    assert_guards_intact(key_buffer, 4 * row)
    assert_guards_intact(value_buffer, 4 * row)


# ---------------------------------------------------------------------------
# rotary_embedding


@pytest.mark.parametrize("position_dtype", [I64, I32], ids=dtype_id)
@pytest.mark.parametrize(
    "tokens, bad_at",
    [(5, 0), (5, 4), parallel_param(4000, 1999, id="4000-middle")],
)
def test_rotary_embedding_out_of_range_writes_nothing(tokens, bad_at, position_dtype, gen, api):
    max_pos, head_size = 64, 32
    cache, _ = guarded((max_pos, head_size), F32, 0.5, head_size)
    query = torch.randn(tokens, 4, head_size, generator=gen)
    key = torch.randn(tokens, 2, head_size, generator=gen)
    positions = torch.randint(0, max_pos, (tokens,), generator=gen).to(position_dtype)
    for bad in (max_pos, -1, -(2**31)):
        bad_positions = positions.clone()
        bad_positions[bad_at] = bad
        q, k = query.clone(), key.clone()
        with pytest.raises(
            ValueError,
            match=rf"polyops\.rotary_embedding: positions\[{bad_at}\] = {bad} is out of range",
        ):
            api.rotary_embedding(bad_positions, q, k, head_size, cache)
        assert_equal(q, query)  # in place, but nothing rotated
        assert_equal(k, key)


# ---------------------------------------------------------------------------
# Another thread changing the index tensor during calls

STRESS = r"""
import json, sys, threading, time, torch, polyops

op, seconds = sys.argv[1], float(sys.argv[2])
torch.set_num_threads(2)
stop = threading.Event()
outcomes = {"ok": 0, "ValueError": 0}

if op == "reshape_and_cache":
    tokens, heads, head_size, block_size = 4096, 4, 16, 16
    num_blocks = tokens // block_size
    num_slots = num_blocks * block_size
    row = heads * head_size
    guard = 64 * row  # a bad slot num_slots + s lands s rows into the guard
    shape = (num_blocks, block_size, heads, head_size)
    buffers = [torch.full((num_blocks * block_size * row + 2 * guard,), 777.0) for _ in range(2)]
    caches = [b[guard : guard + num_blocks * block_size * row].view(shape) for b in buffers]
    key = torch.randn(tokens, heads, head_size)  # 1 MiB: the call releases the GIL
    index = torch.randperm(num_slots)[:tokens]
    victims = list(range(0, tokens, 97))
    good = index[victims].clone()
    bad = num_slots + torch.arange(len(victims)) % 64

    def call():
        polyops.reshape_and_cache(key, key, caches[0], caches[1], index)

    def check():
        for b in buffers:
            if not (torch.equal(b[:guard], torch.full((guard,), 777.0))
                    and torch.equal(b[-guard:], torch.full((guard,), 777.0))):
                sys.exit("guard region written")
elif op in ("paged_attention", "flash_attention"):
    batch, heads, kv_heads, head_size, block_size, per_sequence = 64, 32, 2, 32, 16, 4
    num_blocks = batch * per_sequence
    block = block_size * kv_heads * head_size
    buffers = [torch.full(((num_blocks + 64) * block,), float("nan")) for _ in range(2)]
    k_cache, v_cache = (b[: num_blocks * block].view(num_blocks, block_size, kv_heads, head_size)
                        for b in buffers)  # guard blocks after them: NaN
    k_cache.uniform_(-1, 1)
    v_cache.uniform_(-1, 1)
    table = torch.randperm(num_blocks).view(batch, per_sequence).int()
    lens = torch.full((batch,), per_sequence * block_size, dtype=torch.int32)
    query = torch.randn(batch, heads, head_size)  # 256 KiB: the call releases the GIL
    out = torch.empty_like(query)
    index = table.view(-1)
    victims = list(range(0, num_blocks, 7))
    good = index[victims].clone()
    bad = (num_blocks + torch.arange(len(victims)) % 64).int()
    cu_q = torch.arange(batch + 1, dtype=torch.int32)

    def call():
        if op == "paged_attention":
            polyops.paged_attention(query, k_cache, v_cache, lens, table, out=out)
        else:
            polyops.flash_attention(query, k_cache, v_cache, cu_seqlens_q=cu_q,
                                    cu_seqlens_kv=cu_q * lens[0], block_table=table, out=out)

    def check():
        if out.isnan().any():
            sys.exit("read outside the caches")
else:
    tokens, max_pos, head_size = 40000, 512, 16
    buffer = torch.full(((max_pos + 64) * head_size,), float("nan"))  # guard rows: NaN
    cache = buffer[: max_pos * head_size].view(max_pos, head_size)
    cache.uniform_(-1, 1)
    index = torch.randint(0, max_pos, (tokens,))  # 320 KiB: the call releases the GIL
    query = torch.randn(tokens, 1, head_size)
    victims = list(range(0, tokens, 997))
    good = index[victims].clone()
    bad = max_pos + torch.arange(len(victims)) % 64
    out = torch.empty_like(query)

    def call():
        polyops.rotary_embedding(index, query, None, head_size, cache, query_out=out)

    def check():
        if out.isnan().any():
            sys.exit("read outside cos_sin_cache")

def flip():
    while not stop.is_set():
        index[victims] = bad
        index[victims] = good

flipper = threading.Thread(target=flip)
flipper.start()
end = time.monotonic() + seconds
try:
    while time.monotonic() < end:
        try:
            call()
            outcomes["ok"] += 1
        except ValueError as error:
            assert str(error).startswith(f"polyops.{op}: "), error
            outcomes["ValueError"] += 1
        check()
finally:
    stop.set()
    flipper.join()
print(json.dumps(outcomes))
"""


@pytest.mark.parametrize(
    "op", ["reshape_and_cache", "rotary_embedding", "paged_attention", "flash_attention"]
)
def test_index_changed_by_another_thread(op):
    # In a subprocess: an out-of-bounds write would take the interpreter down.
    env = dict(os.environ, OMP_NUM_THREADS="2")
    result = subprocess.run(
        [sys.executable, "-c", STRESS, op, "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"
    outcomes = json.loads(result.stdout.strip().splitlines()[-1])
    assert outcomes["ok"] + outcomes["ValueError"] > 0
