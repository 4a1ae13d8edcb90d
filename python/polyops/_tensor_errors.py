"""Why a tensor cannot go to a polyops kernel: the slow path of the eager ops.

The eager ops (``polyops.<op>``) read tensors through DLPack
(``src/python/tensor_exchange.cc``); when a cheap check there fails, they call
:func:`explain`, which finds the reason with torch's Python API and raises the
error polyops documents for it (docs/user/api.md, "Errors"). Nothing here runs on a
call that succeeds.
"""

from __future__ import annotations

import torch

_DISABLED = torch._C._disabled_torch_dispatch_impl
_KEYS = torch._C.DispatchKey
_SUPPORTED_DTYPES = (
    torch.bool,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
)


def dispatches_in_python(cls: type) -> bool:
    """Whether instances of the torch.Tensor subclass ``cls`` dispatch through
    ``__torch_dispatch__`` (FakeTensor, FunctionalTensor, ...): their memory is not
    their values."""
    return getattr(cls, "__torch_dispatch__", _DISABLED) is not _DISABLED


def _has(keys: torch._C.DispatchKeySet, *names: str) -> bool:
    return any(hasattr(_KEYS, n) and keys.has(getattr(_KEYS, n)) for n in names)


def _storage_bytes(tensor: torch.Tensor) -> int | None:
    try:
        return tensor.untyped_storage().nbytes()
    except (RuntimeError, NotImplementedError):
        return None


def _unsupported(op: str, name: str, kind: str, advice: str = "") -> NotImplementedError:
    return NotImplementedError(
        f"polyops.{op} is not supported for {name} because it is {kind}{advice}"
    )


def _storage_error(tensor: torch.Tensor, op: str, name: str, nbytes: int) -> NotImplementedError:
    return NotImplementedError(
        f"polyops.{op} is not supported for {name} of shape {list(tensor.shape)} with "
        f"strides {list(tensor.stride())} and offset {tensor.storage_offset()} because its "
        f"storage holds no data for it (null data pointer or storage of {nbytes} bytes)"
    )


def explain(tensor: torch.Tensor, op: str, name: str, max_dims: int, reason: str) -> None:
    """Raises why ``tensor`` (argument ``name`` of ``polyops.<op>``) cannot be read as
    plain strided memory; returns if no reason is found (the caller then raises
    RuntimeError with ``reason``, what DLPack said)."""
    keys = torch._C._dispatch_keys(tensor)
    if _has(keys, "Negative", "Conjugate"):
        raise _unsupported(
            op,
            name,
            "a view with torch's negative or conjugate bit set (e.g. z.conj().imag), whose "
            "memory holds the values before negation",
            "; pass .resolve_neg() / .resolve_conj() of it",
        )
    if _has(keys, "Python", "PythonTLSSnapshot"):
        raise _unsupported(
            op,
            name,
            "a tensor subclass with __torch_dispatch__ (such as FakeTensor or "
            "FunctionalTensor) whose data polyops cannot read",
            "; use torch.ops.polyops, which torch dispatches for them",
        )
    if _has(keys, "Functionalize"):
        raise _unsupported(
            op,
            name,
            "a functionalization wrapper",
            "; use torch.ops.polyops inside functionalized code",
        )
    if _has(keys, "FuncTorchBatched", "BatchedNestedTensor"):
        raise _unsupported(
            op,
            name,
            "a vmap batched tensor",
            "; call polyops outside torch.vmap or use torch.ops.polyops",
        )
    if _has(keys, "FuncTorchGradWrapper"):
        raise _unsupported(op, name, "a torch.func transform wrapper")
    if _has(keys, "NestedTensor") or tensor.layout == torch.jagged:
        raise _unsupported(op, name, "a nested tensor", "; pass its dense components")
    if tensor.layout != torch.strided:
        raise ValueError(
            f"polyops.{op}: {name} must be a dense (strided) tensor, got layout {tensor.layout}"
        )
    nbytes = _storage_bytes(tensor)
    if nbytes is None:
        raise _unsupported(op, name, "a tensor without storage")
    if tensor.dim() > max_dims:
        raise ValueError(
            f"polyops.{op}: {name} has {tensor.dim()} dims; polyops supports at most {max_dims}"
        )
    device = tensor.device
    if device.type not in ("cpu", "cuda", torch._C._get_privateuse1_backend_name()):
        meta = (
            " (meta tensors have no data; torch.compile traces polyops through "
            "torch.ops.polyops, whose fake kernels handle them)"
            if device.type == "meta"
            else ""
        )
        raise NotImplementedError(
            f"polyops.{op} is not supported for {name} on device '{device}' because polyops "
            f"runs on cpu, cuda and npu tensors{meta}"
        )
    if tensor.dtype not in _SUPPORTED_DTYPES:
        raise NotImplementedError(
            f"polyops.{op} is not supported for {name}={tensor.dtype} because polyops handles "
            "bool, int8/16/32/64, uint8, float16, bfloat16, float32 and float64 only"
        )
    if tensor.numel() > 0:
        last = tensor.storage_offset() + sum(
            (size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride(), strict=True)
        )
        if tensor.data_ptr() == 0 or nbytes < (last + 1) * tensor.element_size():
            raise _storage_error(tensor, op, name, nbytes)
