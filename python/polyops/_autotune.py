"""Measured choice of the CPU matrix-product path (docs/backends/cpu_gemm.md, "Autotune").

Off by default: a product's path (oneDNN, polyops' own kernels, OpenBLAS), and
so its bits, then follow fixed rules written for the CPUs they were measured
on. With ``POLYOPS_AUTOTUNE=1`` or ``polyops.autotune(True)``, the first
matmul / gemm / linear of a new geometry (dtype, sizes, strides; no data) on
CPU times each path that takes it on scratch output, keeps the fastest, and
runs it from then on; ``polyops.autotune_info()`` lists the picks with their
timings. ``save_autotune`` / ``load_autotune`` (or ``POLYOPS_AUTOTUNE_FILE``)
carry picks to other processes on the same kind of CPU.
"""

from __future__ import annotations

import atexit
import json
import os
import platform
import tempfile
import warnings
from typing import Any

from polyops import _C

_FORMAT = "polyops-autotune"
_VERSION = 1


def autotune(enabled: bool | None = None) -> bool:
    """Turn the measured choice of the CPU product path on or off; returns the state.

    ``autotune()`` only reports it. Picks already measured stay (``clear_cache()``
    drops them) and are used only while autotune is on.
    """
    if enabled is not None:
        if not isinstance(enabled, bool):
            raise TypeError(f"polyops.autotune: enabled must be a bool or None, got {enabled!r}")
        _C._autotune_enable(enabled)
    return bool(_C._autotune_enabled())


def autotune_info() -> list[dict[str, Any]]:
    """The measured geometries, oldest first.

    Each is ``{"op", "dtype", "shape": [batch, m, n, k], "pick", "timings_us", "key"}``:
    ``pick`` is "onednn", "own" or "openblas"; ``timings_us`` holds the best time of
    every path that took the product (empty for picks loaded from a file); ``key`` is
    the full geometry (dtype, sizes, strides and BLAS views of a, b, c and out).
    """
    entries = []
    for entry in _C._autotune_entries():
        key = list(entry["key"])
        entries.append(
            {
                "op": entry["op"],
                "dtype": entry["dtype"],
                "shape": key[1:5],
                "pick": entry["pick"],
                "timings_us": dict(entry["timings_us"]),
                "key": key,
            }
        )
    return entries


def _machine() -> dict[str, Any]:
    """What a pick depends on besides the geometry: the CPU and the paths polyops sees."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    onednn = _C._onednn_info()
    return {
        "cpu": model,
        "isa": _C._cpu_isa(),
        "avx512_bf16": bool(_C._cpu_gemm_bf16()),
        "onednn_isa": onednn["isa"] if onednn["available"] else "",
    }


def save_autotune(path: str | os.PathLike[str]) -> int:
    """Write the current picks to the JSON file `path` (replaced atomically); returns how many."""
    entries = [{"op": e["op"], "key": e["key"], "pick": e["pick"]} for e in autotune_info()]
    document = {
        "format": _FORMAT,
        "version": _VERSION,
        "machine": _machine(),
        "entries": entries,
    }
    target = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(target))
    with tempfile.NamedTemporaryFile("w", dir=directory, delete=False, suffix=".tmp") as file:
        json.dump(document, file, indent=1)
        temporary = file.name
    os.replace(temporary, target)
    return len(entries)


def load_autotune(path: str | os.PathLike[str]) -> int:
    """Add the picks of the JSON file `path` (written by ``save_autotune``); returns how many.

    A file written on another kind of CPU (model, ISA, oneDNN's ISA) is not used: its
    picks are skipped with a RuntimeWarning and 0 is returned. A file that is not a
    polyops autotune file raises ValueError naming it.
    """
    target = os.fspath(path)
    try:
        with open(target, encoding="utf-8") as file:
            document = json.load(file)
    except json.JSONDecodeError as error:
        raise ValueError(f"polyops.load_autotune: {target} is not JSON: {error}") from None
    if not isinstance(document, dict) or document.get("format") != _FORMAT:
        raise ValueError(f"polyops.load_autotune: {target} is not a polyops autotune file")
    if document.get("version") != _VERSION:
        raise ValueError(
            f"polyops.load_autotune: {target} has version {document.get('version')!r}, "
            f"expected {_VERSION}"
        )
    if document.get("machine") != _machine():
        warnings.warn(
            f"polyops.load_autotune: {target} was measured on {document.get('machine')}, "
            f"this machine is {_machine()}; its picks are not used",
            RuntimeWarning,
            stacklevel=2,
        )
        return 0
    entries = document.get("entries")
    if not isinstance(entries, list):
        raise ValueError(f"polyops.load_autotune: {target} has no 'entries' list")
    for entry in entries:
        try:
            op, key, pick = entry["op"], entry["key"], entry["pick"]
        except (TypeError, KeyError):
            raise ValueError(
                f"polyops.load_autotune: {target}: malformed entry {entry!r}"
            ) from None
        if not (isinstance(key, list) and all(isinstance(v, int) for v in key)):
            raise ValueError(f"polyops.load_autotune: {target}: malformed key in {entry!r}")
        _C._autotune_record(str(op), key, str(pick))
    return len(entries)


def _apply_environment(path: str) -> None:
    """``POLYOPS_AUTOTUNE_FILE``: load its picks now (when the file exists) and write the
    picks back at exit (when there are any), so each process starts where the last stopped."""
    if not path:
        return
    if os.path.exists(path):
        load_autotune(path)

    def save() -> None:
        if _C._autotune_entries():
            save_autotune(path)

    atexit.register(save)
