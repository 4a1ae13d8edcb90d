"""Host (dispatch) overhead of polyops calls on tiny CPU tensors, next to torch's.

Measures microseconds per call, in one process, of

* ``polyops.add(a, b, out=c)`` against ``torch.add(a, b, out=c)`` and
  ``torch.ops.aten.add.out(a, b, out=c)``;
* ``polyops.rms_norm(x, w, 1e-6, out=y)`` and the allocating
  ``polyops.rms_norm(x, w, 1e-6)`` against
  ``torch.nn.functional.rms_norm(x, (n,), w, 1e-6)`` (torch has no ``out=``
  there, so its figure includes allocating the result);
* the torch.library form: ``torch.ops.polyops.add(a, b, out=c)`` against
  ``torch.ops.aten.add.out(a, b, out=c)``, and the functional
  ``torch.ops.polyops.add.default(a, b)`` / ``torch.ops.polyops.add(a, b)``
  against ``torch.ops.aten.add.Tensor(a, b)``;

on float32 tensors of shape (1, 8) and (1, 64), where the arithmetic is
negligible and the figure is the cost of getting from a Python call to the
kernel and back. ``--device cuda`` puts the tensors on the GPU: the figure
is then the host cost of queuing the kernel (the timed loop never
synchronizes). If both sides show the GPU's own time per tiny kernel (a few
microseconds), the queue, not the host, was the limit. Each sample is a loop
of many calls compiled straight into the timing loop (no lambda frame);
samples of the candidates are interleaved and the median of the repeats is
reported; ratios are the median of per-repeat ratios.

Targets: polyops.add on tiny tensors <= 0.6 x torch.add(out=) on CPU and CUDA;
torch.ops.polyops.add(out=) <= 1.0 x torch.ops.aten.add.out; the
allocating polyops.rms_norm <= 0.3 x F.rms_norm on CPU. A miss is reported as
MISS in the table; the exit status stays 0.

Usage::

    python benchmarks/host_overhead.py            # full run, JSON to benchmarks/results/
    python benchmarks/host_overhead.py --quick    # smoke test
    python benchmarks/host_overhead.py --device cuda   # on a GPU
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import timeit
from collections.abc import Callable, Sequence
from typing import Any

import torch
from _common import (
    Timing,
    add_run_arguments,
    call_timer,
    finish_run_arguments,
    load_average,
    measure,
    paired_ratio,
    positive_int,
    print_table,
    verdict,
    write_json,
)

import polyops

SHAPES: tuple[tuple[int, int], ...] = ((1, 8), (1, 64))
EPS = 1e-6
#: device -> (candidate, reference) -> the largest candidate/reference ratio allowed on
#: tiny tensors.
TARGETS: dict[str, dict[tuple[str, str], float]] = {
    "cpu": {
        ("polyops.add(out=)", "torch.add(out=)"): 0.6,
        ("torch.ops.polyops.add(out=)", "aten.add.out"): 1.0,
        ("polyops.rms_norm", "F.rms_norm"): 0.3,
    },
    "cuda": {
        ("polyops.add(out=)", "torch.add(out=)"): 0.6,
        ("torch.ops.polyops.add(out=)", "aten.add.out"): 1.0,
    },
}


def _kwargs(implementation_index: int | None) -> dict[str, Any]:
    return {} if implementation_index is None else {"implementation_index": implementation_index}


def _bench_add_out(
    shape: tuple[int, int],
    candidate: str,
    add: Callable[..., object],
    references: dict[str, Callable[..., object]],
    *,
    repeats: int,
    number: int | None,
    target_s: float,
    implementation_index: int | None = None,
    device: str = "cpu",
) -> dict[str, Timing]:
    """Time `add(a, b, out=c)` (named `candidate`) and each reference with ``out=`` on float32
    `shape`."""
    a = torch.randn(shape, device=device)
    b = torch.randn(shape, device=device)
    c = torch.empty(shape, device=device)
    extra = _kwargs(implementation_index)
    add(a, b, out=c, **extra)
    torch.testing.assert_close(c, a + b)
    timers = {candidate: call_timer(add, a, b, out=c, **extra)}
    timers.update({name: call_timer(ref, a, b, out=c) for name, ref in references.items()})
    return measure(timers, repeats=repeats, number=number, target_s=target_s)


#: polyops.add against torch.add and aten.add.out, all with ``out=``.
bench_add = functools.partial(
    _bench_add_out,
    candidate="polyops.add(out=)",
    add=polyops.add,
    references={"torch.add(out=)": torch.add, "aten.add.out": torch.ops.aten.add.out},
)


#: The two ways polyops._C reads what DLPack does not carry (negative bit, autograd state,
#: version counters; docs/user/torch.md, "Torch versions"): direct reads, which
#: polyops._torch_ops installs under the torch it was built for, and torch's Python-level
#: entry points, the only ones that work under every torch (the stable form).
PORTABLE_READS = "polyops.add(out=) [portable reads]"


def bench_add_read_paths(
    shape: tuple[int, int],
    *,
    repeats: int,
    number: int | None,
    target_s: float,
    implementation_index: int | None = None,
    device: str = "cpu",
) -> dict[str, Timing]:
    """polyops.add(out=) with each read path, interleaved in one run next to torch.add(out=).
    Each sample switches the path in the timer's setup, outside the timed loop."""
    from polyops import _torch_ops

    a = torch.randn(shape, device=device)
    b = torch.randn(shape, device=device)
    c = torch.empty(shape, device=device)
    extra = _kwargs(implementation_index)
    namespace = {"_fn": polyops.add, "_a": a, "_b": b, "_c": c, "_k": implementation_index}
    stmt = "_fn(_a, _b, out=_c" + (", implementation_index=_k)" if extra else ")")
    timers: dict[str, timeit.Timer] = {
        "polyops.add(out=)": timeit.Timer(
            stmt, setup=_torch_ops._use_torch_tensor_flags, globals=namespace
        ),
        PORTABLE_READS: timeit.Timer(
            stmt, setup=polyops._C._use_portable_tensor_flags, globals=namespace
        ),
    }
    timers["torch.add(out=)"] = call_timer(torch.add, a, b, out=c)
    try:
        return measure(timers, repeats=repeats, number=number, target_s=target_s)
    finally:
        _torch_ops._use_torch_tensor_flags()


def bench_torch_ops_add(shape: tuple[int, int], **kwargs: Any) -> dict[str, Timing]:
    """The torch.library form of add(out=) against aten's."""
    return _bench_add_out(
        shape,
        candidate="torch.ops.polyops.add(out=)",
        add=torch.ops.polyops.add,
        references={"aten.add.out": torch.ops.aten.add.out},
        **kwargs,
    )


def bench_torch_ops_add_functional(
    shape: tuple[int, int],
    *,
    repeats: int,
    number: int | None,
    target_s: float,
    implementation_index: int | None = None,
    device: str = "cpu",
) -> dict[str, Timing]:
    """torch.ops.polyops.add.default(a, b) (no overload resolution) against aten.add.Tensor,
    and the packet call torch.ops.polyops.add(a, b), which first tries (and fails) the
    `.out` overload."""
    a = torch.randn(shape, device=device)
    b = torch.randn(shape, device=device)
    extra = _kwargs(implementation_index)
    torch.testing.assert_close(torch.ops.polyops.add(a, b, **extra), a + b)
    return measure(
        {
            "torch.ops.polyops.add.default": call_timer(
                torch.ops.polyops.add.default, a, b, **extra
            ),
            "aten.add.Tensor": call_timer(torch.ops.aten.add.Tensor, a, b),
            "torch.ops.polyops.add (packet)": call_timer(torch.ops.polyops.add, a, b, **extra),
        },
        repeats=repeats,
        number=number,
        target_s=target_s,
    )


def _bench_rms_norm(
    shape: tuple[int, int],
    *,
    allocate: bool,
    repeats: int,
    number: int | None,
    target_s: float,
    implementation_index: int | None = None,
    device: str = "cpu",
) -> dict[str, Timing]:
    """Time polyops.rms_norm, with ``out=`` or allocating its result (`allocate`), against
    torch.nn.functional.rms_norm (which always allocates) on float32 `shape`."""
    n = shape[-1]
    x = torch.randn(shape, device=device)
    w = torch.randn(n, device=device)
    extra = _kwargs(implementation_index)
    if allocate:
        candidate = "polyops.rms_norm"
        y = polyops.rms_norm(x, w, EPS, **extra)
    else:
        candidate = "polyops.rms_norm(out=)"
        y = torch.empty(shape, device=device)
        polyops.rms_norm(x, w, EPS, out=y, **extra)
        extra = {**extra, "out": y}
    torch.testing.assert_close(y, torch.nn.functional.rms_norm(x, (n,), w, EPS))
    return measure(
        {
            candidate: call_timer(polyops.rms_norm, x, w, EPS, **extra),
            "F.rms_norm": call_timer(torch.nn.functional.rms_norm, x, (n,), w, EPS),
        },
        repeats=repeats,
        number=number,
        target_s=target_s,
    )


#: polyops.rms_norm(out=) against F.rms_norm.
bench_rms_norm = functools.partial(_bench_rms_norm, allocate=False)

#: The allocating polyops.rms_norm against F.rms_norm: both sides allocate.
bench_rms_norm_allocating = functools.partial(_bench_rms_norm, allocate=True)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Targets: polyops.add <= 0.6 x torch.add(out=) and "
        "torch.ops.polyops.add(out=) <= 1.0 x torch.ops.aten.add.out on tiny tensors "
        "(PASS/MISS).",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the tensors live (default: cpu)",
    )
    parser.add_argument(
        "--number",
        type=positive_int,
        default=None,
        help="calls per sample (default: calibrated to --sample-ms)",
    )
    parser.add_argument(
        "--inference-mode",
        action="store_true",
        help="create the tensors and time the calls under torch.inference_mode(), as vLLM "
        "runs its models (no autograd dispatch; default: grad mode on, as a plain script)",
    )
    parser.add_argument(
        "--implementation-index",
        type=int,
        default=None,
        help="pin the polyops slot (default: the selection policy's choice)",
    )
    add_run_arguments(
        parser,
        __file__,
        repeats=(5, 21),
        sample_ms=(5.0, 20.0),
        quick_help="smoke test: 5 repeats of ~5 ms samples",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON; always returns 0."""
    args = parse_args(argv)
    with torch.inference_mode() if args.inference_mode else contextlib.nullcontext():
        return _run(args)


def _torch_ops_form() -> str:
    """Which module serves torch.ops.polyops (docs/user/torch.md, "Torch versions")."""
    if not polyops.torch_ops_registered():
        return "none"
    return "stable" if polyops._torch_library._stable else "torch_ops"


def _run(args: argparse.Namespace) -> int:
    target_s = args.sample_ms / 1e3
    print(
        f"polyops {polyops.__version__} | torch {torch.__version__} | "
        f"torch threads {torch.get_num_threads()} | load {load_average()} | "
        f"device {args.device} |\n"
        f"torch.ops form {_torch_ops_form()} | inference mode {args.inference_mode} | "
        f"repeats {args.repeats} | "
        f"sample ~{args.sample_ms:g} ms"
    )
    print()

    groups: list[dict[str, Any]] = []
    rows: list[list[str]] = []
    benches = [
        ("add", bench_add, "polyops.add(out=)"),
        ("add", bench_torch_ops_add, "torch.ops.polyops.add(out=)"),
        ("add", bench_torch_ops_add_functional, "torch.ops.polyops.add.default"),
        ("rms_norm", bench_rms_norm, "polyops.rms_norm(out=)"),
        ("rms_norm", bench_rms_norm_allocating, "polyops.rms_norm"),
    ]
    if _torch_ops_form() == "torch_ops":
        # Both read paths exist only under the build's torch: the portable one's cost,
        # measured here, is the floor of polyops.add(out=) under any other torch.
        benches.insert(1, ("add", bench_add_read_paths, PORTABLE_READS))
    if not polyops.torch_ops_registered():
        print("torch.ops.polyops is not registered: its rows are left out\n")
        benches = [b for b in benches if not b[2].startswith("torch.ops.")]
    for op, bench, candidate in benches:
        for shape in SHAPES:
            timings = bench(
                shape,
                repeats=args.repeats,
                number=args.number,
                target_s=target_s,
                implementation_index=args.implementation_index,
                device=args.device,
            )
            mine = timings[candidate]
            comparisons = []
            for name, ref in timings.items():
                if name == candidate:
                    continue
                ratio = paired_ratio(mine, ref)
                target = TARGETS[args.device].get((candidate, name))
                targeted = target is not None
                result = verdict(ratio <= target) if targeted else "-"
                rows.append(
                    [
                        op,
                        "x".join(map(str, shape)),
                        candidate,
                        f"{mine.median * 1e6:.3f}",
                        name,
                        f"{ref.median * 1e6:.3f}",
                        f"{ratio:.2f}x",
                        f"<= {target:g}x" if targeted else "-",
                        result,
                        f"{max(mine.spread, ref.spread) * 100:.0f}%",
                    ]
                )
                comparisons.append(
                    {
                        "reference": name,
                        "ratio": ratio,
                        "ratio_of_medians": mine.median / ref.median,
                        "target": target,
                        "result": result if targeted else None,
                    }
                )
            groups.append(
                {
                    "op": op,
                    "shape": list(shape),
                    "dtype": "float32",
                    "device": args.device,
                    "candidate": candidate,
                    "timings": {name: t.as_dict() for name, t in timings.items()},
                    "comparisons": comparisons,
                }
            )

    print_table(
        [
            "op",
            "shape",
            "candidate",
            "us",
            "reference",
            "ref us",
            "ratio",
            "target",
            "result",
            "noise",
        ],
        rows,
    )
    loop = measure({"empty loop": timeit.Timer("pass")}, repeats=args.repeats, target_s=target_s)
    loop_s = loop["empty loop"].median
    print(
        "us = median microseconds per call; ratio = median of per-repeat polyops/reference; "
        "noise = larger IQR/median of the pair."
    )
    print(f"Timing-loop overhead (included in every figure): {loop_s * 1e9:.1f} ns per call.")
    path = write_json(
        args.json,
        {
            "benchmark": "host_overhead",
            "settings": {
                "repeats": args.repeats,
                "number": args.number,
                "sample_ms": args.sample_ms,
                "implementation_index": args.implementation_index,
                "device": args.device,
                "inference_mode": args.inference_mode,
                "quick": args.quick,
            },
            "torch": torch.__version__,
            "torch_ops_form": _torch_ops_form(),
            "targets": [
                {"candidate": candidate, "reference": reference, "max_ratio": ratio}
                for (candidate, reference), ratio in TARGETS[args.device].items()
            ],
            "groups": groups,
            "loop_overhead_s": loop_s,
        },
    )
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
