"""The Ascend backend's build and loader: every op has an npu slot, and the loader's
errors when the CANN libraries are incomplete.

The tests that run on the CANN test double and the test "npu" device live in tests/npu/,
a pytest process of its own with the double active (``use_cann_double()`` is once per
process). The loader checks here need a process whose first npu call loads another
library directory, so each runs in a fresh interpreter (:func:`run_child`, also used by
tests that need a fresh process for the same reason, an environment variable read when
the libraries load). Skipped with a reason where the double or the device is not built.
"""

from __future__ import annotations

import pytest

import polyops
from polyops.testing import OPS
from tests.ascend._npu_child import _copy_double, _skip_reason, run_child

pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


ASCEND_OPS = sorted(op for op in OPS if polyops.implementations(op, "npu"))


def test_every_op_has_an_ascend_slot():
    assert sorted(ASCEND_OPS) == sorted(OPS), sorted(set(OPS) - set(ASCEND_OPS))


def test_missing_operator_library_is_a_runtime_error(tmp_path):
    # The runtime and nnopbase are there, no libopapi*.so: the first npu call says so,
    # the interpreter survives, CPU calls still work.
    broken = _copy_double(
        tmp_path, {"libascendcl.so": "libascendcl.so", "libnnopbase.so": "libnnopbase.so"}
    )
    result = run_child(
        f"""
        import os
        os.environ["POLYOPS_CANN_LIB_DIR"] = {str(broken)!r}
        a = torch.ones(4).to("npu")
        try:
            polyops.add(a, a)
            message = None
        except RuntimeError as error:
            message = str(error)
        report([message, polyops.add(torch.ones(2), torch.ones(2)).tolist()])
        """
    )
    assert "no operator library" in result[0] and "libopapi.so" in result[0]
    assert result[1] == [2.0, 2.0]


def test_missing_symbol_names_it_and_the_cann_version(tmp_path):
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
        a = torch.ones(4).to("npu")
        try:
            polyops.mul(a, a)
            report(None)
        except RuntimeError as error:
            report(str(error))
        """
    )
    assert "aclnnMul" in message and "libopapi.so" in message and "from CANN" in message
