"""The connector registry: which implementation each `KIND NAME` declares, and building them from the config.

To add a connector, write a class with `kind`, `label`, `OPTIONS` and the method of its kind, and register it
in one of the tables below (docs/connectors.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from firstfault.blueprint.attribution import ATTRIBUTION_OPTIONS, Attributor, make_attributor
from firstfault.blueprint.base import Collector, ContextConnector
from firstfault.blueprint.collectors.files import FilesCollector
from firstfault.blueprint.collectors.k8s import PodLogsCollector
from firstfault.blueprint.collectors.loki import LokiCollector
from firstfault.blueprint.collectors.promql import PromqlCollector
from firstfault.blueprint.config import BlueprintConfig, ConnectorSpec, fill_from_environment
from firstfault.blueprint.contexts.kueue import KueueContexts
from firstfault.blueprint.contexts.slurm import SlurmContexts
from firstfault.blueprint.contexts.static import StaticContexts, StaticEvidence
from firstfault.blueprint.outputs.sqlite import SqliteOutput
from firstfault.blueprint.outputs.stdout import StdoutOutput
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.engine import ExecutionContext
from firstfault.errors import ConfigError


class Output(Protocol):
    kind: str
    label: str

    def already_attributed(self, ctx: ExecutionContext) -> bool: ...
    def write(self, result: AttributionBlueprintResult) -> None: ...
    def close(self) -> None: ...


CONTEXTS: dict[str, Any] = {"slurm": SlurmContexts, "kueue": KueueContexts, "static": StaticContexts}
COLLECTORS: dict[tuple[str, str], Any] = {
    ("logs", "files"): FilesCollector,
    ("logs", "loki"): LokiCollector,
    ("logs", "k8s"): PodLogsCollector,
    ("metrics", "promql"): PromqlCollector,
}
OUTPUTS: dict[str, Any] = {"stdout": StdoutOutput, "sqlite": SqliteOutput}


@dataclass
class Plan:
    """The connectors of one Blueprint run, built and validated."""

    contexts: list[ContextConnector]
    collectors: list[Collector]
    outputs: list[Output]
    attributor: Attributor

    def close(self) -> None:
        for output in self.outputs:
            output.close()
        self.attributor.close()


# Options every collector takes, besides its own.
COLLECTOR_OPTIONS = ("collect_timeout",)


def _checked(spec: ConnectorSpec, cls: Any, common: tuple[str, ...] = ()) -> ConnectorSpec:
    fill_from_environment(spec, (*cls.OPTIONS, *common))
    unknown = sorted(set(spec.options) - set(cls.OPTIONS) - set(common))
    if unknown:
        raise ConfigError(f"{spec.kind} {spec.name}: unknown option(s) {', '.join(unknown)} "
                          f"(known: {', '.join(cls.OPTIONS)})")
    return spec


def _lookup(table: dict[Any, Any], key: Any, spec: ConnectorSpec) -> Any:
    if key not in table:
        names = sorted(k[1] if isinstance(k, tuple) else k for k in table if not isinstance(k, tuple) or k[0] == spec.kind)
        raise ConfigError(f"{spec.kind}: unknown connector {spec.name!r} (one of {', '.join(names)})")
    return table[key]


def build_plan(config: BlueprintConfig) -> Plan:
    contexts: list[ContextConnector] = []
    collectors: list[Collector] = []
    outputs: list[Output] = []
    for spec in config.of_kind("context"):
        cls = _lookup(CONTEXTS, spec.name, spec)
        contexts.append(cls(_checked(spec, cls)))
    if any(isinstance(c, StaticContexts) for c in contexts):
        collectors.append(StaticEvidence())
    for spec in config.of_kind("logs") + config.of_kind("metrics"):
        cls = _lookup(COLLECTORS, (spec.kind, spec.name), spec)
        _checked(spec, cls, COLLECTOR_OPTIONS)
        timeout = spec.get_duration("collect_timeout", f"{config.collect_timeout.total_seconds()}s")
        spec.options.pop("collect_timeout", None)
        collector = cls(spec, config.margin)
        collector.collect_timeout = timeout.total_seconds()
        collectors.append(collector)
    for spec in config.of_kind("output"):
        spec.name = spec.name or spec.get("db", "") or ""
        cls = _lookup(OUTPUTS, spec.name, spec)
        outputs.append(cls(_checked(spec, cls)))
    attribution = config.of_kind("attribution")
    if len(attribution) > 1:
        raise ConfigError("declare at most one attribution connector")
    if attribution:
        unknown = sorted(set(attribution[0].options) - set(ATTRIBUTION_OPTIONS))
        if unknown:
            raise ConfigError(f"attribution: unknown option(s) {', '.join(unknown)} "
                              f"(known: {', '.join(ATTRIBUTION_OPTIONS)})")
    if not contexts:
        raise ConfigError("no workloads to attribute: give --configs DIR or a --connector context ...")
    if not outputs:
        outputs.append(StdoutOutput(ConnectorSpec("output", "stdout")))
    return Plan(contexts, collectors, outputs, make_attributor(attribution[0] if attribution else None))
