"""torch.ops.polyops: registration, schemas, fake implementations, torch.compile.

Every overload runs through ``torch.library.opcheck`` (schema and aliasing,
fake-vs-real metadata, symbolic shapes through AOTAutograd) on representative
inputs, and its results are compared bit for bit with the fast function
``polyops.<op>``, which the other test files check against float64 references.
The compile tests use torch.compile's default (Inductor) backend.
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib
import sys
import warnings

import pytest
import torch

import polyops
from tests.generic._torch_library_cases import (
    CASES,
    OVERLOADS,
    _cache_case,
    _gen,
    _overload_case,
    _randn,
    _rotary_case,
)

ops = torch.ops.polyops
EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "decoder_layer.py"


def _all_overload_cases():
    return [
        pytest.param(op, overload, make, id=f"{op}.{overload or 'default'}-case{i}")
        for op, overload in OVERLOADS
        for i, make in enumerate(CASES[op])
    ]


# --- registration and schemas -------------------------------------------------------------


def test_registered_on_import():
    assert polyops.torch_ops_registered() is True
    for op in polyops.operators():
        assert hasattr(ops, op), op
    assert set(CASES) == set(polyops.operators())


def test_every_op_has_functional_and_out_overloads():
    by_op: dict[str, set[str]] = {}
    for op, overload in OVERLOADS:
        by_op.setdefault(op, set()).add(overload)
    for op, overloads in by_op.items():
        expected = {""} if op == "reshape_and_cache" else {"", "out"}
        assert expected <= overloads, (op, overloads)
    assert by_op["topk_topp_sampling"] == {
        "",
        "out",
        "Scalar_Scalar",
        "Scalar_Scalar_out",
        "Scalar_Tensor",
        "Scalar_Tensor_out",
        "Tensor_Scalar",
        "Tensor_Scalar_out",
    }


def _mutated(schema: torch._C.FunctionSchema) -> set[str]:
    return {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}


@pytest.mark.parametrize(("op", "overload"), OVERLOADS, ids=[f"{o}.{v}" for o, v in OVERLOADS])
def test_schema_declares_exactly_what_the_op_writes(op, overload):
    schema = getattr(getattr(ops, op), overload or "default")._schema
    mutated = _mutated(schema)
    names = [a.name for a in schema.arguments]
    if overload.endswith("out"):
        expected = {n for n in names if n == "out" or n.endswith("_out")}
    elif op in ("rotary_embedding", "apply_rotary_pos_emb"):
        expected = {"query", "key"}
    elif op == "reshape_and_cache":
        expected = {"key_cache", "value_cache"}
    else:
        expected = set()
    assert mutated == expected
    # A mutating overload returns nothing (torch.compile can only functionalize those).
    if mutated:
        assert len(schema.returns) == 0
    assert all(r.alias_info is None for r in schema.returns)
    last = schema.arguments[-1]
    assert (last.name, str(last.type), last.kwarg_only) == (
        "implementation_index",
        "Optional[int]",
        True,
    )


def test_schema_matches_the_python_signature():
    # Names, order and defaults come from the same C++ constructor as polyops.<op>.
    schema = ops.flash_attention.default._schema
    assert str(schema) == (
        "polyops::flash_attention(Tensor query, Tensor key, Tensor value, *, "
        "Tensor cu_seqlens_q, Tensor cu_seqlens_kv, Tensor? block_table=None, "
        "float? scale=None, bool causal=True, int window_left=-1, int window_right=-1, "
        "int? sliding_window=None, Tensor? cu_seqlens_q_host=None, "
        "Tensor? cu_seqlens_kv_host=None, int? implementation_index=None) -> Tensor"
    )
    assert str(ops.rotary_embedding.default._schema) == (
        "polyops::rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, "
        "int head_size, Tensor cos_sin_cache, bool is_neox_style=True, *, "
        "int? rotary_dim=None, int? implementation_index=None) -> ()"
    )
    assert str(ops.add.out._schema) == (
        "polyops::add.out(Tensor input, Tensor other, *, float alpha=1., Tensor(a!) out, "
        "int? implementation_index=None) -> ()"
    )


# --- opcheck and parity with the fast functions -------------------------------------------


@pytest.mark.parametrize(("op", "overload", "make"), _all_overload_cases())
def test_opcheck(op, overload, make):
    args, kwargs = _overload_case(op, overload, make)
    result = torch.library.opcheck(getattr(getattr(ops, op), overload or "default"), args, kwargs)
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize(("op", "overload", "make"), _all_overload_cases())
def test_same_bits_as_the_fast_function(op, overload, make):
    args, kwargs = _overload_case(op, overload, make)
    fast_args, fast_kwargs = _overload_case(op, overload, make)
    result = getattr(getattr(ops, op), overload or "default")(*args, **kwargs)
    expected = getattr(polyops, op)(*fast_args, **fast_kwargs)
    if result is None:  # a mutating overload: compare what it wrote
        written = [v for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor)]
        fast_written = [
            v for v in (*fast_args, *fast_kwargs.values()) if isinstance(v, torch.Tensor)
        ]
        assert len(written) == len(fast_written)
        for got, want in zip(written, fast_written, strict=True):
            assert torch.equal(got, want)
        return
    results = result if isinstance(result, tuple) else (result,)
    expectations = expected if isinstance(expected, tuple) else (expected,)
    for got, want in zip(results, expectations, strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got, want)


@pytest.mark.parametrize(("op", "overload", "make"), _all_overload_cases())
def test_fake_tensors_give_the_real_metadata(op, overload, make):
    args, kwargs = _overload_case(op, overload, make)
    real = getattr(getattr(ops, op), overload or "default")(*args, **kwargs)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake_args, fake_kwargs = torch.utils._pytree.tree_map_only(
            torch.Tensor, mode.from_tensor, (args, kwargs)
        )
        fake = getattr(getattr(ops, op), overload or "default")(*fake_args, **fake_kwargs)
    reals = real if isinstance(real, tuple) else (real,)
    fakes = fake if isinstance(fake, tuple) else (fake,)
    for r, f in zip(reals, fakes, strict=True):
        if r is None:
            assert f is None
        else:
            assert (f.shape, f.dtype, f.stride()) == (r.shape, r.dtype, r.stride())


def test_the_packet_picks_the_overload_from_the_arguments():
    a, b = _randn(2, 3), _randn(2, 3, seed=1)
    c = torch.empty(2, 3)
    assert ops.add(a, b, out=c) is None
    assert torch.equal(c, polyops.add(a, b))
    assert torch.equal(ops.add(a, b), c)
    logits = _randn(3, 20)
    u = torch.tensor([0.1, 0.5, 0.99])
    k, p = torch.tensor([5, 5, 5]), torch.tensor([0.9, 0.9, 0.9])
    expected = polyops.topk_topp_sampling(logits, 5, 0.9, uniform=u)
    for top_k, top_p in ((5, 0.9), (k, 0.9), (5, p), (k, p)):
        assert torch.equal(ops.topk_topp_sampling(logits, top_k, top_p, uniform=u), expected)


def test_implementation_index_is_honoured():
    a, b = _randn(4, 8), _randn(4, 8, seed=1)
    for slot in polyops.implementations("add"):
        polyops.clear_cache()
        assert torch.equal(ops.add(a, b, implementation_index=slot), polyops.add(a, b))
    with pytest.raises(ValueError, match="implementation_index"):
        ops.add(a, b, implementation_index=7)


# --- errors -------------------------------------------------------------------------------


def test_errors_keep_their_python_types():
    a = _randn(2, 3)
    with pytest.raises(ValueError, match=r"polyops\.add: input of shape \[2, 3\] and other"):
        ops.add(a, _randn(3, 3))
    with pytest.raises(ValueError, match=r"polyops\.add: out must have the broadcast shape"):
        ops.add(a, _randn(1, 3), out=torch.empty(3, 2))
    with pytest.raises(NotImplementedError, match=r"input=torch\.complex64"):
        ops.add(a.to(torch.complex64), a.to(torch.complex64))
    with pytest.raises(ValueError, match="cu_seqlens_q"):
        ops.flash_attention(
            _randn(5, 4, 8),
            _randn(5, 2, 8),
            _randn(5, 2, 8),
            cu_seqlens_q=torch.tensor([0, 9], dtype=torch.int32),
            cu_seqlens_kv=torch.tensor([0, 5], dtype=torch.int32),
        )
    with pytest.raises(RuntimeError):  # torch's schema check: not an int
        ops.add(a, a, implementation_index="0")


def test_error_types_under_inference_mode():
    # Under inference mode no Autograd kernel runs: the stable form's kernel cannot raise
    # NotImplementedError itself, so its message arrives as RuntimeError (docs/user/torch.md).
    a = _randn(2, 3).to(torch.complex64)
    expected = RuntimeError if polyops._torch_library._stable else NotImplementedError
    with torch.inference_mode():
        with pytest.raises(expected, match=r"polyops\.add is not supported for input=torch\.co"):
            ops.add(a, a)
        with pytest.raises(ValueError, match=r"polyops\.add: input of shape \[2, 3\] and other"):
            ops.add(_randn(2, 3), _randn(3, 3))
    # Outside it the same call raises NotImplementedError in both forms.
    with pytest.raises(NotImplementedError, match=r"input=torch\.complex64"):
        ops.add(a, a)


def test_out_overload_requires_the_output_of_an_in_place_input():
    case = _rotary_case()
    positions, query, key, d, cache, neox = case.args
    with pytest.raises(ValueError, match="key_out is required when key is given"):
        ops.rotary_embedding(
            positions, query, key, d, cache, neox, query_out=torch.empty_like(query)
        )
    # Without key nothing else is written: fine.
    out = torch.empty_like(query)
    ops.rotary_embedding(positions, query, None, d, cache, neox, query_out=out)
    expected = query.clone()
    polyops.rotary_embedding(positions, expected, None, d, cache, neox)
    assert torch.equal(out, expected)


def test_importing_polyops_leaves_torch_error_types_alone():
    # polyops' pybind11 exception translator is module-local: torch's own
    # NotImplementedError / ValueError must not turn into RuntimeError.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sparse = torch.randn(2, 2).to_sparse_csr()
    with pytest.raises(NotImplementedError):
        torch.ops.aten.cumsum.default(sparse, 0)


# --- torch.compile --------------------------------------------------------------------------


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, fullgraph=True)


def test_compiled_reshape_and_cache_is_seen_as_a_mutation():
    # If the caches were not declared mutated, the compiler could treat both
    # counts as the same value (the cache "did not change") and return it twice.
    def fn(key, value, key_cache, value_cache, slots):
        before = torch.count_nonzero(key_cache) + torch.count_nonzero(value_cache)
        ops.reshape_and_cache(key, value, key_cache, value_cache, slots)
        after = torch.count_nonzero(key_cache) + torch.count_nonzero(value_cache)
        return before, after, key_cache * 2

    args = _cache_case().args
    eager_args = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    compiled = _compile(fn)(*args)
    eager = fn(*eager_args)
    assert compiled[0] == 0 and compiled[1] != 0
    for got, want in zip(compiled, eager, strict=True):
        assert torch.equal(got, want)
    assert torch.equal(args[2], eager_args[2]) and torch.equal(args[3], eager_args[3])


def test_compiled_in_place_rotary_and_out_are_seen_as_mutations():
    def fn(positions, query, key, d, cache, out):
        doubled_before = query * 2
        ops.rotary_embedding(positions, query, key, d, cache, True)
        ops.add(query, query, out=out)
        return doubled_before, query * 2, out + 0

    case = _rotary_case()
    positions, query, key, d, cache, _ = case.args
    out = torch.zeros_like(query)
    eager_query, eager_key, eager_out = query.clone(), key.clone(), out.clone()
    compiled = _compile(fn)(positions, query, key, d, cache, out)
    eager = fn(positions, eager_query, eager_key, d, cache, eager_out)
    assert not torch.equal(compiled[0], compiled[1])  # the rotation happened in between
    for got, want in zip(compiled, eager, strict=True):
        assert torch.equal(got, want)
    for got, want in ((query, eager_query), (key, eager_key), (out, eager_out)):
        assert torch.equal(got, want)  # the caller's tensors were updated


def test_compiled_dynamic_shapes_do_not_recompile():
    counter = torch._dynamo.testing.CompileCounter()
    torch._dynamo.reset()
    fn = torch.compile(
        lambda x, w: ops.silu_and_mul(ops.rms_norm(x, w, 1e-6)),
        fullgraph=True,
        dynamic=True,
        backend=counter,
    )
    w = _randn(32, seed=1)
    for rows in (3, 5, 17):
        x = _randn(rows, 32, seed=rows)
        assert torch.equal(fn(x, w), polyops.silu_and_mul(polyops.rms_norm(x, w, 1e-6)))
    assert counter.frame_count == 1


def _load_example():
    if "decoder_layer_example" in sys.modules:
        return sys.modules["decoder_layer_example"]
    spec = importlib.util.spec_from_file_location("decoder_layer_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # torch.compile looks the layer's module up by name
    spec.loader.exec_module(module)
    return module


def test_compiled_decoder_layer_matches_eager_polyops():
    example = _load_example()
    args = example.argparse.Namespace(
        hidden=64,
        heads=4,
        kv_heads=2,
        head_size=16,
        intermediate=128,
        vocab=50,
        max_positions=64,
        eps=1e-6,
    )
    dtype, block_size = torch.bfloat16, 4
    w = example.Weights(args, dtype, _gen(0))
    lengths = [1, 5, 9]
    block_table = torch.arange(12, dtype=torch.int32).flip(0).view(3, 4)
    caches = {
        form: (
            torch.zeros(12, block_size, 2, 16, dtype=dtype),
            torch.zeros(12, block_size, 2, 16, dtype=dtype),
        )
        for form in ("eager", "compiled")
    }
    x = _randn(sum(lengths), 64, dtype=dtype)
    positions = torch.cat([torch.arange(n) for n in lengths])
    slots = torch.cat(
        [
            block_table[b, torch.arange(n) // block_size].long() * block_size
            + torch.arange(n) % block_size
            for b, n in enumerate(lengths)
        ]
    )
    cu = torch.tensor([0, 1, 6, 15], dtype=torch.int32)
    layer = functools.partial(example.polyops_layer, ops=ops)
    compiled = _compile(layer)
    eager_out, eager_stages = example.polyops_layer(
        x, positions, (*caches["eager"], slots), w, args, cu, cu, block_table
    )
    out, stages = compiled(x, positions, (*caches["compiled"], slots), w, args, cu, cu, block_table)
    assert torch.equal(out, eager_out)
    assert stages.keys() == eager_stages.keys()
    for name, value in stages.items():
        assert torch.equal(value, eager_stages[name]), name
    for got, want in zip(caches["compiled"], caches["eager"], strict=True):
        assert torch.equal(got, want)  # the compiled reshape_and_cache wrote the caches
    assert caches["eager"][0].abs().sum() > 0
    # One decode step (paged_attention) through the same compiled function.
    step = _randn(3, 64, dtype=dtype, seed=9)
    decode_positions = torch.tensor(lengths)
    decode_slots = torch.stack(
        [
            block_table[b, n // block_size].long() * block_size + n % block_size
            for b, n in enumerate(lengths)
        ]
    )
    cu_kv = torch.tensor([0, 2, 8, 18], dtype=torch.int32)
    eager_out, _ = example.polyops_layer(
        step,
        decode_positions,
        (*caches["eager"], decode_slots),
        w,
        args,
        None,
        cu_kv,
        block_table,
    )
    out, stages = compiled(
        step,
        decode_positions,
        (*caches["compiled"], decode_slots),
        w,
        args,
        None,
        cu_kv,
        block_table,
    )
    assert "paged_attention" in stages
    assert torch.equal(out, eager_out)


def test_the_mutation_checks_catch_an_undeclared_mutation():
    # The control for the two tests above: the same pattern over an op that writes
    # its argument without declaring it returns stale values once compiled.
    lib = torch.library.Library("polyops_test_probe", "DEF")
    try:
        lib.define("undeclared_fill(Tensor x) -> ()")
        lib.impl("undeclared_fill", lambda x: (x.fill_(1.0), None)[1], "CPU")
        torch.library.register_fake("polyops_test_probe::undeclared_fill", lambda x: None, lib=lib)

        def fn(x):
            before = torch.count_nonzero(x)
            torch.ops.polyops_test_probe.undeclared_fill(x)
            return before, torch.count_nonzero(x)

        assert fn(torch.zeros(4)) == (0, 4)
        assert _compile(fn)(torch.zeros(4)) == (0, 0)
    finally:
        lib._destroy()


def test_export_and_meta_tensors():
    class Norm(torch.nn.Module):
        def forward(self, x, w):
            return ops.rms_norm(x, w, 1e-5)

    x, w = _randn(4, 16), _randn(16, seed=1)
    exported = torch.export.export(Norm(), (x, w))
    assert "torch.ops.polyops.rms_norm.default" in exported.graph_module.code
    assert torch.equal(exported.module()(x, w), polyops.rms_norm(x, w, 1e-5))
    joined = ops.cat([torch.empty(2, 3, device="meta"), torch.empty(4, 3, device="meta")])
    assert (joined.shape, joined.device.type) == ((6, 3), "meta")
