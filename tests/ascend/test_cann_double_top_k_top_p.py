"""The CANN double's aclnnApplyTopKTopP through ctypes against vLLM's apply_top_k_top_p in
float64, and its validation. The operators chained around it: test_cann_double_sampling.py."""

from __future__ import annotations

import pytest
import torch

from tests.ascend._cann_double_bindings import (
    F16,
    FLOATS,
    NULLPTR,
    PARAM_INVALID,
    Arg,
    assert_close,
    out_arg,
    rand,
)


def top_k_top_p_reference(logits, p, k):
    """vLLM's apply_top_k_top_p in float64 (ascending sort, p before k in the aclnn call)."""
    x = logits.double()
    vocab = x.shape[1]
    order = torch.sort(x, dim=-1, stable=True).indices
    xs = x.gather(1, order)
    if k is not None:
        kk = k.long().clone()
        kk[(kk <= 0) | (kk >= vocab)] = vocab
        threshold = xs.gather(1, (vocab - kk)[:, None])
        xs = xs.masked_fill(xs < threshold, float("-inf"))
    if p is not None:
        probs = xs.softmax(-1).cumsum(-1)
        mask = probs <= 1 - p.double()[:, None]
        mask[:, -1] = False
        xs = xs.masked_fill(mask, float("-inf"))
    return torch.empty_like(xs).scatter_(1, order, xs)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("which", ["both", "p", "k"])
def test_apply_top_k_top_p(cann, dtype, which):
    rows, vocab = 4, 50
    logits = torch.randperm(rows * vocab, generator=torch.Generator().manual_seed(42))
    logits = (logits.double().view(rows, vocab) / 40).to(dtype)  # distinct values
    p = torch.tensor([0.9, 0.5, 1.0, 0.2], dtype=dtype) if which != "k" else None
    k = torch.tensor([5, 0, 50, 20], dtype=torch.int32) if which != "p" else None
    out = out_arg(cann, (rows, vocab), dtype)
    cann.run(
        "aclnnApplyTopKTopP",
        Arg(cann, logits).desc,
        Arg(cann, p).desc if p is not None else None,
        Arg(cann, k).desc if k is not None else None,
        out.desc,
    )
    expected = top_k_top_p_reference(logits, p, k)
    assert torch.equal(out.result().isinf(), expected.isinf())
    assert_close(out.result(), expected, dtype)


def test_apply_top_k_top_p_validation(cann):
    logits = Arg(cann, rand((2, 8), F16))
    p32 = Arg(cann, torch.tensor([0.5, 0.5]))  # float32 p with float16 logits
    k64 = Arg(cann, torch.tensor([1, 2]))  # int64 k
    out = out_arg(cann, (2, 8), F16)
    cann.expect_fail(PARAM_INVALID, "aclnnApplyTopKTopP", logits.desc, p32.desc, None, out.desc)
    cann.expect_fail(PARAM_INVALID, "aclnnApplyTopKTopP", logits.desc, None, k64.desc, out.desc)
    cann.expect_fail(NULLPTR, "aclnnApplyTopKTopP", logits.desc, None, None, out.desc)
