"""Shared fixtures: the engine over the packaged catalog (loaded once), and builders for workload directories."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from firstfault.engine import Engine
from firstfault.tools.verify import default_engine

CORPUS = Path(__file__).parent / "data" / "corpus" / "dev"


@pytest.fixture(scope="session", autouse=True)
def _private_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> None:
    """CLI runs in tests keep compiled databases in a temporary directory, not in ~/.cache."""
    os.environ["FIRSTFAULT_CACHE_DIR"] = str(tmp_path_factory.mktemp("firstfault-cache"))


@pytest.fixture(scope="session")
def engine() -> Engine:
    return default_engine()


WorkloadFactory = Callable[..., Path]


@pytest.fixture
def make_workload(tmp_path: Path) -> WorkloadFactory:
    """Write a static workload directory: make_workload({"node/source": [lines] | bytes}, nodes=[...], **fields)."""

    def make(files: dict[str, list[str] | bytes], *, nodes: list[str] | None = None, name: str = "wl",
             scheduler_state: str = "FAILED", start: str = "2025-01-01T00:00:00Z",
             end: str = "2025-01-01T02:00:00Z") -> Path:
        root = tmp_path / name
        root.mkdir()
        all_nodes = nodes or sorted({key.split("/")[0] for key in files})
        node_list = ", ".join(f'"{n}"' for n in all_nodes)
        (root / "scenario.toml").write_text(
            f'id = "{name}"\n[workload]\nscheduler = "slurm"\njob_id = "1"\nscheduler_state = "{scheduler_state}"\n'
            f'exit_code = "1:0"\nstart_time = "{start}"\nend_time = "{end}"\nnodes = [{node_list}]\n'
            "ranks_per_node = 8\n")
        for key, content in files.items():
            node, source = key.split("/")
            path = root / node / f"{source}.log"
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(content if isinstance(content, bytes) else ("\n".join(content) + "\n").encode())
        return root

    return make


# -- long mode -------------------------------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the soak and load versions of the reliability tests (marked `long`); "
                          "FIRSTFAULT_LONG_TESTS=1 does the same")


def long_mode(config: pytest.Config) -> bool:
    return bool(config.getoption("--long")) or os.environ.get("FIRSTFAULT_LONG_TESTS", "") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if long_mode(config):
        return
    skip = pytest.mark.skip(reason="soak/load version: run with --long (results in docs/reliability.md)")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)
