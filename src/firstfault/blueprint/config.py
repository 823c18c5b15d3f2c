"""Blueprint configuration: `--connector` options, the TOML config file and `FIRSTFAULT_*` environment variables.

A connector is declared as `KIND [NAME] [key value]...` on the command line (the NAME is present when the
number of words after KIND is odd), or as a table in the config file:

    --connector logs loki url http://loki:3100 tenant team-a     [[logs]]  type = "loki"  url = "..."
    --connector output db sqlite path results.db                 [[output]] db = "sqlite"  path = "..."
    --connector attribution service_url http://127.0.0.1:8000    [attribution] service_url = "..."

A key given twice collects a list. An option missing from both is read from `FIRSTFAULT_<NAME>_<KEY>`.
Each connector reads its options through its typed model (firstfault.blueprint.options), which checks them.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from firstfault.errors import ConfigError
from firstfault.executor import EXECUTORS
from firstfault.timeinput import parse_duration

T = TypeVar("T")

KINDS = ("context", "logs", "metrics", "output", "attribution")
OptionValue = str | list[str]
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(f"not a boolean: {text!r} (use on/off, true/false)")


@dataclass
class ConnectorSpec:
    """One declared connector: its kind, its name (the implementation) and its options as given (text, or a
    list of texts for a key given more than once). Connectors read them through `parse_options`."""

    kind: str
    name: str
    options: dict[str, OptionValue] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The name used in connector reports (the `label` option, else the connector name)."""
        value = self.options.get("label")
        return value if isinstance(value, str) and value else self.name

    def get(self, key: str, default: str | None = None) -> str | None:
        """The raw value of `key` (the last one when given several times)."""
        value = self.options.get(key)
        if isinstance(value, list):
            return value[-1] if value else default
        return default if value is None else value

    def get_all(self, key: str) -> list[str]:
        """Every raw value of `key`, each taken whole."""
        value = self.options.get(key)
        if value is None:
            return []
        return list(value) if isinstance(value, list) else [value]


@dataclass
class BlueprintConfig:
    """Everything one Blueprint run needs, merged from the config file, the command line and the environment."""

    connectors: list[ConnectorSpec] = field(default_factory=list)
    margin: timedelta = timedelta(minutes=10)
    workers: int = 1                 # workloads attributed at once; 0: as many as the executor runs at once
    executor: str = "local"          # where they are attributed: "local" (threads) or "ray" (firstfault.executor)
    force: bool = False
    watch: bool = False
    interval: timedelta = timedelta(seconds=60)
    # The longest one collector may take for one workload; past it the collector is abandoned and reported as
    # an error (what it delivered before is kept). A collector's `collect_timeout` option overrides it.
    collect_timeout: timedelta = timedelta(minutes=10)

    def of_kind(self, kind: str) -> list[ConnectorSpec]:
        return [c for c in self.connectors if c.kind == kind]


def env_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", text).upper()


def spec_from_words(words: Sequence[str]) -> ConnectorSpec:
    """`KIND [NAME] [key value]...` as given to `--connector`."""
    if not words:
        raise ConfigError("--connector needs at least a KIND")
    kind, rest = words[0], list(words[1:])
    if kind not in KINDS:
        raise ConfigError(f"--connector: unknown kind {kind!r} (one of {', '.join(KINDS)})")
    name = rest.pop(0) if len(rest) % 2 == 1 else ""
    options: dict[str, OptionValue] = {}
    for key, value in zip(rest[::2], rest[1::2], strict=True):
        _add_option(options, key, value)
    return ConnectorSpec(kind=kind, name=name, options=options)


def _add_option(options: dict[str, OptionValue], key: str, value: str) -> None:
    previous = options.get(key)
    if previous is None:
        options[key] = value
    elif isinstance(previous, list):
        previous.append(value)
    else:
        options[key] = [previous, value]


def _spec_from_table(kind: str, table: Mapping[str, Any]) -> ConnectorSpec:
    options: dict[str, OptionValue] = {}
    name = ""
    for key, value in table.items():
        if key == "type":
            name = str(value)
        elif isinstance(value, list):
            options[key] = [str(v) for v in value]
        elif isinstance(value, bool):
            options[key] = "on" if value else "off"
        else:
            options[key] = str(value)
    return ConnectorSpec(kind=kind, name=name, options=options)


def load_toml(path: Path) -> tuple[BlueprintConfig, list[str]]:
    """The config file: connector tables per kind, plus `configs`, `margin`, `workers`, `executor`, `watch`,
    `interval`, `collect_timeout`."""
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read as TOML: {exc}") from None
    config = BlueprintConfig()
    configs = [str(p) for p in _as_list(doc.pop("configs", []))]
    for kind in KINDS:
        for table in _as_list(doc.pop(kind, [])):
            if not isinstance(table, dict):
                raise ConfigError(f"{path}: [{kind}] entries must be tables")
            config.connectors.append(_spec_from_table(kind, table))
    if "margin" in doc:
        config.margin = parse_duration(doc.pop("margin"))
    if "interval" in doc:
        config.interval = parse_duration(doc.pop("interval"))
    if "collect_timeout" in doc:
        config.collect_timeout = parse_duration(doc.pop("collect_timeout"))
    config.workers = _typed(path, "workers", doc.pop("workers", config.workers), int)
    if config.workers < 0:
        raise ConfigError(f"{path}: `workers` must be 0 (auto) or more, not {config.workers}")
    config.executor = _typed(path, "executor", doc.pop("executor", config.executor), str)
    if config.executor not in EXECUTORS:
        raise ConfigError(f"{path}: `executor` must be one of {', '.join(EXECUTORS)}, not {config.executor!r}")
    config.watch = _typed(path, "watch", doc.pop("watch", config.watch), bool)
    config.force = _typed(path, "force", doc.pop("force", config.force), bool)
    if doc:
        raise ConfigError(f"{path}: unknown settings {', '.join(sorted(doc))}")
    return config, configs


def _typed(path: Path, key: str, value: Any, kind: type[T]) -> T:
    """A setting of the config file, of exactly this TOML type (a bool is not an integer, "no" is not false)."""
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        wanted = {int: "an integer", bool: "true or false", str: "a string"}.get(kind, kind.__name__)
        raise ConfigError(f"{path}: `{key}` must be {wanted}, not {value!r}")
    return value


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def apply_environment(config: BlueprintConfig, environ: Mapping[str, str] | None = None) -> None:
    """Fill options from `FIRSTFAULT_*`: the service URL and token, and `FIRSTFAULT_<NAME>_<KEY>` defaults."""
    environ = os.environ if environ is None else environ
    if not config.of_kind("attribution") and environ.get("FIRSTFAULT_SERVICE_URL"):
        config.connectors.append(ConnectorSpec("attribution", "", {"service_url": environ["FIRSTFAULT_SERVICE_URL"]}))
    for spec in config.of_kind("attribution"):
        if "token" not in spec.options and environ.get("FIRSTFAULT_API_TOKEN"):
            spec.options["token"] = environ["FIRSTFAULT_API_TOKEN"]

