"""The op table: for each of polyops' operators, its dtypes, cases, reference and
tolerances, one module per family (elementwise, rows, rotary, kv_cache, gemm,
attention, sampling).

An :class:`OpInfo` (after PyTorch's OpInfo) says everything the parity
harness needs to know about one operator; :data:`OPS` holds one per op.
Cases are cheap descriptions (a name and a builder): tensors are made only
when a case is built for a device, from a generator seeded by (op, dtype,
case), so every device and slot sees the same inputs.
"""

from __future__ import annotations

from polyops.testing.opinfo import attention, elementwise, gemm, kv_cache, rotary, rows, sampling
from polyops.testing.opinfo.core import Call, Case, Inputs, OpInfo, drop_none
from polyops.testing.opinfo.rotary import rope_cache
from polyops.testing.opinfo.sampling import SAMPLING_FILTERS

OPS: dict[str, OpInfo] = {
    info.name: info
    for family in (elementwise, rows, rotary, kv_cache, gemm, attention, sampling)
    for info in family.INFOS
}

__all__ = ["OPS", "SAMPLING_FILTERS", "Call", "Case", "Inputs", "OpInfo", "drop_none", "rope_cache"]
