"""The op table's attention ops: flash_attention (varlen prefill, paged or not)
and paged_attention (decode).
"""

from __future__ import annotations

import torch

from polyops.testing import references as ref
from polyops.testing.opinfo.core import (
    Call,
    Case,
    Inputs,
    OpInfo,
)
from polyops.testing.references import (
    ATTENTION,
)
from polyops.testing.tensors import (
    FLOAT_DTYPES,
    I32,
    I64,
    combined_kv,
    cu_seqlens,
    paginate,
)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------
# flash_attention, paged_attention


def _flash_attention_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        q_lens,
        kv_lens,
        heads,
        kv_heads,
        head_size,
        *,
        paged=0,
        packed=False,
        kv_order=None,
        host=False,
        q_dtype=I32,
        kv_dtype=I32,
        **options,
    ):
        """q_dtype: cu_seqlens_q's (and its mirror's) dtype; kv_dtype: cu_seqlens_kv's and
        the block table's."""

        def build(inp: Inputs) -> Call:
            tq, tkv = sum(q_lens), sum(kv_lens)
            cu_q, cu_kv = cu_seqlens(q_lens).to(q_dtype), cu_seqlens(kv_lens).to(kv_dtype)
            if packed:  # q, k, v: slices of one qkv projection [T, Hq + 2 Hkv, D]
                qkv = inp.tensor((tq, heads + 2 * kv_heads, head_size), dtype)
                q, k, v = qkv.split([heads, kv_heads, kv_heads], dim=1)
            else:
                q = inp.tensor((tq, heads, head_size), dtype)
                k, v = (inp.cpu((tkv, kv_heads, head_size), dtype) for _ in range(2))
            kwargs = dict(cu_seqlens_q=inp.put(cu_q), cu_seqlens_kv=inp.put(cu_kv), **options)
            if host:  # *_host arguments are CPU tensors whatever the device
                kwargs.update(cu_seqlens_q_host=cu_q.clone(), cu_seqlens_kv_host=cu_kv.clone())
            if paged:
                k, v, table = paginate(k, v, kv_lens, paged, inp.gen)
                kwargs["block_table"] = inp.put(table.to(kv_dtype))
            k, v = inp.put(k), inp.put(v)
            if kv_order:  # vLLM's caches: views into one K/V allocation
                k, v = combined_kv(k, v, kv_order)
            return Call((q, k, v), kwargs)

        return Case(name, build)

    return [
        case("prefill-128x16/4x128", [128], [128], 16, 4, 128),
        case("mha-d64-causal", [1, 7, 70], [1, 7, 70], 2, 2, 64),
        case("gqa4-d128", [5, 33], [5, 33], 4, 1, 128),
        case("gqa8-full", [3, 40], [3, 40], 8, 1, 64, causal=False),
        case("prefix-cached", [1, 7, 40, 3], [5, 20, 150, 3], 8, 2, 64),
        case("rows-without-keys", [5, 0, 2], [2, 4, 0], 4, 2, 64),
        case("sliding-window-33", [1, 7, 120], [9, 7, 200], 4, 1, 64, sliding_window=33),
        case(
            "window-3-2-full",
            [7, 100],
            [12, 150],
            4,
            2,
            64,
            causal=False,
            window_left=3,
            window_right=2,
        ),
        case("paged-b16", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16),
        case("paged-b5-window20", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=5, sliding_window=20),
        case("paged-vllm-nhd", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16, kv_order="nhd"),
        case("paged-vllm-hnd", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16, kv_order="hnd"),
        case("packed-qkv-scale0.3", [3, 50], [3, 50], 4, 2, 64, packed=True, scale=0.3),
        case("d256", [4, 9], [4, 9], 2, 1, 256),
        case("host-lens-causal", [1, 7, 70], [1, 9, 70], 4, 2, 64, host=True),
        case("host-lens-empty-rows", [5, 0, 2], [2, 4, 0], 4, 2, 64, host=True, causal=False),
        case("host-lens-paged-b16", [1, 7, 60], [37, 7, 90], 8, 2, 64, paged=16, host=True),
        case(
            "host-lens-paged-window",
            [3, 40],
            [50, 40],
            4,
            1,
            64,
            paged=8,
            host=True,
            sliding_window=9,
        ),
        # int64 lengths and block tables (torch.tensor's default dtype), also mixed.
        case("int64-lens-causal", [1, 7, 70], [1, 9, 70], 4, 2, 64, q_dtype=I64, kv_dtype=I64),
        case(
            "int64-lens-paged-b16-host",
            [1, 7, 60],
            [37, 7, 90],
            8,
            2,
            64,
            paged=16,
            host=True,
            q_dtype=I64,
            kv_dtype=I64,
        ),
        case("int64-q-int32-kv-paged-b5", [3, 40], [50, 40], 4, 1, 64, paged=5, q_dtype=I64),
    ]


def _paged_attention_cases(dtype: torch.dtype) -> list[Case]:
    def case(
        name,
        seq_lens,
        heads,
        kv_heads,
        head_size,
        block_size,
        *,
        host=False,
        kv_order=None,
        index_dtype=I32,
        **options,
    ):
        """index_dtype: seq_lens' and block_table's (and their mirrors') dtype."""

        def build(inp: Inputs) -> Call:
            q = inp.tensor((len(seq_lens), heads, head_size), dtype)
            k, v = (inp.cpu((sum(seq_lens), kv_heads, head_size), dtype) for _ in range(2))
            k_cache, v_cache, table = paginate(k, v, seq_lens, block_size, inp.gen)
            lens, table = torch.tensor(seq_lens, dtype=index_dtype), table.to(index_dtype)
            if host:  # *_host arguments are CPU tensors whatever the device
                options.update(seq_lens_host=lens.clone(), block_table_host=table.clone())
            k_cache, v_cache = inp.put(k_cache), inp.put(v_cache)
            if kv_order:  # vLLM's caches: views into one K/V allocation
                k_cache, v_cache = combined_kv(k_cache, v_cache, kv_order)
            args = (q, k_cache, v_cache, inp.put(lens), inp.put(table))
            return Call(args, dict(options))

        return Case(name, build)

    return [
        case("decode-8x32/8x128-b16", [1, 300, 17, 512, 64, 5, 129, 250], 32, 8, 128, 16),
        case("mha-d64", [1, 7, 300, 16], 4, 4, 64, 16),
        case("gqa4-d128", [1, 7, 300, 16], 8, 2, 128, 16),
        case("gqa8-d64-scale0.2", [3, 40, 129], 16, 2, 64, 16, scale=0.2),
        case("zero-length-host-b8", [5, 0, 77], 8, 1, 64, 8, host=True),
        case("vllm-nhd-caches", [3, 40, 129], 8, 2, 64, 16, kv_order="nhd"),
        case("vllm-hnd-caches", [3, 40, 129], 8, 2, 64, 16, kv_order="hnd"),
        # int64 lengths and block tables (torch.tensor's default dtype).
        case("int64-lens-b16", [1, 7, 300, 16], 8, 2, 64, 16, index_dtype=I64),
        case("int64-lens-host-b8", [5, 0, 77], 8, 1, 64, 8, host=True, index_dtype=I64),
    ]


INFOS: list[OpInfo] = [
    OpInfo(
        "flash_attention",
        FLOAT_DTYPES,
        _flash_attention_cases,
        ref.flash_attention_reference,
        ATTENTION,
        special_values=True,
    ),
    OpInfo(
        "paged_attention",
        FLOAT_DTYPES,
        _paged_attention_cases,
        ref.paged_attention_reference,
        ATTENTION,
        special_values=True,
    ),
]
