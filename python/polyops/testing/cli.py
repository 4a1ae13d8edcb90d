"""``python -m polyops parity``: the op table on every device present, as a table or JSON.

Rows are (op, dtype), columns (device, slot); a cell holds the worst
relative error over the row's cases and ok / FAIL / n/a / error. Failures
and errors are listed below the table with the op, device, slot, dtype and
case; ``--verbose`` also lists why cases are n/a. Exit status 1 on any
failure or error.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict

import polyops
from polyops.testing.runner import Record, run_parity
from polyops.testing.tensors import DTYPES_BY_NAME

KNOWN_DEVICES = ("cpu", "cuda", "npu")


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
    parser.add_argument("--dtype", action="append", help="only these dtypes, e.g. float16")
    parser.add_argument("--json", metavar="PATH", help="also write every record to PATH as JSON")
    parser.add_argument("--verbose", action="store_true", help="also list n/a cases with reasons")


def _choose(
    parser, values: list[str] | None, allowed: Sequence[str], what: str
) -> list[str] | None:
    if values is None:
        return None
    chosen = [v.strip() for value in values for v in value.split(",") if v.strip()]
    for value in chosen:
        if value not in allowed:
            parser.error(f"unknown {what} {value!r}; choose from {', '.join(allowed)}")
    return chosen


def _status_of(records: Sequence[Record]) -> str:
    """A cell's verdict: error > FAIL > ok > n/a."""
    statuses = {r.status for r in records}
    for status, shown in (("error", "error"), ("fail", "FAIL"), ("ok", "ok")):
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
        worst = _worst([r for r in records if r.status in ("ok", "fail")], field)
        return status if worst is None else f"{worst:.1e} {status}"

    return cell


def _describe(r: Record) -> str:
    where = f"{r.op} {r.device} slot {r.slot} ({r.slot_name}) {r.dtype} case {r.case}"
    if r.status == "fail":
        return (
            f"FAIL   {where}: max rel err {r.max_rel_err:.3e} > tolerance {r.tolerance:.1e} "
            f"(atol {r.atol:.1e}), max abs err {r.max_abs_err:.3e}; {r.message}"
        )
    return f"{'ERROR' if r.status == 'error' else 'n/a':<6} {where}: {r.message}"


def counts_line(records: Sequence[Record]) -> str:
    counts = {s: sum(r.status == s for r in records) for s in ("ok", "fail", "error", "n/a")}
    return f"{len(records)} checks: " + ", ".join(f"{n} {s}" for s, n in counts.items())


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
    problems = [
        r for r in records if r.status in ("fail", "error") or (verbose and r.status == "n/a")
    ]
    if problems:
        lines += ["", *(_describe(r) for r in problems)]
    return lines


def summary_lines(records: Sequence[Record]) -> list[str]:
    """The compact form: one line per op with its dtypes, cases and a verdict per (device, slot)."""

    def cell(rs: Sequence[Record]) -> str:
        bad = sum(r.status in ("fail", "error") for r in rs)
        return f"{_status_of(rs)} {bad}/{len(rs)}" if bad else _status_of(rs)

    by_op: dict[str, set] = {}
    for r in records:
        by_op.setdefault(r.op, set()).add((r.dtype, r.case))
    first = [("op", _op_width(records)), ("dtypes", 6), ("cases", 5)]

    def key(r: Record) -> tuple:
        return r.op, len({d for d, _ in by_op[r.op]}), len(by_op[r.op])

    lines = _grid(records, _columns(records), cell, key, first)
    problems = [r for r in records if r.status in ("fail", "error")]
    return lines + [*("  " + _describe(r) for r in problems)]


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


def selection(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict:
    """run_parity's keyword arguments from the parsed options (argparse errors on bad names)."""
    devices = _choose(parser, args.device, KNOWN_DEVICES, "device")
    present = polyops.devices()
    for device in devices or []:
        if device not in present:
            parser.error(f"device {device!r} is not present here (present: {', '.join(present)})")
    dtypes = _choose(parser, args.dtype, list(DTYPES_BY_NAME), "dtype")
    return {
        "ops": _choose(parser, args.op, polyops.operators(), "op"),
        "devices": devices,
        "dtypes": None if dtypes is None else [DTYPES_BY_NAME[d] for d in dtypes],
    }


def run(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    """``python -m polyops parity``: prints the report, writes --json; 1 on any fail or error."""
    start = time.perf_counter()
    records = run_parity(**selection(parser, args))
    elapsed = time.perf_counter() - start
    print("\n".join(table_lines(records, args.verbose)))
    print(f"\n{counts_line(records)} ({elapsed:.1f} s)")
    if args.json:
        write_json(records, args.json)
        print(f"records written to {args.json}")
    return 1 if any(r.status in ("fail", "error") for r in records) else 0
