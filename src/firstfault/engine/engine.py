"""The engine facade: a loaded, compiled catalog that opens sessions and analyses static workloads."""

from __future__ import annotations

import gzip
import os
import threading
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from firstfault.engine.catalog import Catalog, load_catalog
from firstfault.engine.compiled import CompiledCatalog
from firstfault.engine.evidence import (
    DecompressedEvidence,
    EvidenceFile,
    evidence_files,
    open_evidence,
    read_context,
)
from firstfault.engine.ingest import InexactMerge, IngestState
from firstfault.engine.model import Attribution, ExecutionContext, SourceKind
from firstfault.engine.params import Params
from firstfault.engine.session import Session
from firstfault.engine.timing import Timings

if TYPE_CHECKING:
    from concurrent.futures import Future

_BINARY_SNIFF_BYTES = 64 * 1024
_TEXT_CONTROL = {9, 10, 12, 13, 27}
_NOT_CONTROL = bytes(b for b in range(256) if b >= 32 or b in _TEXT_CONTROL)
# Below this much evidence a process pool costs more than it saves (starting workers, shipping states).
PARALLEL_MIN_BYTES = 64 * 1024 * 1024
MAX_AUTO_WORKERS = 8


def looks_binary(head: bytes) -> bool:
    """True when the head of a file is mostly not text (NUL padding alone does not make a log binary)."""
    sample = head.replace(b"\0", b"")
    if not sample:  # all NUL: the padding a crashed node leaves in its syslog, scanned as text
        return False
    control = len(sample.translate(None, _NOT_CONTROL))  # bytes < 32 other than tab, newline, FF, CR, ESC
    return control / len(sample) > 0.10


def auto_workers(files: int, total_bytes: int) -> int:
    """The worker count `workers=0` ("auto") picks: one per core (at most 8) for large evidence in several
    files, otherwise 1 (in-process)."""
    if files < 2 or total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(os.cpu_count() or 1, MAX_AUTO_WORKERS, files))


class Engine:
    def __init__(self, catalog: Catalog | None = None, params: Params | None = None, *,
                 cache_dir: Path | None = None) -> None:
        """Without `catalog`, load the packaged one (unverified: `firstfault.tools.verify.default_engine()` is the
        packaged engine with every inline case run). `cache_dir` keeps compiled hyperscan databases between
        processes (the CLI passes `default_cache_dir()`); the library default is no cache: nothing is written."""
        self.startup = Timings()
        with self.startup.phase("catalog.load"):
            loaded = catalog or load_catalog()
        with self.startup.phase("catalog.compile"):
            self.compiled = CompiledCatalog.for_catalog(loaded, cache_dir=cache_dir)
        self.catalog = loaded
        self.params = params or Params()

    def session(self, context: ExecutionContext, **kwargs: int) -> Session:
        return Session(context, self.compiled, self.params, **kwargs)

    def ingest_file(self, session: Session, node: str, source: SourceKind, path: Path, origin: str | None = None) -> None:
        """Scan one evidence file into a session; unreadable or binary files become coverage issues."""
        name = origin or str(path)
        limit = self.params.max_decompressed_bytes
        try:
            with open_evidence(path, limit) as stream:
                head = stream.peek(_BINARY_SNIFF_BYTES)[:_BINARY_SNIFF_BYTES] if hasattr(stream, "peek") else b""
                if looks_binary(head):
                    session.record_issue(f"{name}: binary content, not a log file; skipped")
                    return
                session.ingest_stream(node, source, stream, name)
                if isinstance(stream, DecompressedEvidence) and stream.exceeded:
                    session.record_issue(f"{name}: decompresses to more than {limit} bytes "
                                         "(max_decompressed_bytes); read up to there, the rest skipped")
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            session.record_issue(f"{name}: cannot be read: {exc.__class__.__name__}: {exc}")

    def analyze_path(self, directory: Path, *, workers: int = 1, timings: Timings | None = None) -> Attribution:
        """Analyse one static workload directory (scenario.toml + <node>/<source>.log).

        `workers` > 1 scans the files in that many worker processes (0: `auto_workers`); each worker returns
        the state it accumulated per file and the states are merged in file order, so the result is the
        same JSON as with `workers=1`. `timings`, when given, receives where the time went.
        """
        timings = timings if timings is not None else Timings()
        with timings.phase("analyze.discover"):
            context = read_context(directory)
            files, ignored = evidence_files(directory)
            session = self.session(context)
            if not files:
                session.record_issue(f"{directory}: no evidence files (<node>/applog.log, syslog.log, scheduler.log)")
            for name, reason in ignored:
                session.record_issue(f"{directory / name}: {reason}")
            sizes = [_size(item.path) for item in files]
        if workers <= 0:
            workers = auto_workers(len(files), sum(sizes))
        workers = min(workers, len(files)) if files else 1
        timings.count("workers", workers)
        with timings.phase("analyze.ingest"):
            if workers > 1:
                self._ingest_parallel(session, directory, files, sizes, workers, timings)
            else:
                for item in files:
                    self.ingest_file(session, item.node, item.source, item.path, origin=_origin(item))
        timings.merge(session.timings)
        session.timings = timings
        with timings.phase("analyze.attribute"):
            return session.attribute()

    def _ingest_parallel(self, session: Session, directory: Path, files: list[EvidenceFile], sizes: list[int],
                         workers: int, timings: Timings) -> None:
        key = _register(self)
        try:
            self._run_pool(key, session, directory, files, sizes, workers, timings)
        finally:
            _ENGINES.pop(key, None)

    def _run_pool(self, key: str, session: Session, directory: Path, files: list[EvidenceFile], sizes: list[int],
                  workers: int, timings: Timings) -> None:
        # Workers need only the times of the context (timestamp years, the job-end fallback), not the node list.
        slim = session.context.model_copy(update={"nodes": [], "metadata": {}})
        init_args = (key, self.catalog.content_hash, self.catalog.extra_files, self.params, slim,
                     session.block_size, session.max_line_bytes)
        from concurrent.futures import ProcessPoolExecutor  # here: an in-process analysis does not load it

        started = time.perf_counter()
        origins = [_origin(item) for item in files]
        with ProcessPoolExecutor(max_workers=workers, mp_context=_pool_context(), initializer=_init_worker,
                                 initargs=init_args) as pool:
            batches = _batches(sizes, workers)
            futures: list[Future[list[IngestState]] | None] = []
            task_of: dict[int, int] = {}  # file index -> the task that scans it
            for t, batch in enumerate(batches):
                futures.append(pool.submit(_scan_files, [(files[i].node, files[i].source, str(files[i].path),
                                                          origins[i]) for i in batch]))
                task_of.update({i: t for i in batch})
            timings.add("analyze.pool_start", time.perf_counter() - started)  # wall only
            states: dict[int, IngestState] = {}
            for i, item in enumerate(files):  # merged in file order, whatever order the tasks finish in
                if i not in states:
                    t = task_of[i]
                    future = futures[t]
                    assert future is not None
                    states.update(zip(batches[t], future.result(), strict=True))
                    futures[t] = None
                state = states.pop(i)
                with timings.phase("analyze.merge"):
                    try:
                        session.merge_state(state)
                    except InexactMerge:
                        # The worker hit a cap on this file alone (event keys, issues) in a way only a
                        # sequential ingest reproduces, so do that here.
                        self.ingest_file(session, item.node, item.source, item.path, origin=origins[i])
                        timings.count("merge_fallbacks", 1)


def _batches(sizes: list[int], workers: int) -> list[list[int]]:
    """File indices grouped into tasks: the largest files first, each task about 1/16 of a worker's share of
    the bytes (at least 4 MiB), so that thousands of small files do not cost a round trip each, while large
    files still spread over the workers. Files keep their order within a task."""
    target = max(sum(sizes) // (workers * 16), 4 * 1024 * 1024)
    batches: list[list[int]] = []
    current: list[int] = []
    current_bytes = 0
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        current.append(i)
        current_bytes += sizes[i]
        if current_bytes >= target:
            batches.append(sorted(current))
            current, current_bytes = [], 0
    if current:
        batches.append(sorted(current))
    return batches


def default_cache_dir() -> Path | None:
    """Where the CLI keeps compiled hyperscan databases: $FIRSTFAULT_CACHE_DIR ("off" disables it), else
    $XDG_CACHE_HOME/firstfault, else ~/.cache/firstfault."""
    configured = os.environ.get("FIRSTFAULT_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in ("", "off", "0", "no") else Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "firstfault"


def _origin(item: EvidenceFile) -> str:
    """`<node>/<file>`: the evidence file relative to the workload directory (as `Path.relative_to` gives it,
    without its cost per file)."""
    return str(Path(item.node, item.path.name))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


# -- worker processes -------------------------------------------------------------------------------------
# Engines by id, so that a forked worker finds its parent's compiled catalog (hyperscan databases included)
# without loading anything; a spawned worker reloads the catalog once, in its initializer.
_ENGINES: dict[str, Engine] = {}
_WORKER: dict[str, Any] = {}


def _register(engine: Engine) -> str:
    key = f"{os.getpid()}:{id(engine)}"
    _ENGINES[key] = engine
    return key


def _pool_context() -> Any:
    """`fork` when it is safe (a single-threaded parent on a platform that has it): the workers inherit the
    compiled catalog and start in milliseconds. Otherwise `spawn`: each worker loads the catalog once."""
    import multiprocessing

    if "fork" in multiprocessing.get_all_start_methods() and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _init_worker(key: str, content_hash: str, extra_files: list[tuple[str, bytes]], params: Params,
                 context: ExecutionContext, block_size: int, max_line_bytes: int) -> None:
    engine = _ENGINES.get(key)
    if engine is None or engine.catalog.content_hash != content_hash:
        catalog = load_catalog(extra_files=extra_files)
        if catalog.content_hash != content_hash:
            raise RuntimeError("a worker process loaded a different rule catalog than its parent")
        engine = Engine(catalog, params)
    _WORKER.update(engine=engine, params=params, context=context, block_size=block_size,
                   max_line_bytes=max_line_bytes)


def _scan_files(items: list[tuple[str, SourceKind, str, str]]) -> list[IngestState]:
    """Scan each file into a session of its own (states merge per file, in file order)."""
    engine: Engine = _WORKER["engine"]
    states = []
    for node, source, path, origin in items:
        session = Session(_WORKER["context"], engine.compiled, _WORKER["params"], block_size=_WORKER["block_size"],
                          max_line_bytes=_WORKER["max_line_bytes"])
        engine.ingest_file(session, node, source, Path(path), origin=origin)
        states.append(session.export_state())
    return states


__all__ = ["Engine", "auto_workers", "looks_binary"]
