"""The dashboard: a read-only, server-rendered web UI over the Blueprint's SQLite results.

Thin routes over the typed read-only query layer (db.py); pages are Jinja2 templates shipped in the package
(autoescaped: log lines, workload and node names are always text), charts and the timeline are server-side SVG,
and the stylesheet is a static file of the package, so the dashboard needs no network. Only GET routes exist.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import markupsafe
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from firstfault import __version__
from firstfault.blueprint.result import MAX_ROW_ID, AttributionBlueprintResult
from firstfault.dashboard import filters, views
from firstfault.dashboard.db import NOT_ATTRIBUTED, RepeatPolicy, ResultsDB, node_href, since_for, workload_href
from firstfault.dashboard.filters import BadRequest
from firstfault.engine.catalog import Catalog, load_catalog
from firstfault.errors import CatalogError

log = logging.getLogger("firstfault.dashboard")

# No inline script or style anywhere: a string that escaped the templates still could not run.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                               "base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
}


MAX_ROWS = 500                  # symptoms and trace entries listed on a workload page (all are in the JSON)
MAX_INLINE_JSON = 512 * 1024    # larger results are only downloaded, not shown inline


class NotFound(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.PackageLoader("firstfault.dashboard", "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True,
                             lstrip_blocks=True)
    env.filters.update(
        time=views.fmt_time, clock=views.fmt_clock, duration=views.fmt_duration, outcome_class=views.outcome_class,
        node_href=node_href, workload_href=workload_href, urlquote=lambda s: quote(str(s), safe=""),
        thousands=lambda n: f"{int(n or 0):,}",
        wbr=lambda text: markupsafe.Markup("_<wbr>").join(markupsafe.escape(str(text)).split("_")),
        sd_color=lambda k: views.color(k or NOT_ATTRIBUTED, views.SUB_DOMAIN_COLORS),
        outcome_color=lambda k: views.color(k or NOT_ATTRIBUTED, views.OUTCOME_COLORS))
    env.globals.update(version=__version__, OUTCOMES=filters.OUTCOMES, SUB_DOMAINS=filters.SUB_DOMAINS,
                       TERMINAL_STATES=filters.TERMINAL_STATES, PER_PAGE=filters.PER_PAGE, RANGES=filters.RANGES,
                       NOT_ATTRIBUTED=NOT_ATTRIBUTED)
    return env


def create_app(db_path: str | Path, catalog: Catalog | None = None, repeat: RepeatPolicy | None = None, *,
               allowed_hosts: Sequence[str]) -> FastAPI:
    """The dashboard over one results database, a SQLite file or a PostgreSQL DSN (checked now: a bad one fails
    here, not at the first page);
    `repeat` says when a node is a repeat offender (default: RepeatPolicy()). It answers only requests whose Host
    header names one of `allowed_hosts` (400 otherwise), so a page of another site cannot reach it through DNS
    rebinding."""
    results = ResultsDB(db_path, repeat)
    if catalog is None:
        try:
            catalog = load_catalog()
        except CatalogError as exc:  # the Rules page then lists only what the results name
            log.warning("rule catalog not loaded: %s", exc)
    env = _environment()
    app = FastAPI(title="firstfault dashboard", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.results = results
    app.mount("/static", StaticFiles(packages=[("firstfault.dashboard", "static")]), name="static")
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(allowed_hosts), www_redirect=False)

    def page(request: Request, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        info = results.info()
        html = env.get_template(template).render(request_path=request.url.path, db=info, repeat=results.repeat,
                                                 **context)
        return HTMLResponse(html, status_code=status_code)

    @app.middleware("http")
    async def headers(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        response = await call_next(request)
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
        if not request.url.path.startswith("/static/"):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    # -- errors: pages for people, never a traceback -------------------------------------------------------
    def error_page(request: Request, status: int, title: str, message: str) -> HTMLResponse:
        try:
            return page(request, "error.html", status, title=title, message=message, status=status)
        except Exception:  # the database itself failing: a plain page still says so
            log.exception("error page failed")
            return HTMLResponse(f"<h1>{status} {markupsafe.escape(title)}</h1>", status_code=status)

    @app.exception_handler(BadRequest)
    async def bad_request(request: Request, exc: BadRequest) -> HTMLResponse:
        return error_page(request, 400, "Bad request", str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> HTMLResponse:
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:])}: {e.get('msg')}" for e in exc.errors())
        return error_page(request, 400, "Bad request", problems or "malformed request")

    @app.exception_handler(NotFound)
    async def not_found(request: Request, exc: NotFound) -> HTMLResponse:
        return error_page(request, 404, "Not found", exc.message)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> HTMLResponse:
        if exc.status_code == 404:
            return error_page(request, 404, "Not found", f"There is no page at {request.url.path}.")
        if exc.status_code == 405:
            response = error_page(request, 405, "Method not allowed", "The dashboard is read-only: pages are only "
                                                                      "read with GET.")
            response.headers["Allow"] = "GET, HEAD"
            return response
        return error_page(request, exc.status_code, "Error", str(exc.detail))

    @app.exception_handler(Exception)
    async def crashed(request: Request, exc: Exception) -> HTMLResponse:
        log.exception("dashboard error on %s", request.url.path)
        return error_page(request, 500, "Internal error", f"{exc.__class__.__name__}: the page could not be built "
                                                          "(details are in the dashboard's log).")

    # -- pages ---------------------------------------------------------------------------------------------
    @app.get("/healthz", include_in_schema=False)
    def healthz() -> PlainTextResponse:
        results.version()
        return PlainTextResponse("ok")

    @app.get("/", response_class=HTMLResponse)
    def overview(request: Request) -> HTMLResponse:
        params = request.query_params
        range_name = filters.range_name(params)
        since = since_for(range_name)
        data = results.overview(since)
        range_from = range_name if range_name != "all" else None
        charts = {
            "outcome": views.bar_chart(data.buckets_outcome, data.bucket_seconds, views.OUTCOME_COLORS,
                                       filters.OUTCOMES, "/workloads", "outcome"),
            "sub_domain": views.bar_chart(data.buckets_sub_domain, data.bucket_seconds, views.SUB_DOMAIN_COLORS,
                                          filters.SUB_DOMAINS, "/workloads", "sub_domain"),
        }
        refresh = filters.integer(params, "refresh", 0, 0, 3600)
        if refresh and refresh < 10:
            raise BadRequest("`refresh` is a number of seconds, at least 10 (or 0: off)")
        return page(request, "overview.html", data=data, charts=charts, range_name=range_name, refresh=refresh,
                    range_from=range_from, bucket=views.bucket_name(data.bucket_seconds))

    @app.get("/workloads", response_class=HTMLResponse)
    def workloads(request: Request) -> HTMLResponse:
        raw = dict(request.query_params)
        f = filters.workload_filters(raw)
        listing = results.workloads(f)

        def link(**changes: Any) -> str:
            return "/workloads?" + filters.query_string(f, raw, **changes)

        def sort_link(column: str) -> str:
            order = "asc" if f.sort == column and f.order == "desc" else "desc"
            return link(sort=column, order=order, page=1)

        return page(request, "workloads.html", f=f, raw=raw, listing=listing, link=link, sort_link=sort_link,
                    active=bool(f.terminal_state or f.outcome or f.sub_domain or f.node or f.since or f.until or f.q
                                or f.failed))

    @app.get("/workload", response_class=HTMLResponse)
    def workload(request: Request) -> HTMLResponse:
        params = request.query_params
        workload_id = filters.text(params, "id")
        if workload_id is None:
            raise BadRequest("`id` (the workload id) is required")
        attempt = filters.optional_integer(params, "attempt")
        run_id = filters.optional_integer(params, "run", 1)
        detail = results.attempt(workload_id, attempt, run_id)
        if detail is None:
            what = f"workload {workload_id!r}" + (f" attempt {attempt}" if attempt is not None else "")
            raise NotFound(f"No attributed {what}" + (f" with run {run_id}" if run_id is not None else "") + ".")
        parsed: AttributionBlueprintResult | None = None
        parse_error = None
        try:
            parsed = AttributionBlueprintResult.model_validate(detail.result)
        except ValidationError as exc:
            parse_error = f"the stored result does not match this firstfault's result model ({exc.error_count()} " \
                          "problem(s)); only the raw JSON is shown."
        d = parsed.diagnosis if parsed else None
        inline_json = len(detail.result_json) <= MAX_INLINE_JSON
        return page(request, "workload.html", detail=detail, row=detail.row, result=parsed, d=d,
                    parse_error=parse_error, headline=views.headline(d) if d else None,
                    gaps=views.evidence_gaps(parsed) if parsed else [],
                    timeline=views.timeline(d) if d else None,
                    symptom_rows=views.symptom_order(d)[:MAX_ROWS] if d else [], max_rows=MAX_ROWS,
                    pretty_json=(json.dumps(detail.result, indent=2, ensure_ascii=False) if detail.result
                                 else detail.result_json) if inline_json else None)

    @app.get("/runs/{run_id}.json")
    def run_json(run_id: int) -> Response:
        found = results.run_json(run_id) if -MAX_ROW_ID <= run_id <= MAX_ROW_ID else None
        if found is None:
            raise NotFound(f"No attribution run {run_id}.")
        body, workload_id, attempt = found
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in workload_id)[:80]
        return Response(body, media_type="application/json", headers={
            "Content-Disposition": f'attachment; filename="{safe}-attempt{attempt}-run{run_id}.json"'})

    @app.get("/nodes", response_class=HTMLResponse)
    def nodes(request: Request) -> HTMLResponse:
        q = filters.text(request.query_params, "q")
        return page(request, "nodes.html", ranking=results.node_ranking(q), q=q)

    @app.get("/nodes/{name:path}", response_class=HTMLResponse)
    def node(request: Request, name: str) -> HTMLResponse:
        if not name or len(name) > filters.MAX_TEXT:
            raise BadRequest("a node name is 1 to 255 characters")
        page_no = filters.integer(request.query_params, "page", 1, 1)
        found = results.node(name, page_no)
        if found is None:
            raise NotFound(f"No stored workload ran on node {name!r}.")
        stats, listing = found
        return page(request, "node.html", stats=stats, listing=listing)

    @app.get("/rules", response_class=HTMLResponse)
    def rules(request: Request) -> HTMLResponse:
        params = request.query_params
        kind = filters._choice(params, "kind", ("extractor", "filter", "collector", "refiner", "engine"))
        q = filters.text(params, "q")
        counts, counted, total = results.rule_counts()
        rows = _rule_rows(catalog, counts)
        roots = results.root_symptoms()
        root_rows = [(name, count, _symptom_def(catalog, name)) for name, count in roots]
        shown = [r for r in rows if (not kind or r["kind"] == kind)
                 and (not q or q.lower() in (r["name"] + " " + r["emits"] + " " + r["doc"]).lower())]
        return page(request, "rules.html", rows=shown, all_rows=len(rows), counted=counted, total=total,
                    kind=kind, q=q, roots=root_rows, catalog=catalog)

    return app


def _symptom_def(catalog: Catalog | None, name: str) -> Any:
    if catalog is None:
        return None
    try:
        return catalog.symptom(name)
    except CatalogError:
        return None


def _rule_rows(catalog: Catalog | None, counts: dict[str, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    known: set[str] = set()
    if catalog is not None:
        for e in catalog.extractors:
            rows.append({"name": e.name, "kind": "extractor", "phase": "EXTRACTION",
                         "emits": e.symptom or f"Context.{e.fact}", "origin": e.origin, "doc": e.doc,
                         "fired": counts.get(e.name, 0)})
            known.add(e.name)
        for r in catalog.python_rules:
            rows.append({"name": r.name, "kind": r.kind, "phase": r.phase.name, "emits": "", "origin": r.module,
                         "doc": r.doc, "fired": counts.get(r.name, 0)})
            known.add(r.name)
    for name, count in counts.items():
        if name not in known:
            rows.append({"name": name, "kind": "engine", "phase": "", "emits": "", "origin": "engine step (not a catalog rule)",
                         "doc": "", "fired": count})
    rows.sort(key=lambda r: (-r["fired"], r["name"]))
    return rows
