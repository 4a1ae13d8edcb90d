"""polyops.integrations.vllm: polyops kernels under vLLM's op names and schemas.

The ops are called the way vLLM calls them (``torch.ops._C.<op>(...)`` with its
argument order, out-variant) and compared with float64 references written from
the math (polyops.testing.references), or with vLLM's own torch reference where
vLLM defines the rounding (silu_and_mul). Registrations are process-global: the
check that needs a clean process (an op vLLM already registered before polyops
registers) runs in a fresh interpreter; the npu device on the CANN double is checked
in the npu process (tests/npu/test_npu_vllm_integration.py).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

import polyops.integrations.vllm as polyops_vllm
from polyops.testing import references as ref
from polyops.testing.tensors import combined_kv
from tests.conftest import BF16, F16, F32, assert_close, assert_equal, dtype_id

REPORT = polyops_vllm.register(["cpu"])


def test_report_lists_every_op_on_cpu():
    assert REPORT.taken_over() == sorted(polyops_vllm.SCHEMAS)
    for op in polyops_vllm.SCHEMAS:
        assert "CPU" in REPORT.registered[op], op
        assert "CPU" not in REPORT.skipped.get(op, {}), op
    assert "_C::rms_norm" in str(REPORT)


def test_schemas_are_vllms():
    for qualname, text in polyops_vllm.SCHEMAS.items():
        namespace, name = qualname.split("::")
        schema = getattr(getattr(torch.ops, namespace), name).default._schema
        assert str(schema) == str(torch._C.parse_schema(f"{qualname.split('::')[0]}::{text}"))


def test_register_again_is_idempotent():
    again = polyops_vllm.register(["cpu"])
    assert again.registered == REPORT.registered
    assert not any("CPU" in reasons for reasons in again.skipped.values())


def test_unknown_device_is_a_value_error():
    with pytest.raises(ValueError, match="devices must be among"):
        polyops_vllm.register(["tpu"])


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=dtype_id)
def test_rms_norm(dtype, gen):
    x = torch.randn(7, 3, 256, generator=gen).to(dtype)
    w = torch.randn(256, generator=gen).to(dtype)
    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x, w, 1e-5)
    assert_close(out, ref.rms_norm_reference(x, w, 1e-5), dtype)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=dtype_id)
def test_fused_add_rms_norm_in_place(dtype, gen):
    x = torch.randn(9, 512, generator=gen).to(dtype)
    r = torch.randn(9, 512, generator=gen).to(dtype)
    w = torch.randn(512, generator=gen).to(dtype)
    expected_y, expected_sum = ref.add_rms_norm_reference(x, r, w, 1e-6)
    torch.ops._C.fused_add_rms_norm(x, r, w, 1e-6)
    assert_equal(r, expected_sum.to(dtype))  # the residual holds x + r, rounded once
    assert_close(x, expected_y, dtype)


@pytest.mark.parametrize("dtype", [F32, F16, BF16], ids=dtype_id)
def test_silu_and_mul_is_vllms_rounding(dtype, gen):
    x = (torch.randn(33, 2 * 1000, generator=gen) * 3).to(dtype)
    out = torch.empty(33, 1000, dtype=dtype)
    torch.ops._C.silu_and_mul(out, x)
    if dtype == F32:
        assert_close(out, ref.silu_and_mul_reference(x), dtype)
    else:  # vLLM's definition, SiluAndMul.forward_native, in the dtype
        assert_equal(out, F.silu(x[..., :1000]) * x[..., 1000:])


@pytest.mark.parametrize("neox", [True, False])
@pytest.mark.parametrize("dtype", [F32, BF16], ids=dtype_id)
def test_rotary_embedding(neox, dtype, gen):
    tokens, head_size, rotary_dim = 11, 64, 32
    positions = torch.randint(0, 100, (tokens,), generator=gen)
    cache = torch.randn(100, rotary_dim, generator=gen).to(dtype)
    query = torch.randn(tokens, 4 * head_size, generator=gen).to(dtype)
    key = torch.randn(tokens, 2, head_size, generator=gen).to(dtype)
    expected_q, expected_k = ref.rotary_embedding_reference(
        positions, query, key, head_size, cache, neox
    )
    torch.ops._C.rotary_embedding(positions, query, key, head_size, cache, neox)
    assert_close(query, expected_q, dtype)
    assert_close(key, expected_k, dtype)
    # key=None (Tensor!? key) and vLLM's older [batch, seq] positions.
    query = torch.randn(2, 5, 4 * head_size, generator=gen).to(dtype)
    batch_positions = positions[:10].view(2, 5)
    expected_q, _ = ref.rotary_embedding_reference(
        batch_positions.reshape(-1), query.view(10, -1), None, head_size, cache, neox
    )
    torch.ops._C.rotary_embedding(batch_positions, query, None, head_size, cache, neox)
    assert_close(query.view(10, -1), expected_q, dtype)


@pytest.mark.parametrize("order", ["nhd", "hnd"])
@pytest.mark.parametrize("dtype", [F32, F16], ids=dtype_id)
def test_reshape_and_cache_flash(order, dtype, gen):
    blocks, block_size, heads, head_size, tokens = 6, 4, 2, 32, 9
    shape = (blocks, block_size, heads, head_size)
    key_cache, value_cache = combined_kv(
        torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype), order
    )
    # Two more rows than slots: vLLM pads key/value for CUDA graphs and writes only
    # slot_mapping's tokens.
    key = torch.randn(tokens + 2, heads, head_size, generator=gen).to(dtype)
    value = torch.randn(tokens + 2, heads, head_size, generator=gen).to(dtype)
    slots = torch.randperm(blocks * block_size, generator=gen)[:tokens]
    slots[3] = -1  # padding token: skipped
    expected = ref.reshape_and_cache_reference(
        key[:tokens], value[:tokens], key_cache, value_cache, slots
    )
    scale = torch.ones(())
    torch.ops._C_cache_ops.reshape_and_cache_flash(
        key, value, key_cache, value_cache, slots, "auto", scale, scale
    )
    assert_equal(key_cache, expected[0])
    assert_equal(value_cache, expected[1])


def test_reshape_and_cache_flash_fp8_is_not_implemented():
    key = torch.randn(2, 1, 16)
    cache = torch.zeros(2, 4, 1, 16)
    with pytest.raises(NotImplementedError, match="kv_cache_dtype.*'fp8'"):
        torch.ops._C_cache_ops.reshape_and_cache_flash(
            key,
            key,
            cache,
            cache.clone(),
            torch.tensor([0, 1]),
            "fp8",
            torch.ones(()),
            torch.ones(()),
        )


def test_errors_name_the_argument():
    x = torch.randn(4, 7)  # odd last dim
    with pytest.raises(ValueError, match="silu_and_mul.*even"):
        torch.ops._C.silu_and_mul(torch.empty(4, 3), x)


def test_torch_compile_traces_the_ops(gen):
    def layer(x, residual, w):
        torch.ops._C.fused_add_rms_norm(x, residual, w, 1e-6)
        out = torch.empty(x.shape[0], x.shape[1] // 2, dtype=x.dtype)
        torch.ops._C.silu_and_mul(out, x)
        return out, residual

    x = torch.randn(4, 64, generator=gen)
    r = torch.randn(4, 64, generator=gen)
    w = torch.randn(64, generator=gen)
    expected = layer(x.clone(), r.clone(), w)
    got = torch.compile(layer, backend="aot_eager", fullgraph=True)(x.clone(), r.clone(), w)
    for a, b in zip(got, expected, strict=True):
        assert_equal(a, b)


def test_opcheck():
    x = torch.randn(3, 64)
    w = torch.randn(64)
    torch.library.opcheck(torch.ops._C.rms_norm.default, (torch.empty_like(x), x, w, 1e-6))
    torch.library.opcheck(torch.ops._C.silu_and_mul.default, (torch.empty(3, 32), x))


def _child(body: str) -> str:
    script = "import torch, polyops\nimport polyops.integrations.vllm as pv\n" + textwrap.dedent(
        body
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_an_existing_vllm_registration_is_kept():
    """vLLM's extension loaded first (simulated with a Library of the same names): its
    CPU kernel stays, polyops only fills the keys without one, and an op defined with
    another schema (another vLLM version) is left alone. Where vLLM's kernel runs, the
    fake does not validate and autograd is torch's; where polyops' runs, both are
    polyops'."""
    out = _child(
        """
        from torch._subclasses.fake_tensor import FakeTensorMode
        lib = torch.library.Library("_C", "DEF")
        lib.define("rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()")
        def sevens(result, input, weight, eps):
            result.fill_(7.0)
        lib.impl("rms_norm", sevens, "CPU")
        lib.define("silu_and_mul(Tensor! out, Tensor input, int extra) -> ()")
        lib.define("rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, "
                   "int head_size, Tensor cos_sin_cache, bool is_neox) -> ()")
        report = pv.register(["cpu"])
        print(report)
        assert "CPU" not in report.registered["_C::rms_norm"], report
        assert "vLLM's extension" in report.skipped["_C::rms_norm"]["CPU"]
        assert "another schema" in report.skipped["_C::silu_and_mul"]["*"]
        assert report.registered["_C::silu_and_mul"] == ()
        assert "CPU" in report.registered["_C::fused_add_rms_norm"]
        x = torch.randn(2, 8)
        out = torch.empty_like(x)
        torch.ops._C.rms_norm(out, x, torch.ones(8), 1e-6)
        assert bool((out == 7.0).all()), "vLLM's kernel was replaced"
        fake = lambda: FakeTensorMode(allow_non_fake_inputs=True)
        with fake():  # vLLM's kernel: polyops' checks do not apply
            torch.ops._C.rms_norm(torch.empty(2, 8), x, torch.ones(5), 1e-6)
        torch.ops._C.rms_norm(out, x.clone().requires_grad_(), torch.ones(8), 1e-6)
        assert report.registered["_C::rotary_embedding"] == ("CPU",), report
        args = (torch.zeros(2, 3, dtype=torch.long), torch.randn(3, 2, 64), None, 64,
                torch.randn(8, 64), True)
        for run in (fake, torch.no_grad):  # polyops' CPU kernel: its checks
            try:
                with run():
                    torch.ops._C.rotary_embedding(*args)
                raise AssertionError("not refused")
            except ValueError as error:
                assert "same batch_size and seq_len" in str(error), error
        try:
            cache = args[4].clone().requires_grad_()
            torch.ops._C.rotary_embedding(args[0][0], args[1][0], None, 64, cache, True)
            raise AssertionError("not refused")
        except NotImplementedError as error:
            assert "polyops._C.rotary_embedding does not support autograd" in str(error)
        print("OK")
        """
    )
    assert out.strip().endswith("OK"), out


# --- autograd, fakes and written views under torch.compile ---------------------------------


def _vllm_calls() -> dict[str, Callable[[], list]]:
    """qualname -> fresh arguments of a valid call, in vLLM's order."""
    g = torch.Generator().manual_seed(5)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g)

    return {
        "_C::rms_norm": lambda: [torch.empty(3, 64), randn(3, 64), randn(64), 1e-6],
        "_C::fused_add_rms_norm": lambda: [randn(3, 64), randn(3, 64), randn(64), 1e-6],
        "_C::silu_and_mul": lambda: [torch.empty(3, 32), randn(3, 64)],
        "_C::rotary_embedding": lambda: [
            torch.tensor([0, 3, 7, 15, 2]),
            randn(5, 128),
            randn(5, 64),
            64,
            randn(16, 64),
            True,
        ],
        "_C_cache_ops::reshape_and_cache_flash": lambda: [
            randn(3, 2, 16),
            randn(3, 2, 16),
            torch.zeros(4, 4, 2, 16),
            torch.zeros(4, 4, 2, 16),
            torch.tensor([5, -1, 13]),
            "auto",
            torch.ones(()),
            torch.ones(()),
        ],
    }


def _op(qualname: str) -> torch._ops.OpOverload:
    namespace, name = qualname.split("::")
    return getattr(getattr(torch.ops, namespace), name).default


def _meta_leaf(value: object) -> object:
    if not isinstance(value, torch.Tensor):
        return value
    return torch.empty_like(value, device="meta").requires_grad_(value.requires_grad)


@pytest.mark.parametrize("qualname", list(polyops_vllm.SCHEMAS))
def test_tensors_that_require_grad_are_refused(qualname):
    op = _op(qualname)
    label = qualname.replace("::", ".")
    arguments = op._schema.arguments
    make = _vllm_calls()[qualname]
    refused = 0
    for index, argument in enumerate(arguments):
        args = make()
        if not isinstance(args[index], torch.Tensor) or not args[index].is_floating_point():
            continue
        args[index] = args[index].clone().requires_grad_()
        written = argument.alias_info is not None and argument.alias_info.is_write
        # A written leaf is refused as torch refuses in-place writes into leaves.
        kind, words = (
            (RuntimeError, f"{argument.name} is a leaf tensor that requires grad")
            if written
            else (NotImplementedError, f"does not support autograd: {argument.name} requires")
        )
        pattern = rf"polyops\.{label}:? {words}"
        with pytest.raises(kind, match=pattern):
            op(*args)
        with pytest.raises(kind, match=pattern):  # the fake path refuses first, too
            op(*[_meta_leaf(a) for a in args])
        with torch.no_grad():
            op(*args)
        refused += 1
    assert refused >= 2, qualname


def test_compiled_vllm_op_refuses_grad_instead_of_dropping_it():
    def fn(x, w):
        out = torch.empty_like(x)
        torch.ops._C.rms_norm(out, x, w, 1e-6)
        return (out + x).sum()

    x = torch.randn(3, 64).requires_grad_()
    for backend in ("aot_eager", "inductor"):
        torch._dynamo.reset()
        with pytest.raises(Exception) as info:  # noqa: B017 - the cause is checked
            torch.compile(fn, backend=backend, fullgraph=True)(x, torch.ones(64))
        causes = [e for e in (info.value, info.value.__cause__) if e is not None]
        assert any(
            isinstance(e, NotImplementedError) and "_C.rms_norm does not support autograd" in str(e)
            for e in causes
        ), repr(info.value)
    assert x.grad is None


def test_fakes_validate_the_call():
    meta = [torch.empty(2, 4, device="meta") for _ in range(2)]
    with pytest.raises(ValueError, match=r"polyops\.rms_norm: weight must have shape \[4\]"):
        torch.ops._C.rms_norm(*meta, torch.empty(5, device="meta"), 1e-6)
    with pytest.raises(ValueError, match=r"silu_and_mul.*even"):
        torch.ops._C.silu_and_mul(
            torch.empty(4, 3, device="meta"), torch.empty(4, 7, device="meta")
        )
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    def fn(out, x, w):
        torch.ops._C.rms_norm(out, x, w, 1e-6)
        return out

    torch._dynamo.reset()
    with pytest.raises(Exception, match=r"weight must have shape \[64\]"):
        torch.compile(fn, backend=backend, fullgraph=True)(
            torch.empty(3, 64), torch.randn(3, 64), torch.randn(65)
        )
    assert not graphs  # refused while tracing


_ROTARY_CACHE = torch.randn(32, 64, generator=torch.Generator().manual_seed(1))


def _rotary(positions, query, key):
    torch.ops._C.rotary_embedding(positions, query, key, 64, _ROTARY_CACHE, True)


@pytest.mark.parametrize(
    ("positions", "query", "key"),
    [
        ((3, 2), (2, 3, 64), None),  # the reported call: same token count, other layout
        ((3, 2), (2, 3, 64), (2, 3, 64)),
        ((2, 3), (2, 3, 64), (3, 2, 64)),  # only key disagrees
        ((2, 3), (2, 192), None),  # query without the seq dim
        ((2, 3, 1), (2, 3, 64), None),  # a third positions dim query lacks
    ],
)
def test_rotary_positions_must_lead_query_and_key(positions, query, key):
    q = torch.randn(*query)
    k = None if key is None else torch.randn(*key)
    before = q.clone()
    shapes = (
        rf"positions \[{', '.join(map(str, positions))}\], "
        rf"query \[{', '.join(map(str, query))}\], "
        + ("key None" if key is None else rf"key \[{', '.join(map(str, key))}\]")
    )
    pattern = (
        r"_C\.rotary_embedding \(polyops\): query, key and positions must have the same "
        rf"batch_size and seq_len .*got {shapes}"
    )
    with pytest.raises(ValueError, match=pattern):
        _rotary(torch.zeros(positions, dtype=torch.long), q, k)
    assert torch.equal(q, before)  # nothing rotated
    # The fake refuses the same call while tracing.
    torch._dynamo.reset()
    with pytest.raises(Exception, match=pattern):
        torch.compile(_rotary, backend="aot_eager", fullgraph=True)(
            torch.zeros(positions, dtype=torch.long), q, k
        )


def test_rotary_tokens_must_be_one_strided_run():
    positions = torch.randint(0, 32, (2, 3), generator=torch.Generator().manual_seed(2))
    query = torch.randn(3, 2, 64).transpose(0, 1)  # [2, 3, 64], batch and seq swapped
    key = torch.randn(2, 3, 64)
    pattern = (
        r"_C\.rotary_embedding \(polyops\): query of shape \[2, 3, 64\] and strides "
        r"\[64, 128, 1\] cannot be read as tokens"
    )
    with pytest.raises(ValueError, match=pattern):
        _rotary(positions, query, key)
    with pytest.raises(ValueError, match=r"key of shape \[2, 3, 64\] .* cannot be read"):
        _rotary(positions, key.clone(), query)
    torch._dynamo.reset()
    with pytest.raises(Exception, match=pattern):
        torch.compile(_rotary, backend="aot_eager", fullgraph=True)(positions, query, key)
    # Positions are only read: any strides, e.g. a transposed [batch, seq] table.
    transposed = positions.t().contiguous().t()
    query = torch.randn(2, 3, 64)
    expected_q, expected_k = query.clone(), key.clone()
    _rotary(transposed, query, key)
    want_q, want_k = ref.rotary_embedding_reference(
        positions.reshape(-1),
        expected_q.view(6, 64),
        expected_k.view(6, 64),
        64,
        _ROTARY_CACHE,
        True,
    )
    assert_close(query.view(6, 64), want_q, F32)
    assert_close(key.view(6, 64), want_k, F32)


def test_rotary_errors_after_flattening_name_the_callers_shapes():
    positions = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match=r"flattened positions \[2, 3\], query \[2, 3, 65\]"):
        _rotary(positions, torch.randn(2, 3, 65), None)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_out_views_land_where_eager_writes_them_under_dynamic_shapes(backend):
    def fn(x, w):
        torch.ops._C.rms_norm(x[2], x[1], w, 1e-6)
        return x.sum()

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    g = torch.Generator().manual_seed(3)
    for rows, width in ((4, 8), (5, 8), (6, 16)):
        x, w = torch.randn(rows, width, generator=g), torch.randn(width, generator=g)
        expected = x.clone()
        fn(expected, w)
        compiled(x, w)
        assert_equal(x, expected)
