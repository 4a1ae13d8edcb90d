"""Concurrent calls from many Python threads: shared instance caches, GIL released in kernels."""

from __future__ import annotations

import threading
import time

import pytest
import torch

import polyops
from polyops.testing.references import rms_norm_reference, silu_and_mul_reference
from tests.conftest import BF16, F16, F32, TOLERANCES

NUM_THREADS = 8
CALLS_PER_THREAD = 200
OPS = ["add", "rms_norm", "add_rms_norm", "silu_and_mul"]
# Small shapes (the GIL stays held) and one large shape: 256 x 1024 float32 is
# 1 MiB, above the size where the bindings release the GIL around the kernel.
SMALL_SHAPES = [(1, 8), (3, 64), (7, 130), (16, 512)]
LARGE_SHAPE = (256, 1024)


def _check(actual, expected, dtype, exact=False):
    if exact:
        torch.testing.assert_close(actual, expected.to(dtype), rtol=0, atol=0)
    else:
        torch.testing.assert_close(actual.double(), expected, **TOLERANCES[dtype])


def make_case(op: str, shape, dtype, gen, eps: float):
    """Inputs for one call and a function that checks a result against the float64 math."""
    x = (torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
    if op == "add":
        other = torch.randn(shape[-1:], generator=gen, dtype=torch.float64).to(dtype)
        expected = (x.double() + other.double()).to(dtype)  # rounded once
        return (x, other), {}, lambda r: _check(r, expected, dtype, exact=True)
    w = torch.randn(shape[-1:], generator=gen, dtype=torch.float64).to(dtype)
    if op == "rms_norm":
        expected = rms_norm_reference(x, w, eps)
        return (x, w, eps), {}, lambda r: _check(r, expected, dtype)
    if op == "add_rms_norm":
        x2 = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
        s = (x.double() + x2.double()).to(dtype)
        expected_y = rms_norm_reference(s, w, eps)

        def check(result):
            y, x_sum = result
            _check(x_sum, s.double(), dtype, exact=True)
            _check(y, expected_y, dtype)

        return (x, x2, w, eps), {}, check
    if op == "silu_and_mul":
        wide = torch.randn((*shape[:-1], 2 * shape[-1]), generator=gen, dtype=torch.float64)
        wide = wide.to(dtype)
        expected = silu_and_mul_reference(wide)
        return (wide,), {}, lambda r: _check(r, expected, dtype)
    raise AssertionError(op)


def worker(index: int, barrier: threading.Barrier, failures: list, counts: list):
    gen = torch.Generator().manual_seed(1000 + index)
    # Large cases are built (with their references) once per thread and
    # called repeatedly; small ones get fresh data on every call.
    large = {op: make_case(op, LARGE_SHAPE, F32, gen, 1e-6) for op in OPS}
    slots = {op: sorted(polyops.implementations(op)) for op in OPS}
    dtypes = [F32, BF16, F16]
    barrier.wait()
    for call in range(CALLS_PER_THREAD):
        op = OPS[(call + index) % len(OPS)]
        slot = slots[op][(call // len(OPS) + index) % len(slots[op])]
        try:
            if call % 5 == index % 5:
                args, kwargs, check = large[op]
            else:
                shape = SMALL_SHAPES[(call * 7 + index) % len(SMALL_SHAPES)]
                dtype = dtypes[(call + 2 * index) % len(dtypes)]
                eps = (1e-6, 1e-5)[call % 2]
                args, kwargs, check = make_case(op, shape, dtype, gen, eps)
            result = getattr(polyops, op)(*args, implementation_index=slot, **kwargs)
            check(result)
            counts[index] += 1
        except Exception as error:  # collected and reported by the main thread
            failures.append(f"thread {index} call {call} ({op}, slot {slot}): {error!r}")
            return


def run_threads(extra=None):
    barrier = threading.Barrier(NUM_THREADS + (1 if extra else 0))
    failures: list[str] = []
    counts = [0] * NUM_THREADS
    threads = [
        threading.Thread(target=worker, args=(i, barrier, failures, counts))
        for i in range(NUM_THREADS)
    ]
    for thread in threads:
        thread.start()
    if extra:
        extra(barrier, threads)
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a worker hung"
    assert not failures, "\n".join(failures[:10])
    assert counts == [CALLS_PER_THREAD] * NUM_THREADS


@pytest.mark.parallel
def test_concurrent_mixed_calls():
    before = polyops.cache_info()
    run_threads()
    after = polyops.cache_info()
    calls = NUM_THREADS * CALLS_PER_THREAD
    assert (after["hits"] + after["misses"]) - (before["hits"] + before["misses"]) == calls


@pytest.mark.parallel
def test_concurrent_calls_while_the_cache_evicts(cache_capacity):
    cache_capacity(3)
    before = polyops.cache_info()

    def churn(barrier, threads):
        # Keep resizing between 1 and 3 entries per op while the workers run.
        barrier.wait()
        sizes = [3, 1, 2, 3]
        step = 0
        while any(thread.is_alive() for thread in threads):
            polyops.set_cache_capacity(sizes[step % len(sizes)])
            step += 1
            time.sleep(0.001)
        polyops.set_cache_capacity(3)

    run_threads(churn)
    after = polyops.cache_info()
    assert after["evictions"] - before["evictions"] > 100
    assert all(polyops.cache_info(op)["size"] <= 3 for op in polyops.operators())
