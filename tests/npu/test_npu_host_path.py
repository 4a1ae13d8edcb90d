"""The Ascend backend's host path on npu, read from the CANN double's call log: phase 1
once per geometry and no device-to-host copy or synchronization on a hit, the stream
the work runs on, add/mul broadcasting and alpha in both call forms, and mixed devices.
The double is active for this process (tests/npu/conftest.py)."""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing import cann_calls, clear_cann_calls
from polyops.testing.references import add_reference, mul_reference


def test_a_repeated_call_reuses_its_executor_without_phase_one():
    a, b = torch.randn(33, 70).to("npu"), torch.randn(70).to("npu")
    polyops.add(a, b)
    clear_cann_calls()
    for _ in range(3):
        polyops.add(a, b)
    hit = [c["function"] for c in cann_calls()]
    c = torch.randn(33, 70).to("npu")  # another address, same geometry
    clear_cann_calls()
    polyops.add(c, b)
    moved = [c["function"] for c in cann_calls()]
    for functions in (hit, moved):
        assert "aclnnAdd" in functions
        assert not any(f.endswith("GetWorkspaceSize") for f in functions), functions
        assert not any(f in ("aclrtSynchronizeStream", "aclrtMemcpy") for f in functions)
        assert "aclSetInputTensorAddr" in functions
    assert hit.count("aclnnAdd") == 3


def test_work_runs_on_the_current_stream_and_on_stream_argument():
    a = torch.randn(8, 16).to("npu")
    side_stream = torch.npu.Stream()
    clear_cann_calls()
    with torch.npu.stream(side_stream):
        polyops.add(a, a)
    on_side = [c for c in cann_calls() if c["function"] == "aclnnAdd"]
    clear_cann_calls()
    polyops.add(a, a, stream=side_stream.npu_stream)
    on_argument = [c for c in cann_calls() if c["function"] == "aclnnAdd"]
    clear_cann_calls()
    polyops.add(a, a)
    on_default = [c for c in cann_calls() if c["function"] == "aclnnAdd"]
    side, explicit, default = (r[0]["stream"] for r in (on_side, on_argument, on_default))
    assert side == explicit and side != default


def _relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(((got.double() - want).abs() / want.abs().clamp(min=1e-3)).max())


def test_add_mul_broadcast_and_alpha_in_both_call_forms():
    # Two-sided broadcasting and alpha reach aclnnAdd / aclnnMul; the alpha
    # scalar is the dtype's value (0.1 in bfloat16) or an INT64 that wraps.
    g = torch.Generator().manual_seed(5)
    worst = {}
    for dtype in (torch.bfloat16, torch.float32, torch.float64):
        a = torch.randn(3, 1, 7, generator=g, dtype=torch.float64).to(dtype)
        b = torch.randn(4, 1, generator=g, dtype=torch.float64).to(dtype)
        for name, api in (("polyops", polyops), ("torch.ops", torch.ops.polyops)):
            got = api.add(a.to("npu"), b.to("npu"), alpha=0.1).cpu()
            want = add_reference(a, b, alpha=0.1)
            worst[f"add-{name}-{dtype}"] = [list(got.shape), _relative_error(got, want)]
            got = api.mul(b.to("npu"), a.to("npu")).cpu()
            want = mul_reference(b, a)
            worst[f"mul-{name}-{dtype}"] = [list(got.shape), _relative_error(got, want)]
    u8 = torch.tensor([1, 200, 0], dtype=torch.uint8)
    wrapped = polyops.add(u8.to("npu"), u8.flip(0).to("npu"), alpha=-1).cpu().tolist()
    clear_cann_calls()
    polyops.add(torch.ones(2).to("npu"), torch.ones(2).to("npu"), alpha=0.5)
    calls = [c["function"] for c in cann_calls()]
    bound = {"bfloat16": 2.0**-8 + 2.0**-23, "float32": 2.0**-23, "float64": 2.0**-52}
    for key, (shape, error) in worst.items():
        assert shape == [3, 4, 7], key
        assert error <= bound[key.split("torch.")[-1]], (key, error)
    assert wrapped == [1, 0, 255]  # 1 - 0, 200 - 200, 0 - 1
    assert "aclnnAddGetWorkspaceSize" in calls, calls


def test_mixed_devices_and_cpu_tensors_are_value_errors():
    with pytest.raises(ValueError) as error:
        polyops.add(torch.ones(4).to("npu"), torch.ones(4))
    message = str(error.value)
    assert "npu" in message and "cpu" in message
