"""Prometheus: `query_range` over the workload's window, per node, for GPU and network health.

    --connector metrics promql url http://prometheus:9090
    --connector metrics promql url http://mimir/prometheus tenant team-a node_label host \\
        query 'xid_any=max by (host, gpu) (DCGM_FI_DEV_XID_ERRORS{host=~"$nodes"})' defaults off

The default queries read dcgm-exporter's Xid, ECC, row-remap, temperature, slowdown, PCIe replay and NVLink error
series (node label `node_label`) and node_exporter's InfiniBand error counters (node label `ib_node_label`). Both
default to `auto`:
each query is tried with the labels deployments name nodes by - `Hostname` (dcgm-exporter), `node`,
`kubernetes_node`, `nodename`, `instance` (a value may carry a `:port` or a domain) - and the first that finds
series is used; when none does, node_exporter's `node_uname_info` (whose `nodename` is the host's name) maps the
`instance` scrape targets to nodes. A `query` is `NAME=PROMQL` (repeatable, added to the defaults unless
`defaults off`); `$nodes` is the nodes' regex alternation and `$node_label` / `$ib_node_label` the labels.
Each series' node label is rewritten to the allocation's node name. With `changes_only on` (the default) a
series keeps its first and last samples and every sample whose value changed, which bounds the volume of long
jobs without losing a transition.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from firstfault.blueprint.base import MetricBatch, Window, node_of
from firstfault.blueprint.collectors.loki import logql_regex
from firstfault.blueprint.config import ConnectorSpec
from firstfault.blueprint.http import client_for
from firstfault.blueprint.options import CollectorOptions, HttpOptions, MarginOptions, option, parse_options
from firstfault.engine import ExecutionContext
from firstfault.errors import CollectorError, ConfigError, HttpError, NothingInScope


@dataclass(frozen=True)
class Query:
    name: str
    expr: str
    label: str  # "$node_label" or "$ib_node_label": which option names the node label of its series


_DCGM = ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
         "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SLOWDOWN_TEMP",
         "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
         "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
         "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL")
_IB = ("node_infiniband_link_downed_total", "node_infiniband_symbol_error_total",
       "node_infiniband_link_error_recovery_total", "node_infiniband_port_errors_received_total")
DEFAULT_QUERIES = tuple(Query(m, m + '{$node_label=~"$nodes"}', "$node_label") for m in _DCGM) + tuple(
    Query(m, m + '{$ib_node_label=~"($nodes)(:[0-9]+)?"}', "$ib_node_label") for m in _IB)


def parse_query(text: str) -> Query:
    name, sep, expr = text.partition("=")
    if not sep or not name.strip().isidentifier() or not expr.strip():
        raise ConfigError(f"metrics promql: a query is NAME=PROMQL, not {text!r}")
    return Query(name.strip(), expr.strip(), "$node_label")


def checked_matrix(doc: Any) -> list[dict[str, Any]]:
    """The series of a `query_range` answer in Prometheus' documented shape (a matrix: labels and
    `[unix seconds, "value"]` pairs); anything else is a CollectorError."""
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("status") != "success" or not isinstance(data, dict) \
            or data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
        raise CollectorError(f"unexpected answer: {str(doc)[:300]}")
    for series in data["result"]:
        metric = series.get("metric", {}) if isinstance(series, dict) else None
        values = series.get("values") if isinstance(series, dict) else None
        if not isinstance(metric, dict) or not isinstance(values, list) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
            raise CollectorError(f"unexpected series in the answer: {str(series)[:300]}")
        for sample in values:
            if not (isinstance(sample, list) and len(sample) == 2 and isinstance(sample[0], int | float)
                    and not isinstance(sample[0], bool) and isinstance(sample[1], str)):
                raise CollectorError(f"unexpected sample in the answer: {str(sample)[:200]}")
    return list(data["result"])


def changes_only(values: list[list[Any]]) -> list[list[Any]]:
    """The first and last samples and every sample whose value differs from the one before."""
    return [v for i, v in enumerate(values) if i in (0, len(values) - 1) or v[1] != values[i - 1][1]]


AUTO = "auto"
# The labels that name a node in the wild: dcgm-exporter's own, Kubernetes relabelling conventions, node_exporter's
# uname, and the scrape target.
NODE_LABELS = ("Hostname", "node", "kubernetes_node", "nodename", "instance")


@dataclass(frozen=True)
class PromqlOptions(CollectorOptions, HttpOptions, MarginOptions):
    url: str | None = option(None, "Prometheus (or Mimir/Thanos/VictoriaMetrics Prometheus API) base URL",
                             required=True)
    query: tuple[str, ...] = option((), "`NAME=PROMQL`, repeatable; `$nodes`, `$node_label`, `$ib_node_label` are "
                                        "substituted")
    defaults: bool = option(True, "keep the default queries next to yours")
    node_label: str = option(AUTO, "the label naming the node in GPU series; `auto` tries " + ", ".join(NODE_LABELS)
                             + ", then `node_uname_info`")
    ib_node_label: str = option(AUTO, "the same for node_exporter's InfiniBand series")
    step: str | None = option(None, "query resolution", shown="window / 1000, at least `15s`")
    changes_only: bool = option(True, "keep a series' first and last samples and every change only")


class PromqlCollector:
    kind = "metrics"
    Options = PromqlOptions

    def __init__(self, spec: ConnectorSpec, margin: timedelta) -> None:
        options = parse_options(PromqlOptions, spec)
        self.label = options.label or spec.name
        self.labels = {"$node_label": options.node_label, "$ib_node_label": options.ib_node_label}
        custom = [parse_query(q) for q in options.query]
        self.queries = (list(DEFAULT_QUERIES) if options.defaults else []) + custom
        if not self.queries:
            raise ConfigError("metrics promql: `defaults off` needs at least one `query NAME=PROMQL`")
        self.step = options.step
        self.dedupe = options.changes_only
        self.margin = options.margin if options.margin is not None else margin
        self.client = client_for(options)
        self._targets: dict[Window, dict[str, str]] = {}   # node_uname_info's instance -> node, per window
        self._found: dict[str, str] = {}   # the label that named nodes last, per kind of query (auto)

    def applies(self, ctx: ExecutionContext) -> bool:
        return True

    def _step(self, window: Window) -> str:
        if self.step:
            return self.step
        seconds = (window.end - window.start).total_seconds()
        return f"{max(15, int(seconds // 1000) + 1)}s"   # at most ~1000 points per series

    def collect(self, ctx: ExecutionContext) -> Iterator[MetricBatch]:
        if not ctx.nodes:
            raise NothingInScope("the workload has no nodes to query for")
        window = Window.of(ctx, self.margin)
        failures: list[str] = []
        delivered = 0
        for query in self.queries:
            try:
                batch = self._range(query, ctx.nodes, window)
            except CollectorError as exc:  # one bad query must not hide the others
                failures.append(f"{query.name}: {exc}")
                continue
            if batch.result:
                delivered += 1
                yield batch
        if failures:
            raise CollectorError(f"{len(failures)} of {len(self.queries)} queries failed: {'; '.join(failures[:3])}")
        if not delivered:
            raise NothingInScope("no series for the workload's nodes in its window")

    def _range(self, query: Query, nodes: list[str], window: Window) -> MetricBatch:
        label = self.labels[query.label]
        if label != AUTO:
            return self._run(query, label, logql_regex(nodes), window, lambda v: node_of(v, nodes))
        found = self._found.get(query.label)
        for candidate in ([found] if found else []) + [c for c in NODE_LABELS if c != found]:
            # port and domain suffixes allowed: instance="gpu-p01:9100", FQDNs
            batch = self._run(query, candidate, f"({logql_regex(nodes)})([.][^:]*)?(:[0-9]+)?", window,
                              lambda v: node_of(v, nodes))
            if batch.result:
                self._found[query.label] = candidate   # tried first for the next query of this kind
                return batch
        targets = self._uname_targets(nodes, window)
        if not targets:
            return MetricBatch(node_label="instance", origin=f"promql:{query.name}", result=[])
        return self._run(query, "instance", logql_regex(sorted(targets)), window, targets.get)

    def _uname_targets(self, nodes: list[str], window: Window) -> dict[str, str]:
        """node_exporter's scrape targets (`instance`) of the nodes, from `node_uname_info`'s `nodename`."""
        if window not in self._targets:
            expr = f'node_uname_info{{nodename=~"({logql_regex(nodes)})([.].*)?"}}'
            series = self._query_range(expr, window)
            self._targets[window] = {m["instance"]: node for m in (s["metric"] for s in series)
                                     if "instance" in m and (node := node_of(m.get("nodename", ""), nodes))}
        return self._targets[window]

    def _run(self, query: Query, label: str, regex: str, window: Window,
             resolve: Callable[[str], str | None]) -> MetricBatch:
        expr = query.expr.replace("$nodes", regex)
        for placeholder in self.labels:
            expr = expr.replace(placeholder, label if self.labels[placeholder] == AUTO else self.labels[placeholder])
        return MetricBatch(node_label=label, origin=f"promql:{query.name}",
                           result=self._series(self._query_range(expr, window), query.name, label, resolve))

    def _query_range(self, expr: str, window: Window) -> list[dict[str, Any]]:
        params = {"query": expr, "start": f"{window.start.timestamp():.3f}", "end": f"{window.end.timestamp():.3f}",
                  "step": self._step(window)}
        try:
            doc = self.client.request("POST", "/api/v1/query_range", data=params).json()
        except HttpError as exc:
            raise CollectorError(str(exc)) from None
        except ValueError:
            raise CollectorError("the answer is not JSON") from None
        return checked_matrix(doc)

    def _series(self, result: list[dict[str, Any]], name: str, label: str,
                resolve: Callable[[str], str | None]) -> list[dict[str, Any]]:
        out = []
        for series in result:
            metric = dict(series.get("metric", {}))
            node = resolve(metric.get(label, ""))
            if node is None:
                continue
            metric[label] = node
            metric.setdefault("__name__", name)
            values = changes_only(series["values"]) if self.dedupe else series["values"]
            out.append({"metric": metric, "values": values})
        return out
