"""polyops.integrations.vllm on the npu device (PrivateUse1) through the CANN test double.
Registrations are process-global: this process (tests/npu/conftest.py activates the
double) registers vLLM's op names for every device, which no other test here uses;
tests/integrations/test_integrations_vllm.py checks the CPU side.
"""

from __future__ import annotations

import torch

import polyops.integrations.vllm as pv
from polyops.testing import references as ref


def test_npu_through_the_cann_double():
    """On the npu device (PrivateUse1) the ops run polyops' Ascend slots: the results
    match the CPU's within the float32-compute tolerance, and _C::silu_and_mul gives
    vLLM's bits through the npu "vllm" slot."""
    done = pv.register()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(5, 128, generator=g)
    r = torch.randn(5, 128, generator=g)
    w = torch.randn(128, generator=g)
    errors = {}
    out = torch.empty(5, 128, device="npu")
    torch.ops._C.rms_norm(out, x.to("npu"), w.to("npu"), 1e-6)
    errors["rms_norm"] = (out.cpu().double() - ref.rms_norm_reference(x, w)).abs().max().item()
    xn, rn = x.to("npu"), r.to("npu")
    torch.ops._C.fused_add_rms_norm(xn, rn, w.to("npu"), 1e-6)
    y, s = ref.add_rms_norm_reference(x, r, w)
    errors["fused_add_rms_norm"] = max(
        (xn.cpu().double() - y).abs().max().item(), (rn.cpu().double() - s).abs().max().item()
    )
    out = torch.empty(5, 64, device="npu")
    torch.ops._C.silu_and_mul(out, x.to("npu"))
    errors["silu_and_mul"] = (out.cpu().double() - ref.silu_and_mul_reference(x)).abs().max().item()
    # The npu "vllm" slot: vLLM's bits in bfloat16.
    xb = (x * 4).bfloat16()
    outb = torch.empty(5, 64, device="npu", dtype=torch.bfloat16)
    torch.ops._C.silu_and_mul(outb, xb.to("npu"))
    vllm_bits = torch.equal(outb.cpu(), torch.nn.functional.silu(xb[:, :64]) * xb[:, 64:])
    assert "PrivateUse1" in done.registered["_C::rms_norm"]
    for op, error in errors.items():
        assert error < 1e-4, (op, error)
    assert vllm_bits
    assert "npu" not in done.notes.get("_C::silu_and_mul", "")
