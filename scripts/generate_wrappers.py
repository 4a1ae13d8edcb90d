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
  the slots with their names).
* ``ops_<device>.h``: their declarations; ``ops.h`` includes those of every device.
* ``run.h``: ``Run<Op>()``, which checks devices, finds or builds the cached
  instance and runs it; shared by the two entry points below.
* ``bindings.cc``: one METH_FASTCALL function per op whose keyword names, order,
  defaults and keyword-only marker come from the constructor, followed by
  the keyword-only ``implementation_index`` and ``stream`` every op takes.
* ``torch_library.cc``: the ``torch.ops.polyops`` schemas (functional and
  ``.out`` overloads, mutated arguments annotated) and one typed kernel per
  overload, registered for every enabled device (see docs/user/torch.md).

Because the Python signature and the schemas are derived from the C++ one,
they cannot drift; ``tests/test_signatures.py`` and
``tests/test_torch_library.py`` check the results independently.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
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
    mutates: list[str] = dataclasses.field(default_factory=list)  # kMutates: inputs written
    # kKeyedByPresence: optional scalars the instance cache keys by presence, not value
    keyed_by_presence: list[str] = dataclasses.field(default_factory=list)
    # kAliases: "output=input" pairs that may be the same memory (in place)
    aliases: list[str] = dataclasses.field(default_factory=list)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

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
    # The slots take the arguments as one `struct Args` (docs/contributing/add_slot.md);
    # it must list the constructor's parameters, same order, names and types.
    args = re.search(r"^\s*struct Args \{([^}]*)\};", source, re.M)
    fields = args.group(1).split(";")[:-1] if args else []
    members = [_parse_param(" ".join(field.split()), header) for field in fields]
    if [(m.cpp_type, m.name) for m in members] != [(p.cpp_type, p.name) for p in params]:
        raise SystemExit(
            f"{header}: {class_name}::Args must list the constructor's parameters "
            f"({', '.join(p.name for p in params)}) in order, without defaults"
        )
    # Default<Out> allocators may come from a helper base header it includes.
    helpers = re.findall(r'#include "base/(\w+\.h)"', source)
    searched = source + "".join((header.parent / h).read_text() for h in helpers)
    defaults = set(re.findall(r"static TensorMeta Default(\w+)\(", searched))
    doc_lines = [line[2:].removeprefix(" ") for line in cls.group(1).splitlines()]
    if doc_lines and re.match(r"\w+\(", doc_lines[0]):
        doc_lines = doc_lines[1:]  # pybind11 writes the signature line itself

    def names_list(member: str) -> list[str]:
        found = re.search(rf"static constexpr const char\* {member}\[\] = \{{([^}}]*)\}};", source)
        return re.findall(r'"([\w=]+)"', found.group(1)) if found else []

    spec = OpSpec(
        header=header,
        class_name=class_name,
        name=name.group(1),
        num_positional=int(positional.group(1)),
        params=params,
        defaults=defaults,
        doc="\n".join(doc_lines).strip(),
        mutates=names_list("kMutates"),
        keyed_by_presence=names_list("kKeyedByPresence"),
        aliases=names_list("kAliases"),
    )
    for name in spec.mutates:
        if name not in [p.name for p in params] or spec.param(name).cpp_type != "Tensor":
            raise SystemExit(f"{header}: kMutates names '{name}', which is not a Tensor parameter")
    for name in spec.keyed_by_presence:
        if name not in [p.name for p in params] or not spec.param(name).cpp_type.startswith(
            "std::optional<"
        ):
            raise SystemExit(f"{header}: kKeyedByPresence names '{name}', not an optional scalar")
    names = [p.name for p in params]
    for pair in spec.aliases:
        output, _, input_name = pair.partition("=")
        if output not in [p.name for p in spec.outputs] or input_name not in names:
            raise SystemExit(f"{header}: kAliases entry '{pair}' is not 'output=input'")
    for param in spec.outputs:
        if params.index(param) < spec.num_positional:
            raise SystemExit(f"{header}: output '{param.name}' must be keyword-only")
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
    "DataType": "ArgDtype({v}, {op}, {name})",
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
    """The C++ default as a Python literal (for __text_signature__ and the torch schemas)."""
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


def emit_device_ops_header(specs: list[OpSpec], device: str) -> str:
    """``ops_<device>.h``: one device's functions. Its TUs include only this header, so
    enabling another device (e.g. WITH_CUDA) does not recompile them."""
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
        lines.append(f"{_maker_signature(spec, device)};")
        lines.append(f"SlotTable {_slots_name(spec, device)}();")
    lines += ["}  // namespace polyops::generated", ""]
    return "\n".join(lines)


def emit_ops_header(devices: list[str]) -> str:
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        "#pragma once",
    ]
    lines += [f'#include "generated/ops_{device}.h"' for device in devices]
    return "\n".join(lines) + "\n"


def emit_device_source(spec: OpSpec, device: str, impl_headers: list[str]) -> str:
    enum = DEVICES[device]
    call_args = ", ".join(p.name for p in spec.params)
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        f'#include "generated/ops_{device}.h"',
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
            f"    const TensorArg {param.name}_t = ArgTensor({required}, {op}, {name});",
            f"    const Tensor {param.name} = ToView({param.name}_t, {op}, {name});",
        ]
    if param.cpp_type == "std::optional<Tensor>":
        return [
            f"    const TensorArg {param.name}_t = "
            f"ArgOptionalTensor(Given({value}), {op}, {name});",
            f"    const std::optional<Tensor> {param.name} = "
            f"ToOptionalView({param.name}_t, {op}, {name});",
        ]
    if param.cpp_type == "std::vector<Tensor>":
        return [
            f"    const std::vector<TensorArg> {param.name}_t = "
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


def _first_tensor(spec: OpSpec) -> Param:
    """The tensor argument whose device the op runs on and whose options outputs copy."""
    return next(p for p in spec.params if p.cpp_type in ("Tensor", "std::vector<Tensor>"))


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
    """A caller's output as a view; an omitted one with a Default<Out> as a placeholder
    (emit_binding allocates it once Get<Op> has validated the arguments)."""
    cls, op, name = spec.class_name, f'"{spec.name}"', f'"{param.name}"'
    lines = [
        f"    PyObject* {param.name}_given = Given(values[{index}]);",
        f"    const TensorArg {param.name}_t = "
        f"ArgOptionalTensor({param.name}_given, {op}, {name});",
        f"    std::optional<Tensor> {param.name} = ToOptionalView({param.name}_t, {op}, {name});",
    ]
    camel = _camel(param.name)
    if camel in spec.defaults:
        inputs = ", ".join(p.name for p in spec.inputs)
        lines.append(
            f"    if (!{param.name}) {param.name} = "
            f"Placeholder({cls}::Default{camel}({inputs}), {like});"
        )
    return lines


def _written(spec: OpSpec) -> list[tuple[str, str, str]]:
    """What an op writes: (name, the input an omitted output defaults to or "", kind).

    kind is "out" (an output with a Default<Out> allocator), "alias" (an output that
    defaults to its input: in place) or "mutates" (a kMutates input)."""
    result = []
    for param in spec.outputs:
        if _camel(param.name) in spec.defaults:
            result.append((param.name, "", "out"))
        else:
            alias = spec.params[_alias_index(spec, param)]
            result.append((param.name, alias.name, "alias"))
    result += [(name, "", "mutates") for name in spec.mutates]
    return result


def _written_views(spec: OpSpec) -> list[str]:
    """C++ `NamedView` initializers of the tensors the op writes, for Run<Op>."""
    views = []
    for name, alias, kind in _written(spec):
        if kind == "mutates":
            views.append(f'{{"{name}", &{name}}}')
            continue
        fallback = "nullptr"
        if kind == "alias":
            optional = spec.param(alias).cpp_type == "std::optional<Tensor>"
            fallback = f"({alias} ? &*{alias} : nullptr)" if optional else f"&{alias}"
            views.append(f'{{{name} ? "{name}" : "{alias}", {name} ? &*{name} : {fallback}}}')
        else:
            views.append(f'{{"{name}", {name} ? &*{name} : {fallback}}}')
    return views


def _emit_autograd(
    spec: OpSpec, written: dict[str, str], tensors: dict[str, str], grad: str = ""
) -> list[str]:
    """Refuse what autograd cannot follow (docs/user/api.md, Autograd). `written` and `tensors`
    map argument names to C++ expressions of their tensor (an at::Tensor reference or
    optional, or a TensorArg; empty when not given). `grad`: the eager functions' grad
    mode variable, passed first."""
    op = f'"{spec.name}"'
    lines = [f"    const GradState {grad} = CurrentGradState();"] if grad else []
    first = f"{grad}, " if grad else ""
    for name, expr in written.items():
        # A name in parentheses is already a C++ expression (see emit_binding).
        label = name if name.startswith("(") else f'"{name}"'
        lines.append(f"    CheckWritable({first}{expr}, {op}, {label});")
    lines += [f'    CheckNoGrad({first}{expr}, {op}, "{name}");' for name, expr in tensors.items()]
    return lines


def emit_run(spec: OpSpec, devices: list[str]) -> str:
    """Get<Op>: check devices, find or build (validate) the instance. Run<Op>: the
    per-call overlap checks, then the kernel."""
    cls, op = spec.class_name, f'"{spec.name}"'
    first = _first_tensor(spec)
    args = ", ".join(p.name for p in spec.params)
    key_args = ", ".join(
        f"KeyedByPresence<{p.cpp_type.removeprefix('std::optional<')[:-1]}>{{{p.name}}}"
        if p.name in spec.keyed_by_presence
        else p.name
        for p in spec.params
    )
    params = ", ".join(f"{_cpp_arg_type(p)} {p.name}" for p in spec.params)
    lines = [
        f"inline std::shared_ptr<{cls}> Get{cls}(std::optional<int64_t> implementation_index,",
        f"    {params}) {{",
        f"  const Device device = PrimaryDevice({first.name}, {op});",
        f"  auto make = [&](Device::Type type, int slot) -> std::shared_ptr<{cls}> {{",
    ]
    for param in spec.params:
        if param.name.endswith("_host"):
            # Host mirrors of device tensors (e.g. paged_attention's seq_lens_host) live on
            # the CPU whatever the op's device: the base class checks them (CheckHostMirror).
            continue
        if param.is_tensor or param.cpp_type in ("std::vector<Tensor>", "ScalarOrTensor"):
            lines.append(f'    CheckDevice({param.name}, device, {op}, "{param.name}");')
    lines.append("    switch (type) {")
    for device in devices:
        lines += [
            f"      case Device::Type::{DEVICES[device]}:",
            f"        return generated::{_maker_name(spec, device)}(slot, {args});",
        ]
    lines += [
        "      default:",
        f"        throw NotImplemented(NoBackendMessage({op}, type));",
        "    }",
        "  };",
        f"  return Operator<{cls}>::Get(device, implementation_index, make, {key_args});",
        "}",
        "",
    ]
    aliases = list(spec.aliases) + [
        f"{name}={alias}" for name, alias, kind in _written(spec) if kind == "alias"
    ]
    read = []
    group = "nullptr"
    for param in spec.inputs:
        if param.cpp_type == "Tensor":
            read.append(f'{{"{param.name}", &{param.name}}}')
        elif param.cpp_type == "std::optional<Tensor>":
            read.append(f'{{"{param.name}", {param.name} ? &*{param.name} : nullptr}}')
        elif param.cpp_type == "ScalarOrTensor":
            read.append(
                f'{{"{param.name}", {param.name}.tensor ? &*{param.name}.tensor : nullptr}}'
            )
        elif param.cpp_type == "std::vector<Tensor>":
            group = f'&{param.name}, "{param.name}"'
    alias_list = ", ".join(f'"{a}"' for a in aliases)
    lines += [
        f"inline void Run{cls}(const {cls}& instance, std::optional<int64_t> stream,",
        f"    bool release_gil, {params}) {{",
        f"  CheckOverlaps({op}, {{{', '.join(_written_views(spec))}}},",
        f"                {{{', '.join(read)}}}, {{{alias_list}}}"
        + (f", {group}" if group != "nullptr" else "")
        + ");",
        f"  const Device device = PrimaryDevice({first.name}, {op});",
        f"  const DeviceScope scope(device, {op});",
        f"  const Handle handle = MakeHandle(device, stream, {op});",
        f"  RunKernel(release_gil && WorthReleasingGil({first.name}),",
        f"            [&] {{ instance(handle, {{{args}}}); }});",
        "}",
    ]
    return "\n".join(lines)


def emit_run_header(specs: list[OpSpec], devices: list[str]) -> str:
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        "// Run<Op>(): what the Python bindings and the torch.library kernels share.",
        "#pragma once",
        '#include "generated/ops.h"',
        '#include "python/arguments.h"',
        "",
        "namespace polyops::python {",
        "",
    ]
    lines += [emit_run(spec, devices) + "\n" for spec in specs]
    lines += ["}  // namespace polyops::python", ""]
    return "\n".join(lines)


def emit_ops_table_header(specs: list[OpSpec]) -> str:
    """``ops_table.h``: Get<Op> and Run<Op> of every op as function pointers. polyops._C
    (torch-free) fills it and exports it; the torch.library module calls the ops
    through it, so both share one instance cache and one set of kernels."""
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        "// The op entry points polyops._C exports to polyops._torch_ops (docs/user/torch.md).",
        "#pragma once",
        "#include <memory>",
        "#include <optional>",
        "",
        '#include "generated/ops.h"',
        '#include "python/arguments.h"',
        "",
        "namespace polyops::python {",
        "",
        "struct OpsTable {",
        "  DeviceHooks* device_hooks;",
        "  TensorFlags* tensor_flags;",
        "  void (*set_cuda_workspace_allocator)(const void* allocator);",
    ]
    for spec in specs:
        cls = spec.class_name
        params = ", ".join(f"{_cpp_arg_type(p)} {p.name}" for p in spec.params)
        lines += [
            f"  std::shared_ptr<{cls}> (*Get{cls})(std::optional<int64_t> implementation_index,",
            f"      {params});",
            f"  void (*Run{cls})(const {cls}& instance, std::optional<int64_t> stream,",
            f"      bool release_gil, {params});",
        ]
    lines += [
        "};",
        "",
        "// The table of polyops._C (capsule polyops._C._ops_table).",
        "const OpsTable& Ops();",
        "",
        "// Imports polyops._C and returns its table, for the module defining Ops().",
        "inline const OpsTable* ImportOpsTable() {",
        '  py::object table = py::module_::import("polyops._C").attr("_ops_table");',
        "  const auto* ops = static_cast<const OpsTable*>(",
        "      PyCapsule_GetPointer(table.ptr(), kOpsTableCapsule));",
        "  if (!ops) throw py::error_already_set();",
        "  return ops;",
        "}",
        "",
        "}  // namespace polyops::python",
        "",
    ]
    return "\n".join(lines)


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
    first = _first_tensor(spec)
    like_view = first.name if first.cpp_type == "Tensor" else f"{first.name}.front()"
    like = f"{first.name}_t" if first.cpp_type == "Tensor" else f"{first.name}_t.front()"
    for index, param in enumerate(spec.params):
        if not param.is_output:
            lines += _emit_input(spec, index, param)
    for index, param in enumerate(spec.params):
        if param.is_output:
            lines += _emit_output(spec, index, param, like_view)
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
    ]
    written = {}
    for name, alias, kind in _written(spec):
        if kind == "alias":
            # Named after what the caller passed: the output, or the input it defaults to.
            written[f'({name}_t ? "{name}" : "{alias}")'] = f"{name}_t ? {name}_t : {alias}_t"
        else:
            written[name] = f"{name}_t"
    tensors = {}
    for index, param in enumerate(spec.params):
        if param.cpp_type == "ScalarOrTensor":
            tensors[param.name] = f"TensorOrNull(values[{index}])"
        elif param.is_tensor or param.cpp_type == "std::vector<Tensor>":
            tensors[param.name] = f"{param.name}_t"
    lines += _emit_autograd(spec, written, tensors, grad="grad")
    lines.append(f"    const auto instance = Get{cls}(implementation_index, {args});")
    for param in spec.outputs:
        if _camel(param.name) in spec.defaults:
            lines += [
                f"    py::object {param.name}_allocated;",
                f"    if (!{param.name}_given) {param.name}_allocated = "
                f"Allocate({param.name}, {like});",
            ]
    lines.append(f"    Run{cls}(*instance, stream, /*release_gil=*/true, {args});")
    lines += [f"    BumpVersion({expr});" for expr in written.values()]
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
        '#include "generated/ops_table.h"',
        '#include "generated/run.h"',
        '#include "python/tensor_exchange.h"',
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
    lines += ["};", ""]
    lines.append(
        "const OpsTable kOpsTable{&GetDeviceHooks(), &GetTensorFlags(), &SetCudaWorkspaceAllocator,"
    )
    entries = [f"&Get{spec.class_name}, &Run{spec.class_name}" for spec in specs]
    lines += [f"    {e}," for e in entries[:-1]] + [f"    {entries[-1]}}};"]
    lines += ["", "}  // namespace", "", "void BindOps(py::module_& module) {"]
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
        '  module.attr("_ops_table") = py::capsule(&kOpsTable, kOpsTableCapsule);',
        "}",
        "",
        "}  // namespace polyops::python",
        "",
    ]
    return "\n".join(lines)


# --- torch.library registration ----------------------------------------------------------
# Every op is also registered as torch.ops.polyops.<op>, for code that torch.compile traces.
# Per op (and per Tensor/Scalar choice of each ScalarOrTensor argument, which a schema cannot
# express as one type) there are two overloads:
#   <op>.out  every output is a keyword `Tensor(a!)` argument, required unless it is the
#             in-place output of an optional input (rotary key_out); returns ().
#   <op>      outputs with a Default<Out> allocator are allocated and returned; outputs that
#             default to in place on an input (rotary's query_out) are dropped and that
#             input is declared mutated instead.
# Mutating overloads return nothing, because torch.compile can functionalize a custom op
# only if no output aliases an input. Inputs the op writes (kMutates) are `Tensor(a!)`.

# C++ parameter type -> (schema type, C++ kernel parameter type).
TORCH_TYPES = {
    "Tensor": ("Tensor", "const at::Tensor&"),
    "std::optional<Tensor>": ("Tensor?", "const std::optional<at::Tensor>&"),
    "std::vector<Tensor>": ("Tensor[]", "at::TensorList"),
    "double": ("float", "double"),
    "int64_t": ("int", "int64_t"),
    "bool": ("bool", "bool"),
    "DataType": ("ScalarType", "at::ScalarType"),
    "std::optional<double>": ("float?", "std::optional<double>"),
    "std::optional<int64_t>": ("int?", "std::optional<int64_t>"),
}
SCALAR_OR_TENSOR = {"Tensor": TORCH_TYPES["Tensor"], "Scalar": ("Scalar", "const at::Scalar&")}
DISPATCH_KEYS = {"cpu": "CPU", "cuda": "CUDA", "ascend": "PrivateUse1"}
TORCH_PYTHON_MODULE = "polyops._torch_library"


@dataclasses.dataclass
class TorchOverload:
    spec: OpSpec
    name: str  # "" is the default overload
    is_out: bool
    kinds: dict[str, str]  # ScalarOrTensor parameter -> "Tensor" or "Scalar"

    @property
    def returns(self) -> list[Param]:
        if self.is_out:
            return []
        return [p for p in self.spec.outputs if _camel(p.name) in self.spec.defaults]

    @property
    def qualified(self) -> str:
        return f"{self.spec.name}.{self.name}" if self.name else self.spec.name

    @property
    def function(self) -> str:
        return f"Torch{self.spec.class_name}{_camel(self.name)}"

    @property
    def stable_function(self) -> str:
        """Its kernel in polyops._torch_stable (python/torch_stable.h)."""
        return f"Stable{self.spec.class_name}{_camel(self.name)}"

    def in_place_inputs(self) -> set[str]:
        """Inputs an omitted output aliases: written in place by the default overload."""
        if self.is_out:
            return set()
        spec = self.spec
        return {
            spec.params[_alias_index(spec, p)].name
            for p in spec.outputs
            if _camel(p.name) not in spec.defaults
        }

    def params(self) -> list[tuple[Param, str, str]]:
        """(param, schema type, C++ type) of every parameter this overload takes."""
        result = []
        for param in self.spec.params:
            if param.is_output:
                if not self.is_out:
                    continue
                alias_optional = _camel(param.name) not in self.spec.defaults and (
                    self.spec.params[_alias_index(self.spec, param)].cpp_type
                    == "std::optional<Tensor>"
                )
                types = TORCH_TYPES["std::optional<Tensor>" if alias_optional else "Tensor"]
            elif param.cpp_type == "ScalarOrTensor":
                types = SCALAR_OR_TENSOR[self.kinds[param.name]]
            else:
                types = TORCH_TYPES[param.cpp_type]
            result.append((param, *types))
        return result


def torch_overloads(spec: OpSpec) -> list[TorchOverload]:
    """The overloads of `spec`, `.out` ones first (docs/user/torch.md: calling through the
    packet)."""
    choices = [p.name for p in spec.params if p.cpp_type == "ScalarOrTensor"]
    overloads = []
    for kinds in itertools.product(("Tensor", "Scalar"), repeat=len(choices)):
        variant = "_".join(kinds) if "Scalar" in kinds else ""
        chosen = dict(zip(choices, kinds, strict=True))
        if spec.outputs:
            out_name = f"{variant}_out" if variant else "out"
            overloads.append(TorchOverload(spec, out_name, True, chosen))
        overloads.append(TorchOverload(spec, variant, False, chosen))
    return overloads


def torch_schema(overload: TorchOverload) -> str:
    spec = overload.spec
    mutated = set(spec.mutates) | overload.in_place_inputs()
    parts, letters, keyword_only = [], iter("abcdefghijklmnopqrstuvwxyz"), False
    for param, schema_type, _ in overload.params():
        index = spec.params.index(param)
        if index >= spec.num_positional and not keyword_only:
            parts.append("*")
            keyword_only = True
        if param.is_output or param.name in mutated:
            optional = schema_type.endswith("?")
            schema_type = f"Tensor({next(letters)}!)" + ("?" if optional else "")
        text = f"{schema_type} {param.name}"
        if param.default is not None and not (param.is_output and not schema_type.endswith("?")):
            text += f"={_py_default(param)}"
        parts.append(text)
    if not keyword_only:
        parts.append("*")
    parts.append("int? implementation_index=None")
    returns = overload.returns
    result = (
        "()"
        if not returns
        else "Tensor"
        if len(returns) == 1
        else "(" + ", ".join("Tensor" for _ in returns) + ")"
    )
    return f"{overload.qualified}({', '.join(parts)}) -> {result}"


def _torch_return_type(overload: TorchOverload) -> str:
    count = len(overload.returns)
    if count == 0:
        return "void"
    if count == 1:
        return "at::Tensor"
    return "std::tuple<" + ", ".join(["at::Tensor"] * count) + ">"


def _emit_kernel_views(overload: TorchOverload) -> tuple[list[str], list[str], str]:
    """The part both torch.library kernels share (_torch_ops' and _torch_stable's): each
    tensor argument `<name>_t` as a view `<name>`, each output given or a placeholder.
    Returns (lines, the outputs to allocate, the tensor argument they are allocated like)."""
    spec = overload.spec
    cls, op = spec.class_name, f'"{spec.name}"'
    params = overload.params()
    lines: list[str] = []
    taken = {p.name for p, _, _ in params}
    for param, schema_type, _ in params:
        if param.is_output:
            continue
        name, quoted = param.name, f'"{param.name}"'
        if schema_type == "Tensor":
            view = f"ToView({name}_t, {op}, {quoted})"
            if param.cpp_type == "ScalarOrTensor":
                lines.append(f"    const ScalarOrTensor {name}{{{view}, 0.0}};")
            else:
                lines.append(f"    const Tensor {name} = {view};")
        elif schema_type == "Scalar":
            lines.append(f"    const ScalarOrTensor {name}{{std::nullopt, {name}_t.toDouble()}};")
        elif schema_type == "Tensor?":
            lines.append(
                f"    const std::optional<Tensor> {name} = "
                f"ToOptionalView({name}_t, {op}, {quoted});"
            )
        elif schema_type == "Tensor[]":
            lines.append(
                f"    const std::vector<Tensor> {name} = ToViews({name}_t, {op}, {quoted});"
            )
        elif schema_type == "ScalarType":
            lines.append(f"    const DataType {name} = ToDataType({name}_t, {op}, {quoted});")
    first = _first_tensor(spec)
    like_view = first.name if first.cpp_type == "Tensor" else f"{first.name}.front()"
    like = f"{first.name}_t" if first.cpp_type == "Tensor" else f"{first.name}_t.front()"
    inputs = ", ".join(p.name for p in spec.inputs)
    optional = {p.name for p, schema_type, _ in params if schema_type == "Tensor?"}
    allocated = []
    for param in spec.outputs:
        name, quoted = param.name, f'"{param.name}"'
        if param.name in taken:
            view = "ToOptionalView" if name in optional else "ToView"
            lines.append(
                f"    const std::optional<Tensor> {name} = {view}({name}_t, {op}, {quoted});"
            )
            if name in optional:  # an optional input's in-place output, e.g. key_out
                lines.append(_alias_given(spec, param, f'"{overload.qualified}"'))
        elif _camel(name) in spec.defaults:
            allocated.append(name)
            lines.append(
                f"    std::optional<Tensor> {name} = "
                f"Placeholder({cls}::Default{_camel(name)}({inputs}), {like_view});"
            )
        else:  # omitted: in place on its input, which the schema declares mutated
            lines.append(f"    const std::optional<Tensor> {name};")
    return lines, allocated, like


def emit_torch_kernel(overload: TorchOverload) -> str:
    """The kernel registered for `overload`: torch tensors in, Run<Op>, allocated outputs out."""
    spec = overload.spec
    cls = spec.class_name
    params = overload.params()
    # Arguments that need converting arrive as <name>_t; the converted value is <name>.
    converted = {"Tensor", "Tensor?", "Tensor[]", "Scalar", "ScalarType"}
    signature = ", ".join(
        f"{cpp_type} {p.name}{'_t' if schema_type in converted else ''}"
        for p, schema_type, cpp_type in params
    )
    ret = _torch_return_type(overload)
    lines = [
        f"{ret} {overload.function}({signature}, std::optional<int64_t> implementation_index) {{",
        f"  return TranslateErrors([&]() -> {ret} {{",
    ]
    taken = {p.name for p, _, _ in params}
    body, allocated, like = _emit_kernel_views(overload)
    lines += body
    written = {name: f"{name}_t" for name in sorted(taken & {p.name for p in spec.outputs})}
    written.update(
        {name: f"{name}_t" for name in sorted(set(spec.mutates) | overload.in_place_inputs())}
    )
    tensors = {
        p.name: f"{p.name}_t"
        for p, schema_type, _ in params
        if schema_type in ("Tensor", "Tensor?", "Tensor[]")
    }
    lines += _emit_autograd(spec, written, tensors)
    args = ", ".join(p.name for p in spec.params)
    lines.append(f"    const auto instance = Ops().Get{cls}(implementation_index, {args});")
    lines += [f"    at::Tensor {name}_t = Allocate({name}, {like});" for name in allocated]
    lines.append(f"    Ops().Run{cls}(*instance, std::nullopt, /*release_gil=*/false, {args});")
    lines += [f"    BumpVersion({expr});" for expr in written.values()]
    returns = [f"{p.name}_t" for p in overload.returns]
    if len(returns) == 1:
        lines.append(f"    return {returns[0]};")
    elif returns:
        lines.append(f"    return {{{', '.join(returns)}}};")
    lines += ["  });", "}"]
    return "\n".join(lines)


def _alias_given(spec: OpSpec, output: Param, qualified: str, indent: str = "    ") -> str:
    """CheckAliasGiven for the in-place output of an optional input (rotary's key_out)."""
    alias = spec.params[_alias_index(spec, output)].name
    return (
        f"{indent}CheckAliasGiven({alias}.has_value(), {output.name}.has_value(), {qualified}, "
        f'"{spec.name}", "{alias}", "{output.name}");'
    )


# C++ parameter type -> the MetaArguments accessor that reads it (docs/user/torch.md, fakes).
META_ACCESSORS = {
    "Tensor": "View",
    "std::optional<Tensor>": "OptionalView",
    "std::vector<Tensor>": "Views",
    "ScalarOrTensor": "ScalarOrView",
}


def emit_meta_check(spec: OpSpec) -> str:
    """Check<Op>Meta: the base class constructor on views without data (CheckMeta)."""
    cls, op = spec.class_name, f'"{spec.name}"'
    lines = [
        f"class MetaCheck{cls} final : public {cls} {{",
        " public:",
        f"  using {cls}::{cls};",
        "  void operator()(const Handle&, const Args&) const override {}",
        "};",
        "",
        f"py::list Check{cls}Meta(const MetaArguments& args, bool is_out,",
        "                         const char* qualified) {",
    ]
    for param in spec.params:
        name = f'"{param.name}"'
        if param.cpp_type in META_ACCESSORS:
            const = "" if param.is_output else "const "
            accessor = META_ACCESSORS[param.cpp_type]
            lines.append(f"  {const}{param.cpp_type} {param.name} = args.{accessor}({name});")
            continue
        convert = PY_TYPES[param.cpp_type]
        if param.cpp_type.startswith("std::optional"):
            lines += [
                f"  {param.cpp_type} {param.name};",
                f"  if (PyObject* given = args.Get({name})) {{",
                f"    {param.name} = {convert.format(v='given', op=op, name=name)};",
                "  }",
            ]
        elif param.default is not None:
            value = convert.format(v=f"args.Get({name})", op=op, name=name)
            lines.append(
                f"  const {param.cpp_type} {param.name} = args.Get({name}) ? {value} : "
                f"{param.cpp_type}({param.default});"
            )
        else:
            value = convert.format(v=f"args.Required({name})", op=op, name=name)
            lines.append(f"  const {param.cpp_type} {param.name} = {value};")
    inputs = ", ".join(p.name for p in spec.inputs)
    lines.append("  py::list allocated;")
    for param in spec.outputs:
        camel = _camel(param.name)
        if camel in spec.defaults:
            lines += [
                f"  if (!{param.name}) {{",
                f"    {param.name} = Placeholder({cls}::Default{camel}({inputs}), args.Like());",
                f"    allocated.append(MetaResult(*{param.name}));",
                "  }",
            ]
        elif spec.params[_alias_index(spec, param)].cpp_type == "std::optional<Tensor>":
            lines += ["  if (is_out) {", _alias_given(spec, param, "qualified"), "  }"]
    args = ", ".join(p.name for p in spec.params)
    lines += [f"  [[maybe_unused]] const MetaCheck{cls} checked({args});", "  return allocated;"]
    lines.append("}")
    return "\n".join(lines)


def emit_check_meta(specs: list[OpSpec]) -> str:
    """CheckMeta (python/meta_check.h): the op's Check<Op>Meta."""
    lines = [
        "py::list CheckMeta(const std::string& op, const std::string& overload,",
        "                   const py::dict& values) {",
        '  const std::string qualified = overload.empty() ? op : op + "." + overload;',
        "  const bool is_out =",
        '      overload.size() >= 3 && overload.substr(overload.size() - 3) == "out";',
    ]
    for spec in specs:
        first = _first_tensor(spec).name
        lines += [
            f'  if (op == "{spec.name}") {{',
            f"    return Check{spec.class_name}Meta(",
            f'        MetaArguments(values, "{spec.name}", "{first}"), is_out, qualified.c_str());',
            "  }",
        ]
    lines += [
        '  throw InvalidArgument(detail::Concat("polyops: no op named \'", op, "\'"));',
        "}",
    ]
    return "\n".join(lines)


def emit_meta_checks(specs: list[OpSpec]) -> str:
    """meta_check.cc: CheckMeta, each op's Check<Op>Meta and TorchOverloads, in polyops._C."""
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        "// The fakes' validation of every op (python/meta_check.h).",
        '#include "generated/ops.h"',
        '#include "python/meta_check.h"',
        "",
        "namespace polyops::python {",
        "namespace {",
        "",
    ]
    lines += [emit_meta_check(spec) + "\n" for spec in specs]
    overloads = [o for spec in specs for o in torch_overloads(spec)]
    lines += [
        "}  // namespace",
        "",
        emit_check_meta(specs),
        "",
        emit_torch_overloads(overloads),
        "",
        "}  // namespace polyops::python",
        "",
    ]
    return "\n".join(lines)


def emit_torch_overloads(overloads: list[TorchOverload]) -> str:
    """TorchOverloads() (python/arguments.h): every overload's schema, in both modules."""
    lines = ["const std::vector<TorchOverload>& TorchOverloads() {"]
    lines.append("  static const auto* overloads = new std::vector<TorchOverload>{")
    for o in overloads:
        returns = ", ".join(f'"{p.name}"' for p in o.returns)
        lines.append(
            f'      {{"{o.spec.name}", "{o.name}", {_cpp_string(torch_schema(o))}, {{{returns}}}}},'
        )
    lines += ["  };", "  return *overloads;", "}"]
    return "\n".join(lines)


def emit_torch_library(specs: list[OpSpec], devices: list[str]) -> str:
    overloads = [o for spec in specs for o in torch_overloads(spec)]
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        "// The torch.library registration of every op: schemas and kernels.",
        "#include <torch/library.h>",
        "",
        '#include "generated/ops_table.h"',
        '#include "python/torch_library.h"',
        "",
        "namespace polyops::python {",
        "namespace {",
        "",
    ]
    lines += [emit_torch_kernel(o) + "\n" for o in overloads]
    lines += ["}  // namespace", ""]
    lines += [emit_torch_overloads(overloads), ""]
    lines += [
        "void RegisterTorchLibrary() {",
        "  // Never destroyed: deregistering at exit could run after torch's dispatcher is gone.",
        "  static auto* libraries = new std::vector<std::unique_ptr<torch::Library>>();",
        "  if (!libraries->empty()) return;",
        "  std::vector<std::unique_ptr<torch::Library>> made;",
        '  made.push_back(std::make_unique<torch::Library>(torch::Library::DEF, "polyops",',
        "                                                  std::nullopt, __FILE__, __LINE__));",
        f'  made.back()->set_python_module("{TORCH_PYTHON_MODULE}");',
        "  for (const TorchOverload& overload : TorchOverloads()) {",
        "    made.back()->def(overload.schema);",
        "  }",
    ]
    for device in devices:
        lines += [
            "  made.push_back(std::make_unique<torch::Library>(",
            '      torch::Library::IMPL, "polyops", '
            f"c10::DispatchKey::{DISPATCH_KEYS[device]}, __FILE__, __LINE__));",
        ]
        lines += [
            f'  made.back()->impl("{o.qualified}", TORCH_FN({o.function}));' for o in overloads
        ]
    boxed = {
        "Negative": "RejectMathBits",
        "Conjugate": "RejectMathBits",
        "Autograd": "RefuseAutograd",
    }
    for key, function in boxed.items():
        lines += [
            "  made.push_back(std::make_unique<torch::Library>(",
            f'      torch::Library::IMPL, "polyops", c10::DispatchKey::{key}, '
            "__FILE__, __LINE__));",
        ]
        lines += [
            f'  made.back()->impl("{o.qualified}", '
            f"torch::CppFunction::makeFromBoxedFunction<&{function}>());"
            for o in overloads
        ]
    lines += [
        "  *libraries = std::move(made);",
        "}",
        "",
        "}  // namespace polyops::python",
        "",
    ]
    return "\n".join(lines)


# Schema type -> C++ parameter type of a stable-ABI kernel (TORCH_BOX unboxes them).
STABLE_TYPES = {
    "Tensor": "StableTensor",
    "Tensor?": "std::optional<StableTensor>",
    "Tensor[]": "std::vector<StableTensor>",
    "float": "double",
    "int": "int64_t",
    "bool": "bool",
    "ScalarType": "torch::headeronly::ScalarType",
    "float?": "std::optional<double>",
    "int?": "std::optional<int64_t>",
}


def _stable_return_type(overload: TorchOverload) -> str:
    count = len(overload.returns)
    if count == 0:
        return "void"
    if count == 1:
        return "StableTensor"
    return "std::tuple<" + ", ".join(["StableTensor"] * count) + ">"


def stable_overloads(specs: list[OpSpec]) -> list[TorchOverload]:
    """The overloads with a stable-ABI kernel: all but those taking a Scalar, which the
    stable ABI cannot pass (python/polyops/_torch_library.py serves them)."""
    return [
        o
        for spec in specs
        for o in torch_overloads(spec)
        if all(schema_type != "Scalar" for _, schema_type, _ in o.params())
    ]


def emit_stable_kernel(overload: TorchOverload) -> str:
    """The stable-ABI kernel of `overload` (python/torch_stable.h): views, Run<Op>, outputs."""
    spec = overload.spec
    cls, op = spec.class_name, f'"{spec.name}"'
    params = overload.params()
    converted = {"Tensor", "Tensor?", "Tensor[]", "ScalarType"}
    signature = ", ".join(
        f"{STABLE_TYPES[schema_type]} {p.name}{'_t' if schema_type in converted else ''}"
        for p, schema_type, _ in params
    )
    ret = _stable_return_type(overload)
    lines = [
        f"{ret} {overload.stable_function}({signature}, "
        "std::optional<int64_t> implementation_index) {",
        f"  return TranslateStableErrors([&]() -> {ret} {{",
    ]
    body, allocated, like = _emit_kernel_views(overload)
    lines += body
    args = ", ".join(p.name for p in spec.params)
    lines.append(f"    const auto instance = Ops().Get{cls}(implementation_index, {args});")
    lines += [f"    StableTensor {name}_t = Allocate({name}, {like});" for name in allocated]
    lines.append(f"    Ops().Run{cls}(*instance, std::nullopt, /*release_gil=*/false, {args});")
    returns = [f"std::move({p.name}_t)" for p in overload.returns]
    if len(returns) == 1:
        lines.append(f"    return {returns[0]};")
    elif returns:
        lines.append(f"    return {ret}{{{', '.join(returns)}}};")
    lines += ["  });", "}", ""]
    # The Negative / Conjugate kernel: the same signature, refusing.
    lines += [
        f"{ret} {overload.stable_function}MathBits({signature}, std::optional<int64_t>) {{",
        f"  RefuseMathBits({op});",
        "}",
    ]
    return "\n".join(lines)


def emit_torch_stable(specs: list[OpSpec]) -> str:
    overloads = stable_overloads(specs)
    lines = [
        "// Generated by scripts/generate_wrappers.py. Do not edit.",
        "// The stable-ABI kernels of torch.ops.polyops (python/torch_stable.h).",
        '#include "python/torch_stable.h"',
        "",
        "#include <memory>",
        "",
        "namespace polyops::python {",
        "namespace {",
        "",
    ]
    lines += [emit_stable_kernel(o) + "\n" for o in overloads]
    lines += [
        "}  // namespace",
        "",
        "void RegisterStableKernels() {",
        "  using torch::stable::detail::StableLibrary;",
        "  // Never destroyed: deregistering at exit could run after torch's dispatcher is gone.",
        "  static auto* libraries = new std::vector<std::unique_ptr<StableLibrary>>();",
        "  if (!libraries->empty()) return;",
        "  std::vector<std::unique_ptr<StableLibrary>> made;",
    ]
    # CPU only: an accelerator's device guard, stream and scratch memory come from
    # polyops._torch_ops today (docs/user/torch.md, "Torch versions").
    keys = [("CPU", ""), ("Negative", "MathBits"), ("Conjugate", "MathBits")]
    for key, suffix in keys:
        lines.append(
            "  made.push_back(std::make_unique<StableLibrary>(StableLibrary::Kind::IMPL, "
            f'"polyops", "{key}", __FILE__, __LINE__));'
        )
        lines += [
            f'  made.back()->impl("{o.qualified}", TORCH_BOX(&{o.stable_function}{suffix}));'
            for o in overloads
        ]
    lines += [
        "  *libraries = std::move(made);",
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
    for device in devices:
        write_if_changed(out / f"ops_{device}.h", emit_device_ops_header(specs, device))
    write_if_changed(out / "ops.h", emit_ops_header(devices))
    for spec in specs:
        for device in devices:
            folder = args.src / device / spec.name
            # CUDA slots are .cuh headers compiled by nvcc in a .cu TU.
            pattern, suffix = ("*.cuh", "cu") if device == "cuda" else ("*.h", "cc")
            impls = sorted(f"{device}/{spec.name}/{h.name}" for h in folder.glob(pattern))
            write_if_changed(
                out / f"{device}_{spec.name}.{suffix}",
                emit_device_source(spec, device, impls),
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
