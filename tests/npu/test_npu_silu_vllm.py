"""silu_and_mul's Ascend slots on the CANN test double: slot 0 (aclnnSwiGlu) rounds
float16/bfloat16 once, like CPU slot 0; slot 1 ("vllm": aclnnSilu, then aclnnMul) is
vLLM's rounding order (tests/cpu/test_silu_vllm.py checks the CPU slots).
The double is active for this process (tests/npu/conftest.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import polyops
from polyops.testing.references import silu_and_mul_reference


def _ordered(t: torch.Tensor) -> torch.Tensor:
    b = t.view(torch.int16).int()
    return torch.where(b < 0, -(b & 0x7FFF), b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["f16", "bf16"])
def test_npu_slots_rounding_orders(dtype):
    """On the CANN double, Ascend slot 0 (aclnnSwiGlu) rounds float16/bfloat16 once,
    like CPU slot 0: within 1 ulp of it, and different from vLLM's reference in a good
    share of elements. Slot 1 ("vllm": aclnnSilu, then aclnnMul) is vLLM's order and
    equals its reference, also on a strided input."""
    # The inputs of the float16 case, then (the generator drawn on) the bfloat16 one.
    g = torch.Generator().manual_seed(5)
    for _ in range(1 if dtype == torch.float16 else 2):
        x = (torch.randn(16, 2048, generator=g) * 3).to(dtype)
    npu = polyops.silu_and_mul(x.to("npu")).cpu()
    cpu = polyops.silu_and_mul(x, implementation_index=0)
    vllm = F.silu(x[..., :1024]) * x[..., 1024:]
    ulp = (_ordered(npu) - _ordered(cpu)).abs().max().item()
    err = (
        (
            (npu.double() - silu_and_mul_reference(x)).abs()
            / silu_and_mul_reference(x).abs().clamp(min=1e-3)
        )
        .max()
        .item()
    )
    wide = torch.cat([x, x], -1).to("npu")[..., :2048]  # rows strided
    slot1 = [
        torch.equal(polyops.silu_and_mul(t, implementation_index=1).cpu(), vllm)
        for t in (x.to("npu"), wide)
    ]
    vllm_differ = (npu != vllm).double().mean().item()
    assert all(slot1), dtype
    assert ulp <= 1, dtype
    assert vllm_differ > 0.05, dtype
    assert err < 1.6e-2, dtype
