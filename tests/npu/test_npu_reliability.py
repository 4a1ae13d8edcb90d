"""Reliability of the npu path under threads, faults and many streams, on the CANN test
double, bounded in time (a deadline per loop) and memory (the double's live-byte
counter). References are float64 computations of the math.
The double is active for this process (tests/npu/conftest.py); the activation's device
count and the core's size-1-dim stride rule on CPU are tests/ascend/test_npu_reliability.py's.
"""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest
import torch

import polyops
from polyops._cann_double import cann_live_bytes

# --- threads sharing a stream -----------------------------------------------


def rotary_race(calls, seconds, rotors=2, neighbours=2, burst=8):
    """Two rotor threads rotate 65,536 tokens with int32 positions of their own (a cast
    into the stream's scratch, then the rotation reading it), in bursts of 8 calls on 8
    copies of the query with no synchronization in between, and check every result in
    float64; two neighbour threads loop rms_norm / add_rms_norm (whose rstd lives at the
    same scratch offset), all on the same default stream. 65,536 int32 positions are
    256 KiB, where the bindings release the GIL, so other threads' launches can land
    between a rotor's two. Returns how many rotary calls were wrong (b_calls counts the
    neighbours' iterations, b_errors their exceptions)."""
    torch.manual_seed(0)
    tokens, head = 65536, 16
    cache = torch.randn(4096, head)
    c = cache.to("npu")
    # Small rows and preallocated outputs: the neighbours only enqueue (no
    # allocation, no free, so no synchronization) and draw near the pool's
    # lock as often as the GIL lets them; a synchronize every 64 calls keeps
    # their queue short.
    xb, x2b, wb = torch.randn(2, 64), torch.randn(2, 64), torch.randn(64)
    b_args = [t.to("npu") for t in (xb, x2b, wb)]
    stop = threading.Event()
    counts = {"calls": 0, "wrong": 0, "b_calls": 0, "b_errors": 0}
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def norms():
        y, y2, x_sum = (torch.empty(2, 64).to("npu") for _ in range(3))
        done = errors = 0
        while not stop.is_set():
            try:
                polyops.rms_norm(b_args[0], b_args[2], out=y)
                torch.ops.polyops.add_rms_norm.out(*b_args, y_out=y2, x_out=x_sum)
                if done % 64 == 63:
                    torch.npu.current_stream().synchronize()
            except RuntimeError:  # the fault of a rotor's garbage positions
                errors += 1
            done += 1
        with lock:
            counts["b_calls"] += done
            counts["b_errors"] += errors

    def rotor(seed):
        gen = torch.Generator().manual_seed(seed)
        positions = torch.randint(0, 4096, (tokens,), dtype=torch.int32, generator=gen)
        query = torch.randn(tokens, head, generator=gen)
        x = query.double()
        cos, sin = cache.double()[positions.long()].chunk(2, dim=-1)
        x1, x2 = x[:, :8], x[:, 8:]
        expected = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)
        p, qn = positions.to("npu"), query.to("npu")
        done = wrong = 0
        while done < calls // rotors and time.monotonic() < deadline:
            qs = [qn.clone() for _ in range(burst)]
            failed = set()
            for i, q in enumerate(qs):
                rotary = polyops.rotary_embedding if i % 2 else torch.ops.polyops.rotary_embedding
                try:
                    rotary(p, q, None, head, c)
                except RuntimeError:  # a fault of an earlier call's garbage positions
                    failed.add(i)
            for i, q in enumerate(qs):
                try:
                    bad = (q.cpu().double() - expected).abs().max() > 1e-4
                except RuntimeError:
                    bad = True
                wrong += bool(bad) or i in failed
            done += burst
        with lock:
            counts["calls"] += done
            counts["wrong"] += wrong

    threads = [threading.Thread(target=norms) for _ in range(neighbours)]
    rotor_threads = [threading.Thread(target=rotor, args=(i,)) for i in range(rotors)]
    for t in threads + rotor_threads:
        t.start()
    for t in rotor_threads:
        t.join(timeout=seconds + 60)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    torch.npu.synchronize()
    y = polyops.rms_norm(b_args[0], b_args[2]).cpu().double()
    rms = (xb.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    counts["b_error"] = (y - xb.double() / rms * wb.double()).abs().max().item()
    counts["alive"] = any(t.is_alive() for t in threads + rotor_threads)
    return counts


def test_rotary_int32_positions_hold_scratch_against_another_thread():
    result = rotary_race(calls=80, seconds=90)
    assert not result["alive"] and result["b_errors"] == 0, result
    assert result["calls"] >= 16 and result["b_calls"] > 0, result
    assert result["wrong"] == 0, result
    assert result["b_error"] < 1e-4, result


def scratch_race(seconds):
    """apply_rotary_pos_emb (cos/sin tables in scratch) and reshape_and_cache (strided
    key/value packed into scratch) against an rms_norm loop on the same stream; `wrong`
    counts wrong tensors (query, key, two caches a round)."""
    torch.manual_seed(1)
    tokens = 2048
    query, key = torch.randn(tokens, 1, 128), torch.randn(tokens, 1, 128)
    cos, sin = torch.randn(tokens, 64), torch.randn(tokens, 64)

    def rotate(x):
        x = x.double()
        c, s = cos.double()[:, None], sin.double()[:, None]
        x1, x2 = x[..., :64], x[..., 64:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    expected_q, expected_k = rotate(query), rotate(key)
    cos_n, sin_n = cos.to("npu"), sin.to("npu")
    qkv = torch.randn(tokens, 3, 2, 64)
    slots = torch.randperm(tokens)
    kv = qkv.to("npu")
    slots_n = slots.to("npu")
    xb, wb = torch.randn(256, 256).to("npu"), torch.randn(256).to("npu")
    stop = threading.Event()
    b_errors = []

    def norms():
        while not stop.is_set():
            try:
                polyops.rms_norm(xb, wb)
            except RuntimeError as error:  # the fault of a garbage intermediate
                b_errors.append(str(error))

    b = threading.Thread(target=norms)
    b.start()
    wrong, done, deadline = 0, 0, time.monotonic() + seconds
    try:
        while done < 20 and time.monotonic() < deadline:
            form = polyops if done % 2 else torch.ops.polyops
            q, k = query.to("npu"), key.to("npu")
            form.apply_rotary_pos_emb(q, k, cos_n, sin_n)
            wrong += bool((q.cpu().double() - expected_q).abs().max() > 1e-4)
            wrong += bool((k.cpu().double() - expected_k).abs().max() > 1e-4)
            caches = [torch.zeros(tokens // 16, 16, 2, 64).to("npu") for _ in "kv"]
            form.reshape_and_cache(kv[:, 1], kv[:, 2], *caches, slots_n)
            for cache, part in zip(caches, (1, 2), strict=True):
                flat = cache.cpu().view(tokens, 2, 64)
                wrong += not torch.equal(flat[slots], qkv[:, part])
            done += 1
    finally:
        stop.set()
        b.join(timeout=60)
    return {"calls": done, "wrong": wrong, "b_errors": len(b_errors), "alive": b.is_alive()}


def test_multi_launch_ops_hold_scratch_against_another_thread():
    result = scratch_race(seconds=90)
    assert not result["alive"] and result["calls"] >= 5, result
    assert result["wrong"] == 0 and result["b_errors"] == 0, result


# --- device faults on temporaries -------------------------------------------


def fault_on_temporary(form, sync):
    key = torch.randn(3, 2, 32, dtype=torch.float16).to("npu")
    caches = [torch.zeros(2, 2, 2, 32, dtype=torch.float16).to("npu") for _ in "kv"]
    bad = torch.tensor([0, 999, 1])  # block 249 of 2
    # Every argument but the caches is a temporary: freeing them synchronizes
    # the device, which runs the scatter and meets the bad slot there.
    form.reshape_and_cache(key.clone(), key.clone(), *caches, bad.to("npu"))
    try:
        if sync == "synchronize":
            torch.npu.synchronize()
        elif sync == "stream":
            torch.npu.current_stream().synchronize()
        else:
            caches[0].cpu()
        error = None
    except RuntimeError as caught:
        error = str(caught)
    # Reported once: the device works again afterwards.
    torch.npu.synchronize()
    again = (torch.ones(3).to("npu") + 1).cpu().tolist()
    return {"error": error, "again": again}


@pytest.mark.parametrize("sync", ["synchronize", "stream", "copy"])
@pytest.mark.parametrize("name", ["polyops", "torch.ops"])
def test_fault_on_a_temporary_surfaces_at_the_next_synchronization(name, sync):
    # Each fault is reported once (the previous case's fault is gone when the next runs).
    form = polyops if name == "polyops" else torch.ops.polyops
    case = f"{name} {sync}"
    result = fault_on_temporary(form, sync)
    assert result["error"] is not None, f"{case}: the fault was lost"
    assert "slotMapping[1] = 999" in result["error"], (case, result["error"])
    assert "found when a tensor was freed" in result["error"], (case, result["error"])
    assert result["again"] == [2.0, 2.0, 2.0], case


def _caught(call):
    try:
        call()
    except RuntimeError as error:
        return str(error)
    return None


@pytest.fixture
def cache_capacity_one():
    """Every op's instance cache bounded to 1 entry for the test, then the default (256)."""
    polyops.set_cache_capacity(1)
    try:
        yield
    finally:
        polyops.set_cache_capacity(256)
        polyops.clear_cache()


def test_fault_when_an_instance_with_device_memory_dies_is_reported_once(cache_capacity_one):
    # An instance that owns device memory (causal_softmax's mask) dies while a
    # faulting launch is queued: by eviction, then by clear_cache. Freeing the
    # mask must not synchronize and swallow the fault: the fault is reported
    # once, by the first synchronization after it (the next instance's mask
    # upload, clear_cache, or the user's synchronize).
    key = torch.randn(3, 2, 32, dtype=torch.float16).to("npu")
    caches = [torch.zeros(2, 2, 2, 32, dtype=torch.float16).to("npu") for _ in "kv"]
    bad = torch.tensor([0, 999, 1]).to("npu")  # block 249 of 2
    scores = [torch.randn(2, n, n).to("npu") for n in (5, 6, 7)]
    results = {}
    polyops.causal_softmax(scores[0])  # an instance with a mask in device memory
    polyops.reshape_and_cache(key, key, *caches, bad)  # queued; faults when run
    results["eviction"] = [  # the second instance evicts the first
        _caught(lambda: polyops.causal_softmax(scores[1])),
        _caught(torch.npu.synchronize),
    ]
    polyops.reshape_and_cache(key, key, *caches, bad)
    results["clear_cache"] = [_caught(polyops.clear_cache), _caught(torch.npu.synchronize)]
    # Nothing is left behind: 200 evicted masks of 1 MiB each are freed as the
    # calls go on (a few at a time), the rest by clear_cache; the device works.
    big = [torch.randn(1, 1024, 1024 + i).to("npu") for i in range(2)]
    polyops.clear_cache()
    torch.npu.synchronize()
    baseline = cann_live_bytes()
    peak = 0
    for i in range(200):
        polyops.causal_softmax(big[i % 2])
        if i == 100:
            polyops.clear_cache()
        peak = max(peak, cann_live_bytes() - baseline)
    polyops.clear_cache()
    torch.npu.synchronize()
    results["peak_mib"] = peak / (1 << 20)
    results["left"] = cann_live_bytes() - baseline
    results["again"] = (torch.ones(3).to("npu") + 1).cpu().tolist()
    for when in ("eviction", "clear_cache"):
        reported = [error for error in results[when] if error is not None]
        assert len(reported) == 1, f"{when}: the fault was lost or reported twice: {reported}"
        assert "slotMapping[1] = 999" in reported[0], (when, reported)
    # At most kMaxDeferredBuffers (8) masks wait, besides the live one, a 4 MiB
    # output and the stream's workspace; unbounded, 100 would.
    assert results["peak_mib"] < 20, results["peak_mib"]
    assert results["left"] == 0, results["left"]
    assert results["again"] == [2.0, 2.0, 2.0]


# --- per-stream workspace pools ---------------------------------------------


def stream_pools():
    """MiB above the baseline kept after calls on 100 streams and after 100 calls on
    handles that are not streams, how many of those were refused, and bytes kept after
    clear_cache."""
    mib = 1 << 20
    torch.manual_seed(2)
    x, w = torch.randn(64, 512), torch.randn(512)
    expected = x.double() / (x.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt() * w.double()
    xn, wn = x.to("npu"), w.to("npu")

    def check(y):
        assert (y.cpu().double() - expected).abs().max() < 1e-4

    def live():
        torch.npu.synchronize()
        gc.collect()
        return cann_live_bytes()

    check(polyops.rms_norm(xn, wn))  # the default stream's pool
    polyops.clear_cache()
    baseline = live()

    # A result still queued on one stream when later calls on 40 others evict
    # its pool: the pool is freed only after the device has run that work.
    first = torch.npu.Stream()
    with torch.npu.stream(first):
        queued = polyops.rms_norm(xn, wn)
    for i in range(100):
        with torch.npu.stream(torch.npu.Stream()):
            form = polyops if i % 2 else torch.ops.polyops
            check(form.rms_norm(xn, wn))
    check(queued)
    del queued
    after_streams = live() - baseline

    # Handles that are not streams: the calls fail and keep no memory.
    refused = 0
    for i in range(100):
        try:
            polyops.rms_norm(xn, wn, stream=0x7E570000 + 64 * i)
        except RuntimeError:
            refused += 1
    after_bad = live() - baseline

    polyops.clear_cache()
    after_clear = live() - baseline
    # Pools come back on demand, correct.
    with torch.npu.stream(first):
        check(polyops.rms_norm(xn, wn))
    check(torch.ops.polyops.rms_norm(xn, wn))
    return {
        "streams": after_streams / mib,
        "bad": after_bad / mib,
        "refused": refused,
        "clear": after_clear,
    }


def test_stream_pools_are_bounded_and_freed_by_clear_cache():
    result = stream_pools()
    # At most 32 pools of 1 MiB (each stream's first block) stay: 100 MiB
    # before the bound.
    assert result["streams"] <= 33, result
    assert result["refused"] == 100 and result["bad"] <= result["streams"] + 0.01, result
    assert result["clear"] == 0, result


# --- exception types -----------------------------------------------------------


def _kind(call):
    try:
        call()
    except Exception as error:
        return type(error).__name__, str(error)
    return None, None


def test_select_out_of_range_stays_an_index_error():
    assert _kind(lambda: torch.ops.aten.select.int(torch.zeros(3), 0, 5))[0] == "IndexError"


def test_shapes_that_do_not_broadcast_stay_value_errors():
    # Shapes that do not broadcast: [3] against [2, 4].
    ops_add = _kind(lambda: torch.ops.polyops.add(torch.zeros(3), torch.zeros(2, 4)))[0]
    add = _kind(lambda: polyops.add(torch.zeros(3), torch.zeros(2, 4)))[0]
    npu_ops_add = _kind(
        lambda: torch.ops.polyops.add(torch.zeros(3).to("npu"), torch.zeros(2, 4).to("npu"))
    )[0]
    assert ops_add == "ValueError" and add == "ValueError"
    assert npu_ops_add == "ValueError"


def test_the_devices_own_errors_are_runtime_errors_without_a_backtrace():
    # The device's own errors are still RuntimeErrors without a C++ backtrace.
    from polyops import _npu_device  # built only with the npu test device

    name, message = _kind(lambda: _npu_device.set_device(7))
    assert name == "RuntimeError" and "invalid device index 7" in message
    assert "Exception raised from" not in message


# --- size-1 dims: strides carry no meaning ------------------------------------


def test_size_one_strides_on_npu_rotary():
    torch.manual_seed(5)
    tokens, head = 6, 128
    cache = torch.randn(16, head)
    positions = torch.randint(0, 16, (tokens,))
    query = torch.randn(tokens, 2, head)
    key = torch.randn(1, tokens, head).transpose(0, 1)  # [T, 1, D], contiguous for torch
    cos, sin = cache[positions].chunk(2, dim=-1)

    def rotate(x):
        x = x.double()
        c, s = cos.double()[:, None], sin.double()[:, None]
        x1, x2 = x[..., :64], x[..., 64:]
        return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)

    errors = []
    for form in (polyops, torch.ops.polyops):
        for positions_dtype in (torch.int64, torch.int32):
            q = query.to("npu")
            k = torch.empty(1, tokens, head).to("npu").transpose(0, 1)
            k.copy_(key.to("npu"))
            form.rotary_embedding(
                positions.to(positions_dtype).to("npu"), q, k, head, cache.to("npu")
            )
            errors += [
                (q.cpu().double() - rotate(query)).abs().max().item(),
                (k.cpu().double() - rotate(key)).abs().max().item(),
            ]
        q = query.to("npu")
        k = torch.empty(1, tokens, head).to("npu").transpose(0, 1)
        k.copy_(key.to("npu"))
        form.apply_rotary_pos_emb(q, k, cos.contiguous().to("npu"), sin.contiguous().to("npu"))
        errors += [
            (q.cpu().double() - rotate(query)).abs().max().item(),
            (k.cpu().double() - rotate(key)).abs().max().item(),
        ]
        # Zero tokens, with a stride-0 size-1 dim: nothing to do, nothing refused.
        empty = torch.empty(0, 1, head).to("npu").as_strided((0, 1, head), (head, 0, 1))
        q0 = torch.empty(0, 2, head).to("npu")
        form.rotary_embedding(
            torch.empty(0, dtype=torch.int64).to("npu"), q0, empty, head, cache.to("npu")
        )
        form.apply_rotary_pos_emb(
            q0, empty, torch.empty(0, 64).to("npu"), torch.empty(0, 64).to("npu")
        )
    assert max(errors) < 1e-4


if __name__ == "__main__":
    # The measurements behind the two bounded tests above, at a larger size:
    #   PYTHONPATH=.site python -m tests.npu.test_npu_reliability [rotary calls]
    from polyops.testing import use_cann_double

    use_cann_double()
    rotary_calls = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    print("rotary race:", rotary_race(rotary_calls, 900))
    print("stream pools (MiB above baseline):", stream_pools())
