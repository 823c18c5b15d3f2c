"""Grafana Loki: `GET /loki/api/v1/query_range` over the workload's window, for the workload's nodes.

    --connector logs loki url http://loki:3100 node_label hostname selector 'job="syslog"' source syslog
    --connector logs loki url http://loki:3100 tenant team-a query '{host=~"$nodes", unit="kernel"} |= "NVRM"'

The default query is `{<node_label>=~"<node1|node2|...>", <selector>}`; a custom `query` may use `$nodes` (the
nodes as an anchored regex alternation) and `$node_label`. Nodes are queried in groups of `nodes_per_query`.
Times are nanosecond epochs; the window (plus the margin) is split into `split`-long slices, and each slice is
paged forward: when a page holds `limit` entries the next starts at the last timestamp, skipping the entries
already seen at it. Requests time out after `timeout` and are retried with backoff on 429 and 5xx.
`tenant` is sent as `X-Scope-OrgID`, `token` as a bearer token.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from firstfault.blueprint.base import LokiBatch, Window
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.http import client_for
from firstfault.blueprint.options import CollectorOptions, HttpOptions, MarginOptions, option, parse_options
from firstfault.engine import ExecutionContext, SourceKind
from firstfault.errors import CollectorError, HttpError, NothingInScope

_EntryKey = tuple[tuple[tuple[str, str], ...], int, str]


def nanoseconds(t: datetime) -> int:
    return int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000


def logql_regex(nodes: list[str]) -> str:
    """An anchored alternation of node names, escaped for a double-quoted LogQL/PromQL string."""
    return "|".join(re.escape(n) for n in nodes).replace("\\", "\\\\")


def slices(start: int, end: int, step: int) -> Iterator[tuple[int, int]]:
    while start < end:
        yield start, min(start + step, end)
        start += step


@dataclass(frozen=True)
class LokiOptions(CollectorOptions, HttpOptions, MarginOptions):
    url: str | None = option(None, "Loki's base URL", required=True)
    node_label: str = option("hostname", "the stream label holding the node name")
    selector: str | None = option(None, 'extra matchers, e.g. `job="syslog"`')
    query: str | None = option(None, "a whole LogQL query instead, with `$nodes` (the node alternation) and "
                                     "`$node_label`")
    source: str = option("syslog", "which extractors see the lines", choices=[s.value for s in SourceKind])
    tenant: str | None = option(None, "sent as `X-Scope-OrgID` (multi-tenant Loki)")
    limit: int = option(5000, "entries per request (Loki's `max_entries_limit_per_query` is commonly 5000)")
    split: timedelta = option(timedelta(hours=1), "window slice per query")
    nodes_per_query: int = option(50, "nodes per query (long allocations are queried in groups)")


class LokiCollector:
    kind = "logs"
    Options = LokiOptions

    def __init__(self, spec: ConnectorSpec, margin: timedelta) -> None:
        options = parse_options(LokiOptions, spec)
        self.label = options.label or spec.name
        self.node_label = options.node_label
        selector = options.selector
        self.query = options.query or ('{$node_label=~"$nodes"' + (f", {selector}" if selector else "") + "}")
        self.source = SourceKind(options.source)
        self.limit = options.limit
        self.split = options.split
        self.nodes_per_query = options.nodes_per_query
        self.margin = options.margin if options.margin is not None else margin
        self.client = client_for(options)

    def applies(self, ctx: ExecutionContext) -> bool:
        return True

    def queries(self, ctx: ExecutionContext) -> list[str]:
        if "$nodes" not in self.query:
            return [self.query.replace("$node_label", self.node_label)]
        groups = [ctx.nodes[i:i + self.nodes_per_query] for i in range(0, len(ctx.nodes), self.nodes_per_query)]
        return [self.query.replace("$node_label", self.node_label).replace("$nodes", logql_regex(g)) for g in groups]

    def collect(self, ctx: ExecutionContext) -> Iterator[LokiBatch]:
        if not ctx.nodes:
            raise NothingInScope("the workload has no nodes to query for")
        window = Window.of(ctx, self.margin)
        start, end = nanoseconds(window.start), nanoseconds(window.end) + 1
        step = max(1, int(self.split.total_seconds() * 1e9))
        for query in self.queries(ctx):
            for lo, hi in slices(start, end, step):
                yield from self._pages(query, lo, hi)

    def _pages(self, query: str, start: int, end: int) -> Iterator[LokiBatch]:
        seen: set[_EntryKey] = set()   # entries at timestamp `start` that an earlier page delivered
        while True:
            streams = self._query(query, start, end)
            entries = [(int(ts), _labels_key(s["stream"]), line, s["stream"])
                       for s in streams for ts, line, *_ in s["values"]]
            if any(not start <= e[0] < end for e in entries):   # paging on it would never end
                raise CollectorError(f"loki: the answer holds entries outside the window asked for ({start}, {end})")
            fresh = [e for e in entries if (e[1], e[0], e[2]) not in seen]
            if fresh:
                yield LokiBatch(self.source, self.node_label, f"loki:{query}", _as_streams(fresh))
            if len(entries) < self.limit:
                return
            last = max(e[0] for e in entries)
            if last == start and not fresh:  # more than `limit` entries in one nanosecond: step past it
                start, seen = start + 1, set()
                continue
            seen = {(e[1], e[0], e[2]) for e in entries if e[0] == last} | (seen if last == start else set())
            start = last

    def _query(self, query: str, start: int, end: int) -> list[dict[str, Any]]:
        params = {"query": query, "start": str(start), "end": str(end), "limit": str(self.limit),
                  "direction": "forward"}
        try:
            doc = self.client.get_json("/loki/api/v1/query_range", params)
        except HttpError as exc:
            raise CollectorError(str(exc)) from None
        except ValueError:
            raise CollectorError("loki: the answer is not JSON") from None
        return checked_streams(doc)


def _nanoseconds(value: Any) -> bool:
    return (isinstance(value, str) and value.isascii() and value.isdigit()) or \
        (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def checked_streams(doc: Any) -> list[dict[str, Any]]:
    """The streams of a `query_range` answer in Loki's documented shape; anything else is a CollectorError."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(data, dict) \
            or data.get("resultType") != "streams" or not isinstance(data.get("result", []), list):
        raise CollectorError(f"loki: unexpected answer: {str(doc)[:300]}")
    streams = list(data.get("result", []))
    for stream in streams:
        labels = stream.get("stream") if isinstance(stream, dict) else None
        values = stream.get("values") if isinstance(stream, dict) else None
        if not isinstance(labels, dict) or not isinstance(values, list) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise CollectorError(f"loki: unexpected stream in the answer: {str(stream)[:300]}")
        for entry in values:
            if not (isinstance(entry, list) and len(entry) >= 2 and _nanoseconds(entry[0]) and isinstance(entry[1], str)):
                raise CollectorError(f"loki: unexpected entry in the answer: {str(entry)[:200]}")
    return streams


def _labels_key(labels: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _as_streams(entries: list[tuple[int, tuple[tuple[str, str], ...], str, dict[str, str]]]) -> list[dict[str, Any]]:
    """Entries regrouped per stream, each stream in time order."""
    streams: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for ts, key, line, labels in sorted(entries, key=lambda e: (e[1], e[0])):
        streams.setdefault(key, {"stream": dict(labels), "values": []})["values"].append([str(ts), line])
    return list(streams.values())
