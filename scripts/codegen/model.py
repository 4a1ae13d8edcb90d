"""What an operator is, read from its base header: ``parse_header`` turns
``src/base/<op>.h`` into an ``OpSpec`` (name, parameters in constructor order,
defaults, outputs, aliases), the one model every emitter below works from.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re


@dataclasses.dataclass(frozen=True)
class DeviceRow:
    """One row of the device registry, ``kDevices`` in ``src/core/device.h``."""

    enum: str  # "kAscend"
    name: str  # torch's device type: "npu"
    folder: str  # src/<folder>/: "ascend"
    dispatch_key: str  # "PrivateUse1"
    slot_suffix: str  # ".cuh": nvcc compiles the op's TU (.cu)


_DEVICE_ROW = re.compile(r'\{Device::Type::(\w+), "(\w+)", "(\w+)", "(\w+)", \d+, "(\.\w+)"\}')


def read_device_table(header: pathlib.Path) -> dict[str, DeviceRow]:
    """``{folder: DeviceRow}`` in the registry's order."""
    text = header.read_text()
    table = text[text.index("kDevices[] = {") :].split("};", 1)[0]
    rows = [DeviceRow(*match) for match in _DEVICE_ROW.findall(table)]
    if len(rows) != table.count("Device::Type::"):
        raise SystemExit(f"{header}: a kDevices row the generator cannot read: {table}")
    return {row.folder: row for row in rows}


DEVICE_TABLE = read_device_table(pathlib.Path(__file__).parents[2] / "src/core/device.h")
DEVICES = {folder: row.enum for folder, row in DEVICE_TABLE.items()}


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


def _cpp_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


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


def collect(src: pathlib.Path) -> list[OpSpec]:
    specs = [s for h in sorted((src / "base").glob("*.h")) if (s := parse_header(h))]
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise SystemExit(f"duplicate operator names in src/base: {names}")
    return specs
