"""Packaging: which torch a build requires, and which of its modules need which torch API."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys

import torch

import polyops

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_requires_any_torch_from_2_10():
    # One build for every torch >= 2.10 (docs/user/torch.md, "Torch versions"): no pin.
    requirements = importlib.metadata.requires("polyops")
    assert "torch>=2.10" in requirements, requirements


def test_torch_ops_form_follows_the_torch_version():
    # _torch_ops under the build's torch minor version, the stable form under any other
    # (or with POLYOPS_TORCH_STABLE=1).
    same = polyops._major_minor(polyops._C._torch_ops_version) == polyops._major_minor(
        torch.__version__
    )
    forced = os.environ.get("POLYOPS_TORCH_STABLE", "") == "1"
    assert polyops.torch_ops_registered()
    assert polyops._torch_library._stable == (forced or not same)


def test_import_check_compares_major_minor():
    check = polyops._major_minor
    assert check("2.13.0+cpu") == check("2.13.1+cu130") == ("2", "13")
    assert check("2.13.0") != check("2.11.0")


def _elf(tool: str, *args: str) -> str:
    path = shutil.which(tool)
    assert path, f"{tool} (binutils) is needed to inspect the extension modules"
    return subprocess.run([path, *args], capture_output=True, text=True, check=True).stdout


def test_eager_module_links_no_torch_and_uses_no_torch_symbol():
    # polyops._C reads tensors through DLPack (docs/user/torch.md, "Torch versions"): no torch
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
        r"\(NEEDED\).*\[(.+)\]",
        _elf("readelf", "-d", importlib.util.find_spec("polyops._torch_ops").origin),
    )


def test_stable_module_uses_only_torch_stable_c_shim():
    # polyops._torch_stable (docs/user/torch.md, "Torch versions") calls torch only through
    # its stable C shim (aoti_torch_* / torch_* C functions, as torch 2.10 exports
    # them): no torch C++ symbol, so the same file loads under every torch >= 2.10.
    module = importlib.util.find_spec("polyops._torch_stable").origin
    undefined = _elf("nm", "-D", "--undefined-only", module).split()
    torch_cpp = [s for s in undefined if re.match(r"_ZN(K?)(3c10|2at|5torch)|THP", s)]
    assert not torch_cpp, torch_cpp[:10]
    shim = [s for s in undefined if s.startswith(("aoti_torch_", "torch_"))]
    assert "torch_library_impl" in shim and "aoti_torch_get_data_ptr" in shim, shim


def test_stable_form_on_request_and_bad_value_fails_the_import():
    # POLYOPS_TORCH_STABLE=1 picks the stable torch.ops form under any torch; a value
    # other than 0 or 1 fails the import (docs/user/api.md, "Environment variables").
    script = (
        "import torch, polyops\n"
        "assert polyops._torch_library._stable and polyops.torch_ops_registered()\n"
        "x = torch.randn(2, 8)\n"
        "y = torch.ops.polyops.rms_norm(x, torch.ones(8))\n"
        "assert torch.allclose(y, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))\n"
    )
    runs = {
        value: subprocess.Popen(
            [sys.executable, "-c", script],
            env={**os.environ, "POLYOPS_TORCH_STABLE": value},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for value in ("1", "yes")
    }
    results = {value: (p.wait(timeout=120), p.stderr.read()) for value, p in runs.items()}
    assert results["1"][0] == 0, results["1"][1]
    code, err = results["yes"]
    assert code != 0
    assert err.strip().splitlines()[-1] == (
        "ValueError: polyops: environment variable POLYOPS_TORCH_STABLE must be 0 or 1, got 'yes'"
    ), err
