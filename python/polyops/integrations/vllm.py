"""polyops kernels under vLLM's custom-op names and schemas.

One call makes vLLM code (``torch.ops._C.rms_norm(out, x, w, eps)``, vLLM's
``_custom_ops`` wrappers, its kernel tests) run on polyops wherever vLLM's own
extension has no kernel::

    import polyops.integrations.vllm as polyops_vllm

    report = polyops_vllm.register()
    print(report)  # which ops and dispatch keys polyops took over, which it left

Ops, with vLLM's schemas verbatim (:data:`SCHEMAS`, from vLLM's
``csrc/torch_bindings.cpp``) and what each runs:

* ``_C::rms_norm(result, input, weight, epsilon)`` -> ``polyops.rms_norm(input,
  weight, epsilon, out=result)``.
* ``_C::fused_add_rms_norm(input, residual, weight, epsilon)`` -> in place:
  ``residual = input + residual`` (rounded to the dtype), ``input =
  rms_norm(residual) * weight``, i.e. ``polyops.add_rms_norm(input, residual,
  weight, epsilon, y_out=input, x_out=residual)``.
* ``_C::silu_and_mul(result, input)`` -> ``polyops.silu_and_mul(input,
  out=result)`` on the device's ``"vllm"`` slot (vLLM's rounding order: silu
  rounded to the dtype before the multiply); a device without one runs its
  default slot and the report says so.
* ``_C::rotary_embedding(positions, query, key, head_size, cos_sin_cache,
  is_neox)`` -> ``polyops.rotary_embedding`` in place; positions of any shape
  whose dims lead query's and key's (vLLM's older [batch, seq] layout) are
  flattened with them (ValueError naming the shapes when they differ, or when
  query/key's leading dims cannot be viewed as one token dim).
* ``_C_cache_ops::reshape_and_cache_flash(key, value, key_cache, value_cache,
  slot_mapping, kv_cache_dtype, k_scale, v_scale)`` -> ``polyops.reshape_and_cache``
  for ``kv_cache_dtype == "auto"`` (the scales are then unused, as in vLLM);
  any other kv_cache_dtype (fp8) raises NotImplementedError. As in vLLM, the
  token count is ``slot_mapping``'s: key/value rows past it (CUDA-graph
  padding) are not written.

Dispatch keys: CPU, CUDA and PrivateUse1 (the "npu" device), for the devices
polyops was built for. An op vLLM's extension already defined keeps its
schema and its kernels: polyops only fills the dispatch keys that have no
kernel, and leaves an op alone when vLLM's schema differs from the one above
(another vLLM version). Each op gets a fake (meta) implementation that
validates the polyops call it maps to, so torch.compile traces it and a bad
call fails while tracing, and an Autograd kernel that refuses tensors
requiring grad (no op has a backward) on the keys polyops serves. Attention
and sampling are not mapped: see docs/user/vllm.md for why, and for every known
difference from vLLM.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

import torch

import polyops

if not polyops.torch_ops_registered():
    raise ImportError(
        f"polyops.integrations.vllm needs torch.ops.polyops: {polyops._torch_ops_error}"
    )

from polyops import _C, _torch_library  # noqa: E402

#: vLLM's schemas, verbatim from its csrc/torch_bindings.cpp (the ``_C`` and
#: ``_C_cache_ops`` libraries of the CUDA build), keyed by qualified name.
SCHEMAS: dict[str, str] = {
    "_C::rms_norm": "rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()",
    "_C::fused_add_rms_norm": (
        "fused_add_rms_norm(Tensor! input, Tensor! residual, Tensor weight, float epsilon) -> ()"
    ),
    "_C::silu_and_mul": "silu_and_mul(Tensor! result, Tensor input) -> ()",
    "_C::rotary_embedding": (
        "rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, "
        "Tensor cos_sin_cache, bool is_neox) -> ()"
    ),
    "_C_cache_ops::reshape_and_cache_flash": (
        "reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, "
        "Tensor! value_cache, Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, "
        "Tensor v_scale) -> ()"
    ),
}

#: polyops device -> torch dispatch key.
DISPATCH_KEYS: dict[str, str] = {"cpu": "CPU", "cuda": "CUDA", "npu": "PrivateUse1"}

# Keys whose kernel serves every backend: a vLLM op with one of these is
# taken as implemented everywhere.
_COMPOSITE_KEYS = ("CompositeExplicitAutograd", "CompositeImplicitAutograd")


@dataclasses.dataclass(frozen=True)
class RegistrationReport:
    """What :func:`register` did.

    Attributes:
        registered: qualified op name -> dispatch keys whose kernel is now
            polyops' (this call's and earlier calls' registrations).
        skipped: qualified op name -> {dispatch key, or ``"*"`` for the whole
            op: why polyops did not register it there}.
        notes: qualified op name -> a semantic difference from vLLM that
            applies to what was registered.
    """

    registered: dict[str, tuple[str, ...]]
    skipped: dict[str, dict[str, str]]
    notes: dict[str, str]

    def taken_over(self) -> list[str]:
        """The ops polyops serves on at least one dispatch key."""
        return sorted(op for op, keys in self.registered.items() if keys)

    def __str__(self) -> str:
        lines = ["polyops.integrations.vllm:"]
        for op in SCHEMAS:
            keys = self.registered.get(op, ())
            lines.append(f"  {op}: polyops on {', '.join(keys) if keys else 'no key'}")
            for key, why in self.skipped.get(op, {}).items():
                lines.append(f"    left {key}: {why}")
            if op in self.notes:
                lines.append(f"    note: {self.notes[op]}")
        return "\n".join(lines)


# ---------------------------------------------------------------------------
# Kernels: vLLM's arguments onto polyops' calls. Each mapping returns the
# polyops op, its arguments and a note for its ValueErrors (what the mapping
# changed, so the message names the caller's tensors); the kernel runs the
# call, the fake validates it (polyops._torch_library.check).

# device type -> the silu_and_mul slot with vLLM's rounding (None: default).
_silu_slots: dict[str, int | None] = {}

_Call = tuple[str, dict[str, object], str]


def _rms_norm(
    result: torch.Tensor, input: torch.Tensor, weight: torch.Tensor, epsilon: float
) -> _Call:
    return "rms_norm", {"input": input, "weight": weight, "eps": epsilon, "out": result}, ""


def _fused_add_rms_norm(
    input: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, epsilon: float
) -> _Call:
    arguments = {"x1": input, "x2": residual, "gamma": weight, "eps": epsilon}
    return "add_rms_norm", {**arguments, "y_out": input, "x_out": residual}, ""


def _silu_and_mul(result: torch.Tensor, input: torch.Tensor) -> _Call:
    slot = _silu_slots.get(input.device.type)
    return "silu_and_mul", {"input": input, "out": result, "implementation_index": slot}, ""


def _shape(tensor: torch.Tensor | None) -> str:
    return "None" if tensor is None else str(list(tensor.shape))


def _rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> _Call:
    arguments = {"head_size": head_size, "cos_sin_cache": cos_sin_cache, "is_neox_style": is_neox}
    lead = positions.dim()
    if lead <= 1:
        tensors = {"positions": positions, "query": query, "key": key}
        return "rotary_embedding", {**tensors, **arguments}, ""
    # vLLM's [batch, seq] positions: the tokens of query and key's leading dims.
    label = "_C.rotary_embedding (polyops)"
    given = f"positions {_shape(positions)}, query {_shape(query)}, key {_shape(key)}"
    leading = tuple(positions.shape)
    if any(t is not None and tuple(t.shape[:lead]) != leading for t in (query, key)):
        raise ValueError(
            f"{label}: query, key and positions must have the same batch_size and seq_len "
            f"(positions' shape must lead query's and key's), got {given}"
        )

    def tokens(tensor: torch.Tensor, name: str) -> torch.Tensor:
        # A view, so the rotation lands in the caller's tensor. (torch raises
        # RuntimeError for real tensors, ValueError for fake ones.)
        try:
            return tensor.view(-1, *tensor.shape[lead:])
        except (RuntimeError, ValueError):
            raise ValueError(
                f"{label}: {name} of shape {_shape(tensor)} and strides {list(tensor.stride())} "
                f"cannot be read as tokens: its dims {list(leading)} must be one strided run "
                f"(viewable as [-1, ...]); it is updated in place, so polyops cannot copy it"
            ) from None

    query = tokens(query, "query")
    key = None if key is None else tokens(key, "key")
    flat = {"positions": positions.reshape(-1), "query": query, "key": key, **arguments}
    return "rotary_embedding", flat, f" ({label} flattened {given} to tokens)"


def _reshape_and_cache_flash(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    kv_cache_dtype: str,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
) -> _Call:
    if kv_cache_dtype != "auto":
        raise NotImplementedError(
            "_C_cache_ops.reshape_and_cache_flash (polyops): kv_cache_dtype must be "
            f"'auto' (caches in key's dtype), got {kv_cache_dtype!r}: polyops has no "
            "quantized (fp8) KV cache"
        )
    tokens = slot_mapping.shape[0] if slot_mapping.dim() else 0
    if key.dim() and key.shape[0] > tokens:
        key, value = key[:tokens], value[:tokens]
    caches = {"key_cache": key_cache, "value_cache": value_cache, "slot_mapping": slot_mapping}
    return "reshape_and_cache", {"key": key, "value": value, **caches}, ""


_CALLS: dict[str, Callable[..., _Call]] = {
    "_C::rms_norm": _rms_norm,
    "_C::fused_add_rms_norm": _fused_add_rms_norm,
    "_C::silu_and_mul": _silu_and_mul,
    "_C::rotary_embedding": _rotary_embedding,
    "_C_cache_ops::reshape_and_cache_flash": _reshape_and_cache_flash,
}


def _noting(note: str, run: Callable[[], object]) -> None:
    try:
        run()
    except ValueError as error:
        if not note:
            raise
        raise ValueError(f"{error}{note}") from None


def _kernel(qualname: str) -> Callable[..., None]:
    call = _CALLS[qualname]

    def kernel(*args: object) -> None:
        op, arguments, note = call(*args)
        _noting(note, lambda: getattr(polyops, op)(**arguments))

    return kernel


def _fake(qualname: str) -> Callable[..., None]:
    """Every mapped op only mutates its arguments: the fake allocates nothing. It validates
    the polyops call (and pins written offsets, see _torch_library.pin_storage_offset) where
    polyops runs the op: everywhere for an op polyops defined, else on the devices whose
    keys it took, so vLLM's own kernels keep their tracing behaviour."""
    call = _CALLS[qualname]
    namespace, name = qualname.split("::")
    arguments = torch._C.parse_schema(f"{namespace}::{SCHEMAS[qualname]}").arguments
    written = [
        (i, a.name) for i, a in enumerate(arguments) if a.alias_info and a.alias_info.is_write
    ]

    def fake(*args: object) -> None:
        device = next(a.device.type for a in args if isinstance(a, torch.Tensor))
        if qualname not in _defined and DISPATCH_KEYS.get(device) not in _ours[qualname]:
            return
        for index, argument in written:
            _torch_library.pin_storage_offset(args[index], f"{namespace}.{name}", argument)
        op, values, note = call(*args)
        _noting(note, lambda: _torch_library.check(op, "", values))

    return fake


# ---------------------------------------------------------------------------
# Registration

_lock = threading.Lock()
# Libraries must outlive the registrations they made (dropping one removes
# them); one per namespace, kept for the life of the process.
_libraries: dict[str, torch.library.Library] = {}
# qualname -> dispatch keys registered by this module.
_ours: dict[str, set[str]] = {}
# The ops this module defined (vLLM's extension had not).
_defined: set[str] = set()


def _library(namespace: str) -> torch.library.Library:
    if namespace not in _libraries:
        _libraries[namespace] = torch.library.Library(namespace, "FRAGMENT")
    return _libraries[namespace]


def _existing_schema(qualname: str) -> torch._C.FunctionSchema | None:
    namespace, name = qualname.split("::")
    try:
        return getattr(getattr(torch.ops, namespace), name).default._schema
    except (AttributeError, RuntimeError):
        return None


def _signature(schema: torch._C.FunctionSchema) -> list[tuple[str, bool]]:
    """Argument and return types with their write flags (names may differ)."""
    items = list(schema.arguments) + list(schema.returns)
    return [(str(a.type), bool(a.alias_info and a.alias_info.is_write)) for a in items]


def _vllm_slot(device: str) -> int | None:
    slots = polyops.implementations("silu_and_mul", device)
    return next((slot for slot, name in slots.items() if name == "vllm"), None)


def register(devices: Sequence[str] | None = None) -> RegistrationReport:
    """Register polyops kernels under vLLM's op names; see the module docstring.

    Args:
        devices: polyops devices to serve ("cpu", "cuda", "npu"); default every
            device polyops was built for (a device whose runtime is absent
            only gets a kernel that is never called).

    Returns:
        A :class:`RegistrationReport`. Calling again is harmless: keys this
        module already took stay registered and are listed again.

    Raises:
        ValueError: an unknown device, or one polyops was not built for.
    """
    built = list(_C._built_devices)
    targets = built if devices is None else list(devices)
    for device in targets:
        if device not in DISPATCH_KEYS or device not in built:
            raise ValueError(
                "polyops.integrations.vllm.register: devices must be among "
                f"{built} (the devices polyops was built for), got {device!r}"
            )
    skipped: dict[str, dict[str, str]] = {}
    notes: dict[str, str] = {}
    with _lock:
        for device in targets:
            _silu_slots[device] = _vllm_slot(device)
        for qualname, schema_text in SCHEMAS.items():
            namespace, name = qualname.split("::")
            ours = _ours.setdefault(qualname, set())
            wanted = torch._C.parse_schema(f"{namespace}::{schema_text}")
            existing = _existing_schema(qualname)
            lib = _library(namespace)
            if existing is None:
                lib.define(schema_text)
                _defined.add(qualname)
                torch.library.register_fake(qualname, _fake(qualname), lib=lib)
                _torch_library.refuse_autograd(qualname, "Autograd")
            elif _signature(existing) != _signature(wanted):
                skipped[qualname] = {
                    "*": f"already defined with another schema ({existing}); polyops "
                    f"implements {wanted} (another vLLM version)"
                }
                continue
            reasons: dict[str, str] = {}
            for device in targets:
                key = DISPATCH_KEYS[device]
                if key in ours:
                    continue
                composite = next(
                    (
                        k
                        for k in _COMPOSITE_KEYS
                        if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, k)
                    ),
                    None,
                )
                if composite is not None:
                    reasons[key] = f"has a {composite} kernel, which serves every backend"
                elif torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key):
                    reasons[key] = "already has a kernel (vLLM's extension); left in place"
                else:
                    lib.impl(name, _kernel(qualname), key)
                    ours.add(key)
                    _refuse_autograd(qualname, key)
            if existing is not None and ours and not _has_fake(qualname):
                torch.library.register_fake(qualname, _fake(qualname), lib=lib)
            if reasons:
                skipped[qualname] = reasons
        missing = [d for d in targets if _silu_slots[d] is None]
        if missing and _ours.get("_C::silu_and_mul"):
            notes["_C::silu_and_mul"] = (
                f"no 'vllm' slot on {', '.join(missing)}: the default slot runs there, "
                "which rounds float16/bfloat16 once (up to 2 ulp from vLLM)"
            )
        registered = {q: tuple(k for k in DISPATCH_KEYS.values() if k in _ours[q]) for q in SCHEMAS}
    return RegistrationReport(registered=registered, skipped=skipped, notes=notes)


def _refuse_autograd(qualname: str, key: str) -> None:
    """Refuse tensors that require grad on the key polyops now serves (vLLM's ops have no
    autograd formulas either), unless vLLM's extension registered autograd there."""
    autograd = f"Autograd{key}"
    if not any(
        torch._C._dispatch_has_kernel_for_dispatch_key(qualname, k) for k in ("Autograd", autograd)
    ):
        _torch_library.refuse_autograd(qualname, autograd)


def _has_fake(qualname: str) -> bool:
    """Whether the op already has a fake (Python) or Meta (C++) kernel."""
    if torch._C._dispatch_has_kernel_for_dispatch_key(qualname, "Meta"):
        return True
    try:
        from torch._library.simple_registry import singleton
    except ImportError:  # older torch: register_fake reports a duplicate itself
        return False
    return singleton.find(qualname).fake_impl.kernel is not None
