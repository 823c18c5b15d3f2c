"""The package passes the linter configured in pyproject.toml (pyflakes, pycodestyle, bugbear, pyupgrade)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_ruff_is_clean() -> None:
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.fail("ruff is not installed (it is in the test extra: pip install -e '.[test]')")
    result = subprocess.run([ruff, "check", "src"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
