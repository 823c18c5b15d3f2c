"""The package passes the linter configured in pyproject.toml (pyflakes, pycodestyle, bugbear, pyupgrade, import
sorting) and keeps its architecture: the import layers of docs/architecture.md and no import cycle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).parents[1]


def _tool(name: str) -> str:
    path = shutil.which(name) or str(Path(sys.executable).parent / name)
    if not Path(path).exists():
        pytest.fail(f"{name} is not installed (it is in the test extra: pip install -e '.[test]')")
    return path


def test_ruff_is_clean() -> None:
    result = subprocess.run([_tool("ruff"), "check", "src", "tests", "bench"], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_import_layers_hold() -> None:
    """pyproject.toml's import-linter contract: each layer imports only those below it, shells never each other."""
    result = subprocess.run([_tool("lint-imports")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr


def test_no_import_cycle_between_modules() -> None:
    """Not even one hidden in a function body (run-time imports count; TYPE_CHECKING imports do not)."""
    graph = grimp.build_graph("firstfault", exclude_type_checking_imports=True)
    cycles = [(a, b) for a in sorted(graph.modules) for b in sorted(graph.modules)
              if a < b and graph.chain_exists(importer=a, imported=b) and graph.chain_exists(importer=b, imported=a)]
    assert cycles == []


def test_mypy_is_clean() -> None:
    """pyproject.toml [tool.mypy]: strict on the engine, the rules, the errors and the wire formats; mypy's
    defaults on the shells."""
    result = subprocess.run([_tool("mypy")], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr
