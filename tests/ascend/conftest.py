"""The fixtures of the CANN double's own tests (tests/ascend/test_cann_double_*.py)."""

from __future__ import annotations

import pytest

from tests.ascend._cann_double_bindings import Cann, open_cann


@pytest.fixture(scope="module")
def cann() -> Cann:
    """The double's libraries through ctypes, opened once per test module."""
    return open_cann()
