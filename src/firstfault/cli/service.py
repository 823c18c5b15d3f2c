"""`firstfault serve`: run the Attribution Service under uvicorn."""

from __future__ import annotations

import argparse
import logging.config
import math
import signal
import sys
from types import FrameType

from firstfault.cli import error
from firstfault.errors import CatalogError, FirstfaultError
from firstfault.service.logs import log_config
from firstfault.service.middleware import SpanStarter, no_spans
from firstfault.service.protocol import header_deadline_protocol
from firstfault.service.settings import Settings
from firstfault.tools.verify import verified_engine


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("serve", help="run the Attribution Service (HTTP API over the engine)",
                       description="Run the Attribution Service. Every option also reads FIRSTFAULT_<OPTION> "
                                   "(e.g. FIRSTFAULT_PORT, FIRSTFAULT_API_TOKEN); see docs/service.md.")
    p.add_argument("--host", help="address to bind (default 127.0.0.1: loopback only)")
    p.add_argument("--port", type=int, help="TCP port (default 8000)")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="default info")
    p.add_argument("--store", metavar="URL",
                   help="where sessions live: memory (this process, the default) or a Redis URL such as "
                        "redis://127.0.0.1:6379/0, shared by every replica behind one load balancer (needs the "
                        "`redis` extra; docs/operations.md)")
    p.add_argument("--insecure-no-auth", action="store_true", default=None,
                   help="serve on a non-loopback --host without FIRSTFAULT_API_TOKEN (refused otherwise): anyone "
                        "who can reach the address can write")
    p.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from firstfault.service.app import create_app

    try:
        settings = Settings.from_env(host=args.host, port=args.port, log_level=args.log_level,
                                     insecure_no_auth=args.insecure_no_auth, store=args.store)
    except ValueError as exc:
        return error(str(exc))
    logging.config.dictConfig(log_config(settings.log_level))
    try:
        engine = verified_engine()
    except CatalogError as exc:
        return error(f"the rule catalog does not load, not serving: {exc}")
    try:
        spans = _spans(settings)
    except RuntimeError as exc:
        return error(str(exc))
    try:
        app = create_app(settings, engine, spans)
    except FirstfaultError as exc:  # the session store cannot be used (Redis unreachable, the extra missing)
        return error(f"not serving: {exc}")
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=log_config(settings.log_level),
                            access_log=False, timeout_graceful_shutdown=math.ceil(settings.shutdown_timeout_s),
                            server_header=False, http=header_deadline_protocol(settings.header_timeout_s, settings.http_parser))
    server = uvicorn.Server(config)
    # uvicorn drains in-flight requests on SIGTERM, then re-raises the signal; exit 0 for that clean stop.
    signal.signal(signal.SIGTERM, _stopped)
    server.run()
    return 0 if server.started else 1


def _stopped(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def _spans(settings: Settings) -> SpanStarter:
    if not settings.otel_exporter:
        return no_spans
    from firstfault.service.tracing import otel_spans

    return otel_spans(settings.otel_exporter)
