"""``bindings.cc``: the ``polyops.<op>`` functions of ``polyops._C`` (METH_FASTCALL,
tensors through DLPack), their docstrings and text signatures, and the slot tables.
"""

from __future__ import annotations

from codegen.device_sources import _slots_name
from codegen.model import (
    DEVICE_TABLE,
    DEVICES,
    PY_TYPES,
    OpSpec,
    Param,
    _alias_index,
    _camel,
    _cpp_string,
    _first_tensor,
    _py_default,
    _written,
)

COMMON = ["implementation_index", "implementation", "stream"]


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
        f"      implementation_index = ArgImplementation(given, implementation_index, "
        f"Operator<{cls}>::State(), PrimaryDevice({first.name}, {op}));",
        "    }",
        f"    if (PyObject* given = Given(values[{n + 2}])) {{",
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
    built = ", ".join(
        f'"{DEVICE_TABLE[device].name}"' for device in DEVICE_TABLE if device in devices
    )
    lines += [
        f'  module.attr("_operators") = py::make_tuple({names});',
        f'  module.attr("_built_devices") = py::make_tuple({built});',
        '  module.attr("_ops_table") = py::capsule(&kOpsTable, kOpsTableCapsule);',
        "}",
        "",
        "}  // namespace polyops::python",
        "",
    ]
    return "\n".join(lines)
