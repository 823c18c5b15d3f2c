"""Helpers of the reliability tests: measured subprocesses (time and peak memory; the scripts are in scripts/),
and timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.reliability.scripts.measure import RESULT_PREFIX

ROOT = Path(__file__).resolve().parents[2]
LONG = False  # set by conftest.py: pytest runs with --long

# The `record` fixture (conftest.py): record(**numbers) keeps a test's measured numbers for the report.
Record = Callable[..., None]


def examples(fast: int, long: int) -> int:
    """How many examples a property test tries: `fast` normally, `long` with --long."""
    return long if LONG else fast


def measured(script: str, *args: str, timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `python -m tests.reliability.scripts.SCRIPT ARGS...` in a fresh interpreter (so peak memory is its own)
    and return what it passed to `measure.done()`. A script that does not finish within `timeout` seconds fails the
    test instead of hanging it."""
    command = [sys.executable, "-m", f"tests.reliability.scripts.{script}", *args]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                             env={**os.environ, **(env or {})}, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the measured script {script} did not finish within {timeout:g} s") from None
    results = [line for line in run.stdout.splitlines() if line.startswith(RESULT_PREFIX)]
    if run.returncode != 0 or not results:
        raise AssertionError(f"the measured script {script} failed ({run.returncode}):\n{run.stdout[-3000:]}\n"
                             f"{run.stderr[-3000:]}")
    return dict(json.loads(results[-1][len(RESULT_PREFIX):]))


def best_of(repeats: int, action: Callable[[], Any]) -> float:
    """The shortest wall time of `repeats` runs of `action` (the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - started)
    return best


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    index = min(len(ordered) - 1, max(0, int(round(q / 100 * len(ordered) + 0.5)) - 1))
    return ordered[index]
