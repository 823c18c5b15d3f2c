"""The engine facade: a loaded, compiled catalog that opens sessions and analyses static workloads."""

from __future__ import annotations

import gzip
import os
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

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
from firstfault.engine.model import Attribution, ExecutionContext, NodeHistory, SourceKind
from firstfault.engine.params import Params
from firstfault.engine.session import Session
from firstfault.engine.state_format import decode_state, encode_state
from firstfault.engine.timing import Timings
from firstfault.errors import ExecutorError
from firstfault.executor import Executor, LocalExecutor

if TYPE_CHECKING:
    from concurrent.futures import Future

_BINARY_SNIFF_BYTES = 64 * 1024
_TEXT_CONTROL = {9, 10, 12, 13, 27}
_NOT_CONTROL = bytes(b for b in range(256) if b >= 32 or b in _TEXT_CONTROL)
# Below this much evidence parallel tasks cost more than they save (starting workers, shipping states).
PARALLEL_MIN_BYTES = 64 * 1024 * 1024


def looks_binary(head: bytes) -> bool:
    """True when the head of a file is mostly not text (NUL padding alone does not make a log binary)."""
    sample = head.replace(b"\0", b"")
    if not sample:  # all NUL: the padding a crashed node leaves in its syslog, scanned as text
        return False
    control = len(sample.translate(None, _NOT_CONTROL))  # bytes < 32 other than tab, newline, FF, CR, ESC
    return control / len(sample) > 0.10


def auto_workers(files: int, total_bytes: int, capacity: int | None = None) -> int:
    """The worker count `workers=0` ("auto") picks: one per slot of the executor (`capacity`, default this
    machine's cores, at most 8) for large evidence in several files, otherwise 1 (in-process)."""
    if files < 2 or total_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(LocalExecutor().capacity() if capacity is None else capacity, files))


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

    def analyze_path(self, directory: Path, *, workers: int = 1, timings: Timings | None = None,
                     executor: Executor | None = None, history: NodeHistory | None = None) -> Attribution:
        """Analyse one static workload directory (scenario.toml + <node>/<source>.log).

        `workers` > 1 scans the files in that many tasks at once on `executor` (default: processes of this
        machine; 0: `auto_workers`); each task returns the state it accumulated per file and the states are
        merged in file order, so the result is the same JSON as with `workers=1`. A task the executor loses (its
        worker died) is scanned here instead. `timings`, when given, receives where the time went. `history`: the
        node fault history of the workload's nodes (docs/architecture.md, "Node fault history").
        """
        timings = timings if timings is not None else Timings()
        executor = executor or LocalExecutor()
        with timings.phase("analyze.discover"):
            context = read_context(directory)
            if history is not None:
                context.history = history
            files, ignored = evidence_files(directory)
            session = self.session(context)
            if not files:
                session.record_issue(f"{directory}: no evidence files (<node>/applog.log, syslog.log, scheduler.log)")
            for name, reason in ignored:
                session.record_issue(f"{directory / name}: {reason}")
            sizes = [_size(item.path) for item in files]
        if workers <= 0:
            workers = auto_workers(len(files), sum(sizes), executor.capacity())
        workers = min(workers, len(files)) if files else 1
        timings.count("workers", workers)
        with timings.phase("analyze.ingest"):
            if workers > 1:
                self._ingest_parallel(session, files, sizes, workers, timings, executor)
            else:
                for item in files:
                    self.ingest_file(session, item.node, item.source, item.path, origin=_origin(item))
        timings.merge(session.timings)
        session.timings = timings
        with timings.phase("analyze.attribute"):
            return session.attribute()

    def _ingest_parallel(self, session: Session, files: list[EvidenceFile], sizes: list[int], workers: int,
                         timings: Timings, executor: Executor) -> None:
        # Tasks need only the times of the context (timestamp years, the job-end fallback), not its nodes or history.
        setup = ScanSetup(_register(self), self.catalog.content_hash, self.catalog.extra_files, self.params,
                          session.context.model_copy(update={"nodes": [], "metadata": {}, "history": None}), session.block_size,
                          session.max_line_bytes)
        try:
            self._run_tasks(setup, session, files, sizes, workers, timings, executor)
        finally:
            _ENGINES.pop(setup.engine_key, None)

    def _run_tasks(self, setup: ScanSetup, session: Session, files: list[EvidenceFile], sizes: list[int],
                   workers: int, timings: Timings, executor: Executor) -> None:
        started = time.perf_counter()
        items = [(item.node, item.source, str(item.path), _origin(item)) for item in files]
        with executor.pool(workers) as pool:
            batches = _batches(sizes, workers)
            futures: list[Future[list[Scanned]] | None] = []
            task_of: dict[int, int] = {}  # file index -> the task that scans it
            for t, batch in enumerate(batches):
                futures.append(pool.submit(_scan_files, setup, [items[i] for i in batch]))
                task_of.update({i: t for i in batch})
            timings.add("analyze.pool_start", time.perf_counter() - started)  # wall only
            timings.count("tasks", len(batches))
            states: dict[int, IngestState] = {}
            for i, item in enumerate(files):  # merged in file order, whatever order the tasks finish in
                if i not in states:
                    t = task_of[i]
                    future, batch = futures[t], batches[t]
                    assert future is not None
                    scanned = _task_states(future, executor, setup, [items[j] for j in batch], timings)
                    states.update(zip(batch, scanned, strict=True))
                    futures[t] = None
                state = states.pop(i)
                with timings.phase("analyze.merge"):
                    try:
                        session.merge_state(state)
                    except InexactMerge:
                        # The task hit a cap on this file alone (event keys, issues) in a way only a
                        # sequential ingest reproduces, so do that here.
                        self.ingest_file(session, item.node, item.source, item.path, origin=items[i][3])
                        timings.count("merge_fallbacks", 1)


def _task_states(future: Future[list[Scanned]], executor: Executor, setup: ScanSetup, items: list[ScanItem],
                 timings: Timings) -> list[IngestState]:
    """A task's states; when the executor lost the task (its worker died for good), its files scanned here."""
    try:
        scanned = future.result()
    except Exception as exc:
        if not executor.lost(exc):
            raise
        timings.count("executor_fallbacks", 1)
        scanned = _scan_files(setup, items)
    states = []
    for data, spent in scanned:
        state = decode_state(data, setup.content_hash, setup.params)
        state.timings = spent
        states.append(state)
    return states


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


# -- scan tasks -------------------------------------------------------------------------------------------
# Engines by id, so that a task in this process or a forked worker finds its parent's compiled catalog (hyperscan
# databases included) without loading anything; elsewhere (a spawned worker, a Ray worker) the task loads the
# catalog once per process and keeps it in `_LOADED`.
_ENGINES: dict[str, Engine] = {}
_LOADED: dict[str, Engine] = {}
ScanItem = tuple[str, SourceKind, str, str]  # node, source, path, origin
# What a task returns per file: its ingest state as versioned JSON (engine/state_format.py: data, never pickle,
# refused by a process with another catalog), and where its time went.
Scanned = tuple[bytes, Timings]


@dataclass(frozen=True)
class ScanSetup:
    """What a scan task needs besides its files, all plain data: the catalog it must run (its hash, and the
    extra files it was loaded with), the engine's parameters and the session's context and reading limits."""

    engine_key: str
    content_hash: str
    extra_files: list[tuple[str, bytes]]
    params: Params
    context: ExecutionContext
    block_size: int
    max_line_bytes: int


def _register(engine: Engine) -> str:
    key = f"{os.getpid()}:{id(engine)}"
    _ENGINES[key] = engine
    return key


def _task_engine(setup: ScanSetup) -> Engine:
    engine = _ENGINES.get(setup.engine_key)
    if engine is not None:
        return engine
    loaded = _LOADED.get("engine")
    if loaded is None or loaded.catalog.content_hash != setup.content_hash or loaded.params != setup.params:
        catalog = load_catalog(extra_files=setup.extra_files)
        if catalog.content_hash != setup.content_hash:
            raise ExecutorError(f"a worker loaded another rule catalog ({catalog.content_hash[:12]}) than the "
                                f"process that gave it the work ({setup.content_hash[:12]}): run the same "
                                "firstfault version everywhere")
        loaded = _LOADED["engine"] = Engine(catalog, setup.params)
    return loaded


def _scan_files(setup: ScanSetup, items: list[ScanItem]) -> list[Scanned]:
    """Scan each file into a session of its own (states merge per file, in file order)."""
    engine = _task_engine(setup)
    scanned = []
    for node, source, path, origin in items:
        session = Session(setup.context, engine.compiled, setup.params, block_size=setup.block_size,
                          max_line_bytes=setup.max_line_bytes)
        engine.ingest_file(session, node, source, Path(path), origin=origin)
        state = session.export_state()
        scanned.append((encode_state(state, setup.content_hash, setup.params), state.timings))
    return scanned


__all__ = ["Engine", "auto_workers", "looks_binary"]
