"""Smoke test of the benchmark harness (bench/): tiny sizes, one round. The real runs and their numbers are
in docs/benchmarks.md; nothing here is timed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.generate import Spec, expected, generate
from bench.rules import extra_rules_toml
from bench.suite import check, run_suite
from firstfault.engine import Engine
from firstfault.engine.catalog import load_catalog
from firstfault.tools.verify import load_verified_catalog

pytestmark = pytest.mark.skipif(shutil.which("grep") is None, reason="the harness compares against grep")


def test_generator_is_deterministic_and_plants_the_fault(tmp_path: Path, engine: Engine) -> None:
    spec = Spec(nodes=3, ranks=2, mib_per_node=0.1, seed=3)
    a = generate(spec, tmp_path / "a", reuse=False)
    b = generate(spec, tmp_path / "b", jobs=2, reuse=False)
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.log"))
    assert len(files) == 6 and a["bytes"] == b["bytes"] >= 3 * 0.1 * 2**20
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    result = json.loads(engine.analyze_path(tmp_path / "a").to_json())
    assert check(result, spec) is None, result["root_cause"]
    assert expected(spec)["root_node"] == spec.faulty_node


def test_extra_rules_keep_the_catalog_valid_and_the_diagnosis(tmp_path: Path) -> None:
    base = load_catalog()
    text = extra_rules_toml(base, 2)
    extended = load_verified_catalog([("bench_extra.toml", text.encode())])
    assert len(extended.extractors) > 2.8 * len(base.extractors)
    spec = Spec(nodes=2, ranks=2, mib_per_node=0.05)
    generate(spec, tmp_path / "w")
    result = json.loads(Engine(extended).analyze_path(tmp_path / "w").to_json())
    assert check(result, spec) is None


def test_smoke_suite_reports_every_field(tmp_path: Path) -> None:
    logs: list[str] = []
    out = run_suite("smoke", tmp_path, pin=False, log=logs.append)
    rows = out["rows"]
    assert {r["series"] for r in rows} == {"size", "nodes", "rules"} and len(logs) == len(rows)
    for row in rows:
        assert row["correct"], row["errors"]
        ff, grep = row["firstfault"], row["grep"]
        for key in ("wall_s", "cpu_s", "throughput_mib_s", "peak_rss_mb", "peak_tree_pss_mb"):
            assert ff[key] > 0, key
        for phase in ("ingest.scan", "ingest.hits", "ingest.read", "analyze.attribute", "catalog.load"):
            assert phase in ff["phases"], phase
        assert grep["wall_s"] > 0 and grep["matched_lines"] > 0 and row["ratio_grep_over_firstfault"] > 0
        assert row["grep_count"]["wall_s"] > 0 and row["ratio_grep_count_over_firstfault"] > 0
    assert {r["workers"] for r in rows if r["series"] == "size"} == {1, 2}
    assert [r["rules_factor"] for r in rows if r["series"] == "rules"] == [1, 2]
    saved = json.loads(Path(out["json_path"]).read_text())
    assert saved["rows"] == rows and saved["environment"]["cores"] >= 1
    for heading in ("Evidence size", "Cores", "Where the time goes", "Node count", "Rule count"):
        assert heading in out["markdown"]


def test_startup_and_compare_run_both_checkouts_and_compare_their_json(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from bench.__main__ import main

    src = Path(__file__).resolve().parents[2] / "src"
    assert main(["startup", "--before", str(src), "--repeat", "1", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "result JSON identical on both sides: True" in printed and "`firstfault --version` | before" in printed
    workload = tmp_path / "w"
    generate(Spec(nodes=2, ranks=2, mib_per_node=0.05), workload)
    assert main(["compare", str(workload), "--before", str(src), "--grep", "--repeat", "2", "--quiet", "1",
                 "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "result JSON identical: True" in printed and "grep -c / after: wall" in printed


@pytest.mark.parametrize("fmt", ["raw_text", "raw_loki_streams"])
def test_service_bench_runs_sessions_through_a_real_server(tmp_path: Path, fmt: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """`bench service` starts `firstfault serve`, checks each diagnosis, and (raw text) the first result against
    `analyze --json` of the same files: it raises, and exits non-zero, when either differs."""
    from bench.__main__ import main

    assert main(["service", "--nodes", "2", "--mib-per-node", "0.05", "--sessions", "1", "--concurrency", "1",
                 "--format", fmt, "--out", str(tmp_path)]) == 0
    row = json.loads(capsys.readouterr().out.splitlines()[0])
    assert row["format"] == fmt and row["sessions_per_s"] > 0 and row["mib_per_s"] > 0
