"""Prefill and decode attention: polyops.flash_attention / paged_attention against torch SDPA.

Measures in one process, interleaved, on the same data:

* **prefill**: ``polyops.flash_attention(q, k, v, cu_seqlens_q=cu, cu_seqlens_kv=cu,
  causal=True, out=o)`` on packed token-major q, k, v [B * T, H, D] against
  ``torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)`` on
  contiguous [B, H, T, D] copies of the same values (made before timing; torch
  allocates its output). B sequences of T tokens each, H = 32 query heads and
  ``--prefill-kv-heads`` kv heads (default 32; fewer: SDPA gets ``enable_gqa=True``),
  D = 128; default cases (B, T) = (1, 1024) (the CPU target's case,
  docs/backends/cpu_attention.md), (1, 2048) and (4, 512), float32 and bfloat16.
  GFLOP/s counts the visible (causal) query-key pairs: 4 * D * H * B * T * (T + 1) / 2.
* **decode**: ``polyops.paged_attention(q, key_cache, value_cache, seq_lens, block_table,
  out=o)``, q [B, Hq, D], caches [num_blocks, 16, Hkv, D] against torch's route
  for the same paged cache: gather ``key_cache[block_table]`` (and value) into
  [B, ctx, Hkv, D], view it as [B, Hkv, ctx, D] and call SDPA with
  ``enable_gqa=True`` (q as [B, Hq, 1, D], no mask). B = 16 sequences of ctx =
  2048 cached tokens, Hq = 32, Hkv = 8, D = 128, block 16, a random block table
  (a permutation of all blocks), float32 and bfloat16. GB/s counts the cache
  bytes attention must read: 2 * B * ctx * Hkv * D * itemsize (the gather's
  extra traffic is torch's cost, not counted).

Every polyops output is checked against torch before anything is timed.

``--device cuda`` runs both sides on the GPU: tensors are made on the host with the
same generator and moved, paged_attention also gets ``seq_lens_host`` and
flash_attention ``cu_seqlens_q_host`` / ``cu_seqlens_kv_host`` (as serving engines
pass them; the FlashInfer slots need them), and each timed sample is
``CUDA_CALLS_PER_SYNC`` back-to-back calls followed by one
``torch.cuda.synchronize()``, reported per call, so the queueing of asynchronous
launches is not mistaken for their run time.
"ratio" = median over repeats of torch_time / polyops_time (adjacent samples),
so > 1 means polyops is faster.

Targets (from the issue): prefill ratio >= 1.0, decode ratio >= 2.0, each case
and dtype; printed as PASS/MISS (exit status stays 0). The header names the kernel
path that ran: each op's default slot and, on CPU, the ISA variant of the attention
tile kernel (AVX-512 / AVX2 / baseline, as polyops picks it from the CPU flags and
``POLYOPS_CPU_ISA``) and the capability torch's CPU kernels run at (``ATEN_CPU_CAPABILITY``
caps it: compare the AVX2 variants with
``POLYOPS_CPU_ISA=avx2 ATEN_CPU_CAPABILITY=avx2``). If this polyops build
lacks an op, its rows say "not available in this build" and the run goes on.

Usage::

    python benchmarks/attention.py               # full run, JSON to benchmarks/results/
    python benchmarks/attention.py --quick       # smoke test (short sequences, few repeats)
    python benchmarks/attention.py --prefill 2x1024,1x512 --dtypes f32 --repeats 7
    # the CUDA slots side by side (docs/backends/cuda_attention.md), its shapes:
    python benchmarks/attention.py --device cuda --implementation-index 0,1 \
        --prefill 4x2048 --prefill-kv-heads 8 --decode 64x2048 --dtypes bf16

``--implementation-index`` runs each listed slot (``polyops.implementations``) as
its own row against the same torch reference; without it the op's default runs.
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

PREFILL_TARGET = 1.0
DECODE_TARGET = 2.0
HEADS = 32
HEAD_SIZE = 128
DECODE_KV_HEADS = 8
BLOCK = 16
DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32,
    "f16": torch.float16,
    "bf16": torch.bfloat16,
}
NOT_AVAILABLE = "not available in this build (op or slot)"
#: Calls per timed sample on CUDA, followed by one synchronize (see the module docstring).
CUDA_CALLS_PER_SYNC = 10

sdpa = torch.nn.functional.scaled_dot_product_attention


def _tol(dtype: torch.dtype) -> dict[str, float]:
    if dtype == torch.float32:
        return {"rtol": 1e-4, "atol": 1e-4}
    return {"rtol": 2e-2, "atol": 2e-2}


def _synchronized(fn: Callable[[], object], device: str) -> Callable[[], object]:
    """On CUDA: CUDA_CALLS_PER_SYNC calls of `fn`, then wait for the GPU; else `fn`."""
    if device != "cuda":
        return fn

    def run() -> None:
        for _ in range(CUDA_CALLS_PER_SYNC):
            fn()
        torch.cuda.synchronize()

    return run


def _timed_entry(
    entry: dict[str, Any],
    mine: Callable[[], object],
    ref: Callable[[], object],
    *,
    mine_name: str,
    target: float,
    repeats: int,
    target_s: float,
    device: str,
) -> dict[str, Any]:
    """Times polyops against entry["reference"] side by side; returns the completed entry."""
    ref_name = entry["reference"]
    timings = measure(
        {mine_name: _synchronized(mine, device), ref_name: _synchronized(ref, device)},
        repeats=repeats,
        target_s=target_s,
        warmup=1,
    )
    if device == "cuda":  # a sample ran CUDA_CALLS_PER_SYNC calls: per call
        k = CUDA_CALLS_PER_SYNC
        timings = {
            name: Timing(t.name, t.number * k, [x / k for x in t.samples])
            for name, t in timings.items()
        }
    mine_t, ref_t = timings[mine_name], timings[ref_name]
    ratio = paired_ratio(ref_t, mine_t)
    return {
        **entry,
        "available": True,
        "mine": mine_t,
        "ref": ref_t,
        "ratio": ratio,
        "result": verdict(ratio >= target),
    }


def bench_prefill(
    batch: int,
    tokens: int,
    dtype_name: str,
    *,
    repeats: int,
    target_s: float,
    device: str = "cpu",
    kv_heads: int = HEADS,
    slot: int | None = None,
) -> dict[str, Any]:
    """flash_attention against SDPA(is_causal=True) for B sequences of T tokens.

    q [B*T, 32, 128], k and v [B*T, kv_heads, 128]; ``slot`` is passed as
    implementation_index (None: the default slot).
    """
    dtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(0)
    total = batch * tokens
    q = torch.randn(total, HEADS, HEAD_SIZE, generator=gen).to(dtype).to(device)
    k, v = (
        torch.randn(total, kv_heads, HEAD_SIZE, generator=gen).to(dtype).to(device)
        for _ in range(2)
    )
    cu_host = torch.arange(0, total + 1, tokens, dtype=torch.int32)
    cu = cu_host.to(device)
    host_mirrors = (
        {"cu_seqlens_q_host": cu_host, "cu_seqlens_kv_host": cu_host} if device == "cuda" else {}
    )
    out = torch.empty_like(q)

    def to_bhtd(x: torch.Tensor) -> torch.Tensor:
        return x.view(batch, tokens, x.shape[1], HEAD_SIZE).transpose(1, 2).contiguous()

    qb, kb, vb = to_bhtd(q), to_bhtd(k), to_bhtd(v)
    flops = 4 * HEAD_SIZE * HEADS * batch * tokens * (tokens + 1) // 2
    heads = f"H{HEADS}" if kv_heads == HEADS else f"Hq{HEADS} Hkv{kv_heads}"
    entry: dict[str, Any] = {
        "kind": "prefill",
        "case": f"B{batch} T{tokens} {heads} D{HEAD_SIZE}",
        "dtype": dtype_name,
        "slot": _slot_name("flash_attention", device, slot),
        "flops": flops,
        "target": PREFILL_TARGET,
        "reference": "SDPA(is_causal=True)",
    }
    if not _has_slot("flash_attention", device, slot):
        return {**entry, "available": False}

    def mine() -> object:
        return polyops.flash_attention(
            q,
            k,
            v,
            cu_seqlens_q=cu,
            cu_seqlens_kv=cu,
            causal=True,
            out=out,
            implementation_index=slot,
            **host_mirrors,
        )

    def ref() -> torch.Tensor:
        return sdpa(qb, kb, vb, is_causal=True, enable_gqa=kv_heads != HEADS)

    mine()
    expected = ref().transpose(1, 2).reshape(total, HEADS, HEAD_SIZE)
    torch.testing.assert_close(out.float(), expected.float(), **_tol(dtype))
    return _timed_entry(
        entry,
        mine,
        ref,
        mine_name="polyops.flash_attention",
        target=PREFILL_TARGET,
        repeats=repeats,
        target_s=target_s,
        device=device,
    )


def bench_decode(
    batch: int,
    context: int,
    dtype_name: str,
    *,
    repeats: int,
    target_s: float,
    device: str = "cpu",
    slot: int | None = None,
) -> dict[str, Any]:
    """paged_attention against gather + SDPA(enable_gqa=True), B sequences of `context`.

    ``slot`` is passed as implementation_index (None: the default slot).
    """
    dtype = DTYPES[dtype_name]
    gen = torch.Generator().manual_seed(0)
    max_blocks = -(-context // BLOCK)
    num_blocks = batch * max_blocks
    shape = (num_blocks, BLOCK, DECODE_KV_HEADS, HEAD_SIZE)
    key_cache = torch.randn(shape, generator=gen).to(dtype).to(device)
    value_cache = torch.randn(shape, generator=gen).to(dtype).to(device)
    query = torch.randn(batch, HEADS, HEAD_SIZE, generator=gen).to(dtype).to(device)
    block_table = torch.randperm(num_blocks, generator=gen).view(batch, max_blocks).to(torch.int32)
    seq_lens_host = torch.full((batch,), context, dtype=torch.int32)
    block_table, seq_lens = block_table.to(device), seq_lens_host.to(device)
    host_mirrors = {"seq_lens_host": seq_lens_host} if device == "cuda" else {}
    out = torch.empty_like(query)
    index = block_table.long()
    q4 = query.unsqueeze(2)
    kv_bytes = 2 * batch * context * DECODE_KV_HEADS * HEAD_SIZE * key_cache.element_size()
    entry: dict[str, Any] = {
        "kind": "decode",
        "case": f"B{batch} ctx{context} Hq{HEADS} Hkv{DECODE_KV_HEADS} D{HEAD_SIZE} blk{BLOCK}",
        "dtype": dtype_name,
        "kv_bytes": kv_bytes,
        "slot": _slot_name("paged_attention", device, slot),
        "target": DECODE_TARGET,
        "reference": "gather + SDPA(gqa)",
    }
    if not _has_slot("paged_attention", device, slot):
        return {**entry, "available": False}

    def mine() -> object:
        return polyops.paged_attention(
            query,
            key_cache,
            value_cache,
            seq_lens,
            block_table,
            out=out,
            implementation_index=slot,
            **host_mirrors,
        )

    def gathered(cache: torch.Tensor) -> torch.Tensor:
        # [B, max_blocks, BLOCK, Hkv, D] copy -> [B, Hkv, ctx, D] view
        rows = cache[index].view(batch, max_blocks * BLOCK, DECODE_KV_HEADS, HEAD_SIZE)
        return rows[:, :context].transpose(1, 2)

    def ref() -> torch.Tensor:
        return sdpa(q4, gathered(key_cache), gathered(value_cache), enable_gqa=True)

    mine()
    torch.testing.assert_close(out.float(), ref().squeeze(2).float(), **_tol(dtype))
    return _timed_entry(
        entry,
        mine,
        ref,
        mine_name="polyops.paged_attention",
        target=DECODE_TARGET,
        repeats=repeats,
        target_s=target_s,
        device=device,
    )


def _slot_name(op: str, device: str, slot: int | None) -> str:
    """The slot's name (``polyops.implementations``), "default (<name>)" for None."""
    if not hasattr(polyops, op):
        return "-"
    slots = polyops.implementations(op, device)
    if slot is None:
        index = polyops.default_implementation(op, device)
        return f"default ({slots.get(index, '-')})"
    return slots.get(slot, f"#{slot} (none on {device})")


def _has_slot(op: str, device: str, slot: int | None) -> bool:
    """Whether this build has the op and, for an explicit slot, that slot on ``device``."""
    if not hasattr(polyops, op):
        return False
    return slot is None or slot in polyops.implementations(op, device)


def parse_slots(text: str) -> list[int]:
    """'0,1' -> [0, 1]: implementation indices to run side by side."""
    try:
        slots = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N[,N...], got {text!r}") from None
    if not slots or min(slots) < 0:
        raise argparse.ArgumentTypeError(f"expected non-negative indices, got {text!r}")
    return slots


def kernel_paths(device: str) -> str:
    """ "flash_attention slot 1 (omp), ..." for the header: which code the run timed."""
    parts = []
    for op in ("flash_attention", "paged_attention"):
        if not hasattr(polyops, op):
            continue
        slot = polyops.default_implementation(op, device)
        name = polyops.implementations(op, device).get(slot, "?") if slot is not None else "-"
        parts.append(f"{op} slot {slot} ({name})")
    if device == "cpu":
        parts.append(f"CPU tile kernel {polyops._C._cpu_isa()}")
        # ATEN_CPU_CAPABILITY=avx2 caps torch's own kernels (SDPA) the way
        # POLYOPS_CPU_ISA=avx2 caps ours, for a like-with-like comparison.
        parts.append(f"torch CPU kernels {torch.backends.cpu.get_cpu_capability()}")
    return ", ".join(parts)


def parse_pairs(text: str) -> list[tuple[int, int]]:
    """``"1x2048,4x512"`` -> [(1, 2048), (4, 512)] (B x T)."""
    pairs: list[tuple[int, int]] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        try:
            b, t = (int(p) for p in item.lower().split("x"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected BxT[,BxT...], got {text!r}") from None
        if b < 1 or t < 1:
            raise argparse.ArgumentTypeError(f"expected positive BxT, got {item!r}")
        pairs.append((b, t))
    if not pairs:
        raise argparse.ArgumentTypeError("expected at least one BxT")
    return pairs


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog=f"Targets: prefill torch/polyops >= {PREFILL_TARGET:g}, decode >= "
        f"{DECODE_TARGET:g} (PASS/MISS).",
    )
    parser.add_argument(
        "--prefill",
        type=parse_pairs,
        default=None,
        metavar="BxT,...",
        help="prefill cases, sequences x tokens (default 1x1024,1x2048,4x512; --quick: "
        "1x256,2x128)",
    )
    parser.add_argument(
        "--decode",
        type=parse_pairs,
        default=None,
        metavar="BxCTX,...",
        help="decode cases, sequences x context (default 16x2048; --quick: 4x256)",
    )
    parser.add_argument(
        "--dtypes",
        type=dtype_list(DTYPES),
        default=["f32", "bf16"],
        metavar="LIST",
        help=f"comma-separated subset of {','.join(DTYPES)} (default: f32,bf16)",
    )
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where both sides run (default cpu; cuda needs a CUDA build and a GPU)",
    )
    parser.add_argument(
        "--implementation-index",
        type=parse_slots,
        default=None,
        metavar="N,...",
        help="run these slots of each op side by side (e.g. 0,1 on cuda: flash, flashinfer); "
        "default: the op's default slot",
    )
    parser.add_argument(
        "--prefill-kv-heads",
        type=int,
        default=HEADS,
        metavar="N",
        help=f"kv heads of the prefill cases (default {HEADS}; "
        "docs/backends/cuda_attention.md uses 8)",
    )
    add_run_arguments(
        parser,
        __file__,
        repeats=(3, 5),
        sample_ms=(20.0, 200.0),
        quick_help="smoke test: short sequences, 3 repeats (figures not meaningful "
        "against targets)",
        threads_help="torch.set_num_threads(N) first; polyops' OpenMP code shares torch's libgomp, "
        "so this bounds both (default: leave torch's setting)",
    )
    args = finish_run_arguments(parser.parse_args(argv))
    if args.prefill is None:
        args.prefill = [(1, 256), (2, 128)] if args.quick else [(1, 1024), (1, 2048), (4, 512)]
    if args.decode is None:
        args.decode = [(4, 256)] if args.quick else [(16, 2048)]
    return args


def _json_entry(e: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in e.items() if k not in ("mine", "ref")}
    if e["available"]:
        out["polyops"] = e["mine"].as_dict()
        out["torch"] = e["ref"].as_dict()
    else:
        out["result"] = None
        out["note"] = NOT_AVAILABLE
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the tables, write the JSON; always returns 0."""
    args = parse_args(argv)
    target_s = args.sample_ms / 1e3
    print(
        f"polyops {polyops.__version__} | torch {torch.__version__} | "
        f"torch threads {torch.get_num_threads()} | load {load_average()} |\n"
        f"device {args.device} | repeats {args.repeats} | sample ~{args.sample_ms:g} ms | "
        f"flash_attention: {hasattr(polyops, 'flash_attention')} | "
        f"paged_attention: {hasattr(polyops, 'paged_attention')}\n"
        f"kernel path: {kernel_paths(args.device)}"
    )
    print()

    entries: list[dict[str, Any]] = []
    slots: list[int | None] = args.implementation_index or [None]
    run = {"repeats": args.repeats, "target_s": target_s, "device": args.device}
    for b, t in args.prefill:
        for dt in args.dtypes:
            for slot in slots:
                entries.append(
                    bench_prefill(b, t, dt, kv_heads=args.prefill_kv_heads, slot=slot, **run)
                )
    for b, ctx in args.decode:
        for dt in args.dtypes:
            for slot in slots:
                entries.append(bench_decode(b, ctx, dt, slot=slot, **run))

    rows: list[list[str]] = []
    summary: list[list[str]] = []
    for e in entries:
        op = "flash_attention" if e["kind"] == "prefill" else "paged_attention"
        op = f"{op} [{e['slot']}]"
        if not e["available"]:
            rows.append([op, e["case"], e["dtype"], NOT_AVAILABLE, "", "", "", "", "", ""])
            summary.append([op, e["case"], e["dtype"], "-", f">= {e['target']:g}x", "-"])
            continue
        mine: Timing = e["mine"]
        ref: Timing = e["ref"]
        if e["kind"] == "prefill":
            unit = "GFLOP/s"
            work = e["flops"] / 1e9
        else:
            unit = "GB/s"
            work = e["kv_bytes"] / 1e9
        rows.append(
            [
                op,
                e["case"],
                e["dtype"],
                f"{mine.median * 1e3:.2f}",
                f"{work / mine.median:.1f} {unit}",
                e["reference"],
                f"{ref.median * 1e3:.2f}",
                f"{work / ref.median:.1f} {unit}",
                f"{e['ratio']:.2f}x",
                f"{max(mine.spread, ref.spread) * 100:.0f}%",
            ]
        )
        summary.append(
            [op, e["case"], e["dtype"], f"{e['ratio']:.2f}x", f">= {e['target']:g}x", e["result"]]
        )

    print_table(
        [
            "op",
            "case",
            "dtype",
            "polyops ms",
            "polyops rate",
            "torch reference",
            "torch ms",
            "torch rate",
            "ratio",
            "noise",
        ],
        rows,
        align="lllrrlrrrr",
    )
    print_table(["op", "case", "dtype", "ratio", "target", "result"], summary)
    print(
        "ms = median per call; prefill rate = causal FLOPs / time, decode rate = KV-cache bytes "
        "read / time;\nratio = median of per-repeat torch_time/polyops_time (> 1: polyops "
        "faster); noise = larger IQR/median of the pair."
    )
    if args.quick:
        print("Quick mode: short sequences; PASS/MISS here is only a smoke test.")

    path = write_json(
        args.json,
        {
            "benchmark": "attention",
            "settings": {
                "prefill": [list(p) for p in args.prefill],
                "decode": [list(p) for p in args.decode],
                "dtypes": args.dtypes,
                "device": args.device,
                "implementation_index": args.implementation_index,
                "prefill_kv_heads": args.prefill_kv_heads,
                "cuda_calls_per_sync": CUDA_CALLS_PER_SYNC if args.device == "cuda" else None,
                "heads": HEADS,
                "decode_kv_heads": DECODE_KV_HEADS,
                "head_size": HEAD_SIZE,
                "block_size": BLOCK,
                "repeats": args.repeats,
                "sample_ms": args.sample_ms,
                "quick": args.quick,
                "threads": torch.get_num_threads(),
                "flash_attention_available": hasattr(polyops, "flash_attention"),
                "paged_attention_available": hasattr(polyops, "paged_attention"),
                "kernel_path": kernel_paths(args.device),
            },
            "targets": {
                "prefill_min_ratio_torch_over_polyops": PREFILL_TARGET,
                "decode_min_ratio_torch_over_polyops": DECODE_TARGET,
            },
            "entries": [_json_entry(e) for e in entries],
        },
    )
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
