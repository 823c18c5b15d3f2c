"""HTTP plumbing shared by the v2 and v1 routers: lenient JSON decoding, bearer auth, threadpool calls."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from typing import Any, TypeVar

import anyio.to_thread
from fastapi import Depends, Request, Response
from fastapi.params import Depends as DependsParam
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from firstfault.service.errors import ServiceError

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


def decode_json(body: bytes) -> Any:
    """Parse a request body: invalid UTF-8 is replaced (U+FFFD), NaN/Infinity and absurd nesting refused."""
    text = body.decode("utf-8", "replace")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise json.JSONDecodeError(f"{exc.msg} (line {exc.lineno}, column {exc.colno})", "", 0) from None
    except (ValueError, RecursionError) as exc:
        raise json.JSONDecodeError(str(exc) or exc.__class__.__name__, "", 0) from None
    return _scrub(doc) if _SURROGATE_ESCAPE.search(text) else doc


class JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) > _THREAD_DECODE_BYTES:
                self._json = await anyio.to_thread.run_sync(decode_json, body)
            else:
                self._json = decode_json(body)
        return self._json


class JsonRoute(APIRoute):
    """An APIRoute whose request parses JSON leniently (see `decode_json`)."""

    def get_route_handler(self) -> Callable[[Request], Any]:
        handler = super().get_route_handler()

        async def route_handler(request: Request) -> Response:
            return await handler(JsonRequest(request.scope, request.receive))

        return route_handler


async def in_thread(func: Callable[..., T], *args: Any) -> T:
    """Run blocking engine work off the event loop."""
    return await anyio.to_thread.run_sync(func, *args)


async def body_fingerprint(request: Request) -> str:
    return hashlib.sha256(await request.body()).hexdigest()


def write_auth(token: str | None) -> list[DependsParam]:
    """Dependencies for write endpoints: a bearer token check when a token is configured, else none."""
    if not token:
        return []
    expected = token.encode()
    bearer = HTTPBearer(auto_error=False, description="FIRSTFAULT_API_TOKEN, required on write endpoints")

    # A default rather than Annotated: `bearer` is local, and postponed annotations resolve module names only.
    def require_token(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if credentials is None or not hmac.compare_digest(credentials.credentials.encode(), expected):
            raise ServiceError(401, "unauthorized", "this endpoint needs `Authorization: Bearer <token>`",
                               headers={"WWW-Authenticate": "Bearer"})

    return [Depends(require_token)]
