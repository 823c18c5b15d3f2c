"""HTTP plumbing shared by the v2 and v1 routers: lenient JSON decoding, bearer auth, threadpool calls."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
import pydantic_core
from fastapi import Depends, Request, Response
from fastapi.params import Depends as DependsParam
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import TypeAdapter, ValidationError

from firstfault.errors import ServiceError
from firstfault.service.middleware import BODY_SCOPE_KEY

T = TypeVar("T")

_THREAD_DECODE_BYTES = 1024 * 1024
# A \uD800-\uDFFF escape: json.loads turns an unpaired one into a lone surrogate, which is not valid UTF-8.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _scrub(value: Any) -> Any:
    """Replace lone surrogates in every string (keys too) with U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    return value


def clean_json(body: bytes) -> tuple[Any, bytes]:
    """Parse a request body leniently: invalid UTF-8 and lone surrogates become U+FFFD; NaN, Infinity and
    absurd nesting are refused (JSONDecodeError). Returns the document and equivalent clean JSON bytes.

    A body with nothing to clean is parsed by pydantic's JSON parser (twice as fast as `json` on log text, the
    same document), which refuses invalid UTF-8 and lone surrogates as well as bad JSON: what it refuses goes to
    `json.loads`, whose leniency and error messages the service has always had (it also reads nesting deeper than
    the fast parser's limit of 200)."""
    try:
        return pydantic_core.from_json(body, allow_inf_nan=False), body
    except ValueError:
        pass
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise json.JSONDecodeError(f"{exc.msg} (line {exc.lineno}, column {exc.colno})", "", 0) from None
    except (ValueError, RecursionError) as exc:
        raise json.JSONDecodeError(str(exc) or exc.__class__.__name__, "", 0) from None
    if _SURROGATE_ESCAPE.search(text):
        doc = _scrub(doc)
        return doc, json.dumps(doc, ensure_ascii=False).encode("utf-8")
    return doc, text.encode("utf-8") if "\ufffd" in text else body


def decode_json(body: bytes) -> Any:
    return clean_json(body)[0]


class JsonRequest(Request):
    """A request whose JSON is parsed by `clean_json`; `clean_body()` gives the cleaned bytes. Its body is the one
    the service's middleware read, when it did."""

    async def body(self) -> bytes:
        held = self.scope.get(BODY_SCOPE_KEY)
        return held if isinstance(held, bytes) else await super().body()

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) > _THREAD_DECODE_BYTES:
                self._json, self._clean = await anyio.to_thread.run_sync(clean_json, body)
            else:
                self._json, self._clean = clean_json(body)
        return self._json

    async def clean_body(self) -> bytes:
        await self.json()
        return self._clean


class JsonRoute(APIRoute):
    """An APIRoute whose request parses JSON leniently (see `decode_json`)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return route_handler


async def in_thread(func: Callable[..., T], *args: Any, limiter: anyio.CapacityLimiter | None = None) -> T:
    """Run blocking engine work off the event loop (in at most `limiter`'s threads when given)."""
    return await anyio.to_thread.run_sync(func, *args, limiter=limiter)


def _canonical_digest(doc: Any) -> str:
    canonical = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


async def body_fingerprint(request: Request) -> str:
    """What an Idempotency-Key is bound to: the parsed JSON document (keys sorted, no whitespace), so a retry
    that re-serialises the same batch differently is still a retry."""
    assert isinstance(request, JsonRequest)
    doc = await request.json()
    if len(await request.body()) > _THREAD_DECODE_BYTES:
        return await anyio.to_thread.run_sync(_canonical_digest, doc)
    return _canonical_digest(doc)


def describe_errors(errors: list[Any]) -> str:
    """A one-line summary of pydantic errors: `location: message; ...`."""
    parts = [f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg', 'invalid')}" for e in errors[:5]]
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


def strict_validate(adapter: TypeAdapter[T], data: bytes, where: str = "body") -> T:
    """Validate JSON with JSON-Schema semantics (no "5" for 5, no number for a time, no bool for a number)."""
    try:
        return adapter.validate_json(data, strict=True)
    except ValidationError as exc:
        raise _invalid(exc, (where,)) from None


def strict_document(adapter: TypeAdapter[T], doc: Any, where: tuple[str, ...]) -> T:
    """`strict_validate` of a parsed JSON document, for a type made of JSON's own types only (strings, numbers,
    booleans, null, lists of them, objects): there strict validation of the document is that of the JSON text.
    Error locations start with `where`."""
    try:
        return adapter.validate_python(doc, strict=True)
    except ValidationError as exc:
        raise _invalid(exc, where) from None


def _invalid(exc: ValidationError, where: tuple[str, ...]) -> ServiceError:
    errors = [{**e, "loc": (*where, *e["loc"])} for e in exc.errors()]
    return ServiceError(422, "invalid_request", describe_errors(errors))


async def strict_body(request: Request, adapter: TypeAdapter[T]) -> T:
    """The request body validated strictly. FastAPI's own (lax) validation has run first and documents the
    schema; this second pass refuses the coercions JSON Schema does not allow."""
    assert isinstance(request, JsonRequest)
    data = await request.clean_body()
    if len(data) > _THREAD_DECODE_BYTES:
        return await anyio.to_thread.run_sync(strict_validate, adapter, data)
    return strict_validate(adapter, data)


def write_auth(token: str | None) -> list[DependsParam]:
    """Dependencies for write endpoints: a bearer token check when a token is configured, else none."""
    if not token:
        return []
    expected = token.encode()
    bearer = HTTPBearer(auto_error=False, description="FIRSTFAULT_API_TOKEN, required on write endpoints")

    # A default rather than Annotated: `bearer` is local, and postponed annotations resolve module names only.
    def require_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:  # noqa: B008
        if credentials is None or not hmac.compare_digest(credentials.credentials.encode(), expected):
            raise ServiceError(401, "unauthorized", "this endpoint needs `Authorization: Bearer <token>`",
                               headers={"WWW-Authenticate": "Bearer"})

    return [Depends(require_token)]
