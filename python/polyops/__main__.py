"""``python -m polyops``: what this build offers, then a self-check of every op.

Prints the usable devices, every operator with its implementation slots per
device, then runs each op x slot x dtype on CPU against a float64 reference
written from the math and prints a table. Exits 1 if any check fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch

import polyops

# Largest error allowed, relative to max(1, |reference|), per dtype.
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def _silu(x: torch.Tensor) -> torch.Tensor:
    return x / (1 + torch.exp(-x))


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _cases(dtype: torch.dtype) -> dict[str, tuple[Callable, Callable]]:
    """op -> (polyops call taking a slot, float64 reference), on fixed random data."""
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)

    a, b, w = rand(33, 257), rand(257), rand(257)
    x, gate = rand(33, 514), rand(33, 257)
    a64, b64, w64, x64, gate64 = (t.double() for t in (a, b, w, x, gate))
    summed = (a64 + a64).to(dtype).double()
    return {
        "add": (lambda i: polyops.add(a, b, implementation_index=i), lambda: a64 + b64),
        "mul": (lambda i: polyops.mul(a, b, implementation_index=i), lambda: a64 * b64),
        "cast": (
            lambda i: polyops.cast(a, torch.float32, implementation_index=i),
            lambda: a64,
        ),
        "rms_norm": (
            lambda i: polyops.rms_norm(a, w, 1e-6, implementation_index=i),
            lambda: _rms(a64, w64, 1e-6),
        ),
        "add_rms_norm": (
            lambda i: polyops.add_rms_norm(a, a, w, 1e-6, implementation_index=i)[0],
            lambda: _rms(summed, w64, 1e-6),
        ),
        "silu_and_mul": (
            lambda i: polyops.silu_and_mul(x, implementation_index=i),
            lambda: _silu(x64[:, :257]) * x64[:, 257:],
        ),
        "swiglu": (
            lambda i: polyops.swiglu(gate, a, implementation_index=i),
            lambda: gate64 * _silu(a64),
        ),
    }


def self_check() -> list[tuple[str, int, str, str, float, bool]]:
    """Runs every op x CPU slot x dtype; returns (op, slot, name, dtype, error, ok) rows."""
    rows = []
    for dtype in TOLERANCE:
        cases = _cases(dtype)
        for op in polyops.operators():
            if op not in cases:
                continue
            call, reference = cases[op]
            expected = reference()
            for slot, name in polyops.implementations(op, "cpu").items():
                actual = call(slot).double()
                error = ((actual - expected).abs() / expected.abs().clamp(min=1)).max().item()
                rows.append((op, slot, name, str(dtype)[6:], error, error <= TOLERANCE[dtype]))
    return rows


def main() -> int:
    print(f"polyops {polyops.__version__} (torch {torch.__version__})")
    print(f"devices: {', '.join(polyops.devices())}")
    registered = polyops.torch_ops_registered()
    print(f"torch.ops.polyops: {'registered' if registered else 'NOT registered'}")
    print("operators and implementations:")
    for op in polyops.operators():
        slots = {d: polyops.implementations(op, d) for d in polyops.devices()}
        text = "; ".join(
            f"{d}: " + ", ".join(f"{i}={n}" for i, n in s.items()) for d, s in slots.items()
        )
        print(f"  {op:<14} {text}")
    print("\nself-check on cpu against float64 references:")
    header = f"  {'op':<14} {'slot':<10} {'dtype':<9} {'max rel err':>12}  result"
    print(header)
    print("  " + "-" * (len(header) - 2))
    rows = self_check()
    for op, slot, name, dtype, error, ok in rows:
        verdict = "ok" if ok else "FAIL"
        print(f"  {op:<14} {f'{slot} ({name})':<10} {dtype:<9} {error:>12.3e}  {verdict}")
    failed = sum(not ok for *_, ok in rows)
    print(f"\n{len(rows) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
