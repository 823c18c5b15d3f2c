"""Per-batch ingest states, written as bytes and merged in batch order, give byte-identical JSON to one session
that read every batch itself (what a service replica does with another replica's batches), caps included."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from firstfault.engine import Engine, ExecutionContext, SourceKind
from firstfault.engine.evidence import evidence_files, read_context
from firstfault.engine.ingest import MAX_ISSUES, MAX_OUT_OF_ORDER_STREAMS, InexactMerge
from firstfault.engine.params import Params
from firstfault.engine.session import Session
from firstfault.engine.state_format import StateFormatError, StateMismatch, decode_state, encode_state
from firstfault.samples import sample_dirs
from tests.support.workloads import CORPUS, WorkloadFactory

Batch = Callable[[Session], object]
CONTEXT = ExecutionContext(workload_id="w", nodes=[f"n{i}" for i in range(8)],
                           start_time="2025-01-01T00:00:00Z", end_time="2025-01-01T02:00:00Z")
TIMEOUT = ("{t} [rank{r}]: [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, "
           "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out.")
XID = "{t} {node} kernel: NVRM: Xid (PCI:0000:{bus:02x}:00): 79, pid=1, name=x, GPU has fallen off the bus."


def lines_batch(node: str, source: SourceKind, lines: list[str], origin: str, first_line: int = 1) -> Batch:
    return lambda s: s.ingest_lines(node, source, lines, origin, first_line=first_line)


def sequential(engine: Engine, context: ExecutionContext, batches: list[Batch]) -> bytes:
    """One session reads every batch itself (the reference)."""
    session = engine.session(context)
    for batch in batches:
        batch(session)
    return session.attribute().to_json().encode()


def trial_state(engine: Engine, base: Session, batch: Batch) -> bytes:
    """`batch` read into a new session forked from `base`, its state written as bytes."""
    trial = engine.session(base.context)
    trial.fork(base)
    batch(trial)
    return encode_state(trial.export_state(), engine.catalog.content_hash, engine.params)


def merged(engine: Engine, context: ExecutionContext, batches: list[Batch]) -> bytes:
    """Each batch read into a trial session, written, read back and merged in batch order."""
    session = engine.session(context)
    for batch in batches:
        data = trial_state(engine, session, batch)
        session.merge_state(decode_state(data, engine.catalog.content_hash, engine.params))
    return session.attribute().to_json().encode()


def workload_batches(directory: Path, chunk: int) -> tuple[ExecutionContext, list[Batch]]:
    """Every evidence file of a workload directory as batches of `chunk` lines, files interleaved."""
    per_file = []
    for item in evidence_files(directory)[0]:
        text = item.path.read_bytes().decode("utf-8", errors="replace").splitlines()
        origin = f"{item.node}/{item.path.name}"
        per_file.append([lines_batch(item.node, item.source, text[i:i + chunk], origin, i + 1)
                         for i in range(0, len(text), chunk)])
    longest = max((len(f) for f in per_file), default=0)
    return read_context(directory), [f[i] for i in range(longest) for f in per_file if i < len(f)]


@pytest.mark.parametrize("name", sorted(sample_dirs()))
def test_samples_merge_byte_for_byte(engine: Engine, name: str) -> None:
    context, batches = workload_batches(sample_dirs()[name], chunk=7)
    assert len(batches) > 3
    assert merged(engine, context, batches) == sequential(engine, context, batches)


def test_corpus_merges_byte_for_byte(engine: Engine) -> None:
    for path in sorted(CORPUS.iterdir())[:20]:
        context, batches = workload_batches(path, chunk=25)
        assert merged(engine, context, batches) == sequential(engine, context, batches), path.name


def _out_of_order_batches(streams: int) -> list[Batch]:
    """`streams` streams that each go back in time, each in two batches (the second goes back again), and
    lines stamped outside the engine's window (one issue each) between them."""
    batches: list[Batch] = []
    for round_ in range(2):
        for i in range(streams):
            node = f"n{i % 8}"
            lines = [XID.format(t=f"2025-01-01T00:{30 + round_:02d}:00Z", node=node, bus=i % 200),
                     XID.format(t=f"2025-01-01T00:{10 + round_:02d}:00Z", node=node, bus=i % 200),
                     XID.format(t=f"1960-01-{1 + round_:02d}T00:00:{i % 60:02d}Z", node=node, bus=i % 200)]
            batches.append(lines_batch(node, SourceKind.SYSLOG, lines, f"{node}/stream-{i}", first_line=1 + 3 * round_))
    return batches


def test_out_of_order_streams_past_their_cap_merge_byte_for_byte(engine: Engine) -> None:
    batches = _out_of_order_batches(MAX_OUT_OF_ORDER_STREAMS + 20)
    reference = sequential(engine, CONTEXT, batches)
    assert reference.count(b"lines out of time order") == MAX_OUT_OF_ORDER_STREAMS
    assert merged(engine, CONTEXT, batches) == reference
    # Whole batches of many streams each: every cap crossed inside one batch.
    big = [lambda s, part=part: [b(s) for b in part]
           for part in (batches[:50], batches[50:130], batches[130:])]
    assert merged(engine, CONTEXT, big) == sequential(engine, CONTEXT, big) == reference


def test_issues_past_their_cap_merge_byte_for_byte(engine: Engine) -> None:
    outside = [XID.format(t=f"1960-01-01T00:{i // 60:02d}:{i % 60:02d}Z", node="n1", bus=1) for i in range(150)]
    batches = [lines_batch("n1", SourceKind.SYSLOG, outside, f"n1/s{b}") for b in range(3)]
    batches.insert(1, lambda s: [b(s) for b in _out_of_order_batches(10)])
    reference = sequential(engine, CONTEXT, batches)
    assert reference.count(b"outside 1970-01-01") + reference.count(b"out of time order") == MAX_ISSUES
    assert merged(engine, CONTEXT, batches) == reference


def test_a_state_forked_from_an_older_session_merges_exactly_or_is_refused(engine: Engine) -> None:
    """Two replicas read batches of one session at once: each trial forked from the session before the other's
    batch was merged. The later one merges exactly, or is refused (`InexactMerge`) and read again."""
    outside = [XID.format(t=f"1960-01-01T00:{i // 60:02d}:{i % 60:02d}Z", node="n1", bus=1) for i in range(250)]
    first = _out_of_order_batches(3)
    second = [lambda s: [b(s) for b in _out_of_order_batches(3)],
              lines_batch("n1", SourceKind.SYSLOG, outside, "n1/outside")]
    for late in (second[0], lambda s: [b(s) for b in second]):
        base = engine.session(CONTEXT)
        stale = trial_state(engine, base, late)  # forked before `first` was merged
        for batch in first:
            base.merge_state(decode_state(trial_state(engine, base, batch), engine.catalog.content_hash,
                                          engine.params))
        reference = sequential(engine, CONTEXT, [*first, late])
        try:
            base.merge_state(decode_state(stale, engine.catalog.content_hash, engine.params))
        except InexactMerge:
            base.merge_state(decode_state(trial_state(engine, base, late), engine.catalog.content_hash,
                                          engine.params))
        assert base.attribute().to_json().encode() == reference


def test_the_stale_state_that_dropped_issues_is_refused_unchanged(engine: Engine) -> None:
    outside = [XID.format(t=f"1960-01-01T00:{i // 60:02d}:{i % 60:02d}Z", node="n1", bus=1) for i in range(250)]
    go_back = _out_of_order_batches(1)[0]
    base = engine.session(CONTEXT)
    stale = trial_state(engine, base, lambda s: (go_back(s), lines_batch("n1", SourceKind.SYSLOG, outside, "o")(s)))
    go_back(base)  # the session reported that stream meanwhile
    before = base.attribute().to_json()
    with pytest.raises(InexactMerge):
        base.merge_state(decode_state(stale, engine.catalog.content_hash, engine.params))
    assert base.attribute().to_json() == before


def test_event_key_cap_across_batches_merges_exactly_and_one_batch_over_it_is_refused() -> None:
    engine = Engine(params=replace(Params(), max_event_keys=6))
    batches = [lines_batch(f"n{b}", SourceKind.SYSLOG,
                           [XID.format(t=f"2025-01-01T00:{10 + i:02d}:00Z", node=f"n{b}", bus=i) for i in range(3)],
                           f"n{b}/syslog") for b in range(4)]
    reference = sequential(engine, CONTEXT, batches)
    assert b"events dropped: more than 6 distinct event keys" in reference
    assert merged(engine, CONTEXT, batches) == reference
    over = lines_batch("n1", SourceKind.SYSLOG, [XID.format(t="2025-01-01T00:10:00Z", node="n1", bus=i)
                                                 for i in range(9)], "n1/syslog")
    base = engine.session(CONTEXT)
    state = decode_state(trial_state(engine, base, over), engine.catalog.content_hash, engine.params)
    assert state.dropped_keys == 3
    with pytest.raises(InexactMerge, match="event-key cap"):
        base.merge_state(state)
    assert base.event_keys() == 0


def test_analyze_with_workers_reports_out_of_order_files_like_one_process(engine: Engine,
                                                                           make_workload: WorkloadFactory) -> None:
    """Each file is read in a worker of its own; more files than the cap go back in time."""
    nodes = [f"n{n}" for n in range(MAX_OUT_OF_ORDER_STREAMS // 2 + 4)]
    files: dict[str, list[str] | bytes] = {}
    for n, node in enumerate(nodes):
        files[f"{node}/syslog"] = [XID.format(t="2025-01-01T00:30:00Z", node=node, bus=n),
                                   XID.format(t="2025-01-01T00:10:00Z", node=node, bus=n)]
        files[f"{node}/applog"] = [TIMEOUT.format(t="2025-01-01T00:40:00Z", r=n),
                                   TIMEOUT.format(t="2025-01-01T00:20:00Z", r=n)]
    path = make_workload(files, nodes=nodes)
    reference = engine.analyze_path(path).to_json()
    assert reference.count("lines out of time order") == MAX_OUT_OF_ORDER_STREAMS
    assert engine.analyze_path(path, workers=3).to_json() == reference


def test_state_bytes_name_their_catalog_and_version(engine: Engine) -> None:
    session = engine.session(CONTEXT)
    data = trial_state(engine, session, _out_of_order_batches(2)[0])
    catalog = engine.catalog.content_hash
    state = decode_state(data, catalog, engine.params)
    assert encode_state(state, catalog, engine.params) == data
    assert state.out_of_order and state.accs
    with pytest.raises(StateMismatch, match="rule catalog"):
        decode_state(data, "another-catalog", engine.params)
    with pytest.raises(StateMismatch, match="tunables"):
        decode_state(data, catalog, replace(engine.params, max_event_keys=5))
    with pytest.raises(StateFormatError, match="version"):
        decode_state(data.replace(b'"version":1', b'"version":2', 1), catalog, engine.params)
    with pytest.raises(StateFormatError, match="not JSON"):
        decode_state(pickle.dumps(state), catalog, engine.params)
    with pytest.raises(StateFormatError, match="malformed"):
        decode_state(data.replace(b'"dropped_keys":0', b'"dropped_keys":"x"', 1), catalog, engine.params)
