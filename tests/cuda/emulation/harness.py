"""What the emulated-CUDA tests share (tests/cuda/test_cuda_*_emulated.py).

The slot headers are copied with every ``kernel<<<grid, block, shared,
stream>>>(args)`` rewritten into a call of ``EmulatedLaunch`` and every
``extern __shared__ T name[];`` into a pointer to the launch's dynamic shared
buffer (emulated_cuda.h), built with the host compiler together with a driver
(``*_main.cc`` over driver.h), and each call is passed to the driver as a
manifest: the tensors' storages (deduplicated, so aliasing survives), offsets,
strides and dtypes, and the op's other arguments in the constructor's order.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pytest
import torch

from polyops.testing import OPS, Inputs, compare
from polyops.testing.opinfo import Call, drop_none
from polyops.testing.tensors import sentinel

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
CXX = os.environ.get("CXX", "g++")

#: polyops::DataType's enumerators (src/core/data_type.h).
DTYPE_ENUM = {
    torch.bool: 0,
    torch.int8: 1,
    torch.int16: 2,
    torch.int32: 3,
    torch.int64: 4,
    torch.uint8: 5,
    torch.float16: 6,
    torch.bfloat16: 7,
    torch.float32: 8,
    torch.float64: 9,
}

_DYNAMIC_SHARED = re.compile(r"extern\s+__shared__\s+([\w:]+)\s+(\w+)\s*\[\s*\]\s*;")


def rewrite_launches(text: str) -> str:
    """Every ``callee<<<config>>>(args);`` as ``EmulatedLaunch(config, [&] { callee(args); });``."""
    out, pos = [], 0
    while (at := text.find("<<<", pos)) >= 0:
        start = max(text.rfind(c, 0, at) for c in ";{}") + 1
        callee = text[start:at].strip()
        close = text.index(">>>", at)
        config = " ".join(text[at + 3 : close].split())
        opening = text.index("(", close)
        depth, end = 0, opening
        for end in range(opening, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        args = " ".join(text[opening + 1 : end].split())
        semicolon = text.index(";", end)
        indent = re.match(r"\s*", text[start:at]).group(0)
        out.append(text[pos:start])
        out.append(f"{indent}EmulatedLaunch({config}, [&] {{ {callee}({args}); }});")
        pos = semicolon + 1
    out.append(text[pos:])
    return "".join(out)


def rewrite_source(text: str) -> str:
    """Launches rewritten, and ``extern __shared__ T name[];`` as the launch's buffer."""
    text = _DYNAMIC_SHARED.sub(r"\1* const \2 = emulation::DynamicShared<\1>();", text)
    return rewrite_launches(text)


def build_emulator(build: Path, headers: Sequence[str], main: str) -> Path:
    """The driver `main` (in this folder) built against the rewritten `headers` (under src/)."""
    if shutil.which(CXX) is None:
        pytest.skip(f"no host C++ compiler {CXX!r} to build the CUDA emulation")
    if os.uname().machine != "x86_64":
        pytest.skip("the CUDA emulation's fiber switch (emulated_cuda.h) is x86-64 assembly")
    for header in headers:
        target = build / header
        target.parent.mkdir(parents=True, exist_ok=True)
        rewritten = rewrite_source((ROOT / "src" / header).read_text())
        assert "<<<" not in rewritten, header
        assert "extern __shared__" not in rewritten, header
        target.write_text(rewritten)
    exe = build / Path(main).stem
    command = [
        CXX,
        "-std=c++20",
        "-O1",
        "-ffp-contract=off",
        f"-I{build}",
        f"-I{ROOT / 'src'}",
        f"-I{HERE}",
        str(HERE / main),
        "-o",
        str(exe),
    ]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    assert result.returncode == 0, f"building the emulation failed:\n{result.stderr[-4000:]}"
    return exe


class Manifest:
    """The driver's input: storages (deduplicated, so aliasing survives) and arguments."""

    def __init__(self, folder: Path, op: str, slot: int):
        self.folder = folder
        self.lines = [f"op {op} {slot}"]
        self.storages: dict[int, int] = {}  # storage data_ptr -> id

    def storage_id(self, tensor: torch.Tensor) -> int:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key not in self.storages:
            assert key % 64 == 0, "torch's CPU storages are 64-byte aligned"
            index = len(self.storages)
            self.storages[key] = index
            path = self.folder / f"storage{index}.bin"
            raw = torch.empty(0, dtype=torch.uint8).set_(storage)
            raw.numpy().tofile(path)
            self.lines.append(f"storage {index} {storage.nbytes()} {path}")
        return self.storages[key]

    def add(self, value: object, host: bool = False) -> None:
        """One argument; `host`: a tensor the op requires in CPU memory (the *_host mirrors)."""
        if value is None:
            self.lines.append("none")
        elif isinstance(value, torch.Tensor):
            index = self.storage_id(value)
            offset = value.storage_offset() * value.element_size()
            dims = " ".join(map(str, [*value.shape, *value.stride()]))
            where = " cpu" if host else ""
            self.lines.append(
                f"tensor {index} {offset} {DTYPE_ENUM[value.dtype]} {value.dim()} {dims}{where}"
            )
        elif isinstance(value, (list, tuple)):
            self.lines.append(f"tensors {len(value)}")
            for item in value:
                self.add(item)
        elif isinstance(value, torch.dtype):
            self.lines.append(f"dtype {DTYPE_ENUM[value]}")
        elif isinstance(value, bool):
            self.lines.append(f"bool {int(value)}")
        elif isinstance(value, int):
            self.lines.append(f"int {value}")
        elif isinstance(value, float):
            self.lines.append(f"double {value!r}")
        else:
            raise TypeError(f"unsupported argument {value!r}")

    def read_back(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor`'s view into its storage as the emulated kernel left it."""
        if tensor.untyped_storage().nbytes() == 0:
            return tensor.clone()
        index = self.storages[tensor.untyped_storage().data_ptr()]
        raw = np.fromfile(self.folder / f"storage{index}.bin.out", dtype=np.uint8)
        data = torch.from_numpy(raw).view(tensor.dtype)
        return data.as_strided(tensor.shape, tensor.stride(), tensor.storage_offset())


def run_slot(
    exe: Path,
    folder: Path,
    op: str,
    slot: int,
    params: Sequence[tuple[str, object]],
    call: Call,
    allocate: dict[str, tuple[Sequence[int], torch.dtype]],
    results: Callable[[dict], Sequence[torch.Tensor | None]],
) -> tuple:
    """One call of `op`'s CUDA slot `slot` under the emulation; the tensors `results` picks.

    params: the constructor's (name, default) in order. allocate: the outputs
    the bindings would allocate when omitted, as (shape, dtype); the driver
    gets them given, filled with the sentinel so unwritten elements show.
    """
    names = [name for name, _ in params]
    given = dict(params)
    given.update(zip(names, call.args, strict=False))
    given.update(call.kwargs)
    given.update(call.outputs)
    for name, (shape, dtype) in allocate.items():
        if given[name] is None:
            filler = float("nan") if dtype.is_floating_point else sentinel(dtype)
            given[name] = torch.full(tuple(shape), filler, dtype=dtype)
    folder.mkdir(parents=True, exist_ok=True)
    manifest = Manifest(folder, op, slot)
    for name in names:
        manifest.add(given[name], host=name.endswith("_host"))
    (folder / "manifest.txt").write_text("\n".join(manifest.lines) + "\n")
    result = subprocess.run(
        [str(exe), str(folder / "manifest.txt")], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"emulated slot failed ({result.returncode}): {result.stderr}")
    return drop_none(
        tuple(manifest.read_back(t) if t is not None else None for t in results(given))
    )


def parity_failures(
    exe: Path,
    folder: Path,
    op: str,
    dtype: torch.dtype,
    slot: int,
    params: Sequence[tuple[str, object]],
    out_dtype: Callable[[Call], torch.dtype],
) -> list[str]:
    """Every parity-table case of single-output `op` in `dtype` through the emulated slot.

    Returns one message per case that failed to run, came back in another
    dtype than ``out_dtype(call)``, or missed the float64 reference at the
    table's tolerance.
    """
    info = OPS[op]
    cases = info.all_cases(dtype)
    assert cases
    failures = []
    for number, case in enumerate(cases):
        call = case.build(Inputs(info.seed(dtype, case), "cpu"))
        expected = drop_none(info.reference(*call.args, **call.kwargs))
        want_dtype = out_dtype(call)
        try:
            results = run_slot(
                exe,
                folder / f"case{number}",
                op,
                slot,
                params,
                call,
                {"out": (expected[0].shape, want_dtype)},
                lambda given: [given["out"]],
            )
        except RuntimeError as error:
            failures.append(f"{case.name}: {error}")
            continue
        for index, (got, want) in enumerate(zip(results, expected, strict=True)):
            if got.dtype != want_dtype:
                failures.append(f"{case.name} result {index}: dtype {got.dtype}")
                continue
            outcome = compare(got, want, info.tolerance(got.dtype).scaled(case.atol_scale))
            if not outcome.ok:
                failures.append(f"{case.name} result {index}: {outcome.message}")
    return failures
