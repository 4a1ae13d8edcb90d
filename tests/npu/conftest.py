"""The tests that run on the CANN test double and the test "npu" torch device.

``use_cann_double()`` is once per process and changes the process for good (the
double's runtime loaded, ``torch.npu`` registered), so this folder is its own pytest
process: tests/conftest.py keeps it out of the main run, and ``nox -s tests`` runs
``python -m pytest tests/npu`` after the main suite (docs/user/testing.md). This file
activates the double once, when the folder's collection starts; where the double or
the device is not built (the conditions of test_ascend.py's ``_skip_reason``), every
test here is skipped with the reason instead.

Each test starts from empty instance caches and an empty call log, as a fresh
interpreter did when each check ran in its own subprocess.
"""

from __future__ import annotations

import pytest

import polyops
from polyops.testing import clear_cann_calls, use_cann_double
from tests.ascend._npu_child import _skip_reason

SKIP_REASON = _skip_reason()
if SKIP_REASON is None:
    use_cann_double()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skips every test of this folder, with the reason, when the double cannot be used."""
    if SKIP_REASON is not None:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=SKIP_REASON))


@pytest.fixture(autouse=True)
def _fresh_npu_state() -> None:
    """Empty instance caches and call log before each test (a check must not depend on
    which tests ran before it in this process)."""
    if SKIP_REASON is None:
        polyops.clear_cache()
        clear_cann_calls()
