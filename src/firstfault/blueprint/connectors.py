"""The connector registry: which implementation each `KIND NAME` declares, and building them from the config.

To add a connector, write a class with `kind`, `label`, `Options` (a frozen dataclass of its typed options,
firstfault.blueprint.options) and the method of its kind, and register it in one of the tables below
(docs/connectors.md). A class that still declares only `OPTIONS = (names...)` gets text options of those names.
The option tables of docs/blueprint.md are generated from the same models (`render_option_tables`).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from firstfault.blueprint.attribution import AttributionOptions, Attributor, make_attributor
from firstfault.blueprint.base import Collector, ContextConnector
from firstfault.blueprint.collectors.files import FilesCollector
from firstfault.blueprint.collectors.k8s import PodLogsCollector
from firstfault.blueprint.collectors.loki import LokiCollector
from firstfault.blueprint.collectors.promql import PromqlCollector
from firstfault.blueprint.config import BlueprintConfig, ConnectorSpec
from firstfault.blueprint.contexts.kueue import KueueContexts, KueueRecords
from firstfault.blueprint.contexts.slurm import SlurmContexts
from firstfault.blueprint.contexts.static import StaticContexts, StaticEvidence
from firstfault.blueprint.options import (
    CollectorOptions,
    LabelOptions,
    Options,
    env_variable,
    legacy_model,
    option_names,
    parse_options,
    render_table,
)
from firstfault.blueprint.outputs.alertmanager import AlertmanagerOutput
from firstfault.blueprint.outputs.postgres import PostgresOutput
from firstfault.blueprint.outputs.sqlite import SqliteOutput
from firstfault.blueprint.outputs.stdout import StdoutOutput
from firstfault.blueprint.outputs.webhook import WebhookOutput
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.engine import ExecutionContext
from firstfault.engine.model import NodeHistory
from firstfault.errors import ConfigError


class Output(Protocol):
    kind: str
    label: str

    def already_attributed(self, ctx: ExecutionContext) -> bool: ...
    def write(self, result: AttributionBlueprintResult) -> None: ...
    def flush(self) -> None: ...   # the end of a discovery pass: deliver what is still owed
    def close(self) -> None: ...


@runtime_checkable
class Claiming(Protocol):
    """An output several drivers share: the driver claims an attempt there before attributing it, and skips it
    when another driver has it (outputs/sqlite.py)."""

    def claim(self, ctx: ExecutionContext) -> bool: ...
    def release(self, ctx: ExecutionContext) -> None: ...


@runtime_checkable
class HistorySource(Protocol):
    """An output that remembers earlier diagnoses: it gives an attempt the earlier culprit findings on its nodes
    (node fault history, docs/blueprint.md), or None when that is turned off."""

    def node_history(self, ctx: ExecutionContext) -> NodeHistory | None: ...


CONTEXTS: dict[str, Any] = {"slurm": SlurmContexts, "kueue": KueueContexts, "static": StaticContexts}
COLLECTORS: dict[tuple[str, str], Any] = {
    ("logs", "files"): FilesCollector,
    ("logs", "loki"): LokiCollector,
    ("logs", "k8s"): PodLogsCollector,
    ("metrics", "promql"): PromqlCollector,
}
OUTPUTS: dict[str, Any] = {"stdout": StdoutOutput, "sqlite": SqliteOutput, "postgres": PostgresOutput,
                           "alertmanager": AlertmanagerOutput, "webhook": WebhookOutput}


@dataclass
class Plan:
    """The connectors of one Blueprint run, built and validated. `collect_timeouts[i]` is the longest
    `collectors[i]` may take for one workload, in seconds (its `collect_timeout` option, else the run's)."""

    contexts: list[ContextConnector]
    collectors: list[Collector]
    outputs: list[Output]
    attributor: Attributor
    collect_timeouts: list[float] = field(default_factory=list)

    def collecting(self) -> Iterator[tuple[Collector, float | None]]:
        """Every collector with its timeout (None: the run's `collect_timeout`)."""
        for i, collector in enumerate(self.collectors):
            yield collector, (self.collect_timeouts[i] if i < len(self.collect_timeouts) else None)

    def close(self) -> None:
        for output in self.outputs:
            output.close()
        self.attributor.close()


def options_model(cls: Any) -> type[Options]:
    """The typed options of a connector class (`Options`), or a text model of its legacy `OPTIONS` names."""
    model = getattr(cls, "Options", None)
    if isinstance(model, type) and issubclass(model, Options):
        return model
    base = CollectorOptions if getattr(cls, "kind", "") in ("logs", "metrics") else LabelOptions
    return legacy_model(tuple(getattr(cls, "OPTIONS", ())), base)


def _lookup(table: dict[Any, Any], key: Any, spec: ConnectorSpec) -> Any:
    if key not in table:
        names = sorted(k[1] if isinstance(k, tuple) else k for k in table if not isinstance(k, tuple) or k[0] == spec.kind)
        raise ConfigError(f"{spec.kind}: unknown connector {spec.name!r} (one of {', '.join(names)})")
    return table[key]


def build_plan(config: BlueprintConfig) -> Plan:
    contexts: list[ContextConnector] = []
    outputs: list[Output] = []
    for spec in config.of_kind("context"):
        cls = _lookup(CONTEXTS, spec.name, spec)
        parse_options(options_model(cls), spec)   # strict: the connector reads the same options
        contexts.append(cls(spec))
    collectors, timeouts = _collecting(config)
    for spec in config.of_kind("output"):
        spec.name = spec.name or spec.get("db", "") or ""
        cls = _lookup(OUTPUTS, spec.name, spec)
        parse_options(options_model(cls), spec)
        outputs.append(cls(spec))
    attribution = config.of_kind("attribution")
    if len(attribution) > 1:
        raise ConfigError("declare at most one attribution connector")
    if not contexts:
        raise ConfigError("no workloads to attribute: give --configs DIR or a --connector context ...")
    if not outputs:
        outputs.append(StdoutOutput(ConnectorSpec("output", "stdout")))
    databases = [o.path for o in outputs if isinstance(o, SqliteOutput)]
    for context in contexts:   # Slurm keeps the output paths slurmctld holds in the results database by default
        if isinstance(context, SlurmContexts) and context.database is None and databases:
            context.database = databases[0]
    return Plan(contexts, collectors, outputs, _attributor(config), timeouts)


def build_worker_plan(config: BlueprintConfig) -> Plan:
    """What a worker on another machine needs to attribute the run's workloads: its collectors and attributor
    (no context connector, no output: the driver discovers and writes)."""
    collectors, timeouts = _collecting(config)
    return Plan([], collectors, [], _attributor(config), timeouts)


def _collecting(config: BlueprintConfig) -> tuple[list[Collector], list[float]]:
    """The run's collectors and the longest each may take for one workload, in seconds."""
    collectors: list[Collector] = []
    timeouts: list[float] = []
    run_timeout = config.collect_timeout.total_seconds()
    context_classes = {CONTEXTS.get(spec.name) for spec in config.of_kind("context")}
    if StaticContexts in context_classes:
        collectors.append(StaticEvidence())
        timeouts.append(run_timeout)
    if KueueContexts in context_classes:
        collectors.append(KueueRecords())
        timeouts.append(run_timeout)
    for spec in config.of_kind("logs") + config.of_kind("metrics"):
        cls = _lookup(COLLECTORS, (spec.kind, spec.name), spec)
        options = parse_options(options_model(cls), spec)
        if not isinstance(options, CollectorOptions):   # a declaration mistake: every collector takes these
            raise TypeError(f"{cls.__name__}.Options must extend CollectorOptions")
        collectors.append(cls(spec, config.margin))
        timeout = options.collect_timeout
        timeouts.append(timeout.total_seconds() if timeout is not None else run_timeout)
    return collectors, timeouts


def _attributor(config: BlueprintConfig) -> Attributor:
    attribution = config.of_kind("attribution")
    return make_attributor(attribution[0] if attribution else None)


def with_environment(config: BlueprintConfig, environ: Mapping[str, str] | None = None) -> BlueprintConfig:
    """`config` with every collector option read from `FIRSTFAULT_<NAME>_<KEY>` here written into its spec, so
    that a worker on another machine (another environment) builds the same collectors from the config alone."""
    environ = os.environ if environ is None else environ
    connectors = []
    for spec in config.connectors:
        cls = COLLECTORS.get((spec.kind, spec.name))
        options = dict(spec.options)
        if cls is not None:
            for name in option_names(options_model(cls)):
                value = environ.get(env_variable(spec, name))
                if name not in options and value:
                    options[name] = value
        connectors.append(replace(spec, options=options))
    return replace(config, connectors=connectors)


# -- the option tables of docs/blueprint.md ---------------------------------------------------------------------
def documented_models() -> dict[str, type[Options]]:
    """`KIND NAME` -> options model, for every connector docs/blueprint.md documents."""
    models: dict[str, type[Options]] = {"attribution": AttributionOptions}
    models |= {f"context {name}": options_model(cls) for name, cls in CONTEXTS.items()}
    models |= {f"{kind} {name}": options_model(cls) for (kind, name), cls in COLLECTORS.items()}
    models |= {f"output {name}": options_model(cls) for name, cls in OUTPUTS.items()}
    return models


_TABLE = re.compile(r"(<!-- options: (?P<which>[a-z ]+) -->\n)(?P<table>.*?)(<!-- /options -->)", re.S)


def render_option_tables(text: str) -> str:
    """`text` (docs/blueprint.md) with every `<!-- options: KIND NAME -->` ... `<!-- /options -->` block
    replaced by that connector's table, rendered from its options model."""
    models = documented_models()

    def table(m: re.Match[str]) -> str:
        which = m.group("which").strip()
        if which not in models:
            raise ConfigError(f"docs: no connector {which!r} (one of {', '.join(sorted(models))})")
        return m.group(1) + render_table(models[which], which.split()[-1]) + m.group(4)

    return _TABLE.sub(table, text)


if __name__ == "__main__":   # python -m firstfault.blueprint.connectors docs/blueprint.md: regenerate the tables
    for name in sys.argv[1:]:
        doc = Path(name)
        doc.write_text(render_option_tables(doc.read_text(encoding="utf-8")), encoding="utf-8")
