"""The ops' arguments: the signatures documented in README.md and docs/user/api.md,
positional and keyword forms, type errors, stream=, tensors on an unsupported device,
eps values and omitted outputs."""

from __future__ import annotations

import ast
import inspect
import pathlib
import re

import pytest
import torch

import polyops
from tests.conftest import F16, F32, assert_equal, make_tensor
from tests.generic._framework_cases import EXPECTED_OPS, assert_sample_result, sample_call

# ---------------------------------------------------------------------------
# Documented signatures

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _documented_signatures(text: str) -> dict[str, str]:
    """``op -> "params"``: the first backticked ``op(params)`` of each operator in the
    tables of `text`."""
    found = {}
    rows = "\n".join(line for line in text.splitlines() if line.startswith("|"))
    for segment in re.findall(r"`([^`]+)`", rows):
        name, _, rest = segment.partition("(")
        if name not in polyops.operators() or not rest:
            continue
        depth = 1
        for end, char in enumerate(rest):
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth == 0:
                found.setdefault(name, rest[:end])
                break
    return found


def _parameters(params: str) -> list[tuple]:
    """(name, kind, default) of each parameter of a signature's text."""
    args = ast.parse(f"def f({params}): pass").body[0].args
    positional = [(a.arg, "positional") for a in args.args]
    defaults = [None] * (len(positional) - len(args.defaults)) + [
        ast.literal_eval(d) for d in args.defaults
    ]
    keyword = [(a.arg, "keyword") for a in args.kwonlyargs]
    kw_defaults = [None if d is None else ast.literal_eval(d) for d in args.kw_defaults]
    return [(*p, d) for p, d in zip(positional + keyword, defaults + kw_defaults, strict=True)]


def _binding_parameters(op: str) -> list[tuple]:
    kinds = {inspect.Parameter.POSITIONAL_OR_KEYWORD: "positional"}
    return [
        (p.name, kinds.get(p.kind, "keyword"), None if p.default is p.empty else p.default)
        for p in inspect.signature(getattr(polyops, op)).parameters.values()
        if p.name not in ("implementation_index", "implementation", "stream")
    ]


@pytest.mark.parametrize("document", ["README.md", "docs/user/api.md"])
def test_documented_signatures_are_the_bindings(document):
    # Every op's signature in the document's op table, `out=None` included, is the
    # binding's (less the implementation_index=, implementation= and stream= every op
    # takes).
    signatures = _documented_signatures((ROOT / document).read_text())
    assert sorted(signatures) == sorted(polyops.operators())
    for op, params in signatures.items():
        assert _parameters(params) == _binding_parameters(op), (document, op, params)


def test_api_operator_table_is_one_table():
    # A blank line ends a markdown table: every op must be a row of the one table.
    text = (ROOT / "docs" / "user" / "api.md").read_text()
    lines = text[text.index("| op | semantics |") :].splitlines()
    rows = lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))]
    assert sorted(_documented_signatures("\n".join(rows))) == sorted(polyops.operators())


# ---------------------------------------------------------------------------
# Arguments


@pytest.mark.parametrize("stream", [None, 0, 12345, 2**40])
@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_stream_is_accepted_and_ignored_on_cpu(op, stream):
    result, expected = sample_call(op, stream=stream)
    assert_sample_result(result, expected)


def test_keyword_and_positional_forms_agree(gen):
    x = make_tensor((3, 16), F32, gen)
    w = make_tensor((16,), F32, gen)
    positional = polyops.rms_norm(x, w, 1e-5)
    keywords = polyops.rms_norm(input=x, weight=w, eps=1e-5)
    mixed = polyops.rms_norm(x, weight=w, eps=1e-5, out=None, implementation_index=None)
    assert_equal(positional, keywords)
    assert_equal(positional, mixed)
    y, s = polyops.add_rms_norm(x1=x, x2=x, gamma=w)
    assert_equal(s, x + x)
    assert_equal(polyops.cast(input=x, dtype=F16), x.to(F16))


def test_type_errors():
    x = torch.ones(2, 4)
    with pytest.raises(TypeError, match=r"polyops\.add: input must be a torch\.Tensor, got str"):
        polyops.add("a", x)
    with pytest.raises(TypeError, match=r"polyops\.add: other must be a torch\.Tensor"):
        polyops.add(x, None)
    with pytest.raises(TypeError, match=r"polyops\.add: other must be a torch\.Tensor"):
        polyops.add(x, [1.0, 2.0])
    with pytest.raises(TypeError, match=r"polyops\.add\(\) missing required argument 'other'"):
        polyops.add(x)
    with pytest.raises(TypeError, match=r"polyops\.add\(\) missing required argument 'input'"):
        polyops.add()
    with pytest.raises(TypeError, match=r"polyops\.add\(\) takes at most 2 positional"):
        polyops.add(x, x, x)  # out is keyword-only
    with pytest.raises(TypeError, match=r"polyops\.add\(\) got an unexpected keyword .*'foo'"):
        polyops.add(x, x, foo=1)
    with pytest.raises(TypeError, match=r"polyops\.add\(\) got multiple values for .*'other'"):
        polyops.add(x, x, other=x)
    with pytest.raises(TypeError, match=r"polyops\.add: out must be a torch\.Tensor"):
        polyops.add(x, x, out=3)
    with pytest.raises(TypeError, match=r"polyops\.add: implementation_index must be an int"):
        polyops.add(x, x, implementation_index="1")
    with pytest.raises(TypeError, match=r"polyops\.add: implementation_index must be an int"):
        polyops.add(x, x, implementation_index=1.0)
    with pytest.raises(TypeError, match=r"polyops\.add: stream must be an int"):
        polyops.add(x, x, stream=1.5)
    with pytest.raises(TypeError, match=r"polyops\.rms_norm: eps must be a float"):
        polyops.rms_norm(x, torch.ones(4), "1e-6")
    with pytest.raises(TypeError, match=r"polyops\.cast: dtype must be a torch\.dtype"):
        polyops.cast(x, "float16")
    with pytest.raises(TypeError, match=r"polyops\.add_rms_norm: y_out must be a torch\.Tensor"):
        polyops.add_rms_norm(x, x, torch.ones(4), y_out=x.tolist())
    with pytest.raises(TypeError, match=r"polyops\.silu_and_mul\(\) takes at most 1 positional"):
        polyops.silu_and_mul(x, x)


def _meta(*shape):
    return torch.empty(*shape, device="meta")


# (call on tensors of torch's "meta" device, the argument the error must name)
META_CALLS = {
    "add": (lambda: polyops.add(_meta(3, 8), _meta(8)), "input"),
    "mul": (lambda: polyops.mul(torch.ones(3, 8), _meta(8)), "other"),
    "cast": (lambda: polyops.cast(_meta(3, 8), F16), "input"),
    "rms_norm": (lambda: polyops.rms_norm(torch.ones(3, 8), _meta(8)), "weight"),
    "add_rms_norm": (
        lambda: polyops.add_rms_norm(torch.ones(3, 8), _meta(3, 8), torch.ones(8)),
        "x2",
    ),
    "silu_and_mul": (lambda: polyops.silu_and_mul(torch.ones(3, 8), out=_meta(3, 4)), "out"),
    "swiglu": (lambda: polyops.swiglu(_meta(3, 8), _meta(3, 8)), "input"),
    "cat": (lambda: polyops.cat([torch.ones(2), _meta(2)]), "tensors"),
    "causal_softmax": (lambda: polyops.causal_softmax(torch.ones(3, 3), out=_meta(3, 3)), "out"),
    "rotary_embedding": (
        lambda: polyops.rotary_embedding(
            torch.zeros(2, dtype=torch.int64), _meta(2, 8), None, 8, torch.ones(4, 8)
        ),
        "query",
    ),
    "apply_rotary_pos_emb": (
        lambda: polyops.apply_rotary_pos_emb(torch.ones(2, 8), None, _meta(2, 4), torch.ones(2, 4)),
        "cos",
    ),
    "reshape_and_cache": (
        lambda: polyops.reshape_and_cache(
            torch.ones(2, 1, 8),
            torch.ones(2, 1, 8),
            _meta(1, 2, 1, 8),
            torch.ones(1, 2, 1, 8),
            torch.zeros(2, dtype=torch.int64),
        ),
        "key_cache",
    ),
    "topk_topp_sampling": (
        lambda: polyops.topk_topp_sampling(torch.ones(3, 8), 0, 1.0, uniform=_meta(3)),
        "uniform",
    ),
    "matmul": (lambda: polyops.matmul(_meta(3, 8), _meta(8, 4)), "input"),
    "gemm": (lambda: polyops.gemm(_meta(3, 8), _meta(8, 4)), "a"),
    "linear": (lambda: polyops.linear(_meta(3, 8), _meta(4, 8)), "input"),
    "flash_attention": (
        lambda: polyops.flash_attention(
            *[torch.ones(3, 1, 8)] * 3,
            cu_seqlens_q=_meta(2).int(),
            cu_seqlens_kv=torch.tensor([0, 3], dtype=torch.int32),
        ),
        "cu_seqlens_q",
    ),
    "paged_attention": (
        lambda: polyops.paged_attention(
            _meta(3, 1, 8),
            *[torch.ones(3, 1, 1, 8)] * 2,
            torch.ones(3, dtype=torch.int32),
            torch.zeros(3, 1, dtype=torch.int32),
        ),
        "query",
    ),
}


@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_unsupported_device_is_not_implemented(op):
    # The meta device exists in every torch build: no accelerator needed.
    call, argument = META_CALLS[op]
    with pytest.raises(
        NotImplementedError,
        match=rf"^polyops\.{op} is not supported for {argument} on device 'meta'",
    ):
        call()


def test_eps_accepts_ints_and_numpy_like_floats():
    x = torch.full((2, 4), 0.01)
    w = torch.ones(4)
    assert_equal(polyops.rms_norm(x, w, 0), polyops.rms_norm(x, w, 0.0))
    assert_equal(
        polyops.rms_norm(x, w, torch.tensor(1e-3, dtype=torch.float64)),
        polyops.rms_norm(x, w, 1e-3),
    )


def test_omitted_outputs_follow_the_input_dtype_and_are_fresh():
    x = torch.ones(3, 8, dtype=F16)
    first = polyops.add(x, x)
    second = polyops.add(x, x)
    assert first.data_ptr() != second.data_ptr()
    assert first.dtype == F16 and first.device == x.device
    y, s = polyops.add_rms_norm(x, x, torch.ones(8, dtype=F16))
    assert y.data_ptr() != s.data_ptr()
