"""The devices selected for a run and how they are passed to a container or a local stage."""

from __future__ import annotations

import glob
import sys
from dataclasses import dataclass

from .config import _DEVICE_ID_RE, CIError, Passthrough, normalise_devices


@dataclass(frozen=True)
class Devices:
    """The devices selected for a run: ``ids`` is empty when ``all`` is true or none apply."""

    all: bool
    ids: tuple[str, ...]
    explicit: bool  # chosen with --devices rather than the config default

    def text(self) -> str:
        """The selection as exported in POLYOPS_CI_DEVICES."""
        return "all" if self.all else ",".join(self.ids)


def select_devices(passthrough: Passthrough, requested: str | None) -> Devices:
    """Resolve ``--devices`` (or the platform default) for a passthrough kind."""
    if passthrough.kind == "none":
        if requested is not None:
            print(
                "warning: --devices has no effect: this platform passes no devices through",
                file=sys.stderr,
            )
        return Devices(all=False, ids=(), explicit=False)
    text = normalise_devices(requested if requested is not None else passthrough.default_devices)
    explicit = requested is not None
    if text != "all":
        return Devices(all=False, ids=tuple(text.split(",")), explicit=explicit)
    if passthrough.kind == "gpus":
        return Devices(all=True, ids=(), explicit=explicit)
    # device-files: 'all' means every matching device node on this host.
    assert passthrough.device_template is not None
    prefix, _, suffix = passthrough.device_template.partition("{id}")
    found = []
    for node in glob.glob(glob.escape(prefix) + "*" + glob.escape(suffix)):
        middle = node[len(prefix) : len(node) - len(suffix)]
        if _DEVICE_ID_RE.match(middle):
            found.append(int(middle))
    if not found:
        raise CIError(
            f"--devices all: no {passthrough.device_template.format(id='<N>')} device "
            "found on this host; is the driver installed? Pass explicit ids with --devices"
        )
    return Devices(all=False, ids=tuple(str(i) for i in sorted(found)), explicit=explicit)


def device_docker_args(passthrough: Passthrough, devices: Devices) -> list[str]:
    """The ``docker run`` arguments that pass the selected devices through."""
    if passthrough.kind == "gpus":
        # The value is parsed as CSV by docker; a list of ids must be quoted to stay one field.
        return ["--gpus", "all" if devices.all else f'"device={",".join(devices.ids)}"']
    if passthrough.kind == "device-files":
        assert passthrough.device_template is not None
        args = []
        for device_id in devices.ids:
            args += ["--device", passthrough.device_template.format(id=device_id)]
        for node in passthrough.devices:
            args += ["--device", node]
        for mount in passthrough.mounts:
            args += ["-v", f"{mount}:{mount}:ro"]
        return args
    return []


def device_env(passthrough: Passthrough, devices: Devices, *, local: bool) -> dict[str, str]:
    """Environment variables naming the selected devices."""
    if passthrough.kind == "none":
        return {}
    if local:
        name = passthrough.local_visible_devices_env
        if name and devices.explicit and not devices.all:
            return {name: devices.text()}
        return {}
    name = passthrough.visible_devices_env
    return {name: devices.text()} if name else {}
