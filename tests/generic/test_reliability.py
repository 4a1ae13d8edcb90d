"""Hostile inputs: no interpreter deaths, no silent wrong answers (docs/user/api.md, "Rules").

Every op, in both call forms (``polyops.<op>`` and ``torch.ops.polyops.<op>``):
storage-less and wrapper tensors, autograd (version counters, tensors that
require grad, leaves), negated views, overlapping outputs and the exception
type of each kind of mistake. The checks live in the generated bindings and
``src/core``, so every backend inherits them. Cases that could crash the
interpreter run in a subprocess.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import subprocess
import sys
import textwrap

import pytest
import torch

import polyops
from tests.conftest import portable_tensor_flags
from tests.generic._torch_library_cases import CASES, Case

OPS = polyops.operators()
FORMS = ["fast", "torch"]
TESTS = pathlib.Path(__file__).resolve().parent


def _case(op: str) -> Case:
    return CASES[op][0]()


def _float_positions(case: Case) -> list[int]:
    """Positional arguments that are floating-point tensors."""
    return [
        i
        for i, a in enumerate(case.args)
        if isinstance(a, torch.Tensor) and a.dtype.is_floating_point
    ]


def _written(op: str, args: list, kwargs: dict) -> dict[str, torch.Tensor]:
    """The tensors a call with these arguments writes, by name."""
    written = {k: v for k, v in kwargs.items() if k == "out" or k.endswith("_out")}
    if op in ("rotary_embedding", "apply_rotary_pos_emb") and not written:
        query, key = (args[1], args[2]) if op == "rotary_embedding" else (args[0], args[1])
        written = {"query": query, "key": key}
    if op == "reshape_and_cache":
        written = {"key_cache": args[2], "value_cache": args[3]}
    return written


def _with_outputs(op: str) -> tuple[list, dict]:
    case = _case(op)
    kwargs = dict(case.kwargs)
    kwargs.update(case.outputs())
    return list(case.args), kwargs


# --- 1. tensors without real storage, wrappers: never a crash ----------------------------

_STORAGELESS_CHILD = textwrap.dedent(
    """
    import json, sys, warnings
    warnings.simplefilter("ignore")
    sys.path.insert(0, {tests!r})
    import torch, polyops
    from torch._subclasses.fake_tensor import FakeTensorMode
    from tests.generic._torch_library_cases import CASES

    def storageless(t):
        t = t.clone()
        t.untyped_storage().resize_(0)
        return t

    KINDS = {{
        "fake": lambda t: FakeTensorMode(allow_non_fake_inputs=True).from_tensor(t),
        "meta": lambda t: t.to("meta"),
        "storageless": storageless,
        "negated": lambda t: t.neg()._neg_view(),
        "zerotensor": lambda t: torch._efficientzerotensor(t.shape, dtype=t.dtype),
    }}
    records = []
    for op in polyops.operators():
        case = CASES[op][0]()
        for form in ("fast", "torch"):
            fn = getattr(polyops, op) if form == "fast" else getattr(torch.ops.polyops, op)
            def substitute(args, i, value):
                # A list argument (cat's tensors) gets the value as its first element.
                args = list(args)
                args[i] = [value, *args[i][1:]] if isinstance(args[i], list) else value
                return args

            for i, arg in enumerate(case.args):
                arg = arg[0] if isinstance(arg, list) else arg
                if not isinstance(arg, torch.Tensor) or arg.numel() == 0:
                    continue
                for kind, make in KINDS.items():
                    if kind == "negated" and not arg.dtype.is_floating_point:
                        continue
                    args = substitute(CASES[op][0]().args, i, make(arg.clone()))
                    try:
                        fn(*args, **case.kwargs)
                        outcome = "ok"
                    except Exception as error:
                        outcome = type(error).__name__ + ": " + str(error).splitlines()[0]
                    records.append([op, form, i, kind, outcome])
            first = case.args[0][0] if isinstance(case.args[0], list) else case.args[0]
            if isinstance(first, torch.Tensor):
                wrappers = {{
                    "vmap": lambda f: torch.vmap(f)(torch.stack([first, first])),
                    "functionalize": lambda f: torch.func.functionalize(f)(first.clone()),
                }}
                for kind, run in wrappers.items():
                    def call(x):
                        return fn(*substitute(case.args, 0, x), **case.kwargs)
                    try:
                        run(call)
                        outcome = "ok"
                    except Exception as error:
                        outcome = type(error).__name__ + ": " + str(error).splitlines()[0]
                    records.append([op, form, 0, kind, outcome])
    print(json.dumps(records))
    """
)


@pytest.fixture(scope="module")
def storageless_records():
    child = subprocess.run(
        [sys.executable, "-c", _STORAGELESS_CHILD.format(tests=str(TESTS))],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert child.returncode == 0, f"the interpreter died ({child.returncode}): {child.stderr}"
    return json.loads(child.stdout.splitlines()[-1])


def test_storageless_and_wrapped_tensors_never_crash(storageless_records):
    # The process survived every case (the fixture checks the exit code); every op and
    # every kind was tried in both forms.
    tried = {(op, form, kind) for op, form, _, kind, _ in storageless_records}
    kinds = {"fake", "meta", "storageless", "vmap", "functionalize"}
    assert tried >= {(op, form, kind) for op in OPS for form in FORMS for kind in kinds}


@pytest.mark.parametrize(
    "kind", ["fake", "meta", "storageless", "negated", "zerotensor", "vmap", "functionalize"]
)
def test_fast_form_rejects_with_not_implemented_naming_the_kind(storageless_records, kind):
    words = {
        "zerotensor": "storage holds no data",
        "fake": "FakeTensor",
        "meta": "device 'meta'",
        "storageless": "storage holds no data",
        "negated": "negative or conjugate bit",
        "vmap": "vmap batched tensor",
        "functionalize": "functionalization wrapper",
    }
    records = [r for r in storageless_records if r[1] == "fast" and r[3] == kind]
    assert records
    for op, _, position, _, outcome in records:
        assert outcome.startswith("NotImplementedError"), (op, position, outcome)
        assert words[kind] in outcome, (op, position, outcome)
        assert f"polyops.{op}" in outcome


def test_torch_form_raises_python_errors_or_runs(storageless_records):
    # torch's dispatcher handles these tensors itself (fake and meta tensors run the fake
    # kernels, vmap loops over the batch, functionalization replays): whatever it does,
    # an error is a Python exception, and neither a storage-less tensor nor a negated
    # view reaches a kernel (polyops registers its own Negative / Conjugate kernels:
    # torch's fallback there aborts the interpreter on an op that mutates its argument).
    for op, form, position, kind, outcome in storageless_records:
        if form != "torch":
            continue
        assert outcome == "ok" or outcome.split(":")[0] in (
            "NotImplementedError",
            "RuntimeError",
            "ValueError",
            "TypeError",
        ), (op, position, kind, outcome)
        if kind in ("storageless", "negated"):
            assert outcome.startswith("NotImplementedError"), (op, position, outcome)


# --- 2. autograd -----------------------------------------------------------------------------


def test_issue_example_out_write_is_seen_by_autograd(api):
    a = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = a * 1
    c = (b * b).sum()
    # Under grad mode, a tensor that requires grad is refused instead of detached.
    with pytest.raises(NotImplementedError, match=r"polyops\.mul does not support autograd"):
        api.mul(b, torch.full((3,), 10.0), out=b)
    # Written without grad mode, the version bump makes backward refuse stale values.
    with torch.no_grad():
        api.mul(b, torch.full((3,), 10.0), out=b)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.backward()
    assert a.grad is None


@pytest.mark.parametrize("op", OPS)
def test_every_written_tensor_gets_its_version_bumped(op, api):
    for in_place in (False, True):
        if in_place and op not in ("rotary_embedding", "apply_rotary_pos_emb"):
            continue
        case = _case(op)
        args, kwargs = list(case.args), dict(case.kwargs)
        if not in_place:
            kwargs.update(case.outputs())
        written = _written(op, args, kwargs)
        assert written, op
        before = {name: t._version for name, t in written.items()}
        getattr(api, op)(*args, **kwargs)
        for name, tensor in written.items():
            assert tensor._version > before[name], (op, name)


@pytest.mark.parametrize("op", OPS)
def test_inputs_that_require_grad_are_refused_under_grad_mode(op, api):
    case = _case(op)
    for position in _float_positions(case):
        args = list(case.args)
        args[position] = args[position].clone().requires_grad_()
        in_place = any(t is args[position] for t in _written(op, args, case.kwargs).values())
        # A tensor the op writes in place is a leaf here: refused as torch refuses it.
        error, words = (
            (RuntimeError, "is a leaf tensor that requires grad")
            if in_place
            else (NotImplementedError, "does not support autograd")
        )
        with pytest.raises(error, match=rf"polyops\.{op}.* {words}"):
            getattr(api, op)(*args, **case.kwargs)
        with torch.no_grad():  # inference: allowed, and nothing is recorded
            result = getattr(api, op)(*args, **case.kwargs)
        for tensor in result if isinstance(result, tuple) else (result,):
            if tensor is not None and not any(tensor is a for a in args):
                assert not tensor.requires_grad, op


@pytest.mark.parametrize("op", OPS)
def test_writing_into_a_leaf_that_requires_grad_raises(op, api):
    if op == "topk_topp_sampling":
        pytest.skip("topk_topp_sampling writes int64 token ids, which cannot require grad")
    args, kwargs = _with_outputs(op)
    written = _written(op, args, kwargs)
    name, tensor = next((n, t) for n, t in written.items() if t.dtype.is_floating_point)
    leaf = tensor.clone().requires_grad_()
    for container in (args, kwargs):
        keys = range(len(container)) if isinstance(container, list) else list(container)
        for key in keys:
            if container[key] is tensor:
                container[key] = leaf
    with pytest.raises(RuntimeError, match=rf"{name} is a leaf tensor that requires grad"):
        getattr(api, op)(*args, **kwargs)
    with torch.no_grad():  # as in torch: optimizer-style updates of leaves are fine
        getattr(api, op)(*args, **kwargs)


@pytest.mark.parametrize("portable", [False, True], ids=["torch-reads", "portable-reads"])
def test_inference_tensors_are_written_only_in_inference_mode(portable):
    with portable_tensor_flags() if portable else contextlib.nullcontext():
        with torch.inference_mode():
            out = torch.empty(3)
            polyops.add(torch.ones(3), torch.ones(3), out=out)
        with pytest.raises(RuntimeError, match="inference tensor"):
            polyops.add(torch.ones(3), torch.ones(3), out=out)
    assert torch.equal(out, torch.full((3,), 2.0))


# --- 3. negated and conjugated views ------------------------------------------------------


def _negated_cases():
    z = torch.randn(64, dtype=torch.cfloat, generator=torch.Generator().manual_seed(0))
    view = z.conj().imag  # torch marks it negated
    assert view.is_neg()
    plain = view.resolve_neg()
    return view, plain


@pytest.mark.parametrize("op", ["add", "mul", "cast", "cat"])
def test_negated_views_are_refused_in_both_forms(op):
    view, plain = _negated_cases()
    calls = {
        "add": lambda f, x: f(x, torch.ones(64)),
        "mul": lambda f, x: f(x, torch.full((64,), 2.0)),
        "cast": lambda f, x: f(x, torch.float64),
        "cat": lambda f, x: f([x, x]),
    }
    call = calls[op]
    for api in (polyops, torch.ops.polyops):
        with pytest.raises(NotImplementedError, match="negative or conjugate bit"):
            call(getattr(api, op), view)
    with portable_tensor_flags(), pytest.raises(NotImplementedError, match="negative or"):
        call(getattr(polyops, op), view)
    # Resolved, the same values are read with their sign (torch rounds float32 as polyops).
    expected = {
        "add": lambda: plain + 1,
        "mul": lambda: plain * 2,
        "cast": lambda: plain.double(),
        "cat": lambda: torch.cat([plain, plain]),
    }[op]()
    assert torch.equal(call(getattr(polyops, op), plain), expected)


def test_negated_output_is_refused(api):
    _, plain = _negated_cases()
    out = torch.zeros(64, dtype=torch.cfloat).conj().imag
    with pytest.raises(NotImplementedError, match="out because it is a view with torch's neg"):
        api.add(plain, plain, out=out)


# --- 5. overlapping outputs ---------------------------------------------------------------


@pytest.mark.parametrize("op", ["add", "mul"])
def test_shifted_out_over_input_is_refused(op, api):
    b = torch.arange(10.0)
    with pytest.raises(ValueError, match=rf"polyops\.{op}: out and input overlap in memory"):
        getattr(api, op)(b[:-1], torch.ones(9), out=b[1:])
    assert torch.equal(b, torch.arange(10.0))


def test_cat_into_an_output_overlapping_its_inputs_is_refused(api):
    buffer = torch.arange(12.0)
    with pytest.raises(ValueError, match=r"polyops\.cat: out and tensors overlap"):
        api.cat([buffer[:4], buffer[4:8]], out=buffer[2:10])


def test_rotary_with_a_partially_overlapping_query_out_is_refused(api):
    case = _case("rotary_embedding")
    positions, query, key, head_size, cache, neox = case.args
    buffer = torch.zeros(query.numel() + 8)
    query_out = buffer[8:].view(query.shape)
    buffer[: query.numel()].view(query.shape).copy_(query)
    overlapping_query = buffer[: query.numel()].view(query.shape)
    with pytest.raises(ValueError, match="query_out and query overlap in memory"):
        api.rotary_embedding(
            positions,
            overlapping_query,
            key,
            head_size,
            cache,
            neox,
            query_out=query_out,
            key_out=torch.empty_like(key),
        )


def test_add_rms_norm_outputs_must_differ(api):
    x1, x2, w = torch.randn(3, 16), torch.randn(3, 16), torch.ones(16)
    out = torch.empty(3, 16)
    with pytest.raises(ValueError, match="y_out and x_out are the same memory"):
        api.add_rms_norm(x1, x2, w, y_out=out, x_out=out)


@pytest.mark.parametrize("op", OPS)
def test_expanded_outputs_are_refused(op, api):
    args, kwargs = _with_outputs(op)
    written = _written(op, args, kwargs)
    name, tensor = next(iter(written.items()))
    if tensor.numel() <= 1:
        pytest.skip(f"{op}'s {name} has one element: expanding it repeats nothing")
    expanded = torch.zeros(1, dtype=tensor.dtype).expand(tensor.shape)
    for container in (args, kwargs):
        keys = range(len(container)) if isinstance(container, list) else list(container)
        for key in keys:
            if container[key] is tensor:
                container[key] = expanded
    # Refused by the shared check, or earlier by the op's own layout rule for that output.
    with pytest.raises(ValueError, match=rf"polyops\.{op}: {name} "):
        getattr(api, op)(*args, **kwargs)


def test_documented_exact_aliases_compute_the_right_answer():
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 8, generator=g), torch.randn(4, 8, generator=g)
    w = torch.randn(8, generator=g)
    for op in ("add", "mul"):
        expected = getattr(polyops, op)(x, y)
        for alias in ("input", "other"):
            a, b = x.clone(), y.clone()
            target = a if alias == "input" else b
            assert getattr(polyops, op)(a, b, out=target) is target
            assert torch.equal(target, expected), (op, alias)
    # vLLM's fused_add_rms_norm: y into the input, the sum into the residual.
    y_ref, x_ref = polyops.add_rms_norm(x, y, w)
    a, b = x.clone(), y.clone()
    polyops.add_rms_norm(a, b, w, y_out=a, x_out=b)
    assert torch.equal(a, y_ref) and torch.equal(b, x_ref)
    a = x.clone()
    assert torch.equal(polyops.rms_norm(a, w, out=a), polyops.rms_norm(x, w))
    g8 = y.clone()
    assert torch.equal(polyops.swiglu(x, g8, out=g8), polyops.swiglu(x, y))
    s = x.clone().view(2, 4, 4)
    assert torch.equal(polyops.causal_softmax(s, out=s), polyops.causal_softmax(x.view(2, 4, 4)))
    c = torch.randn(4, 4, generator=g)
    expected = polyops.gemm(x[:, :4], y[:, :4], c, beta=1.0)
    assert torch.equal(polyops.gemm(x[:, :4], y[:, :4], c, beta=1.0, out=c), expected)
    ints = torch.arange(-5, 7, dtype=torch.int32)
    as_float = ints.view(torch.float32)
    polyops.cast(ints, torch.float32, out=as_float)
    assert torch.equal(as_float, torch.arange(-5.0, 7.0))


def test_interleaved_views_of_one_buffer_are_not_overlaps():
    # vLLM rotates q and k in place as column slices of one qkv buffer.
    g = torch.Generator().manual_seed(2)
    qkv = torch.randn(6, 3 * 16, generator=g)
    q, k = qkv[:, :16], qkv[:, 16:32]
    positions = torch.arange(6)
    cache = torch.randn(8, 8, generator=g)
    expected_q, expected_k = polyops.rotary_embedding(
        positions,
        q.clone(),
        k.clone(),
        8,
        cache,
        query_out=torch.empty(6, 16),
        key_out=torch.empty(6, 16),
    )
    polyops.rotary_embedding(positions, q, k, 8, cache)
    assert torch.equal(q, expected_q) and torch.equal(k, expected_k)
    x = torch.randn(4, 16, generator=g)
    expected = x[:, 1::2] + 1
    polyops.add(x[:, 1::2], torch.ones(8), out=x[:, ::2])
    assert torch.equal(x[:, ::2], expected)


def _addresses(view: torch.Tensor) -> set[int]:
    """Element offsets (in the base storage) a view covers."""
    index = torch.arange(view.untyped_storage().nbytes() // view.element_size())
    covered = index.as_strided(view.shape, view.stride(), view.storage_offset())
    return set(covered.flatten().tolist())


def test_overlap_check_is_exact_on_random_views_of_one_buffer():
    # out: a non-self-overlapping view; input: any view; refused exactly when they share
    # an element and are not the same view (add allows out=input).
    g = torch.Generator().manual_seed(3)
    refused = accepted = 0
    for _ in range(400):
        buffer = torch.zeros(96)
        shape = [int(s) for s in torch.randint(1, 5, (2,), generator=g)]
        out_strides = (int(torch.randint(shape[1], 2 * shape[1] + 2, (1,), generator=g)), 1)
        if torch.rand(1, generator=g) < 0.3:
            out_strides = (1, int(torch.randint(shape[0], shape[0] + 3, (1,), generator=g)))
        in_strides = tuple(int(s) for s in torch.randint(0, 8, (2,), generator=g))
        out = buffer.as_strided(shape, out_strides, int(torch.randint(0, 20, (1,), generator=g)))
        source = buffer.as_strided(shape, in_strides, int(torch.randint(0, 40, (1,), generator=g)))
        # The same view: strides of size-1 dims address nothing.
        same = out.storage_offset() == source.storage_offset() and all(
            a == b or n == 1 for a, b, n in zip(out.stride(), source.stride(), shape, strict=True)
        )
        shares = bool(_addresses(out) & _addresses(source))
        if shares and not same:
            with pytest.raises(ValueError, match="overlap in memory"):
                polyops.add(source, torch.ones(shape), out=out)
            refused += 1
        else:
            expected = source + 1
            polyops.add(source, torch.ones(shape), out=out)
            assert torch.equal(out, expected)
            accepted += 1
    assert refused > 50 and accepted > 50, (refused, accepted)


# --- 6. exception types ---------------------------------------------------------------------


@pytest.mark.parametrize("op", OPS)
def test_validation_runs_before_the_output_is_allocated(op, api):
    # 2**42 bool elements: an allocation would fail with RuntimeError (or exhaust memory).
    # cast accepts bool, so a valid huge cast does fail in the allocator: its invalid call
    # here is an unsupported target dtype; cat's is an out-of-range dim.
    case = _case(op)
    args = list(case.args)
    huge = torch.zeros(1, dtype=torch.bool).expand(2**42)
    if op == "cat":
        args = [[huge, huge], 3]
    else:
        args[0] = huge
    if op == "cast":
        args[1] = torch.complex64
    with pytest.raises((NotImplementedError, ValueError)) as error:
        getattr(api, op)(*args, **case.kwargs)
    assert f"polyops.{op}" in str(error.value)


def test_huge_python_numbers_are_value_errors():
    x, w = torch.ones(2, 4), torch.ones(4)
    with pytest.raises(ValueError, match=r"polyops\.rms_norm: eps does not fit in a float64"):
        polyops.rms_norm(x, w, 10**400)
    with pytest.raises(ValueError, match=r"topk_topp_sampling: top_k does not fit"):
        polyops.topk_topp_sampling(x, 10**400, 1.0, uniform=torch.zeros(2))
    with pytest.raises(ValueError, match=r"polyops\.cat: dim does not fit in int64"):
        polyops.cat([x, x], 10**400)


def test_bools_are_not_ints():
    x = torch.ones(3)
    with pytest.raises(TypeError, match="implementation_index must be an int, got bool"):
        polyops.add(x, x, implementation_index=True)
    with pytest.raises(TypeError, match="dim must be an int, got bool"):
        polyops.cat([x, x], True)
    with pytest.raises(TypeError, match="top_k must be a number or a torch.Tensor, got bool"):
        polyops.topk_topp_sampling(torch.ones(2, 4), True, 1.0, uniform=torch.zeros(2))


@pytest.mark.parametrize("device", ["cpu:garbage", "cpu:", "cpu:-1", "cuda:1x", "gpu"])
def test_set_default_implementation_rejects_malformed_devices(device):
    with pytest.raises(ValueError, match="unknown device"):
        polyops.set_default_implementation("add", 0, device)


def test_torch_form_types_where_the_dispatcher_decides():
    # docs/user/api.md lists these: torch parses the arguments before polyops sees them.
    ops = torch.ops.polyops
    x, w = torch.ones(2, 4), torch.ones(4)
    with pytest.raises(RuntimeError, match="failed to match any schema"):
        ops.rms_norm(x, w, 10**400)
    with pytest.raises(OverflowError):
        ops.topk_topp_sampling(x, 10**400, 1.0, uniform=torch.zeros(2))
    # A bool is an int to the dispatcher: True selects slot 1.
    assert torch.equal(ops.add(x, x, implementation_index=True), x + x)
