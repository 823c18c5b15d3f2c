"""The bundled sample workloads (static format: scenario.toml + <node>/<source>.log), found as package data."""

from __future__ import annotations

import importlib.resources
from pathlib import Path


def samples_root() -> Path:
    return Path(str(importlib.resources.files("firstfault") / "samples"))


def sample_dirs() -> dict[str, Path]:
    """Sample name -> its directory, in name order."""
    root = samples_root()
    return {p.name: p for p in sorted(root.iterdir()) if (p / "scenario.toml").is_file()}
