"""The FastAPI application: routers, error rendering, middleware, and the session expiry task."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from firstfault import __version__
from firstfault.engine.engine import Engine
from firstfault.errors import ServiceError
from firstfault.service import v1, v2
from firstfault.service.core import AttributionService
from firstfault.service.errors import STATUS_CODES
from firstfault.service.http import describe_errors, write_auth
from firstfault.service.middleware import ServiceMiddleware, SpanStarter, no_spans
from firstfault.service.settings import Settings, is_loopback
from firstfault.tools.verify import default_engine

log = logging.getLogger("firstfault.service")

_JSON_TYPES = ("application/json", "+json")


def create_app(settings: Settings, engine: Engine | None = None, spans: SpanStarter = no_spans) -> FastAPI:
    """The service app. `engine` defaults to the packaged catalog (raises CatalogError when it is broken)."""
    service = AttributionService(engine or default_engine(), settings)
    # No /docs nor /redoc: FastAPI's pages load Swagger UI and ReDoc from a CDN, which an air-gapped cluster
    # cannot reach and no page of ours should; /openapi.json stays for tools (docs/service.md).
    app = FastAPI(title="firstfault Attribution Service", version=__version__, lifespan=_lifespan(service),
                  docs_url=None, redoc_url=None,
                  description="Say why a distributed GPU workload failed: the fault that began it and the node "
                              "it began on. See docs/service.md.")
    app.state.service = service
    auth = write_auth(settings.api_token)
    routers = [v2.router(service, auth), v1.router(service, auth)]
    for api in routers:
        app.include_router(api)

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> Response:
        return Response(service.metrics.render(), media_type=service.metrics.content_type)

    app.add_exception_handler(ServiceError, _service_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.state.routes = [route for api in [*routers, app.router] for route in api.routes if isinstance(route, APIRoute)]
    app.add_exception_handler(Exception, _internal_error)
    app.add_middleware(ServiceMiddleware, metrics=service.metrics, max_body_bytes=settings.max_request_bytes,
                       allowed_hosts=settings.trusted_hosts(), max_inflight_bytes=settings.max_inflight_bytes,
                       body_timeout_s=settings.body_timeout_s, spans=spans)
    return app


def _lifespan(service: AttributionService) -> Any:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        sweeper = asyncio.create_task(_expire_sessions(service))
        _log_auth(service.settings)
        log.info("ready", extra={"catalog_hash": service.catalog_hash, "host": service.settings.host,
                                 "port": service.settings.port, "allowed_hosts": service.settings.trusted_hosts()})
        try:
            yield
        finally:
            sweeper.cancel()
            log.info("stopped", extra={"sessions_live": len(service.store)})
            service.store.close()

    return lifespan


def _log_auth(settings: Settings) -> None:
    """Say, at startup, whether write endpoints need the token; loudly when they do not."""
    if settings.api_token:
        log.info("auth ON: write endpoints need `Authorization: Bearer <FIRSTFAULT_API_TOKEN>`", extra={"auth": True})
    elif is_loopback(settings.host):
        log.warning("auth OFF: no FIRSTFAULT_API_TOKEN; anyone on this host can write (bound to loopback only)",
                    extra={"auth": False})
    else:
        log.warning(f"auth OFF on {settings.host} (--insecure-no-auth): anyone who can reach this address can "
                    "create sessions and send evidence", extra={"auth": False})


async def _expire_sessions(service: AttributionService) -> None:
    interval = min(60.0, max(0.2, service.settings.session_ttl_s / 4))
    while True:
        await asyncio.sleep(interval)
        try:  # in a thread: with Redis the sweep is a round trip
            expired = await anyio.to_thread.run_sync(service.store.expire)
        except ServiceError as exc:  # Redis unreachable: sweep again next time
            log.warning("sessions could not be swept", extra={"error": exc.message})
            continue
        if expired:
            log.info("sessions expired", extra={"expired": expired})


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error_code": code, "message": message}, status_code=status, headers=headers)


async def _service_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ServiceError)
    return error_response(exc.status, exc.error_code, exc.message, exc.headers)


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if errors and errors[0].get("type") == "json_invalid":
        detail = errors[0].get("ctx", {}).get("error", "")
        return error_response(400, "invalid_json", f"the body is not valid JSON: {detail}")
    content_type = request.headers.get("content-type", "")
    if request.method in ("POST", "PUT", "PATCH") and not any(t in content_type for t in _JSON_TYPES):
        for error in errors:
            if error.get("loc", ("",))[0] == "body":
                return error_response(415, "unsupported_media_type",
                                      "send the body as JSON with `Content-Type: application/json`")
    return error_response(422, "invalid_request", describe_errors(errors))


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = STATUS_CODES.get(exc.status_code, "http_error")
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(_allowed_methods(request))
    return error_response(exc.status_code, code, str(exc.detail), headers)


def _allowed_methods(request: Request) -> list[str]:
    """Every method of every route on this path (Starlette names only the first route's). The routes are those
    create_app() listed: FastAPI keeps an included router's routes out of `app.routes`."""
    methods: set[str] = set()
    for route in request.app.state.routes:
        if route.matches(request.scope)[0] != Match.NONE:
            methods |= route.methods or set()
    return sorted(methods)


async def _internal_error(request: Request, exc: Exception) -> Response:
    log.error("unhandled error", exc_info=exc)
    return error_response(500, "internal_error", "internal error; the server log has the details")
