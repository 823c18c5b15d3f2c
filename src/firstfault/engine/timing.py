"""Where the time of one analysis went: seconds per phase and a few counters (never part of a result).

Every phase is measured twice: wall-clock seconds (`seconds`) and CPU seconds of the measuring thread
(`cpu_seconds`); on a busy machine the second is the steadier one. The session fills `ingest.read` (reading
and cutting blocks), `ingest.lines` (counting newlines), `ingest.scan` (hyperscan) and `ingest.hits` (Python
on the matching lines); the pipeline fills `pipeline.<PHASE>`; the engine fills `catalog.*` and the
analysis-level phases. With worker processes the ingest entries are sums over the workers, while
`analyze.ingest` is the wall time of the parallel section (its CPU time is the parent's, mostly waiting).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class Timings:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.cpu_seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def add(self, name: str, seconds: float, cpu_seconds: float | None = None) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds
        if cpu_seconds is not None:
            self.cpu_seconds[name] = self.cpu_seconds.get(name, 0.0) + cpu_seconds

    def count(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.thread_time()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - wall, time.thread_time() - cpu)

    def merge(self, other: Timings) -> None:
        for name, seconds in other.seconds.items():
            self.add(name, seconds, other.cpu_seconds.get(name))
        for name, n in other.counts.items():
            self.count(name, n)

    def as_dict(self) -> dict[str, dict[str, float | int]]:
        return {"seconds": {k: round(v, 4) for k, v in sorted(self.seconds.items())},
                "cpu_seconds": {k: round(v, 4) for k, v in sorted(self.cpu_seconds.items())},
                "counts": dict(sorted(self.counts.items()))}
