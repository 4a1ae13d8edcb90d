"""Declared known deviations: parity cases a device is known to fail, and why.

A deviation is a place where a device's library departs from polyops'
contract in a way polyops cannot detect or correct without reading the data
(docs/backends/ascend.md). Declaring it here, as data, is the only way to excuse a
failing parity record: the runner then labels the record ``xfail`` (with
the reason) instead of ``fail``, the CLI counts it apart and exits 0, and
tests/generic/test_parity.py marks the case ``xfail(strict=True)``. A declared case
that passes is labelled ``xpass`` (the declaration is stale: the tests fail
on it), and a declared case that fails in another way than ``fails_with``
stays a plain ``fail``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass


@dataclass(frozen=True)
class KnownDeviation:
    """Cases of `op` on `device` (case names matching the glob `case`, dtypes in
    `dtypes` or every dtype when None) that fail with `fails_with` in the
    record's message, for `reason`."""

    op: str
    device: str
    case: str
    reason: str
    fails_with: str
    dtypes: tuple[str, ...] | None = None

    def covers(self, op: str, device: str, dtype: str, case: str) -> bool:
        """Whether this declaration covers the (op, device, dtype, case) record."""
        return (
            (op, device) == (self.op, self.device)
            and (self.dtypes is None or dtype in self.dtypes)
            and fnmatch.fnmatchcase(case, self.case)
        )


_FIA_NAN = (
    "aclnn's fused attention (FIA V3, IFA V4) as the CANN test double implements it returns 0 "
    "for a query row with a NaN or +inf score where polyops' contract says NaN; polyops cannot "
    "detect such rows without reading the data; the chip's behaviour is unverified "
    "(docs/backends/ascend.md)"
)

#: Every declared deviation. The special-value case (``<first case>-nan-inf``) of
#: the attention ops is the one with NaN/+inf scores.
KNOWN_DEVIATIONS: tuple[KnownDeviation, ...] = (
    KnownDeviation("flash_attention", "npu", "*-nan-inf", _FIA_NAN, "NaN/inf positions"),
    KnownDeviation("paged_attention", "npu", "*-nan-inf", _FIA_NAN, "NaN/inf positions"),
)


def known_deviation(op: str, device: str, dtype: str, case: str) -> KnownDeviation | None:
    """The declaration covering the (op, device, dtype name, case name) record, or None."""
    return next((d for d in KNOWN_DEVIATIONS if d.covers(op, device, dtype, case)), None)
