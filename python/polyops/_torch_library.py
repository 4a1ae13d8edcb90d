"""Registers every polyops op as ``torch.ops.polyops.<op>``, for code that torch.compile traces.

The schemas and the kernels are generated from ``src/base/*.h`` (see
``scripts/generate_wrappers.py``), with an Autograd kernel that refuses tensors
requiring grad (polyops has no derivative formulas). Two modules register them
(docs/user/torch.md, "Torch versions"): ``polyops._torch_ops`` (torch's C++ API) under
the torch polyops was built with, else ``polyops._torch_stable`` (torch's stable
ABI) with the schemas defined and the Autograd kernel written here. This module
also adds what torch.compile needs: a fake implementation per overload. Each
fake first validates the call as the real kernel does, by running the op's C++
base class constructor on the arguments' metadata (:func:`check`), then gives
the outputs' shapes and dtypes: overloads
that only mutate return nothing; the ones that return tensors use the shape
rules below, one per ``Default<Out>`` of the C++ headers (tests check both
against the real kernels with ``torch.library.opcheck``, including symbolic
shapes, and the rules against ``Default<Out>``).

See docs/user/torch.md for when to use ``torch.ops.polyops.<op>`` rather than
``polyops.<op>``, and for the torch.compile limitations.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch

from polyops import _C
from polyops._tensor_errors import explain

Values = Mapping[str, Any]


def _like(name: str) -> Callable[[Values], torch.Tensor]:
    """MetaLike(<name>): same shape and dtype, contiguous."""
    return lambda v: v[name].new_empty(v[name].shape)


def _cast(v: Values) -> torch.Tensor:
    return v["input"].new_empty(v["input"].shape, dtype=v["dtype"])


def _cat(v: Values) -> torch.Tensor:
    tensors, dim = v["tensors"], v["dim"]
    first = tensors[0]
    ndim = first.dim()
    shape = list(first.shape)
    if ndim and -ndim <= dim < ndim:  # else the kernel raises
        dim %= ndim
        shape[dim] = sum(t.shape[dim] for t in tensors if t.dim() == ndim)
    return first.new_empty(shape)


def _product(a: torch.Tensor, trans_a: bool, b: torch.Tensor, trans_b: bool) -> torch.Tensor:
    """GemmBase::ProductMeta: op(a) @ op(b) for 2-D / batched 3-D operands."""
    if not (2 <= a.dim() <= 3 and 2 <= b.dim() <= 3):
        return a.new_empty(a.shape)  # the kernel raises
    m = a.shape[-1] if trans_a else a.shape[-2]
    n = b.shape[-2] if trans_b else b.shape[-1]
    if a.dim() == 2 and b.dim() == 2:
        return a.new_empty((m, n))
    batch = a.shape[0] if a.dim() == 3 else b.shape[0]
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] == 1:
        batch = b.shape[0]
    return a.new_empty((batch, m, n))


def _broadcast(v: Values) -> torch.Tensor:
    """BinaryElementwise::DefaultOut: the broadcast shape of input and other, input's dtype."""
    input, other = v["input"], v["other"]
    try:
        shape = torch.broadcast_shapes(input.shape, other.shape)
    except RuntimeError:
        shape = input.shape  # the kernel raises
    return input.new_empty(shape)


def _matmul(v: Values) -> torch.Tensor:
    """Matmul::DefaultOut: torch.matmul's result shape (1-D operands, broadcast batch dims)."""
    a, b = v["input"], v["other"]
    if a.dim() < 1 or b.dim() < 1:
        return a.new_empty(a.shape)  # the kernel raises
    try:
        batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except RuntimeError:
        return a.new_empty(a.shape)  # the kernel raises
    rows = (a.shape[-2],) if a.dim() >= 2 else ()
    columns = (b.shape[-1],) if b.dim() >= 2 else ()
    return a.new_empty((*batch, *rows, *columns))


def _linear(v: Values) -> torch.Tensor:
    x, weight = v["input"], v["weight"]
    shape = list(x.shape)
    if shape and weight.dim():
        shape[-1] = weight.shape[0]
    return x.new_empty(shape)


def _silu_and_mul(v: Values) -> torch.Tensor:
    shape = list(v["input"].shape)
    if shape:
        shape[-1] //= 2
    return v["input"].new_empty(shape)


def _sampling(v: Values) -> torch.Tensor:
    logits = v["logits"]
    return logits.new_empty((logits.shape[0] if logits.dim() else 0,), dtype=torch.int64)


#: op -> output -> shape rule; mirrors the Default<Out> functions of src/base/<op>.h.
SHAPE_RULES: dict[str, dict[str, Callable[[Values], torch.Tensor]]] = {
    "add": {"out": _broadcast},
    "add_rms_norm": {"y_out": _like("x1"), "x_out": _like("x1")},
    "cast": {"out": _cast},
    "cat": {"out": _cat},
    "causal_softmax": {"out": _like("input")},
    "flash_attention": {"out": _like("query")},
    "gemm": {"out": lambda v: _product(v["a"], v["trans_a"], v["b"], v["trans_b"])},
    "linear": {"out": _linear},
    "matmul": {"out": _matmul},
    "mul": {"out": _broadcast},
    "paged_attention": {"out": _like("query")},
    "rms_norm": {"out": _like("input")},
    "silu_and_mul": {"out": _silu_and_mul},
    "swiglu": {"out": _like("input")},
    "topk_topp_sampling": {"out": _sampling},
}


class _NoHint(Exception):
    """A symbolic size without a value in the example inputs (data-dependent)."""


def _hint(value: Any) -> Any:
    """A symbolic number's value in the example inputs; other values unchanged."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        if value.node.hint is None:
            raise _NoHint
        return value.node.hint
    return value


def _device(device: torch.device) -> tuple[str, int, str]:
    """(type, index, text) with polyops' type names: torch's PrivateUse1 backend is "npu"."""
    kind = device.type
    if kind == torch._C._get_privateuse1_backend_name():
        kind = "npu"
    return (kind, -1 if device.index is None else device.index, str(device))


def _metadata(value: Any) -> Any:
    """`value` as CheckMeta reads it: a tensor becomes (sizes, strides, dtype, device)."""
    if isinstance(value, torch.Tensor):
        return (
            tuple(_hint(s) for s in value.shape),
            tuple(_hint(s) for s in value.stride()),
            value.dtype,
            _device(value.device),
        )
    if isinstance(value, (list, tuple)):
        return [_metadata(v) for v in value]
    return _hint(value)


def check(op: str, overload: str, values: Values) -> list[tuple[tuple[int, ...], torch.dtype]]:
    """Raise what polyops.<op> would raise for these arguments' shapes, dtypes and devices.

    Runs the op's C++ base class constructor (``src/base/<op>.h``, the checks
    every slot runs) on views without data, so a fake kernel refuses exactly
    what the real kernel refuses, before anything is compiled or run. Not
    checked here, because they need memory: overlap between arguments, index
    values (positions, slots), a view outside its storage.

    Symbolic sizes (``torch.compile(dynamic=True)``) are validated with their
    values in the example inputs, without guards: the shapes polyops relates
    (e.g. rms_norm's hidden size and weight) are one symbol already when they
    were equal, and the kernel validates every call again when it runs. A
    size without a value (data-dependent) skips the check.

    Args:
        op: the op name, e.g. ``"rms_norm"``.
        overload: the ``torch.ops.polyops`` overload ("" for the default one).
        values: argument name -> value (tensors, numbers, dtypes, None).

    Returns:
        (shape, dtype) of each output the overload allocates, from the C++
        ``Default<Out>`` functions ([] when the check was skipped).
    """
    try:
        metadata = {name: _metadata(value) for name, value in values.items()}
    except _NoHint:
        return []
    return [tuple(result) for result in _C._check_meta(op, overload, metadata)]


@functools.cache
def _inductor_lowers_storage_offset() -> bool:
    from torch._inductor.lowering import lowerings

    return torch.ops.aten.sym_storage_offset.default in lowerings


def pin_storage_offset(tensor: torch.Tensor | None, op: str, name: str) -> None:
    """Make a written tensor's symbolic storage offset concrete.

    Inductor has no lowering for ``aten.sym_storage_offset``
    (pytorch/pytorch#198068): when an op writes a view whose offset depends
    on a dynamic size (``out=x[2]`` under ``dynamic=True``), the compiled code
    writes at offset 0. This specializes the sizes the offset depends on to
    their values (guards: one compile per distinct value), after which the
    offset is a constant Inductor handles. An offset that depends on a
    data-dependent size cannot be specialized and is refused. See
    docs/user/torch.md, "torch.compile limitations".
    """
    if tensor is None:
        return
    offset = tensor.storage_offset()
    if not isinstance(offset, torch.SymInt) or _inductor_lowers_storage_offset():
        return
    env = offset.node.shape_env
    for symbol in sorted(offset.node.expr.free_symbols, key=str):
        hint = _guarding_hint(env, symbol)
        if hint is None:
            raise NotImplementedError(
                f"polyops.{op}: {name} is a view whose storage offset ({offset}) depends on a "
                "data-dependent size; torch.compile's Inductor would write it at offset 0 "
                "(it has no lowering for aten.sym_storage_offset): pass a tensor whose offset "
                "does not depend on the data"
            )
        int(env.create_symintnode(symbol, hint=hint))  # guards symbol == hint


def _guarding_hint(env: Any, symbol: Any) -> int | None:
    """`symbol`'s value in the example inputs, None for a data-dependent size."""
    if hasattr(env, "has_guarding_hint"):  # newer torch (2.13 has it, 2.10 does not)
        return env.guarding_hint_or_throw(symbol) if env.has_guarding_hint(symbol) else None
    value = env.var_to_val.get(symbol)  # unbacked (data-dependent) symbols have none
    return None if value is None else int(value)


def _make_fake(
    op: str,
    overload: str,
    schema: torch._C.FunctionSchema,
    rules: list[Callable[[Values], torch.Tensor]],
):
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    defaults = {a.name: a.default_value for a in schema.arguments if a.has_default_value()}
    written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]

    def fake(*args: Any, **kwargs: Any) -> torch.Tensor | tuple[torch.Tensor, ...] | None:
        values = {**defaults, **_bind(positional, args, kwargs)}
        for name in written:
            pin_storage_offset(values[name], op, name)
        check(op, overload, values)
        results = tuple(rule(values) for rule in rules)
        if not results:
            return None
        return results[0] if len(results) == 1 else results

    return fake


# The stable form (polyops._torch_stable): schemas defined here, kept for the process.
_library: torch.library.Library | None = None
_impl_libraries: list[torch.library.Library] = []
_stable = False


def _label(qualname: str) -> str:
    """The name polyops' messages use: "polyops::add" -> "add", "_C::rms_norm" -> "_C.rms_norm"."""
    namespace, name = qualname.split("::")
    return name if namespace == "polyops" else f"{namespace}.{name}"


def _bind(positional: list[str], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """A kernel's arguments by name, as the dispatcher passed them."""
    return {**dict(zip(positional, args, strict=False)), **kwargs}


def _named_tensors(values: Values, names: list[str]):
    """(name, tensor) for every tensor among `values[name]`, lists included."""
    for name in names:
        value = values.get(name)
        for tensor in value if isinstance(value, (list, tuple)) else (value,):
            if isinstance(tensor, torch.Tensor):
                yield name, tensor


def refuse_grad(label: str, values: Values, tensors: list[str], written: list[str]) -> None:
    """What polyops.<op> refuses before it runs, in the same order and with the same
    messages (src/python/tensor_exchange.cc): a written inference tensor outside
    inference mode or a written leaf that requires grad (RuntimeError, as torch), then,
    with grad mode on, any tensor that requires grad (NotImplementedError)."""
    grad = torch.is_grad_enabled()
    for name, tensor in _named_tensors(values, written):
        if tensor.is_inference() and not torch.is_inference_mode_enabled():
            raise RuntimeError(
                f"polyops.{label}: {name} is an inference tensor; in-place update to an "
                "inference tensor outside InferenceMode is not allowed (as in torch)"
            )
        if grad and tensor.requires_grad and tensor.is_leaf:
            raise RuntimeError(
                f"polyops.{label}: {name} is a leaf tensor that requires grad and cannot be "
                "written in place (as in torch); write under torch.no_grad() or pass a "
                "tensor that does not require grad"
            )
    if not grad:
        return
    for name, tensor in _named_tensors(values, tensors):
        if tensor.requires_grad:
            raise NotImplementedError(
                f"polyops.{label} does not support autograd: {name} requires grad and "
                "grad mode is on; call it under torch.no_grad() or "
                f"torch.inference_mode(), or pass {name}.detach()"
            )


def _autograd_kernel(qualname: str, packet: Any, schema: torch._C.FunctionSchema):
    """The Autograd kernel of the stable form, in Python because a stable-ABI kernel can
    neither redispatch nor read requires_grad or version counters: refuse what
    polyops.<op> refuses, run the op below autograd, bump the written tensors' versions,
    and give NotImplementedError back the type a stable kernel cannot raise."""
    from polyops import _torch_stable

    label = _label(qualname)
    overload = getattr(packet, schema.overload_name or "default")
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    tensors = [a.name for a in schema.arguments if "Tensor" in str(a.type)]
    written = [a.name for a in schema.arguments if a.alias_info and a.alias_info.is_write]
    below = torch._C._AutoDispatchBelowAutograd
    increment_version = torch.autograd.graph.increment_version

    def kernel(*args: Any, **kwargs: Any) -> Any:
        values = _bind(positional, args, kwargs)
        refuse_grad(label, values, tensors, written)
        with below():
            try:
                result = overload(*args, **kwargs)
            except RuntimeError as error:
                kind = _torch_stable._take_error_kind()
                if kind == "UnsupportedTensor":  # which tensor, and why, as polyops.<op> says
                    for name, tensor in _named_tensors(values, tensors):
                        explain(tensor, label, name, _torch_stable._max_dims, "")
                if kind:
                    raise NotImplementedError(str(error)) from None
                raise
        for _, tensor in _named_tensors(values, written):
            increment_version(tensor)
        return result

    return kernel


def _eager_kernel(op: str, returns: bool):
    """polyops.<op> itself as a kernel (the dispatcher passes the schema's arguments by
    the same names). `returns`: whether the overload returns its outputs; `.out` and
    in-place overloads return None."""
    function = getattr(_C, op)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        result = function(*args, **kwargs)
        return result if returns else None

    return kernel


def _eager_autograd_kernel(op: str, schema: torch._C.FunctionSchema, slow: Callable[..., Any]):
    """The stable form's AutogradCPU kernel: plain tensors run polyops.<op> directly, which
    refuses, bumps versions and raises exactly as the fast function does, without a second
    trip through the dispatcher; FakeTensor, modes and functionalization (their keys are
    below autograd) take `slow`, the redispatching kernel."""
    function = getattr(_C, op)
    returns = bool(schema.returns)
    below = torch._C.DispatchKeySet(torch._C.DispatchKey.Python) | torch._C.DispatchKeySet(
        torch._C.DispatchKey.Functionalize
    )
    below_mask = below.raw_repr()  # one pybind11 call per dispatch, not one per key
    # An .out overload does not declare an optional input written (rotary's key), so
    # the output that would alias it (key_out) must be given with it, as the C++
    # kernels check (CheckAliasGiven); polyops.<op> would update the input in place.
    arguments = {a.name: a for a in schema.arguments}
    aliases = [
        (name.removesuffix("_out"), name)
        for name, a in arguments.items()
        if a.alias_info
        and a.alias_info.is_write
        and name.removesuffix("_out") in arguments
        and arguments[name.removesuffix("_out")].alias_info is None
        and str(arguments[name.removesuffix("_out")].type) == "Optional[Tensor]"
    ]
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    qualified = f"{op}.{schema.overload_name}" if schema.overload_name else op

    def kernel(keys: torch._C.DispatchKeySet, *args: Any, **kwargs: Any) -> Any:
        if keys.raw_repr() & below_mask:
            return slow(*args, **kwargs)
        if aliases:
            values = _bind(positional, args, kwargs)
            for source, output in aliases:
                if values.get(source) is not None and values.get(output) is None:
                    raise ValueError(
                        f"torch.ops.polyops.{qualified}: {output} is required when {source} "
                        f"is given (use torch.ops.polyops.{op} to update {source} in place)"
                    )
        result = function(*args, **kwargs)
        return result if returns else None

    return kernel


def _register_stable() -> None:
    """torch.ops.polyops through torch's stable ABI: schemas from here, kernels from
    polyops._torch_stable, the Autograd kernels above (docs/user/torch.md)."""
    global _library
    from polyops import _torch_stable

    library = torch.library.Library("polyops", "DEF")
    for _, _, schema, _ in _C._torch_overloads:
        library.define(schema)
    _torch_stable._register_kernels()
    for op, overload, _, _ in _C._torch_overloads:
        packet = getattr(torch.ops.polyops, op)
        schema = getattr(packet, overload or "default")._schema
        qualified = f"{op}.{overload}" if overload else op
        if any(str(a.type) == "number" for a in schema.arguments):  # a Scalar: no stable kernel
            library.impl(qualified, _eager_kernel(op, bool(schema.returns)), "CPU")
        slow = _autograd_kernel(f"polyops::{op}", packet, schema)
        library.impl(qualified, slow, "Autograd")
        fast = _eager_autograd_kernel(op, schema, slow)
        library.impl(qualified, fast, "AutogradCPU", with_keyset=True)
    _library = library


def refuse_autograd(qualname: str, key: str) -> None:
    """Register polyops' Autograd refusal for `qualname` at `key` (e.g. "AutogradCPU"):
    for the ops polyops serves under other names (polyops.integrations.vllm)."""
    if not _stable:
        from polyops import _torch_ops

        _torch_ops._refuse_autograd(qualname, key)
        return
    namespace, name = qualname.split("::")
    packet = getattr(getattr(torch.ops, namespace), name)
    library = torch.library.Library(namespace, "IMPL")
    library.impl(name, _autograd_kernel(qualname, packet, packet.default._schema), key)
    _impl_libraries.append(library)


def register(stable: bool) -> None:
    """Define torch.ops.polyops.* (schemas, kernels for every built device, fakes): through
    polyops._torch_ops (torch's C++ API, the torch polyops was built with) or, with
    `stable`, through polyops._torch_stable (any torch >= 2.10; docs/user/torch.md)."""
    global _stable
    if stable:
        _register_stable()
    else:
        from polyops import _torch_ops

        _torch_ops._register_torch_library()
    _stable = stable
    for op, overload, _, returns in _C._torch_overloads:
        schema = getattr(getattr(torch.ops.polyops, op), overload or "default")._schema
        rules = [SHAPE_RULES[op][name] for name in returns]
        qualname = f"polyops::{op}" + (f".{overload}" if overload else "")
        torch.library.register_fake(qualname, _make_fake(op, overload, schema, rules))
