"""Runs the op table: every case on every device x slot x dtype, against float64 and CPU.

One :class:`Record` per (op, device, slot, dtype, case). Its status is
``ok`` (every result within tolerance of the float64 reference), ``fail``,
``error`` (the call raised anything but a declared NotImplementedError, or
the case or reference could not be built) or ``n/a`` (a NotImplementedError
the slot declares in ``polyops/_support.py``: it does not do that case; the
reason is in ``message``). A case declared in
:data:`~polyops.testing.deviations.KNOWN_DEVIATIONS` is ``xfail`` when it
fails as declared (the reason leads ``message``) and ``xpass`` when it
passes. On a device other than CPU the record also holds the difference
from CPU's default slot on the same inputs. Where the op has a rule for the
device (``OpInfo.device_rules``: topk_topp_sampling on npu) the rule decides
ok/fail instead of the reference comparison, and the errors count the
failing rows.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

import polyops
from polyops._support import declared_refusal
from polyops.testing.deviations import known_deviation
from polyops.testing.opinfo import OPS, Case, Inputs, OpInfo, drop_none
from polyops.testing.references import EXACT, Tolerance
from polyops.testing.tensors import dtype_name

STATUSES = ("ok", "fail", "error", "n/a", "xfail", "xpass")
#: The statuses that make a run fail: anything undeclared that did not pass.
FAILING = ("fail", "error")


@dataclass
class Record:
    """The outcome of one case on one (device, slot, dtype).

    max_abs_err: worst |actual - expected| over the compared elements.
    max_rel_err: worst |actual - expected| / (|expected| + atol / rtol): the
    relative error, with |expected| floored where the absolute tolerance rules;
    the case passes iff it is <= ``tolerance`` (= rtol). Both are ``inf`` when
    NaN/inf positions differ, None when nothing was compared (error, n/a).
    """

    op: str
    device: str
    slot: int
    slot_name: str
    dtype: str
    case: str
    status: str
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    tolerance: float | None = None
    atol: float | None = None
    message: str = ""
    vs_cpu_max_abs_err: float | None = None
    vs_cpu_max_rel_err: float | None = None


class Comparison(NamedTuple):
    max_abs_err: float
    max_rel_err: float
    ok: bool
    message: str


def _first_index(mask: torch.Tensor) -> int:
    return int(mask.flatten().nonzero()[0])


def compare(actual: torch.Tensor, expected: torch.Tensor, tol: Tolerance) -> Comparison:
    """`actual` against `expected`: shape, NaN/inf positions, then the tolerance.

    Float results: NaN must sit where the reference has NaN, an infinity
    where it has the same infinity; the other elements must satisfy
    ``|actual - expected| <= atol + rtol * |expected|``. Integer and bool
    results must be equal (and of the reference's dtype).
    """
    actual = actual.detach().cpu()
    if tuple(actual.shape) != tuple(expected.shape):
        return Comparison(
            math.inf, math.inf, False, f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        )
    if actual.numel() == 0:
        return Comparison(0.0, 0.0, True, "")
    if not expected.dtype.is_floating_point:
        if actual.dtype != expected.dtype:
            return Comparison(
                math.inf, math.inf, False, f"dtype {actual.dtype} != {expected.dtype}"
            )
        wrong = actual != expected
        if not wrong.any():
            return Comparison(0.0, 0.0, True, "")
        pairs = list(zip(actual[wrong].tolist(), expected[wrong].tolist(), strict=True))
        worst = max(abs(int(a) - int(e)) for a, e in pairs)
        rel = max(abs(int(a) - int(e)) / max(abs(int(e)), 1) for a, e in pairs)
        first = _first_index(wrong)
        return Comparison(
            float(worst),
            rel,
            False,
            f"{len(pairs)} of {actual.numel()} elements differ; first at flat index {first}: "
            f"got {actual.flatten()[first].item()!r}, "
            f"expected {expected.flatten()[first].item()!r}",
        )
    if not actual.dtype.is_floating_point:
        return Comparison(math.inf, math.inf, False, f"dtype {actual.dtype} is not a float dtype")
    a, e = actual.double(), expected.double()
    nan_a, nan_e, inf_e = torch.isnan(a), torch.isnan(e), torch.isinf(e)
    special_wrong = (nan_a != nan_e) | (inf_e & (a != e))
    if special_wrong.any():
        first = _first_index(special_wrong)
        return Comparison(
            math.inf,
            math.inf,
            False,
            f"NaN/inf positions differ from the reference at flat index {first}: "
            f"got {a.flatten()[first].item()!r}, expected {e.flatten()[first].item()!r}",
        )
    skip = nan_e | inf_e
    diff = torch.where(skip, 0.0, (a - e).abs())
    magnitude = torch.where(skip, 0.0, e.abs())
    allowed = tol.atol + tol.rtol * magnitude
    floor = tol.atol / tol.rtol if tol.rtol > 0 else 0.0
    rel = torch.where(diff > 0, diff / (magnitude + floor).clamp(min=1e-300), 0.0)
    over = diff > allowed
    max_abs, max_rel = float(diff.max()), float(rel.max())
    if not over.any():
        return Comparison(max_abs, max_rel, True, "")
    worst = int((diff - allowed).flatten().argmax())
    return Comparison(
        max_abs,
        max_rel,
        False,
        f"{int(over.sum())} of {a.numel()} elements off; worst at flat index {worst}: "
        f"got {a.flatten()[worst].item()!r}, expected {e.flatten()[worst].item()!r}",
    )


@contextlib.contextmanager
def _torch_single_threaded() -> Iterator[None]:
    """torch on one thread for the bookkeeping around a kernel (inputs, reference,
    comparison): small float64 ops spread over OpenMP threads only wait for each
    other, badly so on a busy machine. The kernels run with the caller's threads."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _compare_all(
    info: OpInfo, case: Case, results: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]
) -> tuple[Comparison, Tolerance]:
    """The worst comparison over an op's results, and the tolerance of its first result."""
    if len(results) != len(expected):
        message = f"{len(results)} results, the reference gives {len(expected)}"
        return Comparison(math.inf, math.inf, False, message), EXACT
    tolerances = [info.tolerance(r.dtype).scaled(case.atol_scale) for r in results]
    comparisons = [compare(r, e, t) for r, e, t in zip(results, expected, tolerances, strict=True)]
    worst = max(comparisons, key=lambda c: (not c.ok, c.max_rel_err))
    if not worst.ok and len(results) > 1:
        index = comparisons.index(worst)
        worst = worst._replace(message=f"result {index}: {worst.message}")
    return worst, tolerances[0]


def _apply_rule(rule, results: Sequence[torch.Tensor], host) -> tuple[Comparison, Tolerance]:
    """A device rule's verdict (OpInfo.device_rules) as a Comparison: both errors
    are the number of failing rows."""
    rows = rule(tuple(results), *host.args, **host.kwargs)
    message = f"rows {rows[:8]} fail the device rule" if rows else ""
    return Comparison(float(len(rows)), float(len(rows)), not rows, message), EXACT


def _slot_name(op: str, device: str, slot: int) -> str:
    return polyops.implementations(op, device).get(slot, "?")


def _call(info: OpInfo, dtype: torch.dtype, case: Case, device: str, slot: int) -> tuple:
    """Builds the case on `device`, runs the op with `slot`; the results as CPU tensors."""
    with _torch_single_threaded():
        call = case.build(Inputs(info.seed(dtype, case), device))
    op = getattr(polyops, info.name)
    returned = op(*call.args, **call.kwargs, **call.outputs, implementation_index=slot)
    return tuple(result.detach().cpu() for result in info.results(returned, call))


def run_case(
    info: OpInfo, dtype: torch.dtype, case: Case, targets: Sequence[tuple[str, int]]
) -> list[Record]:
    """One case on each (device, slot) of `targets`: one Record each.

    The reference runs once, on the case built on CPU. For a device other
    than CPU the record also gets the difference from CPU's default slot.
    """

    def record(device: str, slot: int, status: str, **fields) -> Record:
        name = _slot_name(info.name, device, slot)
        return Record(info.name, device, slot, name, dtype_name(dtype), case.name, status, **fields)

    try:
        with _torch_single_threaded():
            host = case.build(Inputs(info.seed(dtype, case), "cpu"))
            expected = drop_none(info.reference(*host.args, **host.kwargs))
    except Exception as error:  # noqa: BLE001 - reported as the case's error
        message = f"building the case or its reference failed: {type(error).__name__}: {error}"
        return [record(device, slot, "error", message=message) for device, slot in targets]

    records = []
    cpu_results: tuple | None = None
    for device, slot in targets:
        try:
            results = _call(info, dtype, case, device, slot)
        except NotImplementedError as error:  # the type too, as error records have it
            message = f"{type(error).__name__}: {error}"
            name = _slot_name(info.name, device, slot)
            if declared_refusal(info.name, device, name, str(error)) is None:
                # Not declared in polyops/_support.py: a slot that stopped supporting
                # a case must fail, not disappear from the table.
                message = f"undeclared refusal (polyops/_support.py): {message}"
                records.append(record(device, slot, "error", message=message))
            else:
                records.append(record(device, slot, "n/a", message=message))
            continue
        except Exception as error:  # noqa: BLE001 - never hidden: an error record
            message = f"{type(error).__name__}: {error}"
            records.append(record(device, slot, "error", message=message))
            continue
        with _torch_single_threaded():
            rule = info.device_rules.get(device)
            if rule is None:
                worst, tol = _compare_all(info, case, results, expected)
            else:
                worst, tol = _apply_rule(rule, results, host)
        status, message = "ok" if worst.ok else "fail", worst.message
        declared = known_deviation(info.name, device, dtype_name(dtype), case.name)
        if declared is not None and (worst.ok or declared.fails_with in message):
            status = "xpass" if worst.ok else "xfail"
            message = f"known deviation: {declared.reason}" + (f"; {message}" if message else "")
        rec = record(
            device,
            slot,
            status,
            max_abs_err=worst.max_abs_err,
            max_rel_err=worst.max_rel_err,
            tolerance=tol.rtol,
            atol=tol.atol,
            message=message,
        )
        if device != "cpu":
            if cpu_results is None:
                cpu_slot = polyops.default_implementation(info.name, "cpu")
                try:
                    cpu_results = _call(info, dtype, case, "cpu", cpu_slot)
                except Exception:  # noqa: BLE001 - CPU's own record says why; no comparison
                    cpu_results = ()
            if cpu_results:
                with _torch_single_threaded():
                    vs_cpu, _ = _compare_all(info, case, results, cpu_results)
                rec.vs_cpu_max_abs_err = vs_cpu.max_abs_err
                rec.vs_cpu_max_rel_err = vs_cpu.max_rel_err
        records.append(rec)
    return records


def targets_of(op: str, devices: Sequence[str]) -> list[tuple[str, int]]:
    """Every (device, slot) of `op` on `devices`."""
    return [(d, slot) for d in devices for slot in sorted(polyops.implementations(op, d))]


def run_parity(
    ops: Sequence[str] | None = None,
    devices: Sequence[str] | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
) -> list[Record]:
    """Every case of `ops` (default: all operators) x `devices` (default: those present)
    x every slot x `dtypes` (default: each op's own). An operator without a table
    entry gets one error record."""
    ops = polyops.operators() if ops is None else ops
    devices = polyops.devices() if devices is None else devices
    records = []
    for op in ops:
        info = OPS.get(op)
        if info is None:
            message = "no entry in polyops.testing.OPS"
            records.append(Record(op, "-", -1, "-", "-", "-", "error", message=message))
            continue
        targets = targets_of(op, devices)
        for dtype in info.dtypes:
            if dtypes is not None and dtype not in dtypes:
                continue
            for case in info.all_cases(dtype):
                records += run_case(info, dtype, case, targets)
    return records
