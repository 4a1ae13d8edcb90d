"""``torch.npu`` for the npu test device.

:func:`polyops._cann_double.use_cann_double` registers this module as
``torch.npu`` when torch_npu is not installed. It offers the part of
torch_npu's ``torch.npu`` that polyops and its tests use: devices, streams
(``current_stream().npu_stream`` is the ``aclrtStream`` handle, as in
torch_npu) and synchronization. Importing it needs an initialised
``polyops._npu_device``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from polyops import _npu_device

_DeviceLike = int | str | torch.device | None


def _index(device: _DeviceLike) -> int:
    """The npu device index of `device` (None or an index-less "npu": the current one)."""
    if device is None:
        return _npu_device.current_device()
    if isinstance(device, int):
        return device
    device = torch.device(device)
    if device.type != "npu":
        raise ValueError(f"expected an npu device, got {device}")
    return _npu_device.current_device() if device.index is None else device.index


def is_available() -> bool:
    """True once the npu device is initialised (it is, when this module is registered)."""
    return _npu_device.is_initialized()


def is_initialized() -> bool:
    """Same as :func:`is_available`: the device initialises when it is activated."""
    return _npu_device.is_initialized()


def device_count() -> int:
    """Number of npu devices (``POLYOPS_NPU_DEVICE_COUNT`` at activation, default 2)."""
    return _npu_device.device_count()


def current_device() -> int:
    """The calling thread's current npu device index."""
    return _npu_device.current_device()


def set_device(device: _DeviceLike) -> None:
    """Make `device` the calling thread's current npu device (aclrtSetDevice)."""
    _npu_device.set_device(_index(device))


def synchronize(device: _DeviceLike = None) -> None:
    """Wait for all work on `device` (default: the current one): aclrtSynchronizeDevice."""
    _npu_device.synchronize(_index(device))


def _is_in_bad_fork() -> bool:
    """torch.manual_seed asks this before seeding a custom device; there is no fork state."""
    return False


def manual_seed(seed: int) -> None:
    """No-op: random ops on npu run through the CPU fallback and draw from the CPU generator.

    ``torch.manual_seed`` seeds that generator already.
    """
    del seed


def manual_seed_all(seed: int) -> None:
    """No-op, like :func:`manual_seed`."""
    del seed


class device:  # noqa: N801 -- the name torch.npu.device / torch.cuda.device have
    """Context manager that makes `device` current and restores the previous device."""

    def __init__(self, device: _DeviceLike) -> None:
        self.index = -1 if device is None else _index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = _npu_device.current_device()
        if self.index != -1:
            _npu_device.set_device(self.index)

    def __exit__(self, *exc_info: object) -> None:
        _npu_device.set_device(self.previous)


class Stream(torch.Stream):
    """An npu stream (an ``aclrtStream`` made with aclrtCreateStream).

    ``Stream()`` makes a new stream on the current device, ``Stream(device)``
    on `device`. Streams live until the process exits.
    """

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: int) -> Stream:
        if kwargs:  # stream_id / device_index / device_type: wrap an existing stream
            return super().__new__(cls, **kwargs)
        return super().__new__(cls, device=torch.device("npu", _index(device)), priority=priority)

    @property
    def npu_stream(self) -> int:
        """The ``aclrtStream`` handle as an int (torch_npu's ``Stream.npu_stream``)."""
        return _npu_device.stream_handle(self.device_index, self.stream_id)

    @property
    def _as_parameter_(self) -> int:
        """Lets ctypes pass the stream as its ``aclrtStream`` handle."""
        return self.npu_stream


def _wrap(device_index: int, stream_id: int) -> Stream:
    return Stream(
        stream_id=stream_id,
        device_index=device_index,
        device_type=_npu_device.DEVICE_TYPE,
    )


def current_stream(device: _DeviceLike = None) -> Stream:
    """The calling thread's current stream on `device` (default: the current device)."""
    return _wrap(*_npu_device.current_stream(_index(device)))


def default_stream(device: _DeviceLike = None) -> Stream:
    """The default stream (id 0) of `device`."""
    return _wrap(_index(device), 0)


def set_stream(stream: torch.Stream) -> None:
    """Make `stream` current on its device for the calling thread."""
    _npu_device.set_stream(stream.device_index, stream.stream_id)


@contextlib.contextmanager
def stream(stream: torch.Stream | None) -> Iterator[torch.Stream | None]:
    """Context manager: run on `stream` (and its device), then restore both.

    Like ``torch.cuda.stream``: the current device switches to the stream's
    device for the block, and the previous current streams of both devices
    come back afterwards. ``None`` changes nothing.
    """
    if stream is None:
        yield None
        return
    previous_device = _npu_device.current_device()
    _, previous_here = _npu_device.current_stream(previous_device)
    _, previous_there = _npu_device.current_stream(stream.device_index)
    _npu_device.set_device(stream.device_index)
    _npu_device.set_stream(stream.device_index, stream.stream_id)
    try:
        yield stream
    finally:
        _npu_device.set_stream(stream.device_index, previous_there)
        _npu_device.set_device(previous_device)
        _npu_device.set_stream(previous_device, previous_here)
