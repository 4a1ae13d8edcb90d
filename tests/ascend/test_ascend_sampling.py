"""topk_topp_sampling's Ascend slot on the CANN test double, beyond the parity table.

The npu token is not bit-exact (docs/backends/ascend.md): it is judged by
polyops.testing.references.sampling_token_plausible, except where the contract's
draw is deterministic whatever the rounding (bad rows, ties, u at a bin's
centre), where it must be exactly the contract's token. Checked here:
- many shapes (V from 1 to 50257, B from 1 to 64), float16/bfloat16/float32,
  scalar and int32/int64/float32 tensor top_k / top_p, strided rows, in one process;
- the contract's bad-row rules (NaN as -inf, +inf rows, rows with no finite logit),
  the ties of the k-th largest logit, a top-p cut inside a group of tied logits;
- what out-of-range u and top_p values give (they cannot be checked without a
  device-to-host copy), and that seed= is refused with the way out;
- the host path: a repeated call runs no phase 1, copy, allocation or synchronization.
Each check runs in a fresh interpreter (use_cann_double() is once per process).
"""

from __future__ import annotations

import textwrap

import pytest

from tests.ascend._npu_child import _skip_reason, run_child

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

PRELUDE = """
import math
from polyops.testing.references import (
    ONE_MINUS, topk_topp_sampling_implausible_rows, topk_topp_sampling_reference)

def sample(logits, k, p, u, **kwargs):
    put = lambda t: t.to("npu") if isinstance(t, torch.Tensor) else t
    return polyops.topk_topp_sampling(
        put(logits), put(k), put(p), uniform=put(u), **kwargs).cpu()
"""

# The launches of one call, in order, for float32 logits with an int32 (or scalar) top_k
# (float16/bfloat16 logits add a leading aclnnCast, an int64 top_k a Clamp and a Cast;
# the NanToNum and Clamp before ApplyTopKTopP bring top_p into [0, 1]).
LAUNCHES = [
    "aclnnNanToNum",
    "aclnnFlip",
    "aclnnSort",
    "aclnnNanToNum",
    "aclnnClamp",
    "aclnnApplyTopKTopP",
    "aclnnSoftmax",
    "aclnnCumsum",
    "aclnnClamp",
    "aclnnRsubs",
    "aclnnSearchSorted",
    "aclnnGather",
    "aclnnRsubs",
]


def run(body: str) -> object:
    return run_child(PRELUDE + textwrap.dedent(body))


def test_many_shapes_dtypes_and_filters_give_plausible_tokens():
    result = run(
        """
        gen = torch.Generator().manual_seed(11)
        bad = []
        checked = 0
        shapes = [(1, 1), (5, 1), (3, 2), (4, 3), (17, 7), (64, 64), (8, 257),
                  (3, 1000), (2, 4096), (4, 32000), (64, 50257)]
        for rows, vocab in shapes:
            for dtype in (torch.float16, torch.bfloat16, torch.float32):
                if rows * vocab > 200_000 and dtype != torch.float32:
                    continue  # the largest shape once: the double is slow
                scale = 4.0 if dtype == torch.float32 else 2.0
                logits = (torch.randn(rows, vocab, generator=gen) * scale).to(dtype)
                u = torch.rand(rows, generator=gen)
                filters = [
                    (0, 1.0), (5, 1.0), (0, 0.9), (20, 0.8), (1, 0.5), (vocab + 3, 0.95),
                    (torch.randint(-3, vocab + 3, (rows,), generator=gen, dtype=torch.int32),
                     torch.rand(rows, generator=gen).clamp(min=1e-3)),
                    (torch.randint(-3, vocab + 3, (rows,), generator=gen, dtype=torch.int64),
                     0.7),
                ]
                if rows * vocab > 200_000:
                    filters = filters[2:4] + filters[6:]
                for k, p in filters:
                    tokens = sample(logits, k, p, u)
                    assert tokens.dtype == torch.int64 and tokens.shape == (rows,)
                    rows_bad = topk_topp_sampling_implausible_rows(tokens, logits, k, p, u)
                    checked += 1
                    if rows_bad:
                        bad.append([rows, vocab, str(dtype), str(k)[:40], str(p)[:40], rows_bad])
        # Strided rows (a slice of a wider tensor), float16 logits.
        wide = torch.randn(6, 300, generator=gen).to(torch.float16).to("npu")
        view = wide[:, 20:150]
        u = torch.rand(6, generator=gen)
        tokens = polyops.topk_topp_sampling(view, 8, 0.9, uniform=u.to("npu")).cpu()
        rows_bad = topk_topp_sampling_implausible_rows(tokens, view.cpu(), 8, 0.9, u)
        if rows_bad:
            bad.append(["strided", rows_bad])
        checked += 1
        report({"bad": bad, "checked": checked})
        """
    )
    assert result["checked"] > 100
    assert result["bad"] == []


def test_bad_rows_follow_the_contract_exactly():
    result = run(
        """
        inf, nan = math.inf, math.nan
        v = 8
        out = {}
        centres = [(i + 0.5) / v for i in range(v)]
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            name = str(dtype)
            # One +inf among finite, NaN and -inf logits: always that token.
            row = torch.tensor([1.0, nan, -inf, 5.0, inf, 3.0, nan, 0.0])
            logits = row.repeat(v, 1).to(dtype)
            out[name + "/one-inf"] = sample(logits, 0, 1.0, torch.tensor(centres)).tolist()
            # Two +inf: they share the mass (u < 1/2 the first id, else the second); k = 3
            # keeps the 5.0 too, with no mass.
            row = torch.tensor([1.0, inf, -inf, 5.0, nan, inf, 3.0, 0.0])
            logits = row.repeat(4, 1).to(dtype)
            u = torch.tensor([0.1, 0.4, 0.6, 0.9])
            out[name + "/two-inf"] = sample(logits, 3, 1.0, u).tolist()
            # No finite or +inf logit (NaN and -inf mixed, all NaN, all -inf): uniform, so
            # u at the centre of bin i gives token i.
            for label, row in (
                ("mixed", torch.tensor([nan, -inf, nan, nan, -inf, -inf, nan, -inf])),
                ("all-nan", torch.full((v,), nan)),
                ("all-neg-inf", torch.full((v,), -inf)),
            ):
                logits = row.repeat(v, 1).to(dtype)
                out[name + "/" + label] = sample(logits, 0, 1.0, torch.tensor(centres)).tolist()
            # NaN never drawn next to a finite logit, even with u near 1.
            logits = torch.tensor([[nan, 2.0, nan, -inf]] * 3).to(dtype)
            out[name + "/nan-finite"] = sample(logits, 0, 1.0, torch.tensor(
                [0.0, 0.5, ONE_MINUS])).tolist()
        report(out)
        """
    )
    for dtype in ("torch.float16", "torch.bfloat16", "torch.float32"):
        assert result[dtype + "/one-inf"] == [4] * 8
        assert result[dtype + "/two-inf"] == [1, 1, 5, 5]
        for label in ("mixed", "all-nan", "all-neg-inf"):
            assert result[f"{dtype}/{label}"] == list(range(8)), label
        assert result[dtype + "/nan-finite"] == [1, 1, 1]


def test_ties_of_the_kth_logit_and_a_top_p_cut_inside_ties():
    result = run(
        """
        out = {}
        for dtype in (torch.float16, torch.bfloat16, torch.float32):
            # k = 2: the k-th largest is 2, tied three times, so ids 0..3 stay; u near 1
            # draws the last kept one, id 3 (never 4 or 5).
            logits = torch.tensor([[3.0, 2.0, 2.0, 2.0, 1.0, 0.0]] * 3).to(dtype)
            out[str(dtype) + "/kth"] = sample(
                logits, 2, 1.0, torch.tensor([0.0, 0.999, ONE_MINUS])).tolist()
            # Eight equal logits and p = 1/2: the contract keeps ids 0..3 (the order breaks
            # ties by id), so u draws id floor(4u): the cut falls inside one tied group.
            logits = torch.zeros(6, 8, dtype=dtype)
            u = torch.tensor([0.1, 0.3, 0.6, 0.9, 0.99, ONE_MINUS])
            out[str(dtype) + "/p-ties"] = sample(logits, 0, 0.5, u).tolist()
            # Integer logits with many ties under both filters: plausible on every row.
            gen = torch.Generator().manual_seed(3)
            logits = torch.randint(-2, 3, (32, 40), generator=gen).to(dtype)
            logits[torch.rand(32, 40, generator=gen) < 0.3] = -math.inf
            logits[:, 0] = 2
            u = torch.rand(32, generator=gen)
            for k, p in ((10, 0.7), (3, 0.3), (0, 0.55)):
                tokens = sample(logits, k, p, u)
                out[f"{dtype}/ints-{k}-{p}"] = topk_topp_sampling_implausible_rows(
                    tokens, logits, k, p, u)
        report(out)
        """
    )
    for dtype in ("torch.float16", "torch.bfloat16", "torch.float32"):
        assert result[dtype + "/kth"] == [0, 3, 3]
        assert result[dtype + "/p-ties"] == [0, 1, 2, 3, 3, 3]
        for key, rows in result.items():
            if key.startswith(dtype + "/ints"):
                assert rows == [], key


def test_out_of_range_values_give_defined_tokens_and_seed_is_refused():
    result = run(
        """
        logits = torch.tensor([[0.0, 4.0, 1.0, 3.0, -2.0]] * 6)
        # u is clamped to [0, 1 - 2**-24]: below 0 draws the top token (id 1), at or above
        # 1 the last kept one (k = 3 keeps ids 1, 3, 2: id 2), NaN the top token.
        u = torch.tensor([-0.5, -1e30, 1.0, 1.5, math.inf, math.nan])
        out = {"u": sample(logits, 3, 1.0, u).tolist()}
        # top_p is brought into [0, 1] (ApplyTopKTopP's range): p <= 0 keeps only the top
        # token, p > 1 and NaN filter nothing (u near 1 then draws the last token of the
        # order, id 4).
        p = torch.tensor([0.0, -1.0, 2.0, math.nan])
        out["p"] = sample(logits[:4], 0, p, torch.full((4,), ONE_MINUS)).tolist()
        try:
            polyops.topk_topp_sampling(logits.to("npu"), 0, 1.0, seed=5)
            out["seed"] = "no error"
        except Exception as error:
            out["seed"] = type(error).__name__ + ": " + str(error)
        # torch.ops path and an explicit out tensor, int64 and int32.
        for dtype in (torch.int64, torch.int32):
            o = torch.empty(6, dtype=dtype, device="npu")
            torch.ops.polyops.topk_topp_sampling(
                logits.to("npu"), 0, 1.0, uniform=torch.zeros(6, device="npu"), out=o)
            out["torch.ops " + str(dtype)] = [str(o.dtype), o.cpu().tolist()]
        report(out)
        """
    )
    assert result["u"] == [1, 1, 2, 2, 2, 1]
    assert result["p"] == [1, 1, 4, 4]
    assert result["seed"].startswith("NotImplementedError")
    assert "seed=" in result["seed"] and "uniform=" in result["seed"]
    assert "npu" in result["seed"]
    assert result["torch.ops torch.int64"] == ["torch.int64", [1] * 6]
    assert result["torch.ops torch.int32"] == ["torch.int32", [1] * 6]


@pytest.mark.parametrize(
    "k_kind, out_dtype",
    [("scalar", "int64"), ("int32", "int64"), ("int64", "int64"), ("int64", "int32")],
    ids=["k-scalar", "k-int32", "k-int64", "k-int64-out-int32"],
)
def test_a_repeated_call_runs_no_phase_one_copy_or_sync(k_kind, out_dtype):
    # An int32 out (serving engines' token ids) is written by the last Rsubs directly:
    # the same launches, also in the longest chain (bfloat16 logits, int64 top_k).
    result = run(
        f"""
        k_kind = {k_kind!r}
        def forbidden(calls):
            return [c["function"] for c in calls if c["function"] in (
                "aclrtSynchronizeStream", "aclrtSynchronizeDevice", "aclrtMemcpy",
                "aclrtMemcpyAsync", "aclrtMalloc", "aclrtFree")]
        rows, vocab = 5, 300
        def inputs(seed):
            gen = torch.Generator().manual_seed(seed)
            logits = torch.randn(rows, vocab, generator=gen).to(torch.bfloat16).to("npu")
            u = torch.rand(rows, generator=gen).to("npu")
            if k_kind == "scalar":
                k, p = 7, 0.9
            else:
                dtype = torch.int32 if k_kind == "int32" else torch.int64
                k = torch.randint(0, vocab, (rows,), generator=gen, dtype=dtype).to("npu")
                p = torch.rand(rows, generator=gen).clamp(min=0.1).to("npu")
            out = torch.empty(rows, dtype=torch.{out_dtype}, device="npu")
            return logits, k, p, u, out
        first, second = inputs(1), inputs(2)
        def call(logits, k, p, u, out):
            polyops.topk_topp_sampling(logits, k, p, uniform=u, out=out)
        clear_cann_calls()
        call(*first)
        miss = cann_calls()
        clear_cann_calls()
        call(*second)
        hit = cann_calls()
        tokens = second[4].cpu()
        logits, k, p, u, _ = second
        bad = topk_topp_sampling_implausible_rows(
            tokens, logits.cpu(), k.cpu() if isinstance(k, torch.Tensor) else k,
            p.cpu() if isinstance(p, torch.Tensor) else p, u.cpu())
        report({{
            "miss_phase1": [c["function"] for c in miss if c.get("phase") == 1],
            "miss_copies": [c["function"] for c in miss if c["function"] == "aclrtMemcpy"],
            "hit_phase1": [c["function"] for c in hit if c.get("phase") == 1],
            "hit_forbidden": forbidden(hit),
            "hit_launches": [c["function"] for c in hit if c.get("phase") == 2],
            "hit_setters": sum(c["function"] == "aclSetInputTensorAddr" for c in hit),
            "failures": [c for c in miss + hit if c.get("status", 0) != 0],
            "bad": bad,
            "out_dtype": str(tokens.dtype),
        }})
        """
    )
    expected = ["aclnnCast", *LAUNCHES]
    if k_kind == "int64":
        at = expected.index("aclnnSort") + 1
        expected[at:at] = ["aclnnClamp", "aclnnCast"]
    assert result["failures"] == []
    assert result["bad"] == []
    assert result["out_dtype"] == "torch." + out_dtype
    assert len(result["miss_phase1"]) == len(expected)
    # Scalar top_k / top_p are uploaded once, on the miss; tensors need no copy at all.
    assert len(result["miss_copies"]) == (2 if k_kind == "scalar" else 0)
    assert result["hit_phase1"] == []
    assert result["hit_forbidden"] == []
    assert result["hit_launches"] == expected
    assert result["hit_setters"] > 0


def test_a_missing_operator_is_a_runtime_error_naming_it(tmp_path):
    from tests.ascend._npu_child import _copy_double

    # An operator library without aclnn ops (nnopbase stands in for it).
    broken = _copy_double(
        tmp_path,
        {
            "libascendcl.so": "libascendcl.so",
            "libnnopbase.so": "libnnopbase.so",
            "libopapi.so": "libnnopbase.so",
        },
    )
    message = run_child(
        f"""
        import os
        os.environ["POLYOPS_CANN_LIB_DIR"] = {str(broken)!r}
        logits = torch.randn(2, 10).to("npu")
        u = torch.rand(2).to("npu")
        try:
            polyops.topk_topp_sampling(logits, 3, 0.9, uniform=u)
            report(None)
        except RuntimeError as error:
            report(str(error))
        """
    )
    assert message is not None
    assert "aclnn" in message and "libopapi.so" in message and "from CANN" in message
