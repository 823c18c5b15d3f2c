"""The static workload format: `scenario.toml` plus `<node>/<source>.log` files (corpus README).

The same format is read by `firstfault analyze`, `firstfault eval` and the Blueprint's static context
connector. The `[expected]` and `[provenance]` tables are ignored here: analysis never sees the answer.
"""

from __future__ import annotations

import gzip
import os
import tomllib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO, cast

from pydantic import ValidationError

from firstfault.engine.model import SCHEDULERS, ExecutionContext, Scheduler, SourceKind
from firstfault.errors import EvidenceError

SCENARIO_FILE = "scenario.toml"
_SOURCE_FILES = {f"{s.value}{ext}": s for s in SourceKind for ext in (".log", ".log.gz")}


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


def read_context(directory: Path) -> ExecutionContext:
    """The ExecutionContext of a static workload directory."""
    path = directory / SCENARIO_FILE
    if not directory.is_dir():
        raise EvidenceError(f"{directory}: not a directory")
    if not path.is_file():
        raise EvidenceError(f"{directory}: no {SCENARIO_FILE} (a static workload needs one; see docs/quickstart.md)")
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
    try:
        return ExecutionContext(
            workload_id=str(doc.get("id") or workload.get("job_id") or directory.name),
            attempt=int(workload.get("attempt", 0)),
            scheduler=cast(Scheduler, scheduler),
            job_id=str(workload.get("job_id", "")),
            name=str(workload.get("name", doc.get("title", ""))),
            nodes=[str(n) for n in workload.get("nodes", [])],
            ranks_per_node=workload.get("ranks_per_node"),
            start_time=_parse_time(workload.get("start_time"), "start_time", path),
            end_time=_parse_time(workload.get("end_time"), "end_time", path),
            scheduler_state=str(workload.get("scheduler_state", "")),
            exit_code=str(workload.get("exit_code", "")),
            metadata={str(k): str(v) for k, v in workload.get("metadata", {}).items()},
        )
    except (ValidationError, ValueError, TypeError) as exc:
        raise EvidenceError(f"{path}: invalid [workload] table: {exc}") from None


def evidence_files(directory: Path) -> tuple[list[EvidenceFile], list[str]]:
    """The evidence files of a workload directory, and the names it holds that are not evidence."""
    files: list[EvidenceFile] = []
    ignored: list[str] = []
    # os.scandir and plain name order (what Path ordering gives for siblings): a 1,250-node workload has
    # thousands of entries, and Path objects sort slowly.
    with os.scandir(directory) as entries:
        node_names = sorted(e.name for e in entries if e.is_dir())
    for node in node_names:
        node_dir = directory / node
        with os.scandir(node_dir) as entries:
            listing = sorted((e.name, e.is_file()) for e in entries)
        for name, is_file in listing:
            source = _SOURCE_FILES.get(name)
            if source is None or not is_file:
                ignored.append(f"{node}/{name}")
                continue
            files.append(EvidenceFile(node=node, source=source, path=node_dir / name))
    return files, ignored


def open_evidence(path: Path) -> BinaryIO:
    """Open an evidence file for binary streaming (transparently gunzipping `.gz`); the caller closes it."""
    if path.name.endswith(".gz"):
        return cast(BinaryIO, gzip.open(path, "rb"))
    return open(path, "rb")  # noqa: SIM115 - the caller closes it
