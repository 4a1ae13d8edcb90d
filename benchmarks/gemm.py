"""Throughput of polyops.matmul / gemm / linear against torch's CPU equivalents.

For each case (op, dtype, m x n x k) measures in one process, interleaved, on
the same tensors:

* ``polyops.matmul(a, b, out=o)`` against ``torch.matmul(a, b, out=o_ref)``,
  a [m, k], b [k, n] (b row-major: the kernels' "pair"/"axpy" form);
* ``polyops.gemm(a, b, c, alpha=0.5, beta=2.0, out=o)`` against
  ``torch.addmm(c, a, b, beta=2.0, alpha=0.5, out=o_ref)``, c [m, n];
* ``polyops.linear(x, w, bias, out=o)`` against
  ``torch.nn.functional.linear(x, w, bias)`` (torch has no ``out=`` there, so
  its figure includes allocating the result), x [m, k], w [n, k], bias [n]
  (w is the column-major b of the kernels' "dot" form).

Cases, float32 and bfloat16 each (the targets of docs/backends/cpu_gemm.md):

* decode: matmul and linear with m = 1, 8, 32 tokens, n = k = 4096;
* square: matmul, gemm and linear at 1024^3;
* llama-mlp: matmul and linear at m x n x k = 4096 x 11008 x 4096 (a Llama
  MLP up-projection over 4096 tokens; about 2 s per float32 call on 2
  cores), skipped by ``--no-large``.

Every candidate is checked against torch before anything is timed, and the
"path" column says which polyops CPU path ran: ``onednn`` (oneDNN's matmul;
the header prints its version and effective ISA), ``bf16-dot`` /
``bf16-pair`` / ``bf16-packed`` (own AVX512-BF16 kernels), ``f32-dot`` /
``f32-axpy`` / ``f32-packed`` (own AVX-512F kernels) or ``openblas`` (sgemm;
see docs/backends/cpu_gemm.md).

``--paths auto,onednn`` times polyops once per value of ``POLYOPS_CPU_GEMM``
(``auto``, ``onednn``, ``own``, ``openblas``, and ``autotune``: auto with the
measured choice on, whose row shows the path it picked), all interleaved with
torch in one measurement, so one run shows e.g. the own kernels and oneDNN
side by side against torch; each gets its own row and ratio.

GFLOP/s = 2 * m * n * k / median seconds per call / 1e9 (the alpha/beta/bias
terms are not counted); GB/s = bytes of a, b and out / median seconds (what
bounds the decode rows). "ratio" = median over repeats of torch_time /
polyops_time (samples taken side by side), so > 1 means polyops is faster.

Target: ratio >= 0.9 for every case, printed as PASS/MISS (exit status
stays 0). Both libraries use ``--threads`` threads (default: all cores);
polyops' OpenBLAS calls follow the same count.

Usage::

    python benchmarks/gemm.py                  # every case above, JSON to benchmarks/results/
    python benchmarks/gemm.py --quick          # smoke test (m <= 8, n = k = 512; few repeats)
    python benchmarks/gemm.py --no-large       # without the 4096 x 11008 x 4096 rows
    python benchmarks/gemm.py --repeats 11 --threads 2
    python benchmarks/gemm.py --paths auto,onednn --threads 2   # own kernels vs oneDNN
    python benchmarks/gemm.py --paths own,onednn --shape 64x4096x4096 --shape 512x512x512
"""

from __future__ import annotations

import argparse
import os
import sys
import timeit
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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

#: polyops must reach at least this fraction of torch's speed (torch_time / polyops_time).
TARGET = 0.9
ALPHA = 0.5
BETA = 2.0
OPS = ("matmul", "gemm", "linear")
DTYPES: dict[str, torch.dtype] = {"f32": torch.float32, "bf16": torch.bfloat16}
#: The values of POLYOPS_CPU_GEMM (src/cpu/kernels/gemm/blas_gemm.cc), and "autotune": auto with
#: polyops.autotune(True) (the measured choice, docs/backends/cpu_gemm.md "Autotune").
PATHS = ("auto", "onednn", "own", "openblas", "autotune")
REFERENCES = {
    "matmul": "torch.matmul(out=)",
    "gemm": "torch.addmm(out=)",
    "linear": "F.linear",
}


@dataclass(frozen=True)
class Case:
    """One benchmark configuration."""

    group: str
    op: str
    dtype: str
    m: int
    n: int
    k: int

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    @property
    def bytes(self) -> int:
        """Bytes of a, b and out, each touched once (the decode rows' memory floor)."""
        size = DTYPES[self.dtype].itemsize
        return size * (self.m * self.k + self.k * self.n + self.m * self.n)


class PathTimer(timeit.Timer):
    """A timer that runs `inner` with ``POLYOPS_CPU_GEMM=path`` (read per call by polyops).

    The variable is set around each timed loop, not per call, so the loop
    body is still exactly the polyops call.
    """

    def __init__(self, inner: timeit.Timer, path: str) -> None:  # noqa: D107
        self.inner = inner
        self.path = path

    def timeit(self, number: int = 1_000_000) -> float:
        with forced_path(self.path):
            return self.inner.timeit(number)


class forced_path:  # noqa: N801  (used like a function)
    """Context manager: ``POLYOPS_CPU_GEMM=path`` inside (``autotune``: ``auto`` with
    ``polyops.autotune(True)``), the previous settings after."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> None:
        self.saved = os.environ.get("POLYOPS_CPU_GEMM")
        self.saved_autotune = polyops.autotune()
        os.environ["POLYOPS_CPU_GEMM"] = "auto" if self.path == "autotune" else self.path
        polyops.autotune(self.path == "autotune")

    def __exit__(self, *exc: object) -> None:
        if self.saved is None:
            del os.environ["POLYOPS_CPU_GEMM"]
        else:
            os.environ["POLYOPS_CPU_GEMM"] = self.saved
        polyops.autotune(self.saved_autotune)


def onednn_summary() -> str:
    """oneDNN's version and effective ISA, or why it is not available."""
    info = polyops._C._onednn_info()
    if not info["available"]:
        return f"oneDNN unavailable ({info['reason']})"
    return f"oneDNN {info['version']} isa {info['isa']} (AMX: {info['amx']}) from {info['library']}"


def build(case: Case) -> tuple[Callable[[], object], Callable[[], object], Callable[[], Any]]:
    """Tensors for `case`; returns (polyops timer, torch timer, correctness check)."""
    dtype = DTYPES[case.dtype]
    gen = torch.Generator().manual_seed(0)
    m, n, k = case.m, case.n, case.k
    out = torch.empty(m, n, dtype=dtype)
    out_ref = torch.empty(m, n, dtype=dtype)
    if case.op == "matmul":
        a = torch.randn(m, k, generator=gen).to(dtype)
        b = torch.randn(k, n, generator=gen).to(dtype)
        mine = call_timer(polyops.matmul, a, b, out=out)
        ref = call_timer(torch.matmul, a, b, out=out_ref)

        def expected() -> torch.Tensor:
            return torch.matmul(a, b)

        def got() -> torch.Tensor:
            return polyops.matmul(a, b)

    elif case.op == "gemm":
        a = torch.randn(m, k, generator=gen).to(dtype)
        b = torch.randn(k, n, generator=gen).to(dtype)
        c = torch.randn(m, n, generator=gen).to(dtype)
        mine = call_timer(polyops.gemm, a, b, c, alpha=ALPHA, beta=BETA, out=out)
        ref = call_timer(torch.addmm, c, a, b, beta=BETA, alpha=ALPHA, out=out_ref)

        def expected() -> torch.Tensor:
            return torch.addmm(c, a, b, beta=BETA, alpha=ALPHA)

        def got() -> torch.Tensor:
            return polyops.gemm(a, b, c, alpha=ALPHA, beta=BETA)

    elif case.op == "linear":
        x = torch.randn(m, k, generator=gen).to(dtype)
        w = torch.randn(n, k, generator=gen).to(dtype)
        bias = torch.randn(n, generator=gen).to(dtype)
        mine = call_timer(polyops.linear, x, w, bias, out=out)
        ref = call_timer(torch.nn.functional.linear, x, w, bias)

        def expected() -> torch.Tensor:
            return torch.nn.functional.linear(x, w, bias)

        def got() -> torch.Tensor:
            return polyops.linear(x, w, bias)

    else:
        raise ValueError(f"unknown op {case.op!r}")

    def check() -> None:
        # Entries are sums of k products of N(0, 1) values: |.| ~ sqrt(k).
        scale = case.k**0.5
        if dtype == torch.float32:
            rtol, atol = 1e-4, 1e-5 * scale
        else:  # bf16 output: one rounding of an f32 sum (torch may round differently)
            rtol, atol = 1.6e-2, 1e-2 * scale
        torch.testing.assert_close(got(), expected(), rtol=rtol, atol=atol)

    return mine, ref, check


def cases_for(args: argparse.Namespace) -> list[Case]:
    """The cases to run for the command line."""
    dtypes = [dt for dt in DTYPES if not getattr(args, f"no_{dt}")]
    if args.shape:
        return [
            Case("custom", op, dt, m, n, k)
            for dt in dtypes
            for (m, n, k) in args.shape
            for op in OPS
        ]
    decode_nk = 512 if args.quick else 4096
    decode_ms = (1, 8) if args.quick else (1, 8, 32)
    size = args.size
    found = [
        Case("decode", op, dt, m, decode_nk, decode_nk)
        for dt in dtypes
        for op in ("linear", "matmul")
        for m in decode_ms
    ]
    found += [Case("square", op, dt, size, size, size) for dt in dtypes for op in OPS]
    if not (args.quick or args.no_large):
        found += [
            Case("llama-mlp", op, dt, 4096, 11008, 4096)
            for dt in dtypes
            for op in ("linear", "matmul")
        ]
    return found


def bench_case(
    case: Case, *, paths: Sequence[str], repeats: int, target_s: float
) -> list[dict[str, Any]]:
    """Check, then time polyops (once per POLYOPS_CPU_GEMM value) and torch interleaved."""
    mine_timer, ref_timer, check = build(case)
    ran: dict[str, str] = {}
    for path in paths:
        with forced_path(path):
            check()
            ran[path] = polyops._C._cpu_gemm_path()
    names = {path: f"polyops.{case.op}(out=) [{path}]" for path in paths}
    ref_name = REFERENCES[case.op]
    big = case.flops >= 2 * 2048**3
    timings = measure(
        {**{names[p]: PathTimer(mine_timer, p) for p in paths}, ref_name: ref_timer},
        repeats=repeats,
        # One call per sample for the large cases (seconds each); warm-up is the check.
        number=1 if big else None,
        target_s=target_s,
        warmup=1 if big else 3,
    )
    ref = timings[ref_name]
    results = []
    for path in paths:
        mine = timings[names[path]]
        ratio = paired_ratio(ref, mine)
        results.append(
            {
                "case": case,
                "requested": path,
                "path": ran[path],
                "mine": mine,
                "ref": ref,
                "ratio": ratio,
                "result": verdict(ratio >= TARGET),
            }
        )
    return results


def parse_shape(text: str) -> tuple[int, int, int]:
    """``"64x4096x4096"`` -> (64, 4096, 4096), each >= 1."""
    parts = text.lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"expected MxNxK with positive sizes, got {text!r}")
    m, n, k = (int(p) for p in parts)
    return m, n, k


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"Target: torch_time / polyops_time >= {TARGET:g} per case (PASS/MISS).",
    )
    parser.add_argument(
        "--size",
        type=positive_int,
        default=None,
        help="m = n = k of the square cases (default 1024; --quick: 256)",
    )
    parser.add_argument(
        "--no-large",
        action="store_true",
        help="skip the 4096 x 11008 x 4096 rows (seconds per call on small machines)",
    )
    parser.add_argument("--no-f32", action="store_true", help="skip the float32 rows")
    parser.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 rows")
    parser.add_argument(
        "--shape",
        type=parse_shape,
        action="append",
        default=[],
        metavar="MxNxK",
        help="run matmul, gemm and linear at this m x n x k instead of the standard cases "
        "(repeatable)",
    )
    parser.add_argument(
        "--paths",
        default="auto",
        help="comma-separated POLYOPS_CPU_GEMM values to time side by side "
        f"({', '.join(PATHS)}; default auto)",
    )
    add_run_arguments(
        parser,
        __file__,
        repeats=(3, 7),
        sample_ms=(20.0, 200.0),
        quick_help="smoke test: small shapes, 3 repeats (figures not meaningful against the "
        "target)",
        threads_help="torch.set_num_threads(N) first (polyops follows torch's OpenMP count, "
        "its OpenBLAS calls included)",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    if args.no_f32 and args.no_bf16:
        parser.error("--no-f32 and --no-bf16 leave no dtype to run")
    if args.size is None:
        args.size = 256 if args.quick else 1024
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in args.paths if p not in PATHS]
    if bad or not args.paths or len(set(args.paths)) != len(args.paths):
        parser.error(f"--paths: expected distinct values of {', '.join(PATHS)}, got {args.paths}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables, write the JSON; always returns 0."""
    args = parse_args(argv)
    cases = cases_for(args)
    print(
        f"polyops {polyops.__version__} | torch {torch.__version__} | "
        f"threads {torch.get_num_threads()} | load {load_average()} |\n"
        f"repeats {args.repeats} | sample ~{args.sample_ms:g} ms | "
        f"slots {polyops.implementations('matmul')} | POLYOPS_CPU_GEMM {','.join(args.paths)}\n"
        f"{onednn_summary()}"
    )
    print()

    results = []
    for c in cases:
        case_results = bench_case(
            c, paths=args.paths, repeats=args.repeats, target_s=args.sample_ms / 1e3
        )
        results += case_results
        summary = ", ".join(
            f"[{r['requested']}] {r['path']} {r['ratio']:.2f}x" for r in case_results
        )
        print(f"  {c.group} {c.op} {c.dtype} {c.shape}: {summary}", flush=True)
    print()

    rows: list[list[str]] = []
    for r in results:
        case: Case = r["case"]
        mine: Timing = r["mine"]
        ref: Timing = r["ref"]
        rows.append(
            [
                case.group,
                case.op,
                case.dtype,
                case.shape,
                r["requested"],
                r["path"],
                f"{mine.median * 1e3:.3f}",
                f"{case.flops / mine.median / 1e9:.1f}",
                f"{case.bytes / mine.median / 1e9:.1f}",
                f"{ref.median * 1e3:.3f}",
                f"{case.flops / ref.median / 1e9:.1f}",
                f"{r['ratio']:.2f}x",
                f"{max(mine.spread, ref.spread) * 100:.0f}%",
                r["result"],
            ]
        )

    print_table(
        [
            "case",
            "op",
            "dtype",
            "m x n x k",
            "requested",
            "polyops path",
            "polyops ms",
            "GFLOP/s",
            "GB/s",
            "torch ms",
            "GFLOP/s",
            "ratio",
            "noise",
            f"target >= {TARGET:g}x",
        ],
        rows,
    )
    print(
        "ms = median per call; GFLOP/s = 2*m*n*k / median; GB/s = bytes of a, b, out / median;\n"
        "ratio = median of per-repeat torch_time/polyops_time (> 1: polyops faster); noise = "
        "larger IQR/median of the pair.\ntorch references: "
        + ", ".join(f"{op}: {ref}" for op, ref in REFERENCES.items())
    )
    met = sum(r["result"] == "PASS" for r in results)
    print(f"{met} of {len(results)} cases meet the target.")
    if args.quick:
        print("Quick mode: small matrices; PASS/MISS here is only a smoke test.")

    path = write_json(
        args.json,
        {
            "benchmark": "gemm",
            "settings": {
                "size": args.size,
                "large": not (args.quick or args.no_large),
                "f32": not args.no_f32,
                "bf16": not args.no_bf16,
                "repeats": args.repeats,
                "sample_ms": args.sample_ms,
                "alpha": ALPHA,
                "beta": BETA,
                "quick": args.quick,
                "threads": torch.get_num_threads(),
                "slots": {str(k): v for k, v in polyops.implementations("matmul").items()},
                "paths": args.paths,
                "onednn": polyops._C._onednn_info(),
            },
            "target": {"min_ratio_torch_over_polyops": TARGET},
            "cases": [
                {
                    "group": r["case"].group,
                    "op": r["case"].op,
                    "dtype": r["case"].dtype,
                    "m": r["case"].m,
                    "n": r["case"].n,
                    "k": r["case"].k,
                    "flops": r["case"].flops,
                    "reference": REFERENCES[r["case"].op],
                    "requested_path": r["requested"],
                    "polyops_path": r["path"],
                    "ratio_torch_over_polyops": r["ratio"],
                    "target": TARGET,
                    "result": r["result"],
                    "polyops": {
                        "gflops": r["case"].flops / r["mine"].median / 1e9,
                        "gbytes_per_s": r["case"].bytes / r["mine"].median / 1e9,
                        **r["mine"].as_dict(),
                    },
                    "torch": {
                        "gflops": r["case"].flops / r["ref"].median / 1e9,
                        **r["ref"].as_dict(),
                    },
                }
                for r in results
            ],
        },
    )
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
