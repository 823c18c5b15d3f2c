"""Every bundled sample's `firstfault analyze --sample NAME --json` output, byte for byte, against its golden file
in tests/data/golden (the catalog hash replaced by a placeholder: tests/support/golden.py). A change to the rules
or the result format that changes a result shows here as a diff to review; rewrite the files with
`PYTHONPATH=src python -m tests.support.golden --update`."""

from __future__ import annotations

import pytest

from firstfault.samples import sample_dirs
from tests.support.golden import CATALOG_HASH_PLACEHOLDER, GOLDEN_DIR, UPDATE_COMMAND, diff, expected, golden_path


@pytest.mark.parametrize("name", sorted(sample_dirs()))
def test_sample_output_matches_its_golden_file(name: str) -> None:
    path = golden_path(name)
    assert path.is_file(), f"{path} is missing; write it with: {UPDATE_COMMAND} {name}"
    actual = expected(name)
    assert CATALOG_HASH_PLACEHOLDER in actual
    assert path.read_bytes() == actual.encode("utf-8"), (
        f"`firstfault analyze --sample {name} --json` no longer matches tests/data/golden/{path.name}; if the "
        f"change is intended, rewrite it with: {UPDATE_COMMAND} {name}\n{diff(name, actual)}")


def test_one_golden_file_per_sample() -> None:
    assert sorted(p.stem for p in GOLDEN_DIR.glob("*.json")) == sorted(sample_dirs())
