"""POLYOPS_NPU_DEVICE_COUNT at the CANN double's activation, and the core's size-1-dim
stride rule on CPU.

The device count is read when use_cann_double() activates the double, once per
process, so those checks run in a fresh interpreter each (``_activate``). The npu
path's reliability under threads, faults and many streams, and the size-1-dim rule on
npu, are real tests in the npu process (tests/npu/test_npu_reliability.py).
References are float64 computations of the math.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

import polyops
from tests.ascend._npu_child import _skip_reason

needs_npu = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

# --- POLYOPS_NPU_DEVICE_COUNT -------------------------------------------------

_ACTIVATION = """
import json, os, torch
from polyops.testing import use_cann_double
attempts = []
for value in {values!r}:
    os.environ["POLYOPS_NPU_DEVICE_COUNT"] = value
    try:
        use_cann_double()
        attempts.append(None)
    except Exception as error:
        attempts.append([type(error).__name__, str(error)])
devices = torch.npu.device_count() if attempts[-1] is None else 0
ones = [torch.ones(2, device=f"npu:{{i}}").sum().item() for i in range(devices)]
print("RESULT:" + json.dumps({{
    "attempts": attempts, "devices": devices, "ones": ones,
    "double": os.environ.get("POLYOPS_CANN_DOUBLE_DEVICE_COUNT"),
}}))
"""


def _activate(values: list[str], env: dict[str, str] | None = None) -> dict:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("POLYOPS_CANN_DOUBLE_DEV")}
    child_env.update(env or {})
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_ACTIVATION.format(values=values))],
        capture_output=True,
        text=True,
        timeout=300,
        env=child_env,
    )
    lines = [line for line in child.stdout.splitlines() if line.startswith("RESULT:")]
    assert child.returncode == 0 and lines, child.stderr[-3000:]
    import json

    return json.loads(lines[-1][len("RESULT:") :])


BAD_COUNTS = ["99999999999999999999", "0", "17", "-1", "two", "2.0", ""]


@needs_npu
def test_bad_device_count_is_a_value_error_and_leaves_no_state():
    result = _activate([*BAD_COUNTS, "3"])
    for bad, attempt in zip(BAD_COUNTS, result["attempts"][:-1], strict=True):
        assert attempt is not None, f"{bad!r} was accepted"
        name, message = attempt
        assert name == "ValueError", message
        assert "POLYOPS_NPU_DEVICE_COUNT" in message and "[1, 16]" in message
        assert repr(bad) in message
    # The retry activates with the corrected count, and every device exists.
    assert result["attempts"][-1] is None
    assert result["devices"] == 3 and result["ones"] == [2.0, 2.0, 2.0]
    assert result["double"] == "3"


@needs_npu
def test_double_device_count_below_the_npu_count_is_refused():
    result = _activate(["2", "1"], env={"POLYOPS_CANN_DOUBLE_DEVICE_COUNT": "1"})
    name, message = result["attempts"][0]
    assert name == "ValueError" and "POLYOPS_CANN_DOUBLE_DEVICE_COUNT" in message
    assert result["attempts"][1] is None and result["ones"] == [2.0]


# --- size-1 dims: strides carry no meaning ------------------------------------


def _rotate_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Neox rotation of x [T, H, D] by cos/sin [T, D/2], in float64."""
    x = x.double()
    c, s = cos.double()[:, None], sin.double()[:, None]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def _one_head_transposed(tokens: int, head: int, gen: torch.Generator) -> torch.Tensor:
    """A [T, 1, D] tensor torch calls contiguous, made by transposing [1, T, D]."""
    key = torch.randn(1, tokens, head, generator=gen).transpose(0, 1)
    assert key.is_contiguous() and key.stride(1) != head
    return key


@pytest.mark.parametrize("form", ["polyops", "torch.ops"])
def test_one_head_key_with_any_size_one_stride_on_cpu(form):
    gen = torch.Generator().manual_seed(3)
    tokens, head = 7, 64
    cache = torch.randn(32, head, generator=gen)
    positions = torch.randint(0, 32, (tokens,), generator=gen)
    query = torch.randn(tokens, 2, head, generator=gen)
    key = _one_head_transposed(tokens, head, gen)
    cos, sin = cache[positions].chunk(2, dim=-1)
    expected_q, expected_k = _rotate_reference(query, cos, sin), _rotate_reference(key, cos, sin)
    namespace = polyops if form == "polyops" else torch.ops.polyops
    q, k = query.clone(), _one_head_transposed(tokens, head, gen).copy_(key)
    namespace.rotary_embedding(positions, q, k, head, cache)
    torch.testing.assert_close(q.double(), expected_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k.double(), expected_k, rtol=1e-5, atol=1e-5)
    q, k = query.clone(), _one_head_transposed(tokens, head, gen).copy_(key)
    namespace.apply_rotary_pos_emb(q, k, cos.contiguous(), sin.contiguous())
    torch.testing.assert_close(q.double(), expected_q, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(k.double(), expected_k, rtol=1e-5, atol=1e-5)


def test_size_one_strides_share_an_instance_and_an_alias():
    gen = torch.Generator().manual_seed(4)
    x, w = torch.randn(1, 64, generator=gen), torch.randn(64, generator=gen)
    odd = torch.randn(64, 1, generator=gen).t()  # [1, 64], strides [1, 1]
    polyops.clear_cache()
    polyops.rms_norm(x, w)
    y = polyops.rms_norm(odd, w)
    info = polyops.cache_info("rms_norm")
    assert (info["misses"], info["hits"]) == (1, 1)
    expected = odd.double() / (odd.double().pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
    torch.testing.assert_close(y.double(), expected * w.double(), rtol=1e-5, atol=1e-6)
    # The same memory under another stride of its size-1 dim is an exact alias.
    alias = x.as_strided((1, 64), (5, 1))
    other = torch.randn(64, generator=gen)
    expected = x.double() + other.double()
    for form in (polyops, torch.ops.polyops):
        x_copy = x.clone()
        alias = x_copy.as_strided((1, 64), (5, 1))
        if form is polyops:
            polyops.add(x_copy, other, out=alias)
        else:
            torch.ops.polyops.add.out(x_copy, other, out=alias)
        torch.testing.assert_close(x_copy.double(), expected)
