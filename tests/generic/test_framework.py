"""The framework around the ops: registry, slot selection, the instance cache, arguments."""

from __future__ import annotations

import ast
import inspect
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch
from conftest import F16, F32, assert_close, assert_equal, make_tensor

import polyops
from polyops.testing import references as ref

EXPECTED_OPS = sorted(
    [
        "add",
        "add_rms_norm",
        "apply_rotary_pos_emb",
        "cast",
        "cat",
        "causal_softmax",
        "flash_attention",
        "gemm",
        "linear",
        "matmul",
        "mul",
        "paged_attention",
        "reshape_and_cache",
        "rms_norm",
        "rotary_embedding",
        "silu_and_mul",
        "swiglu",
        "topk_topp_sampling",
    ]
)

# The CPU slots of the API contract (a build may add more, never lose these).
EXPECTED_CPU_SLOTS = {
    "add": {0: "loop", 1: "omp"},
    "mul": {0: "omp"},
    "cast": {0: "loop"},
    "rms_norm": {0: "loop", 1: "omp"},
    "add_rms_norm": {0: "loop", 1: "omp"},
    "silu_and_mul": {0: "omp"},
    "swiglu": {0: "omp"},
    "cat": {0: "omp"},
    "causal_softmax": {0: "omp"},
    "rotary_embedding": {0: "omp"},
    "apply_rotary_pos_emb": {0: "omp"},
    "reshape_and_cache": {0: "omp"},
    "topk_topp_sampling": {0: "sort"},
    "matmul": {0: "blas"},
    "gemm": {0: "blas"},
    "linear": {0: "blas"},
    "flash_attention": {0: "loop", 1: "omp"},
    "paged_attention": {0: "omp"},
}


def sample_call(op: str, n: int = 8, **kwargs):
    """Calls `op` on small float32 inputs of width `n` and returns (result, reference)."""
    x = torch.linspace(-2.0, 2.0, 3 * n).reshape(3, n)
    w = torch.linspace(0.5, 1.5, n)
    fn = getattr(polyops, op)
    if op in ("add", "mul"):
        return fn(x, w, **kwargs), getattr(ref, f"{op}_reference")(x, w)
    if op == "cast":
        return fn(x, torch.float64, **kwargs), ref.cast_reference(x, torch.float64)
    if op == "rms_norm":
        return fn(x, w, **kwargs), ref.rms_norm_reference(x, w)
    if op == "add_rms_norm":
        return fn(x, x, w, **kwargs)[0], ref.add_rms_norm_reference(x, x, w)[0]
    if op == "silu_and_mul":
        return fn(x, **kwargs), ref.silu_and_mul_reference(x)
    if op == "swiglu":
        return fn(x, x, **kwargs), ref.swiglu_reference(x, x)
    if op == "cat":
        return fn([x, w[None]], 0, **kwargs), ref.cat_reference([x, w[None]], 0)
    if op == "causal_softmax":
        return fn(x, **kwargs), ref.causal_softmax_reference(x)
    if op in ("rotary_embedding", "apply_rotary_pos_emb"):  # one neox head of size n
        positions = torch.tensor([2, 0, 1])
        cache = torch.linspace(-1.0, 1.0, 4 * n).reshape(4, n)
        cos, sin = cache[positions, : n // 2], cache[positions, n // 2 :]
        expected = ref.rotate_reference(x, cos, sin, n, True)
        if op == "rotary_embedding":
            return fn(positions, x.clone(), None, n, cache, **kwargs)[0], expected
        return fn(x.clone(), None, cos.contiguous(), sin.contiguous(), **kwargs)[0], expected
    if op == "reshape_and_cache":  # tokens 0, 1, 2 into slots 3, 0, 1 of 2 blocks of 2
        key_cache, value_cache = torch.zeros(2, 2, 1, n), torch.zeros(2, 2, 1, n)
        key, slots = x.reshape(3, 1, n), torch.tensor([3, 0, 1])
        expected = ref.reshape_and_cache_reference(key, key, key_cache, value_cache, slots)[0]
        fn(key, key, key_cache, value_cache, slots, **kwargs)
        return key_cache, expected
    if op == "topk_topp_sampling":
        # u = 0 picks each row's largest logit: the last of an increasing row.
        uniform = torch.zeros(3)
        return fn(x, 0, 1.0, uniform=uniform, **kwargs), torch.full((3,), n - 1)
    if op in ("matmul", "gemm"):
        return fn(x, x.T.contiguous(), **kwargs), ref.matmul_reference(x, x.T)
    if op == "linear":
        return fn(x, x, **kwargs), ref.linear_reference(x, x)
    if op in ("flash_attention", "paged_attention"):
        # One head of size n over 3 tokens; key = x / 2, value = x.
        q, k = x[:, None, :], (x / 2)[:, None, :]
        cu = torch.tensor([0, 3], dtype=torch.int32)
        expected = ref.flash_attention_reference(q, k, q, cu_seqlens_q=cu, cu_seqlens_kv=cu)
        if op == "flash_attention":
            return fn(q, k, q, cu_seqlens_q=cu, cu_seqlens_kv=cu, **kwargs), expected
        # Decode: token b sees the first b + 1 tokens, blocks of one token.
        lens = torch.tensor([1, 2, 3], dtype=torch.int32)
        table = torch.tensor([[0, 1, 2]] * 3, dtype=torch.int32)
        return fn(q, k[:, None], q[:, None], lens, table, **kwargs), expected
    raise AssertionError(op)


def assert_sample_result(result, expected):
    """sample_call's result against its reference: exact for integer results."""
    if result.dtype.is_floating_point:
        assert_close(result, expected, result.dtype)
    else:
        assert_equal(result, expected)


EVERY_COUNTER = ("hits", "misses", "evictions")


def _deltas(op, before, keys=("hits", "misses")):
    """Counter changes since `before`. Evictions are left out unless asked for: with a
    full cache (the suite fills it) every miss may evict an older entry."""
    after = polyops.cache_info(op)
    return {key: after[key] - before[key] for key in keys}


# ---------------------------------------------------------------------------
# Registry


def test_operators_lists_every_op_as_a_function():
    assert sorted(polyops.operators()) == EXPECTED_OPS
    for op in polyops.operators():
        fn = getattr(polyops, op)
        assert callable(fn)
        assert fn.__name__ == op
        assert op in polyops.__all__
        assert fn.__doc__ and fn.__doc__.strip(), f"{op} has no docstring"


def test_devices():
    devices = polyops.devices()
    assert "cpu" in devices
    assert set(devices) <= {"cpu", "cuda", "npu"}


@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_implementations_and_defaults(op):
    slots = polyops.implementations(op)
    assert slots == polyops.implementations(op, "cpu")
    for slot, name in EXPECTED_CPU_SLOTS[op].items():
        assert slots.get(slot) == name, f"{op}: {slots}"
    assert all(isinstance(s, int) and isinstance(n, str) and n for s, n in slots.items())
    assert polyops.default_implementation(op) in slots
    assert polyops.default_implementation(op, "cpu") == polyops.default_implementation(op)


def test_documented_defaults(default_slot_reset):
    assert polyops.default_implementation("rms_norm") == 1
    assert polyops.default_implementation("add_rms_norm") == 1


@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_every_slot_computes(op):
    for slot in polyops.implementations(op):
        result, expected = sample_call(op, implementation_index=slot)
        assert_sample_result(result, expected)


@pytest.mark.parametrize("bad", [-1, 7, 8, 100])
@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_invalid_implementation_index(op, bad):
    available = ", ".join(f"{s} ({n})" for s, n in sorted(polyops.implementations(op).items()))
    message = (
        f"polyops.{op}: implementation_index={bad} does not exist on device 'cpu'; "
        f"available: {available}"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        sample_call(op, implementation_index=bad)


def test_invalid_implementation_index_lists_names():
    with pytest.raises(ValueError, match=r"available: 0 \(loop\), 1 \(omp\)"):
        sample_call("add", implementation_index=2)
    with pytest.raises(ValueError, match=r"polyops\.add: implementation_index does not fit"):
        sample_call("add", implementation_index=2**70)


@pytest.mark.parametrize("op", EXPECTED_OPS)
def test_implementation_by_name_is_that_slot(op):
    """implementation="<name>" runs the slot of that name and, like an explicit index,
    never another: with that slot made to refuse, the call raises instead of falling back."""
    slots = polyops.implementations(op)
    try:
        for slot, name in slots.items():
            result, expected = sample_call(op, implementation=name)
            assert_sample_result(result, expected)
            polyops._C._refuse_implementations(op, "cpu", [slot])
            polyops.clear_cache()
            with pytest.raises(NotImplementedError, match=f"implementation_index={slot} "):
                sample_call(op, implementation=name)
            for other, other_name in slots.items():
                if other != slot:
                    assert_sample_result(*sample_call(op, implementation=other_name))
    finally:
        polyops._C._refuse_implementations(op, "cpu", [])
        polyops.clear_cache()


def test_implementation_by_name_errors():
    message = "polyops.add: implementation='fast' does not exist on device 'cpu'; available: "
    with pytest.raises(ValueError, match="^" + re.escape(message) + r"0 \(loop\), 1 \(omp\)$"):
        sample_call("add", implementation="fast")
    with pytest.raises(TypeError, match=r"^polyops\.add: implementation must be a str .*got int$"):
        sample_call("add", implementation=1)
    with pytest.raises(TypeError, match="pass implementation_index or implementation, not both"):
        sample_call("add", implementation="omp", implementation_index=1)


def test_unknown_op_and_device():
    with pytest.raises(ValueError, match=r"unknown op 'nope'; known ops: add, "):
        polyops.implementations("nope")
    with pytest.raises(ValueError, match=r"polyops\.default_implementation: unknown op 'nope'"):
        polyops.default_implementation("nope")
    with pytest.raises(ValueError, match=r"polyops\.cache_info: unknown op 'nope'"):
        polyops.cache_info("nope")
    with pytest.raises(ValueError, match=r"unknown op 'nope'"):
        polyops.set_default_implementation("nope", 0)
    with pytest.raises(ValueError, match=r"unknown op 'nope'"):
        polyops.set_default_implementation("nope", None, device="cpu")
    with pytest.raises(ValueError, match=r"polyops\.implementations: unknown device 'tpu'"):
        polyops.implementations("add", "tpu")
    with pytest.raises(ValueError, match=r"polyops\.default_implementation: unknown device 'tpu'"):
        polyops.default_implementation("add", "tpu")
    with pytest.raises(
        ValueError, match=r"polyops\.set_default_implementation: unknown device 'tpu'"
    ):
        polyops.set_default_implementation("add", 0, device="tpu")


# ---------------------------------------------------------------------------
# Slot selection


def test_set_default_implementation_selects_the_slot(default_slot_reset):
    assert polyops.default_implementation("add") == 1
    a = torch.randn(3, 1237)
    b = torch.randn(1237)
    polyops.set_default_implementation("add", 0)
    assert polyops.default_implementation("add") == 0
    before = polyops.cache_info("add")
    assert_close(polyops.add(a, b), a.double() + b.double(), F32)  # runs slot 0: a new key
    assert _deltas("add", before) == {"hits": 0, "misses": 1}
    polyops.add(a, b, implementation_index=0)  # the same instance
    assert _deltas("add", before) == {"hits": 1, "misses": 1}
    polyops.add(a, b, implementation_index=1)  # the other slot: a new instance
    assert _deltas("add", before) == {"hits": 1, "misses": 2}
    # An explicit device works too, and None restores the build's default.
    polyops.set_default_implementation("add", None, device="cpu")
    assert polyops.default_implementation("add") == 1
    polyops.add(a, b)  # slot 1 again: cached
    assert _deltas("add", before) == {"hits": 2, "misses": 2}
    polyops.set_default_implementation("add", 0, device="cpu")
    assert polyops.default_implementation("add") == 0
    polyops.set_default_implementation("add", None)
    assert polyops.default_implementation("add") == 1


def test_set_default_implementation_changes_which_kernel_runs(default_slot_reset):
    # rms_norm's two slots sum in different orders: float32 results over a long
    # row differ in the last bits, so the override is visible in the output.
    x = make_tensor((4, 3001), F32, torch.Generator().manual_seed(5))
    w = torch.ones(3001)
    by_slot = {s: polyops.rms_norm(x, w, implementation_index=s) for s in (0, 1)}
    assert not torch.equal(by_slot[0], by_slot[1]), "slots agree bitwise; pick other data"
    for slot in (0, 1):
        polyops.set_default_implementation("rms_norm", slot)
        assert_equal(polyops.rms_norm(x, w), by_slot[slot])
    polyops.set_default_implementation("rms_norm", None)
    assert_equal(polyops.rms_norm(x, w), by_slot[1])


def test_set_default_implementation_rejects_missing_slots(default_slot_reset):
    with pytest.raises(
        ValueError,
        match=r"^polyops\.set_default_implementation: add has no implementation_index=5 "
        r"on any built device",
    ):
        polyops.set_default_implementation("add", 5)
    with pytest.raises(
        ValueError,
        match=r"^polyops\.set_default_implementation: mul has no implementation_index=1 on "
        r"device 'cpu'; available: 0 \(omp\)",
    ):
        polyops.set_default_implementation("mul", 1, device="cpu")
    assert polyops.default_implementation("add") == 1
    assert polyops.default_implementation("mul") == 0


BAD_ENVIRONMENT = {
    "bad_slot": ("rms_norm=9", r"rms_norm has no implementation_index=9"),
    "malformed": ("rms_norm", r"expected entries like 'rms_norm=1', got 'rms_norm'"),
    "not_a_number": ("add=one", r"expected entries like 'rms_norm=1', got 'add=one'"),
    "unknown_op": ("no_such_op=1", r"unknown op 'no_such_op'"),
}

GOOD_ENVIRONMENT = " rms_norm=0, add=0 ,"  # spaces and a trailing comma are allowed

# Imports polyops under each POLYOPS_IMPLEMENTATIONS value in turn, in one
# interpreter (torch is imported once): first the good value, in a fresh
# interpreter, then each bad one, which must fail the import with ValueError.
# A failed import leaves no `polyops` in sys.modules, so the next attempt runs
# polyops/__init__.py again.
_ENVIRONMENT_SCRIPT = """
import json, os, sys
results = {}
for name, spec in json.loads(sys.argv[1]):
    os.environ["POLYOPS_IMPLEMENTATIONS"] = spec
    try:
        import polyops
    except ValueError as error:
        results[name] = {"error": str(error)}
    else:
        results[name] = {op: polyops.default_implementation(op) for op in polyops.operators()}
        del sys.modules["polyops"]
print(json.dumps(results))
"""


#: POLYOPS_CPU_ISA values that must fail the import: only baseline, avx2 and
#: avx512, exactly, are accepted (unset or empty: no cap).
BAD_ISA = ["AVX2", "avx2 ", " ", "bogus", "avx512bf16"]

# Imports polyops under each POLYOPS_CPU_ISA value in turn, in one interpreter:
# the variable is read once, by the import, and a failed read is retried.
_ISA_SCRIPT = """
import json, os, sys
os.environ.pop("POLYOPS_IMPLEMENTATIONS")
results = {}
for value in json.loads(sys.argv[1]):
    os.environ["POLYOPS_CPU_ISA"] = value
    try:
        import polyops
    except ValueError as error:
        results[value] = {"error": str(error)}
    else:
        results[value] = {"isa": polyops._C._cpu_isa()}
        del sys.modules["polyops"]
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def environment_runs():
    """Fresh interpreters (same executable, PYTHONPATH inherited) importing polyops
    under POLYOPS_IMPLEMENTATIONS values; started together, as each imports torch."""
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(polyops.__file__)))
    path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    specs = [("good", GOOD_ENVIRONMENT)] + [(k, v[0]) for k, v in BAD_ENVIRONMENT.items()]
    commands = {
        "imports": [sys.executable, "-c", _ENVIRONMENT_SCRIPT, json.dumps(specs)],
        # A plain `import polyops` with a bad value, left uncaught.
        "crash": [sys.executable, "-c", "import polyops"],
        "isa": [sys.executable, "-c", _ISA_SCRIPT, json.dumps([*BAD_ISA, "avx2"])],
    }
    processes = {
        name: subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": path, "POLYOPS_IMPLEMENTATIONS": "rms_norm=9"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, command in commands.items()
    }
    results = {}
    for name, process in processes.items():
        out, err = process.communicate(timeout=120)
        results[name] = (process.returncode, out, err)
    return results


def test_environment_override(environment_runs):
    code, out, err = environment_runs["imports"]
    assert code == 0, err
    defaults = json.loads(out)["good"]
    assert defaults["rms_norm"] == 0
    assert defaults["add"] == 0
    assert defaults["add_rms_norm"] == 1  # untouched


def test_environment_override_bad_value_fails_the_import(environment_runs):
    code, out, err = environment_runs["crash"]
    assert code != 0 and not out
    last_line = err.strip().splitlines()[-1]
    assert last_line.startswith("ValueError: POLYOPS_IMPLEMENTATIONS='rms_norm=9'"), err
    assert "rms_norm has no implementation_index=9" in last_line


@pytest.mark.parametrize("case", sorted(BAD_ENVIRONMENT))
def test_environment_override_rejects_bad_values(environment_runs, case):
    code, out, err = environment_runs["imports"]
    assert code == 0, err
    result = json.loads(out)[case]
    assert "error" in result, f"import succeeded with {BAD_ENVIRONMENT[case][0]!r}: {result}"
    message = result["error"]
    assert message.startswith("POLYOPS_IMPLEMENTATIONS"), message
    assert re.search(BAD_ENVIRONMENT[case][1], message), message


@pytest.mark.parametrize("value", BAD_ISA)
def test_bad_cpu_isa_fails_the_import(environment_runs, value):
    code, out, err = environment_runs["isa"]
    assert code == 0, err
    assert json.loads(out)[value] == {
        "error": "environment variable POLYOPS_CPU_ISA must be baseline, avx2 or avx512 "
        f"(or unset: the CPU's own best), got '{value}'"
    }


def test_good_cpu_isa_after_bad_ones(environment_runs):
    code, out, err = environment_runs["isa"]
    assert code == 0, err
    # avx2 caps the variant at AVX2 (baseline on a CPU without AVX2 + FMA + F16C).
    assert json.loads(out)["avx2"]["isa"] in ("avx2", "baseline")


def test_bad_cann_double_dir_is_a_value_error(monkeypatch, tmp_path):
    # Refused before anything loads, so it is safe in this process.
    from polyops.testing import use_cann_double

    monkeypatch.setenv("POLYOPS_CANN_DOUBLE_DIR", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match=r"^POLYOPS_CANN_DOUBLE_DIR='.*missing': expected the"):
        use_cann_double()


_LIB_DIR_SCRIPT = """
import os, torch, polyops
from polyops.testing import use_cann_double
use_cann_double()
good = os.environ["POLYOPS_CANN_LIB_DIR"]
a = torch.ones(4).to("npu")
os.environ["POLYOPS_CANN_LIB_DIR"] = os.path.join(good, "missing")
try:
    polyops.add(a, a)
except ValueError as error:
    print(error)
os.environ["POLYOPS_CANN_LIB_DIR"] = good  # the failed load is retried
print(polyops.add(a, a).cpu().tolist())
"""


def test_bad_cann_lib_dir_is_a_value_error_at_the_first_npu_op():
    double = os.path.join(os.path.dirname(polyops.__file__), "_cann_double", "libascendcl.so")
    if "npu" not in polyops._C._built_devices or not os.path.isfile(double):
        pytest.skip("polyops was built without the Ascend backend or its CANN test double")
    child = subprocess.run(
        [sys.executable, "-c", _LIB_DIR_SCRIPT],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert child.returncode == 0, child.stderr
    message, result = child.stdout.splitlines()[-2:]
    assert message.startswith(
        "environment variable POLYOPS_CANN_LIB_DIR must name a directory holding CANN's "
        "libascendcl.so (or libacl_rt.so), got '"
    ), message
    assert "missing" in message and result == "[2.0, 2.0, 2.0, 2.0]"


def test_set_default_implementation_typo_names_the_function_and_the_closest_op():
    with pytest.raises(
        ValueError,
        match=r"^polyops\.set_default_implementation: unknown op 'rms_nrom' "
        r"\(did you mean 'rms_norm'\?\); known ops: add, ",
    ):
        polyops.set_default_implementation("rms_nrom", 0)
    with pytest.raises(ValueError, match=r"^polyops\.implementations: unknown op 'swigl' \(did"):
        polyops.implementations("swigl")


def test_a_dtype_every_slot_refuses_is_explained_once():
    # rms_norm's two CPU slots refuse int32 for the same reason: said once.
    x, w = torch.ones(3, 8, dtype=torch.int32), torch.ones(8, dtype=torch.int32)
    with pytest.raises(NotImplementedError) as info:
        polyops.rms_norm(x, w)
    assert str(info.value) == (
        "polyops.rms_norm is not supported for input of dtype int32 because it is implemented "
        "for float16, bfloat16 and float32 only (no other implementation on device 'cpu' "
        "accepts them either)"
    )


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
# Instance cache


def _swiglu(n: int, value: float = 1.0):
    x = torch.full((n,), value)
    return polyops.swiglu(x, x, implementation_index=0)


def test_cache_counts_hits_and_misses():
    before = polyops.cache_info("swiglu")
    _swiglu(1901)
    assert _deltas("swiglu", before) == {"hits": 0, "misses": 1}
    out = _swiglu(1901, value=2.0)  # new data, same key
    assert _deltas("swiglu", before) == {"hits": 1, "misses": 1}
    assert_close(out, torch.full((1901,), 2.0 * 2.0 / (1 + torch.exp(torch.tensor(-2.0)))), F32)


def test_cache_keys_on_eps_strides_dtype_and_slot(gen):
    x = make_tensor((6, 40), F32, gen)
    w = make_tensor((40,), F32, gen)
    polyops.rms_norm(x, w, 1e-6, implementation_index=0)
    before = polyops.cache_info("rms_norm")
    polyops.rms_norm(x, w, 1e-6, implementation_index=0)
    assert _deltas("rms_norm", before)["misses"] == 0
    polyops.rms_norm(x, w, 1e-5, implementation_index=0)
    assert _deltas("rms_norm", before)["misses"] == 1  # eps by value
    polyops.rms_norm(x, w, 1e-6, implementation_index=1)
    assert _deltas("rms_norm", before)["misses"] == 2  # slot
    polyops.rms_norm(torch.randn(12, 40)[::2], w, 1e-6, implementation_index=0)
    assert _deltas("rms_norm", before)["misses"] == 3  # strides
    polyops.rms_norm(x.to(F16), w.to(F16), 1e-6, implementation_index=0)
    assert _deltas("rms_norm", before)["misses"] == 4  # dtype
    polyops.rms_norm(make_tensor((6, 40), F32, gen), w, 1e-6, implementation_index=0)
    assert _deltas("rms_norm", before) == {"hits": 2, "misses": 4}


def test_cache_lru_eviction(cache_capacity):
    cache_capacity(4)
    assert polyops.cache_info("swiglu")["capacity"] == 4
    assert polyops.cache_info()["capacity"] == 4
    assert polyops.cache_info("swiglu")["size"] <= 4
    a, b, c, d, e = 2001, 2002, 2003, 2004, 2005
    for n in (a, b, c, d):
        _swiglu(n)
    # Only our four entries are left; the LRU order is a (oldest), b, c, d.
    assert polyops.cache_info("swiglu")["size"] == 4
    before = polyops.cache_info("swiglu")
    _swiglu(a)  # touch a: b becomes the oldest
    assert _deltas("swiglu", before, EVERY_COUNTER) == {"hits": 1, "misses": 0, "evictions": 0}
    _swiglu(e)  # evicts b
    assert _deltas("swiglu", before, EVERY_COUNTER) == {"hits": 1, "misses": 1, "evictions": 1}
    _swiglu(a)  # survived
    assert _deltas("swiglu", before, EVERY_COUNTER) == {"hits": 2, "misses": 1, "evictions": 1}
    _swiglu(b)  # was evicted: rebuilt, evicting c
    assert _deltas("swiglu", before, EVERY_COUNTER) == {"hits": 2, "misses": 2, "evictions": 2}
    _swiglu(d)
    assert _deltas("swiglu", before, EVERY_COUNTER) == {"hits": 3, "misses": 2, "evictions": 2}
    _swiglu(c)
    assert _deltas("swiglu", before, EVERY_COUNTER) == {"hits": 3, "misses": 3, "evictions": 3}
    assert polyops.cache_info("swiglu")["size"] == 4


def test_cache_capacity_bounds_size(cache_capacity):
    cache_capacity(4)
    start = polyops.cache_info("mul")
    for n in range(3001, 3007):  # six distinct shapes
        x = torch.ones(n)
        assert_equal(polyops.mul(x, x, implementation_index=0), x)
    info = polyops.cache_info("mul")
    assert info["size"] == 4
    assert info["misses"] - start["misses"] == 6
    assert info["evictions"] - start["evictions"] == start["size"] + 6 - 4
    # Shrinking evicts at once, in every op's cache.
    for op in EXPECTED_OPS:
        sample_call(op)
    before = {op: polyops.cache_info(op) for op in EXPECTED_OPS}
    cache_capacity(1)
    for op in EXPECTED_OPS:
        info = polyops.cache_info(op)
        assert info["size"] == 1 and info["capacity"] == 1
        assert info["evictions"] - before[op]["evictions"] == before[op]["size"] - 1
    # Growing keeps what is there.
    cache_capacity(256)
    assert all(polyops.cache_info(op)["size"] == 1 for op in EXPECTED_OPS)


def test_cache_info_total_is_the_sum():
    for op in EXPECTED_OPS:
        sample_call(op)
    per_op = [polyops.cache_info(op) for op in polyops.operators()]
    total = polyops.cache_info()
    for key in ("hits", "misses", "evictions", "size"):
        assert total[key] == sum(info[key] for info in per_op), key
    assert total["capacity"] == 256 == per_op[0]["capacity"]
    assert set(total) == {"hits", "misses", "evictions", "size", "capacity"}


def test_clear_cache_resets_everything():
    for op in EXPECTED_OPS:
        sample_call(op)
    assert polyops.cache_info()["size"] >= len(EXPECTED_OPS)
    polyops.clear_cache()
    zero = {"hits": 0, "misses": 0, "evictions": 0, "size": 0, "capacity": 256}
    assert polyops.cache_info() == zero
    for op in EXPECTED_OPS:
        assert polyops.cache_info(op) == zero
    # Instances are rebuilt on demand and compute correctly.
    for op in EXPECTED_OPS:
        result, expected = sample_call(op)
        assert_sample_result(result, expected)
    assert polyops.cache_info()["misses"] == len(EXPECTED_OPS)


def test_set_cache_capacity_rejects_bad_values(cache_capacity):
    for bad in (0, -3):
        with pytest.raises(ValueError, match=r"^polyops\.set_cache_capacity: n must be >= 1"):
            polyops.set_cache_capacity(bad)
    with pytest.raises(TypeError):
        polyops.set_cache_capacity("3")
    assert polyops.cache_info()["capacity"] == 256


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
