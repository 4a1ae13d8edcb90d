"""The CUDA backend beyond the parity table (docs/backends/cuda.md).

Build-level tests run wherever polyops was built with the CUDA backend
(``-DWITH_CUDA=ON`` compiles it on a machine without a GPU): the slots are
listed, ``cuda`` is not a usable device without a GPU, and the scratch
allocator reports a torch without CUDA as a RuntimeError, and the attention
ops list the FlashInfer slot (index 1, the default) exactly when the build
compiled it. The GPU tests (graph capture and replay of every op, streams,
device mixing, allocations on the cache-hit path, the FlashInfer slots'
envelope and fallback) skip with a reason where ``torch.cuda.is_available()``
is False. Results are compared against torch's own CUDA/CPU computation or
against the same op's eager result, never against constants.
"""

from __future__ import annotations

import os

import pytest
import torch

import polyops
from polyops.testing import OPS, Inputs, references
from polyops.testing.references import ATTENTION as ATTENTION_TOLERANCE

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

# The CUDA slots of this backend's own ops (docs/backends/cuda.md, slot table).
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


ATTENTION_OPS = ("flash_attention", "paged_attention")
FLASHINFER = BUILT and all(
    polyops.implementations(op, "cuda").get(1) == "flashinfer" for op in ATTENTION_OPS
)


@needs_build
def test_attention_slots_listed():
    # Slot 0 "flash" always; slot 1 "flashinfer" (the default) when the build
    # compiled it (cmake POLYOPS_FLASHINFER), for both ops or for neither.
    listed = {op: polyops.implementations(op, "cuda") for op in ATTENTION_OPS}
    with_flashinfer = [op for op in ATTENTION_OPS if 1 in listed[op]]
    assert with_flashinfer in ([], list(ATTENTION_OPS))
    for op, slots in listed.items():
        if with_flashinfer:
            assert slots == {0: "flash", 1: "flashinfer"}, op
            assert polyops.default_implementation(op, "cuda") == 1, op
        else:
            assert slots == {0: "flash"}, op
            assert polyops.default_implementation(op, "cuda") == 0, op
    # CI builds that must compile the slot say so (noxfile.py).
    if os.environ.get("POLYOPS_EXPECT_FLASHINFER") == "1":
        assert with_flashinfer, "POLYOPS_EXPECT_FLASHINFER=1 but no flashinfer slot was built"


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


# --- FlashInfer slots (GPU only) ------------------------------------------------

needs_flashinfer_gpu = pytest.mark.skipif(
    not (GPU and FLASHINFER),
    reason="no usable CUDA GPU here" if not GPU else "this build has no flashinfer slot",
)
REFUSAL = r"flashinfer slot on cuda does not support .*; use implementation_index=0"


def _prefill(dtype=torch.bfloat16, head_size=128, *, host=True, **options):
    """A GQA prefill call on cuda: 3 sequences, causal unless options say otherwise."""
    gen = torch.Generator().manual_seed(12)
    q_lens, kv_lens = [5, 130, 17], [9, 130, 40]
    q = torch.randn(sum(q_lens), 8, head_size, generator=gen).to(dtype).cuda()
    k, v = (
        torch.randn(sum(kv_lens), 2, head_size, generator=gen).to(dtype).cuda() for _ in range(2)
    )
    cu_q = torch.tensor([0, 5, 135, 152], dtype=torch.int32)
    cu_kv = torch.tensor([0, 9, 139, 179], dtype=torch.int32)
    kwargs = dict(cu_seqlens_q=cu_q.cuda(), cu_seqlens_kv=cu_kv.cuda(), **options)
    if host:
        kwargs.update(cu_seqlens_q_host=cu_q, cu_seqlens_kv_host=cu_kv)
    return (q, k, v), kwargs


def _flashinfer_or_skip(op, args, kwargs):
    """Slot 1's result; skips when this build did not compile the dtype/head size."""
    try:
        return getattr(polyops, op)(*args, **kwargs, implementation_index=1)
    except NotImplementedError as error:
        if "this build compiled FlashInfer kernels for" in str(error):
            pytest.skip(str(error))
        raise


@needs_flashinfer_gpu
@pytest.mark.parametrize(
    "options", [{}, {"causal": False}, {"sliding_window": 16}, {"causal": False, "window_right": 0}]
)
def test_flashinfer_is_default_inside_envelope(options):
    args, kwargs = _prefill(**options)
    chosen = _flashinfer_or_skip("flash_attention", args, kwargs)
    default = polyops.flash_attention(*args, **kwargs)
    torch.testing.assert_close(default, chosen, rtol=0, atol=0)  # the default ran slot 1
    tol = ATTENTION_TOLERANCE[args[0].dtype]
    expected = references.flash_attention_reference(*args, **kwargs)
    torch.testing.assert_close(chosen.cpu().double(), expected, rtol=tol.rtol, atol=tol.atol)


@needs_flashinfer_gpu
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(dict(dtype=torch.float32), id="float32"),
        pytest.param(dict(head_size=96), id="head-size-96"),
        pytest.param(dict(host=False), id="no-host-lengths"),
        pytest.param(dict(causal=False, window_left=4, window_right=3), id="window-right-3"),
    ],
)
def test_flashinfer_refuses_and_default_falls_back(case):
    args, kwargs = _prefill(**case)
    with pytest.raises(NotImplementedError, match=REFUSAL):
        polyops.flash_attention(*args, **kwargs, implementation_index=1)
    default = polyops.flash_attention(*args, **kwargs)
    flash = polyops.flash_attention(*args, **kwargs, implementation_index=0)
    torch.testing.assert_close(default, flash, rtol=0, atol=0)  # the default ran slot 0


@needs_flashinfer_gpu
def test_flashinfer_refuses_strided_out():
    args, kwargs = _prefill()
    out = torch.empty(args[0].shape[0], 8, 256, dtype=args[0].dtype, device="cuda")[..., :128]
    with pytest.raises(NotImplementedError, match=REFUSAL):
        polyops.flash_attention(*args, **kwargs, out=out, implementation_index=1)
    polyops.flash_attention(*args, **kwargs, out=out)  # falls back to flash
    expected = polyops.flash_attention(*args, **kwargs, implementation_index=0)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def _decode(dtype=torch.bfloat16, *, host=True):
    gen = torch.Generator().manual_seed(13)
    batch, heads, kv_heads, head_size, block, max_blocks = 6, 8, 2, 128, 16, 9
    seq_lens = torch.tensor([1, 16, 17, 100, 144, 0], dtype=torch.int32)
    num_blocks = batch * max_blocks
    caches = [
        torch.randn(num_blocks, block, kv_heads, head_size, generator=gen).to(dtype).cuda()
        for _ in range(2)
    ]
    query = torch.randn(batch, heads, head_size, generator=gen).to(dtype).cuda()
    table = torch.randperm(num_blocks, generator=gen).view(batch, max_blocks).to(torch.int32)
    kwargs = {"seq_lens_host": seq_lens} if host else {}
    return (query, *caches, seq_lens.cuda(), table.cuda()), kwargs


@needs_flashinfer_gpu
def test_paged_flashinfer_default_and_fallback():
    args, kwargs = _decode()
    chosen = _flashinfer_or_skip("paged_attention", args, kwargs)
    torch.testing.assert_close(polyops.paged_attention(*args, **kwargs), chosen, rtol=0, atol=0)
    tol = ATTENTION_TOLERANCE[args[0].dtype]
    expected = references.paged_attention_reference(*args, **kwargs)
    torch.testing.assert_close(chosen.cpu().double(), expected, rtol=tol.rtol, atol=tol.atol)
    for case in (dict(host=False), dict(dtype=torch.float32)):
        args, kwargs = _decode(**case)
        with pytest.raises(NotImplementedError, match=REFUSAL):
            polyops.paged_attention(*args, **kwargs, implementation_index=1)
        default = polyops.paged_attention(*args, **kwargs)
        flash = polyops.paged_attention(*args, **kwargs, implementation_index=0)
        torch.testing.assert_close(default, flash, rtol=0, atol=0)


@needs_flashinfer_gpu
def test_flashinfer_graph_capture_replays_the_captured_plan():
    # The plan is uploaded through kernel arguments, so the captured graph
    # holds it: a replay recomputes the same lengths on fresh data in q/k/v.
    args, kwargs = _prefill()
    eager = _flashinfer_or_skip("flash_attention", args, kwargs).clone()
    out = torch.empty_like(eager)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        polyops.flash_attention(*args, **kwargs, out=out, implementation_index=1)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, eager, rtol=0, atol=0)
    for tensor in args:
        tensor.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    expected = polyops.flash_attention(*args, **kwargs, implementation_index=1)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
