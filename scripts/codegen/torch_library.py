"""``torch_library.cc`` and ``meta_check.cc``: the ``torch.ops.polyops`` schemas
(functional and ``.out`` overloads), one typed kernel per overload for
``polyops._torch_ops``, and the fakes' argument checks (torch-free, in ``polyops._C``).
"""

from __future__ import annotations

import dataclasses
import itertools

from codegen.bindings import _emit_autograd
from codegen.model import (
    DEVICE_TABLE,
    PY_TYPES,
    OpSpec,
    Param,
    _alias_index,
    _camel,
    _cpp_string,
    _first_tensor,
    _py_default,
)

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


DISPATCH_KEYS = {folder: row.dispatch_key for folder, row in DEVICE_TABLE.items()}


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
