"""The engine facade: a loaded, compiled catalog that opens sessions and analyses static workloads."""

from __future__ import annotations

import gzip
import zlib
from functools import lru_cache
from pathlib import Path

from firstfault.engine.catalog import Catalog, load_catalog
from firstfault.engine.evidence import EvidenceError, evidence_files, open_evidence, read_context
from firstfault.engine.model import Attribution, ExecutionContext, SourceKind
from firstfault.engine.params import Params
from firstfault.engine.session import CompiledCatalog, Session

_BINARY_SNIFF_BYTES = 64 * 1024
_TEXT_CONTROL = {9, 10, 12, 13, 27}


def looks_binary(head: bytes) -> bool:
    """True when the head of a file is mostly not text (NUL padding alone does not make a log binary)."""
    sample = head.replace(b"\0", b"")
    if not sample:  # all NUL: the padding a crashed node leaves in its syslog, scanned as text
        return False
    control = sum(1 for b in sample if b < 32 and b not in _TEXT_CONTROL)
    return control / len(sample) > 0.10


class Engine:
    def __init__(self, catalog: Catalog | None = None, params: Params | None = None) -> None:
        self.catalog = catalog or load_catalog()
        self.compiled = self.catalog.compiled or CompiledCatalog(self.catalog)
        self.params = params or Params()

    def session(self, context: ExecutionContext, **kwargs: int) -> Session:
        return Session(context, self.compiled, self.params, **kwargs)

    def ingest_file(self, session: Session, node: str, source: SourceKind, path: Path, origin: str | None = None) -> None:
        """Scan one evidence file into a session; unreadable or binary files become coverage issues."""
        name = origin or str(path)
        try:
            with open_evidence(path) as stream:
                head = stream.peek(_BINARY_SNIFF_BYTES)[:_BINARY_SNIFF_BYTES] if hasattr(stream, "peek") else b""
                if looks_binary(head):
                    session.record_issue(f"{name}: binary content, not a log file; skipped")
                    return
                session.ingest_stream(node, source, stream, name)
        except (OSError, EOFError, zlib.error, gzip.BadGzipFile) as exc:
            session.record_issue(f"{name}: cannot be read: {exc.__class__.__name__}: {exc}")

    def analyze_path(self, directory: Path) -> Attribution:
        """Analyse one static workload directory (scenario.toml + <node>/<source>.log)."""
        context = read_context(directory)
        files, ignored = evidence_files(directory)
        session = self.session(context)
        if not files:
            session.record_issue(f"{directory}: no evidence files (<node>/applog.log, syslog.log, scheduler.log)")
        for name in ignored:
            session.record_issue(f"{directory / name}: not an evidence file name; ignored")
        for item in files:
            self.ingest_file(session, item.node, item.source, item.path,
                             origin=str(item.path.relative_to(directory)))
        return session.attribute()


@lru_cache(maxsize=1)
def default_engine() -> Engine:
    """The engine over the packaged catalog, loaded and verified once per process."""
    return Engine()


__all__ = ["Engine", "EvidenceError", "default_engine", "looks_binary"]
