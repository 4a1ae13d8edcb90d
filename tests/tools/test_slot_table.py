"""The slot table ``src/slots.txt``: the built module lists each op's slots in the
table's order with the first as the default, and the generator
(``scripts/codegen/slots.py``) stops on a table that disagrees with the slot files.
"""

from __future__ import annotations

import pathlib
import shutil
import sys

import pytest

import polyops

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from codegen.model import DEVICES, collect  # noqa: E402
from codegen.slots import read_slot_table  # noqa: E402

SRC = ROOT / "src"
# The Python name of each C++ device, for the devices this build has.
PYTHON_DEVICE = {"cpu": "cpu", "cuda": "cuda", "ascend": "npu"}


def _table_rows() -> dict[str, dict[str, list[str]]]:
    """``{op: {device: [names]}}`` parsed here by hand, independently of codegen."""
    rows = {}
    for line in (SRC / "slots.txt").read_text().splitlines():
        cells = line.split()
        if cells and not cells[0].startswith("#"):
            rows[cells[0]] = {
                device: [] if cell == "-" else cell.split(",")
                for device, cell in zip(DEVICES, cells[1:], strict=True)
            }
    return rows


@pytest.mark.parametrize("device", ["cpu", "ascend"])
def test_built_order_and_default_follow_the_table(device):
    python_device = PYTHON_DEVICE[device]
    if python_device not in polyops._C._built_devices:
        pytest.skip(f"this build has no {python_device} backend")
    rows = _table_rows()
    assert set(rows) == set(polyops.operators())
    for op, cells in rows.items():
        listed = polyops.implementations(op, python_device)
        assert list(listed.values()) == cells[device], op
        default = polyops.default_implementation(op, python_device)
        assert listed[default] == cells[device][0], op


def _copy_src(tmp_path: pathlib.Path) -> pathlib.Path:
    src = tmp_path / "src"
    shutil.copytree(SRC / "base", src / "base")
    for device in DEVICES:
        shutil.copytree(
            SRC / device, src / device, ignore=shutil.ignore_patterns("runtime", "kernels")
        )
    shutil.copy(SRC / "slots.txt", src / "slots.txt")
    return src


def test_generator_reads_the_repository_table():
    specs = collect(SRC)
    table = read_slot_table(SRC, specs)
    order = [slot.name for slot in table["rms_norm", "cpu"]]
    assert order == _table_rows()["rms_norm"]["cpu"]
    assert {slot.index for slot in table["rms_norm", "cpu"]} == {0, 1}


def _replace_line(src: pathlib.Path, first_cells: list[str], line: str) -> None:
    """Replaces the table line that starts with `first_cells` by `line`."""
    table = src / "slots.txt"
    lines = table.read_text().splitlines()
    [at] = [i for i, old in enumerate(lines) if old.split()[: len(first_cells)] == first_cells]
    lines[at] = line
    table.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize(
    ("first_cells", "line", "message"),
    [
        (["add"], "add omp vector aclnn", r"add on cpu lists \['omp'\]; .* are \['loop', 'omp'\]"),
        (["cast"], "cast loop,fast loop aclnn", r"cast on cpu lists \['loop', 'fast'\]"),
        (["add"], "add omp,omp,loop vector aclnn", r"list each once"),
        (["swiglu"], "swiglu_x omp vector aclnn", r"unknown ops \['swiglu_x'\], missing .*swiglu"),
        (["cat"], "cat omp copy", r"one cell per device"),
        (["#", "op"], "# op cpu ascend cuda", r"expected one per device"),
    ],
    ids=["missing-slot", "unknown-slot", "listed-twice", "unknown-op", "short-row", "columns"],
)
def test_generator_refuses_a_table_that_disagrees(tmp_path, first_cells, line, message):
    src = _copy_src(tmp_path)
    _replace_line(src, first_cells, line)
    with pytest.raises(SystemExit, match=message):
        read_slot_table(src, collect(src))


def test_generator_refuses_a_slot_file_named_otherwise(tmp_path):
    src = _copy_src(tmp_path)
    (src / "cpu" / "rms_norm" / "omp.h").rename(src / "cpu" / "rms_norm" / "fast.h")
    with pytest.raises(SystemExit, match=r"kImplementationName is 'omp'; name the file omp"):
        read_slot_table(src, collect(src))


def test_generator_refuses_two_files_on_one_index(tmp_path):
    src = _copy_src(tmp_path)
    folder = src / "cpu" / "rms_norm"
    text = (folder / "loop.h").read_text().replace('"loop"', '"loop2"')
    (folder / "loop2.h").write_text(text)
    _replace_line(src, ["rms_norm"], "rms_norm omp,loop,loop2 vector aclnn")
    with pytest.raises(SystemExit, match=r"slot 0 is also src/cpu/rms_norm/loop"):
        read_slot_table(src, collect(src))
