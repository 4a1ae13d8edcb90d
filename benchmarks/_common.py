"""Shared helpers for the polyops benchmark scripts: timing, tables and JSON output.

The timing model is the one both scripts rely on:

* A *sample* is one loop of ``number`` back-to-back calls, timed with
  :func:`time.perf_counter` (through :class:`timeit.Timer`, which also turns the
  garbage collector off while the loop runs). Its figure is seconds per call.
* Several candidates are measured *interleaved*: repeat 0 takes one sample of
  A, then B, then C; repeat 1 takes B, C, A; and so on (the order rotates so
  no candidate always runs first). Slow drift of a shared, noisy machine then
  hits every candidate alike.
* The reported figure is the median over ``repeats`` samples. Ratios between
  two candidates are taken per repeat (adjacent samples) and then the median,
  which cancels drift better than a ratio of two medians.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import statistics
import sys
import timeit
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where the scripts write their JSON unless ``--json`` says otherwise.
RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: Something :func:`measure` can time: a zero-argument callable or a ready timer.
Timeable = Callable[[], object] | timeit.Timer


def call_timer(fn: Callable[..., object], /, *args: Any, **kwargs: Any) -> timeit.Timer:
    """A :class:`timeit.Timer` whose loop body is exactly ``fn(*args, **kwargs)``.

    The statement is compiled into timeit's loop, so no wrapper frame (lambda,
    ``functools.partial``) or argument unpacking is added to the call being
    measured; what is timed is what a user's own Python line would cost.
    """
    namespace: dict[str, Any] = {"_fn": fn}
    parts: list[str] = []
    for i, value in enumerate(args):
        namespace[f"_a{i}"] = value
        parts.append(f"_a{i}")
    for key, value in kwargs.items():
        if not key.isidentifier():
            raise ValueError(f"call_timer: keyword {key!r} is not an identifier")
        namespace[f"_k_{key}"] = value
        parts.append(f"{key}=_k_{key}")
    return timeit.Timer(f"_fn({', '.join(parts)})", globals=namespace)


def _as_timer(candidate: Timeable) -> timeit.Timer:
    return candidate if isinstance(candidate, timeit.Timer) else timeit.Timer(candidate)


@dataclass
class Timing:
    """The samples of one candidate: seconds per call, one entry per repeat."""

    name: str
    number: int
    samples: list[float]

    @property
    def median(self) -> float:
        """Median seconds per call over the repeats."""
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        """Fastest sample, seconds per call."""
        return min(self.samples)

    @property
    def spread(self) -> float:
        """Interquartile range relative to the median (0.05 = 5 %); 0 with < 2 samples."""
        if len(self.samples) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.samples, n=4, method="inclusive")
        return (q3 - q1) / self.median

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready summary (seconds) including the raw samples."""
        return {
            "number": self.number,
            "median_s": self.median,
            "best_s": self.best,
            "spread": self.spread,
            "samples_s": self.samples,
        }


def paired_ratio(numerator: Timing, denominator: Timing) -> float:
    """Median over repeats of ``numerator[r] / denominator[r]`` (samples taken side by side)."""
    if len(numerator.samples) != len(denominator.samples):
        raise ValueError("paired_ratio: both timings need the same number of repeats")
    return statistics.median(
        n / d for n, d in zip(numerator.samples, denominator.samples, strict=True)
    )


def calibrate(timer: timeit.Timer, target_s: float, max_number: int = 10_000_000) -> int:
    """Calls per sample so that one sample lasts about `target_s` seconds (at least 1).

    Runs the timer with 1, 10, 100, ... calls until a loop lasts a tenth of the
    target, then scales; the loops double as warm-up.
    """
    number = 1
    while True:
        elapsed = timer.timeit(number)
        if elapsed >= target_s / 10 or number >= max_number:
            break
        number *= 10
    per_call = max(elapsed / number, 1e-12)
    return max(1, min(max_number, math.ceil(target_s / per_call)))


def measure(
    candidates: Mapping[str, Timeable],
    *,
    repeats: int,
    number: int | Mapping[str, int] | None = None,
    target_s: float = 0.05,
    warmup: int = 3,
) -> dict[str, Timing]:
    """Time each candidate: median of `repeats` samples of a loop of N calls, interleaved.

    Args:
        candidates: name -> zero-argument callable or :func:`call_timer` timer.
            With more than one, samples are interleaved (rotating order).
        repeats: samples per candidate.
        number: calls per sample, for all candidates or per name; ``None``
            (or a missing name) calibrates each candidate to about `target_s`
            seconds per sample.
        target_s: wanted sample duration when calibrating.
        warmup: untimed calls of each candidate before anything else (first-call
            costs: instance caches, allocator, page faults).

    Returns:
        name -> :class:`Timing`, in the order of `candidates`.
    """
    if repeats < 1:
        raise ValueError("measure: repeats must be >= 1")
    timers = {name: _as_timer(c) for name, c in candidates.items()}
    for timer in timers.values():
        if warmup > 0:
            timer.timeit(warmup)
    numbers: dict[str, int] = {}
    for name, timer in timers.items():
        fixed = number.get(name) if isinstance(number, Mapping) else number
        numbers[name] = fixed if fixed is not None else calibrate(timer, target_s)
    names = list(timers)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            n = numbers[name]
            samples[name].append(timers[name].timeit(n) / n)
    return {name: Timing(name, numbers[name], samples[name]) for name in names}


def _looks_numeric(cell: str) -> bool:
    text = cell.strip().rstrip("x%").replace(",", "")
    try:
        float(text)
    except ValueError:
        return text in {"", "-"}
    return True


def format_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> str:
    """Render rows as aligned text columns with a header rule.

    `align` is one character per column, ``"l"`` or ``"r"``; by default a column
    whose cells all look numeric (``"1.23"``, ``"0.41x"``, ``"-"``) is
    right-aligned and every other column left-aligned.
    """
    cells = [[str(c) for c in row] for row in rows]
    width = len(headers)
    if any(len(row) != width for row in cells):
        raise ValueError("format_table: every row needs one cell per header")
    if align is None:
        align = "".join(
            "r" if cells and all(_looks_numeric(row[i]) for row in cells) else "l"
            for i in range(width)
        )
    if len(align) != width:
        raise ValueError("format_table: align needs one character per column")
    widths = [max(len(str(h)), *(len(row[i]) for row in cells)) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        out = [
            v.rjust(w) if a == "r" else v.ljust(w)
            for v, w, a in zip(values, widths, align, strict=True)
        ]
        return "  ".join(out).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line([str(h) for h in headers]), rule, *(line(row) for row in cells)])


def print_table(
    headers: Sequence[str], rows: Sequence[Sequence[object]], align: str | None = None
) -> None:
    """Print :func:`format_table` followed by a blank line."""
    print(format_table(headers, rows, align))
    print()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for entry in f:
                if entry.startswith("model name"):
                    return entry.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (other work on a shared machine skews timings)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def machine_info() -> dict[str, Any]:
    """Facts that make a result comparable: versions, threads, CPU, platform, time."""
    import torch

    try:
        import polyops

        polyops_version = getattr(polyops, "__version__", "unknown")
        polyops_path = str(Path(polyops.__file__).resolve().parent)
        extension = Path(polyops._C.__file__).resolve()
        polyops_extension: dict[str, Any] | None = {
            "path": str(extension),
            "mtime": datetime.datetime.fromtimestamp(
                extension.stat().st_mtime, datetime.timezone.utc
            ).isoformat(timespec="seconds"),
        }
    except (ImportError, AttributeError, OSError):
        polyops_version, polyops_path, polyops_extension = None, None, None
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = None
    return {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": affinity,
        "load_average": load_average(),
        "torch_version": torch.__version__,
        "torch_num_threads": torch.get_num_threads(),
        "torch_num_interop_threads": torch.get_num_interop_threads(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
        "polyops_version": polyops_version,
        "polyops_path": polyops_path,
        "polyops_extension": polyops_extension,
        "argv": sys.argv,
    }


def write_json(path: str | os.PathLike[str], payload: Mapping[str, Any]) -> Path:
    """Write `payload` plus a ``"machine"`` entry (:func:`machine_info`) as JSON; return the path.

    Parent folders are created as needed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    document = {**payload, "machine": machine_info()}
    target.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return target


def default_json_path(script: str) -> Path:
    """``benchmarks/results/<script>.json`` next to this file, whatever the cwd."""
    return RESULTS_DIR / f"{Path(script).stem}.json"


def add_json_argument(parser: argparse.ArgumentParser, script: str) -> None:
    """Add ``--json PATH`` with the default :func:`default_json_path` for `script`."""
    default = default_json_path(script)
    parser.add_argument(
        "--json",
        type=Path,
        default=default,
        metavar="PATH",
        help=f"where to write the JSON results (default: {default})",
    )


def add_run_arguments(
    parser: argparse.ArgumentParser,
    script: str,
    *,
    repeats: tuple[int, int],
    sample_ms: tuple[float, float],
    quick_help: str,
    threads_help: str | None = None,
) -> None:
    """Add the options every script shares: ``--repeats``, ``--sample-ms``, ``--threads``
    (when `threads_help` is given), ``--quick`` and ``--json``.

    `repeats` and `sample_ms` are the (``--quick``, normal) defaults that
    :func:`finish_run_arguments` fills in after parsing.
    """
    parser.set_defaults(run_defaults={"repeats": repeats, "sample_ms": sample_ms})
    parser.add_argument(
        "--repeats",
        type=positive_int,
        default=None,
        help=f"samples per candidate (default {repeats[1]}; --quick: {repeats[0]})",
    )
    parser.add_argument(
        "--sample-ms",
        type=float,
        default=None,
        help="wanted duration of one sample, calls per sample are calibrated to it "
        f"(default {sample_ms[1]:g} ms; --quick: {sample_ms[0]:g} ms)",
    )
    if threads_help is not None:
        parser.add_argument("--threads", type=positive_int, default=None, help=threads_help)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    add_json_argument(parser, script)


def finish_run_arguments(args: argparse.Namespace) -> argparse.Namespace:
    """Fill ``--repeats`` / ``--sample-ms`` from the ``--quick`` choice; apply ``--threads``."""
    which = 0 if args.quick else 1
    for name, defaults in args.run_defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, defaults[which])
    if getattr(args, "threads", None) is not None:
        import torch  # the scripts import torch anyway; this module need not

        torch.set_num_threads(args.threads)
    return args


def dtype_list(table: Mapping[str, Any]) -> Callable[[str], list[str]]:
    """An argparse type for ``--dtypes``: comma-separated names, short (``f32``, ``bf16``)
    or torch's (``float32``, ``bfloat16``), read by polyops' one dtype-name parser
    (polyops.testing.tensors.parse_dtypes), as the keys of `table` (short name ->
    torch dtype) in the order given."""

    def parse(text: str) -> list[str]:
        from polyops.testing.tensors import SHORT_NAMES, parse_dtypes

        try:
            return [SHORT_NAMES[d] for d in parse_dtypes(text, list(table.values()))]
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text}")
    return value


def verdict(ok: bool) -> str:
    """``"PASS"`` or ``"MISS"``."""
    return "PASS" if ok else "MISS"
