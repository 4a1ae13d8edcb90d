"""Memory bandwidth of polyops' memory-bound LLM ops against torch's copy bandwidth.

For each op and dtype (default float32 and bfloat16) measures in one process,
interleaved, on the same tensors:

* ``torch copy_``: ``dst.copy_(src)`` on contiguous 1-D tensors of the op's
  dtype sized so that the copy moves (read + write) the same number of bytes as
  the op: the bandwidth ceiling for that amount of traffic;
* the polyops op (writing into preallocated outputs or in place);
* the torch equivalent written with ordinary torch ops, for reference (it
  usually allocates temporaries; it is not part of the target).

Shapes (Llama-2-7B-like, 4096 tokens) and bytes moved per call, counted as
each tensor read once plus each output written once (s = itemsize):

* ``rms_norm``: x [4096, 4096] -> y, weight [4096], eps 1e-6 (``out=``).
  bytes = 2 * numel * s (read x, write y; the weight row is ignored).
  torch: ``F.rms_norm(x, (4096,), w, 1e-6)``.
* ``add_rms_norm``: x1, x2 [4096, 4096] -> y and the residual x = x1 + x2
  (``y_out=``, ``x_out=``). bytes = 4 * numel * s (read x1, x2, write y, x).
  torch: ``x = x1 + x2; F.rms_norm(x, ...)``.
* ``mul``: a * b, [4096, 4096] each (``out=``). bytes = 3 * numel * s.
  torch: ``torch.mul(a, b, out=y_ref)``.
* ``causal_softmax``: x [32, 1024, 1024] -> y, same shape.
  bytes = 2 * numel * s (read x, write y).
  torch: ``torch.softmax(x.masked_fill(mask, -inf), -1)`` with a [1024, 1024]
  bool mask of the keys above the diagonal.
* ``rotary_embedding``: T = 4096 tokens, query and key [T, 32 * 128], head size
  128, neox style, in place; cos_sin_cache [4096, 128] of the same dtype,
  positions int64 [T] = 0..T-1.
  bytes = 2 * (q + k bytes) + T * 128 * s (one cache row per token) + T * 8.
  torch: cos/sin gathered by position, halves rotated with mul/sub/add, copied
  back into q and k.
* ``silu_and_mul``: x [4096, 2 * 11008] -> y [4096, 11008].
  bytes = (2 * 11008 + 11008) * 4096 * s (read x, write y).
  torch: ``F.silu(x[..., :d]) * x[..., d:]``.
* ``silu_and_mul_vllm``: the same on silu_and_mul's "vllm" slot (silu rounded
  to the dtype before the multiply, vLLM's order).
* ``reshape_and_cache``: key/value [T = 4096, Hkv = 8, D = 128] into caches
  [num_blocks = 2 * T / 16, 16, 8, 128] through a random slot mapping (int64,
  distinct slots, half the cache used).
  bytes = 2 * (k + v bytes) + T * 8 (read k, v and the slots, write as many
  cache rows).
  torch: ``cache.view(-1, Hkv, D).index_copy_(0, slot_mapping, key)`` for key and
  value.
* ``cat``: 4 pieces [4096, 2048] -> [4096, 8192] along the last dim (``out=``).
  bytes = 2 * out bytes.
  torch: ``torch.cat(pieces, dim=-1, out=y_ref)``.

GB/s = bytes / median seconds per call / 1e9. "x copy" = (op GB/s) / (copy
GB/s), computed per repeat from adjacent samples, then the median.

Targets: each polyops op >= 0.7 x copy bandwidth, per dtype, except the CPU
roofline targets (:data:`TARGETS`, docs/backends/cpu_rms_norm.md): rms_norm and
add_rms_norm >= 0.9 (float32) and >= 0.8 (float16, bfloat16); causal_softmax
>= 0.8 (float32, bfloat16); mul >= 0.8 (bfloat16). Printed as PASS/MISS, with
"x torch" (polyops' speed over the torch equivalent); the exit status stays 0.
All of those targets in one run::

    python benchmarks/memory_bound.py --ops rms_norm,add_rms_norm,causal_softmax,mul \
        --dtypes f32,f16,bf16

Usage::

    python benchmarks/memory_bound.py              # full sizes, JSON to benchmarks/results/
    python benchmarks/memory_bound.py --quick      # smoke test (sizes / 8, few repeats)
    python benchmarks/memory_bound.py --ops cat,silu_and_mul --dtypes f32 --repeats 11

``benchmarks/row_kernels_incache.cc`` gives the in-cache side (CPU ns per
element against memcpy, one thread) of the row kernels.

The cases themselves (tensors, the calls timed, the checks) are in
``benchmarks/_memory_bound_cases.py``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
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
from _memory_bound_cases import SETUPS

import polyops

#: Each polyops op must reach at least this fraction of copy bandwidth...
TARGET = 0.7
#: ...unless it has its own target here, per (op, dtype).
TARGETS: dict[tuple[str, str], float] = {
    ("rms_norm", "f32"): 0.9,
    ("rms_norm", "f16"): 0.8,
    ("rms_norm", "bf16"): 0.8,
    ("add_rms_norm", "f32"): 0.9,
    ("add_rms_norm", "f16"): 0.8,
    ("add_rms_norm", "bf16"): 0.8,
    ("causal_softmax", "f32"): 0.8,
    ("causal_softmax", "bf16"): 0.8,
    ("mul", "bf16"): 0.8,
}
COPY = "torch copy_"
DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
}
OPS = (
    "rms_norm",
    "add_rms_norm",
    "mul",
    "causal_softmax",
    "rotary_embedding",
    "silu_and_mul",
    "silu_and_mul_vllm",
    "reshape_and_cache",
    "cat",
)


def _bandwidth_ratio(op: Timing, op_bytes: int, copy: Timing, copy_bytes: int) -> float:
    """Median over repeats of (op GB/s) / (copy GB/s) from adjacent samples."""
    return statistics.median(
        (op_bytes / o) / (copy_bytes / c) for o, c in zip(op.samples, copy.samples, strict=True)
    )


def bench(op: str, dtype_name: str, *, scale: int, repeats: int, target_s: float) -> dict:
    """Check, then time copy, polyops and torch interleaved for one op and dtype."""
    dtype = DTYPES[dtype_name]
    torch.manual_seed(0)
    setup = SETUPS[op](dtype, scale)
    setup.check()
    itemsize = torch.empty(0, dtype=dtype).element_size()
    copy_numel = max(1, setup.nbytes // (2 * itemsize))
    src = torch.randn(copy_numel).to(dtype)
    dst = torch.empty_like(src)
    copy_bytes = 2 * copy_numel * itemsize
    mine_name = f"polyops.{op}"
    torch_name = f"torch {setup.torch_name}"
    timings = measure(
        {COPY: lambda: dst.copy_(src), mine_name: setup.polyops_fn, torch_name: setup.torch_fn},
        repeats=repeats,
        target_s=target_s,
    )
    copy = timings[COPY]
    results: dict[str, dict[str, Any]] = {}
    for name, timing in timings.items():
        nbytes = copy_bytes if name == COPY else setup.nbytes
        results[name] = {
            "gbps": nbytes / timing.median / 1e9,
            "x_copy": _bandwidth_ratio(timing, nbytes, copy, copy_bytes),
            "timing": timing,
        }
    ratio = results[mine_name]["x_copy"]
    target = TARGETS.get((op, dtype_name), TARGET)
    return {
        "op": op,
        "dtype": dtype_name,
        "shape": setup.shape,
        "bytes": setup.nbytes,
        "copy_bytes": copy_bytes,
        "polyops": mine_name,
        "results": results,
        "ratio": ratio,
        "x_torch": paired_ratio(timings[torch_name], timings[mine_name]),
        "target": target,
        "result": verdict(ratio >= target),
    }


def _parse_list(text: str, allowed: Sequence[str], what: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"{what} must be among {', '.join(allowed)}; got {text!r}")
    return names


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"Target: each polyops op >= {TARGET:g} x copy bandwidth per dtype (PASS/MISS), "
        "or its own target in TARGETS.",
    )
    parser.add_argument(
        "--ops",
        type=lambda s: _parse_list(s, OPS, "ops"),
        default=list(OPS),
        metavar="LIST",
        help=f"comma-separated subset of {','.join(OPS)} (default: all)",
    )
    parser.add_argument(
        "--dtypes",
        type=dtype_list(DTYPES),
        default=["f32", "bf16"],
        metavar="LIST",
        help=f"comma-separated subset of {','.join(DTYPES)} (default: f32,bf16)",
    )
    add_run_arguments(
        parser,
        __file__,
        repeats=(3, 7),
        sample_ms=(20.0, 100.0),
        quick_help="smoke test: token / row counts divided by 8, 3 repeats (tensors may sit in "
        "cache: figures are not meaningful against the target)",
        threads_help="torch.set_num_threads(N) first; polyops' OpenMP slots share torch's libgomp, "
        "so this bounds both (default: leave torch's setting)",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    args.scale = 8 if args.quick else 1
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables, write the JSON; always returns 0."""
    args = parse_args(argv)
    print(
        f"polyops {polyops.__version__} | torch {torch.__version__} | "
        f"torch threads {torch.get_num_threads()} | load {load_average()} |\n"
        f"repeats {args.repeats} | sample ~{args.sample_ms:g} ms | ops {','.join(args.ops)} | "
        f"dtypes {','.join(args.dtypes)}"
    )
    print()

    entries = [
        bench(op, dt, scale=args.scale, repeats=args.repeats, target_s=args.sample_ms / 1e3)
        for op in args.ops
        for dt in args.dtypes
    ]

    rows: list[list[str]] = []
    summary: list[list[str]] = []
    for e in entries:
        for name, r in e["results"].items():
            timing: Timing = r["timing"]
            nbytes = e["copy_bytes"] if name == COPY else e["bytes"]
            rows.append(
                [
                    e["op"],
                    e["dtype"],
                    e["shape"],
                    name,
                    f"{nbytes / 2**20:.0f}",
                    f"{timing.median * 1e3:.3f}",
                    f"{r['gbps']:.2f}",
                    f"{r['x_copy']:.2f}x",
                    f"{timing.spread * 100:.0f}%",
                ]
            )
        mine = e["results"][e["polyops"]]
        summary.append(
            [
                e["op"],
                e["dtype"],
                f"{mine['gbps']:.2f}",
                f"{e['results'][COPY]['gbps']:.2f}",
                f"{e['ratio']:.2f}x",
                f"{e['x_torch']:.2f}x",
                f">= {e['target']:g}x",
                e["result"],
            ]
        )

    print_table(
        ["op", "dtype", "shape", "candidate", "MiB", "ms/call", "GB/s", "x copy", "noise"], rows
    )
    print_table(
        ["op", "dtype", "polyops GB/s", "copy GB/s", "x copy", "x torch", "target", "result"],
        summary,
    )
    print(
        "MiB = bytes moved per call as defined in the module docstring (copy_: read + write of "
        "a buffer sized to match);\nms/call and GB/s from the median sample; x copy = median of "
        "per-repeat (candidate GB/s)/(copy GB/s); noise = IQR/median;\n"
        "x torch = median of per-repeat torch_time/polyops_time."
    )
    if args.quick:
        print("Quick mode: small tensors may sit in cache; PASS/MISS here is only a smoke test.")

    path = write_json(
        args.json,
        {
            "benchmark": "memory_bound",
            "settings": {
                "ops": args.ops,
                "dtypes": args.dtypes,
                "repeats": args.repeats,
                "sample_ms": args.sample_ms,
                "size_divisor": args.scale,
                "quick": args.quick,
                "threads": torch.get_num_threads(),
            },
            "target": {
                "min_ratio_to_copy": TARGET,
                "of": "each polyops op",
                "overrides": {f"{op}/{dt}": t for (op, dt), t in TARGETS.items()},
            },
            "entries": [
                {
                    "op": e["op"],
                    "dtype": e["dtype"],
                    "shape": e["shape"],
                    "bytes_per_call": e["bytes"],
                    "copy_bytes_per_call": e["copy_bytes"],
                    "ratio_to_copy": e["ratio"],
                    "speedup_over_torch": e["x_torch"],
                    "target": e["target"],
                    "result": e["result"],
                    "candidates": {
                        name: {
                            "gbps": r["gbps"],
                            "ratio_to_copy": r["x_copy"],
                            **r["timing"].as_dict(),
                        }
                        for name, r in e["results"].items()
                    },
                }
                for e in entries
            ],
        },
    )
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
