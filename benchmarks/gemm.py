"""Throughput of polyops.matmul / gemm / linear against torch's CPU equivalents.

For each case (op, dtype, m x n x k) measures in one process, interleaved, on
the same tensors:

* ``polyops.matmul(a, b, out=o)`` against ``torch.matmul(a, b, out=o_ref)``,
  a [m, k], b [k, n];
* ``polyops.gemm(a, b, c, alpha=0.5, beta=2.0, out=o)`` against
  ``torch.addmm(c, a, b, beta=2.0, alpha=0.5, out=o_ref)``, c [m, n];
* ``polyops.linear(x, w, bias, out=o)`` against
  ``torch.nn.functional.linear(x, w, bias)`` (torch has no ``out=`` there, so
  its figure includes allocating the result), x [m, k], w [n, k], bias [n].

Cases: float32 at 1024^3 (m = n = k = 1024), bfloat16 at 1024^3 as an extra
row without a target, and float32 at 4096^3 only with ``--large`` (about a
second per call on a small machine). Every candidate is checked against torch
before anything is timed.

GFLOP/s = 2 * m * n * k / median seconds per call / 1e9 (the alpha/beta/bias
terms are not counted). "ratio" = median over repeats of torch_time /
polyops_time (samples taken side by side), so > 1 means polyops is faster.

Target (from the issue): float32 ratio >= 0.9 for each op; printed as
PASS/MISS (exit status stays 0). polyops calls OpenBLAS, which has its own
thread pool (OPENBLAS_NUM_THREADS), while torch uses its OpenMP pool
(``--threads``); both default to all cores.

Usage::

    python benchmarks/gemm.py                  # f32 + bf16 at 1024^3, JSON to benchmarks/results/
    python benchmarks/gemm.py --quick          # smoke test (256^3, few repeats)
    python benchmarks/gemm.py --large          # adds float32 at 4096^3
    python benchmarks/gemm.py --repeats 11 --threads 1
"""

from __future__ import annotations

import argparse
import os
import sys
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

#: float32 polyops must reach at least this fraction of torch's speed (torch_time / polyops_time).
TARGET = 0.9
ALPHA = 0.5
BETA = 2.0
OPS = ("matmul", "gemm", "linear")
DTYPES: dict[str, torch.dtype] = {"f32": torch.float32, "bf16": torch.bfloat16}
REFERENCES = {
    "matmul": "torch.matmul(out=)",
    "gemm": "torch.addmm(out=)",
    "linear": "F.linear",
}


@dataclass(frozen=True)
class Case:
    """One benchmark configuration."""

    op: str
    dtype: str
    m: int
    n: int
    k: int
    targeted: bool

    @property
    def shape(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k


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
    size = args.size
    found = [Case(op, "f32", size, size, size, True) for op in OPS]
    if args.large:
        found += [Case(op, "f32", 4096, 4096, 4096, True) for op in OPS]
    if not args.no_bf16:
        found += [Case(op, "bf16", size, size, size, False) for op in OPS]
    return found


def bench_case(case: Case, *, repeats: int, target_s: float) -> dict[str, Any]:
    """Check, then time polyops and torch interleaved for one case."""
    mine_timer, ref_timer, check = build(case)
    check()
    mine_name = f"polyops.{case.op}(out=)"
    ref_name = REFERENCES[case.op]
    big = case.flops >= 2 * 4096**3
    timings = measure(
        {mine_name: mine_timer, ref_name: ref_timer},
        repeats=repeats,
        # One call per sample at 4096^3 (about a second each here); warm-up is the check.
        number=1 if big else None,
        target_s=target_s,
        warmup=1 if big else 3,
    )
    mine, ref = timings[mine_name], timings[ref_name]
    ratio = paired_ratio(ref, mine)
    return {
        "case": case,
        "mine": mine,
        "ref": ref,
        "ratio": ratio,
        "result": verdict(ratio >= TARGET) if case.targeted else None,
    }


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"Target: float32 torch_time / polyops_time >= {TARGET:g} per op (PASS/MISS).",
    )
    parser.add_argument(
        "--size",
        type=positive_int,
        default=None,
        help="m = n = k of the main cases (default 1024; --quick: 256)",
    )
    parser.add_argument(
        "--large", action="store_true", help="also float32 at 4096^3 (slow on small machines)"
    )
    parser.add_argument("--no-bf16", action="store_true", help="skip the bfloat16 extra rows")
    add_run_arguments(
        parser,
        __file__,
        repeats=(3, 7),
        sample_ms=(20.0, 200.0),
        quick_help="smoke test: 256^3, 3 repeats (figures not meaningful against the target)",
        threads_help="torch.set_num_threads(N) first (torch's pool only; OpenBLAS, which polyops "
        "uses, reads OPENBLAS_NUM_THREADS at load time)",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    if args.size is None:
        args.size = 256 if args.quick else 1024
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables, write the JSON; always returns 0."""
    args = parse_args(argv)
    cases = cases_for(args)
    print(
        f"polyops {polyops.__version__} | torch {torch.__version__} | "
        f"torch threads {torch.get_num_threads()} | "
        f"OPENBLAS_NUM_THREADS {os.environ.get('OPENBLAS_NUM_THREADS')} | "
        f"load {load_average()} |\n"
        f"repeats {args.repeats} | sample ~{args.sample_ms:g} ms | "
        f"slots {polyops.implementations('matmul')}"
    )
    print()

    results = [bench_case(c, repeats=args.repeats, target_s=args.sample_ms / 1e3) for c in cases]

    rows: list[list[str]] = []
    summary: list[list[str]] = []
    for r in results:
        case: Case = r["case"]
        mine: Timing = r["mine"]
        ref: Timing = r["ref"]
        rows.append(
            [
                case.op,
                case.dtype,
                case.shape,
                f"{mine.median * 1e3:.3f}",
                f"{case.flops / mine.median / 1e9:.1f}",
                REFERENCES[case.op],
                f"{ref.median * 1e3:.3f}",
                f"{case.flops / ref.median / 1e9:.1f}",
                f"{r['ratio']:.2f}x",
                f"{max(mine.spread, ref.spread) * 100:.0f}%",
            ]
        )
        if case.targeted:
            summary.append(
                [
                    case.op,
                    case.dtype,
                    case.shape,
                    f"{r['ratio']:.2f}x",
                    f">= {TARGET:g}x",
                    r["result"],
                ]
            )

    print_table(
        [
            "op",
            "dtype",
            "m x n x k",
            "polyops ms",
            "GFLOP/s",
            "torch reference",
            "torch ms",
            "GFLOP/s",
            "ratio",
            "noise",
        ],
        rows,
    )
    print_table(["op", "dtype", "m x n x k", "ratio", "target", "result"], summary)
    print(
        "ms = median per call; GFLOP/s = 2*m*n*k / median; ratio = median of per-repeat "
        "torch_time/polyops_time (> 1: polyops faster);\nnoise = larger IQR/median of the "
        "pair. bf16 rows have no target (polyops converts through float32 workspaces)."
    )
    if args.quick:
        print("Quick mode: small matrices; PASS/MISS here is only a smoke test.")

    path = write_json(
        args.json,
        {
            "benchmark": "gemm",
            "settings": {
                "size": args.size,
                "large": args.large,
                "bf16": not args.no_bf16,
                "repeats": args.repeats,
                "sample_ms": args.sample_ms,
                "alpha": ALPHA,
                "beta": BETA,
                "quick": args.quick,
                "threads": torch.get_num_threads(),
                "openblas_num_threads_env": os.environ.get("OPENBLAS_NUM_THREADS"),
                "slots": {str(k): v for k, v in polyops.implementations("matmul").items()},
            },
            "target": {"min_ratio_torch_over_polyops": TARGET, "dtype": "f32"},
            "cases": [
                {
                    "op": r["case"].op,
                    "dtype": r["case"].dtype,
                    "m": r["case"].m,
                    "n": r["case"].n,
                    "k": r["case"].k,
                    "flops": r["case"].flops,
                    "reference": REFERENCES[r["case"].op],
                    "ratio_torch_over_polyops": r["ratio"],
                    "target": TARGET if r["case"].targeted else None,
                    "result": r["result"],
                    "polyops": {
                        "gflops": r["case"].flops / r["mine"].median / 1e9,
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
