"""Shared fixtures: the engine over the packaged catalog (loaded once), a builder of workload directories, and
the `--long` option."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest

from firstfault.engine import Engine
from firstfault.tools.verify import default_engine
from tests.support.long_mode import long_mode
from tests.support.workloads import WorkloadFactory, write_workload


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """CLI runs in tests keep compiled databases in a temporary directory, not in ~/.cache."""
    os.environ["FIRSTFAULT_CACHE_DIR"] = str(tmp_path_factory.mktemp("firstfault-cache"))


@pytest.fixture(scope="session")
def engine() -> Engine:
    return default_engine()


@pytest.fixture
def make_workload(tmp_path: Path) -> WorkloadFactory:
    """Write a static workload directory: make_workload({"node/source": [lines] | bytes}, nodes=[...], **fields)
    (tests/support/workloads.py: write_workload under tmp_path)."""
    return functools.partial(write_workload, tmp_path)


# -- long mode -------------------------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the soak and load versions of the reliability tests (marked `long`); "
                          "FIRSTFAULT_LONG_TESTS=1 does the same")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if long_mode(config):
        return
    skip = pytest.mark.skip(reason="soak/load version: run with --long (results in docs/reliability.md)")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)
