"""The row kernels, the attention tile kernel, the compute-bound elementwise maps
(silu_and_mul's two slots, swiglu), the rotary kernel and add (alpha included) / mul
exist in baseline, AVX2 and AVX-512 builds, chosen at run time.

POLYOPS_CPU_ISA caps the choice, so each variant runs here in a subprocess
(and AVX-512 with and without AVX512_BF16's rounding instruction) and must
give the same bits as the others (the build does not contract
multiply-adds, and every variant sums in the same order) and match float64.
"""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from polyops.testing import ATTENTION
from polyops.testing.references import flash_attention_reference

SCRIPT = r"""
import sys, torch, polyops
inf, nan = float("inf"), float("nan")
g = torch.Generator().manual_seed(7)
out = {}
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    x = torch.randn(64, 4096, generator=g).to(dtype)
    r = torch.randn(64, 4096, generator=g).to(dtype)
    w = torch.randn(4096, generator=g).to(dtype)
    out[f"rms_norm_{dtype}"] = polyops.rms_norm(x, w, 1e-6, implementation_index=1)
    y, s = polyops.add_rms_norm(x, r, w, 1e-6, implementation_index=1)
    out[f"add_rms_norm_{dtype}"] = y
    out[f"residual_{dtype}"] = s
    h = torch.Generator().manual_seed(3)  # keeps g's draws those the test redoes
    q = torch.randn(70, 8, 128, generator=h).to(dtype)
    k = torch.randn(90, 2, 128, generator=h).to(dtype)
    v = torch.randn(90, 2, 128, generator=h).to(dtype)
    cq = torch.tensor([0, 5, 70], dtype=torch.int32)
    ck = torch.tensor([0, 20, 90], dtype=torch.int32)
    out[f"attention_{dtype}"] = polyops.flash_attention(q, k, v, cu_seqlens_q=cq, cu_seqlens_kv=ck)
    # Spans the exp clamps (|x| > 87) and odd lengths (the vector loops' tails).
    m = torch.randn(38, 1001, generator=h) * 30
    m[-1] *= 7
    m = m.to(dtype)
    out[f"silu_and_mul_{dtype}"] = polyops.silu_and_mul(m[:, :1000])
    out[f"silu_and_mul_vllm_{dtype}"] = polyops.silu_and_mul(m[:, :1000], implementation_index=1)
    out[f"swiglu_{dtype}"] = polyops.swiglu(m[:, 1:], m[:, :-1])
    cache = torch.randn(64, 96, generator=h).to(dtype)
    pos = torch.randint(0, 64, (38,), generator=h)
    rq, rk = m[:, : 4 * 128].reshape(-1, 4, 128).clone(), m[:, 1: 1 + 128].clone()
    polyops.rotary_embedding(pos, rq, rk, 128, cache, True)
    out[f"rotary_neox_{dtype}"] = torch.cat([rq.flatten(), rk.flatten()])
    polyops.rotary_embedding(pos, rq, rk, 128, cache, False)
    out[f"rotary_pairs_{dtype}"] = torch.cat([rq.flatten(), rk.flatten()])
    # NaN and inf (test_nan_inf.py has their float64 references): hidden and
    # visible NaN keys, a +inf score, -inf scores, an inf value; softmax rows
    # with NaN, +inf and -inf; silu of +-inf and NaN.
    q[..., 0] = q[..., 0].abs() + 0.5
    k[3, 0, 7], k[40, 1, 0], k[50, 0, 0], k[0, 1, 0] = nan, inf, -inf, -inf
    v[60, 0, 9], v[0, 1, 3] = nan, inf
    out[f"attention_specials_{dtype}"] = polyops.flash_attention(
        q, k, v, cu_seqlens_q=cq, cu_seqlens_kv=ck)
    # Attention rows in groups of 6 (AVX2), 4, 2 and 1 (126-row tiles of 3 heads),
    # head size 80 (a 16-dim tail), a sliding window, and paged decode.
    a = torch.Generator().manual_seed(11)
    q3 = torch.randn(150, 6, 80, generator=a).to(dtype)
    k3 = torch.randn(170, 2, 80, generator=a).to(dtype)
    v3 = torch.randn(170, 2, 80, generator=a).to(dtype)
    cq3 = torch.tensor([0, 3, 150], dtype=torch.int32)
    ck3 = torch.tensor([0, 20, 170], dtype=torch.int32)
    out[f"attention_tails_{dtype}"] = polyops.flash_attention(
        q3, k3, v3, cu_seqlens_q=cq3, cu_seqlens_kv=ck3, causal=True, window_left=45)
    kc = torch.randn(12, 16, 2, 80, generator=a).to(dtype)
    vc = torch.randn(12, 16, 2, 80, generator=a).to(dtype)
    lens = torch.tensor([37, 150, 0], dtype=torch.int32)
    table = torch.randint(0, 12, (3, 10), generator=a, dtype=torch.int32)
    out[f"paged_attention_{dtype}"] = polyops.paged_attention(q3[:3], kc, vc, lens, table)
    # Head size 84 = 5 * 16 + 4: a scalar tail after the 16-, 8- and 4-float
    # vector blocks of every variant; 37 keys (a partial key piece).
    b = torch.Generator().manual_seed(13)
    q4, k4, v4 = (torch.randn(n, h, 84, generator=b).to(dtype)
                  for n, h in ((30, 4), (37, 2), (37, 2)))
    cq4 = torch.tensor([0, 30], dtype=torch.int32)
    ck4 = torch.tensor([0, 37], dtype=torch.int32)
    out[f"attention_d84_{dtype}"] = polyops.flash_attention(
        q4, k4, v4, cu_seqlens_q=cq4, cu_seqlens_kv=ck4, causal=True)
    s = torch.randn(3, 40, 50, generator=h).to(dtype)
    s[0, 1, 5], s[0, 2, 20], s[0, 3, :14], s[1, :, 7], s[2, 30, 45:] = nan, inf, -inf, -inf, nan
    out[f"causal_softmax_specials_{dtype}"] = polyops.causal_softmax(s)
    m[:, 5], m[:, 600], m[3], m[4, 700:] = -inf, inf, nan, 0.0
    out[f"silu_and_mul_specials_{dtype}"] = polyops.silu_and_mul(m[:, :1000])
    # Outputs over 16 MiB take the streaming stores; 4100 keeps a vector tail
    # and puts most rows off 64-byte alignment (both store paths in one call).
    rows = 1030 if dtype == torch.float32 else 2060
    big = torch.randn(rows, 4100, generator=h).to(dtype)
    res = torch.randn(rows, 4100, generator=h).to(dtype)
    wb = torch.randn(4100, generator=h).to(dtype)
    out[f"big_inputs_{dtype}"] = torch.stack([big, res, wb.expand_as(big)])
    out[f"rms_norm_big_{dtype}"] = polyops.rms_norm(big, wb, 1e-6)
    out[f"add_rms_norm_big_{dtype}"] = torch.cat(polyops.add_rms_norm(big, res, wb, 1e-6))
    # NaN / inf rows, and outputs in bfloat16's subnormal range (tiny weights).
    big[0, 5], big[1, 7], big[2, :] = nan, inf, 0.0
    wb[100:200] = 1e-39 if dtype != torch.float16 else 1e-7
    out[f"rms_norm_big_specials_{dtype}"] = polyops.rms_norm(big, wb, 1e-6)
    out[f"add_rms_norm_big_specials_{dtype}"] = torch.cat(polyops.add_rms_norm(big, res, wb, 1e-6))
    sm = (torch.randn(16, 512, 1100, generator=h) * 4).to(dtype)
    sm[0, 3, 1], sm[1, 600 % 512, 2] = nan, inf
    out[f"causal_softmax_big_{dtype}"] = polyops.causal_softmax(sm)
    # Scores far apart: exps below float32's range (2^y for y < -151 and
    # -inf), long rows (the blocked three-pass path past 16384 keys).
    wide = torch.randn(2, 30, 47, generator=h) * 400
    wide[1, 29, :3] = 6e4
    out[f"causal_softmax_wide_{dtype}"] = polyops.causal_softmax(wide.to(dtype))
    long = (torch.randn(2, 3, 16500, generator=h) * 8).to(dtype)
    out[f"causal_softmax_long_{dtype}"] = polyops.causal_softmax(long)
    ma, mb = big[:, :4099], res[:, 1:]
    ma[3, :3], ma[4, 0], mb[5, :2] = nan, -inf, 1e-39
    out[f"mul_{dtype}"] = polyops.mul(ma, mb)
    out[f"add_{dtype}"] = polyops.add(ma, mb)
    # alpha != 1: the vector loops' fused multiply-add, and staged blocks
    # (transposed operands), whose baseline build calls libm's fma.
    out[f"add_alpha_{dtype}"] = polyops.add(ma, mb, alpha=-0.3)
    out[f"add_alpha_blocks_{dtype}"] = polyops.add(ma[:40].t(), mb[:40].t(), alpha=0.7)
    # Contiguous, over 16 MiB: AVX-512 and AVX2 stream them
    # (cpu/kernels/elementwise/binary_vector.h).
    out[f"mul_big_{dtype}"] = polyops.mul(big, res)
    out[f"add_big_{dtype}"] = polyops.add(big, res)
torch.save(out, sys.argv[1])
"""


#: POLYOPS_CPU_ISA values: "avx512" is AVX-512 without AVX512_BF16's bfloat16
#: rounding instruction (the integer path), "all" (the variable empty, as if
#: unset) whatever the CPU has.
ISAS = ("baseline", "avx2", "avx512", "all")


def _run(isa: str, path: str) -> dict[str, torch.Tensor]:
    env = dict(os.environ, POLYOPS_CPU_ISA="" if isa == "all" else isa)
    subprocess.run([sys.executable, "-c", SCRIPT, path], env=env, check=True)
    return torch.load(path)


def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """float64 rms_norm of the rows of x [rows, hidden] with weight w [hidden], eps 1e-6."""
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w


def test_isa_variants_agree_bit_for_bit(tmp_path):
    results = {isa: _run(isa, str(tmp_path / f"{isa}.pt")) for isa in ISAS}
    g = torch.Generator().manual_seed(7)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.randn(64, 4096, generator=g).to(dtype).double()
        r = torch.randn(64, 4096, generator=g).to(dtype).double()
        w = torch.randn(4096, generator=g).to(dtype).double()
        summed = (x + r).to(dtype).double()
        expected = {
            f"rms_norm_{dtype}": x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w,
            f"add_rms_norm_{dtype}": summed
            / torch.sqrt((summed * summed).mean(-1, keepdim=True) + 1e-6)
            * w,
            f"residual_{dtype}": summed,
        }
        tolerance = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]
        for key, reference in expected.items():
            baseline = results["baseline"][key]
            for isa in ISAS[1:]:
                assert torch.equal(results[isa][key], baseline), f"{key}: {isa} != baseline"
            error = ((baseline.double() - reference).abs() / reference.abs().clamp(min=1)).max()
            assert error <= tolerance, f"{key}: {error}"
        # Checked against float64 in test_flash_attention.py, test_add_mul.py, test_rotary.py.
        for op in (
            "attention",
            "attention_tails",
            "attention_d84",
            "paged_attention",
            "silu_and_mul",
            "silu_and_mul_vllm",
            "swiglu",
            "rotary_neox",
            "rotary_pairs",
        ):
            key = f"{op}_{dtype}"
            for isa in ISAS[1:]:
                assert torch.equal(results[isa][key], results["baseline"][key]), f"{key}: {isa}"
        # Head size 84 (every variant's vector blocks and a scalar tail) against float64.
        b = torch.Generator().manual_seed(13)
        q4, k4, v4 = (
            torch.randn(n, h, 84, generator=b).to(dtype) for n, h in ((30, 4), (37, 2), (37, 2))
        )
        reference = flash_attention_reference(
            q4.double(),
            k4.double(),
            v4.double(),
            cu_seqlens_q=torch.tensor([0, 30], dtype=torch.int32),
            cu_seqlens_kv=torch.tensor([0, 37], dtype=torch.int32),
        )
        got = results["baseline"][f"attention_d84_{dtype}"].double()
        limit = ATTENTION[dtype]
        assert ((got - reference).abs() <= limit.atol + limit.rtol * reference.abs()).all(), dtype
        # The streaming and vector-tail paths (outputs over 16 MiB, rows of
        # 4100): float64 on normal data, then the bits of every variant.
        big, res, wb = results["baseline"][f"big_inputs_{dtype}"].double()
        summed = (big + res).to(dtype).double()
        expected = {
            f"rms_norm_big_{dtype}": rms(big, wb[0]),
            f"add_rms_norm_big_{dtype}": torch.cat([rms(summed, wb[0]), summed]),
        }
        for key, reference in expected.items():
            got = results["baseline"][key].double()
            error = ((got - reference).abs() / reference.abs().clamp(min=1)).max()
            assert error <= tolerance, f"{key}: {error}"
        # The bits, so that NaN == NaN (torch.equal says no).
        bits = torch.int32 if dtype == torch.float32 else torch.int16
        for op in (
            "rms_norm_big",
            "add_rms_norm_big",
            "rms_norm_big_specials",
            "add_rms_norm_big_specials",
            "causal_softmax_big",
            "causal_softmax_wide",
            "causal_softmax_long",
            "mul",
            "add",
            "add_alpha",
            "add_alpha_blocks",
            "mul_big",
            "add_big",
        ):
            key = f"{op}_{dtype}"
            baseline = results["baseline"][key].view(bits)
            for isa in ISAS[1:]:
                assert torch.equal(results[isa][key].view(bits), baseline), f"{key}: {isa}"
        # These have NaNs (and numbers): a variant that lost or made one fails above.
        for op in (
            "attention_specials",
            "causal_softmax_specials",
            "silu_and_mul_specials",
            "rms_norm_big_specials",
            "add_rms_norm_big_specials",
            "causal_softmax_big",
            "mul",
            "add",
            "add_alpha",
            "add_alpha_blocks",
            "mul_big",
            "add_big",
        ):
            key = f"{op}_{dtype}"
            baseline = results["baseline"][key]
            assert baseline.isnan().any() and not baseline.isnan().all(), key
            for isa in ISAS[1:]:
                assert torch.equal(results[isa][key].view(bits), baseline.view(bits)), (
                    f"{key}: {isa}"
                )
