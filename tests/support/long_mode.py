"""Long mode: the soak and load versions of the reliability tests (marked `long`) run only when asked for."""

from __future__ import annotations

import os

import pytest

ENV = "FIRSTFAULT_LONG_TESTS"


def long_mode(config: pytest.Config) -> bool:
    """True when pytest runs with `--long` (tests/conftest.py adds the option) or FIRSTFAULT_LONG_TESTS=1."""
    return bool(config.getoption("--long")) or os.environ.get(ENV, "") == "1"
