"""Where the time of one analysis went: seconds per phase and a few counters (never part of a result).

The session fills `ingest.read` (reading and cutting blocks, counting lines), `ingest.scan` (hyperscan) and
`ingest.hits` (Python on the matching lines); the pipeline fills `pipeline.<PHASE>`; the engine fills
`catalog.*` and the analysis-level phases. With worker processes the ingest entries are sums over the
workers (CPU-seconds spent in them), while `analyze.ingest` is the wall time of the parallel section.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Timings:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - started)

    def merge(self, other: Timings) -> None:
        for name, seconds in other.seconds.items():
            self.add(name, seconds)
        for name, n in other.counts.items():
            self.count(name, n)

    def as_dict(self) -> dict[str, dict[str, float | int]]:
        return {"seconds": {k: round(v, 4) for k, v in sorted(self.seconds.items())},
                "counts": dict(sorted(self.counts.items()))}
