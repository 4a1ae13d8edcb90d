"""Run polyops' Ascend path on the CANN test double: no NPU, no CANN toolkit.

The CANN test double is a set of fake CANN libraries (``libascendcl.so``,
``libnnopbase.so``, ``libopapi.so``) with the real C ABI over host memory.
:func:`use_cann_double` points polyops at them and, when torch_npu is not
installed, brings up an "npu" torch device (``polyops._npu_device``, a
PrivateUse1 backend renamed "npu") whose memory comes from the double's
``aclrtMalloc``. Call it once, early, in a fresh process::

    from polyops.testing import use_cann_double, cann_calls
    use_cann_double()
    x = torch.randn(4, device="npu")

Nothing in polyops loads the double unless this function is called.
"""

from __future__ import annotations

import ctypes
import importlib.util
import json
import os
import pathlib
import threading
from typing import Any

# Where the double's libraries are when the argument is not given.
DOUBLE_DIR_ENV = "POLYOPS_CANN_DOUBLE_DIR"
# Set by use_cann_double to the chosen directory: the polyops Ascend loader
# looks for the CANN libraries there (it runs in C++, hence an env var).
LIB_DIR_ENV = "POLYOPS_CANN_LIB_DIR"
# How many npu devices the test device has (default 2, so npu:1 exists).
DEVICE_COUNT_ENV = "POLYOPS_NPU_DEVICE_COUNT"
# How many devices the double's runtime reports (read when it loads);
# use_cann_double sets it to the npu device count unless the caller did.
DOUBLE_DEVICE_COUNT_ENV = "POLYOPS_CANN_DOUBLE_DEVICE_COUNT"
# The most devices polyops._npu_device supports (kMaxDevices in
# src/npu_device/runtime.h).
MAX_DEVICES = 16

#: The directory activated by :func:`use_cann_double` (None before).
active_library_dir: pathlib.Path | None = None

_runtime: ctypes.CDLL | None = None
_lock = threading.Lock()


def default_library_dir() -> pathlib.Path:
    """``<polyops package>/_cann_double``: where a polyops build puts the double."""
    return pathlib.Path(__file__).resolve().parent / "_cann_double"


def _choose_dir(library_dir: str | os.PathLike[str] | None) -> pathlib.Path:
    if library_dir is None and (named := os.environ.get(DOUBLE_DIR_ENV)):
        if not (pathlib.Path(named).expanduser() / "libascendcl.so").is_file():
            raise ValueError(
                f"{DOUBLE_DIR_ENV}={named!r}: expected the directory of the CANN test "
                "double's libraries (holding its libascendcl.so); unset it for the "
                "one polyops builds"
            )
    if library_dir is None:
        library_dir = os.environ.get(DOUBLE_DIR_ENV) or default_library_dir()
    return pathlib.Path(library_dir).expanduser().resolve()


def _device_count() -> int:
    """``POLYOPS_NPU_DEVICE_COUNT`` (default 2), or ValueError naming it and the range."""
    text = os.environ.get(DEVICE_COUNT_ENV, "2")
    try:
        count = int(text)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_DEVICES:
        raise ValueError(
            f"{DEVICE_COUNT_ENV} must be an integer in [1, {MAX_DEVICES}], got {text!r}"
        )
    return count


def _double_device_count(count: int) -> str:
    """The double's device count to set: the caller's choice if they made one, else `count`."""
    text = os.environ.get(DOUBLE_DEVICE_COUNT_ENV)
    if text is None:
        return str(count)
    try:
        valid = int(text) >= count
    except ValueError:
        valid = False
    if not valid:
        raise ValueError(
            f"{DOUBLE_DEVICE_COUNT_ENV} must be an integer >= {DEVICE_COUNT_ENV} ({count}), "
            f"got {text!r}: the double would not have npu:{count - 1}"
        )
    return text


def _activate_npu_device(runtime_path: pathlib.Path, count: int) -> None:
    """Bring up polyops._npu_device on `runtime_path` and expose it to torch as "npu"."""
    import torch

    try:
        from polyops import _npu_device
    except ImportError as error:
        raise RuntimeError(
            "polyops was built without its npu test device (polyops._npu_device); "
            "rebuild with -DWITH_NPU_TEST_DEVICE=ON"
        ) from error
    backend = torch._C._get_privateuse1_backend_name()
    if backend not in ("privateuseone", "npu"):
        raise RuntimeError(
            f"torch's PrivateUse1 backend is already named {backend!r}; "
            "the npu test device needs it, so run in a process without that backend"
        )
    _npu_device.init(str(runtime_path), count)
    if backend != "npu":
        torch.utils.rename_privateuse1_backend("npu")
    if not hasattr(torch, "npu"):
        from polyops import _npu_module

        torch._register_device_module("npu", _npu_module)
    if not hasattr(torch.Tensor, "is_npu"):
        torch.utils.generate_methods_for_privateuse1_backend()


def use_cann_double(library_dir: str | os.PathLike[str] | None = None) -> None:
    """Use the CANN test double's libraries in this process.

    `library_dir` holds ``libascendcl.so`` (and the double's other libraries);
    default: ``$POLYOPS_CANN_DOUBLE_DIR``, else :func:`default_library_dir`.
    The directory is recorded in :data:`active_library_dir` and in
    ``os.environ["POLYOPS_CANN_LIB_DIR"]`` for the polyops Ascend loader.
    When torch_npu is not importable, this also initialises the "npu" torch
    device on the double's runtime: ``torch.npu`` is registered, tensors
    ``.to("npu")`` work, ``POLYOPS_NPU_DEVICE_COUNT`` (default 2) devices.
    A ``POLYOPS_NPU_DEVICE_COUNT`` that is not an integer in [1, 16] raises
    ValueError, as does a ``POLYOPS_CANN_DOUBLE_DEVICE_COUNT`` (the double's
    own count, default: the npu count) below the npu count; a failed call
    changes no setting, so it can be retried in the same process.

    Call it before any npu use. A second call with the same directory does
    nothing; a different directory raises RuntimeError (a process can hold one
    CANN runtime: start a fresh process). Raises FileNotFoundError when the
    directory passed has no ``libascendcl.so``, ValueError when
    ``$POLYOPS_CANN_DOUBLE_DIR`` names such a directory.
    """
    global active_library_dir, _runtime
    with _lock:
        directory = _choose_dir(library_dir)
        if active_library_dir is not None:
            if directory == active_library_dir:
                return
            raise RuntimeError(
                f"the CANN double is already active from {active_library_dir}; "
                f"switching to {directory} needs a fresh process"
            )
        runtime_path = directory / "libascendcl.so"
        if not runtime_path.is_file():
            raise FileNotFoundError(
                f"no libascendcl.so in {directory}: build the CANN test double there, "
                f"or pass its directory (or set {DOUBLE_DIR_ENV})"
            )
        count = _device_count()
        # The double's runtime reads its device count when it loads. An
        # activation that fails leaves the variable as it found it, so a
        # retry with other settings starts from the same state.
        previous = os.environ.get(DOUBLE_DEVICE_COUNT_ENV)
        os.environ[DOUBLE_DEVICE_COUNT_ENV] = _double_device_count(count)
        try:
            if importlib.util.find_spec("torch_npu") is None:
                _activate_npu_device(runtime_path, count)
            # The same path dlopen'ed again gives the handle the device holds, so
            # the call log and live-byte counters read below are the device's.
            _runtime = ctypes.CDLL(str(runtime_path))
        except BaseException:
            if previous is None:
                del os.environ[DOUBLE_DEVICE_COUNT_ENV]
            else:
                os.environ[DOUBLE_DEVICE_COUNT_ENV] = previous
            raise
        os.environ[LIB_DIR_ENV] = str(directory)
        active_library_dir = directory


def _double_function(name: str, restype: Any) -> Any:
    if _runtime is None:
        raise RuntimeError("the CANN double is not active: call use_cann_double() first")
    try:
        function = getattr(_runtime, name)
    except AttributeError:
        raise RuntimeError(
            f"{_runtime._name} has no {name}: it is not the CANN test double"
        ) from None
    function.argtypes = []
    function.restype = restype
    return function


def cann_calls() -> list[dict[str, Any]]:
    """The double's call log: one dict per recorded call, oldest first.

    Records carry ``function``, ``phase``, ``workspace``, ``stream``,
    ``executor`` and ``status`` (as the double writes them).
    """
    text = _double_function("polyopsDoubleCallLog", ctypes.c_char_p)()
    return json.loads(text.decode()) if text else []


def clear_cann_calls() -> None:
    """Empty the double's call log."""
    _double_function("polyopsDoubleClearCallLog", None)()


def cann_live_bytes() -> int:
    """Bytes of device memory currently allocated from the double (aclrtMalloc - aclrtFree)."""
    return int(_double_function("polyopsDoubleLiveBytes", ctypes.c_size_t)())
