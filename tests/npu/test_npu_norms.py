"""The Ascend slots of rms_norm, add_rms_norm, silu_and_mul, swiglu, causal_softmax and cat
on the CANN test double, beyond the parity table (test_npu_parity.py runs that):

- the host path of a repeated call: no phase 1, no synchronization, copy or allocation,
  and exactly the launches each slot documents (copies only where a layout needs them);
- causal_softmax's mask: one aclrtMemcpy per instance, never on a hit;
- cat's tensor list: elements re-pointed with aclSetDynamicInputTensorAddr, and every
  descriptor and executor released by clear_cache (the list owns its tensors, trap 13);
- add_rms_norm's aliasing forms (vLLM's in place y_out=x1, x_out=x2 and the others) on
  both slots against the CPU result;
- scratch that carries data between two launches survives the pool growing in between.

The double is active for this process (tests/npu/conftest.py).
"""

from __future__ import annotations

import ctypes
import pathlib
from collections.abc import Callable

import pytest
import torch

import polyops
import polyops._cann_double as double
from polyops.testing import cann_calls, clear_cann_calls


def launches(calls: list[dict]) -> list[str]:
    return [c["function"] for c in calls if c.get("phase") == 2]


def phase1(calls: list[dict]) -> list[str]:
    return [c["function"] for c in calls if c.get("phase") == 1]


def forbidden(calls: list[dict]) -> list[str]:
    """The runtime calls a hit must not make."""
    return [
        c["function"]
        for c in calls
        if c["function"]
        in (
            "aclrtSynchronizeStream",
            "aclrtSynchronizeDevice",
            "aclrtMemcpy",
            "aclrtMalloc",
            "aclrtFree",
        )
    ]


def failures(calls: list[dict]) -> list[tuple]:
    return [(c["function"], c.get("error")) for c in calls if c.get("status", 0) != 0]


def hit(call: Callable, *args: tuple) -> list[dict]:
    """Calls once (the miss), then again on other tensors of the same geometry: returns the
    second call's log."""
    call(*args[0])
    clear_cann_calls()
    call(*args[1])
    return cann_calls()


def npu(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype).to("npu")


def pair(*shape: int) -> list[torch.Tensor]:
    """Two npu tensors of one geometry (the miss and the hit)."""
    return [npu(*shape) for _ in range(2)]


def _silu_and_mul(a, o):
    return polyops.silu_and_mul(a, out=o)


def _softmax(a, o):
    return polyops.causal_softmax(a, out=o)


def _rms_norm() -> list[dict]:
    x, y, w = pair(6, 96), pair(6, 96), npu(96)
    return hit(lambda a, o: polyops.rms_norm(a, w, out=o), (x[0], y[0]), (x[1], y[1]))


def _add_rms_norm() -> list[dict]:
    x, r, y, z, w = pair(6, 96), pair(6, 96), pair(6, 96), pair(6, 96), npu(96)
    return hit(
        lambda a, b, o, p: polyops.add_rms_norm(a, b, w, y_out=o, x_out=p),
        (x[0], r[0], y[0], z[0]),
        (x[1], r[1], y[1], z[1]),
    )


def _silu_and_mul_contiguous() -> list[dict]:
    g, h = pair(4, 20), pair(4, 10)
    return hit(_silu_and_mul, (g[0], h[0]), (g[1], h[1]))


def _silu_and_mul_strided() -> list[dict]:
    t, h = [npu(20, 4).t() for _ in range(2)], pair(4, 10)
    return hit(_silu_and_mul, (t[0], h[0]), (t[1], h[1]))


def _silu_and_mul_strided_out() -> list[dict]:
    g, o = pair(4, 20), [npu(4, 20)[:, ::2] for _ in range(2)]
    return hit(_silu_and_mul, (g[0], o[0]), (g[1], o[1]))


def _swiglu() -> list[dict]:
    x, r, y = pair(6, 96), pair(6, 96), pair(6, 96)
    return hit(lambda a, b, o: polyops.swiglu(a, b, out=o), (x[0], r[0], y[0]), (x[1], r[1], y[1]))


def _causal_softmax(*shape: int, in_place: bool = False) -> Callable[[], list[dict]]:
    def case() -> list[dict]:
        s = pair(*shape)
        so = s if in_place else pair(*shape)
        return hit(_softmax, (s[0], so[0]), (s[1], so[1]))

    return case


def _cat() -> list[dict]:
    pieces = [[npu(2, 3), npu(2, 0), npu(2, 5)] for _ in range(2)]
    co = pair(2, 8)
    return hit(lambda p, o: polyops.cat(p, -1, out=o), (pieces[0], co[0]), (pieces[1], co[1]))


COPY, FILL = "aclnnInplaceCopy", "aclnnInplaceMaskedFillScalar"

# Case name: (the call on a miss and a hit, the launches the hit must make). Outputs are
# allocated up front: torch's allocator (aclrtMalloc, and a free after queued work) must
# not show in the log of the call.
HIT_CASES = {
    "rms_norm": (_rms_norm, ["aclnnRmsNorm"]),
    "add_rms_norm": (_add_rms_norm, ["aclnnAddRmsNorm"]),
    "silu_and_mul": (_silu_and_mul_contiguous, ["aclnnSwiGlu"]),
    "silu_and_mul strided": (_silu_and_mul_strided, [COPY, "aclnnSwiGlu"]),
    "silu_and_mul strided out": (_silu_and_mul_strided_out, ["aclnnSwiGlu", COPY]),
    "swiglu": (_swiglu, ["aclnnSilu", "aclnnMul"]),
    "causal_softmax": (_causal_softmax(2, 5, 7), [COPY, FILL, "aclnnSoftmax", FILL]),
    "causal_softmax in place": (
        _causal_softmax(2, 5, 7, in_place=True),
        [FILL, "aclnnSoftmax", FILL],
    ),
    "causal_softmax q=1": (_causal_softmax(3, 1, 9), ["aclnnSoftmax"]),
    "causal_softmax q>k": (_causal_softmax(8, 3), [COPY, FILL, "aclnnSoftmax", FILL]),
    "cat": (_cat, ["aclnnCat"]),
}


@pytest.mark.parametrize("name", list(HIT_CASES))
def test_a_hit_runs_only_the_documented_launches(name):
    case, launched = HIT_CASES[name]
    calls = case()
    record = {
        "launches": launches(calls),
        "phase1": phase1(calls),
        "forbidden": forbidden(calls),
        "failures": failures(calls),
    }
    assert record["launches"] == launched, (name, record)
    assert record["phase1"] == [], (name, record)
    assert record["forbidden"] == [], (name, record)
    assert record["failures"] == [], (name, record)
    if name == "cat":
        assert "aclSetDynamicInputTensorAddr" in [r["function"] for r in calls]


def test_causal_softmax_uploads_its_mask_once_per_instance():
    a, b = torch.randn(2, 6, 9).to("npu"), torch.randn(2, 6, 9).to("npu")
    clear_cann_calls()
    first = polyops.causal_softmax(a)
    miss = [c["function"] for c in cann_calls()]
    clear_cann_calls()
    for _ in range(3):
        polyops.causal_softmax(b)
    hits = [c["function"] for c in cann_calls()]
    expected = torch.softmax(
        a.cpu().masked_fill(torch.ones(6, 9, dtype=torch.bool).triu(9 - 6 + 1), -torch.inf), -1
    )
    assert miss.count("aclrtMemcpy") == 1
    assert "aclrtMemcpy" not in hits
    assert hits.count("aclnnSoftmax") == 3
    assert (first.cpu() - expected).abs().max().item() < 1e-6


def test_clear_cache_releases_every_descriptor_and_executor():
    # cat's list owns its element descriptors: destroying them again would be a double
    # destroy (a failing record); not destroying the list would leak them.
    nnopbase = ctypes.CDLL(str(pathlib.Path(double.active_library_dir) / "libnnopbase.so"))
    nnopbase.polyopsDoubleLiveDescriptors.restype = ctypes.c_size_t
    nnopbase.polyopsDoubleLiveExecutors.restype = ctypes.c_size_t

    def live() -> tuple[int, int]:
        return nnopbase.polyopsDoubleLiveDescriptors(), nnopbase.polyopsDoubleLiveExecutors()

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
    assert failures(cann_calls()) == []
    assert during[1] > before[1]
    assert after == before


ALIASES = {
    "vllm y=x1 x=x2": ("x1", "x2"),
    "y=x2 x=x1": ("x2", "x1"),
    "y=x1": ("x1", None),
    "y=x2": ("x2", None),
    "x=x1": (None, "x1"),
    "x=x2": (None, "x2"),
    "fresh": (None, None),
}

# The launches of slot 1 (aclnnInplaceAddRmsNorm) per aliasing form; slot 0 always
# launches aclnnAddRmsNorm alone.
_NORM = "aclnnInplaceAddRmsNorm"
SLOT1_LAUNCHES = {
    "vllm y=x1 x=x2": [_NORM],
    "y=x2 x=x1": [_NORM],
    "y=x1": ["aclnnInplaceCopy", _NORM],
    "y=x2": ["aclnnInplaceCopy", _NORM],
    "x=x1": ["aclnnInplaceCopy", _NORM],
    "x=x2": ["aclnnInplaceCopy", _NORM],
    "fresh": ["aclnnInplaceCopy", "aclnnInplaceCopy", _NORM],
}


@pytest.mark.parametrize("name", list(ALIASES))
@pytest.mark.parametrize("slot", [0, 1])
def test_add_rms_norm_aliasing_forms_match_cpu(slot, name):
    y_is, x_is = ALIASES[name]
    torch.manual_seed(0)
    base1 = torch.randn(3, 2, 40)
    base2 = torch.randn(3, 2, 40)
    gamma = torch.randn(40)
    y_ref, x_ref = polyops.add_rms_norm(base1, base2, gamma, 1e-6)
    # x1 with padded rows (strided), x2 contiguous: the inputs differ in strides.
    x1 = torch.zeros(3, 2, 48).to("npu")[..., :40]
    x1.copy_(base1.to("npu"))
    x2 = base2.to("npu")
    inputs = {"x1": x1, "x2": x2}
    y = inputs[y_is] if y_is else torch.empty_like(x2)
    x = inputs[x_is] if x_is else torch.empty_like(x2)
    clear_cann_calls()
    ry, rx = polyops.add_rms_norm(
        x1, x2, gamma.to("npu"), 1e-6, y_out=y, x_out=x, implementation_index=slot
    )
    calls = cann_calls()
    assert ry.data_ptr() == y.data_ptr() and rx.data_ptr() == x.data_ptr()
    record = {
        "y": (ry.cpu() - y_ref).abs().max().item(),
        "x": (rx.cpu() - x_ref).abs().max().item(),
        "launches": launches(calls),
        "failures": failures(calls),
    }
    assert record["failures"] == [], (name, record)
    assert record["x"] == 0.0, (name, record)
    assert record["y"] < 1e-5, (name, record)
    if slot == 1:
        assert record["launches"] == SLOT1_LAUNCHES[name], name
    else:
        assert record["launches"] == ["aclnnAddRmsNorm"], name


def test_scratch_between_launches_survives_the_pool_growing():
    # swiglu's silu(gate) lives in the stream's pool between its two launches. On a fresh
    # stream, a first call leaves a 1 MiB pool; a tmp of exactly 1 MiB fits it, the
    # workspace after it does not, so the pool grows (synchronize, free, allocate) after
    # binding and before the first launch, and the scratch operands must follow.
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
    error = ((out.cpu().double() - expected).abs() / (1 + expected.abs())).max().item()
    assert failures(calls) == []
    functions = [c["function"] for c in calls]
    # The pool grew (synchronize, free the old block, allocate the new one: nothing of
    # the call is queued yet, so nothing is carried over) before either launch.
    grow = ["aclrtSynchronizeStream", "aclrtFree", "aclrtMalloc"]
    assert [f for f in functions if f in grow] == grow, functions
    assert functions.index("aclrtMalloc") < functions.index("aclnnSilu")
    assert "aclrtMemcpy" not in functions
    assert error < 1e-6
