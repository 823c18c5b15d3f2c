"""Typed connector options: strict parsing, the environment fallback, and the generated tables of docs/blueprint.md."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pytest
from blueprint_helpers import run_blueprint

from firstfault.blueprint.attribution import AttributionOptions
from firstfault.blueprint.collectors.files import FilesOptions
from firstfault.blueprint.collectors.loki import LokiCollector, LokiOptions
from firstfault.blueprint.collectors.promql import PromqlOptions
from firstfault.blueprint.config import BlueprintConfig, spec_from_words
from firstfault.blueprint.connectors import (
    COLLECTORS,
    build_plan,
    documented_models,
    options_model,
    render_option_tables,
)
from firstfault.blueprint.contexts.slurm import SlurmOptions
from firstfault.blueprint.contexts.static import StaticContexts
from firstfault.blueprint.options import CollectorOptions, parse_options
from firstfault.errors import ConfigError
from firstfault.samples import samples_root

DOCS = Path(__file__).resolve().parents[2] / "docs" / "blueprint.md"


def words(*w: str):
    return spec_from_words(list(w))


# -- strict parsing ---------------------------------------------------------------------------------------------
def test_every_default_is_the_documented_one() -> None:
    loki = parse_options(LokiOptions, words("logs", "loki", "url", "http://l"), environ={})
    assert (loki.node_label, loki.source, loki.limit, loki.split, loki.nodes_per_query, loki.timeout, loki.retries) == (
        "hostname", "syslog", 5000, timedelta(hours=1), 50, timedelta(seconds=30), 4)
    assert (loki.margin, loki.collect_timeout, loki.label, loki.query, loki.selector) == (None,) * 5
    slurm = parse_options(SlurmOptions, words("context", "slurm"), environ={})
    assert (slurm.since, slurm.until, slurm.format, slurm.lookback, slurm.sacct, slurm.scontrol, slurm.timeout) == (
        "1d", None, "json", timedelta(minutes=15), "sacct", "scontrol", timedelta(seconds=120))
    promql = parse_options(PromqlOptions, words("metrics", "promql", "url", "http://p"), environ={})
    assert (promql.defaults, promql.changes_only, promql.node_label, promql.ib_node_label, promql.step) == (
        True, True, "auto", "auto", None)
    attribution = parse_options(AttributionOptions, words("attribution", "service_url", "http://s"), env=False)
    assert (attribution.timeout, attribution.retries, attribution.token) == (timedelta(seconds=120), 4, None)


def test_values_are_typed() -> None:
    spec = words("logs", "loki", "url", "http://l", "limit", "20", "split", "30m", "source", "applog",
                 "collect_timeout", "2s", "margin", "0", "label", "kernel")
    loki = parse_options(LokiOptions, spec, environ={})
    assert (loki.limit, loki.split, loki.source, loki.collect_timeout, loki.margin, loki.label) == (
        20, timedelta(minutes=30), "applog", timedelta(seconds=2), timedelta(0), "kernel")
    files = parse_options(FilesOptions, words("logs", "files", "applog", "a,b", "applog", "c", "window", "off",
                                              "rotated", "no"), environ={})
    assert (files.applog, files.window, files.rotated) == (("a,b", "c"), False, False)   # templates: each whole
    slurm = parse_options(SlurmOptions, words("context", "slurm", "jobs", "1,2_3", "states", "FAILED",
                                               "states", "TIMEOUT"), environ={})
    assert (slurm.jobs, slurm.states) == (("1", "2_3"), ("FAILED", "TIMEOUT"))           # lists: comma-separated


@pytest.mark.parametrize("extra, message", [
    (["ulr", "y"], "logs loki: unknown option(s) ulr (accepted: url, node_label"),
    (["limit", "many"], "logs loki: option `limit` must be an integer, not 'many'"),
    (["split", "an hour"], "logs loki: option `split` must be a duration"),
    (["collect_timeout", "soon"], "logs loki: option `collect_timeout` must be a duration"),
    (["source", "dmesg"], "logs loki: option `source` must be one of applog, syslog, scheduler, node_metrics"),
    (["limit", "1", "limit", "2"], "logs loki: option `limit` takes one value, not 2"),
])
def test_mistakes_are_config_errors_naming_the_connector_and_key(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_options(LokiOptions, words("logs", "loki", "url", "http://l", *extra), environ={})
    assert message in str(caught.value)


@pytest.mark.parametrize("spec, message", [
    (["logs", "files", "syslog", "/x", "window", "maybe"], "logs files: option `window` must be on or off"),
    (["context", "slurm", "until", "tomorrow-ish"], "context slurm: option `until`: not a time"),
    (["context", "slurm", "format", "xml"], "option `format` must be one of json, text"),
    (["context", "kueue", "timeout", "1 minute"], "context kueue: option `timeout` must be a duration"),
    (["output", "db", "sqlite"], "output sqlite: option `path` is required (or FIRSTFAULT_SQLITE_PATH)"),
    (["output", "stdout", "path", "x"], "output stdout: unknown option(s) path (accepted: label)"),
    (["metrics", "promql", "url", "http://p", "defaults", "2"], "metrics promql: option `defaults` must be on or off"),
    (["attribution", "service_url", "http://s", "retries", "x"], "attribution: option `retries` must be an integer"),
    (["attribution", "service_url", "http://s", "url", "x"], "attribution: unknown option(s) url"),
])
def test_build_plan_refuses_bad_options(spec: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FIRSTFAULT_SQLITE_PATH", raising=False)
    config = BlueprintConfig(connectors=[words("context", "static", "path", str(samples_root())), words(*spec)])
    with pytest.raises(ConfigError) as caught:
        build_plan(config).close()
    assert message in str(caught.value)


def test_mistakes_exit_2_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_blueprint(["--configs", str(samples_root()), "--connector", "logs", "k8s", "previous",
                                  "sometimes"], capsys)
    assert code == 2 and "logs k8s: option `previous` must be on or off" in err


# -- the environment --------------------------------------------------------------------------------------------
def test_environment_fills_what_is_not_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FIRSTFAULT_LOKI_URL", "http://loki.example:3100")
    monkeypatch.setenv("FIRSTFAULT_LOKI_LIMIT", "77")
    monkeypatch.setenv("FIRSTFAULT_LOKI_COLLECT_TIMEOUT", "3s")
    monkeypatch.setenv("FIRSTFAULT_LOKI_TENANT", "")            # empty: as if unset
    monkeypatch.setenv("FIRSTFAULT_SQLITE_PATH", str(tmp_path / "r.db"))
    monkeypatch.setenv("FIRSTFAULT_SLURM_SINCE", "2h")
    loki = parse_options(LokiOptions, words("logs", "loki", "limit", "5"))
    assert (loki.url, loki.limit, loki.collect_timeout, loki.tenant) == (
        "http://loki.example:3100", 5, timedelta(seconds=3), None)     # the command line wins over the environment
    assert parse_options(SlurmOptions, words("context", "slurm")).since == "2h"
    plan = build_plan(BlueprintConfig(connectors=[words("context", "static", "path", str(samples_root())),
                                                  words("logs", "loki"), words("output", "db", "sqlite")]))
    try:
        collector = plan.collectors[1]
        assert isinstance(collector, LokiCollector) and collector.limit == 77
        assert collector.client.base_url == "http://loki.example:3100"
        assert plan.collect_timeouts == [600.0, 3.0]   # the static evidence takes the run's, loki its own
        assert plan.outputs[0].path == tmp_path / "r.db"
    finally:
        plan.close()


def test_a_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRSTFAULT_LOKI_LIMIT", "lots")
    with pytest.raises(ConfigError, match="FIRSTFAULT_LOKI_LIMIT \\(option `limit`\\) must be an integer"):
        parse_options(LokiOptions, words("logs", "loki", "url", "http://l"))


def test_attribution_takes_no_name_based_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FIRSTFAULT__RETRIES", "9")
    assert parse_options(AttributionOptions, words("attribution", "service_url", "http://s"), env=False).retries == 4


# -- collect_timeout is every collector's option ----------------------------------------------------------------
def test_every_collector_takes_collect_timeout_and_label() -> None:
    for which, model in documented_models().items():
        names = {f for f in model.__dataclass_fields__}
        if which.split()[0] in ("logs", "metrics"):
            assert issubclass(model, CollectorOptions) and {"collect_timeout", "label"} <= names, which
        elif which != "attribution":
            assert "label" in names and "collect_timeout" not in names, which


def test_collect_timeout_per_collector_and_the_run_default() -> None:
    config = BlueprintConfig(collect_timeout=timedelta(seconds=42), connectors=[
        words("context", "static", "path", str(samples_root())),
        words("logs", "files", "syslog", "/nonexistent/{node}"),
        words("logs", "files", "label", "quick", "syslog", "/nonexistent/{node}", "collect_timeout", "250ms")])
    plan = build_plan(config)
    try:
        assert [(c.label, t) for c, t in plan.collecting()] == [("static", 42.0), ("files", 42.0), ("quick", 0.25)]
    finally:
        plan.close()


def test_a_connector_with_legacy_option_names_still_works() -> None:
    class Legacy:
        kind = "logs"
        OPTIONS = ("path",)

    model = options_model(Legacy)
    parsed = parse_options(model, words("logs", "legacy", "path", "/x", "collect_timeout", "1s"), environ={})
    assert (parsed.path, parsed.collect_timeout) == ("/x", timedelta(seconds=1))   # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown option"):
        parse_options(model, words("logs", "legacy", "paht", "/x"), environ={})
    assert options_model(StaticContexts).__name__ == "StaticOptions"


# -- the documentation ------------------------------------------------------------------------------------------
def test_docs_blueprint_md_option_tables_are_generated_from_the_models() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert text == render_option_tables(text), "run: python -m firstfault.blueprint.connectors docs/blueprint.md"
    documented = {line.removeprefix("<!-- options: ").removesuffix(" -->") for line in text.splitlines()
                  if line.startswith("<!-- options: ")}
    assert documented == set(documented_models())   # every connector has its table


def test_the_docs_check_catches_a_hand_edit() -> None:
    text = DOCS.read_text(encoding="utf-8").replace("| `limit` | integer | `5000` |", "| `limit` | integer | `500` |")
    assert render_option_tables(text) != text


class _Hanging:
    """A collector that blocks until released (a hung mount)."""

    kind = "logs"
    Options = CollectorOptions
    released = threading.Event()

    def __init__(self, spec, margin) -> None:
        self.label = spec.name

    def applies(self, ctx) -> bool:
        return True

    def collect(self, ctx):
        self.released.wait(30)
        yield from ()


def test_the_runner_cuts_a_collector_at_its_own_collect_timeout(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(COLLECTORS, ("logs", "hanging"), _Hanging)
    try:
        code, (result,), err = run_blueprint(["--configs", str(samples_root() / "nvlink-walkthrough"),
                                              "--collect-timeout", "1m",
                                              "--connector", "logs", "hanging", "collect_timeout", "500ms"], capsys)
    finally:
        _Hanging.released.set()
    assert code == 0, err
    report = next(r for r in result["connector_reports"] if r["connector"] == "hanging")
    assert report["status"] == "error" and "timed out after 0.5 s" in report["reason"]
