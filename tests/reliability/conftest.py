"""Reliability tests (docs/operations.md names the test behind each guarantee).

Every test here is bounded in time and uses loopback only. Tests marked `long` are the soak and load versions,
skipped unless pytest runs with `--long`. Measured numbers (times, ratios, memory, latency percentiles) are
recorded with the `record` fixture: they are printed at the end of the run and, when
FIRSTFAULT_RELIABILITY_REPORT names a file, appended to it as JSON lines (docs/reliability.md is written from
them).
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from tests.reliability import support
from tests.reliability.support import Record
from tests.support.long_mode import long_mode

_RECORDS: list[dict[str, Any]] = []


def pytest_configure(config: pytest.Config) -> None:
    support.LONG = long_mode(config)


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Record:
    def add(**numbers: Any) -> None:
        entry = {"test": request.node.nodeid, **numbers}
        _RECORDS.append(entry)
        path = os.environ.get("FIRSTFAULT_RELIABILITY_REPORT")
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(entry, sort_keys=True) + "\n")

    return add


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _RECORDS:
        return
    terminalreporter.section("reliability numbers")
    for entry in _RECORDS:
        numbers = ", ".join(f"{k}={v}" for k, v in entry.items() if k not in ("test", "rows"))  # rows: the report
        terminalreporter.write_line(f"{entry['test'].split('::', 1)[-1]}: {numbers}")
