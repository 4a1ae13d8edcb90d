"""What each slot declares it does not support, as data (after xformers'
``not_supported_reasons``).

A slot's constructor refuses arguments outside what it supports with
NotImplementedError (the call then falls back to another slot unless one was
named). Every such refusal is declared here, once: which device, op and slot
(by name), the refusal text it matches and why. ``polyops.implementations(op,
device, verbose=True)`` shows the declarations; the parity harness reports a
declared refusal as ``n/a`` and any other NotImplementedError as an error, so
a slot cannot silently stop supporting a case (docs/user/testing.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class NotSupported:
    """One declared refusal of a slot: `refusal` is a regular expression its
    NotImplementedError message matches (searched), `reason` says why."""

    device: str
    op: str
    slot: str
    refusal: str
    reason: str


_FLASHINFER = (
    "FlashInfer's compiled kernels only: float16 / bfloat16 with the head sizes this build "
    "compiled, 16-byte aligned rows, 32-bit offsets, contiguous head dims "
    "(docs/backends/cuda_attention.md)"
)
_FLASH_GRID = "grid and index limits: at most 65535 head blocks / sequences, 32-bit key indices"
_CUBLAS = (
    "cuBLAS' 32-bit batch count, and layouts for which cuBLASLt's heuristic returns no algorithm"
)
_CUDA_ROTARY = "(query heads + key heads) x head_size < 2**31: the kernel indexes with int32"
_FUSED_ATTENTION = "the fused attention APIs take float16 and bfloat16 only"
_NO_FLOAT32 = r"is not supported for dtype float32"

NOT_SUPPORTED: tuple[NotSupported, ...] = (
    # --- cuda (never run on a GPU: declared from the constructors' checks) ---
    *(
        NotSupported("cuda", op, "flashinfer", r"flashinfer slot on cuda does not", _FLASHINFER)
        for op in ("flash_attention", "paged_attention")
    ),
    *(
        NotSupported("cuda", op, "flash", r"flash slot on cuda does not support", _FLASH_GRID)
        for op in ("flash_attention", "paged_attention")
    ),
    *(
        NotSupported("cuda", op, slot, rf"{slot} slot on cuda does not support", _CUBLAS)
        for op in ("matmul", "gemm", "linear")
        for slot in ("cublas", "cublaslt")
    ),
    *(
        NotSupported("cuda", op, "token", r"the CUDA slot does not support", _CUDA_ROTARY)
        for op in ("rotary_embedding", "apply_rotary_pos_emb")
    ),
    # --- npu (proved against the CANN test double) ---
    NotSupported("npu", "flash_attention", "fia_v3", _NO_FLOAT32, _FUSED_ATTENTION),
    *(
        NotSupported("npu", "paged_attention", slot, _NO_FLOAT32, _FUSED_ATTENTION)
        for slot in ("fia_v3", "ifa_v4")
    ),
    NotSupported(
        "npu",
        "apply_rotary_pos_emb",
        "aclnn",
        r"is not supported for head size \d+ \(rotary_dim \d+\)",
        "aclnnApplyRotaryPosEmb(V2)'s head-size and rotary_dim envelope (docs/backends/ascend.md)",
    ),
    NotSupported(
        "npu",
        "rotary_embedding",
        "aclnn",
        r"is not supported for head_size \d+ and rotary_dim \d+",
        "aclnnRopeWithSinCosCache needs head_size and rotary_dim to be multiples of its block",
    ),
    NotSupported(
        "npu",
        "rotary_embedding",
        "aclnn",
        r"is not supported for a \w+ cos_sin_cache with \w+ query",
        "aclnnRopeWithSinCosCache takes the cache in the query's dtype",
    ),
    NotSupported(
        "npu",
        "reshape_and_cache",
        "aclnn",
        r"is not supported for \w+ caches with strides",
        "aclnnScatterPaKvCache takes contiguous [num_blocks, block_size, Hkv, D] caches",
    ),
    NotSupported(
        "npu",
        "reshape_and_cache",
        "aclnn",
        r"is not supported for a strided slot_mapping",
        "aclnnScatterPaKvCache takes slot_mapping contiguous",
    ),
    NotSupported(
        "npu",
        "topk_topp_sampling",
        "aclnn",
        r"seed= is not supported on npu",
        "the seeded uniforms need 64-bit integer arithmetic aclnn does not offer; pass uniform=",
    ),
)


def not_supported(op: str, device: str, slot: str) -> list[NotSupported]:
    """The declared refusals of one slot."""
    return [d for d in NOT_SUPPORTED if (d.device, d.op, d.slot) == (device, op, slot)]


def declared_refusal(op: str, device: str, slot: str, message: str) -> NotSupported | None:
    """The declaration a slot's NotImplementedError `message` matches, if any."""
    for declaration in not_supported(op, device, slot):
        if re.search(declaration.refusal, message):
            return declaration
    return None
