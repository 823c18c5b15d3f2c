"""Helpers of the reliability tests: measured subprocesses (time and peak memory), and timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
LONG = False  # set by conftest.py: pytest runs with --long

# The `record` fixture (conftest.py): record(**numbers) keeps a test's measured numbers for the report.
Record = Callable[..., None]


def examples(fast: int, long: int) -> int:
    """How many examples a property test tries: `fast` normally, `long` with --long."""
    return long if LONG else fast

# Prepended to every measured script: `peak_kib()` is the process's peak resident set so far (VmHWM), and
# `done(**numbers)` prints the script's result as the last line of its output.
_PRELUDE = '''
import json, resource, sys, time

def peak_kib():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

def done(**numbers):
    print("RESULT " + json.dumps(numbers))
'''


def measured(script: str, *, timeout: float, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a Python script in a fresh interpreter (so peak memory is its own) and return what it passed to
    `done()`. A script that does not finish within `timeout` seconds fails the test instead of hanging it."""
    code = _PRELUDE + textwrap.dedent(script)
    try:
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                             cwd=ROOT, env={**os.environ, **(env or {})}, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the measured script did not finish within {timeout:g} s") from None
    results = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    if run.returncode != 0 or not results:
        raise AssertionError(f"the measured script failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return dict(json.loads(results[-1][len("RESULT "):]))


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
