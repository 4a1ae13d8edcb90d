"""topk_topp_sampling's Ascend slot on the CANN test double when its operator library
lacks the aclnn ops: a runtime error naming them. The operator libraries are loaded
once per process, with the first aclnn op, so this runs in a fresh interpreter
(``run_child``) whose POLYOPS_CANN_LIB_DIR points at a broken copy of the double before
any op is called. The slot's other checks are real tests in the npu process
(tests/npu/test_npu_sampling.py).
"""

from __future__ import annotations

import pytest

from tests.ascend._npu_child import _copy_double, _skip_reason, run_child

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def test_a_missing_operator_is_a_runtime_error_naming_it(tmp_path):
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
