"""Prometheus metrics of one service instance (its own registry, served at /metrics)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Callable

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from firstfault.engine.model import Attribution

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServiceMetrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, catalog_hash: str, live_sessions: Callable[[], int],
                 event_keys: Callable[[], int] = lambda: 0, retained_bytes: Callable[[], int] = lambda: 0) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("firstfault_http_requests_total", "HTTP requests by route and status",
                                ["method", "route", "status"], registry=r)
        self.latency = Histogram("firstfault_http_request_duration_seconds", "HTTP request latency",
                                 ["method", "route"], buckets=_LATENCY_BUCKETS, registry=r)
        live = Gauge("firstfault_sessions_live", "Sessions held in memory", registry=r)
        live.set_function(live_sessions)
        keys = Gauge("firstfault_event_keys", "Coalesced events held by the live sessions", registry=r)
        keys.set_function(event_keys)
        retained = Gauge("firstfault_session_bytes", "Estimated bytes held by the live sessions (the memory "
                         "budget's measure, FIRSTFAULT_MEMORY_BUDGET_BYTES)", registry=r)
        retained.set_function(retained_bytes)
        self.sessions_created = Counter("firstfault_sessions_created_total", "Sessions created", registry=r)
        self.sessions_removed = Counter("firstfault_sessions_removed_total",
                                        "Sessions removed, by reason (deleted, expired, evicted)", ["reason"],
                                        registry=r)
        self.observations = Counter("firstfault_observations_total", "Observations ingested, by format",
                                    ["format"], registry=r)
        self.ingest_bytes = Counter("firstfault_ingest_bytes_total", "Log bytes ingested", registry=r)
        self.truncated = Counter("firstfault_truncated_lines_total", "Lines cut to the maximum length", registry=r)
        self.attributions = Counter("firstfault_attributions_total", "Attributions computed, by outcome",
                                    ["outcome"], registry=r)
        self.attribute_seconds = Histogram("firstfault_attribute_duration_seconds", "Time to compute a result",
                                           buckets=_LATENCY_BUCKETS, registry=r)
        self.rule_firings = Counter("firstfault_rule_firings_total",
                                    "Symptoms in computed results, by the rule that produced them", ["rule"],
                                    registry=r)
        info = Gauge("firstfault_catalog_info", "The loaded rule catalog", ["content_hash"], registry=r)
        info.labels(content_hash=catalog_hash).set(1)

    def request(self, method: str, route: str, status: int, seconds: float) -> None:
        self.requests.labels(method=method, route=route, status=str(status)).inc()
        self.latency.labels(method=method, route=route).observe(seconds)

    def ingested(self, fmt: str, count: int, nbytes: int, truncated: int) -> None:
        self.observations.labels(format=fmt).inc(count)
        self.ingest_bytes.inc(nbytes)
        self.truncated.inc(truncated)

    def attributed(self, result: Attribution, seconds: float) -> None:
        self.attributions.labels(outcome=result.outcome.value).inc()
        self.attribute_seconds.observe(seconds)
        for rule, n in Tally(s.rule for s in result.symptoms).items():
            self.rule_firings.labels(rule=rule).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
