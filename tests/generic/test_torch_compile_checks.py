"""torch.ops.polyops under torch.compile: no silently lost gradient, fakes that refuse what
the kernels refuse, written views updated where eager updates them.

1. Autograd: every overload has an Autograd kernel that refuses a tensor requiring grad
   (NotImplementedError naming the op and the argument) in eager calls, on fake and meta
   tensors, and so in compiled graphs, where torch's fallback only warned and backward
   silently dropped the op's gradient.
2. Fakes: each fake runs the op's C++ base class checks on the arguments' metadata, so a
   bad call fails while tracing. A differential test perturbs every tensor argument of
   every overload (shape, rank, dtype, strides) and requires the fake and meta forms to
   raise exactly what the real kernel raises, or to give its output metadata.
3. Written views with a symbolic storage offset under ``dynamic=True`` (Inductor has no
   lowering for ``aten.sym_storage_offset``): written where eager writes them.

The reproducers are those of docs/user/torch.md, "torch.compile limitations".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_map_only

import polyops
from polyops import _torch_library
from tests.generic._torch_library_cases import CASES, OVERLOADS, _overload_case, _randn

ops = torch.ops.polyops
BACKENDS = ["aot_eager", "inductor"]


def _overload(op: str, overload: str) -> torch._ops.OpOverload:
    return getattr(getattr(ops, op), overload or "default")


def _named(fn: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict:
    """Argument name -> value, as the schema binds them."""
    names = [a.name for a in fn._schema.arguments]
    return {**dict(zip(names, args, strict=False)), **kwargs}


def _call(fn: torch._ops.OpOverload, named: dict):
    return fn(**named)


def _cause_chain(error: BaseException) -> Iterator[BaseException]:
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def _assert_raised(info: pytest.ExceptionInfo, kind: type, pattern: str) -> None:
    """`kind` matching `pattern` was raised, directly or as the cause torch.compile wraps
    (fullgraph=True reports a fake kernel's error as torch._dynamo.exc.Unsupported)."""
    found = [e for e in _cause_chain(info.value) if isinstance(e, kind)]
    assert found, f"no {kind.__name__} in {info.value!r}"
    assert re.search(pattern, str(found[0])), str(found[0])


def _written(fn: torch._ops.OpOverload) -> set[str]:
    return {a.name for a in fn._schema.arguments if a.alias_info and a.alias_info.is_write}


def _tensor_slots(named: dict) -> Iterator[tuple[str, int | None]]:
    for name, value in named.items():
        if isinstance(value, torch.Tensor):
            yield name, None
        elif isinstance(value, list):
            yield from ((name, i) for i in range(len(value)))


def _replace(named: dict, slot: tuple[str, int | None], value: torch.Tensor) -> dict:
    name, index = slot
    values = dict(named)
    if index is None:
        values[name] = value
    else:
        values[name] = [value if i == index else t for i, t in enumerate(named[name])]
    return values


def _strided_like(t: torch.Tensor, device: str) -> torch.Tensor:
    """Uninitialized, with t's strides and offset (to() and clone() make non-dense tensors
    dense)."""
    size = t.untyped_storage().nbytes() // t.element_size()
    base = torch.empty(size, dtype=t.dtype, device=device)
    return base.as_strided(t.shape, t.stride(), t.storage_offset())


def _copy(t: torch.Tensor) -> torch.Tensor:
    return _strided_like(t, "cpu").copy_(t)


def _to_meta(t: torch.Tensor) -> torch.Tensor:
    """The same geometry on the meta device, a leaf that requires grad if `t` does."""
    return _strided_like(t, "meta").requires_grad_(t.requires_grad)


# --- 1. autograd --------------------------------------------------------------------------


def _float_slots(named: dict) -> list[tuple[str, int | None]]:
    return [
        (name, index)
        for name, index in _tensor_slots(named)
        if (named[name] if index is None else named[name][index]).dtype.is_floating_point
    ]


def _overload_params():
    return [
        pytest.param(op, overload, id=f"{op}.{overload or 'default'}") for op, overload in OVERLOADS
    ]


@pytest.mark.parametrize(("op", "overload"), _overload_params())
def test_every_overload_refuses_tensors_that_require_grad(op, overload):
    fn = _overload(op, overload)
    named = _named(fn, *_overload_case(op, overload, CASES[op][0]))
    slots = _float_slots(named)
    assert slots, op
    written = _written(fn)
    for name, index in slots:
        original = named[name] if index is None else named[name][index]
        values = _replace(named, (name, index), original.clone().requires_grad_())
        # A tensor the op writes is a leaf here: refused as torch refuses in-place writes.
        kind, words = (
            (RuntimeError, f"{name} is a leaf tensor that requires grad")
            if name in written
            else (NotImplementedError, f"does not support autograd: {name} requires grad")
        )
        pattern = rf"polyops\.{op}(:)? {words}"
        with pytest.raises(kind, match=pattern):
            _call(fn, values)
        # Fake (torch.compile's tracing) and meta tensors never reach the real kernel's
        # check: the Autograd kernel refuses first.
        with FakeTensorMode() as mode:
            fakes = tree_map_only(torch.Tensor, mode.from_tensor, values)
            with pytest.raises(kind, match=pattern):
                _call(fn, fakes)
        with pytest.raises(kind, match=pattern):
            _call(fn, tree_map_only(torch.Tensor, _to_meta, values))
        with torch.no_grad():  # inference: allowed
            _call(fn, values)


def _reproducer(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (ops.rms_norm(x, w, 1e-6) + x).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_compiled_graph_refuses_grad_instead_of_dropping_it(backend):
    torch._dynamo.reset()
    x = _randn(3, 64).requires_grad_()
    w = torch.ones(64)
    compiled = torch.compile(_reproducer, backend=backend, fullgraph=True)
    with pytest.raises(Exception) as info:  # noqa: B017 - the cause is checked below
        compiled(x, w).backward()
    _assert_raised(info, NotImplementedError, "polyops.rms_norm does not support autograd: input")
    assert x.grad is None
    # The same for a weight that requires grad, and through a mutating overload.
    torch._dynamo.reset()
    with pytest.raises(Exception) as info:  # noqa: B017
        compiled(_randn(3, 64), w.clone().requires_grad_())
    _assert_raised(info, NotImplementedError, "does not support autograd: weight requires grad")

    def written(x, w):
        out = torch.empty_like(x)
        ops.rms_norm(x, w, 1e-6, out=out)
        return (out * x).sum()

    torch._dynamo.reset()
    with pytest.raises(Exception) as info:  # noqa: B017
        torch.compile(written, backend=backend, fullgraph=True)(x, w)
    _assert_raised(info, NotImplementedError, r"polyops\.rms_norm does not support autograd")
    # Without fullgraph the graph breaks at the op, which then raises in eager.
    torch._dynamo.reset()
    with pytest.raises(NotImplementedError, match="does not support autograd: input"):
        torch.compile(_reproducer, backend=backend)(x, w)
    # Inference through the same compiled function runs and matches eager.
    torch._dynamo.reset()
    with torch.no_grad():
        got = torch.compile(_reproducer, backend=backend, fullgraph=True)(x, w)
        # (Inductor sums in another order: equal up to rounding.)
        torch.testing.assert_close(got, (polyops.rms_norm(x.detach(), w, 1e-6) + x).sum())


def test_export_of_parameters_needs_no_grad():
    # Parameters require grad: export (which traces the fakes) refuses them as eager
    # calls do, and exports under torch.no_grad().
    class Norm(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(_randn(16, seed=1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return ops.rms_norm(x, self.weight, 1e-5)

    x = _randn(4, 16)
    with pytest.raises(NotImplementedError, match="does not support autograd: weight"):
        torch.export.export(Norm(), (x,), strict=False)
    with torch.no_grad():
        exported = torch.export.export(Norm(), (x,), strict=False)
        assert torch.equal(exported.module()(x), polyops.rms_norm(x, _randn(16, seed=1), 1e-5))


def test_compiled_fast_form_refuses_grad():
    # polyops.<op> is opaque to Dynamo: a graph break, then the eager check.
    torch._dynamo.reset()
    fn = torch.compile(lambda x, w: (polyops.rms_norm(x, w, 1e-6) + x).sum(), backend="aot_eager")
    with pytest.raises(NotImplementedError, match="does not support autograd: input"):
        fn(_randn(3, 64).requires_grad_(), torch.ones(64))


# --- 2. fakes validate ---------------------------------------------------------------------


def _perturbations(t: torch.Tensor) -> Iterator[tuple[str, torch.Tensor]]:
    """Variants of an argument, each wrong for some op or argument and right for others."""
    if t.dim() and t.shape[-1]:
        yield "wider", torch.cat([t, t.narrow(-1, 0, 1)], -1)
    yield "unsqueezed", t.unsqueeze(0)
    if t.dim() and t.shape[0]:
        yield "first row", t[0]
    yield (
        "float64" if t.dtype.is_floating_point else "int16",
        (t.double() if t.dtype.is_floating_point else t.short()),
    )
    yield (
        "float16" if t.dtype == torch.float32 else "float32",
        (t.half() if t.dtype == torch.float32 else t.float()),
    )
    if t.dim():
        yield "last dim strided", torch.cat([t, t], -1)[..., ::2]
    # Refused by every op: a dtype polyops does not handle, more dims than it supports.
    yield "complex64", t.to(torch.complex64)
    yield "9 dims", t[(None,) * (9 - t.dim())]
    if t.dim() >= 2:
        yield "column-major", t.transpose(0, 1).contiguous().transpose(0, 1)
        yield "rows strided", torch.cat([t, t], 0)[::2]


def _outcome(fn: torch._ops.OpOverload, values: dict) -> tuple:
    try:
        result = _call(fn, values)
    except Exception as error:  # the outcome is compared, whatever it is
        return type(error).__name__, str(error)
    results = result if isinstance(result, tuple) else (result,)
    return "ok", [None if r is None else (tuple(r.shape), r.dtype, r.stride()) for r in results]


def _same(real: tuple, other: tuple) -> bool:
    # Refused by the base class, the real call also lists the other slots' reasons.
    return real == other or (
        real[0] == other[0] == "NotImplementedError" and real[1].startswith(other[1])
    )


@pytest.mark.parametrize(("op", "overload"), _overload_params())
def test_fakes_refuse_what_the_kernels_refuse(op, overload):
    fn = _overload(op, overload)
    slots = compared = refused = 0
    for make in CASES[op]:
        named = _named(fn, *_overload_case(op, overload, make))
        for slot in _tensor_slots(named):
            slots += 1
            name, index = slot
            original = named[name] if index is None else named[name][index]
            for kind, variant in _perturbations(original):
                values = _replace(named, slot, variant)
                real = _outcome(fn, tree_map_only(torch.Tensor, _copy, values))
                with FakeTensorMode() as mode:
                    fake = _outcome(fn, tree_map_only(torch.Tensor, mode.from_tensor, values))
                meta = _outcome(fn, tree_map_only(torch.Tensor, _to_meta, values))
                label = f"{name}{'' if index is None else f'[{index}]'} {kind}"
                assert _same(real, fake), (label, real, fake)
                assert _same(real, meta), (label, real, meta)
                compared += 1
                refused += real[0] != "ok"
    # At least the two variants every op refuses, per argument.
    assert refused >= 2 * slots > 0, (slots, compared, refused)


def test_the_reported_meta_call_is_refused():
    with pytest.raises(ValueError, match=r"weight must have shape \[4\].*got \[5\]"):
        ops.rms_norm(torch.empty(2, 4, device="meta"), torch.empty(5, device="meta"))
    with pytest.raises(ValueError, match=r"weight must have shape \[4\].*got \[5\]"):
        ops.rms_norm(
            torch.empty(2, 4, device="meta"),
            torch.empty(5, device="meta"),
            out=torch.empty(2, 4, device="meta"),
        )


def test_fake_devices_must_match():
    with pytest.raises(
        ValueError, match="weight is on cpu but the op runs on the device of its first tensor, meta"
    ):
        ops.rms_norm(torch.empty(2, 4, device="meta"), torch.empty(4))
    # Host mirrors live on the CPU whatever the op's device, as in the kernel.
    case = CASES["flash_attention"][0]()
    kwargs = dict(case.kwargs)
    for name in ("cu_seqlens_q", "cu_seqlens_kv"):
        kwargs[f"{name}_host"] = kwargs[name].clone()
    meta = tree_map_only(torch.Tensor, _to_meta, (case.args, kwargs))
    for name in ("cu_seqlens_q_host", "cu_seqlens_kv_host"):
        meta[1][name] = kwargs[name]
    assert ops.flash_attention(*meta[0], **meta[1]).device.type == "meta"


class _Recorder:
    """A torch.compile backend that records whether it was ever handed a graph."""

    def __init__(self) -> None:
        self.graphs = 0

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
        self.graphs += 1
        return gm.forward


@pytest.mark.parametrize("dynamic", [False, True])
def test_a_bad_compiled_call_fails_while_tracing(dynamic):
    recorder = _Recorder()
    torch._dynamo.reset()
    fn = torch.compile(
        lambda x, w, q, k: (ops.rms_norm(x, w, 1e-6), ops.swiglu(q, k)),
        backend=recorder,
        fullgraph=True,
        dynamic=dynamic,
    )
    good = (_randn(3, 16), _randn(16), _randn(3, 8), _randn(3, 8))
    fn(*good)
    assert recorder.graphs == 1
    for bad, pattern in (
        ((_randn(3, 16), _randn(17), *good[2:]), r"weight must have shape \[16\]"),
        ((*good[:2], _randn(3, 8), _randn(3, 9)), r"polyops\.swiglu"),
    ):
        torch._dynamo.reset()
        recorder.graphs = 0
        with pytest.raises(Exception) as info:  # noqa: B017 - the cause is checked
            fn(*bad)
        _assert_raised(info, ValueError, pattern)
        assert recorder.graphs == 0  # refused before any graph existed


def test_symbolic_shapes_are_checked_with_their_hints_without_recompiling():
    counter = torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    fn = torch.compile(
        lambda x, w: ops.rms_norm(x, w, 1e-6), backend=counter, fullgraph=True, dynamic=True
    )
    for rows, hidden in ((3, 16), (5, 16), (9, 32), (2, 48)):
        x, w = _randn(rows, hidden, seed=rows), _randn(hidden, seed=hidden)
        assert torch.equal(fn(x, w), polyops.rms_norm(x, w, 1e-6))
    assert counter.frame_count == 1
    # Duck sizing made the hidden size and weight's one symbol: a call where they differ
    # fails the guards, is traced again and refused while tracing.
    with pytest.raises(Exception) as info:  # noqa: B017 - the cause is checked
        fn(_randn(4, 16), _randn(17))
    _assert_raised(info, ValueError, r"weight must have shape \[16\]")
    assert counter.frame_count == 1


# torch's config.patch, not monkeypatch: pytest >= 9.2 undoes a module attribute
# missing from the module's __dict__ with delattr, which hides a torch config entry for
# the rest of the process.
@torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True)
def test_data_dependent_sizes_skip_the_check():
    def fn(x, w, mask):
        rows = x[torch.nonzero(mask).squeeze(1)]  # an unbacked row count
        return ops.rms_norm(rows, w, 1e-6)

    x, w = _randn(6, 16), _randn(16, seed=1)
    mask = torch.tensor([True, False, True, True, False, True])
    torch._dynamo.reset()
    got = torch.compile(fn, backend="aot_eager", fullgraph=True)(x, w, mask)
    assert torch.equal(got, polyops.rms_norm(x[mask], w, 1e-6))


@pytest.mark.parametrize(
    ("op", "overload", "make"),
    [
        pytest.param(op, overload, make, id=f"{op}.{overload or 'default'}-case{i}")
        for op, overload in OVERLOADS
        if not overload.endswith("out")
        for i, make in enumerate(CASES[op])
    ],
)
def test_shape_rules_agree_with_the_cpp_defaults(op, overload, make):
    fn = _overload(op, overload)
    named = _named(fn, *_overload_case(op, overload, make))
    defaults = {a.name: a.default_value for a in fn._schema.arguments if a.has_default_value()}
    values = {**defaults, **named}
    from_cpp = _torch_library.check(op, overload, values)
    returns = next(r for o, v, _, r in polyops._C._torch_overloads if (o, v) == (op, overload))
    from_rules = [_torch_library.SHAPE_RULES[op][name](values) for name in returns]
    assert [(tuple(t.shape), t.dtype) for t in from_rules] == from_cpp


# --- 3. written views with a symbolic storage offset --------------------------------------


def _row_writes(form: str) -> Callable:
    def fn(x, y):
        add = polyops.add if form == "fast" else ops.add
        add(x[1], y, out=x[2])
        return x.sum()

    return fn


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("form", ["torch", "fast"])
def test_out_view_lands_where_eager_writes_it_under_dynamic_shapes(backend, form):
    torch._dynamo.reset()
    compiled = torch.compile(_row_writes(form), backend=backend, dynamic=True)
    for rows, width in ((4, 8), (5, 8), (6, 16), (3, 5)):
        x, y = _randn(rows, width, seed=rows), _randn(width, seed=width)
        expected = x.clone()
        _row_writes(form)(expected, y)
        total = compiled(x, y)
        assert torch.equal(x, expected), (rows, width)
        assert torch.allclose(total, expected.sum())


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_place_and_cache_views_land_where_eager_writes_them(backend):
    def fn(positions, qkv, cache, kv, slots, d):
        # rotary on views of one qkv buffer; the caches are views of one kv allocation.
        ops.rotary_embedding(positions, qkv[:, 0], qkv[:, 1], d, cache, True)
        ops.reshape_and_cache(qkv[:, 1], qkv[:, 2], kv[0], kv[1], slots)
        return qkv.sum()

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    d = 8
    for tokens, heads in ((5, 2), (7, 2), (6, 4)):
        positions = torch.arange(tokens) * 2
        qkv = _randn(tokens, 3, heads, d, seed=tokens)
        cache = _randn(16, d, seed=1)
        kv = torch.zeros(2, 4, 4, heads, d)
        slots = torch.randperm(16, generator=torch.Generator().manual_seed(tokens))[:tokens]
        want = (qkv.clone(), kv.clone())
        fn(positions, want[0], cache, want[1], slots, d)
        compiled(positions, qkv, cache, kv, slots, d)
        assert torch.equal(qkv, want[0]) and torch.equal(kv, want[1]), (tokens, heads)


def test_the_offset_pin_is_what_keeps_inductor_right(monkeypatch):
    # The control for the tests above: without the pin, Inductor writes x[2] at
    # offset 0 whenever it has no lowering for aten.sym_storage_offset.
    from torch._inductor.lowering import lowerings

    lowered = torch.ops.aten.sym_storage_offset.default in lowerings
    monkeypatch.setattr(_torch_library, "_inductor_lowers_storage_offset", lambda: True)
    torch._dynamo.reset()
    x, y = torch.zeros(4, 8), torch.ones(8)
    torch.compile(_row_writes("torch"), backend="inductor", dynamic=True)(x, y)
    right = bool(x[2].eq(1).all() and x[0].eq(0).all())
    assert right == lowered, (lowered, x)


@torch._dynamo.config.patch(capture_scalar_outputs=True)
def test_a_view_at_a_data_dependent_offset_is_refused_not_misplaced():
    # The offset cannot be specialized: refused while compiling, nothing written.

    def fn(x, y, start):
        n = start.item()
        torch._check(n >= 0)
        torch._check(n + 8 <= x.shape[1])
        ops.add(y, y, out=x[1, n : n + 8])
        return x

    torch._dynamo.reset()
    x = torch.zeros(3, 16)
    with pytest.raises(Exception, match=r"polyops\.add: out is a view whose storage offset"):
        torch.compile(fn, backend="inductor", dynamic=True)(x, torch.ones(8), torch.tensor(4))
    assert not x.any()
