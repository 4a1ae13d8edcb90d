"""The CUDA backend beyond the parity table (docs/cuda.md).

Build-level tests run wherever polyops was built with the CUDA backend
(``-DWITH_CUDA=ON`` compiles it on a machine without a GPU): the slots are
listed, ``cuda`` is not a usable device without a GPU, and the scratch
allocator reports a torch without CUDA as a RuntimeError. The GPU tests
(graph capture and replay of every op, streams, device mixing, allocations
on the cache-hit path) skip with a reason where ``torch.cuda.is_available()``
is False. Results are compared against torch's own CUDA/CPU computation or
against the same op's eager result, never against constants.
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing import OPS, Inputs

BUILT = "cuda" in polyops._C._built_devices
GPU = BUILT and torch.cuda.is_available()

needs_build = pytest.mark.skipif(
    not BUILT, reason="polyops was built without the CUDA backend (WITH_CUDA=OFF/AUTO)"
)
needs_gpu = pytest.mark.skipif(
    not GPU,
    reason="no usable CUDA GPU here (torch.cuda.is_available() is False)"
    if BUILT
    else "polyops was built without the CUDA backend",
)

# The CUDA slots of this backend's own ops (docs/cuda.md, slot table).
OWN_SLOTS = {
    "add": {0: "vector"},
    "mul": {0: "vector"},
    "cast": {0: "loop"},
    "cat": {0: "copy"},
}


@needs_build
def test_built_cuda_lists_slots():
    for op, slots in OWN_SLOTS.items():
        assert polyops.implementations(op, "cuda") == slots, op
        assert polyops.default_implementation(op, "cuda") == min(slots)
    # Every op answers for cuda, with or without slots there.
    for op in polyops.operators():
        assert isinstance(polyops.implementations(op, "cuda"), dict)


@needs_build
def test_unknown_cuda_slot_is_value_error():
    with pytest.raises(ValueError, match=r"add has no implementation_index=7 on device 'cuda'"):
        polyops.set_default_implementation("add", 7, "cuda")


def test_devices_lists_cuda_only_when_usable():
    assert ("cuda" in polyops.devices()) == (BUILT and torch.cuda.is_available())
    assert polyops.devices()[0] == "cpu"


@needs_build
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks a torch without a usable GPU")
def test_workspace_without_cuda_torch_is_runtime_error():
    # Zero bytes never reach the allocator.
    assert polyops._C._cuda_workspace_probe(0, 0) == 0
    with pytest.raises(RuntimeError, match=r"polyops\.workspace_probe: .*caching allocator"):
        polyops._C._cuda_workspace_probe(0, 256)


# --- GPU only -----------------------------------------------------------------


def _first_case(op: str):
    info = OPS[op]
    dtype = info.dtypes[0]
    return info, dtype, info.all_cases(dtype)[0]


def _build(op: str):
    info, dtype, case = _first_case(op)
    return case.build(Inputs(info.seed(dtype, case), "cuda"))


def _run(op: str, call) -> tuple:
    returned = getattr(polyops, op)(*call.args, **call.kwargs, **call.outputs)
    return tuple(OPS[op].results(returned, call))


def _cuda_ops() -> list:
    return [
        pytest.param(
            op,
            marks=pytest.mark.skipif(
                BUILT and not polyops.implementations(op, "cuda"),
                reason=f"{op} has no CUDA slot in this build",
            ),
        )
        for op in OPS
    ]


@needs_gpu
@pytest.mark.parametrize("op", _cuda_ops())
def test_graph_capture_and_replay(op):
    eager = _run(op, _build(op))
    _run(op, _build(op))  # warm-up: the instance is built and cached before capture
    captured_call = _build(op)  # untouched until replay (in-place cases write their inputs)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _run(op, captured_call)
    graph.replay()
    torch.cuda.synchronize()
    for replayed, expected in zip(captured, eager, strict=True):
        torch.testing.assert_close(replayed, expected, rtol=0, atol=0, equal_nan=True)


def _ops_without_cuda_slots() -> list:
    ops = [op for op in OPS if BUILT and not polyops.implementations(op, "cuda")]
    reason = "every op has a CUDA slot" if BUILT else "polyops was built without CUDA"
    return ops or [pytest.param(None, marks=pytest.mark.skip(reason=reason))]


@needs_gpu
@pytest.mark.parametrize("op", _ops_without_cuda_slots())
def test_op_without_cuda_slot_is_not_implemented(op):
    message = rf"polyops\.{op} is not supported on device 'cuda'"
    with pytest.raises(NotImplementedError, match=message):
        _run(op, _build(op))


@needs_gpu
def test_side_stream_ordered_by_event():
    x = torch.randn(1 << 20, device="cuda")
    y = torch.randn(1 << 20, device="cuda")
    ready = torch.cuda.Event()
    ready.record()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        side.wait_event(ready)
        result = polyops.add(x, y)  # on side: torch's current stream there
        done = torch.cuda.Event()
        done.record()
    torch.cuda.current_stream().wait_event(done)
    torch.testing.assert_close(result, x + y, rtol=0, atol=0)


@needs_gpu
def test_stream_override():
    x = torch.randn(4096, 512, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(4096, 512, device="cuda", dtype=torch.bfloat16)
    out = torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    polyops.mul(x, y, out=out, stream=side.cuda_stream)
    side.synchronize()
    torch.testing.assert_close(out, x * y, rtol=0, atol=0)


@needs_gpu
def test_workspace_on_side_stream():
    side = torch.cuda.Stream()
    address = polyops._C._cuda_workspace_probe(
        torch.cuda.current_device(), 1 << 20, side.cuda_stream
    )
    assert address != 0
    side.synchronize()


@needs_gpu
def test_device_mix_is_value_error():
    x = torch.randn(16, device="cuda")
    with pytest.raises(ValueError, match=r"polyops\.add: .*other"):
        polyops.add(x, torch.randn(16))
    with pytest.raises(ValueError, match=r"polyops\.cat: .*tensors"):
        polyops.cat([x, torch.randn(16)])


def _device_mallocs() -> int:
    stats = torch.cuda.memory_stats()
    return stats.get("num_device_alloc", stats.get("segment.all.allocated", 0))


@needs_gpu
@pytest.mark.parametrize("op", _cuda_ops())
def test_cache_hit_makes_no_device_allocation(op):
    calls = [_build(op) for _ in range(3)]
    _run(op, calls[0])  # miss: constructs the instance
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    mallocs = _device_mallocs()
    _run(op, calls[1])
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    assert _device_mallocs() == mallocs
    assert after["num_alloc_retries"] == before["num_alloc_retries"]
    if op in OWN_SLOTS and calls[1].outputs:
        # These slots take no Workspace: with the outputs given, the call
        # allocates nothing at all.
        assert after["allocation.all.allocated"] == before["allocation.all.allocated"]


@needs_gpu
def test_own_slots_allocate_nothing_on_a_cache_hit():
    x = torch.randn(64, 128, device="cuda")
    bias = torch.randn(128, device="cuda")
    out = torch.empty_like(x)
    half = torch.empty(64, 128, dtype=torch.float16, device="cuda")
    joined = torch.empty(64, 256, device="cuda")

    def calls():
        polyops.add(x, bias, out=out)
        polyops.mul(x, x, out=out)
        polyops.cast(x, torch.float16, out=half)
        polyops.cat([x, x], 1, out=joined)

    calls()  # misses: the instances are built
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    calls()
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    torch.testing.assert_close(joined, torch.cat([x, x], 1), rtol=0, atol=0)
    torch.testing.assert_close(half, x.half(), rtol=0, atol=0)


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.int32])
def test_add_vector_path_and_tail(dtype):
    # An odd length: 16-byte vectors, then the scalar tail; an offset view:
    # the unaligned scalar path.
    base = (torch.randn(4099 * 8 + 1, device="cuda") * 100).to(dtype)
    other = (torch.randn(4099 * 8 + 1, device="cuda") * 100).to(dtype)
    for a, b in ((base, other), (base[1:], other[1:])):
        # torch adds 16-bit floats in float32 and rounds once, as polyops does.
        torch.testing.assert_close(polyops.add(a, b), a + b, rtol=0, atol=0)
