"""Every data file of the package is declared as package data, so a wheel (not only an editable install) has the
rule catalog, its reference tables, the samples and the dashboard's templates and static files."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "firstfault"


def test_every_data_file_is_package_data() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["firstfault"]
    declared = {p for pattern in patterns for p in PACKAGE.glob(pattern) if p.is_file()}
    data = {p for p in PACKAGE.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc")
            and "__pycache__" not in p.parts}
    missing = sorted(str(p.relative_to(PACKAGE)) for p in data - declared)
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
    for needed in ("rules/data/nvlink5_decode.toml", "dashboard/templates/workload.html", "dashboard/static/style.css"):
        assert PACKAGE / needed in declared


def test_version_answers_without_importing_the_package_parts() -> None:
    """`firstfault --version` is answered before the engine, service or Blueprint are imported (a start-up budget
    in imports, not seconds: docs/benchmarks.md has the timing)."""
    import subprocess
    import sys

    code = ("import sys; from firstfault.cli import main; rc = main(['--version']); "
            "print(sorted(m for m in sys.modules if m.startswith(('firstfault.engine', 'firstfault.service', "
            "'firstfault.blueprint', 'pydantic', 'rich')))); sys.exit(rc)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    version_line, loaded = run.stdout.splitlines()
    assert version_line.startswith("firstfault ") and loaded == "[]"
