"""Structured JSON logs, with the W3C trace context of the current request on every record."""

from __future__ import annotations

import json
import logging
import re
import secrets
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:-.*)?$")
# LogRecord attributes that are not user-supplied `extra` fields.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


@dataclass(frozen=True)
class TraceContext:
    trace_id: str
    span_id: str  # this server's span for the request
    parent_id: str | None
    flags: str

    def traceparent(self) -> str:
        return f"00-{self.trace_id}-{self.span_id}-{self.flags}"


current_trace: ContextVar[TraceContext | None] = ContextVar("firstfault_trace", default=None)


def trace_from_header(header: str | None) -> TraceContext:
    """Continue the caller's trace (W3C `traceparent`) with a new span, or start a new trace."""
    match = _TRACEPARENT.match(header.strip().lower()) if header else None
    if match:
        version, trace_id, parent_id, flags = match.groups()
        if version != "ff" and trace_id != "0" * 32 and parent_id != "0" * 16:
            return TraceContext(trace_id, secrets.token_hex(8), parent_id, flags)
    return TraceContext(secrets.token_hex(16), secrets.token_hex(8), None, "01")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, trace ids and any `extra` fields."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        trace = current_trace.get()
        if trace is not None:
            doc["trace_id"] = trace.trace_id
            doc["span_id"] = trace.span_id
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_") and key not in ("color_message",):
                doc[key] = value
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str, ensure_ascii=False)


def log_config(level: str) -> dict[str, Any]:
    """A logging.config dictConfig for the service and uvicorn: JSON lines on stderr."""
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    level = level.upper()
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"stderr": handler},
        "loggers": {
            "firstfault": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn": {"handlers": ["stderr"], "level": level, "propagate": False},
            "uvicorn.error": {"level": level},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
        },
    }
