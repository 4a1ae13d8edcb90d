"""The CANN version gate of reshape_and_cache (trap 3 of the CANN contract:
8.3.RC1.alpha003 exports aclnnScatterPaKvCache with a shorter prototype), on the CANN
test double.

The toolkit version is read once per process, when the CANN runtime loads
(aclsysGetVersionStr; the double answers POLYOPS_CANN_DOUBLE_VERSION), so each version
runs in a fresh interpreter (``run_child``). The slots' other checks are real tests in
the npu process (tests/npu/test_npu_gemm_rope_cache.py).
"""

from __future__ import annotations

import pytest

from tests.ascend._npu_child import _skip_reason, run_child

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))

# The reshape_and_cache call of the version tests: 3 tokens into 2 blocks of 2.
_CACHE_CALL = """
key = torch.randn(3, 2, 32, dtype=torch.float16)
value = torch.randn(3, 2, 32, dtype=torch.float16)
key_cache = torch.zeros(2, 2, 2, 32, dtype=torch.float16)
value_cache = torch.zeros(2, 2, 2, 32, dtype=torch.float16)
slots = torch.tensor([3, -1, 0])
npu = [t.to("npu") for t in (key, value, key_cache, value_cache, slots)]
try:
    polyops.reshape_and_cache(*npu)
    error = None
except RuntimeError as caught:
    error = str(caught)
expected_key = key_cache.clone()
expected_value = value_cache.clone()
for token, slot in ((0, 3), (2, 0)):
    expected_key[slot // 2, slot % 2] = key[token]
    expected_value[slot // 2, slot % 2] = value[token]
written = torch.equal(npu[2].cpu(), expected_key) and torch.equal(npu[3].cpu(), expected_value)
calls = [c["function"] for c in cann_calls()]
report({"error": error, "written": written, "calls": calls})
"""


@pytest.mark.parametrize("version", ["8.3.RC1.alpha003", "8.2.RC1", "7.0.0"])
def test_scatter_pa_kv_cache_is_refused_on_other_prototypes(version):
    result = run_child(_CACHE_CALL, env={"POLYOPS_CANN_DOUBLE_VERSION": version})
    assert result["error"] is not None and version in result["error"]
    assert "8.3.RC1" in result["error"]
    # Refused before any call with the wrong arity.
    assert not any(f.startswith("aclnnScatterPaKvCache") for f in result["calls"])


@pytest.mark.parametrize("version", ["8.3.RC1", "8.5.0", "9.0.0"])
def test_scatter_pa_kv_cache_runs_on_the_commercial_prototype(version):
    result = run_child(_CACHE_CALL, env={"POLYOPS_CANN_DOUBLE_VERSION": version})
    assert result["error"] is None
    assert result["written"]
