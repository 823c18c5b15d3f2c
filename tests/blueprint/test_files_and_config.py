"""The local-files collector (templates, rotation, gzip, window filtering), configuration and watch mode."""

from __future__ import annotations

import gzip
import os
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from blueprint_helpers import make_workload, run_blueprint

from firstfault.blueprint.collectors.files import FilesCollector, rotated_family
from firstfault.blueprint.config import spec_from_words
from firstfault.blueprint.connectors import build_plan
from firstfault.blueprint.runner import Runner
from firstfault.cli import build_parser
from firstfault.cli.blueprint import build_config
from firstfault.engine import ExecutionContext
from firstfault.errors import ConfigError
from firstfault.samples import samples_root

XID = "kernel: [794287.441000] NVRM: Xid (PCI:0000:9a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def _syslog_dir(root: Path) -> Path:
    """Per-node syslog directories with logrotate history: syslog, syslog.1, syslog.2.gz."""
    for node in ("gpu-f01", "gpu-f02"):
        d = root / node
        d.mkdir(parents=True)
        (d / "syslog").write_text(f"Mar  2 09:10:00 {node} systemd[1]: Started Session 40.\n")
        (d / "syslog.1").write_text(
            f"Mar  2 07:00:00 {node} CRON[10]: (root) CMD (logrotate)\n"           # before the window
            f"Mar  2 08:20:00 {node} systemd[1]: Started Session 12.\n"
            + (f"Mar  2 08:41:15 {node} {XID}\n" if node == "gpu-f02" else "")
            + f"    continuation of the line above\n"
            f"Mar  2 09:45:00 {node} CRON[11]: (root) CMD (late)\n")                 # after the window
        with gzip.open(d / "syslog.2.gz", "wt") as fh:
            fh.write(f"Mar  1 23:00:00 {node} kernel: Linux version 6.1\n")
        old = datetime(2026, 3, 1, 23, 30, tzinfo=timezone.utc).timestamp()
        os.utime(d / "syslog.2.gz", (old, old))
    return root


def test_rotated_family_is_oldest_first(tmp_path: Path) -> None:
    for name in ("syslog", "syslog.1", "syslog.2.gz", "syslog.10.gz", "syslog-20260301.gz", "syslog.bak"):
        (tmp_path / name).write_text("x")
    assert [p.name for p in rotated_family(tmp_path / "syslog")] == [
        "syslog-20260301.gz", "syslog.10.gz", "syslog.2.gz", "syslog.1", "syslog"]


def test_files_collector_scopes_by_node_template_and_window(tmp_path: Path) -> None:
    logs = _syslog_dir(tmp_path / "nodes")
    jobs = tmp_path / "slurm" / "4100"
    jobs.mkdir(parents=True)
    (jobs / "job.out").write_text("[rank1]: RuntimeError: CUDA error: unspecified launch failure\n")
    spec = spec_from_words(["logs", "files", "syslog", f"{logs}/{{node}}/syslog", "applog", f"{tmp_path}/slurm/{{job_id}}/job.out"])
    ctx = ExecutionContext(workload_id="w", job_id="4100", nodes=["gpu-f01", "gpu-f02", "gpu-f03"],
                           start_time=datetime(2026, 3, 2, 8, 30, tzinfo=timezone.utc),
                           end_time=datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc),
                           metadata={"batch_host": "gpu-f02"})
    batches = list(FilesCollector(spec, timedelta(minutes=15)).collect(ctx))
    lines = {(b.node, b.source.value, b.origin.split("/")[-1], b.first_line): b.lines for b in batches}
    assert lines[("gpu-f02", "syslog", "syslog.1", 2)] == [
        "Mar  2 08:20:00 gpu-f02 systemd[1]: Started Session 12.", f"Mar  2 08:41:15 gpu-f02 {XID}",
        "    continuation of the line above"]
    assert lines[("gpu-f01", "syslog", "syslog", 1)] == ["Mar  2 09:10:00 gpu-f01 systemd[1]: Started Session 40."]
    assert not any(o == "syslog.2.gz" for _, _, o, _ in lines)        # rotated before the window: not read
    assert lines[("gpu-f02", "applog", "job.out", 1)] == ["[rank1]: RuntimeError: CUDA error: unspecified launch failure"]


def test_files_collector_reads_gzip_and_reports_nothing_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    logs = _syslog_dir(tmp_path / "nodes")
    for node in ("gpu-f01", "gpu-f02"):   # the whole history compressed, as some sites keep it
        for name in ("syslog", "syslog.1"):
            path = logs / node / name
            with gzip.open(f"{path}.gz" if name == "syslog" else logs / node / "syslog.3.gz", "wb") as fh:
                fh.write(path.read_bytes())
            path.unlink()
    workload = make_workload(tmp_path, "files-job", ["gpu-f01", "gpu-f02"], "2026-03-02T08:30:00Z",
                             "2026-03-02T09:00:00Z")
    code, (result,), err = run_blueprint([
        "--configs", str(workload), "--margin", "15m",
        "--connector", "logs", "files", "label", "syslog", "syslog", f"{logs}/{{node}}/syslog",
        "--connector", "logs", "files", "label", "stdout", "applog", "{stdout}"], capsys)
    assert code == 0, err
    reports = {r["connector"]: r for r in result["connector_reports"]}
    assert reports["syslog"]["status"] == "ok" and reports["syslog"]["nodes"] == ["gpu-f01", "gpu-f02"]
    assert reports["stdout"]["status"] == "empty" and "not known for this workload" in reports["stdout"]["reason"]
    assert result["diagnosis"]["sub_domain"] == "gpu"
    assert [c["node"] for c in result["diagnosis"]["culprit_nodes"]] == ["gpu-f02"]


def test_connector_words_toml_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert spec_from_words(["output", "db", "sqlite", "path", "r.db"]).options == {"db": "sqlite", "path": "r.db"}
    spec = spec_from_words(["logs", "files", "applog", "a", "applog", "b", "label", "x"])
    assert (spec.name, spec.get_all("applog"), spec.label) == ("files", ["a", "b"], "x")
    assert spec_from_words(["attribution", "service_url", "http://s:8000"]).name == ""
    with pytest.raises(ConfigError, match="unknown kind"):
        spec_from_words(["log", "loki"])
    config_file = tmp_path / "blueprint.toml"
    config_file.write_text(f"""
configs = ["{samples_root()}"]
margin = "20m"
workers = 2
[[logs]]
type = "loki"
selector = 'job="syslog"'
[[output]]
db = "sqlite"
path = "{tmp_path / 'r.db'}"
""")
    monkeypatch.setenv("FIRSTFAULT_LOKI_URL", "http://loki.example:3100")
    monkeypatch.setenv("FIRSTFAULT_LOKI_TENANT", "team-a")
    monkeypatch.setenv("FIRSTFAULT_SERVICE_URL", "http://svc:8000")
    monkeypatch.setenv("FIRSTFAULT_API_TOKEN", "t0ken")
    args = build_parser().parse_args(["blueprint", "--config", str(config_file), "--connector", "output", "stdout"])
    config = build_config(args)
    assert config.margin == timedelta(minutes=20) and config.workers == 2
    assert [(c.kind, c.name) for c in config.connectors] == [
        ("context", "static"), ("logs", "loki"), ("output", ""), ("output", "stdout"), ("attribution", "")]
    assert config.of_kind("attribution")[0].options == {"service_url": "http://svc:8000", "token": "t0ken"}
    plan = build_plan(config)
    loki = plan.collectors[1]
    assert loki.client.base_url == "http://loki.example:3100"
    assert loki.client.client.headers["X-Scope-OrgID"] == "team-a"
    assert plan.attributor.mode == "service" and plan.attributor.client.client.headers["Authorization"] == "Bearer t0ken"
    plan.close()


@pytest.mark.parametrize("words, message", [
    (["logs", "loki", "url", "http://x", "ulr", "y"], "unknown option"),
    (["logs", "splunk"], "unknown connector"),
    (["logs", "files"], "at least one path template"),
    (["metrics", "promql"], "`url` is required"),
    (["context", "slurm", "since", "yesterday"], "not a time"),
])
def test_configuration_mistakes_are_explained(words: list[str], message: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_blueprint(["--configs", str(samples_root()), "--connector", *words], capsys)
    assert code == 2 and message in err


def test_watch_mode_picks_up_new_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "incoming"
    root.mkdir()
    shutil.copytree(samples_root() / "nvlink-walkthrough", root / "nvlink-walkthrough")
    args = build_parser().parse_args(["blueprint", "--configs", str(root), "--watch", "--interval", "1s",
                                      "--connector", "output", "db", "sqlite", "path", str(tmp_path / "r.db")])
    config = build_config(args)
    plan = build_plan(config)
    runner = Runner(plan, config)
    arrivals = iter([lambda: shutil.copytree(samples_root() / "xid79-fallen-off-bus", root / "xid79"), lambda: None])
    runner.watch(cycles=3, sleep=lambda _s: next(arrivals)())
    plan.close()
    assert (runner.summary.attributed, runner.summary.skipped) == (2, 0)
    runner.print_summary()
    assert "2 attributed" in capsys.readouterr().err
