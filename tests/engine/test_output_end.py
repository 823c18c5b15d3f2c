"""Where each application stream's own output ended (engine/ingest.py `OutputEnd`, read by engine/reader.py):
the input of rule HungBeforeLimitOrCancel's reading of a program that went quiet before a limit ended it."""

from __future__ import annotations

import io
from datetime import UTC, datetime

from firstfault.engine.engine import Engine
from firstfault.engine.model import ExecutionContext, SourceKind
from firstfault.engine.session import Session

_LINES = [
    "2025-01-01T00:05:00Z epoch 1 validation accuracy 0.71",
    "2025-01-01T00:10:00Z saving the model",
    "2025-01-01T00:10:04Z saved",
    "an unstamped line of the program",
    "2025-01-01T01:59:00Z slurmstepd: error: *** STEP 1.0 ON n1 CANCELLED AT 2025-01-01T01:59:00 DUE TO TIME LIMIT ***",
    "2025-01-01T01:59:01Z Traceback (most recent call last):",
    '2025-01-01T01:59:01Z   File "train.py", line 88, in <module>',
]


def _session(engine: Engine, **kwargs: int) -> Session:
    context = ExecutionContext(workload_id="w", nodes=["n1"], start_time=datetime(2025, 1, 1, tzinfo=UTC),
                               end_time=datetime(2025, 1, 1, 2, tzinfo=UTC))
    return Session(context, engine.compiled, engine.params, **kwargs)


def _points(session: Session) -> list[tuple[str, int | None, int | None]]:
    [end] = session.output_ends()
    return [(ev.text, ev.provenance.line, undated_from) for ev, undated_from in end.points]


def test_the_last_stamped_lines_no_extractor_read_are_kept_with_the_first_unstamped_line_after_them(
        engine: Engine) -> None:
    session = _session(engine)
    session.ingest_stream("n1", SourceKind.APPLOG, io.BytesIO("\n".join(_LINES).encode()), "n1/applog.log")
    # the slurmstepd line is an extractor's; the shutdown's two lines one second apart stand as one point; 'saved'
    # and 'saving' are 4 s apart, closer than a point's spacing; line 4 is the unstamped line after both earlier points
    assert _points(session) == [
        ('2025-01-01T01:59:01Z   File "train.py", line 88, in <module>', 7, None),
        ("2025-01-01T00:10:04Z saved", 3, 4),
        ("2025-01-01T00:05:00Z epoch 1 validation accuracy 0.71", 1, 4)]


def test_a_stream_read_in_small_blocks_ends_where_it_ends_read_whole(engine: Engine) -> None:
    whole, blocks = _session(engine), _session(engine, block_size=64)
    for session in (whole, blocks):
        session.ingest_stream("n1", SourceKind.APPLOG, io.BytesIO("\n".join(_LINES).encode()), "n1/applog.log")
    assert _points(blocks) == _points(whole)


def test_of_a_streams_batches_the_later_report_stands(engine: Engine) -> None:
    session = _session(engine)
    session.ingest_lines("n1", SourceKind.APPLOG, _LINES[4:], "loki:n1", first_line=5)
    session.ingest_lines("n1", SourceKind.APPLOG, _LINES[:4], "loki:n1")  # an earlier batch, arriving late
    assert _points(session)[0] == ('2025-01-01T01:59:01Z   File "train.py", line 88, in <module>', 7, None)


def test_a_stream_found_in_local_time_moves_its_output_end_with_its_events(engine: Engine) -> None:
    session = _session(engine)
    lines = ["2025-01-01 02:05:00 epoch 1 done", "2025-01-01 03:55:00 epoch 2 done"]  # UTC+2, no zone
    session.ingest_stream("n1", SourceKind.APPLOG, io.BytesIO("\n".join(lines).encode()), "n1/applog.log")
    [end] = session.output_ends()
    assert [ev.time for ev, _ in end.points] == [datetime(2025, 1, 1, 1, 55, tzinfo=UTC),
                                                 datetime(2025, 1, 1, 0, 5, tzinfo=UTC)]


def test_syslog_streams_say_nothing_about_the_programs_output(engine: Engine) -> None:
    session = _session(engine)
    session.ingest_stream("n1", SourceKind.SYSLOG, io.BytesIO(b"Jan  1 00:10:00 n1 systemd[1]: Started x."), "s")
    assert session.output_ends() == []


def test_a_line_hyperscan_named_but_no_extractor_matched_is_the_programs_own_output(engine: Engine) -> None:
    # IterationGradNormNan is scanned for its tail 'loss: nan' only (scanner.scan_expression); `re` rejects this line,
    # which is no Megatron iteration line, so it stays the last line of the program's output
    session = _session(engine)
    lines = ["2025-01-01T00:05:00Z epoch 1 validation accuracy 0.71", "2025-01-01T00:30:00Z epoch 3 eval loss: nan"]
    session.ingest_stream("n1", SourceKind.APPLOG, io.BytesIO("\n".join(lines).encode()), "n1/applog.log")
    assert [text for text, _, _ in _points(session)] == lines[::-1]
    assert not session.events()
