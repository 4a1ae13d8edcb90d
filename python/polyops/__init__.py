"""polyops: one operator library for CPU, NVIDIA CUDA and Huawei Ascend tensors.

Every operator is a plain function on torch tensors, e.g.
``polyops.rms_norm(x, w, 1e-6)``. Each has numbered implementations per
device; pick one per call with ``implementation_index=`` or let the selection
policy choose (see :func:`set_default_implementation` and the
``POLYOPS_IMPLEMENTATIONS`` environment variable). The op functions are the
compiled bindings themselves: no Python frame sits between a call and the
kernel.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

# Loads OpenBLAS (RTLD_GLOBAL) before _C, which links it: _C then finds it
# by its soname whatever its rpath says.
import scipy_openblas32  # noqa: F401
import torch

from polyops import _C, _autotune, _onednn, _support, _torch_library
from polyops._autotune import autotune, autotune_info, load_autotune, save_autotune


def _major_minor(version: str) -> tuple[str, ...]:
    return tuple(version.split("+")[0].split(".")[:2])


# polyops._C reads tensors through DLPack (torch >= 2.10 has the C exchange API).
# torch.ops.polyops comes from polyops._torch_ops (torch's C++ API, whose ABI
# changes between minor versions; also torch's device and stream of npu and
# cuda tensors) under the torch minor version polyops was built for, else
# from polyops._torch_stable (torch's stable ABI, CPU kernels; docs/user/torch.md,
# "Torch versions"). POLYOPS_TORCH_STABLE=1 picks the stable form anyway.
_torch_ops_error: str | None = None


def _stable_requested() -> bool:
    """POLYOPS_TORCH_STABLE: 0 or 1 (empty = 0), as every variable (docs/user/api.md)."""
    value = os.environ.get("POLYOPS_TORCH_STABLE", "")
    if value not in ("", "0", "1"):
        raise ValueError(
            f"polyops: environment variable POLYOPS_TORCH_STABLE must be 0 or 1, got {value!r}"
        )
    return value == "1"


_use_stable_abi = _stable_requested() or _major_minor(_C._torch_ops_version) != _major_minor(
    torch.__version__
)

# oneDNN (CPU matrix products, docs/backends/cpu_gemm.md) is opened at its first use,
# from the onednn-cpu-gomp wheel when installed, else the loader's path.
_C._onednn_set_library(_onednn.library_path() or "")

# Reads POLYOPS_CPU_ISA now, so that a bad value fails the import with a
# ValueError (docs/user/api.md, "Environment variables") instead of a kernel call.
_C._cpu_isa()

# The operators, as generated from src/base/*.h.
add = _C.add
add_rms_norm = _C.add_rms_norm
apply_rotary_pos_emb = _C.apply_rotary_pos_emb
cast = _C.cast
cat = _C.cat
causal_softmax = _C.causal_softmax
gemm = _C.gemm
linear = _C.linear
matmul = _C.matmul
mul = _C.mul
reshape_and_cache = _C.reshape_and_cache
flash_attention = _C.flash_attention
paged_attention = _C.paged_attention
rms_norm = _C.rms_norm
rotary_embedding = _C.rotary_embedding
silu_and_mul = _C.silu_and_mul
swiglu = _C.swiglu
topk_topp_sampling = _C.topk_topp_sampling

__version__ = "0.1.0"

_DEVICE_AVAILABLE = {
    "cpu": lambda: True,
    "cuda": lambda: torch.cuda.is_available(),
    "npu": lambda: hasattr(torch, "npu") and torch.npu.is_available(),
}


def devices() -> list[str]:
    """The devices polyops was built for and that are usable now: "cpu", "cuda", "npu"."""
    return [d for d in _C._built_devices if _DEVICE_AVAILABLE[d]()]


def operators() -> list[str]:
    """Every operator name, e.g. ``["add", "add_rms_norm", ...]``."""
    return list(_C._operators)


def implementations(
    op: str, device: str = "cpu", verbose: bool = False
) -> dict[int, str] | dict[int, dict[str, Any]]:
    """The implementation slots of `op` compiled in for `device`: ``{slot: name}``, in
    the order a call tries them (the slot table ``src/slots.txt``; the first is the
    default unless ``set_default_implementation`` overrides it).

    With ``verbose=True``: ``{slot: {"name", "default", "not_supported"}}``, where
    ``default`` says whether a call without ``implementation_index`` starts there and
    ``not_supported`` lists what the slot declares it refuses, each as
    ``{"refusal": regex of its NotImplementedError message, "reason": why}``
    (polyops/_support.py; the parity harness holds slots to these declarations).
    """
    slots = dict(_C._implementations(op, device))
    if not verbose:
        return slots
    default = _C._default_implementation(op, device)
    return {
        slot: {
            "name": name,
            "default": slot == default,
            "not_supported": [
                {"refusal": d.refusal, "reason": d.reason}
                for d in _support.not_supported(op, device, name)
            ],
        }
        for slot, name in slots.items()
    }


def default_implementation(op: str, device: str = "cpu") -> int | None:
    """The slot a call with ``implementation_index=None`` starts at (override or default).

    If that slot's constructor refuses the arguments (NotImplementedError), the call
    falls back to the device's next slot that accepts them (docs/user/api.md).
    """
    return _C._default_implementation(op, device)


def set_default_implementation(op: str, index: int | None, device: str | None = None) -> None:
    """Make slot `index` the default of `op` on `device`; ``index=None`` restores the default.

    With ``device=None`` the override applies to every built device that has
    slot `index` (at least one must); an explicit device must have it.
    Raises ValueError for an unknown op, device or slot.
    """
    if device is not None or op not in _C._operators:
        # An unknown op raises here, naming this function and the closest op name.
        _C._set_default_implementation(op, index, device or "cpu")
        return
    targets = _C._built_devices
    if index is not None:
        targets = [d for d in targets if index in _C._implementations(op, d)]
        if not targets:
            available = {d: _C._implementations(op, d) for d in _C._built_devices}
            raise ValueError(
                f"polyops.set_default_implementation: {op} has no "
                f"implementation_index={index} on any built device; available: {available}"
            )
    for target in targets:
        _C._set_default_implementation(op, index, target)


def cache_info(op: str | None = None) -> dict[str, int]:
    """Instance-cache counters: hits, misses, evictions, size, capacity.

    For one op, or summed over all ops when `op` is None (``capacity`` is then
    the per-op capacity).
    """
    return dict(_C._cache_info(op))


def set_cache_capacity(n: int) -> None:
    """Bound every op's instance cache to `n` >= 1 entries (default 256), evicting LRU."""
    _C._set_cache_capacity(n)


def clear_cache() -> None:
    """Drop every cached operator instance and reset the counters."""
    _C._clear_cache()


def _apply_environment(spec: str) -> None:
    """Apply ``POLYOPS_IMPLEMENTATIONS``: ``"rms_norm=1,add=0"`` (op=slot, comma separated)."""
    for item in filter(None, (part.strip() for part in spec.split(","))):
        op, sep, index = item.partition("=")
        if not sep or not index.strip().lstrip("-").isdigit():
            raise ValueError(
                f"POLYOPS_IMPLEMENTATIONS: expected entries like 'rms_norm=1', got {item!r}"
            )
        try:
            set_default_implementation(op.strip(), int(index))
        except ValueError as error:
            raise ValueError(f"POLYOPS_IMPLEMENTATIONS={spec!r}: {error}") from None


def torch_ops_registered() -> bool:
    """Whether ``import polyops`` registered the ops as ``torch.ops.polyops.<op>``.

    It does under every torch >= 2.10 (through polyops._torch_ops under the torch
    minor version polyops was built with, through polyops._torch_stable under any
    other) unless the registration failed (e.g. another library already defines
    the ``polyops`` namespace); a warning then says why. See docs/user/torch.md.
    """
    return _torch_ops_error is None


_apply_environment(os.environ.get("POLYOPS_IMPLEMENTATIONS", ""))
_autotune._apply_environment(os.environ.get("POLYOPS_AUTOTUNE_FILE", ""))

try:
    _torch_library.register(stable=_use_stable_abi)
except Exception as error:  # noqa: BLE001 - the fast functions work without it
    _torch_ops_error = f"{type(error).__name__}: {error}"
    warnings.warn(
        f"polyops: torch.ops.polyops is not available ({_torch_ops_error}); "
        "the polyops.<op> functions are unaffected",
        RuntimeWarning,
        stacklevel=2,
    )

__all__ = [
    "add",
    "add_rms_norm",
    "apply_rotary_pos_emb",
    "autotune",
    "autotune_info",
    "cache_info",
    "cast",
    "cat",
    "causal_softmax",
    "clear_cache",
    "default_implementation",
    "devices",
    "gemm",
    "flash_attention",
    "implementations",
    "linear",
    "load_autotune",
    "matmul",
    "mul",
    "operators",
    "reshape_and_cache",
    "paged_attention",
    "rms_norm",
    "rotary_embedding",
    "save_autotune",
    "set_cache_capacity",
    "set_default_implementation",
    "silu_and_mul",
    "swiglu",
    "topk_topp_sampling",
    "torch_ops_registered",
]
