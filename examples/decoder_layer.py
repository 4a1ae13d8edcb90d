"""A Llama-style decoder layer driven entirely through polyops, checked against plain torch.

Prefill of a varlen batch:
    rms_norm -> linear (qkv) -> rotary_embedding -> reshape_and_cache -> flash_attention
    -> linear (o) -> add_rms_norm -> linear (gate_up) -> silu_and_mul -> linear (down)
then several decode steps with paged_attention over the cache, and topk_topp_sampling on
the final logits. The same layer runs in plain torch in float32 from the same weights (the
accuracy reference): every stage's largest error is printed, and the script exits 1 when
an error exceeds the dtype's tolerance.

Speed is compared with what a user would run instead: the same layer and sampler written
with the best stock torch ops, in the same dtype (``BASELINE``: F.rms_norm, F.linear,
vectorized RoPE, causal SDPA per prefill sequence, one batched block-table gather and masked
SDPA for decode, sampling in torch ops). Each phase (prefill, the decode steps, sampling)
runs ``--repeats`` times alternating polyops and stock torch; the script prints the thread
count and, per phase and in total, the median and min-max of each side and of their ratio.

The layer is written once against an op namespace: ``polyops`` (the fast functions, the
default) or ``torch.ops.polyops`` (the torch.library form, which ``torch.compile`` traces;
``--torch-ops``; ``--compile`` runs both sides, layer and sampler, through
``torch.compile(fullgraph=True, dynamic=False)``).

    python examples/decoder_layer.py --dtype bfloat16
    python examples/decoder_layer.py --torch-ops --compile
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch

import polyops
from polyops.testing.references import sampling_token_plausible, topk_topp_sampling_reference

#: polyops should be at least this much faster than the stock-torch layer in the same dtype.
SPEEDUP_TARGET = 1.5
SIDES = ("polyops", "stock torch")
#: What the stock-torch side runs (printed with the times, and in the JSON).
BASELINE = (
    "F.rms_norm, F.linear, RoPE vectorized over positions, index_copy_ into the paged cache; "
    "prefill: SDPA(is_causal, enable_gqa) per sequence; decode: one block-table gather for "
    "the batch + masked SDPA(enable_gqa); top-k/top-p sampling in torch ops"
)
TOP_K, TOP_P = 50, 0.9

# Largest error allowed, relative to max(1, max |reference|), per dtype: the layer chains
# ~10 roundings to the dtype, so this is a few units of its epsilon.
TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 8e-2}
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def rel_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """max |actual - expected| / max(1, max |expected|), in float64."""
    expected = expected.double()
    scale = max(1.0, expected.abs().max().item()) if expected.numel() else 1.0
    return ((actual.double() - expected).abs().max().item() if expected.numel() else 0.0) / scale


class Weights:
    """Random layer weights in `dtype` (the torch reference upcasts the same values)."""

    def __init__(self, args: argparse.Namespace, dtype: torch.dtype, g: torch.Generator):
        h, d = args.hidden, args.head_size
        q, kv, inter = args.heads * d, args.kv_heads * d, args.intermediate

        def w(*shape: int) -> torch.Tensor:
            return (torch.randn(*shape, generator=g) / math.sqrt(shape[-1])).to(dtype)

        self.norm1 = (1 + 0.1 * torch.randn(h, generator=g)).to(dtype)
        self.norm2 = (1 + 0.1 * torch.randn(h, generator=g)).to(dtype)
        self.qkv = w(q + 2 * kv, h)
        self.o = w(h, q)
        self.gate_up = w(2 * inter, h)
        self.down = w(h, inter)
        self.lm_head = w(args.vocab, h)
        pos = torch.arange(args.max_positions, dtype=torch.float64)
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angles = pos[:, None] * inv[None, :]
        self.cos_sin = torch.cat([angles.cos(), angles.sin()], dim=-1).to(dtype)


def polyops_layer(x, positions, cache, w, args, cu_q, cu_kv, block_table, ops=polyops):
    """One layer over tokens `x` [T, hidden]; prefill when cu_q is given, else decode.

    `ops` is ``polyops`` or ``torch.ops.polyops``: the code uses only what both forms share
    (rotary_embedding and reshape_and_cache update their tensors in place).
    """
    stages = {}
    d, hq, hkv = args.head_size, args.heads, args.kv_heads
    normed = ops.rms_norm(x, w.norm1, args.eps)
    stages["rms_norm"] = normed
    qkv = ops.linear(normed, w.qkv)
    stages["linear qkv"] = qkv
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    ops.rotary_embedding(positions, q, k, d, w.cos_sin, True)
    stages["rotary_embedding"] = torch.cat([q, k], dim=-1)
    key_cache, value_cache, slots = cache
    ops.reshape_and_cache(k.view(-1, hkv, d), v.view(-1, hkv, d), key_cache, value_cache, slots)
    if cu_q is not None:
        attn = ops.flash_attention(
            q.view(-1, hq, d),
            key_cache,
            value_cache,
            cu_seqlens_q=cu_q,
            cu_seqlens_kv=cu_kv,
            block_table=block_table,
            causal=True,
        )
        stages["flash_attention"] = attn
    else:
        seq_lens = (cu_kv[1:] - cu_kv[:-1]).to(torch.int32)
        attn = ops.paged_attention(q.view(-1, hq, d), key_cache, value_cache, seq_lens, block_table)
        stages["paged_attention"] = attn
    o = ops.linear(attn.reshape(-1, hq * d), w.o)
    stages["linear o"] = o
    y, residual = ops.add_rms_norm(o, x, w.norm2, args.eps)
    stages["add_rms_norm"] = y
    gate_up = ops.linear(y, w.gate_up)
    stages["linear gate_up"] = gate_up
    act = ops.silu_and_mul(gate_up)
    stages["silu_and_mul"] = act
    down = ops.linear(act, w.down)
    stages["linear down"] = down
    out = ops.add(down, residual)
    stages["add"] = out
    return out, stages


def torch_layer(x, positions, kv_store, w, args, seq_lens_q, seq_lens_kv, prefill):
    """The same layer in float32 torch; kv_store holds each sequence's contiguous K/V."""
    stages = {}
    d, hq, hkv = args.head_size, args.heads, args.kv_heads
    f = torch.float32
    x = x.to(f)
    normed = x / torch.sqrt((x * x).mean(-1, keepdim=True) + args.eps) * w.norm1.to(f)
    stages["rms_norm"] = normed
    qkv = normed @ w.qkv.to(f).T
    stages["linear qkv"] = qkv
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    cos, sin = w.cos_sin.to(f)[positions].chunk(2, dim=-1)

    def rope(t: torch.Tensor, heads: int) -> torch.Tensor:
        t = t.view(-1, heads, d)
        a, b = t[..., : d // 2], t[..., d // 2 :]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1).reshape(-1, heads * d)

    q, k = rope(q, hq), rope(k, hkv)
    stages["rotary_embedding"] = torch.cat([q, k], dim=-1)
    outputs, start = [], 0
    for b, (lq, lkv) in enumerate(zip(seq_lens_q, seq_lens_kv, strict=True)):
        kv_store[b][0].append(k[start : start + lq].view(lq, hkv, d))
        kv_store[b][1].append(v[start : start + lq].view(lq, hkv, d))
        keys = torch.cat(kv_store[b][0]).repeat_interleave(hq // hkv, dim=1)
        values = torch.cat(kv_store[b][1]).repeat_interleave(hq // hkv, dim=1)
        qs = q[start : start + lq].view(lq, hq, d)
        scores = torch.einsum("qhd,khd->hqk", qs, keys) / math.sqrt(d)
        visible = torch.arange(lkv)[None, :] <= torch.arange(lq)[:, None] + (lkv - lq)
        scores = scores.masked_fill(~visible, float("-inf"))
        outputs.append(torch.einsum("hqk,khd->qhd", scores.softmax(-1), values))
        start += lq
    attn = torch.cat(outputs)
    stages["flash_attention" if prefill else "paged_attention"] = attn
    o = attn.reshape(-1, hq * d) @ w.o.to(f).T
    stages["linear o"] = o
    residual = o + x
    y = residual / torch.sqrt((residual**2).mean(-1, keepdim=True) + args.eps) * w.norm2.to(f)
    stages["add_rms_norm"] = y
    gate_up = y @ w.gate_up.to(f).T
    stages["linear gate_up"] = gate_up
    g, u = gate_up.chunk(2, dim=-1)
    act = g * torch.sigmoid(g) * u
    stages["silu_and_mul"] = act
    down = act @ w.down.to(f).T
    stages["linear down"] = down
    stages["add"] = down + residual
    return stages["add"], stages


def stock_torch_layer(x, positions, cache, w, args, prefill_lens, seq_lens, block_table):
    """The layer as a user would write it in stock torch, in x's dtype, over its own paged cache.

    The same cache layout as polyops' (key/value [blocks, block_size, kv_heads, head_size],
    `block_table` int32 [batch, blocks per sequence]). Prefill when `prefill_lens` (each
    sequence's new tokens, a list of ints; prefill starts at position 0) is given: causal
    SDPA per sequence over its new keys. Decode otherwise (one token per sequence,
    `seq_lens` int32 [batch] the lengths including it): one gather of every sequence's
    blocks and one padded, masked SDPA for the batch. Returns the layer output [T, hidden].
    """
    fn = torch.nn.functional
    d, hq, hkv = args.head_size, args.heads, args.kv_heads
    normed = fn.rms_norm(x, (x.shape[-1],), w.norm1, args.eps)
    qk, v = fn.linear(normed, w.qkv).split([(hq + hkv) * d, hkv * d], dim=-1)
    # Rotate q and k in one go: cos / sin indexed by position, one cat for all heads.
    cos, sin = w.cos_sin[positions, None, :].chunk(2, dim=-1)
    a, b = qk.view(-1, hq + hkv, d).chunk(2, dim=-1)
    q, k = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).split([hq, hkv], dim=1)
    v = v.view(-1, hkv, d)
    key_cache, value_cache, slots = cache
    key_cache.view(-1, hkv, d).index_copy_(0, slots, k)
    value_cache.view(-1, hkv, d).index_copy_(0, slots, v)
    if prefill_lens is not None:
        # [1, heads, tokens, head_size]: with 3-D inputs SDPA takes its slow math path on CPU.
        per_seq = [t.transpose(0, 1)[None].split(prefill_lens, dim=2) for t in (q, k, v)]
        attn = torch.cat(
            [
                fn.scaled_dot_product_attention(qs, ks, vs, is_causal=True, enable_gqa=True)
                for qs, ks, vs in zip(*per_seq, strict=True)
            ],
            dim=2,
        )[0].transpose(0, 1)
    else:
        # The whole table (its width covers the longest sequence): static shapes, no host sync.
        batch = block_table.shape[0]
        keys = key_cache[block_table].view(batch, -1, hkv, d).transpose(1, 2)
        values = value_cache[block_table].view(batch, -1, hkv, d).transpose(1, 2)
        visible = torch.arange(keys.shape[2]) < seq_lens[:, None]
        attn = fn.scaled_dot_product_attention(
            q.unsqueeze(2), keys, values, attn_mask=visible[:, None, None, :], enable_gqa=True
        )
    residual = fn.linear(attn.reshape(-1, hq * d), w.o) + x
    y = fn.rms_norm(residual, (residual.shape[-1],), w.norm2, args.eps)
    gate, up = fn.linear(y, w.gate_up).chunk(2, dim=-1)
    return fn.linear(fn.silu(gate) * up, w.down) + residual


def polyops_sample(x, w, uniform, ops=polyops):
    """Logits [batch, vocab] of the final hidden states x [batch, hidden] and the token ids
    (int64 [batch]) drawn from them at `uniform` (float32 [batch]): top-k 50, top-p 0.9."""
    logits = ops.linear(x, w.lm_head)
    return logits, ops.topk_topp_sampling(logits, TOP_K, TOP_P, uniform=uniform)


def stock_torch_sample(x, w, uniform):
    """The same in stock torch ops: the top k, then the top-p prefix, then the inverse CDF at u."""
    logits = torch.nn.functional.linear(x, w.lm_head)
    scores = logits.float()
    # The top k, with tied logits (common in 16-bit) in token-id order, as polyops orders them.
    indices = scores.topk(TOP_K).indices.sort(-1).values
    values, order = scores.gather(-1, indices).sort(dim=-1, descending=True, stable=True)
    indices = indices.gather(-1, order)
    cumulative = (values - values[:, :1]).exp().cumsum(-1)
    kept = (cumulative < TOP_P * cumulative[:, -1:]).sum(-1, keepdim=True) + 1
    mass = cumulative.gather(-1, kept - 1)
    chosen = torch.searchsorted(cumulative, uniform[:, None] * mass, right=True)
    return logits, indices.gather(-1, torch.minimum(chosen, kept - 1)).squeeze(-1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=DTYPES, default="bfloat16")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-size", type=int, default=64)
    parser.add_argument("--intermediate", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--seq-lens", default="1,7,300", help="prefill lengths, comma separated")
    parser.add_argument("--decode-steps", type=int, default=4)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--max-positions", type=int, default=4096)
    parser.add_argument("--eps", type=float, default=1e-6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="timed runs of each phase per side (median, min-max; 0: no timing)",
    )
    parser.add_argument(
        "--torch-ops", action="store_true", help="call the ops as torch.ops.polyops.<op>"
    )
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="PATH",
        help="also write the times, the speedup and the error check to this JSON file",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="run both sides (layer and sampler) through torch.compile(fullgraph=True, "
        "dynamic=False); implies --torch-ops; compiling happens in untimed calls",
    )
    args = parser.parse_args(argv)
    ops = torch.ops.polyops if args.torch_ops or args.compile else polyops
    layer = functools.partial(polyops_layer, ops=ops)
    sample = functools.partial(polyops_sample, ops=ops)
    stock_layer, stock_sample = stock_torch_layer, stock_torch_sample
    if args.compile:  # the same settings on both sides; compiling happens in untimed calls
        compile_ = functools.partial(torch.compile, fullgraph=True, dynamic=False)
        layer, sample, stock_layer, stock_sample = map(
            compile_, (layer, sample, stock_layer, stock_sample)
        )
    dtype = DTYPES[args.dtype]
    g = torch.Generator().manual_seed(args.seed)
    w = Weights(args, dtype, g)
    lengths = [int(s) for s in args.seq_lens.split(",")]
    batch, d, hkv = len(lengths), args.head_size, args.kv_heads

    # A paged cache with a random block table per sequence.
    max_len = max(lengths) + args.decode_steps
    blocks_per_seq = -(-max_len // args.block_size)
    num_blocks = batch * blocks_per_seq + 3
    block_table = torch.randperm(num_blocks, generator=g)[: batch * blocks_per_seq]
    block_table = block_table.view(batch, blocks_per_seq).to(torch.int32)
    key_cache = torch.zeros(num_blocks, args.block_size, hkv, d, dtype=dtype)
    value_cache = torch.zeros_like(key_cache)
    stock_cache = (torch.zeros_like(key_cache), torch.zeros_like(key_cache))
    kv_store = [([], []) for _ in range(batch)]

    def slots_for(seq: int, start: int, count: int) -> list[int]:
        return [
            int(block_table[seq, p // args.block_size]) * args.block_size + p % args.block_size
            for p in range(start, start + count)
        ]

    # times[phase][side][r]: the r-th timed run of that phase (decode: all its steps), the
    # two sides alternating, so that run r of both sides saw about the same machine load.
    times: dict[str, dict[str, list[float]]] = {}

    def time_both(phase: str, polyops_fn, stock_fn) -> None:
        runs = times.setdefault(phase, {side: [0.0] * args.repeats for side in SIDES})
        for r in range(args.repeats):
            for side, fn in zip(SIDES, (polyops_fn, stock_fn), strict=True):
                start = time.perf_counter()
                fn()
                runs[side][r] += time.perf_counter() - start

    errors: dict[str, float] = {}
    x = torch.randn(sum(lengths), args.hidden, generator=g).to(dtype)
    steps = [("prefill", lengths, [0] * batch)] + [
        (f"decode {i + 1}", [1] * batch, [n + i for n in lengths]) for i in range(args.decode_steps)
    ]
    for name, q_lens, past in steps:
        positions = torch.tensor(
            [p for n, s in zip(q_lens, past, strict=True) for p in range(s, s + n)]
        )
        slots = torch.tensor(
            [
                s
                for b, (n, p) in enumerate(zip(q_lens, past, strict=True))
                for s in slots_for(b, p, n)
            ]
        )
        kv_lens = [n + p for n, p in zip(q_lens, past, strict=True)]
        cu_kv = torch.tensor([0, *torch.tensor(kv_lens).cumsum(0).tolist()], dtype=torch.int32)
        cu_q = None
        if name == "prefill":
            cu_q = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
        polyops_step = functools.partial(
            layer, x, positions, (key_cache, value_cache, slots), w, args, cu_q, cu_kv, block_table
        )
        stock_step = functools.partial(
            stock_layer,
            x,
            positions,
            (*stock_cache, slots),
            w,
            args,
            q_lens if name == "prefill" else None,
            torch.tensor(kv_lens, dtype=torch.int32),
            block_table,
        )
        out, stages = polyops_step()
        stock_out = stock_step()
        ref, ref_stages = torch_layer(
            x, positions, kv_store, w, args, q_lens, kv_lens, name == "prefill"
        )
        errors[f"{name:<9} stock torch output"] = rel_error(stock_out, ref)
        # Every step is idempotent (the caches get the same values in the same slots), so
        # it can be rerun for timing.
        time_both("prefill" if name == "prefill" else "decode", polyops_step, stock_step)
        for stage, value in stages.items():
            key = f"{name:<9} {stage}"
            errors[key] = rel_error(value.reshape(ref_stages[stage].shape), ref_stages[stage])
        # The next step decodes one new token per sequence: feed each sequence's last output.
        last = torch.tensor(q_lens).cumsum(0) - 1
        x = out[last].contiguous()

    u = torch.rand(batch, generator=g)
    logits, tokens = sample(x, w, u)
    errors["final     logits"] = rel_error(logits, x.float() @ w.lm_head.float().T)
    expected_tokens = topk_topp_sampling_reference(logits, TOP_K, TOP_P, uniform=u)
    stock_logits, stock_tokens = stock_sample(x, w, u)
    stock_ok = all(
        sampling_token_plausible(row, TOP_K, TOP_P, ub, int(token))
        for row, ub, token in zip(stock_logits, u.tolist(), stock_tokens, strict=True)
    )
    time_both("sample", lambda: sample(x, w, u), lambda: stock_sample(x, w, u))

    tolerance = TOLERANCE[dtype]
    form = "torch.compile(torch.ops.polyops)" if args.compile else f"{ops.__name__}.<op>"
    print(
        f"decoder layer via {form}, {args.dtype}, prefill lengths {lengths}, "
        f"{args.decode_steps} decode steps"
    )
    print(f"{'step / stage':<30} {'max rel error':>14}  (tolerance {tolerance:g})")
    failed = 0
    for key, error in errors.items():
        ok = error <= tolerance
        failed += not ok
        print(f"{key:<30} {error:>14.3e}  {'ok' if ok else 'FAIL'}")
    same = torch.equal(tokens, expected_tokens)
    failed += (not same) + (not stock_ok)
    print(
        f"{'sampled tokens':<30} {tokens.tolist()} vs reference {expected_tokens.tolist()}: "
        f"{'ok' if same else 'FAIL'}"
    )
    print(
        f"{'stock torch sampled tokens':<30} {stock_tokens.tolist()}, each a valid draw: "
        f"{'ok' if stock_ok else 'FAIL'}"
    )
    result = {"dtype": args.dtype, "threads": torch.get_num_threads(), "repeats": args.repeats}
    result |= {"compile": args.compile, "baseline": BASELINE, "target": SPEEDUP_TARGET}
    result |= {"speedup": None, "result": None}
    if args.repeats > 0:
        result |= report_times(times, args)
    result["errors_ok"] = not failed
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if failed else 0


def report_times(times: dict[str, dict[str, list[float]]], args: argparse.Namespace) -> dict:
    """Print each phase's and the total's median [min-max] per side and of the ratio, and
    the verdict; return the JSON fields (seconds; the ratio is stock torch / polyops)."""

    def stats(values: list[float]) -> dict[str, float]:
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    def cell(values: list[float], scale: float = 1.0) -> str:
        return "{median:.2f} [{min:.2f}-{max:.2f}]".format_map(
            {key: value * scale for key, value in stats(values).items()}
        )

    total = {
        side: [sum(run) for run in zip(*(t[side] for t in times.values()), strict=True)]
        for side in SIDES
    }
    ratios = {}
    print(
        f"time ({args.dtype}, prefill + {args.decode_steps} decode steps + sampling; "
        f"threads: {torch.get_num_threads()}, {args.repeats} runs per phase alternating the sides; "
        "median [min-max]):"
    )
    print(f"  baseline: {BASELINE}")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if load > (os.cpu_count() or 1):
        print(
            f"  note: load average {load:.1f} on {os.cpu_count()} CPUs: the times are noisy, "
            "spinning OpenMP threads wait for busy cores (OMP_WAIT_POLICY=PASSIVE lessens it)"
        )
    print(f"  {'phase':<8} {'polyops ms':>22} {'stock torch ms':>22} {'stock / polyops':>20}")
    for phase, runs in {**times, "total": total}.items():
        ratios[phase] = [s / p for p, s in zip(runs["polyops"], runs["stock torch"], strict=True)]
        print(
            f"  {phase:<8} {cell(runs['polyops'], 1e3):>22} "
            f"{cell(runs['stock torch'], 1e3):>22} {cell(ratios[phase]):>20}"
        )
    speedup = stats(ratios["total"])
    verdict = "PASS" if speedup["median"] >= SPEEDUP_TARGET else "MISS"
    print(
        f"polyops {speedup['median']:.2f}x stock torch in {args.dtype} "
        f"({'both sides compiled' if args.compile else 'eager'}; median of {args.repeats} runs, "
        f"{speedup['min']:.2f}-{speedup['max']:.2f}), target >= {SPEEDUP_TARGET:g}x: {verdict}"
        + (" (the runs straddle it)" if speedup["min"] < SPEEDUP_TARGET <= speedup["max"] else "")
    )
    return {
        "polyops_s": stats(total["polyops"]),
        "stock_torch_s": stats(total["stock torch"]),
        "speedup": speedup["median"],
        "speedup_min": speedup["min"],
        "speedup_max": speedup["max"],
        "result": verdict,
    }


if __name__ == "__main__":
    sys.exit(main())
