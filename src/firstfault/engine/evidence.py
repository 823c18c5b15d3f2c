"""The static workload format: `scenario.toml` plus `<node>/<source>.log` files (corpus README).

The same format is read by `firstfault analyze`, `firstfault eval` and the Blueprint's static context
connector. The `[expected]` and `[provenance]` tables are ignored here: analysis never sees the answer.

Only regular files inside the workload directory are read: a symlink that leads out of it (a link to
`/proc/kmsg` would block a read forever) is not followed, and a FIFO, a device or a socket is never opened for
reading; each is named, with the reason, among the entries not read. A `.gz` file is decompressed up to
`DEFAULT_MAX_DECOMPRESSED_BYTES` (configurable: `Params.max_decompressed_bytes`); the stream then ends and
says so (`exceeded`), so a small file that inflates without end costs bounded time.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import tomllib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

from firstfault.engine.model import SCHEDULERS, ExecutionContext, Scheduler, SourceKind
from firstfault.errors import EvidenceError

SCENARIO_FILE = "scenario.toml"
_SOURCE_FILES = {f"{s.value}{ext}": s for s in SourceKind for ext in (".log", ".log.gz")}
DEFAULT_MAX_DECOMPRESSED_BYTES = 8 * 1024**3
_NOT_AN_EVIDENCE_NAME = "not an evidence file name; ignored"
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"))


@dataclass(frozen=True)
class EvidenceFile:
    node: str
    source: SourceKind
    path: Path


def _parse_time(value: Any, field: str, where: Path) -> datetime | None:
    if value in (None, ""):
        return None
    if isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise EvidenceError(f"{where}: [workload].{field} is not an ISO 8601 time: {value!r}") from None


def _outside(root: Path, path: Path) -> str | None:
    """Why `path` is not followed: it leads out of the workload directory `root` (None: it does not)."""
    real, base = os.path.realpath(path), os.path.realpath(root)
    if os.path.commonpath([base, real]) != base:
        return f"a symlink out of the workload directory (to {real}); not followed"
    return None


def unreadable(root: Path, path: Path) -> str | None:
    """Why `path` is not read as evidence of the workload directory `root` (None: it is a regular file inside
    it, or a symlink to one): a symlink out of `root`, not a regular file, or not there at all."""
    if (reason := _outside(root, path)) is not None:
        return reason
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except OSError as exc:
        return f"cannot be read: {exc.__class__.__name__}: {exc}"
    for test, kind in _KINDS:
        if test(mode):
            return f"{kind}, not a regular file; not read"
    return None


def read_context(directory: Path) -> ExecutionContext:
    """The ExecutionContext of a static workload directory."""
    path = directory / SCENARIO_FILE
    if not directory.is_dir():
        raise EvidenceError(f"{directory}: not a directory")
    if not os.path.lexists(path):
        raise EvidenceError(f"{directory}: no {SCENARIO_FILE} (a static workload needs one; see docs/quickstart.md)")
    if (reason := unreadable(directory, path)) is not None:
        raise EvidenceError(f"{path}: {reason}")
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise EvidenceError(f"{path}: cannot be read as TOML: {exc}") from None
    workload = doc.get("workload")
    if not isinstance(workload, dict):
        raise EvidenceError(f"{path}: missing [workload] table")
    scheduler = workload.get("scheduler", "none") or "none"
    if scheduler not in SCHEDULERS:
        raise EvidenceError(f"{path}: [workload] scheduler must be one of {', '.join(SCHEDULERS)}, not {scheduler!r}")
    _check_types(workload, path)
    try:
        return ExecutionContext(
            workload_id=str(doc.get("id") or workload.get("job_id") or directory.name),
            attempt=workload.get("attempt", 0),
            scheduler=cast(Scheduler, scheduler),
            job_id=str(workload.get("job_id", "")),
            name=str(workload.get("name", doc.get("title", ""))),
            nodes=list(workload.get("nodes", [])),
            ranks_per_node=workload.get("ranks_per_node"),
            start_time=_parse_time(workload.get("start_time"), "start_time", path),
            end_time=_parse_time(workload.get("end_time"), "end_time", path),
            scheduler_state=str(workload.get("scheduler_state", "")),
            exit_code=str(workload.get("exit_code", "")),
            metadata={str(k): str(v) for k, v in workload.get("metadata", {}).items()},
        )
    except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
        raise EvidenceError(f"{path}: invalid [workload] table: {exc}") from None


MAX_ATTEMPT = 2**63 - 1   # what a results database (SQLite INTEGER) and every scheduler's counter can hold


def _check_types(workload: dict[str, Any], path: Path) -> None:
    """The [workload] fields whose type matters, checked as written: a string where a list belongs is not split
    into characters, a number is not guessed from text."""
    nodes = workload.get("nodes", [])
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
        raise EvidenceError(f"{path}: [workload] nodes must be a list of node names, e.g. nodes = [\"n1\", \"n2\"]")
    attempt = workload.get("attempt", 0)
    if isinstance(attempt, bool) or not isinstance(attempt, int) or not 0 <= attempt <= MAX_ATTEMPT:
        raise EvidenceError(f"{path}: [workload] attempt must be a whole number from 0 to {MAX_ATTEMPT}")
    ranks = workload.get("ranks_per_node")
    if ranks is not None and (isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1):
        raise EvidenceError(f"{path}: [workload] ranks_per_node must be a whole number of at least 1")
    metadata = workload.get("metadata", {})
    if not isinstance(metadata, dict):
        raise EvidenceError(f"{path}: [workload] metadata must be a table")
    for key in ("job_id", "name", "scheduler_state", "exit_code"):
        if key in workload and not isinstance(workload[key], str | int):
            raise EvidenceError(f"{path}: [workload] {key} must be text")


def evidence_files(directory: Path) -> tuple[list[EvidenceFile], list[tuple[str, str]]]:
    """The evidence files of a workload directory, and the entries it holds that are not read, as
    (`<node>[/<name>]`, why)."""
    files: list[EvidenceFile] = []
    ignored: list[tuple[str, str]] = []
    # os.scandir and plain name order (what Path ordering gives for siblings): a 1,250-node workload has
    # thousands of entries, and Path objects sort slowly.
    with os.scandir(directory) as entries:
        node_names = sorted(e.name for e in entries if e.is_dir())
    for node in node_names:
        node_dir = directory / node
        if os.path.islink(node_dir) and (reason := _outside(directory, node_dir)) is not None:
            ignored.append((node, reason))
            continue
        with os.scandir(node_dir) as entries:
            listing = sorted(e.name for e in entries)
        for name in listing:
            source = _SOURCE_FILES.get(name)
            if source is None:
                ignored.append((f"{node}/{name}", _NOT_AN_EVIDENCE_NAME))
                continue
            if (reason := unreadable(directory, node_dir / name)) is not None:
                ignored.append((f"{node}/{name}", reason))
                continue
            files.append(EvidenceFile(node=node, source=source, path=node_dir / name))
    return files, ignored


class _CappedGunzip(io.RawIOBase):
    """The decompressed bytes of a gzip file, ending after `limit` of them; `exceeded` says there were more."""

    def __init__(self, file: BinaryIO, limit: int) -> None:
        self._file = file
        self._inner = gzip.GzipFile(fileobj=file, mode="rb")
        self._left = limit
        self.exceeded = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self._left <= 0:
            self.exceeded = self.exceeded or bool(self._inner.read(1))
            return 0
        with memoryview(buffer) as view:
            n = self._inner.readinto(view[:self._left])
        self._left -= n
        return n

    def close(self) -> None:
        try:
            self._inner.close()
        finally:
            self._file.close()
            super().close()


class DecompressedEvidence(io.BufferedReader):
    """A `.gz` evidence file, decompressed up to a cap: past it the stream ends, and `exceeded` is True."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self._capped = _CappedGunzip(_open_regular(path), max_bytes)
        super().__init__(self._capped)

    @property
    def exceeded(self) -> bool:
        return self._capped.exceeded


def _open_regular(path: Path) -> BinaryIO:
    """Open `path` for reading, refusing anything but a regular file (without blocking on a FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise OSError(f"{path}: not a regular file")
        os.set_blocking(fd, True)
        return open(fd, "rb")  # noqa: SIM115 - the caller closes it
    except BaseException:
        os.close(fd)
        raise


def open_evidence(path: Path, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES) -> BinaryIO:
    """Open an evidence file for binary streaming (transparently gunzipping `.gz`, up to
    `max_decompressed_bytes`: see `DecompressedEvidence`); the caller closes it. Only a regular file is opened
    (OSError otherwise)."""
    if path.name.endswith(".gz"):
        return cast(BinaryIO, DecompressedEvidence(path, max_decompressed_bytes))
    return _open_regular(path)
