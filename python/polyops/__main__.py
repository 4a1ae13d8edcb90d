"""``python -m polyops``: what this build offers, then the parity check of every op.

Without arguments: the usable devices, every operator with its
implementation slots per device, then every case of :mod:`polyops.testing`
on every device present x slot x dtype against its float64 reference, as
one line per op. ``python -m polyops parity [--device D] [--op OP] [--dtype T]
[--json PATH] [--verbose] [--cann-double]`` prints the full (op, dtype) x
(device, slot) table instead. Exits 1 if any check fails or raises (a
declared known deviation, labelled xfail, does not count).
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

import polyops
from polyops.testing import cli
from polyops.testing.runner import FAILING, run_parity


def _overview() -> int:
    print(f"polyops {polyops.__version__} (torch {torch.__version__})")
    built = list(polyops._C._built_devices)
    print("devices (the parity check below tests the usable ones):")
    print("\n".join(cli.device_lines(polyops.devices())))
    registered = polyops.torch_ops_registered()
    print(f"torch.ops.polyops: {'registered' if registered else 'NOT registered'}")
    print("operators and implementations (every built device):")
    width = max(map(len, polyops.operators()))
    for op in polyops.operators():
        slots = {d: polyops.implementations(op, d) for d in built}
        text = "; ".join(
            f"{d}: " + (", ".join(f"{i}={n}" for i, n in s.items()) or "-")
            for d, s in slots.items()
        )
        print(f"  {op:<{width}}  {text}")
    print("\nparity against float64 references (python -m polyops parity for the full table):")
    start = time.perf_counter()
    records = run_parity()
    print("\n".join(cli.summary_lines(records)))
    print(f"\n{cli.counts_line(records)} ({time.perf_counter() - start:.1f} s)")
    return 1 if any(r.status in FAILING for r in records) else 0


def main(argv: list[str] | None = None) -> int:
    """The command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m polyops",
        description="The devices, operators and slots of this build, then the parity check "
        "of every op against float64 references (the parity command prints the full table).",
    )
    commands = parser.add_subparsers(dest="command")
    parity = commands.add_parser(
        "parity", help="every op x device x slot x dtype against float64 references"
    )
    cli.add_arguments(parity)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.command == "parity":
        return cli.run(parity, args)
    return _overview()


if __name__ == "__main__":
    sys.exit(main())
