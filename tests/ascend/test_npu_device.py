"""The "npu" test device (polyops._npu_device) on a CANN runtime library.

Activation is once per process, so the checks run in a fresh interpreter:
this file doubles as the child script (``python test_npu_device.py --child
DIR``), which activates the device on DIR, runs every ``check_*`` function
and prints one JSON line mapping each check to None (passed) or its
traceback. Each check is then one pytest test, on the CANN test double's
libraries (``$POLYOPS_CANN_DOUBLE_DIR`` or ``<polyops>/_cann_double``),
skipped with a reason only where the double is not built.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.util
import io
import json
import os
import pathlib
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable

import pytest
import torch

HERE = pathlib.Path(__file__).resolve().parent
MARKER = "NPU-CHECKS:"

# --- checks (run in the child, after use_cann_double) ------------------------

CHECKS: dict[str, Callable[[], None]] = {}


def _check(function: Callable[[], None]) -> Callable[[], None]:
    CHECKS[function.__name__.removeprefix("check_")] = function
    return function


def _runtime() -> ctypes.CDLL:
    """The activated libascendcl.so (the same handle the device uses)."""
    from polyops import _cann_double

    return ctypes.CDLL(str(_cann_double.active_library_dir / "libascendcl.so"))


def _is_device_pointer(address: int) -> bool:
    function = _runtime().polyopsDoubleIsDevicePointer
    function.argtypes = [ctypes.c_void_p]
    function.restype = ctypes.c_int
    return bool(function(address))


def _c_entry(name: str) -> Callable:
    """A polyopsNpu* C entry point, found the way native code finds it (dlsym RTLD_DEFAULT)."""
    function = getattr(ctypes.CDLL(None), name)
    if name == "polyopsNpuCurrentStream":
        function.argtypes = [ctypes.c_int]
        function.restype = ctypes.c_void_p
    else:
        function.argtypes = []
        function.restype = ctypes.c_int
    return function


def _expect_error(kind: type[BaseException], words: str, call: Callable[[], object]) -> None:
    try:
        call()
    except kind as error:
        assert words in str(error), f"{words!r} not in {error}"
    else:
        raise AssertionError(f"expected {kind.__name__} mentioning {words!r}")


ALL_DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
]


def _sample(dtype: torch.dtype, *shape: int) -> torch.Tensor:
    values = torch.randn(*shape, generator=torch.Generator().manual_seed(0)) * 50
    return values > 0 if dtype == torch.bool else values.to(dtype)


@_check
def check_activation_registers_npu() -> None:
    import polyops
    from polyops import _cann_double

    assert torch.npu.is_available() and torch.npu.device_count() == 2
    assert polyops._DEVICE_AVAILABLE["npu"]()
    # devices() lists built backends only: "npu" joins once the Ascend backend is built.
    assert ("npu" in polyops.devices()) == ("npu" in polyops._C._built_devices)
    assert os.environ[_cann_double.LIB_DIR_ENV] == str(_cann_double.active_library_dir)
    assert torch.device("npu").type == "npu" and torch.empty(1, device="npu").is_npu


@_check
def check_reactivation() -> None:
    from polyops import _cann_double

    directory = _cann_double.active_library_dir
    _cann_double.use_cann_double(directory)  # same directory: nothing happens
    _cann_double.use_cann_double(str(directory) + "/.")
    _expect_error(
        RuntimeError, "fresh process", lambda: _cann_double.use_cann_double(directory.parent)
    )
    assert _cann_double.active_library_dir == directory


@_check
def check_round_trip_every_dtype() -> None:
    for dtype in ALL_DTYPES:
        host = _sample(dtype, 5, 7)
        device = host.to("npu")
        assert device.device == torch.device("npu", 0) and device.dtype == dtype
        assert _is_device_pointer(device.data_ptr()), dtype
        assert torch.equal(device.cpu(), host), dtype
        assert torch.equal(device.clone().cpu(), host), dtype  # D2D
        assert torch.equal(host.to("npu", non_blocking=True).to("cpu", non_blocking=True), host)


@_check
def check_non_contiguous_copies() -> None:
    host = _sample(torch.float32, 6, 8)
    device = host.to("npu")
    # Device -> host from views with gaps, transposed and expanded views.
    assert torch.equal(device[:, ::3].cpu(), host[:, ::3])
    assert torch.equal(device.t().cpu(), host.t())
    assert torch.equal(device[1:4, 2:7].cpu(), host[1:4, 2:7])
    assert torch.equal(device[2].expand(3, 8).cpu(), host[2].expand(3, 8))
    # Host -> device from non-contiguous sources, keeping or densifying strides.
    moved = host.t().to("npu")
    assert moved.stride() == host.t().stride() and torch.equal(moved.cpu(), host.t())
    dense = torch.empty(8, 6, device="npu").copy_(host.t())
    assert dense.is_contiguous() and torch.equal(dense.cpu(), host.t())
    # Host -> device into a view with gaps: the gaps keep their values.
    target = torch.zeros(6, 8).to("npu")
    target[:, 1::2] = host[:, ::2]
    expected = torch.zeros(6, 8)
    expected[:, 1::2] = host[:, ::2]
    assert torch.equal(target.cpu(), expected)
    # Device -> device between layouts, with conversion and broadcasting.
    assert torch.equal(device.t().contiguous().cpu(), host.t().contiguous())
    assert torch.equal(device.to(torch.float64).cpu(), host.double())
    assert torch.equal(device[:, ::2].to(torch.float16).cpu(), host[:, ::2].half())
    row = torch.empty(3, 8, device="npu").copy_(device[0])
    assert torch.equal(row.cpu(), host[0].expand(3, 8))
    assert torch.equal(torch.arange(6).to("npu", torch.float32).cpu(), torch.arange(6.0))
    # Negated and conjugated views resolve on the way.
    assert torch.equal(torch._neg_view(device).cpu(), -host)


@_check
def check_views_share_storage_and_offsets() -> None:
    host = torch.arange(24.0).view(4, 6)
    base = host.to("npu")
    window = base[1:3, 2:5]
    assert window.storage_offset() == 8 and window.stride() == (6, 1)
    assert window.data_ptr() == base.data_ptr() + 8 * 4
    assert window.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert torch.equal(window.cpu(), host[1:3, 2:5])
    window.fill_(-1)  # through the CPU fallback, written back into the view
    window.mul_(3)
    host[1:3, 2:5] = -3
    assert torch.equal(base.cpu(), host)
    base.view(-1)[5] = 100
    host.view(-1)[5] = 100
    assert torch.equal(base.cpu(), host)
    for make in (
        lambda t: t.view(6, 4),
        lambda t: t.reshape(2, 12),
        lambda t: t.t()[1:],
        lambda t: t.unfold(1, 2, 2),
        lambda t: t.select(0, 2),
        lambda t: t.narrow(1, 1, 3),
        lambda t: t.diagonal(),
        lambda t: t.unsqueeze(0).squeeze(0),
        lambda t: t[:, 1].expand(2, 4),
        lambda t: t.as_strided((3, 3), (7, 1), 2),
        lambda t: t.view(torch.int32),
    ):
        view = make(base)
        assert view.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
        assert torch.equal(view.cpu(), make(host))
    complex_view = torch.view_as_complex(base.view(4, 3, 2))
    assert torch.equal(torch.view_as_real(complex_view).cpu(), host.view(4, 3, 2))


@_check
def check_device_guard_and_second_device() -> None:
    assert torch.npu.current_device() == 0
    on_one = torch.empty(3, device="npu:1")
    assert on_one.device == torch.device("npu", 1)
    assert torch.ones(3, device="npu:1").device.index == 1
    moved = torch.arange(4.0).to("npu").to("npu:1")
    assert moved.device.index == 1 and torch.equal(moved.cpu(), torch.arange(4.0))
    assert (moved + moved).device.index == 1
    assert torch.npu.current_device() == 0  # the guards restored device 0
    with torch.npu.device(1):
        assert torch.npu.current_device() == 1 and _c_entry("polyopsNpuCurrentDevice")() == 1
        assert torch.empty(2, device="npu").device.index == 1
    assert torch.npu.current_device() == 0 and _c_entry("polyopsNpuCurrentDevice")() == 0
    torch.npu.set_device("npu:1")
    assert torch.npu.current_device() == 1
    torch.npu.set_device(0)
    _expect_error(RuntimeError, "invalid device index 5", lambda: torch.empty(1, device="npu:5"))


@_check
def check_factories() -> None:
    shape = (3, 4)
    assert torch.empty(shape, device="npu").shape == shape
    assert torch.equal(torch.zeros(shape, device="npu").cpu(), torch.zeros(shape))
    assert torch.equal(
        torch.ones(shape, device="npu", dtype=torch.int8).cpu(), torch.ones(shape, dtype=torch.int8)
    )
    assert torch.equal(torch.full(shape, 2.5, device="npu").cpu(), torch.full(shape, 2.5))
    assert torch.equal(torch.arange(7, device="npu").cpu(), torch.arange(7))
    assert torch.equal(
        torch.tensor([[1, 2], [3, 4]], device="npu").cpu(), torch.tensor([[1, 2], [3, 4]])
    )
    strided = torch.empty_strided((2, 3), (1, 2), device="npu")
    assert strided.stride() == (1, 2) and strided.is_npu
    last = torch.empty(2, 3, 4, 5, device="npu", memory_format=torch.channels_last)
    assert last.is_contiguous(memory_format=torch.channels_last)
    like = torch.zeros_like(last)
    assert like.is_npu and like.stride() == last.stride()
    torch.manual_seed(3)
    drawn = torch.randn(100, device="npu").cpu()
    torch.manual_seed(3)
    assert torch.equal(torch.randn(100, device="npu").cpu(), drawn)
    _expect_error(RuntimeError, "pin_memory", lambda: torch.empty(2, device="npu", pin_memory=True))


@_check
def check_cpu_fallback_ops() -> None:
    a, b = _sample(torch.float32, 4, 5), _sample(torch.float32, 5, 4) + 1
    x, y = a.to("npu"), b.to("npu")
    assert torch.equal((x + x).cpu(), a + a)
    assert (x + x).device == x.device
    assert torch.equal((x @ y).cpu(), a @ b)
    assert torch.equal(x.sum(dim=1).cpu(), a.sum(dim=1))
    assert torch.equal(torch.cat([x, x]).cpu(), torch.cat([a, a]))
    assert torch.equal(x[x > 0].cpu(), a[a > 0])
    assert x.max().item() == a.max().item()
    out = torch.empty(0, device="npu")
    torch.add(x, x, out=out)  # out= resizes through _copy_from_and_resize
    assert out.shape == (4, 5) and torch.equal(out.cpu(), a + a)
    z = x.clone()
    z[:, 1:3].add_(1)
    a2 = a.clone()
    a2[:, 1:3].add_(1)
    assert torch.equal(z.cpu(), a2)
    repr(x)
    # Device work still queued on a stream is finished before the fallback reads it.
    source, target = x.clone(), torch.zeros(4, 5, device="npu")
    stream = torch.npu.Stream()
    copy_async = _runtime().aclrtMemcpyAsync
    copy_async.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_size_t]
    copy_async.argtypes += [ctypes.c_int, ctypes.c_void_p]
    copy_async.restype = ctypes.c_int
    nbytes = source.numel() * source.element_size()
    status = copy_async(target.data_ptr(), nbytes, source.data_ptr(), nbytes, 3, stream.npu_stream)
    assert status == 0
    assert torch.equal((target * 1).cpu(), a)
    # Where the runtime logs its own calls, the fallback's synchronization comes first.
    from polyops._cann_double import cann_calls, clear_cann_calls

    clear_cann_calls()
    x * 1
    functions = [call["function"] for call in cann_calls()]
    if "aclrtMemcpy" in functions:
        assert "aclrtSynchronizeDevice" in functions[: functions.index("aclrtMemcpy")]


@_check
def check_autograd() -> None:
    x = _sample(torch.float32, 6).to("npu").requires_grad_()
    (x * x).sum().backward()
    assert x.grad is not None and x.grad.is_npu
    assert torch.equal(x.grad.cpu(), 2 * x.detach().cpu())


@_check
def check_streams() -> None:
    current = torch.npu.current_stream()
    assert current == torch.npu.default_stream() and current.stream_id == 0
    handle = current.npu_stream
    assert isinstance(handle, int) and handle != 0
    assert _c_entry("polyopsNpuCurrentStream")(0) == handle
    assert _c_entry("polyopsNpuCurrentStream")(-1) == handle
    assert _c_entry("polyopsNpuCurrentStream")(9) is None  # invalid device: nullptr
    side = torch.npu.Stream()
    assert side.npu_stream not in (0, handle) and side.device_index == 0
    with torch.npu.stream(side):
        assert torch.npu.current_stream() == side
        assert torch.accelerator.current_stream() == side
        assert _c_entry("polyopsNpuCurrentStream")(-1) == side.npu_stream
        seen = []
        worker = threading.Thread(target=lambda: seen.append(torch.npu.current_stream()))
        worker.start()
        worker.join()
        assert seen == [current]  # current streams are per thread
    assert torch.npu.current_stream() == current
    other = torch.npu.Stream("npu:1")
    with torch.npu.stream(other):
        assert torch.npu.current_device() == 1
        assert torch.npu.current_stream() == other
        assert torch.npu.current_stream(0) == current
    assert torch.npu.current_device() == 0 and torch.npu.current_stream(1).stream_id == 0
    side.synchronize()
    assert side.query()
    torch.npu.synchronize()
    torch.npu.set_stream(side)
    assert _c_entry("polyopsNpuCurrentStream")(0) == side.npu_stream
    torch.npu.set_stream(current)
    assert current._as_parameter_ == handle  # what ctypes passes for the stream
    bogus = torch.npu.Stream(stream_id=99, device_index=0, device_type=current.device_type)
    _expect_error(RuntimeError, "unknown stream id 99", lambda: bogus.npu_stream)


@_check
def check_save_and_load() -> None:
    host = _sample(torch.float32, 4, 6)
    tensors = {"base": host.to("npu"), "second": host.to("npu:1")}
    tensors["view"] = tensors["base"][1:3, ::2]
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded["base"].device == torch.device("npu", 0)
    assert loaded["second"].device == torch.device("npu", 1)
    assert torch.equal(loaded["base"].cpu(), host) and torch.equal(loaded["second"].cpu(), host)
    view = loaded["view"]
    assert view.untyped_storage().data_ptr() == loaded["base"].untyped_storage().data_ptr()
    assert view.storage_offset() == 6 and torch.equal(view.cpu(), host[1:3, ::2])
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")
    assert on_cpu["view"].is_cpu and torch.equal(on_cpu["view"], host[1:3, ::2])


@_check
def check_zero_size_tensors() -> None:
    empty = torch.empty(0, device="npu")
    assert empty.shape == (0,) and empty.cpu().shape == (0,)
    assert torch.empty(3, 0, device="npu").cpu().shape == (3, 0)
    assert torch.zeros(2, 0).to("npu").shape == (2, 0)
    sliced = torch.arange(6.0).to("npu")[4:4]
    assert sliced.numel() == 0 and sliced.cpu().shape == (0,)
    assert torch.cat([empty, torch.ones(2, device="npu")]).cpu().tolist() == [1.0, 1.0]
    assert (empty + empty).shape == (0,)


@_check
def check_resize_and_storage() -> None:
    x = torch.arange(4.0).to("npu")
    x.resize_(10)
    assert x.shape == (10,) and x.untyped_storage().nbytes() >= 40
    assert torch.equal(x[:4].cpu(), torch.arange(4.0))
    x.resize_(2, 2)
    assert x.shape == (2, 2)
    storage = torch.ones(4).to("npu").untyped_storage()
    storage.resize_(32)  # the hooks' resizePrivateUse1Bytes
    assert storage.nbytes() == 32 and storage.device.type == "npu"
    y = torch.empty(0, device="npu")
    y.set_(x.untyped_storage(), 1, (3,), (1,))
    assert torch.equal(y.cpu(), torch.arange(1.0, 4.0))
    y.set_()
    assert y.numel() == 0 and y.is_npu


@_check
def check_memory_is_freed() -> None:
    from polyops._cann_double import cann_live_bytes

    gc.collect()
    baseline = cann_live_bytes()
    held = [torch.empty(1000, device="npu"), torch.ones(10, 10).to("npu:1")]
    held.append(held[0][5:] + 1)
    held[1].resize_(50, 50)
    assert cann_live_bytes() >= baseline + 4000 + 4 * 2500
    buffer = io.BytesIO()
    torch.save(held, buffer)
    buffer.seek(0)
    held.extend(torch.load(buffer))
    del held
    gc.collect()
    assert cann_live_bytes() == baseline


@_check
def check_runtime_errors_are_exceptions() -> None:
    from polyops import _npu_device

    try:
        torch.empty(2**60, dtype=torch.uint8, device="npu")  # 1 EiB: aclrtMalloc must fail
    except torch.OutOfMemoryError as error:
        assert "aclrtMalloc(1152921504606846976 bytes) on npu:0 failed with aclError" in str(error)
    else:
        raise AssertionError("a 1 EiB allocation succeeded")
    _expect_error(RuntimeError, "fresh process", lambda: _npu_device.init("/elsewhere.so", 2))
    assert torch.ones(2, device="npu").sum().item() == 2.0  # still usable


@_check
def check_call_log() -> None:
    from polyops._cann_double import cann_calls, clear_cann_calls

    torch.ones(4).to("npu").cpu()
    calls = cann_calls()
    assert isinstance(calls, list) and all(isinstance(c, dict) and "function" in c for c in calls)
    clear_cann_calls()
    assert cann_calls() == []


def _child_main(library_dir: str) -> None:
    from polyops._cann_double import use_cann_double

    use_cann_double(library_dir)
    results: dict[str, str | None] = {}
    for name, check in CHECKS.items():
        try:
            check()
            results[name] = None
        except BaseException:  # every failure becomes a report, the next check still runs
            results[name] = traceback.format_exc()
    print(MARKER + json.dumps(results), flush=True)


# --- pytest side --------------------------------------------------------------

needs_device = pytest.mark.skipif(
    importlib.util.find_spec("polyops._npu_device") is None,
    reason="polyops was built without its npu test device (WITH_NPU_TEST_DEVICE=OFF)",
)


def _run(args: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, POLYOPS_NPU_DEVICE_COUNT="2", **(extra_env or {}))
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=300, env=env
    )


def _double_dir() -> pathlib.Path | None:
    spec = importlib.util.find_spec("polyops")
    assert spec is not None and spec.origin is not None
    default = pathlib.Path(spec.origin).parent / "_cann_double"
    directory = pathlib.Path(os.environ.get("POLYOPS_CANN_DOUBLE_DIR") or default)
    return directory if (directory / "libascendcl.so").is_file() else None


@pytest.fixture(scope="module")
def check_results() -> dict[str, str | None]:
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed: torch.npu is torch_npu's, not the test device")
    directory = _double_dir()
    if directory is None:
        pytest.skip("the CANN test double is not built (no _cann_double/libascendcl.so)")
    child = _run([__file__, "--child", str(directory)])
    lines = [line for line in child.stdout.splitlines() if line.startswith(MARKER)]
    assert child.returncode == 0 and lines, (
        f"the child died ({child.returncode}):\n{child.stdout}\n{child.stderr}"
    )
    return json.loads(lines[-1][len(MARKER) :])


@needs_device
@pytest.mark.parametrize("name", list(CHECKS))
def test_npu_device(check_results, name):
    error = check_results[name]
    assert error is None, error


_NOTHING_LOADED = """
import json, sys, torch, polyops
from polyops import _cann_double
x = torch.ones(3) + 1
polyops.add(x, x)
try:
    _cann_double.use_cann_double("/nonexistent/polyops-cann-double")
    refused = None
except FileNotFoundError as error:
    refused = str(error)
with open("/proc/self/maps") as maps:
    mapped = [line for line in maps if "libascendcl" in line or "_npu_device" in line]
print(json.dumps({
    "modules": [m for m in ("polyops._npu_device", "polyops._npu_module") if m in sys.modules],
    "mapped": mapped,
    "torch_npu_attr": hasattr(torch, "npu"),
    "backend": torch._C._get_privateuse1_backend_name(),
    "env": "POLYOPS_CANN_LIB_DIR" in __import__("os").environ,
    "active": str(_cann_double.active_library_dir),
    "devices": polyops.devices(),
    "refused": refused,
}))
"""


def test_nothing_loads_without_use_cann_double():
    env = {key: value for key, value in os.environ.items() if key != "POLYOPS_CANN_LIB_DIR"}
    child = subprocess.run(
        [sys.executable, "-c", _NOTHING_LOADED],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert child.returncode == 0, child.stderr
    report = json.loads(child.stdout.splitlines()[-1])
    assert report["modules"] == [] and report["mapped"] == []
    assert not report["torch_npu_attr"] and report["backend"] == "privateuseone"
    assert not report["env"] and report["active"] == "None"
    assert report["devices"] == ["cpu"]
    assert "no libascendcl.so" in report["refused"]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        _child_main(sys.argv[2])
    else:
        sys.exit(f"usage: {sys.argv[0]} --child LIBRARY_DIR (the tests run it)")
