"""The own CUDA attention slots' source, run on the CPU under a host emulation of CUDA.

No GPU is needed: flash_attention's and paged_attention's slot 0 ``flash``
(src/cuda/{flash_attention,paged_attention}/flash.cuh over
src/cuda/kernels/attention/attention.cuh) are copied with every launch rewritten into
``EmulatedLaunch`` and the dynamic shared memory into a per-launch buffer
(tests/cuda/emulation/emulated_cuda.h: one cooperative thread per CUDA
thread, barriers for ``__syncthreads`` and for the warp shuffles of
WarpMax/WarpSum and the weight broadcast), built with
tests/cuda/emulation/attention_main.cc, and every case of the parity
table (polyops.testing.OPS: GQA, varlen, causal and windows, paged and
vLLM-layout caches, packed qkv, the NaN/inf case, host mirrors, split-K
decode) is run through it and compared with the float64 reference at the
table's tolerance, plus the kernel paths the table does not reach (head
sizes that fill lanes partly, GQA groups over 16 heads, split-K sized from
seq_lens_host, malformed lengths and block ids giving NaN rows). The
FlashInfer slots (tensor-core PTX) are not covered.

What it checks: the tile's indexing, the online softmax and its special
values, the warp layout of the rows and the shuffles' lanes, the barriers
(a divergent one is reported as a deadlock), the split-K partials and their
merge, the slots' host code. What it cannot check: nvcc, a GPU's scheduling
and memory model, CUDA's expf (the host's is used).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polyops.testing import OPS, compare
from polyops.testing import references as ref
from polyops.testing.opinfo import Call
from polyops.testing.tensors import cu_seqlens, make_tensor, paginate
from tests.conftest import dtype_id
from tests.cuda.emulation.harness import build_emulator, parity_failures, run_slot

HEADERS = [
    "cuda/kernels/attention/attention.cuh",
    "cuda/flash_attention/flash.cuh",
    "cuda/paged_attention/flash.cuh",
]

#: Each op's arguments in the C++ constructor's order, with their defaults.
PARAMS: dict[str, list[tuple[str, object]]] = {
    "flash_attention": [
        ("query", None),
        ("key", None),
        ("value", None),
        ("cu_seqlens_q", None),
        ("cu_seqlens_kv", None),
        ("block_table", None),
        ("scale", None),
        ("causal", True),
        ("window_left", -1),
        ("window_right", -1),
        ("sliding_window", None),
        ("cu_seqlens_q_host", None),
        ("cu_seqlens_kv_host", None),
        ("out", None),
    ],
    "paged_attention": [
        ("query", None),
        ("key_cache", None),
        ("value_cache", None),
        ("seq_lens", None),
        ("block_table", None),
        ("scale", None),
        ("seq_lens_host", None),
        ("block_table_host", None),
        ("out", None),
    ],
}

#: The own slot of each op (index 0, "flash"); the FlashInfer slots are PTX.
SLOT = 0


@pytest.fixture(scope="module")
def emulator(tmp_path_factory) -> Path:
    """The driver built against the rewritten attention headers."""
    return build_emulator(
        tmp_path_factory.mktemp("cuda_attention_emulation"), HEADERS, "attention_main.cc"
    )


def _params() -> list:
    return [
        pytest.param(op, dtype, id=f"{op}-{dtype_id(dtype)}")
        for op in PARAMS
        for dtype in OPS[op].dtypes
    ]


@pytest.mark.parametrize("op, dtype", _params())
def test_emulated_cuda_attention_matches_reference(op, dtype, emulator, tmp_path):
    failures = parity_failures(
        emulator, tmp_path, op, dtype, SLOT, PARAMS[op], lambda call: call.args[0].dtype
    )
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------------------
# Kernel paths the parity table does not reach


def _flash_call(gen, dtype, q_lens, kv_lens, heads, kv_heads, head_size, *, paged=0, **options):
    q = make_tensor((sum(q_lens), heads, head_size), dtype, gen)
    k = make_tensor((sum(kv_lens), kv_heads, head_size), dtype, gen)
    v = make_tensor((sum(kv_lens), kv_heads, head_size), dtype, gen)
    kwargs = dict(cu_seqlens_q=cu_seqlens(q_lens), cu_seqlens_kv=cu_seqlens(kv_lens), **options)
    if paged:
        k, v, kwargs["block_table"] = paginate(k, v, kv_lens, paged, gen)
    return Call((q, k, v), kwargs)


def _paged_call(gen, dtype, seq_lens, heads, kv_heads, head_size, block_size, *, host=False):
    q = make_tensor((len(seq_lens), heads, head_size), dtype, gen)
    k = make_tensor((sum(seq_lens), kv_heads, head_size), dtype, gen)
    v = make_tensor((sum(seq_lens), kv_heads, head_size), dtype, gen)
    k_cache, v_cache, table = paginate(k, v, seq_lens, block_size, gen)
    lens = torch.tensor(seq_lens, dtype=torch.int32)
    kwargs = {}
    if host:
        kwargs = dict(seq_lens_host=lens.clone(), block_table_host=table.clone())
    return Call((q, k_cache, v_cache, lens, table), kwargs)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=dtype_id)
def test_emulated_attention_kernel_paths(dtype, emulator, tmp_path):
    """Head sizes that fill lanes partly, GQA groups over 16 heads (several head blocks
    per kv head, a partial last one), decode batches packed into one tile, split-K sized
    from seq_lens_host with splits past a short sequence's end; and the caller data the
    device cannot reject: malformed cu_seqlens or lengths and block ids outside the cache
    give NaN rows for their sequence only (nothing else changes)."""
    gen = torch.Generator().manual_seed(5)
    runs = []  # (name, op, call, expected)

    def flash(name, *args, nan_tokens=(), **kwargs):
        call = _flash_call(gen, dtype, *args, **kwargs)
        expected = ref.flash_attention_reference(*call.args, **call.kwargs)
        expected[list(nan_tokens)] = float("nan")
        runs.append((name, "flash_attention", call, expected))

    def paged(name, *args, nan_rows=(), **kwargs):
        call = _paged_call(gen, dtype, *args, **kwargs)
        expected = ref.paged_attention_reference(*call.args)
        expected[list(nan_rows)] = float("nan")
        runs.append((name, "paged_attention", call, expected))

    for head_size in (1, 33, 80, 200):
        flash(f"flash-d{head_size}", [3, 20], [3, 40], 2, 1, head_size)
    flash("flash-gqa32", [5, 2], [5, 30], 32, 1, 64)
    flash("flash-gqa24-2kv", [4, 9], [6, 9], 48, 2, 64, causal=False)
    flash("flash-decode-20-seqs", [1] * 20, [1 + 3 * b for b in range(20)], 4, 4, 64)
    flash("flash-paged-gqa32-d80", [2, 5], [40, 5], 32, 1, 80, paged=8)

    # Malformed cu_seqlens_kv: sequence 1 has a negative kv length, sequence 3 ends
    # past the kv tensor (15 tokens); sequences 0 and 2 stay exact.
    call = _flash_call(gen, dtype, [3, 4, 2, 5], [3, 5, 2, 5], 2, 1, 64, causal=False)
    call.kwargs["cu_seqlens_kv"] = torch.tensor([0, 3, 1, 10, 20], dtype=torch.int32)
    q, k, v = call.args
    expected = torch.full(q.shape, float("nan"), dtype=torch.float64)
    for (q0, q1), (k0, k1) in [((0, 3), (0, 3)), ((7, 9), (1, 10))]:
        expected[q0:q1] = ref.flash_attention_reference(
            q[q0:q1],
            k[k0:k1],
            v[k0:k1],
            cu_seqlens_q=cu_seqlens([q1 - q0]),
            cu_seqlens_kv=cu_seqlens([k1 - k0]),
            causal=False,
        )
    runs.append(("flash-malformed-cu-seqlens", "flash_attention", call, expected))

    # A block id outside the cache reads as NaN keys: its sequence's rows are NaN.
    call = _flash_call(gen, dtype, [3, 4], [8, 6], 2, 1, 64, paged=4)
    expected = ref.flash_attention_reference(*call.args, **call.kwargs)
    call.kwargs["block_table"][1, 0] = call.args[1].shape[0] + 3
    expected[3:7] = float("nan")
    runs.append(("flash-block-id-outside-cache", "flash_attention", call, expected))

    paged("paged-host-splits", [600, 3, 300], 4, 1, 64, 16, host=True)
    paged("paged-gqa32-d80", [5, 70], 32, 1, 80, 16)
    paged("paged-d1-d200", [9, 33], 2, 2, 1, 8)
    paged("paged-d200", [9, 33], 2, 2, 200, 8)
    for name, lens, block_size in [
        ("paged-invalid-lens-direct", [5, 17, 9], 4),  # capacity 20: one split
        ("paged-invalid-lens-splits", [300, 17, 290], 16),  # capacity 304: split-K
    ]:
        call = _paged_call(gen, dtype, lens, 4, 2, 64, block_size)
        expected = ref.paged_attention_reference(*call.args)
        call.args[3][1] = -2
        call.args[3][2] = call.args[4].shape[1] * block_size + 1
        expected[[1, 2]] = float("nan")
        runs.append((name, "paged_attention", call, expected))
    call = _paged_call(gen, dtype, [9, 20], 4, 2, 64, 8)
    expected = ref.paged_attention_reference(*call.args)
    call.args[4][0, 1] = -7
    expected[0] = float("nan")
    runs.append(("paged-block-id-outside-cache", "paged_attention", call, expected))

    # int64 indices the kernel reads at their width: values that would wrap (mod 2**32)
    # onto valid int32 ones stay out of range, so only their sequence gets NaN rows.
    wrap = 2**32
    call = _flash_call(gen, dtype, [3, 4], [8, 6], 2, 1, 64, paged=4)
    expected = ref.flash_attention_reference(*call.args, **call.kwargs)
    call.kwargs["cu_seqlens_q"] = call.kwargs["cu_seqlens_q"].long()
    call.kwargs["cu_seqlens_kv"] = torch.tensor([0, 8 + wrap, 14 + wrap])
    call.kwargs["block_table"] = call.kwargs["block_table"].long()
    expected[:3] = float("nan")
    runs.append(("flash-int64-kv-len-past-int32", "flash_attention", call, expected))
    call = _flash_call(gen, dtype, [3, 4], [8, 6], 2, 1, 64, paged=4)
    expected = ref.flash_attention_reference(*call.args, **call.kwargs)
    call.kwargs["block_table"] = call.kwargs["block_table"].long()
    call.kwargs["block_table"][1, 0] += wrap
    expected[3:7] = float("nan")
    runs.append(("flash-int64-block-id-past-int32", "flash_attention", call, expected))
    call = _paged_call(gen, dtype, [9, 20, 5], 4, 2, 64, 8)
    expected = ref.paged_attention_reference(*call.args)
    lens, table = call.args[3].long(), call.args[4].long()
    lens[1] += wrap
    table[2, 0] += wrap
    call = Call((*call.args[:3], lens, table), call.kwargs)
    expected[[1, 2]] = float("nan")
    runs.append(("paged-int64-past-int32", "paged_attention", call, expected))

    failures = []
    tol = OPS["flash_attention"].tolerance(dtype)
    for number, (name, op, call, expected) in enumerate(runs):
        allocate = {"out": (expected.shape, dtype)}
        try:
            (got,) = run_slot(
                emulator,
                tmp_path / f"run{number}",
                op,
                SLOT,
                PARAMS[op],
                call,
                allocate,
                lambda given: [given["out"]],
            )
        except RuntimeError as error:
            failures.append(f"{name}: {error}")
            continue
        outcome = compare(got, expected, tol)
        if not outcome.ok:
            failures.append(f"{name}: {outcome.message}")
    assert not failures, "\n".join(failures)


def test_emulated_flash_refuses_int64_lengths_past_its_int32_keys(emulator, tmp_path):
    """With int64 cu_seqlens_kv a sequence may hold more keys than the kernel's int
    ranges count: the constructor refuses (NotImplementedError), it never truncates.
    The kv tensors are stride-0 views, so nothing that large is allocated."""
    gen = torch.Generator().manual_seed(9)
    q = make_tensor((2, 2, 64), torch.float16, gen)
    count = 2**31 + 4
    kv = torch.zeros(64, dtype=torch.float16).as_strided((count, 1, 64), (0, 0, 1))
    call = Call(
        (q, kv, kv),
        dict(cu_seqlens_q=torch.tensor([0, 2]), cu_seqlens_kv=torch.tensor([0, count])),
    )
    with pytest.raises(RuntimeError, match=r"does not support an int64 cu_seqlens_kv with"):
        run_slot(
            emulator,
            tmp_path / "contiguous",
            "flash_attention",
            SLOT,
            PARAMS["flash_attention"],
            call,
            {"out": (q.shape, q.dtype)},
            lambda given: [given["out"]],
        )
