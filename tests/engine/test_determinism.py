"""Same evidence and catalog give byte-identical JSON, whatever the ingest order or the number of calls."""

from __future__ import annotations

import io

from firstfault.engine import Engine, ExecutionContext, SourceKind
from firstfault.engine.evidence import evidence_files, read_context
from firstfault.samples import sample_dirs


def test_same_input_twice_is_byte_identical(engine: Engine) -> None:
    path = sample_dirs()["nvlink-walkthrough"]
    assert engine.analyze_path(path).to_json() == engine.analyze_path(path).to_json()


def test_ingest_order_does_not_change_the_result(engine: Engine) -> None:
    path = sample_dirs()["xid79-fallen-off-bus"]
    files, _ = evidence_files(path)
    results = []
    for order in (files, list(reversed(files))):
        session = engine.session(read_context(path))
        for item in order:
            engine.ingest_file(session, item.node, item.source, item.path, origin=str(item.path.relative_to(path)))
        results.append(session.attribute().to_json())
    assert results[0] == results[1]


def test_attribute_is_repeatable_and_incremental(engine: Engine) -> None:
    ctx = ExecutionContext(workload_id="inc", nodes=["a", "b"], scheduler_state="FAILED")
    session = engine.session(ctx)
    first = session.attribute()
    assert first.sub_domain.value == "unknown"
    session.ingest_stream("b", SourceKind.APPLOG, io.BytesIO(
        b"2025-01-01T00:20:00Z [rank8]: [Rank 8] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
        b"OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.\n"),
        "b/applog.log")
    second = session.attribute()
    assert second.sub_domain.value == "unknown" and second.root_cause.symptom == "NCCL watchdog timeout"
    session.ingest_stream("a", SourceKind.SYSLOG, io.BytesIO(
        b"2025-01-01T00:10:00Z a kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"),
        "a/syslog.log")
    third = session.attribute()
    assert third.sub_domain.value == "gpu" and [c.node for c in third.culprit_nodes] == ["a"]
    assert session.attribute().to_json() == third.to_json()
