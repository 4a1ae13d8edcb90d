"""What one op's entry in the table says (after PyTorch's OpInfo): :class:`OpInfo`,
its :class:`Case` s, and how a case becomes a :class:`Call` on a device.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from polyops.testing.references import (
    EXACT,
    Tolerance,
)
from polyops.testing.tensors import (
    LAYOUTS,
    dtype_name,
    make_tensor,
    sentinel,
)

Tensor = torch.Tensor


@dataclass
class Call:
    """One op call: positional and keyword inputs, and the output arguments.

    ``outputs`` (``out=``, ``query_out=``...) are passed to the op but not to
    the reference; an output may be one of the inputs (an in-place form).
    """

    args: tuple
    kwargs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)


class Inputs:
    """The tensors of one case on one device, drawn from one seeded CPU generator."""

    def __init__(self, seed: int, device: str):
        self.gen = torch.Generator().manual_seed(seed)
        self.device = device

    def cpu(self, shape: Sequence[int], dtype: torch.dtype, scale: float = 1.0, **kw) -> Tensor:
        """Random CPU data (see :func:`make_tensor`), not yet on the device."""
        return make_tensor(shape, dtype, self.gen, scale=scale, **kw)

    def put(self, tensor: Tensor, layout: str | Callable = "contiguous") -> Tensor:
        """`tensor`'s values on the device, stored in `layout` (a name of LAYOUTS or a function)."""
        place = LAYOUTS[layout] if isinstance(layout, str) else layout
        return place(tensor.to(self.device))

    def tensor(
        self,
        shape: Sequence[int],
        dtype: torch.dtype,
        scale: float = 1.0,
        layout: str | Callable = "contiguous",
        **kw,
    ) -> Tensor:
        """Random data of `shape` on the device, stored in `layout`."""
        return self.put(self.cpu(shape, dtype, scale, **kw), layout)

    def empty(self, shape: Sequence[int], dtype: torch.dtype, layout: str = "contiguous") -> Tensor:
        """An output buffer on the device, filled with the sentinel (so unwritten elements show)."""
        return self.put(torch.full(tuple(shape), sentinel(dtype), dtype=dtype), layout)


@dataclass(frozen=True)
class Case:
    """A named input configuration; ``build(inputs)`` makes its tensors on inputs.device.

    ``atol_scale`` multiplies the op's atol for this case (the matrix products'
    atol is per accumulated term, so their cases set it to k).
    """

    name: str
    build: Callable[[Inputs], Call]
    atol_scale: float = 1.0


def drop_none(value: Any) -> tuple:
    """A result or tuple of results as a tuple, Nones dropped (e.g. key=None's key_out)."""
    items = value if isinstance(value, tuple) else (value,)
    return tuple(item for item in items if item is not None)


def _returned(returned: Any, call: Call) -> tuple:
    """The results of a call to compare: what the op returns."""
    return drop_none(returned)


@dataclass(frozen=True)
class OpInfo:
    """Everything the harness knows about one operator.

    name: the polyops function. dtypes: the input dtypes of the parity rows.
    cases(dtype): the cases of one row. reference: float64 reference taking the
    op's inputs (see :mod:`polyops.testing.references`). tolerances: by result
    dtype (a single Tolerance for all); integer and bool results are always
    exact. results(returned, call): the tensors to compare, in the reference's
    order (default: what the op returns). special_values: also run the first
    case of each float dtype with NaN, +inf and -inf written into its first
    float input (the comparison then requires NaN where the reference has NaN
    and equal infinities). device_rules: device -> a check that replaces the
    comparison with the reference on that device only, for an op whose
    contract declares that device inexact (topk_topp_sampling on npu:
    sampling_token_plausible). It takes the device's results and the inputs
    built on CPU (`rule(results, *args, **kwargs)`) and returns the failing
    rows; every other device keeps the reference comparison.
    """

    name: str
    dtypes: Sequence[torch.dtype]
    cases: Callable[[torch.dtype], list[Case]]
    reference: Callable[..., Any]
    tolerances: Mapping[torch.dtype, Tolerance] | Tolerance
    results: Callable[[Any, Call], tuple] = _returned
    special_values: bool = False
    device_rules: Mapping[str, Callable[..., list[int]]] = field(default_factory=dict)

    def tolerance(self, dtype: torch.dtype) -> Tolerance:
        """The tolerance of a result of `dtype`."""
        if not dtype.is_floating_point:
            return EXACT
        if isinstance(self.tolerances, Tolerance):
            return self.tolerances
        return self.tolerances[dtype]

    def all_cases(self, dtype: torch.dtype) -> list[Case]:
        """The cases of one (op, dtype) row, with the special-value case when enabled."""
        cases = self.cases(dtype)
        if self.special_values and dtype.is_floating_point and cases:
            cases = [*cases, _with_special_values(cases[0])]
        return cases

    def seed(self, dtype: torch.dtype, case: Case) -> int:
        """The seed of one case's inputs: the same on every device and every run."""
        return zlib.crc32(f"{self.name}/{dtype_name(dtype)}/{case.name}".encode())


def _first_float_tensor(items: Sequence) -> Tensor | None:
    for item in items:
        if isinstance(item, (list, tuple)):
            item = _first_float_tensor(item)
        if isinstance(item, Tensor) and item.dtype.is_floating_point and item.numel() >= 3:
            return item
    return None


def _with_special_values(case: Case) -> Case:
    def build(inputs: Inputs) -> Call:
        call = case.build(inputs)
        target = _first_float_tensor(call.args)
        if target is not None:
            flat = target.flatten().clone()
            n = flat.numel()
            flat[[0, n // 3, (2 * n) // 3]] = torch.tensor(
                [math.nan, math.inf, -math.inf], dtype=flat.dtype, device=flat.device
            )
            target.copy_(flat.view(target.shape))
        return call

    return Case(f"{case.name}-nan-inf", build, case.atol_scale)
