"""GPU time of polyops' CUDA matmul / gemm / linear slots and topk_topp_sampling against torch.

Needs a CUDA GPU and a polyops build with the CUDA backend; elsewhere it
prints why and exits with status 2. Written without a GPU: never run yet.

Products: for each case (op, dtype, m x n x k) in one process, interleaved,
on the same cuda tensors: polyops slot 0 (cublaslt), slot 1 (cublas) and
torch (``torch.matmul(out=)``, ``torch.addmm(out=)``, ``F.linear``, which has
no ``out=``). Every candidate is checked against torch first. torch runs with
its default ``allow_tf32 = False`` for matmul, like polyops (no TF32).

Sampling: ``polyops.topk_topp_sampling`` (bit-exact, one block per row)
against a torch pipeline of the same filter (sort, softmax, cumsum, masked
renormalization, searchsorted on ``uniform``), which is not bit-exact and is
given only as a speed reference. polyops' tokens are checked against polyops'
CPU slot first (they must be equal).

Timing: a sample is ``number`` loops of ``--inner`` back-to-back calls, each
loop followed by one ``torch.cuda.synchronize()`` (so the figure is GPU time
plus launch overhead per call, the host wait amortized over the loop).
"ratio" = median over repeats of torch_time / polyops_time (side by side),
so > 1 means polyops is faster.

Usage::

    python benchmarks/cuda_ops.py            # JSON to benchmarks/results/cuda_ops.json
    python benchmarks/cuda_ops.py --quick
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import torch
from _common import (
    add_run_arguments,
    finish_run_arguments,
    measure,
    paired_ratio,
    print_table,
    write_json,
)

import polyops

DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "bf16": torch.bfloat16,
    "f16": torch.float16,
}
# (op, m, n, k): square products, a decode-step linear and a prefill linear.
PRODUCT_CASES = [
    ("matmul", 1024, 1024, 1024),
    ("matmul", 4096, 4096, 4096),
    ("gemm", 2048, 2048, 2048),
    ("linear", 16, 4096, 4096),
    ("linear", 4096, 11008, 4096),
]
# (rows, vocab, top_k, top_p)
SAMPLING_CASES = [
    (64, 152_064, 50, 0.9),
    (64, 152_064, 0, 0.95),
    (256, 32_000, 0, 1.0),
]


def loop(fn: Callable[[], object], inner: int) -> Callable[[], None]:
    """`inner` calls of `fn` then one device synchronization."""

    def run() -> None:
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()

    return run


def product_candidates(op: str, dtype: torch.dtype, m: int, n: int, k: int):
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(m, k, device="cuda", generator=gen).to(dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    ref_out = torch.empty(m, n, device="cuda", dtype=dtype)
    if op == "matmul":
        b = torch.randn(k, n, device="cuda", generator=gen).to(dtype)
        mine = {
            s: (lambda s=s: polyops.matmul(a, b, out=out, implementation_index=s)) for s in (0, 1)
        }
        ref = lambda: torch.matmul(a, b, out=ref_out)  # noqa: E731
        expected = lambda: torch.matmul(a, b)  # noqa: E731
        got = lambda s: polyops.matmul(a, b, implementation_index=s)  # noqa: E731
    elif op == "gemm":
        b = torch.randn(k, n, device="cuda", generator=gen).to(dtype)
        c = torch.randn(m, n, device="cuda", generator=gen).to(dtype)
        mine = {
            s: (
                lambda s=s: polyops.gemm(
                    a, b, c, alpha=0.5, beta=2.0, out=out, implementation_index=s
                )
            )
            for s in (0, 1)
        }
        ref = lambda: torch.addmm(c, a, b, beta=2.0, alpha=0.5, out=ref_out)  # noqa: E731
        expected = lambda: torch.addmm(c, a, b, beta=2.0, alpha=0.5)  # noqa: E731
        got = lambda s: polyops.gemm(a, b, c, alpha=0.5, beta=2.0, implementation_index=s)  # noqa: E731
    else:
        w = torch.randn(n, k, device="cuda", generator=gen).to(dtype)
        bias = torch.randn(n, device="cuda", generator=gen).to(dtype)
        mine = {
            s: (lambda s=s: polyops.linear(a, w, bias, out=out, implementation_index=s))
            for s in (0, 1)
        }
        ref = lambda: torch.nn.functional.linear(a, w, bias)  # noqa: E731
        expected = ref
        got = lambda s: polyops.linear(a, w, bias, implementation_index=s)  # noqa: E731
    scale = k**0.5
    rtol, atol = (1e-4, 1e-5 * scale) if dtype == torch.float32 else (1.6e-2, 1e-2 * scale)
    for s in (0, 1):
        torch.testing.assert_close(got(s), expected(), rtol=rtol, atol=atol)
    return mine, ref


def torch_sampling(logits: torch.Tensor, top_k: int, top_p: float, uniform: torch.Tensor):
    """The same filter in plain torch ops (not bit-exact): a speed reference only."""
    values, ids = torch.sort(logits.float(), dim=-1, descending=True, stable=True)
    if 0 < top_k < values.shape[-1]:
        values[:, top_k:] = -torch.inf
    probs = torch.softmax(values, dim=-1)
    cumulative = probs.cumsum(-1)
    if top_p < 1.0:
        probs = probs.masked_fill(cumulative - probs >= top_p, 0.0)
        cumulative = probs.cumsum(-1)
    target = uniform.unsqueeze(-1) * cumulative[:, -1:]
    index = torch.searchsorted(cumulative, target).clamp_max(values.shape[-1] - 1)
    return ids.gather(-1, index).squeeze(-1)


def run(args: argparse.Namespace) -> dict[str, Any]:
    product_cases = PRODUCT_CASES[:1] if args.quick else PRODUCT_CASES
    sampling_cases = SAMPLING_CASES[:1] if args.quick else SAMPLING_CASES
    target_s = args.sample_ms / 1000
    rows, records = [], []
    for (op, m, n, k), (dname, dtype) in (
        (case, d) for case in product_cases for d in DTYPES.items()
    ):
        mine, ref = product_candidates(op, dtype, m, n, k)
        names = {"cublaslt": loop(mine[0], args.inner), "cublas": loop(mine[1], args.inner)}
        names["torch"] = loop(ref, args.inner)
        timings = measure(names, repeats=args.repeats, target_s=target_s)
        per_call = {name: t.median / args.inner for name, t in timings.items()}
        flops = 2 * m * n * k
        ratios = {s: paired_ratio(timings["torch"], timings[s]) for s in ("cublaslt", "cublas")}
        rows.append(
            [op, dname, f"{m}x{n}x{k}"]
            + [f"{per_call[s] * 1e6:.1f}" for s in ("cublaslt", "cublas", "torch")]
            + [f"{flops / per_call['cublaslt'] / 1e12:.1f}"]
            + [f"{ratios[s]:.2f}" for s in ("cublaslt", "cublas")]
        )
        records.append(
            {
                "op": op,
                "dtype": dname,
                "m": m,
                "n": n,
                "k": k,
                "inner": args.inner,
                "timings": {name: t.as_dict() for name, t in timings.items()},
                "ratio_torch_over": ratios,
            }
        )
    print_table(
        [
            "op",
            "dtype",
            "m x n x k",
            "cublaslt us",
            "cublas us",
            "torch us",
            "TFLOP/s lt",
            "ratio lt",
            "ratio cublas",
        ],
        rows,
    )

    sampling_rows = []
    for batch, vocab, top_k, top_p in sampling_cases:
        gen = torch.Generator(device="cuda").manual_seed(1)
        logits = torch.randn(batch, vocab, device="cuda", generator=gen) * 4
        uniform = torch.rand(batch, device="cuda", generator=gen)
        out = torch.empty(batch, dtype=torch.int64, device="cuda")
        got = polyops.topk_topp_sampling(logits, top_k, top_p, uniform=uniform)
        want = polyops.topk_topp_sampling(logits.cpu(), top_k, top_p, uniform=uniform.cpu())
        if not torch.equal(got.cpu(), want):
            raise SystemExit("topk_topp_sampling: cuda tokens differ from the cpu slot's")
        mine = partial(polyops.topk_topp_sampling, logits, top_k, top_p, uniform=uniform, out=out)
        ref = partial(torch_sampling, logits, top_k, top_p, uniform)
        names = {"polyops": loop(mine, args.inner), "torch": loop(ref, args.inner)}
        timings = measure(names, repeats=args.repeats, target_s=target_s)
        ratio = paired_ratio(timings["torch"], timings["polyops"])
        sampling_rows.append(
            [batch, vocab, top_k, top_p]
            + [f"{timings[s].median / args.inner * 1e6:.1f}" for s in ("polyops", "torch")]
            + [f"{ratio:.2f}"]
        )
        records.append(
            {
                "op": "topk_topp_sampling",
                "batch": batch,
                "vocab": vocab,
                "top_k": top_k,
                "top_p": top_p,
                "inner": args.inner,
                "timings": {name: t.as_dict() for name, t in timings.items()},
                "ratio_torch_over_polyops": ratio,
            }
        )
    print_table(
        ["rows", "vocab", "top_k", "top_p", "polyops us", "torch us (not exact)", "ratio"],
        sampling_rows,
    )
    return {"device": torch.cuda.get_device_name(), "results": records}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--inner", type=int, default=20, help="calls per synchronization (default 20)"
    )
    add_run_arguments(
        parser,
        __file__,
        repeats=(3, 9),
        sample_ms=(20.0, 100.0),
        quick_help="one product case and one sampling case, fewer repeats",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    if "cuda" not in polyops.devices():
        print(
            "cuda_ops.py: needs a CUDA GPU and polyops built with the CUDA backend", file=sys.stderr
        )
        return 2
    payload = run(args)
    path = write_json(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, **payload})
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
