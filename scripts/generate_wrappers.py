#!/usr/bin/env python3
"""Generate polyops' per-op C++ glue from ``src/base/*.h``.

Every operator header declares one base class with ``kName``,
``kNumPositional``, a constructor whose parameter list *is* the op's signature
(names, order, C++ defaults), and optional ``static TensorMeta Default<Out>``
functions that give the shape and dtype of an output the caller omitted.
From that this script writes, into the output directory:

* ``<device>_<op>.cc`` for each enabled device: includes every
  ``src/<device>/<op>/*.h`` implementation and defines the two functions the
  bindings call (construct slot N; list the slots with their names).
* ``ops.h``: their declarations.
* ``bindings.cc``: one pybind11 function per op whose keyword names, order,
  defaults and keyword-only marker come from the constructor, followed by
  the keyword-only ``implementation_index`` and ``stream`` every op takes.

Because the Python signature is derived from the C++ one, the two cannot
drift; ``tests/test_signatures.py`` checks the result independently.
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import sys

DEVICES = {"cpu": "kCpu", "cuda": "kCuda", "ascend": "kAscend"}


@dataclasses.dataclass
class Param:
    cpp_type: str  # normalized: "Tensor", "std::optional<Tensor>", "double", ...
    name: str
    default: str | None

    @property
    def is_output(self) -> bool:
        return self.cpp_type == "std::optional<Tensor>" and (
            self.name == "out" or self.name.endswith("_out")
        )

    @property
    def is_tensor(self) -> bool:
        return self.cpp_type in ("Tensor", "std::optional<Tensor>")


@dataclasses.dataclass
class OpSpec:
    header: pathlib.Path
    class_name: str
    name: str
    num_positional: int
    params: list[Param]
    defaults: set[str]  # output names with a Default<Out> allocator
    doc: str

    @property
    def outputs(self) -> list[Param]:
        return [p for p in self.params if p.is_output]

    @property
    def inputs(self) -> list[Param]:
        return [p for p in self.params if not p.is_output]


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _split_params(text: str) -> list[str]:
    parts, depth, current = [], 0, []
    for char in text:
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if "".join(current).strip():
        parts.append("".join(current))
    return [" ".join(p.split()) for p in parts]


def _parse_param(text: str, header: pathlib.Path) -> Param:
    default = None
    if "=" in text:
        text, default = (s.strip() for s in text.split("=", 1))
    match = re.fullmatch(r"(.+?)\s*&?\s*(\w+)", text)
    if not match:
        raise SystemExit(f"{header}: cannot parse parameter '{text}'")
    cpp_type = match.group(1).replace("const ", "").replace("&", "").strip()
    return Param(cpp_type, match.group(2), default)


def parse_header(header: pathlib.Path) -> OpSpec | None:
    """Returns the op declared in `header`, or None for a helper header."""
    source = header.read_text()
    name = re.search(r'static constexpr const char\* kName = "(\w+)";', source)
    if not name:
        return None
    cls = re.search(r"((?:^//.*\n)*)class (\w+) : public \w+ \{", source, re.M)
    if not cls:
        raise SystemExit(f"{header}: kName found but no 'class X : public Y {{'")
    class_name = cls.group(2)
    positional = re.search(r"static constexpr int kNumPositional = (\d+);", source)
    if not positional:
        raise SystemExit(f"{header}: {class_name} lacks kNumPositional")
    ctor = re.search(rf"^\s*(?:explicit\s+)?{class_name}\(([^)]*)\)\s*(?::|\{{)", source, re.M)
    if not ctor:
        raise SystemExit(f"{header}: no constructor of {class_name} found")
    params = [_parse_param(p, header) for p in _split_params(ctor.group(1))]
    # Default<Out> allocators may come from a helper base header it includes.
    helpers = re.findall(r'#include "base/(\w+\.h)"', source)
    searched = source + "".join((header.parent / h).read_text() for h in helpers)
    defaults = set(re.findall(r"static TensorMeta Default(\w+)\(", searched))
    doc_lines = [line[2:].removeprefix(" ") for line in cls.group(1).splitlines()]
    if doc_lines and re.match(r"\w+\(", doc_lines[0]):
        doc_lines = doc_lines[1:]  # pybind11 writes the signature line itself
    spec = OpSpec(
        header=header,
        class_name=class_name,
        name=name.group(1),
        num_positional=int(positional.group(1)),
        params=params,
        defaults=defaults,
        doc="\n".join(doc_lines).strip(),
    )
    if not 0 < spec.num_positional <= len(params):
        raise SystemExit(f"{header}: kNumPositional out of range")
    for param in params:
        if param.cpp_type not in PY_TYPES:
            raise SystemExit(f"{header}: unsupported parameter type {param.cpp_type}")
    return spec


# C++ scalar parameter type -> expression converting the Python value `{v}`.
# Tensor parameters are handled in _emit_input / _emit_output.
PY_TYPES = {
    "Tensor": None,
    "std::optional<Tensor>": None,
    "std::vector<Tensor>": None,
    "double": "ArgDouble({v}, {op}, {name})",
    "int64_t": "ArgInt({v}, {op}, {name})",
    "bool": "ArgBool({v}, {op}, {name})",
    "DataType": "ToDataType(ArgDtype({v}, {op}, {name}), {op}, {name})",
    "std::optional<double>": "ArgDouble({v}, {op}, {name})",
    "std::optional<int64_t>": "ArgInt({v}, {op}, {name})",
    "ScalarOrTensor": "ArgScalarOrTensor({v}, {op}, {name})",
}

CPP_ARG_TYPES = {
    "Tensor": "const Tensor&",
    "std::optional<Tensor>": "const std::optional<Tensor>&",
    "std::vector<Tensor>": "const std::vector<Tensor>&",
    "ScalarOrTensor": "const ScalarOrTensor&",
}


def _cpp_arg_type(param: Param) -> str:
    return CPP_ARG_TYPES.get(param.cpp_type, param.cpp_type)


def _py_default(param: Param) -> str:
    """The C++ default as a Python literal (for __text_signature__)."""
    return {"std::nullopt": "None", "true": "True", "false": "False"}.get(
        param.default, param.default
    )


def _maker_name(spec: OpSpec, device: str) -> str:
    return f"Make{spec.class_name}{_camel(device)}"


def _slots_name(spec: OpSpec, device: str) -> str:
    return f"{spec.class_name}{_camel(device)}Slots"


def _maker_signature(spec: OpSpec, device: str) -> str:
    args = ", ".join(f"{_cpp_arg_type(p)} {p.name}" for p in spec.params)
    return f"std::shared_ptr<{spec.class_name}> {_maker_name(spec, device)}(int slot, {args})"


def emit_ops_header(specs: list[OpSpec], devices: list[str]) -> str:
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        "#pragma once",
        "#include <memory>",
        "#include <optional>",
        "#include <vector>",
        '#include "core/op_state.h"',
    ]
    lines += [f'#include "base/{spec.header.name}"' for spec in specs]
    lines += ["", "namespace polyops::generated {"]
    for spec in specs:
        for device in devices:
            lines.append(f"{_maker_signature(spec, device)};")
            lines.append(f"SlotTable {_slots_name(spec, device)}();")
    lines += ["}  // namespace polyops::generated", ""]
    return "\n".join(lines)


def emit_device_source(spec: OpSpec, device: str, impl_headers: list[str]) -> str:
    enum = DEVICES[device]
    call_args = ", ".join(p.name for p in spec.params)
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        '#include "generated/ops.h"',
        '#include "core/operator.h"',
    ]
    lines += [f'#include "{h}"' for h in impl_headers]
    lines += [
        "",
        "namespace polyops::generated {",
        "",
        f"{_maker_signature(spec, device)} {{",
        f"  return MakeImplementation<{spec.class_name}, Device::Type::{enum}>(slot, {call_args});",
        "}",
        "",
        f"SlotTable {_slots_name(spec, device)}() {{",
        f"  return CollectSlots<{spec.class_name}, Device::Type::{enum}>();",
        "}",
        "",
        "}  // namespace polyops::generated",
        "",
    ]
    return "\n".join(lines)


def _cpp_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


COMMON = ["implementation_index", "stream"]


def _text_signature(spec: OpSpec) -> str:
    parts = []
    for index, param in enumerate(spec.params):
        if index == spec.num_positional:
            parts.append("*")
        parts.append(param.name + (f"={_py_default(param)}" if param.default else ""))
    if spec.num_positional == len(spec.params):
        parts.append("*")
    parts += [f"{name}=None" for name in COMMON]
    return f"{spec.name}({', '.join(parts)})"


def _emit_input(spec: OpSpec, index: int, param: Param) -> list[str]:
    cls, op, name = spec.class_name, f'"{spec.name}"', f'"{param.name}"'
    value = f"values[{index}]"
    required = f"Required({value}, k{cls}Signature, {index})"
    if param.cpp_type == "Tensor":
        return [
            f"    const at::Tensor& {param.name}_t = ArgTensor({required}, {op}, {name});",
            f"    const Tensor {param.name} = ToView({param.name}_t, {op}, {name});",
        ]
    if param.cpp_type == "std::optional<Tensor>":
        return [
            f"    std::optional<Tensor> {param.name};",
            f"    if (PyObject* given = Given({value})) {{",
            f"      {param.name} = ToView(ArgTensor(given, {op}, {name}), {op}, {name});",
            "    }",
        ]
    if param.cpp_type == "std::vector<Tensor>":
        return [
            f"    const std::vector<at::Tensor> {param.name}_t = "
            f"ArgTensorList({required}, {op}, {name});",
            f"    const std::vector<Tensor> {param.name} = ToViews({param.name}_t, {op}, {name});",
        ]
    convert = PY_TYPES[param.cpp_type]
    if param.cpp_type.startswith("std::optional"):
        return [
            f"    {param.cpp_type} {param.name};",
            f"    if (PyObject* given = Given({value})) {{",
            f"      {param.name} = {convert.format(v='given', op=op, name=name)};",
            "    }",
        ]
    if param.default is not None:
        return [
            f"    const {param.cpp_type} {param.name} = {value} ? "
            f"{convert.format(v=value, op=op, name=name)} : {param.cpp_type}({param.default});"
        ]
    converted = convert.format(v=required, op=op, name=name)
    return [f"    const {param.cpp_type} {param.name} = {converted};"]


def _alias_index(spec: OpSpec, output: Param) -> int:
    """The input an output without a Default<Out> allocator aliases: `x_out` -> `x`."""
    names = [p.name for p in spec.params]
    base = output.name.removesuffix("_out")
    if output.name == "out" or base not in names:
        raise SystemExit(
            f"{spec.header}: output '{output.name}' has neither Default{_camel(output.name)}() "
            f"nor an input '{base}' to default to (in place)"
        )
    return names.index(base)


def _emit_output(spec: OpSpec, index: int, param: Param, like: str) -> list[str]:
    cls, op, name = spec.class_name, f'"{spec.name}"', f'"{param.name}"'
    camel = _camel(param.name)
    lines = [
        f"    PyObject* {param.name}_given = Given(values[{index}]);",
        f"    at::Tensor {param.name}_allocated;",
        f"    std::optional<Tensor> {param.name};",
        f"    if ({param.name}_given) {{",
        f"      {param.name} = ToView(ArgTensor({param.name}_given, {op}, {name}), {op}, {name});",
    ]
    if camel in spec.defaults:
        inputs = ", ".join(p.name for p in spec.inputs)
        lines += [
            "    } else {",
            f"      {param.name}_allocated = Allocate({cls}::Default{camel}({inputs}), {like});",
            f"      {param.name} = ToView({param.name}_allocated, {op}, {name});",
        ]
    lines.append("    }")
    return lines


def emit_binding(spec: OpSpec, devices: list[str]) -> str:
    """One METH_FASTCALL function: parse, convert, allocate, look up, run, return."""
    cls, op = spec.class_name, f'"{spec.name}"'
    count = len(spec.params) + len(COMMON)
    names = ", ".join(f'"{n}"' for n in [p.name for p in spec.params] + COMMON)
    lines = [
        f"const char* const k{cls}Names[] = {{{names}}};",
        f"PyObject* k{cls}Interned[{count}];",
        f"Signature k{cls}Signature{{{op}, k{cls}Names, {count}, {spec.num_positional}, "
        f"k{cls}Interned}};",
        "",
        f"PyObject* Py{cls}(PyObject*, PyObject* const* args, Py_ssize_t nargs, "
        "PyObject* kwnames) {",
        "  try {",
        f"    PyObject* values[{count}] = {{}};",
        f"    ParseArguments(k{cls}Signature, args, nargs, kwnames, values);",
    ]
    first = next(p for p in spec.params if p.cpp_type in ("Tensor", "std::vector<Tensor>"))
    like = f"{first.name}_t" if first.cpp_type == "Tensor" else f"{first.name}_t.front()"
    for index, param in enumerate(spec.params):
        if not param.is_output:
            lines += _emit_input(spec, index, param)
    for index, param in enumerate(spec.params):
        if param.is_output:
            lines += _emit_output(spec, index, param, like)
    n = len(spec.params)
    args = ", ".join(p.name for p in spec.params)
    lines += [
        "    std::optional<int64_t> implementation_index, stream;",
        f"    if (PyObject* given = Given(values[{n}])) {{",
        f'      implementation_index = ArgInt(given, {op}, "implementation_index");',
        "    }",
        f"    if (PyObject* given = Given(values[{n + 1}])) {{",
        f'      stream = ArgInt(given, {op}, "stream");',
        "    }",
        f"    const Device device = PrimaryDevice({first.name}, {op});",
        f"    auto make = [&](Device::Type type, int slot) -> std::shared_ptr<{cls}> {{",
    ]
    for param in spec.params:
        if param.name.endswith("_host"):
            # Host mirrors of device tensors (e.g. paged_attention's seq_lens_host) live on
            # the CPU whatever the op's device: that is their purpose.
            lines.append(f'      CheckOnHost({param.name}, {op}, "{param.name}");')
        elif param.is_tensor or param.cpp_type in ("std::vector<Tensor>", "ScalarOrTensor"):
            lines.append(f'      CheckDevice({param.name}, device, {op}, "{param.name}");')
    lines.append("      switch (type) {")
    for device in devices:
        lines += [
            f"        case Device::Type::{DEVICES[device]}:",
            f"          return generated::{_maker_name(spec, device)}(slot, {args});",
        ]
    lines += [
        "        default:",
        f"          throw NotImplemented(NoBackendMessage({op}, type));",
        "      }",
        "    };",
        f"    const auto instance = Operator<{cls}>::Get(device, implementation_index, make, "
        f"{args});",
        "    const Handle handle = MakeHandle(device, stream);",
        f"    RunKernel(WorthReleasingGil({first.name}), [&] {{ (*instance)(handle, {args}); }});",
    ]
    returns = []
    for param in spec.outputs:
        if _camel(param.name) in spec.defaults:
            returns.append(f"ReturnTensor({param.name}_given, {param.name}_allocated)")
        else:  # in place: an omitted `x_out` is the input `x`
            alias = _alias_index(spec, param)
            returns.append(f"ReturnAlias({param.name}_given, Given(values[{alias}]))")
    if len(returns) == 1:
        lines.append(f"    return {returns[0]};")
    elif returns:
        lines.append(f"    PyObject* result = PyTuple_New({len(returns)});")
        lines += [f"    PyTuple_SET_ITEM(result, {i}, {r});" for i, r in enumerate(returns)]
        lines.append("    return result;")
    else:
        lines.append("    Py_RETURN_NONE;")
    lines += ["  } catch (...) {", "    SetPythonError();", "    return nullptr;", "  }", "}"]
    return "\n".join(lines)


def emit_bindings(specs: list[OpSpec], devices: list[str]) -> str:
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        '#include "generated/ops.h"',
        '#include "python/binding_support.h"',
        "",
        "namespace polyops::python {",
        "namespace {",
        "",
    ]
    lines += [emit_binding(spec, devices) + "\n" for spec in specs]
    lines.append("PyMethodDef kMethods[] = {")
    for spec in specs:
        # "name(args)\n--\n\n" makes inspect.signature() work on the builtin.
        doc = f"{_text_signature(spec)}\n--\n\n{spec.doc}"
        lines.append(
            f'    {{"{spec.name}", reinterpret_cast<PyCFunction>('
            f"reinterpret_cast<void (*)()>(&Py{spec.class_name})),"
        )
        lines.append(f"     METH_FASTCALL | METH_KEYWORDS, {_cpp_string(doc)}}},")
    lines += ["};", "", "}  // namespace", "", "void BindOps(py::module_& module) {"]
    lines.append('  py::object module_name = module.attr("__name__");')
    for index, spec in enumerate(specs):
        cls = spec.class_name
        lines.append(f"  InternNames(k{cls}Signature);")
        for device in devices:
            lines.append(
                f"  Operator<{cls}>::State().SetSlots(Device::Type::{DEVICES[device]}, "
                f"generated::{_slots_name(spec, device)}());"
            )
        lines.append(
            f'  module.attr("{spec.name}") = py::reinterpret_steal<py::object>('
            f"PyCFunction_NewEx(&kMethods[{index}], nullptr, module_name.ptr()));"
        )
    names = ", ".join(f'"{spec.name}"' for spec in specs)
    lines += [
        f'  module.attr("_operators") = py::make_tuple({names});',
        "}",
        "",
        "}  // namespace polyops::python",
        "",
    ]
    return "\n".join(lines)


def collect(src: pathlib.Path) -> list[OpSpec]:
    specs = [s for h in sorted((src / "base").glob("*.h")) if (s := parse_header(h))]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise SystemExit(f"duplicate operator names in src/base: {names}")
    return specs


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
    if args.list_ops:
        print("\n".join(spec.name for spec in specs))
        return 0
    devices = [d for d in args.devices.split(",") if d]
    unknown = set(devices) - set(DEVICES)
    if unknown:
        raise SystemExit(f"unknown devices {sorted(unknown)}; expected some of {list(DEVICES)}")
    out = args.out / "generated"
    out.mkdir(parents=True, exist_ok=True)
    write_if_changed(out / "ops.h", emit_ops_header(specs, devices))
    for spec in specs:
        for device in devices:
            folder = args.src / device / spec.name
            impls = sorted(f"{device}/{spec.name}/{h.name}" for h in folder.glob("*.h"))
            suffix = "cu" if device == "cuda" else "cc"
            write_if_changed(
                out / f"{device}_{spec.name}.{suffix}",
                emit_device_source(spec, device, impls),
            )
    write_if_changed(out / "bindings.cc", emit_bindings(specs, devices))
    return 0


if __name__ == "__main__":
    sys.exit(main())
