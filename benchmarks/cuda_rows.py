"""Memory bandwidth of polyops' row-wise CUDA slots against torch's copy on the same GPU.

Needs a CUDA GPU and a polyops build with the CUDA backend; elsewhere it
prints why and exits with status 2. Written without a GPU: never run yet.

For each op and dtype, in one process, interleaved, on cuda tensors:

* ``torch copy_``: ``dst.copy_(src)`` moving (read + write) as many bytes as
  the op: the practical roofline for that traffic;
* ``polyops``: the op's default CUDA slot, into preallocated outputs or in
  place;
* ``torch``: the same math in plain torch ops (allocates temporaries; a
  reference, not the target).

Each candidate is checked against torch first. Bytes are counted as every
tensor read once plus every output written once (Llama-2-7B-like shapes,
4096 tokens): rms_norm / add_rms_norm [4096, 4096] (+ weight), swiglu
[4096, 11008] x 2 -> 1, silu_and_mul [4096, 22016] -> [4096, 11008],
causal_softmax [32, 1024, 1024] (masked keys written, not read),
rotary_embedding / apply_rotary_pos_emb T = 4096, 32 query + 8 key heads of
128, in place, reshape_and_cache T = 4096, 8 heads of 128, block 16.

Timing: a sample is ``number`` loops of ``--inner`` back-to-back calls, each
loop followed by one ``torch.cuda.synchronize()``. "x copy" = median over
repeats of (op GB/s) / (copy GB/s) from side-by-side samples.

Usage::

    python benchmarks/cuda_rows.py            # JSON to benchmarks/results/cuda_rows.json
    python benchmarks/cuda_rows.py --quick --ops rms_norm,silu_and_mul
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from _common import (
    add_run_arguments,
    dtype_list,
    finish_run_arguments,
    measure,
    print_table,
    write_json,
)

import polyops

COPY = "torch copy_"
DTYPES: dict[str, torch.dtype] = {
    "bf16": torch.bfloat16,
    "f16": torch.float16,
    "f32": torch.float32,
}
F = torch.nn.functional


def loop(fn: Callable[[], object], inner: int) -> Callable[[], None]:
    """`inner` calls of `fn` then one device synchronization."""

    def run() -> None:
        for _ in range(inner):
            fn()
        torch.cuda.synchronize()

    return run


def _randn(*shape: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(*shape, device="cuda").to(dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, head: int) -> torch.Tensor:
    """Neox rotation of x [T, H * head] with per-token cos/sin [T, head / 2]."""
    xs = x.view(x.shape[0], -1, head)
    x1, x2 = xs[..., : head // 2], xs[..., head // 2 :]
    c, s = cos[:, None, :], sin[:, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).view_as(x)


def setup(op: str, dtype: torch.dtype, scale: int) -> tuple[int, Callable, Callable, Callable]:
    """(bytes moved, polyops call, torch call, check) for one op at one dtype."""
    s = torch.empty(0, dtype=dtype).element_size()
    t = 4096 // scale
    if op in ("rms_norm", "add_rms_norm"):
        x, r, w = (
            _randn(t, 4096, dtype=dtype),
            _randn(t, 4096, dtype=dtype),
            _randn(4096, dtype=dtype),
        )
        y, xo = torch.empty_like(x), torch.empty_like(x)

        def ref_norm(v: torch.Tensor) -> torch.Tensor:
            v32 = v.float()
            return (v32 * torch.rsqrt(v32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(
                dtype
            )

        if op == "rms_norm":
            return (
                (2 * x.numel() + w.numel()) * s,
                lambda: polyops.rms_norm(x, w, 1e-6, out=y),
                lambda: ref_norm(x),
                lambda: (polyops.rms_norm(x, w, 1e-6), ref_norm(x)),
            )
        return (
            (4 * x.numel() + w.numel()) * s,
            lambda: polyops.add_rms_norm(x, r, w, 1e-6, y_out=y, x_out=xo),
            lambda: ref_norm(x + r),
            lambda: (polyops.add_rms_norm(x, r, w, 1e-6)[0], ref_norm(x + r)),
        )
    if op in ("swiglu", "silu_and_mul"):
        d = 11008
        if op == "swiglu":
            a, g = _randn(t, d, dtype=dtype), _randn(t, d, dtype=dtype)
            y = torch.empty_like(a)
            return (
                3 * a.numel() * s,
                lambda: polyops.swiglu(a, g, out=y),
                lambda: a * F.silu(g),
                lambda: (polyops.swiglu(a, g), a * F.silu(g)),
            )
        x, y = _randn(t, 2 * d, dtype=dtype), torch.empty(t, d, device="cuda", dtype=dtype)
        return (
            (x.numel() + y.numel()) * s,
            lambda: polyops.silu_and_mul(x, out=y),
            lambda: F.silu(x[:, :d]) * x[:, d:],
            lambda: (polyops.silu_and_mul(x), F.silu(x[:, :d]) * x[:, d:]),
        )
    if op == "causal_softmax":
        b, q = (32, 1024) if scale == 1 else (4, 1024 // scale)
        x = _randn(b, q, q, dtype=dtype) * 3
        y = torch.empty_like(x)
        mask = torch.ones(q, q, dtype=torch.bool, device="cuda").triu(1)
        visible = b * q * (q + 1) // 2
        ref = lambda: torch.softmax(x.float().masked_fill(mask, float("-inf")), -1).to(dtype)  # noqa: E731
        return (
            (visible + x.numel()) * s,
            lambda: polyops.causal_softmax(x, out=y),
            ref,
            lambda: (polyops.causal_softmax(x), ref()),
        )
    head, hq, hkv = 128, 32, 8
    if op in ("rotary_embedding", "apply_rotary_pos_emb"):
        q, k = _randn(t, hq * head, dtype=dtype), _randn(t, hkv * head, dtype=dtype)
        positions = torch.randperm(t, device="cuda")
        cache = _randn(t, head, dtype=dtype)
        cos, sin = (
            cache[positions, : head // 2].contiguous(),
            cache[positions, head // 2 :].contiguous(),
        )
        traffic = 2 * (q.numel() + k.numel()) * s

        def torch_rope() -> tuple:
            return _rope(q, cos, sin, head), _rope(k, cos, sin, head)

        def expected() -> torch.Tensor:  # in float32, as polyops computes
            c32, s32 = cos.float(), sin.float()
            return torch.cat(
                [_rope(q.float(), c32, s32, head), _rope(k.float(), c32, s32, head)], -1
            )

        if op == "rotary_embedding":

            def check() -> tuple:
                qc, kc = q.clone(), k.clone()
                polyops.rotary_embedding(positions, qc, kc, head, cache, True)
                return torch.cat([qc, kc], -1), expected()

            return (
                traffic + t * head * s + t * 8,
                lambda: polyops.rotary_embedding(positions, q, k, head, cache, True),
                torch_rope,
                check,
            )

        def check_apply() -> tuple:
            qc, kc = q.clone(), k.clone()
            polyops.apply_rotary_pos_emb(qc, kc, cos, sin)
            return torch.cat([qc, kc], -1), expected()

        return (
            traffic + 2 * cos.numel() * s,
            lambda: polyops.apply_rotary_pos_emb(q, k, cos, sin),
            torch_rope,
            check_apply,
        )
    # reshape_and_cache
    key, value = _randn(t, hkv, head, dtype=dtype), _randn(t, hkv, head, dtype=dtype)
    blocks = 2 * t // 16
    slots = torch.randperm(blocks * 16, device="cuda")[:t]
    caches = [torch.zeros(blocks, 16, hkv, head, device="cuda", dtype=dtype) for _ in range(4)]

    def torch_copy() -> None:
        caches[2].view(-1, hkv, head).index_copy_(0, slots, key)
        caches[3].view(-1, hkv, head).index_copy_(0, slots, value)

    def check_cache() -> tuple:
        polyops.reshape_and_cache(key, value, caches[0], caches[1], slots)
        torch_copy()
        return torch.stack(caches[:2]), torch.stack(caches[2:])

    return (
        2 * (key.numel() + value.numel()) * s + t * 8,
        lambda: polyops.reshape_and_cache(key, value, caches[0], caches[1], slots),
        torch_copy,
        check_cache,
    )


OPS = (
    "rms_norm",
    "add_rms_norm",
    "swiglu",
    "silu_and_mul",
    "causal_softmax",
    "rotary_embedding",
    "apply_rotary_pos_emb",
    "reshape_and_cache",
)


def bench(op: str, dname: str, args: argparse.Namespace) -> dict[str, Any]:
    """Check, then time copy, polyops and torch interleaved for one op and dtype."""
    dtype = DTYPES[dname]
    nbytes, mine, ref, check = setup(op, dtype, 8 if args.quick else 1)
    got, want = check()
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    torch.testing.assert_close(got.float(), want.float(), **tol)
    numel = max(1, nbytes // (2 * torch.empty(0, dtype=dtype).element_size()))
    src = torch.randn(numel, device="cuda").to(dtype)
    dst = torch.empty_like(src)
    copy_bytes = 2 * src.numel() * src.element_size()
    timings = measure(
        {
            COPY: loop(lambda: dst.copy_(src), args.inner),
            "polyops": loop(mine, args.inner),
            "torch": loop(ref, args.inner),
        },
        repeats=args.repeats,
        target_s=args.sample_ms / 1000,
    )
    moved = {COPY: copy_bytes, "polyops": nbytes, "torch": nbytes}
    x_copy = {
        name: statistics.median(
            (moved[name] / a) / (copy_bytes / c)
            for a, c in zip(t.samples, timings[COPY].samples, strict=True)
        )
        for name, t in timings.items()
    }
    return {
        "op": op,
        "dtype": dname,
        "bytes": nbytes,
        "inner": args.inner,
        "us_per_call": {name: t.median / args.inner * 1e6 for name, t in timings.items()},
        "gbps": {name: moved[name] * args.inner / t.median / 1e9 for name, t in timings.items()},
        "x_copy": x_copy,
        "timings": {name: t.as_dict() for name, t in timings.items()},
    }


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table, write the JSON; 2 without a CUDA device."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of the ops")
    parser.add_argument(
        "--dtypes",
        type=dtype_list(DTYPES),
        default=["bf16", "f32"],
        help=f"subset of {','.join(DTYPES)} (or torch's names)",
    )
    parser.add_argument("--inner", type=int, default=20, help="calls per synchronization")
    add_run_arguments(
        parser,
        __file__,
        repeats=(3, 9),
        sample_ms=(20.0, 100.0),
        quick_help="sizes / 8, fewer repeats (tensors may sit in L2: not meaningful)",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    if "cuda" not in polyops.devices():
        print("cuda_rows.py: needs a CUDA GPU and polyops built with CUDA", file=sys.stderr)
        return 2
    entries = [bench(op, dname, args) for op in args.ops.split(",") for dname in args.dtypes]
    rows = [
        [e["op"], e["dtype"], f"{e['bytes'] / 2**20:.0f}"]
        + [f"{e['us_per_call'][n]:.1f}" for n in (COPY, "polyops", "torch")]
        + [f"{e['gbps']['polyops']:.0f}", f"{e['x_copy']['polyops']:.2f}x"]
        + [f"{e['x_copy']['torch']:.2f}x"]
        for e in entries
    ]
    print_table(
        [
            "op",
            "dtype",
            "MiB",
            "copy us",
            "polyops us",
            "torch us",
            "GB/s",
            "x copy",
            "torch x copy",
        ],
        rows,
    )
    payload = {"device": torch.cuda.get_device_name(), "results": entries}
    path = write_json(args.json, {"args": {k: str(v) for k, v in vars(args).items()}, **payload})
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
