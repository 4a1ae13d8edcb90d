"""``python -m polyops parity``: the op table on every device present, as a table or JSON.

Rows are (op, dtype), columns (device, slot); a cell holds the worst
relative error over the row's cases and ok / FAIL / n/a (a refusal the slot
declares, polyops/_support.py) / error (an undeclared refusal among them) / xfail
(a declared known deviation, polyops.testing.deviations). Failures,
errors and known deviations are listed below the table with the op,
device, slot, dtype and case; ``--verbose`` also lists why cases are n/a.
Exit status 1 on any undeclared failure or error, 2 on a usage error (an
unknown name, a filter that selects nothing, a --json path that cannot be
written), checked before anything runs.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import NoReturn

import torch

import polyops
from polyops import _cann_double
from polyops.testing.opinfo import OPS
from polyops.testing.runner import FAILING, Record, run_parity, targets_of
from polyops.testing.tensors import dtype_name, parse_dtypes

#: Every device polyops knows, built or not: the registry ``kDevices`` (src/core/device.h).
KNOWN_DEVICES = tuple(polyops._C._devices)

#: Whether each device's backend has run on the real hardware (docs/backends/cuda.md,
#: docs/backends/ascend.md).
HARDWARE = {
    "cpu": "yes",
    "cuda": "never: the CUDA backend is only compile-checked (docs/backends/cuda.md)",
    "npu": "never: the Ascend backend ran only on the CANN test double (docs/backends/ascend.md)",
}

CANN_DOUBLE_HINT = "--cann-double runs the npu slots on the CANN test double (not an NPU)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The parity options (``--device``, ``--op``, ``--dtype``: repeat or comma-separate)."""
    parser.description = (
        "Every case of polyops.testing on every device present x slot x dtype against its "
        "float64 reference. --device, --op and --dtype may be repeated or comma-separated."
    )
    parser.add_argument(
        "--device", action="append", help="only these devices (default: all present)"
    )
    parser.add_argument("--op", action="append", help="only these operators (default: all)")
    parser.add_argument(
        "--dtype", action="append", help="only these dtypes, e.g. bf16 or bfloat16, f32, i8"
    )
    parser.add_argument("--json", metavar="PATH", help="also write every record to PATH as JSON")
    parser.add_argument("--verbose", action="store_true", help="also list n/a cases with reasons")
    parser.add_argument(
        "--cann-double",
        action="store_true",
        help="first activate the CANN test double (polyops.testing.use_cann_double()): a test "
        "'npu' device on any Linux machine, so the npu slots run; it is not an NPU",
    )


def _fail(parser: argparse.ArgumentParser, message: str) -> NoReturn:
    """A usage error: one line on stderr, exit status 2."""
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def _names(parser, option: str, values: list[str] | None) -> list[str] | None:
    """The comma-separated names of a repeatable option; none at all is a usage error."""
    if values is None:
        return None
    chosen = [v.strip() for value in values for v in value.split(",") if v.strip()]
    if not chosen:
        _fail(parser, f"{option} {','.join(values)!r} names nothing; leave the option out for all")
    return chosen


def _choose(
    parser, option: str, values: list[str] | None, allowed: Sequence[str], what: str
) -> list[str] | None:
    chosen = _names(parser, option, values)
    for value in chosen or []:
        if value not in allowed:
            _fail(parser, f"unknown {what} {value!r}; choose from {', '.join(allowed)}")
    return chosen


# A cell's verdict, the first present: undeclared problems first, n/a last.
_CELL_ORDER = (("error", "error"), ("fail", "FAIL"), ("xpass", "XPASS"), ("xfail", "xfail"))


def _status_of(records: Sequence[Record]) -> str:
    """A cell's verdict: error > FAIL > XPASS > xfail > ok > n/a."""
    statuses = {r.status for r in records}
    for status, shown in (*_CELL_ORDER, ("ok", "ok")):
        if status in statuses:
            return shown
    return "n/a"


def _worst(records: Sequence[Record], field: str) -> float | None:
    values = [getattr(r, field) for r in records if getattr(r, field) is not None]
    return max(values) if values else None


def _columns(records: Sequence[Record]) -> list[tuple[str, int]]:
    order = {d: i for i, d in enumerate(KNOWN_DEVICES)}
    found = {(r.device, r.slot) for r in records if r.slot >= 0}
    return sorted(found, key=lambda c: (order.get(c[0], len(order)), c[0], c[1]))


def _op_width(records: Sequence[Record]) -> int:
    """Wide enough for every operator name, so columns align whatever the filter."""
    return max(len(name) for name in [*polyops.operators(), *(r.op for r in records)])


def _grid(
    records: Sequence[Record],
    columns: Sequence[tuple[str, int]],
    cell: Callable[[Sequence[Record]], str],
    key: Callable[[Record], tuple],
    first: Sequence[tuple[str, int]],
) -> list[str]:
    """A table: one row per distinct key(record) (its leading columns given by `first`:
    (header, width)), one column per (device, slot), cell(records) in each."""
    groups: dict[tuple, dict[tuple[str, int], list[Record]]] = {}
    for r in records:
        groups.setdefault(key(r), {}).setdefault((r.device, r.slot), []).append(r)
    cells = {
        row: [cell(by_column[c]) if c in by_column else "-" for c in columns]
        for row, by_column in groups.items()
    }
    headers = [f"{d}:{s}" for d, s in columns]
    widths = [max([len(h), *(len(v[i]) for v in cells.values())]) for i, h in enumerate(headers)]
    lead = "  ".join(f"{h:<{w}}" for h, w in first)
    lines = [
        "  " + lead + "  " + "  ".join(f"{h:<{w}}" for h, w in zip(headers, widths, strict=True))
    ]
    lines.append("  " + "-" * (len(lines[0]) - 2))
    for row, values in cells.items():
        left = "  ".join(f"{str(v):<{w}}" for v, (_, w) in zip(row, first, strict=True))
        right = "  ".join(f"{v:<{w}}" for v, w in zip(values, widths, strict=True))
        lines.append(f"  {left}  {right}".rstrip())
    return lines


def _error_cell(field: str) -> Callable[[Sequence[Record]], str]:
    def cell(records: Sequence[Record]) -> str:
        status = _status_of(records)
        worst = _worst([r for r in records if r.max_rel_err is not None], field)
        return status if worst is None else f"{worst:.1e} {status}"

    return cell


_LABELS = {"fail": "FAIL", "error": "ERROR", "n/a": "n/a", "xfail": "XFAIL", "xpass": "XPASS"}


def _describe(r: Record) -> str:
    where = f"{r.op} {r.device} slot {r.slot} ({r.slot_name}) {r.dtype} case {r.case}"
    if r.status == "fail":
        return (
            f"FAIL   {where}: max rel err {r.max_rel_err:.3e} > tolerance {r.tolerance:.1e} "
            f"(atol {r.atol:.1e}), max abs err {r.max_abs_err:.3e}; {r.message}"
        )
    if r.status == "xpass":
        return (
            f"XPASS  {where}: passed, but is declared to fail (polyops.testing.deviations: "
            f"remove the declaration if this holds); {r.message}"
        )
    return f"{_LABELS[r.status]:<6} {where}: {r.message}"


def _listed(records: Sequence[Record], verbose: bool) -> list[Record]:
    """The records listed below a table: every problem and known deviation (n/a: verbose)."""
    shown = ("fail", "error", "xfail", "xpass", *(("n/a",) if verbose else ()))
    return [r for r in records if r.status in shown]


def counts_line(records: Sequence[Record]) -> str:
    """``N checks: a ok, b fail, c error, d n/a`` and, when there are any, the known
    deviations counted apart (``e xfail (known deviations), f xpass``)."""
    counts = {s: sum(r.status == s for r in records) for s in ("ok", "fail", "error", "n/a")}
    line = f"{len(records)} checks: " + ", ".join(f"{n} {s}" for s, n in counts.items())
    for status, label in (("xfail", "xfail (known deviations)"), ("xpass", "xpass")):
        if n := sum(r.status == status for r in records):
            line += f", {n} {label}"
    return line


def _rtol_range(records: Sequence[Record]) -> str:
    values = [r.tolerance for r in records if r.tolerance is not None]
    return f"rtol {min(values):g} to {max(values):g} here" if values else "rtol"


def legend(records: Sequence[Record], table: bool) -> str:
    """One line saying what the cells of the summary (or, `table`, the full table) mean."""
    if table:
        cell = "cell = worst relative error over the row's cases and its verdict"
    else:
        cell = "FAIL/error k/n = k of n cases failed/raised"
    return (
        f"legend: {cell}; ok = within tolerance of the float64 reference (|got - ref| <= "
        f"atol + rtol*|ref|; {_rtol_range(records)}, per op and dtype: docs/user/testing.md); "
        "n/a = a refusal the slot declares (polyops/_support.py); "
        "xfail = declared known deviation; - = no such slot"
    )


def device_lines(tested: Sequence[str]) -> list[str]:
    """Per known device: built, usable, tested in this run, run on real hardware."""
    built, usable = polyops._C._built_devices, polyops.devices()
    double = _cann_double.active_library_dir is not None

    def why_not(device: str) -> str:
        if device not in built:
            return "no (not built)"
        if device == "cuda":
            return "no (torch has no CUDA)" if torch.version.cuda is None else "no (no GPU)"
        return "no (no NPU here)" if device == "npu" else "no"

    rows = [("device", "built", "usable", "tested now", "run on real hardware")]
    for device in KNOWN_DEVICES:
        use = "yes" if device in usable else why_not(device)
        if device == "npu" and double and device in usable:
            use = "yes (CANN test double)"
        tested_now = "yes" if device in tested else "no"
        hardware = HARDWARE[device]
        if device == "cpu":
            hardware += f" (this CPU, {polyops._C._cpu_isa()} kernels)"
        rows.append((device, "yes" if device in built else "no", use, tested_now, hardware))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "  " + "  ".join(f"{v:<{w}}" for v, w in zip(row[:4], widths, strict=True)) + f"  {row[4]}"
        for row in rows
    ]
    if "npu" in built and "npu" not in usable:
        lines.append(
            "  npu: `python -m polyops parity --cann-double` tests the npu slots on the CANN "
            "test double (not an NPU)"
        )
    return lines


def table_lines(records: Sequence[Record], verbose: bool = False) -> list[str]:
    """The full report: (op, dtype) x (device, slot) table, device-vs-CPU table, problems."""
    columns = _columns(records)
    first = [("op", _op_width(records)), ("dtype", 8)]
    lines = ["parity against float64 references: worst relative error per (op, dtype)"]
    lines += _grid(records, columns, _error_cell("max_rel_err"), lambda r: (r.op, r.dtype), first)
    others = [c for c in columns if c[0] != "cpu"]
    if others:
        lines += ["", "device vs cpu (default slot) on the same inputs: worst relative difference"]
        lines += _grid(
            [r for r in records if r.device != "cpu"],
            others,
            _error_cell("vs_cpu_max_rel_err"),
            lambda r: (r.op, r.dtype),
            first,
        )
    lines.append(legend(records, table=True))
    if problems := _listed(records, verbose):
        lines += ["", *(_describe(r) for r in problems)]
    return lines


def summary_lines(records: Sequence[Record]) -> list[str]:
    """The compact form: one line per op with its dtypes, cases and a verdict per (device, slot)."""

    def cell(rs: Sequence[Record]) -> str:
        status = _status_of(rs)
        shown = next((s for s, label in _CELL_ORDER if label == status), None)
        return f"{status} {sum(r.status == shown for r in rs)}/{len(rs)}" if shown else status

    by_op: dict[str, set] = {}
    for r in records:
        by_op.setdefault(r.op, set()).add((r.dtype, r.case))
    first = [("op", _op_width(records)), ("dtypes", 6), ("cases", 5)]

    def key(r: Record) -> tuple:
        return r.op, len({d for d, _ in by_op[r.op]}), len(by_op[r.op])

    lines = _grid(records, _columns(records), cell, key, first)
    lines.append("  " + legend(records, table=False))
    return lines + [*("  " + _describe(r) for r in _listed(records, verbose=False))]


def _json_value(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_json(records: Sequence[Record], path: str) -> None:
    """Every record as a JSON object (non-finite errors as the strings "inf" / "nan")."""
    data = [{k: _json_value(v) for k, v in asdict(r).items()} for r in records]
    with open(path, "w", encoding="utf-8") as file:
        json.dump(data, file, indent=1)
        file.write("\n")


def _check_json_path(parser: argparse.ArgumentParser, path: str | None) -> None:
    """Refuses, before the run, a --json path that cannot be written."""
    if path is None:
        return
    if not path.strip():
        _fail(parser, f"--json needs a file path, got {path!r}")
    existed = os.path.lexists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as error:
        _fail(parser, f"--json {path!r} cannot be written: {error.strerror or error}")
    if not existed:
        os.remove(path)


def _planned(ops: Sequence[str], devices: Sequence[str], dtypes) -> int:
    """How many (op, dtype, device, slot) rows the selection runs (an op without a
    table entry counts: it gives an error record)."""
    count = 0
    for op in ops:
        info = OPS.get(op)
        if info is None:
            count += 1
            continue
        rows = [d for d in info.dtypes if dtypes is None or d in dtypes]
        count += len(rows) * len(targets_of(op, devices))
    return count


def selection(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """run_parity's keyword arguments from the parsed options; a usage error (exit 2)
    for an unknown name, an absent device, a filter that selects nothing and a
    --json path that cannot be written."""
    devices = _choose(parser, "--device", args.device, KNOWN_DEVICES, "device")
    present = polyops.devices()
    for device in devices or []:
        if device not in present:
            hint = f"; {CANN_DOUBLE_HINT}" if device == "npu" else ""
            _fail(
                parser,
                f"device {device!r} is not present here (present: {', '.join(present)}){hint}",
            )
    ops = _choose(parser, "--op", args.op, polyops.operators(), "op")
    dtypes = None
    if args.dtype is not None:
        try:
            dtypes = parse_dtypes(args.dtype)
        except ValueError as error:
            _fail(parser, f"--dtype: {error}")
    chosen = {"ops": ops, "devices": devices, "dtypes": dtypes}
    if not _planned(ops or polyops.operators(), devices or present, dtypes):
        given = [
            f"{option} {','.join(values)}"
            for option, values in (
                ("--device", args.device),
                ("--op", args.op),
                ("--dtype", args.dtype),
            )
            if values is not None
        ]
        takes = [
            f"{op} takes {', '.join(dtype_name(d) for d in OPS[op].dtypes)}"
            for op in ops or []
            if op in OPS
        ]
        _fail(
            parser,
            f"no check matches {' '.join(given)}" + (f" ({'; '.join(takes)})" if takes else ""),
        )
    _check_json_path(parser, args.json)
    return chosen


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``python -m polyops parity``: prints the report, writes --json; 1 on any undeclared
    fail or error, 2 on a usage error (before the run)."""
    if args.cann_double:
        try:
            _cann_double.use_cann_double()
        except (OSError, RuntimeError, ValueError) as error:
            _fail(parser, f"--cann-double: {type(error).__name__}: {error}")
    chosen = selection(parser, args)
    start = time.perf_counter()
    records = run_parity(**chosen)
    elapsed = time.perf_counter() - start
    print("devices:")
    print("\n".join(device_lines(sorted({r.device for r in records if r.slot >= 0}))))
    print()
    print("\n".join(table_lines(records, args.verbose)))
    print(f"\n{counts_line(records)} ({elapsed:.1f} s)")
    if args.json:
        try:
            write_json(records, args.json)
        except OSError as error:
            print(f"{parser.prog}: error: --json {args.json!r}: {error}", file=sys.stderr)
            return 2
        print(f"records written to {args.json}")
    return 1 if any(r.status in FAILING for r in records) else 0
