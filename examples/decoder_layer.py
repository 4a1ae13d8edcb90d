"""A Llama-style decoder layer driven entirely through polyops, checked against plain torch.

Prefill of a varlen batch:
    rms_norm -> linear (qkv) -> rotary_embedding -> reshape_and_cache -> flash_attention
    -> linear (o) -> add_rms_norm -> linear (gate_up) -> silu_and_mul -> linear (down)
then several decode steps with paged_attention over the cache, and topk_topp_sampling on
the final logits. The same layer runs in plain torch in float32 from the same weights (the
accuracy reference): every stage's largest error is printed, and the script exits 1 when
an error exceeds the dtype's tolerance.

Speed is compared with what a user would run instead: the same layer written with stock
torch ops (F.rms_norm, F.linear, F.scaled_dot_product_attention, index_copy_ into the same
paged cache layout, ...) in the same dtype. Each step (prefill, each decode step) is timed
``--repeats`` times alternating polyops and stock torch, and the medians are summed.

The layer is written once against an op namespace: ``polyops`` (the fast functions, the
default) or ``torch.ops.polyops`` (the torch.library form, which ``torch.compile`` traces;
``--torch-ops``, plus ``--compile`` to run it through ``torch.compile(fullgraph=True)``).

    python examples/decoder_layer.py --dtype bfloat16
    python examples/decoder_layer.py --torch-ops --compile
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

import polyops
from polyops.testing.references import topk_topp_sampling_reference

#: polyops should be at least this much faster than the stock-torch layer in the same dtype.
SPEEDUP_TARGET = 1.5

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


def stock_torch_layer(x, positions, cache, w, args, cu_q, cu_kv, block_table):
    """The layer with stock torch ops in x's dtype, over its own paged cache of the same layout.

    What a user would run without polyops; returns the layer output [T, hidden].
    """
    fn = torch.nn.functional
    d, hq, hkv = args.head_size, args.heads, args.kv_heads
    normed = fn.rms_norm(x, (x.shape[-1],), w.norm1, args.eps)
    qkv = fn.linear(normed, w.qkv)
    q, k, v = qkv.split([hq * d, hkv * d, hkv * d], dim=-1)
    cos, sin = w.cos_sin[positions].chunk(2, dim=-1)

    def rope(t: torch.Tensor, heads: int) -> torch.Tensor:
        t = t.reshape(-1, heads, d)
        a, b = t[..., : d // 2], t[..., d // 2 :]
        c, s = cos[:, None, :], sin[:, None, :]
        return torch.cat([a * c - b * s, b * c + a * s], dim=-1)

    q, k = rope(q, hq), rope(k, hkv)
    key_cache, value_cache, slots = cache
    key_cache.view(-1, hkv, d).index_copy_(0, slots, k)
    value_cache.view(-1, hkv, d).index_copy_(0, slots, v.reshape(-1, hkv, d))
    kv_lens = (cu_kv[1:] - cu_kv[:-1]).tolist()
    q_lens = (cu_q[1:] - cu_q[:-1]).tolist() if cu_q is not None else [1] * len(kv_lens)
    outputs, start = [], 0
    for b, (lq, lkv) in enumerate(zip(q_lens, kv_lens, strict=True)):
        blocks = block_table[b, : -(-lkv // args.block_size)]
        keys = key_cache[blocks].reshape(-1, hkv, d)[:lkv].transpose(0, 1)
        values = value_cache[blocks].reshape(-1, hkv, d)[:lkv].transpose(0, 1)
        qs = q[start : start + lq].transpose(0, 1)
        mask = None
        if 1 < lq:  # causal, the queries being the last lq of the lkv positions
            mask = torch.arange(lkv)[None, :] <= torch.arange(lq)[:, None] + (lkv - lq)
        attn = fn.scaled_dot_product_attention(qs, keys, values, attn_mask=mask, enable_gqa=True)
        outputs.append(attn.transpose(0, 1))
        start += lq
    o = fn.linear(torch.cat(outputs).reshape(-1, hq * d), w.o)
    residual = o + x
    y = fn.rms_norm(residual, (residual.shape[-1],), w.norm2, args.eps)
    gate, up = fn.linear(y, w.gate_up).chunk(2, dim=-1)
    return fn.linear(fn.silu(gate) * up, w.down) + residual


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
        help="timed runs of each step per implementation (median; 0: no timing)",
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
        help="run the layer through torch.compile(fullgraph=True) (implies --torch-ops; "
        "the polyops time then includes compiling)",
    )
    args = parser.parse_args(argv)
    ops = torch.ops.polyops if args.torch_ops or args.compile else polyops
    layer = functools.partial(polyops_layer, ops=ops)
    if args.compile:
        layer = torch.compile(layer, fullgraph=True)
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

    errors: dict[str, float] = {}
    times = {"polyops": 0.0, "stock torch": 0.0}
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
            stock_torch_layer,
            x,
            positions,
            (*stock_cache, slots),
            w,
            args,
            cu_q,
            cu_kv,
            block_table,
        )
        out, stages = polyops_step()
        stock_out = stock_step()
        ref, ref_stages = torch_layer(
            x, positions, kv_store, w, args, q_lens, kv_lens, name == "prefill"
        )
        errors[f"{name:<9} stock torch output"] = rel_error(stock_out, ref)
        # Every step is idempotent (the caches get the same values in the same slots), so
        # it can be rerun for timing; the two implementations alternate.
        samples: dict[str, list[float]] = {"polyops": [], "stock torch": []}
        for _ in range(args.repeats):
            for key, fn in (("polyops", polyops_step), ("stock torch", stock_step)):
                start = time.perf_counter()
                fn()
                samples[key].append(time.perf_counter() - start)
        if args.repeats > 0:
            for key, values in samples.items():
                times[key] += statistics.median(values)
        for stage, value in stages.items():
            key = f"{name:<9} {stage}"
            errors[key] = rel_error(value.reshape(ref_stages[stage].shape), ref_stages[stage])
        # The next step decodes one new token per sequence: feed each sequence's last output.
        last = torch.tensor(q_lens).cumsum(0) - 1
        x = out[last].contiguous()

    logits = ops.linear(x, w.lm_head)
    errors["final     logits"] = rel_error(logits, x.float() @ w.lm_head.float().T)
    u = torch.rand(batch, generator=g)
    tokens = ops.topk_topp_sampling(logits, 50, 0.9, uniform=u)
    expected_tokens = topk_topp_sampling_reference(logits, 50, 0.9, uniform=u)

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
    failed += not same
    print(
        f"{'sampled tokens':<30} {tokens.tolist()} vs reference {expected_tokens.tolist()}: "
        f"{'ok' if same else 'FAIL'}"
    )
    speedup = times["stock torch"] / times["polyops"] if args.repeats > 0 else None
    if speedup is not None:
        print(
            f"time ({args.dtype}, prefill + {args.decode_steps} decode steps, median of "
            f"{args.repeats} per step): polyops {times['polyops'] * 1e3:.1f} ms, stock torch ops "
            f"in {args.dtype} {times['stock torch'] * 1e3:.1f} ms: polyops {speedup:.2f}x "
            f"(target >= {SPEEDUP_TARGET:g}x: {'PASS' if speedup >= SPEEDUP_TARGET else 'MISS'})"
        )
    if args.json is not None:
        result = {
            "dtype": args.dtype,
            "threads": torch.get_num_threads(),
            "polyops_s": times["polyops"],
            "stock_torch_s": times["stock torch"],
            "speedup": speedup,
            "target": SPEEDUP_TARGET,
            "result": None if speedup is None else "PASS" if speedup >= SPEEDUP_TARGET else "MISS",
            "errors_ok": not failed,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
