"""Catalog verification: compile every pattern and run every inline case (before an engine serves, and in\n`rules test`)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

from firstfault.engine.catalog import (
    Catalog,
    Extractor,
    ExtractorCase,
    catalog_data,
    catalog_from_data,
    catalog_sources,
    load_catalog,
    parse_catalog,
)
from firstfault.engine.engine import Engine
from firstfault.engine.model import ExecutionContext, MetricSample, Observation, Provenance, SourceKind
from firstfault.engine.params import Params
from firstfault.engine.rules_api import PythonRule, RuleCase
from firstfault.engine.timing import Timings
from firstfault.errors import CatalogError, EreError, PatternCompileError

_CASE_START = datetime(2025, 1, 1, 0, 0, tzinfo=timezone.utc)


@dataclass(frozen=True)
class CaseFailure:
    rule: str
    case: str
    message: str

    def __str__(self) -> str:
        return f"rule {self.rule}, {self.case}: {self.message}"


def _compile(catalog: Catalog) -> Any:
    from firstfault.engine.compiled import CompiledCatalog
    from firstfault.engine.scanner import SourceScanner

    return _naming_the_culprit(catalog, lambda: CompiledCatalog.for_catalog(catalog),
                               lambda pattern: SourceScanner([pattern]))


def _compile_exactly(catalog: Catalog) -> None:
    from firstfault.engine.scanner import exact_database

    _naming_the_culprit(catalog, lambda: exact_database(catalog.pattern_list()),
                        lambda pattern: exact_database([pattern]))


def _naming_the_culprit(catalog: Catalog, compile_all: Callable[[], Any], compile_one: Callable[[str], Any]) -> Any:
    """`compile_all()`; when hyperscan refuses, find the pattern it refused by compiling them one at a time,
    so that the message names the rule."""
    try:
        return compile_all()
    except PatternCompileError as exc:
        for extractor in catalog.extractors:
            try:
                compile_one(extractor.match_re)
            except PatternCompileError as single:
                raise CatalogError(f"{extractor.origin}: extractor {extractor.name}: match_re does not compile "
                                   f"with hyperscan: {single}") from None
        raise CatalogError(f"hyperscan could not compile the catalog: {exc}") from None


def _extractor_case(compiled: Any, extractor: Extractor, case: ExtractorCase, label: str) -> CaseFailure | None:
    source = case.source or extractor.sources[0]
    if source not in extractor.sources:
        return CaseFailure(extractor.name, label, f"case source {source.value} is not a source of the rule")
    index = compiled.pattern_id(source, extractor)
    data = case.line.encode("utf-8")
    scanner = compiled.scanners[source]
    hits = scanner.scan(data)
    scanned = bool(hits) and index in hits[0][2]
    from firstfault.engine.captures import match_groups

    m = match_groups(extractor, case.line)  # the capture step of ingest (Python re or RE2 by line length)
    if case.expect == "none":
        # A scanner that only looks for a necessary part of the pattern (scanner.scan_expression) may flag a
        # line that re then rejects; an exact one must agree with re.
        if m is not None or (scanned and scanner.exact[index]):
            return CaseFailure(extractor.name, label, f"expected no match, but the line matched: {case.line!r}")
        return None
    if case.expect != extractor.emit_type:
        return CaseFailure(extractor.name, label, f"expects {case.expect!r} but the rule emits {extractor.emit_type!r}")
    if not scanned or m is None:
        engine = "hyperscan" if not scanned else "re"
        return CaseFailure(extractor.name, label, f"expected a match ({engine} found none): {case.line!r}")
    if case.symptom is not None:
        got = extractor.render_symptom(m)
        if got != case.symptom:
            return CaseFailure(extractor.name, label, f"symptom {got!r}, expected {case.symptom!r}")
    for key, want in case.attributes.items():
        got_value = m.get(key, extractor.attributes.get(key))
        if str(got_value) != want:
            return CaseFailure(extractor.name, label, f"attribute {key}={got_value!r}, expected {want!r}")
    return None


def _case_context(case: RuleCase) -> ExecutionContext:
    nodes = sorted({key.split("/")[0] for key in case.evidence} | set(case.metrics))
    fields: dict[str, Any] = {
        "workload_id": f"case-{case.title or 'rule'}", "scheduler": "slurm", "job_id": "1", "nodes": nodes,
        "start_time": _CASE_START, "end_time": _CASE_START + timedelta(hours=2), "scheduler_state": "FAILED",
        "exit_code": "1:0",
    }
    fields.update(case.context)
    return ExecutionContext(**fields)


def run_rule_case(compiled: Any, case: RuleCase) -> Any:
    """Run a Python rule's inline case through the whole pipeline; returns (attribution, workspace trace)."""
    from firstfault.engine.params import Params
    from firstfault.engine.session import Session

    session = Session(_case_context(case), compiled, Params())
    for key, lines in sorted(case.evidence.items()):
        node, _, source = key.partition("/")
        session.ingest_stream(node, SourceKind(source), io.BytesIO("\n".join(lines).encode()), f"{key}.log")
    session.ingest(
        Observation(source=SourceKind.NODE_METRICS, node=node, observed_at=datetime.fromisoformat(when),
                    metric=MetricSample(name=name, labels=labels, value=value), provenance=Provenance(origin=name))
        for node, samples in sorted(case.metrics.items()) for name, labels, value, when in samples)
    return session.attribute()


def _python_case(compiled: Any, rule: PythonRule, case: RuleCase, label: str) -> CaseFailure | None:
    result = run_rule_case(compiled, case)
    expect = case.expect
    fired = any(t.rule == rule.name for t in result.trace)
    checks: list[tuple[bool, str]] = []
    if expect.fired is not None:
        checks.append((fired == expect.fired, f"rule {'did not fire' if expect.fired else 'fired'}"))
    if expect.sub_domain is not None:
        checks.append((result.sub_domain.value == expect.sub_domain,
                       f"sub_domain {result.sub_domain.value}, expected {expect.sub_domain}"))
    if expect.culprits is not None:
        got = sorted(c.node for c in result.culprit_nodes)
        checks.append((got == sorted(expect.culprits), f"culprits {got}, expected {sorted(expect.culprits)}"))
    if expect.root_symptom is not None:
        got_root = result.root_cause.symptom if result.root_cause else None
        checks.append((got_root is not None and got_root.startswith(expect.root_symptom),
                       f"root symptom {got_root!r}, expected {expect.root_symptom!r}"))
    if expect.terminal_state is not None:
        checks.append((result.terminal_state.value == expect.terminal_state,
                       f"terminal_state {result.terminal_state.value}, expected {expect.terminal_state}"))
    if expect.confidence is not None:
        checks.append((result.confidence == expect.confidence,
                       f"confidence {result.confidence}, expected {expect.confidence}"))
    for prefix in expect.demoted:
        ok = any(s.symptom.startswith(prefix) and s.status == "interesting" for s in result.symptoms)
        checks.append((ok, f"no demoted symptom {prefix!r}"))
    for prefix in expect.active:
        ok = any(s.symptom.startswith(prefix) and s.status == "bad" for s in result.symptoms)
        checks.append((ok, f"no active symptom {prefix!r}"))
    for prefix in expect.absent:
        found = sorted({s.symptom for s in result.symptoms if s.symptom.startswith(prefix)})
        checks.append((not found, f"unexpected symptom {', '.join(found)}"))
    for ok, message in checks:
        if not ok:
            return CaseFailure(rule.name, label, message)
    return None


def check_catalog(catalog: Catalog, compiled: Any = None, *, strict: bool = False) -> list[CaseFailure]:
    """Run every inline case; return all failures (empty = the catalog is sound). `strict` (`rules test`) also
    compiles every pattern exactly, as written: the engine scans with prefilter databases, which accept some
    constructs that exact hyperscan (and RE2) refuse."""
    compiled = compiled or _compile(catalog)
    if strict:
        _compile_exactly(catalog)
    failures: list[CaseFailure] = _without_ere_form(catalog) if strict else []
    for extractor in catalog.extractors:
        for i, case in enumerate(extractor.cases, start=1):
            failure = _extractor_case(compiled, extractor, case, f"case {i} ({case.expect})")
            if failure:
                failures.append(failure)
    referenced = {e.symptom for e in catalog.extractors if e.symptom and "{" not in e.symptom}
    for name in sorted(referenced):
        try:
            catalog.symptom(name)
        except CatalogError as exc:
            failures.append(CaseFailure("catalog", "symptoms", str(exc)))
    for rule in catalog.python_rules:
        for i, rule_case in enumerate(rule.cases, start=1):
            label = f"case {i}" + (f" ({rule_case.title})" if rule_case.title else "")
            try:
                failure = _python_case(compiled, rule, rule_case, label)
            except CatalogError as exc:
                failure = CaseFailure(rule.name, label, str(exc))
            except Exception as exc:  # noqa: BLE001 - a rule that crashes on its case (with the other rules'
                # extractors, e.g. a new `xid` extractor whose symptom is not XID-<number>) fails the catalog
                failure = CaseFailure(rule.name, label, f"raised {exc.__class__.__name__}: {exc}")
            if failure:
                failures.append(failure)
    return failures


def _without_ere_form(catalog: Catalog) -> list[CaseFailure]:
    """The extractors `rules patterns --ere` cannot export (grep's baseline and users' own greps use that form)."""
    from firstfault.tools.ere import to_ere

    failures = []
    for extractor in catalog.extractors:
        try:
            to_ere(extractor.match_re)
        except EreError as exc:
            failures.append(CaseFailure(extractor.name, "POSIX ERE form", str(exc)))
    return failures


def verify_catalog(catalog: Catalog) -> Any:
    """Check the catalog; raise CatalogError naming the failing rules, else return the compiled catalog."""
    compiled = _compile(catalog)
    failures = check_catalog(catalog, compiled)
    if failures:
        shown = "\n  ".join(str(f) for f in failures[:20])
        more = f"\n  ... and {len(failures) - 20} more" if len(failures) > 20 else ""
        raise CatalogError(f"the rule catalog failed {len(failures)} inline case(s):\n  {shown}{more}")
    return compiled


def load_verified_catalog(extra_files: list[tuple[str, bytes]] | None = None) -> Catalog:
    """The packaged catalog (plus `extra_files`), compiled and with every inline case passed."""
    catalog = load_catalog(extra_files=extra_files)
    verify_catalog(catalog)
    return catalog


def verified_engine(catalog: Catalog | None = None, params: Params | None = None, *,
                    cache_dir: Path | None = None) -> Engine:
    """An engine whose catalog passed every inline case (CatalogError naming the failures otherwise).

    With a `cache_dir`, a catalog is verified once per content and engine code: then a snapshot of it is written
    there, named by a hash of the catalog's content hash and of the engine's and this module's source. An engine
    over the packaged catalog loads that snapshot as data (no TOML parsed, no pattern compiled by Python `re`, no
    case run); one given a `catalog` skips only the verification."""
    timings = Timings()
    with timings.phase("catalog.load"):
        if catalog is None:
            sources = catalog_sources()
            snapshot = _snapshot_path(sources.content_hash, cache_dir)
            verified, data = _read_snapshot(snapshot)
            loaded = catalog_from_data(data, sources) if data is not None else None
            catalog = loaded or parse_catalog(sources)
        else:
            snapshot = _snapshot_path(catalog.content_hash, cache_dir)
            verified, _ = _read_snapshot(snapshot)
    engine = Engine(catalog, params, cache_dir=cache_dir)
    engine.startup.merge(timings)
    with engine.startup.phase("catalog.verify"):
        if not verified:
            verify_catalog(engine.catalog)
            _write_snapshot(snapshot, engine.catalog)
    return engine


_SNAPSHOT_FORMAT = 1


def _snapshot_path(content_hash: str, cache_dir: Path | None) -> Path | None:
    if cache_dir is None:
        return None
    digest = hashlib.sha256(f"{_SNAPSHOT_FORMAT}:{content_hash}".encode())
    here = Path(__file__).resolve()
    for source in [here, *sorted(here.parents[1].joinpath("engine").glob("*.py"))]:   # the checks and the engine
        digest.update(source.read_bytes())
    return cache_dir / f"verified-{digest.hexdigest()[:32]}.json"


def _read_snapshot(path: Path | None) -> tuple[bool, dict[str, Any] | None]:
    """(verified, the catalog's data): a snapshot that is there says the catalog was verified; its data may be
    None (a catalog that JSON cannot hold is parsed each time)."""
    if path is None:
        return False, None
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False, None
    return True, document.get("catalog") if isinstance(document, dict) else None


def _write_snapshot(path: Path | None, catalog: Catalog) -> None:
    """Record a verification; a cache that cannot be written only means verifying again next time."""
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"catalog": catalog_data(catalog)}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        pass


@lru_cache(maxsize=1)
def default_engine() -> Engine:
    """The engine over the packaged catalog, loaded and verified once per process."""
    return verified_engine()
