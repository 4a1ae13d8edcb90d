"""polyops.testing: the cross-device parity harness, shipped so anyone can run it.

For each operator, :data:`OPS` holds an :class:`OpInfo` (after PyTorch's
OpInfo): the dtypes it supports, case generators (realistic and odd shapes,
zero-size, strided and in-place forms, GQA / paged / windowed / partial-rotary
/ varlen variants), an independent float64 reference written from the math
(:mod:`polyops.testing.references`) and per-dtype tolerances documented next
to it. :func:`run_parity` runs every case on every device present x slot x
dtype and returns :class:`Record` s; the test suite (tests/generic/test_parity.py) and
``python -m polyops parity`` both draw from it. See docs/user/testing.md.

:func:`use_cann_double` (in a fresh process, before any NPU use) makes polyops
load the CANN test double and, without torch_npu, registers a test "npu"
device; :func:`cann_calls` returns the double's call log (docs/backends/ascend.md).

:data:`KNOWN_DEVIATIONS` (:mod:`polyops.testing.deviations`) declares the
cases a device is known to fail and why: their records are ``xfail``.

Example::

    from polyops.testing import run_parity
    bad = [r for r in run_parity(ops=["rms_norm"]) if r.status != "ok"]
"""

from __future__ import annotations

from polyops._cann_double import cann_calls, clear_cann_calls, use_cann_double
from polyops.testing.deviations import KNOWN_DEVIATIONS, KnownDeviation, known_deviation
from polyops.testing.opinfo import OPS, Call, Case, Inputs, OpInfo
from polyops.testing.references import (
    ATTENTION,
    EXACT,
    FLOAT32_COMPUTE,
    PRODUCT,
    ROUNDED,
    UNIT_ROUNDOFF,
    Tolerance,
)
from polyops.testing.runner import Record, compare, run_case, run_parity, targets_of

__all__ = [
    "ATTENTION",
    "EXACT",
    "FLOAT32_COMPUTE",
    "KNOWN_DEVIATIONS",
    "OPS",
    "PRODUCT",
    "ROUNDED",
    "UNIT_ROUNDOFF",
    "Call",
    "Case",
    "Inputs",
    "KnownDeviation",
    "OpInfo",
    "Record",
    "Tolerance",
    "cann_calls",
    "clear_cann_calls",
    "compare",
    "known_deviation",
    "run_case",
    "run_parity",
    "targets_of",
    "use_cann_double",
]
