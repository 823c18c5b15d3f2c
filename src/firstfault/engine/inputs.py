"""The one gate for what the engine takes from outside: times within a sane window, text that is valid Unicode.

Every time the engine works with passes `dated()`: a stamp parsed from a line (engine/timestamps.py), a time a
transport gave a line or a sample, a workload's start and end (`Session`). Outside [1970, 2200) a time is
certainly wrong, and date arithmetic near datetime's own limits (year 1, year 9999) overflows; inside it, every
shift the engine makes (time zones, clock skew, burst gaps: hours at most) stays far from those limits. A time
outside the window is not used: its line is kept, undated, and the result says so (coverage issue, partial).

Every string that reaches a result passes `clean_text()`: a lone surrogate (`\\ud800`, which JSON escapes and
file-system names can carry but UTF-8 cannot encode) becomes U+FFFD. NUL and other control characters are valid
Unicode and kept as they are: JSON escapes them. `firstfault.wire` applies the same window and the same text
rule to what the service and the Blueprint send, refusing a structured time outside the window with a 4xx.
"""

from __future__ import annotations

from datetime import datetime, timezone

from firstfault.engine.model import ExecutionContext, Provenance, utc

EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2200, 1, 1, tzinfo=timezone.utc)
WINDOW = "1970-01-01 and 2200-01-01"


def dated(value: datetime) -> datetime | None:
    """`value` as an aware UTC time when it lies in [EARLIEST, LATEST), else None (a naive value is UTC).
    Never raises."""
    try:
        value = utc(value)
    except ValueError:  # an offset that moves the time past datetime's own limits
        return None
    return value if EARLIEST <= value < LATEST else None


def clean_text(text: str) -> str:
    """`text` with every lone surrogate replaced by U+FFFD (each of its UTF-8 bytes, as a decoder replaces
    invalid UTF-8); the same object when there is none."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return text


def clean_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels with `clean_text` applied to every name and value; the same object when nothing changes."""
    cleaned = {clean_text(k): clean_text(v) for k, v in labels.items()}
    return labels if cleaned == labels else cleaned


def clean_provenance(provenance: Provenance) -> Provenance:
    origin, labels = clean_text(provenance.origin), clean_labels(provenance.labels)
    if origin is provenance.origin and labels is provenance.labels:
        return provenance
    return provenance.model_copy(update={"origin": origin, "labels": labels})


def sane_context(context: ExecutionContext) -> tuple[ExecutionContext, list[str]]:
    """The context with its text cleaned and its times dated, and what had to change (coverage issues): a start
    or end outside the window is not used."""
    update: dict[str, object] = {}
    problems: list[str] = []
    for name in ("start_time", "end_time"):
        value = getattr(context, name)
        if value is not None and dated(value) is None:
            update[name] = None
            problems.append(f"workload {name} {value.isoformat()} lies outside {WINDOW}: not used")
    for name in ("workload_id", "job_id", "name", "scheduler_state", "exit_code"):
        text = getattr(context, name)
        if clean_text(text) is not text:
            update[name] = clean_text(text)
    nodes = [clean_text(n) for n in context.nodes]
    if any(a is not b for a, b in zip(nodes, context.nodes, strict=True)):
        update["nodes"] = list(dict.fromkeys(nodes))
    metadata = clean_labels(context.metadata)
    if metadata is not context.metadata:
        update["metadata"] = metadata
    return (context.model_copy(update=update) if update else context), problems
