"""Bad evidence gives a clear error or a result marked partial in its coverage - never a traceback."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from firstfault.cli import main
from firstfault.engine import Engine
from firstfault.errors import EvidenceError

XID79 = "Jan  1 00:10:00 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."


def test_missing_scenario_toml(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir()
    with pytest.raises(EvidenceError, match="no scenario.toml"):
        engine.analyze_path(tmp_path)


def test_malformed_scenario_toml(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "scenario.toml").write_text("[workload\nnodes = 3")
    with pytest.raises(EvidenceError, match="cannot be read as TOML"):
        engine.analyze_path(tmp_path)


def test_invalid_time_in_scenario(engine: Engine, tmp_path: Path) -> None:
    (tmp_path / "scenario.toml").write_text('[workload]\nnodes = ["a"]\nstart_time = "yesterday"\n')
    with pytest.raises(EvidenceError, match="start_time"):
        engine.analyze_path(tmp_path)


def test_not_a_directory(engine: Engine, tmp_path: Path) -> None:
    with pytest.raises(EvidenceError, match="not a directory"):
        engine.analyze_path(tmp_path / "missing")


def test_empty_directory_is_partial(engine: Engine, make_workload) -> None:
    root = make_workload({}, nodes=["n1", "n2"])
    result = engine.analyze_path(root)
    assert result.coverage.partial
    assert result.coverage.nodes_without_evidence == ["n1", "n2"]
    assert any("no evidence files" in issue for issue in result.coverage.issues)
    assert result.sub_domain.value == "unknown"


def test_unreadable_file_is_reported_and_the_rest_analysed(engine: Engine, make_workload) -> None:
    root = make_workload({"n1/syslog": [XID79], "n2/applog": ["hello"]})
    locked = root / "n2" / "applog.log"
    if os.geteuid() == 0:  # root ignores file modes: a link to nothing instead
        locked.unlink()
        locked.symlink_to(root / "n2" / "gone.log")
    else:
        locked.chmod(0)
    result = engine.analyze_path(root)
    assert any("n2/applog.log: cannot be read" in issue for issue in result.coverage.issues)
    assert result.coverage.partial
    assert [c.node for c in result.culprit_nodes] == ["n1"]


def test_invalid_utf8_is_replaced(engine: Engine, make_workload) -> None:
    line = b"Jan  1 00:10:00 n1 kernel: \xff\xfe NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
    root = make_workload({"n1/syslog": b"\xc3\x28 garbage \xa0\xa1\n" + line})
    result = engine.analyze_path(root)
    assert result.root_cause is not None and "\ufffd" in result.root_cause.evidence[0].text
    assert result.root_cause.evidence[0].provenance.line == 2


def test_ten_megabyte_line(engine: Engine, make_workload) -> None:
    huge = b"x" * (10 * 1024 * 1024)
    root = make_workload({"n1/syslog": huge + b"\n" + XID79.encode() + b"\n"})
    result = engine.analyze_path(root)
    assert any("longer than" in issue for issue in result.coverage.issues)
    assert result.root_cause is not None and result.root_cause.evidence[0].provenance.line == 2
    assert result.coverage.partial


def test_binary_file_is_skipped_with_an_issue(engine: Engine, make_workload) -> None:
    blob = bytes(range(256)) * 400
    root = make_workload({"n1/applog": blob, "n1/syslog": [XID79]})
    result = engine.analyze_path(root)
    assert any("binary content" in issue for issue in result.coverage.issues)
    assert [c.node for c in result.culprit_nodes] == ["n1"]


def test_nul_padding_after_a_crash_is_still_read(engine: Engine, make_workload) -> None:
    root = make_workload({"n1/syslog": b"\0" * 4096 + XID79.encode() + b"\n"})
    result = engine.analyze_path(root)
    assert [c.node for c in result.culprit_nodes] == ["n1"]


def test_gzipped_evidence_is_read(engine: Engine, make_workload) -> None:
    import gzip

    root = make_workload({"n2/applog": ["ok"]}, nodes=["n1", "n2"])
    (root / "n1").mkdir()
    (root / "n1" / "syslog.log.gz").write_bytes(gzip.compress((XID79 + "\n").encode()))
    result = engine.analyze_path(root)
    assert [c.node for c in result.culprit_nodes] == ["n1"]


def test_cli_reports_errors_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["analyze", str(tmp_path)])
    captured = capsys.readouterr()
    assert status == 2
    assert "no scenario.toml" in captured.err and "Traceback" not in captured.err + captured.out


def test_cli_unknown_sample(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", "--sample", "nope"]) == 2
    assert "no sample named" in capsys.readouterr().err
