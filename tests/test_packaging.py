"""Packaging: the wheel requires the torch major.minor polyops was built against."""

from __future__ import annotations

import importlib.util
import pathlib

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
    assert check(polyops._C._torch_version) == check(torch.__version__)
    assert check("2.13.0+cpu") == check("2.13.1+cu130") == ("2", "13")
    assert check("2.13.0") != check("2.11.0")
