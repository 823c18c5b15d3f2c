"""The one error shape of the API: `{"error_code": str, "message": str}` with a fitting 4xx status."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    error_code: str
    message: str


# Error codes used for plain HTTP errors raised by the framework (unknown path, wrong method ...).
STATUS_CODES = {400: "bad_request", 401: "unauthorized", 404: "not_found", 405: "method_not_allowed",
                408: "request_timeout", 413: "request_too_large", 415: "unsupported_media_type", 422: "invalid_request",
                429: "too_many_sessions", 503: "not_ready"}

_DESCRIPTIONS = {400: "Malformed request (not JSON, bad header)", 401: "Missing or wrong bearer token",
                 404: "Unknown session", 409: "Idempotency key reused with another body",
                 413: "Request or session over a size limit", 415: "Body is not application/json",
                 422: "Body or parameters do not match the schema",
                 429: "Session capacity reached and no session is idle enough to evict",
                 503: "Memory budget spent (FIRSTFAULT_MEMORY_BUDGET_BYTES) and no session is idle enough to evict, "
                      "or too many request bodies in progress (FIRSTFAULT_MAX_INFLIGHT_BYTES)"}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` entries declaring the ErrorBody shape for the given statuses."""
    return {status: {"model": ErrorBody, "description": _DESCRIPTIONS.get(status, "Error")} for status in statuses}
