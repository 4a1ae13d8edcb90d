"""The slot table, ``src/slots.txt``: which slots each op has on each device and in
which order a call tries them (the first is the default). Read here and checked
against the slot files themselves, ``src/<device>/<op>/<name>.h`` (``.cuh``), which
fix each slot's number and name; the build stops on any disagreement.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

from codegen.model import DEVICE_TABLE, DEVICES, OpSpec

TABLE = "slots.txt"
# Operator<Op, Device::Type::kCpu, 1> ... kImplementationName = "omp"
_SLOT_CLASS = re.compile(r"class\s+Operator<\s*(\w+)\s*,\s*Device::Type::(\w+)\s*,\s*(\d+)\s*>")
_SLOT_NAME = re.compile(r'kImplementationName\s*=\s*"([^"]+)"')


@dataclasses.dataclass(frozen=True)
class Slot:
    index: int
    name: str
    header: str  # relative to src/, as the generated sources include it


def _read_slot_files(src: pathlib.Path, spec: OpSpec, device: str) -> dict[str, Slot]:
    slots: dict[str, Slot] = {}
    for path in sorted((src / device / spec.name).glob("*" + DEVICE_TABLE[device].slot_suffix)):
        text = path.read_text()
        classes, names = _SLOT_CLASS.findall(text), _SLOT_NAME.findall(text)
        where = path.relative_to(src).as_posix()
        if len(classes) != 1 or len(names) != 1:
            raise SystemExit(
                f"src/{where}: a slot file defines exactly one Operator<{spec.class_name}, "
                f"Device::Type::{DEVICES[device]}, N> with one kImplementationName"
            )
        (cls, enum, index), name = classes[0], names[0]
        if (cls, enum) != (spec.class_name, DEVICES[device]):
            raise SystemExit(
                f"src/{where}: defines Operator<{cls}, Device::Type::{enum}, ...>; its folder "
                f"expects Operator<{spec.class_name}, Device::Type::{DEVICES[device]}, N>"
            )
        if name != path.stem:
            raise SystemExit(f"src/{where}: kImplementationName is {name!r}; name the file {name}")
        taken = [s for s in slots.values() if s.index == int(index)]
        if taken:
            raise SystemExit(f"src/{where}: slot {index} is also src/{taken[0].header}")
        slots[name] = Slot(int(index), name, where)
    return slots


def read_slot_table(src: pathlib.Path, specs: list[OpSpec]) -> dict[tuple[str, str], list[Slot]]:
    """``{(op, device): [slots in try order]}`` for every op and device of the table."""
    table_path = src / TABLE
    rows: dict[str, list[str]] = {}
    header: list[str] | None = None
    for number, line in enumerate(table_path.read_text().splitlines(), 1):
        cells = line.split()
        if cells[:2] == ["#", "op"]:
            header = cells[2:]
            if header != list(DEVICES):
                raise SystemExit(
                    f"src/{TABLE}:{number}: the columns are {header}; "
                    f"expected one per device: {list(DEVICES)}"
                )
            continue
        if not cells or cells[0].startswith("#"):
            continue
        if header is None or len(cells) != 1 + len(header):
            raise SystemExit(
                f"src/{TABLE}:{number}: expected an op name and one cell per device "
                f"(after the '# op {' '.join(DEVICES)}' header line), got {line!r}"
            )
        if cells[0] in rows:
            raise SystemExit(f"src/{TABLE}:{number}: {cells[0]} has two rows")
        rows[cells[0]] = cells[1:]
    ops = {spec.name for spec in specs}
    if set(rows) != ops:
        raise SystemExit(
            f"src/{TABLE}: rows for unknown ops {sorted(set(rows) - ops)}, "
            f"missing rows for {sorted(ops - set(rows))}"
        )
    result: dict[tuple[str, str], list[Slot]] = {}
    for spec in specs:
        for device, cell in zip(DEVICES, rows[spec.name], strict=True):
            files = _read_slot_files(src, spec, device)
            listed = [] if cell == "-" else cell.split(",")
            if sorted(listed) != sorted(files) or len(set(listed)) != len(listed):
                raise SystemExit(
                    f"src/{TABLE}: {spec.name} on {device} lists {listed}; the slot files "
                    f"in src/{device}/{spec.name}/ are {sorted(files)}: list each once"
                )
            result[spec.name, device] = [files[name] for name in listed]
    return result
