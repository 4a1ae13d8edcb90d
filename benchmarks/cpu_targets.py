"""polyops' CPU speed targets in one run: every figure with its ratio, target and verdict.

Runs one after another, each in its own process with the same thread count:

* ``memory_bound.py --ops rms_norm,add_rms_norm,causal_softmax,mul --dtypes f32,f16,bf16``:
  the row ops and ``mul`` against ``y.copy_(x)``'s bandwidth;
* ``gemm.py``: matmul / gemm / linear against torch at the decode shapes (m = 1, 8, 32,
  n = k = 4096), 1024^3 and 4096 x 11008 x 4096, float32 and bfloat16, with the CPU path
  that ran (``--no-large`` skips the last shape);
* ``attention.py``: flash_attention prefill (B1 T1024 H32 D128 causal, and two more
  shapes) against SDPA, paged_attention decode against gather + SDPA;
* ``examples/decoder_layer.py --dtype bfloat16`` and ``--dtype float32``: the layer and
  sampler against the best stock-torch version of the same dtype (causal SDPA per prefill
  sequence, one batched paged-KV gather + SDPA for decode: the example's ``BASELINE``);
  the case shows the min-max of the ratio over the example's runs.

Each script measures its two sides interleaved in one process (ratios, not absolute
times, are what compare on a shared machine); this script reads their JSON and prints
one table. Exit status 0 whatever the verdicts (1 if a script failed to run).

    python benchmarks/cpu_targets.py --threads 2
    python benchmarks/cpu_targets.py --threads 2 --quick   # smoke test (small shapes)
    python benchmarks/cpu_targets.py --threads 2 --autotune   # + the products' autotune picks
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _common import add_json_argument, positive_int, write_json

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"
ISSUE_OPS = "rms_norm,add_rms_norm,causal_softmax,mul"


def _run(name: str, command: list[str], threads: int, log: list[str]) -> bool:
    """Run one script with inherited output and `threads` OpenMP threads; True on exit 0."""
    print(f"\n=== {name}: {' '.join(command)}", flush=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    done = subprocess.run(command, cwd=ROOT, env=env, check=False)
    if done.returncode != 0:
        log.append(f"{name} exited {done.returncode}")
    return done.returncode == 0


def _rows(results: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per figure: area, case, measured ratio, target, verdict, path."""
    rows: list[dict[str, Any]] = []
    memory = results.get("memory_bound")
    if memory:
        for e in memory["entries"]:
            rows.append(
                {
                    "area": "row ops",
                    "case": f"{e['op']} {e['dtype']} {e['shape']}",
                    "ratio": e["ratio_to_copy"],
                    "of": "x copy_",
                    "target": e["target"],
                    "result": e["result"],
                    "path": "",
                }
            )
    gemm = results.get("gemm")
    if gemm:
        for c in gemm["cases"]:
            rows.append(
                {
                    "area": f"gemm {c['group']}",
                    "case": f"{c['op']} {c['dtype']} {c['m']}x{c['n']}x{c['k']}",
                    "ratio": c["ratio_torch_over_polyops"],
                    "of": f"x {c['reference']}",
                    "target": c["target"],
                    "result": c["result"],
                    # The path that ran; under --autotune, the pick of the measured choice.
                    "path": c.get("polyops_path", "")
                    + (" (autotune)" if c.get("requested_path") == "autotune" else ""),
                }
            )
    attention = results.get("attention")
    if attention:
        for e in attention["entries"]:
            if not e.get("available", True):
                continue
            rows.append(
                {
                    "area": f"attention {e['kind']}",
                    "case": f"{e['case']} {e['dtype']}",
                    "ratio": e["ratio"],
                    "of": f"x {e['reference']}",
                    "target": e["target"],
                    "result": e["result"],
                    "path": e.get("path", ""),
                }
            )
    for dtype in ("bfloat16", "float32"):
        layer = results.get(f"decoder_{dtype}")
        if layer:
            rows.append(
                {
                    "area": "decoder layer",
                    "case": f"{dtype} vs SDPA+gather torch, "
                    f"{layer['speedup_min']:.2f}-{layer['speedup_max']:.2f}",
                    "ratio": layer["speedup"],
                    "of": f"x stock torch {dtype}",
                    "target": layer["target"],
                    "result": layer["result"] if layer["errors_ok"] else "ERROR",
                    "path": "",
                }
            )
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    """Run the four benchmarks, print one table, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--threads", type=positive_int, default=2, help="threads of every run (default 2)"
    )
    parser.add_argument("--quick", action="store_true", help="smoke test: small shapes")
    parser.add_argument("--no-large", action="store_true", help="gemm without 4096x11008x4096")
    parser.add_argument(
        "--autotune",
        action="store_true",
        help="also time each product with POLYOPS_AUTOTUNE's measured path choice (its own "
        "rows; the path column shows the pick)",
    )
    add_json_argument(parser, __file__)
    args = parser.parse_args(argv)
    common = ["--threads", str(args.threads)] + (["--quick"] if args.quick else [])
    failures: list[str] = []
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        runs: list[tuple[str, list[str]]] = [
            (
                "memory_bound",
                [str(BENCH / "memory_bound.py"), "--ops", ISSUE_OPS, "--dtypes", "f32,f16,bf16"]
                + common,
            ),
            (
                "gemm",
                [str(BENCH / "gemm.py")]
                + common
                + (["--no-large"] if args.no_large else [])
                + (["--paths", "auto,autotune"] if args.autotune else []),
            ),
            ("attention", [str(BENCH / "attention.py")] + common),
        ]
        for name, command in runs:
            path = out / f"{name}.json"
            command = [sys.executable, *command, "--json", str(path)]
            if _run(name, command, args.threads, failures):
                results[name] = json.loads(path.read_text())
        layer_args = ["--seq-lens", "1,7,64", "--decode-steps", "2"] if args.quick else []
        for dtype in ("bfloat16", "float32"):
            path = out / f"decoder_{dtype}.json"
            command = [
                sys.executable,
                str(ROOT / "examples" / "decoder_layer.py"),
                "--dtype",
                dtype,
                "--json",
                str(path),
                *layer_args,
            ]
            if _run(f"decoder layer {dtype}", command, args.threads, failures):
                results[f"decoder_{dtype}"] = json.loads(path.read_text())

    rows = _rows(results)
    note = " (quick: not comparable with the targets)" if args.quick else ""
    print(f"\npolyops CPU targets, {args.threads} threads{note}")
    header = f"{'area':<18} {'case':<40} {'measured':>22} {'target':>7}  verdict  path"
    print(header)
    print("-" * len(header))
    for r in rows:
        measured = f"{r['ratio']:.2f} {r['of']}"
        print(
            f"{r['area']:<18} {r['case']:<40} {measured:>22} {r['target']:>7.2f}  "
            f"{r['result']:<7}  {r['path']}"
        )
    missed = [r for r in rows if r["result"] != "PASS"]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} PASS" + "".join(f"; {f}" for f in failures))
    path = write_json(
        args.json,
        {
            "benchmark": "cpu_targets",
            "settings": {"threads": args.threads, "quick": args.quick},
            "rows": rows,
            "runs": results,
            "failures": failures,
        },
    )
    print(f"JSON: {path}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
