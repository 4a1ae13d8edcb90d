"""Memory bandwidth of every polyops rms_norm implementation against torch's copy bandwidth.

For each dtype (float32, float16, bfloat16) and one (rows, cols) shape
(default 4096x4096), measures in one process, interleaved:

* ``y.copy_(x)``: torch's copy, same dtype and shape: the bandwidth ceiling;
* ``polyops.rms_norm(x, w, 1e-6, out=y, implementation_index=i)`` for every
  slot ``i`` of ``polyops.implementations("rms_norm")``;
* ``torch.nn.functional.rms_norm(x, (cols,), w, 1e-6)`` for reference (it
  allocates its output; there is no ``out=``).

Bytes moved per call are counted as read x + write y = 2 * numel * itemsize for
every candidate (the weight, one row, is ignored). GB/s = bytes / median
seconds per call / 1e9; "x copy" is the median of per-repeat ratios of that
candidate's time to copy's, inverted (so 1.0 = as fast as copy).

Target (:data:`TARGETS`, docs/backends/cpu_rms_norm.md): the best polyops slot reaches >= 0.9 x
copy bandwidth for float32, >= 0.8 x for float16 and bfloat16; printed as
PASS/MISS (exit status stays 0). ``benchmarks/memory_bound.py --ops
rms_norm,add_rms_norm,causal_softmax,mul --dtypes f32,f16,bf16`` reports all
of the CPU roofline targets in one run.

Usage::

    python benchmarks/rms_norm.py                  # 4096x4096, JSON to benchmarks/results/
    python benchmarks/rms_norm.py --quick          # smoke test (small, few repeats)
    python benchmarks/rms_norm.py --size 8192x4096 --repeats 11
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from _common import (
    Timing,
    add_run_arguments,
    dtype_list,
    finish_run_arguments,
    load_average,
    measure,
    paired_ratio,
    print_table,
    verdict,
    write_json,
)

import polyops

EPS = 1e-6
#: The best slot must reach at least this fraction of copy bandwidth, per dtype.
TARGETS: dict[str, float] = {"f32": 0.9, "f16": 0.8, "bf16": 0.8}
COPY = "torch copy_"
TORCH_RMS_NORM = "torch F.rms_norm"
DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
}


def parse_size(text: str) -> tuple[int, int]:
    """``"4096"`` -> (4096, 4096); ``"8192x4096"`` -> (8192, 4096)."""
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or ROWSxCOLS, got {text!r}") from None
    if len(dims) == 1:
        dims *= 2
    if len(dims) != 2 or min(dims) < 1:
        raise argparse.ArgumentTypeError(f"expected N or ROWSxCOLS, got {text!r}")
    return dims[0], dims[1]


def candidates_for(
    x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, slots: dict[int, str]
) -> dict[str, Callable[[], object]]:
    """Copy, one callable per polyops slot, and torch's rms_norm, all on the same tensors."""
    cols = x.shape[-1]
    found: dict[str, Callable[[], object]] = {COPY: lambda: y.copy_(x)}
    for index, name in slots.items():
        found[f"polyops[{index}] {name}"] = lambda i=index: polyops.rms_norm(
            x, w, EPS, out=y, implementation_index=i
        )
    found[TORCH_RMS_NORM] = lambda: torch.nn.functional.rms_norm(x, (cols,), w, EPS)
    return found


def check_slots(x: torch.Tensor, w: torch.Tensor, slots: dict[int, str]) -> None:
    """Fail early if a slot disagrees with torch on a slice of the benchmark input."""
    part = x[:64]
    expected = torch.nn.functional.rms_norm(part.float(), (x.shape[-1],), w.float(), EPS)
    for index in slots:
        got = polyops.rms_norm(part, w, EPS, implementation_index=index)
        tol = 1e-5 if x.dtype == torch.float32 else 2e-2
        torch.testing.assert_close(got.float(), expected, rtol=tol, atol=tol)


def bench_dtype(
    dtype_name: str,
    shape: tuple[int, int],
    slots: dict[int, str],
    *,
    repeats: int,
    target_s: float,
) -> dict[str, Any]:
    """Measure all candidates for one dtype; return timings, GB/s and ratios to copy."""
    dtype = DTYPES[dtype_name]
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=dtype)
    w = torch.randn(shape[-1], dtype=dtype)
    y = torch.empty_like(x)
    check_slots(x, w, slots)
    timings = measure(candidates_for(x, w, y, slots), repeats=repeats, target_s=target_s)
    nbytes = 2 * x.numel() * x.element_size()
    copy = timings[COPY]
    results: dict[str, dict[str, Any]] = {}
    for name, timing in timings.items():
        results[name] = {
            "gbps": nbytes / timing.median / 1e9,
            "best_gbps": nbytes / timing.best / 1e9,
            "x_copy": paired_ratio(copy, timing),
            "timing": timing,
        }
    polyops_names = [n for n in timings if n.startswith("polyops[")]
    best = max(polyops_names, key=lambda n: results[n]["x_copy"]) if polyops_names else None
    return {"dtype": dtype_name, "bytes": nbytes, "results": results, "best": best}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Target: best polyops slot >= "
        + ", ".join(f"{t:g} ({d})" for d, t in TARGETS.items())
        + " x copy bandwidth (PASS/MISS).",
    )
    parser.add_argument(
        "--size",
        type=parse_size,
        default=None,
        metavar="N|RxC",
        help="tensor shape, square N or ROWSxCOLS (default 4096x4096; --quick: 1024x1024)",
    )
    parser.add_argument(
        "--dtypes",
        type=dtype_list(DTYPES),
        default=list(DTYPES),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(DTYPES)} (default: all)",
    )
    add_run_arguments(
        parser,
        __file__,
        repeats=(3, 9),
        sample_ms=(20.0, 200.0),
        quick_help="smoke test: 1024x1024, 3 repeats (small sizes sit in cache: figures are not "
        "meaningful against the target)",
        threads_help="torch.set_num_threads(N) first; polyops' OpenMP slot shares torch's libgomp, "
        "so this bounds both (default: leave torch's setting)",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    if args.size is None:
        args.size = (1024, 1024) if args.quick else (4096, 4096)
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables, write the JSON; always returns 0."""
    args = parse_args(argv)
    slots = polyops.implementations("rms_norm")
    n_rows, n_cols = args.size
    print(
        f"polyops {polyops.__version__} | torch {torch.__version__} | "
        f"torch threads {torch.get_num_threads()} | load {load_average()} |\n"
        f"shape {n_rows}x{n_cols} | "
        f"repeats {args.repeats} | sample ~{args.sample_ms:g} ms | rms_norm slots {slots}"
    )
    print()

    per_dtype = [
        bench_dtype(name, args.size, slots, repeats=args.repeats, target_s=args.sample_ms / 1e3)
        for name in args.dtypes
    ]

    rows: list[list[str]] = []
    summary: list[list[str]] = []
    for entry in per_dtype:
        for name, result in entry["results"].items():
            timing: Timing = result["timing"]
            rows.append(
                [
                    entry["dtype"],
                    name,
                    f"{timing.median * 1e3:.3f}",
                    f"{result['gbps']:.2f}",
                    f"{result['best_gbps']:.2f}",
                    f"{result['x_copy']:.2f}x",
                    f"{timing.spread * 100:.0f}%",
                    "*" if name == entry["best"] else "",
                ]
            )
        best = entry["best"]
        if best is not None:
            ratio = entry["results"][best]["x_copy"]
            target = TARGETS[entry["dtype"]]
            summary.append(
                [
                    entry["dtype"],
                    best,
                    f"{entry['results'][best]['gbps']:.2f}",
                    f"{entry['results'][COPY]['gbps']:.2f}",
                    f"{ratio:.2f}x",
                    f">= {target:g}x",
                    verdict(ratio >= target),
                ]
            )
            entry["result"] = verdict(ratio >= target)

    print_table(
        ["dtype", "candidate", "ms/call", "GB/s", "best GB/s", "x copy", "noise", "best"], rows
    )
    print_table(["dtype", "best slot", "GB/s", "copy GB/s", "x copy", "target", "result"], summary)
    print(
        "GB/s counts read x + write y (2 * numel * itemsize) for every candidate; ms/call and "
        "GB/s from the median sample (best GB/s: fastest sample);\nx copy = median of "
        "per-repeat copy_time/candidate_time; noise = IQR/median."
    )
    if args.quick:
        print("Quick mode: small tensors may sit in cache; PASS/MISS here is only a smoke test.")

    path = write_json(
        args.json,
        {
            "benchmark": "rms_norm",
            "settings": {
                "shape": list(args.size),
                "dtypes": args.dtypes,
                "repeats": args.repeats,
                "sample_ms": args.sample_ms,
                "eps": EPS,
                "quick": args.quick,
                "threads": torch.get_num_threads(),
                "slots": {str(k): v for k, v in slots.items()},
            },
            "target": {"min_ratio_to_copy": TARGETS, "of": "best polyops slot"},
            "dtypes": [
                {
                    "dtype": entry["dtype"],
                    "bytes_per_call": entry["bytes"],
                    "best": entry["best"],
                    "result": entry.get("result"),
                    "candidates": {
                        name: {
                            "gbps": r["gbps"],
                            "best_gbps": r["best_gbps"],
                            "ratio_to_copy": r["x_copy"],
                            **r["timing"].as_dict(),
                        }
                        for name, r in entry["results"].items()
                    },
                }
                for entry in per_dtype
            ],
        },
    )
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
