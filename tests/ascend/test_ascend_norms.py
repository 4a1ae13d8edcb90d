"""The Ascend slots of rms_norm, add_rms_norm, silu_and_mul, swiglu, causal_softmax and cat
on the CANN test double, beyond the parity table (tests/ascend/test_ascend.py runs that):

- the host path of a repeated call: no phase 1, no synchronization, copy or allocation,
  and exactly the launches each slot documents (copies only where a layout needs them);
- causal_softmax's mask: one aclrtMemcpy per instance, never on a hit;
- cat's tensor list: elements re-pointed with aclSetDynamicInputTensorAddr, and every
  descriptor and executor released by clear_cache (the list owns its tensors, trap 13);
- add_rms_norm's aliasing forms (vLLM's in place y_out=x1, x_out=x2 and the others) on
  both slots against the CPU result;
- scratch that carries data between two launches survives the pool growing in between.

Each check runs in a fresh interpreter (use_cann_double() is once per process).
"""

from __future__ import annotations

import textwrap

import pytest
from test_ascend import _skip_reason, run_child

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

# Host-side helpers every child script gets: the phase-1/phase-2 records and the runtime
# calls a hit must not make.
PRELUDE = """
import ctypes, pathlib
import polyops._cann_double as double

def launches(calls):
    return [c["function"] for c in calls if c.get("phase") == 2]

def phase1(calls):
    return [c["function"] for c in calls if c.get("phase") == 1]

def forbidden(calls):
    return [c["function"] for c in calls if c["function"] in (
        "aclrtSynchronizeStream", "aclrtSynchronizeDevice", "aclrtMemcpy", "aclrtMalloc",
        "aclrtFree")]

def failures(calls):
    return [(c["function"], c.get("error")) for c in calls if c.get("status", 0) != 0]

def hit(call, *args):
    # Calls once (the miss), then again on other tensors of the same geometry: returns the
    # second call's log.
    call(*args[0])
    clear_cann_calls()
    call(*args[1])
    return cann_calls()
"""


def run(body: str) -> object:
    return run_child(PRELUDE + textwrap.dedent(body))


def test_a_hit_runs_only_the_documented_launches():
    result = run(
        """
        def npu(*shape, dtype=torch.float32):
            return torch.randn(*shape, dtype=dtype).to("npu")

        # Outputs are allocated up front: torch's allocator (aclrtMalloc, and a free
        # after queued work) must not show in the log of the call.
        cases = {}
        x = [npu(6, 96) for _ in range(2)]
        w = npu(96)
        y = [npu(6, 96) for _ in range(2)]
        cases["rms_norm"] = hit(lambda a, o: polyops.rms_norm(a, w, out=o),
                                (x[0], y[0]), (x[1], y[1]))
        r = [npu(6, 96) for _ in range(2)]
        z = [npu(6, 96) for _ in range(2)]
        cases["add_rms_norm"] = hit(
            lambda a, b, o, p: polyops.add_rms_norm(a, b, w, y_out=o, x_out=p),
            (x[0], r[0], y[0], z[0]), (x[1], r[1], y[1], z[1]))
        g = [npu(4, 20) for _ in range(2)]
        h = [npu(4, 10) for _ in range(2)]
        silu_and_mul = lambda a, o: polyops.silu_and_mul(a, out=o)
        cases["silu_and_mul"] = hit(silu_and_mul, (g[0], h[0]), (g[1], h[1]))
        t = [npu(20, 4).t() for _ in range(2)]
        cases["silu_and_mul strided"] = hit(silu_and_mul, (t[0], h[0]), (t[1], h[1]))
        o = [npu(4, 20)[:, ::2] for _ in range(2)]
        cases["silu_and_mul strided out"] = hit(silu_and_mul, (g[0], o[0]), (g[1], o[1]))
        cases["swiglu"] = hit(lambda a, b, o: polyops.swiglu(a, b, out=o),
                              (x[0], r[0], y[0]), (x[1], r[1], y[1]))
        softmax = lambda a, o: polyops.causal_softmax(a, out=o)
        s = [npu(2, 5, 7) for _ in range(2)]
        so = [npu(2, 5, 7) for _ in range(2)]
        cases["causal_softmax"] = hit(softmax, (s[0], so[0]), (s[1], so[1]))
        cases["causal_softmax in place"] = hit(softmax, (s[0], s[0]), (s[1], s[1]))
        d = [npu(3, 1, 9) for _ in range(2)]
        do = [npu(3, 1, 9) for _ in range(2)]
        cases["causal_softmax q=1"] = hit(softmax, (d[0], do[0]), (d[1], do[1]))
        m = [npu(8, 3) for _ in range(2)]
        mo = [npu(8, 3) for _ in range(2)]
        cases["causal_softmax q>k"] = hit(softmax, (m[0], mo[0]), (m[1], mo[1]))
        pieces = [[npu(2, 3), npu(2, 0), npu(2, 5)] for _ in range(2)]
        co = [npu(2, 8) for _ in range(2)]
        cases["cat"] = hit(lambda p, o: polyops.cat(p, -1, out=o),
                           (pieces[0], co[0]), (pieces[1], co[1]))
        report({name: {"launches": launches(c), "phase1": phase1(c),
                       "forbidden": forbidden(c), "failures": failures(c),
                       "functions": [r["function"] for r in c]}
                for name, c in cases.items()})
        """
    )
    copy, fill = "aclnnInplaceCopy", "aclnnInplaceMaskedFillScalar"
    expected = {
        "rms_norm": ["aclnnRmsNorm"],
        "add_rms_norm": ["aclnnAddRmsNorm"],
        "silu_and_mul": ["aclnnSwiGlu"],
        "silu_and_mul strided": [copy, "aclnnSwiGlu"],
        "silu_and_mul strided out": ["aclnnSwiGlu", copy],
        "swiglu": ["aclnnSilu", "aclnnMul"],
        "causal_softmax": [copy, fill, "aclnnSoftmax", fill],
        "causal_softmax in place": [fill, "aclnnSoftmax", fill],
        "causal_softmax q=1": ["aclnnSoftmax"],
        "causal_softmax q>k": [copy, fill, "aclnnSoftmax", fill],
        "cat": ["aclnnCat"],
    }
    assert set(result) == set(expected)
    for name, launched in expected.items():
        record = result[name]
        assert record["launches"] == launched, (name, record)
        assert record["phase1"] == [], (name, record)
        assert record["forbidden"] == [], (name, record)
        assert record["failures"] == [], (name, record)
    assert "aclSetDynamicInputTensorAddr" in result["cat"]["functions"]


def test_causal_softmax_uploads_its_mask_once_per_instance():
    result = run(
        """
        a, b = torch.randn(2, 6, 9).to("npu"), torch.randn(2, 6, 9).to("npu")
        clear_cann_calls()
        first = polyops.causal_softmax(a)
        miss = [c["function"] for c in cann_calls()]
        clear_cann_calls()
        for _ in range(3):
            polyops.causal_softmax(b)
        hits = [c["function"] for c in cann_calls()]
        expected = torch.softmax(
            a.cpu().masked_fill(torch.ones(6, 9, dtype=torch.bool).triu(9 - 6 + 1), -torch.inf),
            -1)
        report({"miss": miss, "hits": hits,
                "error": (first.cpu() - expected).abs().max().item()})
        """
    )
    assert result["miss"].count("aclrtMemcpy") == 1
    assert "aclrtMemcpy" not in result["hits"]
    assert result["hits"].count("aclnnSoftmax") == 3
    assert result["error"] < 1e-6


def test_clear_cache_releases_every_descriptor_and_executor():
    # cat's list owns its element descriptors: destroying them again would be a double
    # destroy (a failing record); not destroying the list would leak them.
    result = run(
        """
        nnopbase = ctypes.CDLL(str(pathlib.Path(double.active_library_dir) / "libnnopbase.so"))
        nnopbase.polyopsDoubleLiveDescriptors.restype = ctypes.c_size_t
        nnopbase.polyopsDoubleLiveExecutors.restype = ctypes.c_size_t
        def live():
            return (nnopbase.polyopsDoubleLiveDescriptors(),
                    nnopbase.polyopsDoubleLiveExecutors())
        x = torch.randn(5, 16).to("npu")
        xs = torch.randn(6, 16).to("npu")
        polyops.clear_cache()
        before = live()
        clear_cann_calls()
        for _ in range(2):
            polyops.cat([x, x[:, :0], x[:, 3:]], 1)
            polyops.rms_norm(x, x[0])
            polyops.add_rms_norm(x, x, x[0], implementation_index=1)
            polyops.silu_and_mul(xs.t())
            polyops.swiglu(x, x)
            polyops.causal_softmax(x)
        during = live()
        polyops.clear_cache()
        after = live()
        report({"before": before, "during": during, "after": after,
                "failures": failures(cann_calls())})
        """
    )
    assert result["failures"] == []
    assert result["during"][1] > result["before"][1]
    assert result["after"] == result["before"]


ALIASES = {
    "vllm y=x1 x=x2": ("x1", "x2"),
    "y=x2 x=x1": ("x2", "x1"),
    "y=x1": ("x1", None),
    "y=x2": ("x2", None),
    "x=x1": (None, "x1"),
    "x=x2": (None, "x2"),
    "fresh": (None, None),
}


@pytest.mark.parametrize("slot", [0, 1])
def test_add_rms_norm_aliasing_forms_match_cpu(slot):
    result = run(
        f"""
        aliases = {ALIASES!r}
        torch.manual_seed(0)
        base1 = torch.randn(3, 2, 40)
        base2 = torch.randn(3, 2, 40)
        gamma = torch.randn(40)
        y_ref, x_ref = polyops.add_rms_norm(base1, base2, gamma, 1e-6)
        out = {{}}
        for name, (y_is, x_is) in aliases.items():
            # x1 with padded rows (strided), x2 contiguous: the inputs differ in strides.
            x1 = torch.zeros(3, 2, 48).to("npu")[..., :40]
            x1.copy_(base1.to("npu"))
            x2 = base2.to("npu")
            inputs = {{"x1": x1, "x2": x2}}
            y = inputs[y_is] if y_is else torch.empty_like(x2)
            x = inputs[x_is] if x_is else torch.empty_like(x2)
            clear_cann_calls()
            ry, rx = polyops.add_rms_norm(x1, x2, gamma.to("npu"), 1e-6, y_out=y, x_out=x,
                                          implementation_index={slot})
            calls = cann_calls()
            assert ry.data_ptr() == y.data_ptr() and rx.data_ptr() == x.data_ptr()
            out[name] = {{"y": (ry.cpu() - y_ref).abs().max().item(),
                         "x": (rx.cpu() - x_ref).abs().max().item(),
                         "launches": launches(calls), "failures": failures(calls)}}
        report(out)
        """
    )
    for name, record in result.items():
        assert record["failures"] == [], (name, record)
        assert record["x"] == 0.0, (name, record)
        assert record["y"] < 1e-5, (name, record)
    if slot == 1:
        norm = "aclnnInplaceAddRmsNorm"
        assert result["vllm y=x1 x=x2"]["launches"] == [norm]
        assert result["y=x2 x=x1"]["launches"] == [norm]
        for name in ("y=x1", "y=x2", "x=x1", "x=x2"):
            assert result[name]["launches"] == ["aclnnInplaceCopy", norm], name
        assert result["fresh"]["launches"] == ["aclnnInplaceCopy", "aclnnInplaceCopy", norm]
    else:
        assert all(r["launches"] == ["aclnnAddRmsNorm"] for r in result.values())


def test_scratch_between_launches_survives_the_pool_growing():
    # swiglu's silu(gate) lives in the stream's pool between its two launches. On a fresh
    # stream, a first call leaves a 1 MiB pool; a tmp of exactly 1 MiB fits it, the
    # workspace after it does not, so the pool grows (synchronize, free, allocate) after
    # binding and before the first launch, and the scratch operands must follow.
    result = run(
        """
        side = torch.npu.Stream()
        small = torch.randn(4, 8).to("npu")
        n = (1 << 20) // 4
        a, g = torch.randn(n).to("npu"), torch.randn(n).to("npu")
        out = torch.empty(n).to("npu")
        with torch.npu.stream(side):
            polyops.swiglu(small, small)
            clear_cann_calls()
            polyops.swiglu(a, g, out=out)
            calls = cann_calls()
        torch.npu.synchronize()
        expected = a.cpu().double() * torch.nn.functional.silu(g.cpu().double())
        report({"error": ((out.cpu().double() - expected).abs() /
                          (1 + expected.abs())).max().item(),
                "functions": [c["function"] for c in calls],
                "failures": failures(calls)})
        """
    )
    assert result["failures"] == []
    functions = result["functions"]
    # The pool grew (synchronize, free the old block, allocate the new one: nothing of
    # the call is queued yet, so nothing is carried over) before either launch.
    grow = ["aclrtSynchronizeStream", "aclrtFree", "aclrtMalloc"]
    assert [f for f in functions if f in grow] == grow, functions
    assert functions.index("aclrtMalloc") < functions.index("aclnnSilu")
    assert "aclrtMemcpy" not in functions
    assert result["error"] < 1e-6
