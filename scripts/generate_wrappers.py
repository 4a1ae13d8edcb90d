#!/usr/bin/env python3
"""Generate polyops' per-op C++ glue from ``src/base/*.h``.

Every operator header declares one base class with ``kName``,
``kNumPositional``, a constructor whose parameter list *is* the op's signature
(names, order, C++ defaults), and optional ``static TensorMeta Default<Out>``
functions that give the shape and dtype of an output the caller omitted.
From that this script writes, into the output directory:

* ``<device>_<op>.cc`` for each enabled device (``cuda_<op>.cu`` for CUDA,
  compiled by nvcc): includes every ``src/<device>/<op>/*.h`` (``*.cuh``)
  implementation (none: the op raises NotImplementedError on that device)
  and defines the two functions the bindings call (construct slot N; list
  the slots with their names, in the try order of ``src/slots.txt``).
* ``ops_<device>.h``: their declarations; ``ops.h`` includes those of every device.
* ``run.h``: ``Run<Op>()``, which checks devices, finds or builds the cached
  instance and runs it; shared by the two entry points below.
* ``ops_table.h``: ``Get<Op>`` / ``Run<Op>`` as function pointers, which
  ``polyops._C`` exports to the torch modules.
* ``bindings.cc``: one METH_FASTCALL function per op whose keyword names, order,
  defaults and keyword-only marker come from the constructor, followed by
  the keyword-only ``implementation_index``, ``implementation`` and ``stream``
  every op takes.
* ``torch_library.cc``: the ``torch.ops.polyops`` schemas (functional and
  ``.out`` overloads, mutated arguments annotated) and one typed kernel per
  overload, registered for every enabled device (see docs/user/torch.md);
  ``meta_check.cc``: the fakes' argument checks; ``torch_stable.cc``: the
  kernels on torch's stable ABI.

One module of ``scripts/codegen/`` per concern: ``model`` (the op headers
read into ``OpSpec``), ``slots`` (the slot table), ``device_sources``,
``bindings``, ``torch_library``, ``torch_stable`` (docs/contributing/codegen.md).

Because the Python signature and the schemas are derived from the C++ one,
they cannot drift; ``tests/generic/test_signatures.py`` and
``tests/generic/test_torch_library.py`` check the results independently.
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from codegen.bindings import emit_bindings
from codegen.device_sources import (
    emit_device_ops_header,
    emit_device_source,
    emit_ops_header,
    emit_ops_table_header,
    emit_run_header,
)
from codegen.model import DEVICE_TABLE, DEVICES, collect
from codegen.slots import read_slot_table
from codegen.torch_library import emit_meta_checks, emit_torch_library
from codegen.torch_stable import emit_torch_stable


def write_if_changed(path: pathlib.Path, text: str) -> None:
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--src", type=pathlib.Path, required=True, help="the src/ directory")
    parser.add_argument("--out", type=pathlib.Path, required=True, help="output directory")
    parser.add_argument("--devices", default="cpu", help="comma-separated: " + ", ".join(DEVICES))
    parser.add_argument(
        "--list-ops", action="store_true", help="print the op names (one per line) and exit"
    )
    args = parser.parse_args(argv)
    specs = collect(args.src)
    slot_table = read_slot_table(args.src, specs)
    if args.list_ops:
        print("\n".join(spec.name for spec in specs))
        return 0
    devices = [d for d in args.devices.split(",") if d]
    unknown = set(devices) - set(DEVICES)
    if unknown:
        raise SystemExit(f"unknown devices {sorted(unknown)}; expected some of {list(DEVICES)}")
    out = args.out / "generated"
    out.mkdir(parents=True, exist_ok=True)
    for device in devices:
        write_if_changed(out / f"ops_{device}.h", emit_device_ops_header(specs, device))
    write_if_changed(out / "ops.h", emit_ops_header(devices))
    for spec in specs:
        for device in devices:
            # Slots in .cuh headers are compiled by nvcc, in a .cu TU.
            suffix = "cu" if DEVICE_TABLE[device].slot_suffix == ".cuh" else "cc"
            write_if_changed(
                out / f"{device}_{spec.name}.{suffix}",
                emit_device_source(spec, device, slot_table[spec.name, device]),
            )
    write_if_changed(out / "run.h", emit_run_header(specs, devices))
    write_if_changed(out / "ops_table.h", emit_ops_table_header(specs))
    write_if_changed(out / "bindings.cc", emit_bindings(specs, devices))
    write_if_changed(out / "torch_library.cc", emit_torch_library(specs, devices))
    write_if_changed(out / "meta_check.cc", emit_meta_checks(specs))
    write_if_changed(out / "torch_stable.cc", emit_torch_stable(specs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
