"""Reference of reshape_and_cache."""

from __future__ import annotations

from polyops.testing.references._common import Tensor

# ---------------------------------------------------------------------------
# reshape_and_cache: EXACT (a copy)


def reshape_and_cache_reference(
    key: Tensor, value: Tensor, key_cache: Tensor, value_cache: Tensor, slot_mapping: Tensor
) -> tuple[Tensor, Tensor]:
    """The caches after the write: token t goes to block slot // B, offset slot % B
    of both caches (B = block_size; slot < 0 skips the token)."""
    key_cache, value_cache = key_cache.cpu().clone(), value_cache.cpu().clone()
    block_size = key_cache.shape[1]
    for t, slot in enumerate(slot_mapping.tolist()):
        if slot < 0:
            continue
        key_cache[slot // block_size, slot % block_size] = key[t].cpu()
        value_cache[slot // block_size, slot % block_size] = value[t].cpu()
    return key_cache, value_cache
