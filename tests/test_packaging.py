"""Packaging: which torch a build requires, and which of its modules need torch's C++ API."""

from __future__ import annotations

import importlib.util
import pathlib
import re
import shutil
import subprocess

import pytest
import torch

import polyops

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _provider():
    path = ROOT / "scripts" / "torch_requirement.py"
    spec = importlib.util.spec_from_file_location("torch_requirement", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "version, requirement",
    [
        ("2.13.0", "torch>=2.13,<2.14"),
        ("2.13.0+cpu", "torch>=2.13,<2.14"),
        ("2.11.0+cu130", "torch>=2.11,<2.12"),
        ("2.9.1", "torch>=2.9,<2.10"),
        ("3.0.0a0+git1234", "torch>=3.0,<3.1"),
    ],
)
def test_torch_requirement_pins_major_minor(version, requirement):
    assert _provider().torch_requirement(version) == requirement


def test_torch_requirement_rejects_unreadable_version():
    with pytest.raises(RuntimeError, match="major.minor"):
        _provider().torch_requirement("nightly")


def test_dependencies_field_lists_build_torch_then_also():
    fields = _provider().dynamic_metadata(
        {"field": "dependencies", "also": ["scipy-openblas32>=0.3.27"]}, {}
    )
    major, minor = torch.__version__.split(".")[:2]
    assert fields == {
        "dependencies": [
            f"torch>={major}.{minor},<{major}.{int(minor) + 1}",
            "scipy-openblas32>=0.3.27",
        ]
    }


def test_import_check_compares_major_minor():
    check = polyops._major_minor
    assert check(polyops._C._torch_ops_version) == check(torch.__version__)
    assert check("2.13.0+cpu") == check("2.13.1+cu130") == ("2", "13")
    assert check("2.13.0") != check("2.11.0")


def _elf(tool: str, *args: str) -> str:
    path = shutil.which(tool)
    assert path, f"{tool} (binutils) is needed to inspect the extension modules"
    return subprocess.run([path, *args], capture_output=True, text=True, check=True).stdout


def test_eager_module_links_no_torch_and_uses_no_torch_symbol():
    # polyops._C reads tensors through DLPack (docs/torch.md, "Torch versions"): no torch
    # library among its dependencies and no torch C++ symbol (c10::, at::, torch::, THP*)
    # among its undefined ones, so the same file loads under any torch.
    module = polyops._C.__file__
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", _elf("readelf", "-d", module))
    assert needed and not [n for n in needed if re.match(r"lib(torch|c10)", n)], needed
    undefined = _elf("nm", "-D", "--undefined-only", module).split()
    torch_symbols = [s for s in undefined if re.match(r"_ZN(K?)(3c10|2at|5torch)|THP", s)]
    assert not torch_symbols, torch_symbols[:10]
    # The torch.library module is the one that needs them (built for this torch).
    assert "libtorch_cpu.so" in re.findall(
        r"\(NEEDED\).*\[(.+)\]", _elf("readelf", "-d", polyops._torch_ops.__file__)
    )
