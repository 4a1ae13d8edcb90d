"""The Ascend attention slots (FusedInferAttentionScoreV3) on the CANN double: the
host path read from the double's call log and lengths that change between calls of
one instance (topk_topp_sampling's slot has its own file, test_npu_sampling.py).
The double is active for this process (tests/npu/conftest.py); the mask made once per
process is checked in a fresh one (tests/ascend/test_ascend_attention.py).
"""

from __future__ import annotations

import pytest
import torch

import polyops
from polyops.testing import cann_calls, clear_cann_calls
from polyops.testing.tensors import cu_seqlens, paginate

FIA = "aclnnFusedInferAttentionScoreV3"
D2H, H2D = 2, 1  # aclrtMemcpyKind

# The inputs' generator, seeded again before each test (as each check's own
# interpreter seeded it once).
gen = torch.Generator()


@pytest.fixture(autouse=True)
def _seeded_inputs() -> None:
    gen.manual_seed(0)


def prefill(q_lens: list[int], kv_lens: list[int], paged: bool = True) -> tuple:
    """Inputs of one prefill (paged kv by default), on npu, with their CPU host copies:
    (cpu q, k, v, kwargs), (npu q, k, v, kwargs), host cu_seqlens kwargs."""
    q = torch.randn(sum(q_lens), 4, 64, generator=gen).half()
    k, v = (torch.randn(sum(kv_lens), 2, 64, generator=gen).half() for _ in range(2))
    kwargs = dict(cu_seqlens_q=cu_seqlens(q_lens), cu_seqlens_kv=cu_seqlens(kv_lens))
    if paged:
        k, v, kwargs["block_table"] = paginate(k, v, kv_lens, 16, gen, spare_blocks=8)
    cpu = (q, k, v, dict(kwargs))
    npu = {name: t.to("npu") for name, t in kwargs.items()}
    host = dict(
        cu_seqlens_q_host=kwargs["cu_seqlens_q"], cu_seqlens_kv_host=kwargs["cu_seqlens_kv"]
    )
    return cpu, (q.to("npu"), k.to("npu"), v.to("npu"), npu), host


def memcpys(calls: list[dict], kind: int) -> list[dict]:
    return [c for c in calls if c["function"] == "aclrtMemcpy" and c.get("kind") == kind]


def names(calls: list[dict]) -> list[str]:
    return [c["function"] for c in calls]


def test_host_copies_make_a_call_without_copy_or_sync():
    cpu, (q, k, v, kw), host = prefill([1, 7, 40], [30, 7, 90])
    polyops.flash_attention(q, k, v, **kw, **host)  # builds the instance and the mask
    clear_cann_calls()
    out = polyops.flash_attention(q, k, v, **kw, **host)
    hosted_calls = cann_calls()
    clear_cann_calls()
    polyops.flash_attention(q, k, v, **kw)
    fallback = cann_calls()
    expected = polyops.flash_attention(cpu[0], cpu[1], cpu[2], **cpu[3])
    hosted = names(hosted_calls)
    assert hosted.count(FIA + "GetWorkspaceSize") == 1 and hosted.count(FIA) == 1, hosted
    assert "aclrtSynchronizeStream" not in hosted and len(memcpys(hosted_calls, 2)) == 0, hosted
    assert "aclrtMemcpy" not in hosted, hosted  # nor the mask again
    # Without the host copies: the documented cost, a sync and two 16-byte copies.
    assert "aclrtSynchronizeStream" in names(fallback)
    assert [c["bytes"] for c in memcpys(fallback, 2)] == [16, 16]
    assert (out.cpu().float() - expected.float()).abs().max().item() < 1e-2


@pytest.mark.parametrize(
    "slot, api", [(0, FIA), (1, "aclnnIncreFlashAttentionV4")], ids=["fia_v3", "ifa_v4"]
)
def test_paged_attention_with_seq_lens_host_makes_no_copy_or_sync(slot, api):
    lens = [5, 0, 77, 16]
    q = torch.randn(4, 8, 64, generator=gen).half()
    k, v = (torch.randn(sum(lens), 2, 64, generator=gen).half() for _ in range(2))
    kc, vc, table = paginate(k, v, lens, 16, gen)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    args = [t.to("npu") for t in (q, kc, vc, seq_lens, table)]

    def run(**kw):
        return polyops.paged_attention(*args, implementation_index=slot, **kw)

    run(seq_lens_host=seq_lens)
    clear_cann_calls()
    out = run(seq_lens_host=seq_lens)
    hosted = names(cann_calls())
    clear_cann_calls()
    run()
    fallback = cann_calls()
    expected = polyops.paged_attention(q, kc, vc, seq_lens, table)
    assert hosted.count(api) == 1 and hosted.count(api + "GetWorkspaceSize") == 1, hosted
    assert "aclrtSynchronizeStream" not in hosted and "aclrtMemcpy" not in hosted, hosted
    assert "aclrtSynchronizeStream" in names(fallback)
    assert [c["bytes"] for c in memcpys(fallback, 2)] == [16]
    error = (out.cpu().float() - expected.float()).abs().max().item()
    assert error < 1e-2 and out[1].cpu().abs().max().item() == 0


def test_new_lengths_on_a_cached_instance_are_used():
    # Same shapes (so the same cached instance), other lengths: phase 1 runs again
    # with them, nothing from the first call's lengths is kept.
    errors = []
    for q_lens, kv_lens in (
        [[2, 7, 39], [30, 7, 90]],
        [[20, 27, 1], [3, 100, 24]],
        [[48, 0, 0], [48, 0, 79]],
    ):
        for paged in (False, True):
            cpu, (q, k, v, kw), host = prefill(q_lens, kv_lens, paged)
            for extra in (host, {}):
                out = polyops.flash_attention(q, k, v, sliding_window=9, **kw, **extra)
                expected = polyops.flash_attention(
                    cpu[0], cpu[1], cpu[2], sliding_window=9, **cpu[3]
                )
                errors.append((out.cpu().float() - expected.float()).abs().max().item())
    assert max(errors) < 1e-2, errors


def test_host_copies_must_be_cpu_tensors_and_lengths_are_checked():
    cpu, (q, k, v, kw), host = prefill([1, 7], [9, 7])
    messages = []
    for bad in (
        dict(cu_seqlens_q_host=kw["cu_seqlens_q"]),
        dict(cu_seqlens_kv_host=torch.tensor([0, 9, 50], dtype=torch.int32)),
        dict(cu_seqlens_q_host=torch.tensor([0, 1, 9], dtype=torch.int32)),
    ):
        try:
            polyops.flash_attention(q, k, v, **kw, **bad)
            messages.append(None)
        except ValueError as error:
            messages.append(str(error))
    on_device, kv_too_long, q_wrong_end = messages
    assert "cu_seqlens_q_host" in on_device and "cpu" in on_device.lower()
    # On a device the host copy is not compared with the device tensor: its values decide.
    assert "sequence 1 has 41 kv tokens, more than its block_table row holds" in kv_too_long
    assert "cu_seqlens_q must end at the number of query tokens 8" in q_wrong_end


def _launches(calls: list[dict]) -> list[str]:
    return [
        c["function"]
        for c in calls
        if c["function"].startswith("aclnn") and not c["function"].endswith("GetWorkspaceSize")
    ]


def _wide(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: t.cpu().long().to(t.device) for name, t in tensors.items()}


def _max_diff(out: torch.Tensor, narrow: torch.Tensor) -> float:
    return (out.cpu().float() - narrow.cpu().float()).abs().max().item()


def test_int64_lengths_and_block_tables():
    # int64 cu_seqlens, seq_lens, block tables and host mirrors (torch.tensor's default
    # dtype) give the int32 calls' bits, through polyops.<op> and torch.ops.polyops.
    # The lengths are read on the host either way; an int64 block table goes through
    # aclnnClamp and aclnnCast into the stream's pool before the attention launch (FIA
    # and IFA take INT32 tables), an int32 one straight to the API.
    diffs, flash_launches = [], {}
    for paged in (False, True):
        for causal in (True, False):
            cpu, (q, k, v, kw), host = prefill([1, 7, 40], [30, 7, 90], paged)
            narrow = polyops.flash_attention(q, k, v, causal=causal, **kw, **host)
            for extra in (_wide(host), {}):
                clear_cann_calls()
                out = polyops.flash_attention(q, k, v, causal=causal, **_wide(kw), **extra)
                flash_launches[f"paged={paged}"] = _launches(cann_calls())
                diffs.append(_max_diff(out, narrow))
            out = torch.ops.polyops.flash_attention(
                q, k, v, causal=causal, **_wide(kw), **_wide(host)
            )
            diffs.append(_max_diff(out, narrow))
            mixed = dict(kw, cu_seqlens_q=_wide(kw)["cu_seqlens_q"])
            mixed_host = dict(host, cu_seqlens_q_host=_wide(host)["cu_seqlens_q_host"])
            out = polyops.flash_attention(q, k, v, causal=causal, **mixed, **mixed_host)
            diffs.append(_max_diff(out, narrow))
    lens = [5, 0, 77, 16]
    q = torch.randn(4, 8, 64, generator=gen).half()
    k, v = (torch.randn(sum(lens), 2, 64, generator=gen).half() for _ in range(2))
    kc, vc, table = paginate(k, v, lens, 16, gen)
    seq_lens = torch.tensor(lens, dtype=torch.int32)
    dev = [t.to("npu") for t in (q, kc, vc)]
    paged_launches = {}
    for slot in (0, 1):
        narrow = polyops.paged_attention(
            *dev,
            seq_lens.to("npu"),
            table.to("npu"),
            seq_lens_host=seq_lens,
            implementation_index=slot,
        )
        for lens_t, table_t in (
            (seq_lens.long(), table.long()),
            (seq_lens.long(), table),
            (seq_lens, table.long()),
        ):
            for host in (dict(seq_lens_host=lens_t, block_table_host=table_t), {}):
                clear_cann_calls()
                out = polyops.paged_attention(
                    *dev, lens_t.to("npu"), table_t.to("npu"), **host, implementation_index=slot
                )
                paged_launches[f"{slot}-{table_t.dtype}"] = _launches(cann_calls())
                diffs.append(_max_diff(out, narrow))
            out = torch.ops.polyops.paged_attention(
                *dev,
                lens_t.to("npu"),
                table_t.to("npu"),
                seq_lens_host=lens_t,
                block_table_host=table_t,
                implementation_index=slot,
            )
            diffs.append(_max_diff(out, narrow))
    assert max(diffs) == 0, diffs
    widened = ["aclnnClamp", "aclnnCast"]
    assert flash_launches == {"paged=False": [FIA], "paged=True": [*widened, FIA]}
    ifa = "aclnnIncreFlashAttentionV4"
    assert paged_launches == {
        "0-torch.int64": [*widened, FIA],
        "0-torch.int32": [FIA],
        "1-torch.int64": [*widened, ifa],
        "1-torch.int32": [ifa],
    }


def test_int64_values_never_wrap():
    # Lengths are checked on the host as int64: values that would wrap (mod 2**32)
    # onto valid int32 ones are ValueErrors. A block id no int32 holds is clamped, not
    # wrapped, so it stays outside the cache and faults like any bad id.
    wrap = 2**32
    cpu, (q, k, v, kw), host = prefill([1, 7], [9, 7])
    messages, kept = [], []

    def attempt(fn):
        # Every npu tensor of the call stays alive until the sync: the test device's
        # free synchronizes too, and would take the fault before torch.npu.synchronize.
        try:
            kept.append(fn())
            torch.npu.synchronize()
            messages.append(None)
        except (ValueError, RuntimeError) as error:
            messages.append(f"{type(error).__name__}: {error}")

    wide = {name: t.cpu().long() for name, t in kw.items()}
    npu = {name: t.to("npu") for name, t in wide.items()}
    long_kv = torch.tensor([0, 9 + wrap, 16 + wrap])
    attempt(lambda: polyops.flash_attention(q, k, v, **dict(npu, cu_seqlens_kv=long_kv.to("npu"))))
    attempt(
        lambda: polyops.flash_attention(
            q, k, v, **npu, cu_seqlens_q_host=wide["cu_seqlens_q"], cu_seqlens_kv_host=long_kv
        )
    )
    table = wide["block_table"].clone()
    table[0, 0] += wrap
    wrapped = dict(npu, block_table=table.to("npu"))
    attempt(
        lambda: polyops.flash_attention(
            q,
            k,
            v,
            **wrapped,
            cu_seqlens_q_host=wide["cu_seqlens_q"],
            cu_seqlens_kv_host=wide["cu_seqlens_kv"],
        )
    )
    lens = torch.tensor([3, 9 + wrap])
    qd = torch.randn(2, 4, 64).half().to("npu")
    attempt(
        lambda: polyops.paged_attention(
            qd, k, v, lens.to("npu"), wide["block_table"].to("npu"), seq_lens_host=lens
        )
    )
    kv_too_long, host_too_long, wrapped_id, paged_too_long = messages
    assert f"ValueError: polyops.flash_attention: sequence 0 has {9 + 2**32} kv tokens" in (
        kv_too_long
    )
    assert f"sequence 0 has {9 + 2**32} kv tokens" in host_too_long
    # The double reports the clamped id (INT32_MAX) as outside the cache at the sync.
    assert wrapped_id is not None and wrapped_id.startswith("RuntimeError"), wrapped_id
    assert "2147483647" in wrapped_id, wrapped_id
    assert f"ValueError: polyops.paged_attention: sequence 1 has {9 + 2**32} kv tokens" in (
        paged_too_long
    )
