"""The Python signatures of the ops match their C++ base classes and the API contract.

The headers are parsed here with a small regex parser of their own, on
purpose independent of scripts/generate_wrappers.py: a generator bug must not
be able to hide itself.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import polyops

BASE_DIR = Path(__file__).resolve().parents[2] / "src" / "base"
COMMON_KEYWORDS = ["implementation_index", "implementation", "stream"]
POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
KEYWORD_ONLY = inspect.Parameter.KEYWORD_ONLY

# The public API contract, written out by hand.
CONTRACT = {
    "add": "(input, other, *, alpha=1.0, out=None)",
    "mul": "(input, other, *, out=None)",
    "cast": "(input, dtype, *, out=None)",
    "rms_norm": "(input, weight, eps=1e-6, *, out=None)",
    "add_rms_norm": "(x1, x2, gamma, eps=1e-6, *, y_out=None, x_out=None)",
    "silu_and_mul": "(input, *, out=None)",
    "swiglu": "(input, gate, *, out=None)",
    "cat": "(tensors, dim=0, *, out=None)",
    "causal_softmax": "(input, *, out=None)",
    "rotary_embedding": (
        "(positions, query, key, head_size, cos_sin_cache, is_neox_style=True, *, "
        "rotary_dim=None, query_out=None, key_out=None)"
    ),
    "apply_rotary_pos_emb": (
        "(query, key, cos, sin, *, is_neox_style=True, query_out=None, key_out=None)"
    ),
    "reshape_and_cache": "(key, value, key_cache, value_cache, slot_mapping, *)",
    "topk_topp_sampling": "(logits, top_k, top_p, *, uniform=None, seed=None, out=None)",
    "matmul": "(input, other, *, out=None)",
    "gemm": "(a, b, c=None, *, alpha=1.0, beta=0.0, trans_a=False, trans_b=False, out=None)",
    "linear": "(input, weight, bias=None, *, out=None)",
    "flash_attention": "(query, key, value, *, cu_seqlens_q, cu_seqlens_kv, block_table=None, "
    "scale=None, causal=True, window_left=-1, window_right=-1, sliding_window=None, "
    "cu_seqlens_q_host=None, cu_seqlens_kv_host=None, out=None)",
    "paged_attention": "(query, key_cache, value_cache, seq_lens, block_table, *, scale=None, "
    "seq_lens_host=None, block_table_host=None, out=None)",
}


# ---------------------------------------------------------------------------
# A tiny C++ header reader


def _strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    return re.sub(r"//[^\n]*", " ", text)


def _balanced(text: str, open_index: int) -> str:
    """The text inside the parenthesis that opens at `open_index`."""
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : i]
    raise ValueError("unbalanced parentheses")


def _split_top_level(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char in "<([{":
            depth += 1
        elif char in ">)]}":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current))
    return [part.strip() for part in parts]


_NO_DEFAULT = object()


def _default_value(text: str):
    text = text.strip()
    if text in ("std::nullopt", "nullptr"):
        return None
    if text in ("true", "false"):
        return text == "true"
    number = re.fullmatch(r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)[fFlLuU]*", text)
    if number:
        literal = number.group(1)
        return float(literal) if re.search(r"[.eE]", literal) else int(literal)
    raise ValueError(f"unrecognized C++ default {text!r}")


def read_header(path: Path):
    """(op name, kNumPositional, [(param, c++ type, default or _NO_DEFAULT)]) or None."""
    text = _strip_comments(path.read_text())
    name = re.search(r'static\s+constexpr\s+const\s+char\s*\*\s*kName\s*=\s*"(\w+)"', text)
    if not name:
        return None
    positional = re.search(r"static\s+constexpr\s+int\s+kNumPositional\s*=\s*(\d+)\s*;", text)
    classes = [
        m
        for m in re.finditer(r"\bclass\s+(\w+)\s*(?:final\s*)?:\s*public\s+[\w:<>]+\s*\{", text)
        if m.start() < name.start()
    ]
    assert classes, f"{path.name}: no class declares kName"
    cls = classes[-1].group(1)
    ctor = re.compile(rf"(?:explicit\s+)?\b{cls}\s*\(").search(text, classes[-1].end())
    assert ctor, f"{path.name}: no constructor of {cls}"
    params = []
    for param in _split_top_level(_balanced(text, ctor.end() - 1)):
        declaration, _, default = param.partition("=")
        ident = re.search(r"(\w+)\s*$", declaration)
        assert ident, f"{path.name}: cannot read parameter {param!r}"
        ctype = declaration[: ident.start()].strip()
        value = _default_value(default) if default else _NO_DEFAULT
        if ctype in ("double", "float") and isinstance(value, int):
            value = float(value)  # `double eps = 0` is the float 0.0 in Python
        params.append((ident.group(1), ctype, value))
    return name.group(1), int(positional.group(1)) if positional else None, params


HEADERS = {}
for _path in sorted(BASE_DIR.glob("*.h")):
    _parsed = read_header(_path)
    if _parsed:
        HEADERS[_parsed[0]] = (_path.name, *_parsed[1:])


def signature_of(op: str) -> inspect.Signature:
    try:
        return inspect.signature(getattr(polyops, op))
    except ValueError as error:  # a builtin without __text_signature__
        pytest.fail(f"inspect.signature(polyops.{op}) failed: {error}")


def _describe(signature: inspect.Signature):
    return [(p.name, p.kind, p.default) for p in signature.parameters.values()]


# ---------------------------------------------------------------------------
# Tests


def test_headers_define_exactly_the_operators():
    assert sorted(HEADERS) == sorted(polyops.operators())
    assert sorted(HEADERS) == sorted(CONTRACT)


@pytest.mark.parametrize("op", sorted(HEADERS))
def test_signature_matches_header(op):
    filename, num_positional, params = HEADERS[op]
    assert num_positional is not None, f"{filename} has no kNumPositional"
    assert 0 <= num_positional <= len(params)
    parameters = list(signature_of(op).parameters.values())
    names = [p.name for p in parameters]
    assert names == [name for name, _, _ in params] + COMMON_KEYWORDS, filename
    for index, (name, ctype, default) in enumerate(params):
        parameter = parameters[index]
        expected_kind = POSITIONAL if index < num_positional else KEYWORD_ONLY
        assert parameter.kind == expected_kind, f"{op}.{name}: {parameter.kind}"
        if "optional" in ctype and default is not _NO_DEFAULT:
            # A required std::optional (rotary_embedding's key) must be passed, maybe as None.
            assert parameter.default is None, f"{op}.{name}: std::optional must default to None"
        if default is _NO_DEFAULT:
            assert parameter.default is inspect.Parameter.empty, f"{op}.{name} has a default"
        else:
            assert parameter.default == default, f"{op}.{name}: {parameter.default!r}"
            assert type(parameter.default) is type(default), f"{op}.{name}"
    positional_count = sum(p.kind == POSITIONAL for p in parameters)
    assert positional_count == num_positional


@pytest.mark.parametrize("op", sorted(CONTRACT))
def test_common_keywords_come_last(op):
    parameters = list(signature_of(op).parameters.values())
    assert [p.name for p in parameters[-3:]] == COMMON_KEYWORDS
    for parameter in parameters[-3:]:
        assert parameter.kind == KEYWORD_ONLY and parameter.default is None


@pytest.mark.parametrize("op", sorted(CONTRACT))
def test_signature_matches_api_contract(op):
    contract = CONTRACT[op]
    full = contract[:-1] + ", implementation_index=None, implementation=None, stream=None)"
    namespace: dict = {}
    exec(f"def expected{full}: pass", namespace)
    expected = inspect.signature(namespace["expected"])
    assert _describe(signature_of(op)) == _describe(expected), f"{op}{full}"


def test_header_reader_sanity():
    # Guards the reader itself against silently matching nothing useful.
    _, num_positional, params = HEADERS["add_rms_norm"]
    assert num_positional == 4
    assert [(name, default) for name, _, default in params] == [
        ("x1", _NO_DEFAULT),
        ("x2", _NO_DEFAULT),
        ("gamma", _NO_DEFAULT),
        ("eps", 1e-6),
        ("y_out", None),
        ("x_out", None),
    ]
    assert _default_value("1e-5f") == 1e-5 and _default_value("3") == 3
    assert _split_top_level("std::pair<int, int> a, b") == ["std::pair<int, int> a", "b"]


def test_header_reader_on_a_synthetic_header(tmp_path):
    header = tmp_path / "thing.h"
    header.write_text(
        """
        // class Decoy : public OperatorBase {  (a comment, not a class)
        class Thing : public OperatorBase {
         public:
          static constexpr const char* kName = "thing";
          static constexpr int kNumPositional = 2;
          explicit Thing(const Tensor& a, /* the scale */ double scale = 2,
                         std::vector<std::pair<int, int>> pairs = {},
                         const std::optional<Tensor>& out = std::nullopt)
              : base_(a) {}
        };
        """
    )
    with pytest.raises(ValueError, match="unrecognized C\\+\\+ default"):
        read_header(header)
    header.write_text(header.read_text().replace(" = {}", ""))
    assert read_header(header) == (
        "thing",
        2,
        [
            ("a", "const Tensor&", _NO_DEFAULT),
            ("scale", "double", 2.0),
            ("pairs", "std::vector<std::pair<int, int>>", _NO_DEFAULT),
            ("out", "const std::optional<Tensor>&", None),
        ],
    )
