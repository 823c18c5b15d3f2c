"""Node fault history: which prior findings count for one attempt (docs/architecture.md, "Node fault history").

A finding counts when it is about an allocated node (by exact or short name; it is then named as the allocation
names it), comes from another attempt, and began before this attempt and within `window_days` of it. "This
attempt" starts at its start time, else its end time, else its earliest dated evidence: without any of these,
nothing can be placed before it and nothing counts. Counted findings are in a fixed order (time, node, workload,
attempt, symptom), so the result does not depend on the order they were given in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from firstfault.engine.inputs import WINDOW, clean_provenance, clean_text, dated
from firstfault.engine.model import ExecutionContext, HistoryCoverage, NodeHistory, PriorFinding
from firstfault.errors import EvidenceError


def count_history(context: ExecutionContext, first_evidence: datetime | None,
                  canonical_node: Callable[[str | None], str | None]) -> tuple[list[PriorFinding], HistoryCoverage | None]:
    """The findings of `context.history` that count, and what the coverage says of them (None: no history)."""
    history = context.history
    if history is None:
        return [], None
    reference = context.start_time or context.end_time or first_evidence
    since = None if reference is None else reference - timedelta(days=history.window_days)
    counted: list[PriorFinding] = []
    for finding in history.findings:
        node = canonical_node(clean_text(finding.node))
        if node is None or since is None or reference is None or not since <= finding.time < reference:
            continue
        if (finding.workload_id, finding.attempt) == (context.workload_id, context.attempt):
            continue
        counted.append(_cleaned(finding, node))
    counted.sort(key=lambda f: (f.time, f.node, f.workload_id, f.attempt, f.symptom, f.rule, f.gpus))
    coverage = HistoryCoverage(findings=len(history.findings), counted=len(counted), window_days=history.window_days,
                               since=since, earliest=counted[0].time if counted else None)
    return counted, coverage


def _cleaned(finding: PriorFinding, node: str) -> PriorFinding:
    """The finding on its allocated node's name, with its text valid Unicode (engine/inputs.py)."""
    update: dict[str, object] = {}
    if node != finding.node:
        update["node"] = node
    for name in ("symptom", "rule", "workload_id"):
        text = getattr(finding, name)
        if clean_text(text) is not text:
            update[name] = clean_text(text)
    gpus = [clean_text(g) for g in finding.gpus]
    if any(a is not b for a, b in zip(gpus, finding.gpus, strict=True)):
        update["gpus"] = gpus
    evidence = finding.evidence
    if evidence is not None:
        text, provenance = clean_text(evidence.text), clean_provenance(evidence.provenance)
        node_name = None if evidence.node is None else clean_text(evidence.node)
        if text is not evidence.text or provenance is not evidence.provenance or node_name is not evidence.node:
            update["evidence"] = evidence.model_copy(update={"text": text, "provenance": provenance,
                                                             "node": node_name})
    return finding.model_copy(update=update) if update else finding


# -- the history file (`firstfault analyze --history FILE`, docs/quickstart.md) ------------------------------------
def read_history(path: Path, window_days: int | None = None) -> NodeHistory:
    """A history file: one JSON document - a NodeHistory object (`{"window_days": 30, "findings": [...]}`), a list
    of findings or one finding - or JSON Lines, a finding per line. `window_days` overrides the file's. Every
    problem is an EvidenceError naming the file, the line or finding, and the field."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise EvidenceError(f"{path}: the history file cannot be read: {exc}") from None
    try:
        document: Any = json.loads(text)
    except json.JSONDecodeError:
        document = _json_lines(path, text)
    if isinstance(document, dict) and "findings" not in document:
        document = [document]
    if isinstance(document, list):
        document = {"findings": document}
    if not isinstance(document, dict):
        raise EvidenceError(f"{path}: a history file holds an object with `findings`, a list of findings or a "
                            "finding per line, not a JSON " + type(document).__name__)
    if window_days is not None:
        document = {**document, "window_days": window_days}
    history = _validated(path, document)
    for i, finding in enumerate(history.findings):
        if dated(finding.time) is None:
            raise EvidenceError(f"{path}: findings[{i}].time {finding.time.isoformat()} lies outside {WINDOW}")
    return history


def _json_lines(path: Path, text: str) -> list[Any]:
    findings = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            findings.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise EvidenceError(f"{path}: line {number} is not JSON ({exc.msg}, column {exc.colno}): neither one "
                                "JSON document nor JSON Lines") from None
    return findings


def _validated(path: Path, document: dict[str, Any]) -> NodeHistory:
    from pydantic import ValidationError

    try:
        return NodeHistory.model_validate(document)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'the document'}: {e['msg']}"
                             for e in exc.errors()[:3])
        more = f" (and {exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
        raise EvidenceError(f"{path}: not a valid node history: {problems}{more}") from None
