"""The per-op instance cache: hits and misses, what the key holds, LRU eviction,
capacity, cache_info and clear_cache."""

from __future__ import annotations

import pytest
import torch

import polyops
from tests.conftest import F16, F32, assert_close, assert_equal, make_tensor
from tests.generic._framework_cases import (
    EXPECTED_OPS,
    assert_sample_result,
    cache_deltas,
    sample_call,
)

EVERY_COUNTER = ("hits", "misses", "evictions")


def _swiglu(n: int, value: float = 1.0):
    x = torch.full((n,), value)
    return polyops.swiglu(x, x, implementation_index=0)


def test_cache_counts_hits_and_misses():
    before = polyops.cache_info("swiglu")
    _swiglu(1901)
    assert cache_deltas("swiglu", before) == {"hits": 0, "misses": 1}
    out = _swiglu(1901, value=2.0)  # new data, same key
    assert cache_deltas("swiglu", before) == {"hits": 1, "misses": 1}
    assert_close(out, torch.full((1901,), 2.0 * 2.0 / (1 + torch.exp(torch.tensor(-2.0)))), F32)


def test_cache_keys_on_eps_strides_dtype_and_slot(gen):
    x = make_tensor((6, 40), F32, gen)
    w = make_tensor((40,), F32, gen)
    polyops.rms_norm(x, w, 1e-6, implementation_index=0)
    before = polyops.cache_info("rms_norm")
    polyops.rms_norm(x, w, 1e-6, implementation_index=0)
    assert cache_deltas("rms_norm", before)["misses"] == 0
    polyops.rms_norm(x, w, 1e-5, implementation_index=0)
    assert cache_deltas("rms_norm", before)["misses"] == 1  # eps by value
    polyops.rms_norm(x, w, 1e-6, implementation_index=1)
    assert cache_deltas("rms_norm", before)["misses"] == 2  # slot
    polyops.rms_norm(torch.randn(12, 40)[::2], w, 1e-6, implementation_index=0)
    assert cache_deltas("rms_norm", before)["misses"] == 3  # strides
    polyops.rms_norm(x.to(F16), w.to(F16), 1e-6, implementation_index=0)
    assert cache_deltas("rms_norm", before)["misses"] == 4  # dtype
    polyops.rms_norm(make_tensor((6, 40), F32, gen), w, 1e-6, implementation_index=0)
    assert cache_deltas("rms_norm", before) == {"hits": 2, "misses": 4}


def test_cache_lru_eviction(cache_capacity):
    cache_capacity(4)
    assert polyops.cache_info("swiglu")["capacity"] == 4
    assert polyops.cache_info()["capacity"] == 4
    assert polyops.cache_info("swiglu")["size"] <= 4
    a, b, c, d, e = 2001, 2002, 2003, 2004, 2005
    for n in (a, b, c, d):
        _swiglu(n)
    # Only our four entries are left; the LRU order is a (oldest), b, c, d.
    assert polyops.cache_info("swiglu")["size"] == 4
    before = polyops.cache_info("swiglu")
    _swiglu(a)  # touch a: b becomes the oldest
    assert cache_deltas("swiglu", before, EVERY_COUNTER) == {"hits": 1, "misses": 0, "evictions": 0}
    _swiglu(e)  # evicts b
    assert cache_deltas("swiglu", before, EVERY_COUNTER) == {"hits": 1, "misses": 1, "evictions": 1}
    _swiglu(a)  # survived
    assert cache_deltas("swiglu", before, EVERY_COUNTER) == {"hits": 2, "misses": 1, "evictions": 1}
    _swiglu(b)  # was evicted: rebuilt, evicting c
    assert cache_deltas("swiglu", before, EVERY_COUNTER) == {"hits": 2, "misses": 2, "evictions": 2}
    _swiglu(d)
    assert cache_deltas("swiglu", before, EVERY_COUNTER) == {"hits": 3, "misses": 2, "evictions": 2}
    _swiglu(c)
    assert cache_deltas("swiglu", before, EVERY_COUNTER) == {"hits": 3, "misses": 3, "evictions": 3}
    assert polyops.cache_info("swiglu")["size"] == 4


def test_cache_capacity_bounds_size(cache_capacity):
    cache_capacity(4)
    start = polyops.cache_info("mul")
    for n in range(3001, 3007):  # six distinct shapes
        x = torch.ones(n)
        assert_equal(polyops.mul(x, x, implementation_index=0), x)
    info = polyops.cache_info("mul")
    assert info["size"] == 4
    assert info["misses"] - start["misses"] == 6
    assert info["evictions"] - start["evictions"] == start["size"] + 6 - 4
    # Shrinking evicts at once, in every op's cache.
    for op in EXPECTED_OPS:
        sample_call(op)
    before = {op: polyops.cache_info(op) for op in EXPECTED_OPS}
    cache_capacity(1)
    for op in EXPECTED_OPS:
        info = polyops.cache_info(op)
        assert info["size"] == 1 and info["capacity"] == 1
        assert info["evictions"] - before[op]["evictions"] == before[op]["size"] - 1
    # Growing keeps what is there.
    cache_capacity(256)
    assert all(polyops.cache_info(op)["size"] == 1 for op in EXPECTED_OPS)


def test_cache_info_total_is_the_sum():
    for op in EXPECTED_OPS:
        sample_call(op)
    per_op = [polyops.cache_info(op) for op in polyops.operators()]
    total = polyops.cache_info()
    for key in ("hits", "misses", "evictions", "size"):
        assert total[key] == sum(info[key] for info in per_op), key
    assert total["capacity"] == 256 == per_op[0]["capacity"]
    assert set(total) == {"hits", "misses", "evictions", "size", "capacity"}


def test_clear_cache_resets_everything():
    for op in EXPECTED_OPS:
        sample_call(op)
    assert polyops.cache_info()["size"] >= len(EXPECTED_OPS)
    polyops.clear_cache()
    zero = {"hits": 0, "misses": 0, "evictions": 0, "size": 0, "capacity": 256}
    assert polyops.cache_info() == zero
    for op in EXPECTED_OPS:
        assert polyops.cache_info(op) == zero
    # Instances are rebuilt on demand and compute correctly.
    for op in EXPECTED_OPS:
        result, expected = sample_call(op)
        assert_sample_result(result, expected)
    assert polyops.cache_info()["misses"] == len(EXPECTED_OPS)


def test_set_cache_capacity_rejects_bad_values(cache_capacity):
    for bad in (0, -3):
        with pytest.raises(ValueError, match=r"^polyops\.set_cache_capacity: n must be >= 1"):
            polyops.set_cache_capacity(bad)
    with pytest.raises(TypeError):
        polyops.set_cache_capacity("3")
    assert polyops.cache_info()["capacity"] == 256
