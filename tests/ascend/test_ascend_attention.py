"""The attention mask of the Ascend attention slots is made once per process: checked in
a fresh interpreter (``run_child`` of test_ascend.py), since any earlier attention call in
the process would have made it. The other attention checks on the CANN double are in
tests/npu/test_npu_attention.py, with the double active for that pytest process.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.ascend._npu_child import _skip_reason, run_child

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

# Inputs of one prefill (3 sequences, paged kv) and one decode step, on npu, with
# their CPU host copies; `lengths(q, kv)` rebuilds the cu_seqlens for new lengths.
SETUP = """
import torch, polyops
from polyops.testing.tensors import cu_seqlens, paginate
gen = torch.Generator().manual_seed(0)
def prefill(q_lens, kv_lens, paged=True):
    q = torch.randn(sum(q_lens), 4, 64, generator=gen).half()
    k, v = (torch.randn(sum(kv_lens), 2, 64, generator=gen).half() for _ in range(2))
    kwargs = dict(cu_seqlens_q=cu_seqlens(q_lens), cu_seqlens_kv=cu_seqlens(kv_lens))
    if paged:
        k, v, kwargs["block_table"] = paginate(k, v, kv_lens, 16, gen, spare_blocks=8)
    cpu = (q, k, v, dict(kwargs))
    npu = {name: t.to("npu") for name, t in kwargs.items()}
    host = dict(cu_seqlens_q_host=kwargs["cu_seqlens_q"],
                cu_seqlens_kv_host=kwargs["cu_seqlens_kv"])
    return cpu, (q.to("npu"), k.to("npu"), v.to("npu"), npu), host
def memcpys(calls, kind):
    return [c for c in calls if c["function"] == "aclrtMemcpy" and c.get("kind") == kind]
def names(calls):
    return [c["function"] for c in calls]
"""


def run_with_setup(body: str) -> object:
    return run_child(SETUP + textwrap.dedent(body))


def test_the_mask_is_made_once_per_process_and_nothing_leaks():
    result = run_with_setup(
        """
        import ctypes, pathlib
        from polyops import _cann_double
        directory = pathlib.Path(_cann_double.active_library_dir)
        nnopbase = ctypes.CDLL(str(directory / "libnnopbase.so"))
        live = [getattr(nnopbase, "polyopsDoubleLive" + what)
                for what in ("Executors", "Descriptors")]
        for f in live:
            f.restype = ctypes.c_size_t
        masks = 0
        before = None
        for step, (q_lens, kv_lens) in enumerate(([[1, 7], [9, 7]], [[3, 4, 5], [3, 4, 5]]) * 3):
            cpu, (q, k, v, kw), host = prefill(q_lens, kv_lens, paged=step % 2 == 0)
            clear_cann_calls()
            for causal in (True, False):
                polyops.flash_attention(q, k, v, causal=causal, **kw, **host)
                polyops.flash_attention(q, k, v, causal=causal, window_left=2, **kw, **host)
            masks += sum(c["bytes"] == 2048 * 2048 for c in memcpys(cann_calls(), 1))
            torch.npu.synchronize()
            counts = [f() for f in live]
            before = before or counts
        report({"masks": masks, "before": before, "after": counts})
        """
    )
    assert result["masks"] == 1  # the first causal call only
    assert result["after"] == result["before"]  # executors and descriptors freed
