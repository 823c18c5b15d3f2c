"""Typed connector options: every connector declares its options once, as a frozen dataclass.

Each field is one option: its name is the key, its annotation the type, its default the default, and
`option(...)` adds the one-line doc (and, where the default is not a plain value, how to show it). The
dataclass is the single source of truth:

- `parse_options(Model, spec)` reads a `ConnectorSpec` strictly: an unknown key is a ConfigError naming the
  connector, the key and the accepted keys; a value of the wrong type (not an integer, not on/off, not a
  duration, a time, or one of the choices; a single-valued key given twice) is a ConfigError naming the key.
  A key not given takes `FIRSTFAULT_<NAME>_<KEY>` when that variable is set, else the field's default.
- `render_table(Model, kind, name)` is the option table of docs/blueprint.md (checked by a test).

Types: `str`, `int`, `bool` (on/off), `timedelta` (a duration), `tuple[str, ...]` (repeatable; with
`split=True` a value may also be comma-separated), each optionally `| None` (None: not given). `kind="time"`
marks a `str` holding a time (ISO 8601, `now` or a duration ago), validated when parsed and kept as text so
that relative times move with every pass.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from firstfault.blueprint.config import ConnectorSpec, env_name, parse_bool
from firstfault.errors import ConfigError
from firstfault.timeinput import parse_duration, parse_time

T = TypeVar("T")


def option(default: Any, doc: str, *, shown: str | None = None, split: bool = False, required: bool = False,
           choices: Sequence[str] = (), kind: str = "") -> Any:
    """One option's declaration: default, one-line doc, and how the docs show its default (`shown`)."""
    return dataclasses.field(default=default, metadata={
        "doc": doc, "shown": shown, "split": split, "required": required, "choices": tuple(choices), "kind": kind})


# -- the option groups several connectors share ---------------------------------------------------------------
@dataclass(frozen=True)
class Options:
    """The root of every connector's options."""


@dataclass(frozen=True)
class LabelOptions(Options):
    label: str | None = option(None, "the name in connector reports (use it when declaring several)",
                               shown="the connector's name")


@dataclass(frozen=True)
class CollectorOptions(LabelOptions):
    """What every collector (logs and metrics) takes."""

    collect_timeout: timedelta | None = option(
        None, "the longest this collector may take for one workload; past it, it is abandoned and reported as an "
              "`error` (what it delivered before is kept)", shown="`--collect-timeout`")


@dataclass(frozen=True)
class MarginOptions(Options):
    margin: timedelta | None = option(None, "widen the workload's window by this much on both sides",
                                      shown="`--margin`")


@dataclass(frozen=True)
class HttpOptions(Options):
    """An HTTP data source (Loki, Prometheus): `firstfault.blueprint.http.client_for` builds its client."""

    url: str | None = option(None, "the base URL", required=True)
    tenant: str | None = option(None, "sent as `X-Scope-OrgID` (multi-tenant Loki, Mimir)")
    token: str | None = option(None, "bearer token")
    timeout: timedelta = option(timedelta(seconds=30), "the whole of one request (connecting, sending, the "
                                                       "answer): a server that trickles is cut at it")
    retries: int = option(4, "retries on connection errors, 429 and 5xx, with exponential backoff")
    max_answer: int = option(64, "the largest answer read, in MiB (decoded); a larger one is abandoned and the "
                                 "collector reports an `error` (what it delivered before is kept)")


@dataclass(frozen=True)
class KubectlOptions(Options):
    """The real `kubectl` (firstfault.blueprint.kubectl.Kubectl)."""

    kubectl: str = option("kubectl", "the command")
    kubeconfig: str | None = option(None, "the kubeconfig file", shown="kubectl's")
    context: str | None = option(None, "the kubeconfig context", shown="kubectl's")
    timeout: timedelta = option(timedelta(seconds=60), "per command")


# -- parsing --------------------------------------------------------------------------------------------------
def option_fields(model: type[Options]) -> list[dataclasses.Field[Any]]:
    """The model's options in documentation order: those it declares, then those it inherits, then `margin`,
    `label` and `collect_timeout`."""
    tail = ["margin", "label", "collect_timeout"]
    own = list(model.__dict__.get("__annotations__", {}))
    every = dataclasses.fields(model)
    rank = {f.name: (2 + tail.index(f.name) if f.name in tail else 0 if f.name in own else 1,
                     own.index(f.name) if f.name in own else 0) for f in every}
    return sorted(every, key=lambda f: rank[f.name])   # stable: the inherited keep their order


def option_names(model: type[Options]) -> list[str]:
    return [f.name for f in option_fields(model)]


def _hints(model: type[Options]) -> dict[str, Any]:
    return typing.get_type_hints(model)


def _base_type(hint: Any) -> tuple[Any, bool]:
    """(the type without None, whether None is allowed)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        return args[0], True
    return hint, False


def _where(spec: ConnectorSpec) -> str:
    return " ".join(p for p in (spec.kind, spec.name) if p)


def env_variable(spec: ConnectorSpec, option: str) -> str:
    """`FIRSTFAULT_<NAME>_<KEY>`: where an option missing from the connector's spec is read from."""
    return f"FIRSTFAULT_{env_name(spec.name)}_{env_name(option)}"


def parse_options(model: type[T], spec: ConnectorSpec, environ: Mapping[str, str] | None = None,
                  env: bool = True) -> T:
    """The connector's typed options from its spec (and, with `env`, `FIRSTFAULT_<NAME>_<KEY>`); strict."""
    assert dataclasses.is_dataclass(model) and issubclass(model, Options)
    environ = os.environ if environ is None else environ
    where = _where(spec)
    known = option_names(model)
    unknown = sorted(set(spec.options) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)} (accepted: {', '.join(known)})")
    hints = _hints(model)
    values: dict[str, Any] = {}
    for f in dataclasses.fields(model):
        raw: str | list[str] | None = spec.options.get(f.name)
        source = f"option `{f.name}`"
        if raw is None and env:
            variable = env_variable(spec, f.name)
            if environ.get(variable):
                raw, source = environ[variable], f"{variable} (option `{f.name}`)"
        value = None if raw is None else _convert(raw, hints[f.name], f, f"{where}: {source}")
        if value is None and f.metadata.get("required"):   # missing, or given empty
            raise ConfigError(f"{where}: option `{f.name}` is required (or {env_variable(spec, f.name)})")
        if raw is not None:
            values[f.name] = value
    return model(**values)


def _convert(raw: str | list[str], hint: Any, f: dataclasses.Field[Any], what: str) -> Any:
    base, _ = _base_type(hint)
    if typing.get_origin(base) is tuple:
        if isinstance(raw, list):   # repeated: each value whole
            return tuple(raw)
        if f.metadata.get("split"):   # one value: comma-separated
            return tuple(v.strip() for v in raw.split(",") if v.strip())
        return (raw,)
    if isinstance(raw, list):
        if len(raw) != 1:
            raise ConfigError(f"{what} takes one value, not {len(raw)} ({', '.join(map(repr, raw))})")
        raw = raw[0]
    text = raw
    if base is str:
        if not text:   # an empty value is no value: the default applies
            return f.default
        choices = f.metadata.get("choices") or ()
        if choices and text not in choices:
            raise ConfigError(f"{what} must be one of {', '.join(choices)}, not {text!r}")
        if f.metadata.get("kind") == "time":
            try:
                parse_time(text)
            except ConfigError as exc:
                raise ConfigError(f"{what}: {exc}") from None
        return text
    if base is bool:
        try:
            return parse_bool(text)
        except ConfigError:
            raise ConfigError(f"{what} must be on or off (true/false, yes/no, 1/0), not {text!r}") from None
    if base is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"{what} must be an integer, not {text!r}") from None
    if base is timedelta:
        if not text:   # an empty value is no value: the default applies
            return f.default
        try:
            return parse_duration(text)
        except ConfigError:
            raise ConfigError(f"{what} must be a duration (e.g. 30s, 10m, 2h, 1d), not {text!r}") from None
    raise TypeError(f"option `{f.name}`: unsupported type {hint!r}")  # a declaration mistake, not the user's


def legacy_model(names: Sequence[str], base: type[Options] = LabelOptions) -> type[Options]:
    """A model for a connector that still declares only `OPTIONS = (names...)`: every option is text."""
    own = [(n, str | None, option(None, "")) for n in names if n not in {f.name for f in dataclasses.fields(base)}]
    return dataclasses.make_dataclass("LegacyOptions", own, bases=(base,), frozen=True)


# -- documentation --------------------------------------------------------------------------------------------
def format_duration(value: timedelta) -> str:
    """`30s`, `120s`, `15m`, `1h`, `1d`: seconds below five minutes, else the largest whole unit."""
    seconds = value.total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= max(size, 300) and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def type_name(hint: Any, f: dataclasses.Field[Any]) -> str:
    base, _ = _base_type(hint)
    if typing.get_origin(base) is tuple:
        return "list (comma-separated or repeated)" if f.metadata.get("split") else "text, repeatable"
    if f.metadata.get("choices"):
        return " or ".join(f"`{c}`" for c in f.metadata["choices"])
    if f.metadata.get("kind") == "time":
        return "time"
    return {str: "text", int: "integer", bool: "on/off", timedelta: "duration"}[base]


def shown_default(f: dataclasses.Field[Any], name: str) -> str:
    if f.metadata.get("shown") is not None:
        return str(f.metadata["shown"])
    if f.metadata.get("required"):
        return f"required (or `FIRSTFAULT_{env_name(name)}_{env_name(f.name)}`)"
    value = f.default
    if value is None or value == () or value is dataclasses.MISSING:
        return ""
    if isinstance(value, bool):
        return "`on`" if value else "`off`"
    if isinstance(value, timedelta):
        return f"`{format_duration(value)}`"
    return f"`{value}`"


def render_table(model: type[Options], name: str) -> str:
    """The Markdown option table of one connector (`name` gives the environment variable of required keys)."""
    hints = _hints(model)
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for f in option_fields(model):
        rows.append(f"| `{f.name}` | {type_name(hints[f.name], f)} | {shown_default(f, name)} | "
                    f"{f.metadata.get('doc', '')} |")
    return "\n".join(rows) + "\n"
