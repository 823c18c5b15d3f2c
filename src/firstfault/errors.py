"""Every error firstfault raises on purpose, under one root.

Catching `FirstfaultError` catches them all; its message is written for people (the CLI prints it and exits 2).
Each part raises the subclasses named after what went wrong, so callers can tell a bad catalog from bad
evidence, a bad option, or a data source that cannot be reached.
"""

from __future__ import annotations

from typing import Any


class FirstfaultError(Exception):
    """The root: an error whose message says what is wrong and, where it can, what to change."""


# --- the engine and its catalog -----------------------------------------------------------------------------


class EvidenceError(FirstfaultError):
    """The evidence cannot be analysed at all (as opposed to a partial result)."""


class CatalogError(FirstfaultError):
    """The catalog cannot be loaded; the message names the file or rule (and case) at fault."""


class PatternCompileError(CatalogError):
    """hyperscan refused one pattern of a database; `index` is its position in that database."""

    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


class EreError(FirstfaultError, ValueError):
    """The pattern uses a construct that has no faithful POSIX ERE form."""


class ExecutorError(FirstfaultError):
    """The chosen executor cannot run the work: Ray is not installed, its cluster cannot be reached, or one of its
    workers runs another rule catalog."""


# --- settings and options people type ------------------------------------------------------------------------


class ConfigError(FirstfaultError, ValueError):
    """A configuration, option or query value is invalid; the message says what to change."""


# --- the Blueprint's connectors ------------------------------------------------------------------------------


class CollectorError(FirstfaultError):
    """A collector cannot deliver (source unreachable, bad answer); the message is the report's reason."""


class NothingInScope(CollectorError):
    """The collector worked but found nothing for this workload: reported as `empty`, not as an error."""


class CollectorTimeout(CollectorError):
    """A collector ran past its `collect_timeout` and was abandoned."""


class HttpError(FirstfaultError):
    """A request failed for good: a non-retryable status, or retries exhausted."""

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class OutputError(FirstfaultError):
    """An output could not deliver what it was given (Alertmanager or a webhook unreachable, a refusal); the
    message says what was kept for a later attempt."""


class SlurmError(FirstfaultError):
    """sacct or scontrol failed or answered something unreadable."""


class KubectlError(FirstfaultError):
    """kubectl failed; `stderr` is what it said."""

    def __init__(self, message: str, stderr: str = "") -> None:
        super().__init__(message)
        self.stderr = stderr


class AttributionError(FirstfaultError):
    """The backend could not attribute the workload (service unreachable, rejected input ...)."""


class SchemaError(FirstfaultError):
    """The database was written by a newer firstfault (or is not a Blueprint database)."""


# --- the dashboard and the service ---------------------------------------------------------------------------


class DatabaseError(FirstfaultError):
    """The file cannot be used as a results database; the message says why, for people."""


class ServiceError(FirstfaultError):
    """A refusal an API client can act on: an HTTP status, a stable error code and a message."""

    def __init__(self, status: int, error_code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code
        self.message = message
        self.headers = headers or {}


class SessionNotFound(ServiceError):
    def __init__(self, session_id: str, reason: str | None = None) -> None:
        why = f" (it was {reason})" if reason else ""
        super().__init__(404, "session_not_found", f"no session {session_id!r}{why}")
