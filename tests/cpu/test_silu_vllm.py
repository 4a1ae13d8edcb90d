"""silu_and_mul's "vllm" slot (vLLM's rounding order) and the float32 silu's accuracy.

vLLM defines silu_and_mul by its reference ``F.silu(x[..., :d]) * x[..., d:]`` in
the input dtype (its CUDA kernel rounds in the same order, and its kernel test
demands equality): silu(gate) is rounded to float16/bfloat16 before the multiply.
Those torch ops are the definition, so they are the reference here (no float64).
The default slot rounds once; the float64 checks of both slots are the parity
table's (polyops.testing.opinfo) and tests/generic/test_silu_and_mul_swiglu.py's; the
Ascend slots' rounding orders are tests/npu/test_npu_silu_vllm.py's.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import polyops
from polyops.testing.references import silu_and_mul_reference
from tests.conftest import (
    BF16,
    F16,
    F32,
    assert_close,
    assert_equal,
    assert_within_ulp,
    dtype_id,
    empty_like_strided,
    ordered_bits,
    parallel_param,
    transposed,
)

VLLM_SLOT = next(
    s for s, n in polyops.implementations("silu_and_mul", "cpu").items() if n == "vllm"
)


def vllm_reference(x: torch.Tensor) -> torch.Tensor:
    """vLLM's SiluAndMul.forward_native: torch ops in the input dtype."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def _inputs(shape, dtype, gen, scale=3.0):
    return (torch.randn(shape, generator=gen) * scale).to(dtype)


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
@pytest.mark.parametrize(
    "shape",
    [(1, 2), (7, 130), (3, 5, 1026), parallel_param((64, 22016), id="64x22016")],
    ids=str,
)
def test_vllm_slot_equals_vllms_reference(api, dtype, shape, gen):
    for scale in (0.5, 3.0, 40.0):  # around 0, the usual range, saturation
        x = _inputs(shape, dtype, gen, scale)
        got = api.silu_and_mul(x, implementation_index=VLLM_SLOT)
        assert_equal(got, vllm_reference(x), msg=f"scale {scale}")


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_vllm_slot_strided_and_out(api, dtype, gen):
    x = transposed(_inputs((10, 6), dtype, gen))  # gate and up halves strided
    out = empty_like_strided((10, 3), dtype, "step")
    api.silu_and_mul(x, out=out, implementation_index=VLLM_SLOT)
    assert_equal(out, vllm_reference(x))


@pytest.mark.parametrize("dtype", [F16, BF16], ids=dtype_id)
def test_slots_differ_only_by_the_rounding_order(dtype, gen):
    """The default slot rounds once; it differs from vLLM's order in a good share of
    elements, by at most 2 ulp of the dtype, and both are within the float32-compute
    tolerance of float64."""
    x = _inputs((32, 4096), dtype, gen)
    single = polyops.silu_and_mul(x, implementation_index=0)
    double = polyops.silu_and_mul(x, implementation_index=VLLM_SLOT)
    differ = (single != double).double().mean().item()
    assert 0.05 < differ < 0.5, differ
    assert_within_ulp(single, double, max_ulp=2)
    for result in (single, double):
        assert_close(result, silu_and_mul_reference(x), dtype)


def test_vllm_slot_special_values(api, gen):
    inf, nan = float("inf"), float("nan")
    gate = torch.tensor([-inf, inf, nan, 0.0, -0.0, -100.0, 100.0, -20.0, 1.0, 2.0])
    up = torch.tensor([1.0, 1.0, 1.0, inf, 1.0, 1.0, 1.0, 1.0, nan, -inf])
    for dtype in (F16, BF16, F32):
        x = torch.cat([gate, up]).to(dtype)[None]
        got = api.silu_and_mul(x, implementation_index=VLLM_SLOT)
        assert_equal(got, vllm_reference(x), msg=str(dtype))


def test_float32_is_one_order(api, gen):
    """float32 has a single rounding order: the vllm slot is the default slot."""
    x = _inputs((9, 2050), F32, gen)
    assert_equal(
        api.silu_and_mul(x, implementation_index=VLLM_SLOT),
        api.silu_and_mul(x, implementation_index=0),
    )


def _float32_inputs(gen: torch.Generator) -> torch.Tensor:
    """~32 million float32 gates: every 61st float32 with |g| in [1e-30, 100], both
    signs (every exponent, the whole range where exp(-g) is finite and beyond), dense
    normal samples at three scales, and the special values."""
    lo = torch.tensor(1e-30).view(torch.int32).item()
    hi = torch.tensor(100.0).view(torch.int32).item()
    sweep = torch.arange(lo, hi, 61, dtype=torch.int32).view(torch.float32)
    dense = torch.cat([torch.randn(1 << 20, generator=gen) * s for s in (1.0, 10.0, 40.0)])
    inf, nan, big = float("inf"), float("nan"), torch.finfo(torch.float32).max
    specials = torch.tensor([inf, -inf, nan, 0.0, -0.0, big, -big, 1e-45, -1e-45])
    return torch.cat([sweep, -sweep, dense, specials])


def _silu_paths(g: torch.Tensor) -> dict[str, torch.Tensor]:
    """silu(g) from every float32 CPU path: silu_and_mul's two slots with up = 1 and
    swiglu with input = 1 (multiplying by 1 is exact, so each result is silu(g))."""
    ones = torch.ones_like(g)
    pair = torch.stack([g, ones], -1)
    return {
        "silu_and_mul omp": polyops.silu_and_mul(pair, implementation_index=0)[..., 0],
        "silu_and_mul vllm": polyops.silu_and_mul(pair, implementation_index=VLLM_SLOT)[..., 0],
        "swiglu": polyops.swiglu(ones, g),
    }


def _ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Representable float32s between a and b, 0 where both are NaN."""
    both_nan = torch.isnan(a) & torch.isnan(b)
    distance = (ordered_bits(a) - ordered_bits(b)).abs()
    return torch.where(both_nan, torch.zeros_like(distance), distance)


def test_float32_silu_within_2_ulp_of_exact(gen):
    """silu(g) = g / (1 + exp(-g)) in float32 (exp, add, divide each rounded, as torch
    and vLLM compute it) is at most 2 ulp from the exact value where exp(-g) is finite
    (g > -88.72); F.silu has the same bound. Below, exp(-g) overflows float32 and
    silu is -0.0 as in torch."""
    g = _float32_inputs(gen)
    exact = (g.double() / (1 + torch.exp(-g.double()))).float()
    finite = g > -88.72
    for path, got in _silu_paths(g).items():
        assert_within_ulp(got[finite], exact[finite], max_ulp=2, msg=path)
        assert_within_ulp(F.silu(g)[finite], exact[finite], max_ulp=2, msg="F.silu")


def test_float32_silu_against_torch(gen):
    """Against F.silu (x / (1 + exp(-x)) with Sleef's expf u10 in ATen's AVX-512 and
    AVX2 kernels): within 1 ulp everywhere (vLLM's tolerance), and in fact bit-identical on
    these 32 million inputs, because cpu/kernels/elementwise/vector_exp.h computes exp as the same
    sequence of rounded float32 operations (measured: no element differs). A
    correctly rounded exp would differ from F.silu in 0.42% of these inputs, 0.046%
    by 2 ulp or more: 1 ulp of exp(-g) either side is within Sleef's bound, and the
    add and the divide round again."""
    g = _float32_inputs(gen)
    torch_silu = F.silu(g)
    for path, got in _silu_paths(g).items():
        distance = _ulp_distance(got, torch_silu)
        assert distance.max().item() <= 1, path
        assert (distance > 0).double().mean().item() < 1e-6, path


def test_float32_silu_overflow_tail():
    """exp(-g) overflows float32 only below g = -88.72: down to there silu(g) is a
    tiny negative number, as in torch (exp used to overflow from 88.38, giving -0)."""
    g = torch.linspace(-88.72, -88.0, 4001, dtype=torch.float64).float()
    got = polyops.silu_and_mul(torch.stack([g, torch.ones_like(g)], -1))[..., 0]
    assert (got < 0).all()
    assert_within_ulp(got, F.silu(g), max_ulp=1)
    beyond = torch.tensor([-88.73, -95.0, -1e30])
    got = polyops.silu_and_mul(torch.stack([beyond, torch.ones_like(beyond)], -1))[..., 0]
    assert_equal(got, F.silu(beyond))  # -0.0: exp overflows, g / inf
