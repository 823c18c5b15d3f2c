"""Scanning files in worker processes gives byte-identical JSON to scanning them in order in one process."""

from __future__ import annotations

import gzip
from dataclasses import replace
from pathlib import Path

import pytest

from firstfault import executor as executor_module
from firstfault.engine import Engine
from firstfault.engine import engine as engine_module
from firstfault.engine.params import Params
from firstfault.engine.timing import Timings
from firstfault.samples import sample_dirs
from tests.support.workloads import CORPUS, WorkloadFactory

XID = "2025-01-01T00:10:00Z {node} kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1, name=x, GPU has fallen off the bus."
TIMEOUT = ("2025-01-01T00:20:{s:02d}Z [rank{r}]: [Rank {r}] Watchdog caught collective operation timeout: "
           "WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 "
           "milliseconds before timing out.")


@pytest.mark.parametrize("name", sorted(sample_dirs()))
def test_samples_same_json_with_workers(engine: Engine, name: str) -> None:
    path = sample_dirs()[name]
    assert engine.analyze_path(path, workers=2).to_json() == engine.analyze_path(path).to_json()


def test_corpus_same_json_with_workers(engine: Engine) -> None:
    for path in sorted(CORPUS.iterdir())[:12]:
        assert engine.analyze_path(path, workers=3).to_json() == engine.analyze_path(path).to_json(), path.name


def _noisy_workload(make_workload: WorkloadFactory) -> Path:
    files: dict[str, list[str] | bytes] = {}
    for n in range(5):
        node = f"n{n}"
        lines = [f"2025-01-01T00:0{i % 10}:00Z {node} NCCL INFO Bootstrap : Using ib0:10.0.{n}.{i % 7}<0>"
                 for i in range(300)]
        lines += [TIMEOUT.format(s=i, r=n * 8 + i) for i in range(8)]
        files[f"{node}/applog"] = lines
        files[f"{node}/syslog"] = [XID.format(node=node)] if n == 3 else ["2025-01-01T00:00:00Z boot"]
    # One file with many distinct event keys (one per GPU address), to overflow a small key cap by itself.
    files["n1/syslog"] = [f"2025-01-01T00:05:{i:02d}Z n1 kernel: NVRM: Xid (PCI:0000:{i:02x}:00): 13, pid=1, "
                          "name=x, Graphics SM Warp Exception" for i in range(12)]
    files["n4/syslog"] = b"\x00\x01\x02\x03" * 5000  # binary: an issue, from a worker
    return make_workload(files, nodes=[f"n{n}" for n in range(6)])


def test_issues_values_and_stats_merge_like_sequential(engine: Engine, make_workload: WorkloadFactory) -> None:
    path = _noisy_workload(make_workload)
    gz = path / "n2" / "applog.log"
    (path / "n2" / "applog.log.gz").write_bytes(gzip.compress(gz.read_bytes()))
    gz.unlink()
    sequential = engine.analyze_path(path)
    assert sequential.coverage.issues and sequential.symptoms
    for workers in (2, 4):
        assert engine.analyze_path(path, workers=workers).to_json() == sequential.to_json()


def test_value_cap_keeps_the_same_values(make_workload: WorkloadFactory) -> None:
    # With 3 values per attribute, which values survive depends on the order lines were seen in.
    engine = Engine(params=replace(Params(), max_values_per_attribute=3))
    path = _noisy_workload(make_workload)
    assert engine.analyze_path(path, workers=2).to_json() == engine.analyze_path(path).to_json()


def test_event_key_cap_falls_back_to_sequential_ingest(make_workload: WorkloadFactory) -> None:
    engine = Engine(params=replace(Params(), max_event_keys=4))
    path = _noisy_workload(make_workload)
    timings = Timings()
    parallel = engine.analyze_path(path, workers=2, timings=timings)
    sequential = engine.analyze_path(path)
    assert "distinct event keys" in " ".join(sequential.coverage.issues)
    assert timings.counts.get("merge_fallbacks", 0) >= 1  # some file alone overflowed a worker's cap
    assert parallel.to_json() == sequential.to_json()


def test_spawned_workers_load_the_catalog_themselves(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    monkeypatch.setattr(executor_module, "pool_context", lambda: multiprocessing.get_context("spawn"))
    path = sample_dirs()["xid79-fallen-off-bus"]
    assert engine.analyze_path(path, workers=2).to_json() == engine.analyze_path(path).to_json()


def test_timings_report_phases_and_counts(engine: Engine) -> None:
    timings = Timings()
    path = sample_dirs()["nvlink-walkthrough"]
    engine.analyze_path(path, workers=2, timings=timings)
    report = timings.as_dict()
    for phase in ("analyze.ingest", "analyze.attribute", "ingest.scan", "ingest.hits", "ingest.read",
                  "pipeline.FINAL"):
        assert phase in report["seconds"]
    assert report["counts"]["files"] > 1 and report["counts"]["bytes"] > 0 and report["counts"]["workers"] == 2


def test_auto_workers_stays_in_process_for_small_evidence() -> None:
    assert engine_module.auto_workers(files=10, total_bytes=1024) == 1
    assert engine_module.auto_workers(files=1, total_bytes=1 << 40) == 1
    assert engine_module.auto_workers(files=10, total_bytes=1 << 40) >= 1
