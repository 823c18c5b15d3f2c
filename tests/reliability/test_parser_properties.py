"""Property-based tests (hypothesis) of every parser that reads outside input: whatever it is given, it answers
or raises the project's own documented error, never anything else.

| parser | documented error |
|---|---|
| Xid lines and the NVLink5 / Xid 74 decode (engine ingest + pipeline) | none: a result |
| timestamps (`TimestampParser`), across the whole calendar and any text | none: a time in the window or None |
| a session's lines of any time and text (library, file and `raw_text` paths) | none: every line counted |
| `scenario.toml` times across the whole calendar | `EvidenceError` |
| `firstfault.wire`'s structured times | `ValueError` (a 4xx) |
| times people type (`firstfault.timeinput.parse_time`) | `ConfigError` |
| Slurm node lists and accounting (`expand_nodes`, `parse_sacct_text`, `parse_sacct_json`), output file patterns (`expand`) | `SlurmError` |
| the TOML rule loader (`load_catalog`) | `CatalogError` |
| Loki streams: the service's `raw_loki_streams` batches, the Blueprint's `query_range` answers | 4xx `ServiceError` / `CollectorError` |
| Prometheus: the service's `prometheus_metrics` batches, the Blueprint's `query_range` answers | 4xx `ServiceError` / `CollectorError` |
"""

from __future__ import annotations

import io
import json
import string
import tempfile
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from firstfault.blueprint.attribution import ingest_batch
from firstfault.blueprint.collectors.loki import LokiCollector
from firstfault.blueprint.collectors.promql import PromqlCollector
from firstfault.blueprint.config import spec_from_words
from firstfault.blueprint.contexts.slurm import (
    TEXT_FIELDS,
    expand_nodes,
    parse_sacct_json,
    parse_sacct_text,
    parse_scontrol,
)
from firstfault.blueprint.contexts.slurm_output import SEP, PatternJob, expand, parse_squeue
from firstfault.engine import Attribution, ExecutionContext, SourceKind
from firstfault.engine.catalog import load_catalog
from firstfault.engine.inputs import EARLIEST, LATEST
from firstfault.engine.timestamps import TimestampParser
from firstfault.errors import CatalogError, CollectorError, ConfigError, EvidenceError, ServiceError, SlurmError
from firstfault.rules.gpu_driver import decode_nvlink5, decode_xid74
from firstfault.service.http import strict_validate
from firstfault.service.v2 import BATCH
from firstfault.timeinput import parse_time
from firstfault.tools.verify import default_engine, load_verified_catalog
from firstfault.wire import RawTextBatch, bounded_utc, prepare
from tests.reliability import support
from tests.reliability.support import examples

# The fast versions are derandomized (the same examples every run: CI does not fail by chance); --long explores
# afresh with twenty times the examples.
_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow], "derandomize": not support.LONG}
PROPERTIES = settings(max_examples=examples(100, 2000), **_COMMON)
FEW = settings(max_examples=examples(40, 500), **_COMMON)
CONTEXT = ExecutionContext(workload_id="w", nodes=["n1", "n2"], start_time=datetime(2026, 3, 2, 8, tzinfo=UTC),
                           end_time=datetime(2026, 3, 2, 9, tzinfo=UTC), scheduler_state="FAILED")

# Text without lone surrogates (they cannot be encoded; the service replaces them before any parser runs).
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=200)
JSON_SCALARS = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | TEXT
JSON = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=5)
                    | st.dictionaries(TEXT, inner, max_size=5), max_leaves=25)


def _attribute(lines: list[str], source: SourceKind = SourceKind.SYSLOG) -> Attribution:
    session = default_engine().session(CONTEXT)
    session.ingest_lines("n1", source, lines, "fuzz")
    result = session.attribute()
    assert Attribution.model_validate_json(result.to_json()) == result
    return result


# -- Xid lines and their decode ------------------------------------------------------------------------------------
HEX = st.integers(0, 2**36).map(hex)
PCI = st.one_of(st.just("0000:91:00"), st.text("0123456789abcdefABCDEF:.", min_size=1, max_size=30))
XID_TAIL = st.lists(st.one_of(
    st.builds(lambda u, s, link, a, b: f" {u} {s} XC0 i0 Link {link} ({a} {b} 0x0 0x0 0x0 0x0)",
              st.sampled_from(["NETIR_LINK_EVT", "NETIR_BER_EVENT", "RLW_RXPIPE", "NVLW/X", "Q", "NETIR"]),
              st.sampled_from(["Fatal", "Nonfatal"]), st.integers(-5, 99), HEX, HEX),
    st.builds(lambda link, regs: f" NVLink: fatal error detected on link {link}({', '.join(regs)})",
              st.integers(0, 99), st.lists(HEX, min_size=7, max_size=7)),
    st.builds(lambda a, b: f" GPU recovery action changed from 0x0 ({a}) to 0x4 ({b})",
              st.sampled_from(["None", "Drain and Reset", "GPU Reset Required", "x"]), TEXT.filter(lambda t: ")" not in t)),
    st.builds(lambda p, n: f" pid={p}, name={n},", TEXT.filter(lambda t: "," not in t), TEXT.filter(lambda t: "," not in t)),
    st.builds(lambda x: f" caused by previous Xid {x}", st.integers(0, 999)),
    TEXT,
), max_size=4).map("".join)


@PROPERTIES
@given(xid=st.integers(0, 2000), intrinfo=st.integers(0, 2**40), status=st.integers(0, 2**40), unit=TEXT,
       driver=st.none() | st.integers(0, 10_000))
def test_nvlink5_decode_answers_or_says_no_row(xid: int, intrinfo: int, status: int, unit: str, driver: int | None) -> None:
    decoded = decode_nvlink5(xid, intrinfo, status, unit, driver)
    if decoded is not None:
        assert 144 <= xid <= 150 and 0 <= decoded.subcode <= 63
        assert decoded.symptom.startswith(f"XID-{xid}.") and decoded.layout in ("v1", "v2")


@PROPERTIES
@given(st.lists(st.integers(0, 2**64), min_size=7, max_size=7), st.sampled_from([", ", ","]))
def test_xid74_register_decode_never_raises(values: list[int], separator: str) -> None:
    decoded = decode_xid74(separator.join(hex(v) for v in values))
    assert (decoded is None) == (not any(v & 0xFFFFFFFF for v in values))


@FEW
@given(code=st.integers(0, 999) | st.sampled_from([13, 31, 45, 48, 74, 79, 94, 119, 144, 145, 149, 150, 154]),
       pci=PCI, tail=XID_TAIL, prefix=st.sampled_from(["Mar  2 08:10:01 n1 kernel: ", "[12.5] ", "", "\x00"]))
def test_any_xid_line_gives_a_result(code: int, pci: str, tail: str, prefix: str) -> None:
    line = f"{prefix}NVRM: Xid (PCI:{pci}): {code},{tail}"
    result = _attribute([line, line.replace("08:10:01", "08:10:02")])
    for symptom in result.symptoms:
        assert default_engine().catalog.symptom(symptom.symptom)   # every emitted name has a definition


# -- timestamps ------------------------------------------------------------------------------------------------------
REFERENCES = st.none() | st.datetimes(datetime(1971, 1, 1), datetime(2199, 1, 1), timezones=st.just(UTC))


@PROPERTIES
@given(line=st.text(max_size=300) | st.from_regex(r"\A\s*\[?[IWEF\d\[\]a-zA-Z ,:.|<>-]{0,60}", fullmatch=False),
       reference=REFERENCES)
def test_timestamp_parsing_never_raises(line: str, reference: datetime | None) -> None:
    parsed = TimestampParser(reference).parse(line)
    assert parsed is None or parsed.utcoffset() == timedelta(0)


FORMATS = {
    "iso": lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
    "iso-offset": lambda t: (t + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%S.%f+02:00"),
    "syslog": lambda t: t.strftime("%b ") + f"{t.day:>2}" + t.strftime(" %H:%M:%S"),
    "dmesg -T": lambda t: t.strftime("[%a %b ") + f"{t.day:>2}" + t.strftime(" %H:%M:%S %Y]"),
    "glog": lambda t: t.strftime("E%m%d %H:%M:%S.%f"),
    "bracketed": lambda t: t.strftime("[%b %d %Y %H:%M:%S]"),
}


@PROPERTIES
@given(moment=st.datetimes(datetime(1990, 1, 1), datetime(2150, 1, 1), timezones=st.just(UTC)),
       fmt=st.sampled_from(sorted(FORMATS)), prefix=st.sampled_from(["", "[rank3]:", "[1,5]<stderr>:", "12: ",
                                                                     "[trainer0|2]:"]),
       rest=TEXT)
def test_timestamps_round_trip(moment: datetime, fmt: str, prefix: str, rest: str) -> None:
    stamp = FORMATS[fmt](moment)
    parsed = TimestampParser(moment + timedelta(days=40)).parse(f"{prefix}{stamp} {rest}")
    assert parsed is not None
    whole_seconds = fmt in ("syslog", "dmesg -T", "bracketed")
    assert parsed == (moment.replace(microsecond=0) if whole_seconds else moment)


# -- timestamps across the whole calendar, text with lone surrogates ----------------------------------------------
# Every stamp format the engine reads, written with any year (1-9999), any zone offset and any text after it: the
# parser answers with a time inside the engine's window or with none (saying which stamp lay outside), and never
# raises; a session given such lines counts every one of them and its result always encodes.
EDGES = [datetime.min, datetime.max, datetime(1, 1, 1, 0, 30), datetime(9999, 12, 31, 23, 59, 30),
         datetime(1969, 12, 31, 23, 59, 59), datetime(2199, 12, 31, 23, 59, 59), datetime(2200, 1, 1)]
ANY_MOMENT = st.sampled_from(EDGES) | st.datetimes(datetime.min, datetime.max)
ANY_REFERENCE = st.none() | ANY_MOMENT.map(lambda t: t.replace(tzinfo=UTC))
OFFSETS = (st.sampled_from([-(24 * 60 - 1), -60, 0, 60, 24 * 60 - 1]) | st.integers(-(24 * 60 - 1), 24 * 60 - 1)).map(
    lambda m: f"{'+' if m >= 0 else '-'}{abs(m) // 60:02d}:{abs(m) % 60:02d}")
ANY_TEXT = st.text(max_size=120)   # every code point, lone surrogates included
MON = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
DAY = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


def _stamp(t: datetime, fmt: str, offset: str) -> str:
    """`t` in one of the formats `TimestampParser` reads (years zero-padded by hand: strftime does not pad them)."""
    clock = f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}"
    return {
        "iso": f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{clock}.{t.microsecond:06d}Z",
        "iso-offset": f"{t.year:04d}-{t.month:02d}-{t.day:02d}T{clock}{offset}",
        "iso-zoneless": f"{t.year:04d}-{t.month:02d}-{t.day:02d} {clock},{t.microsecond // 1000:03d}",
        "syslog": f"{MON[t.month - 1]} {t.day:>2} {clock}",
        "dmesg -T": f"[{DAY[t.weekday()]} {MON[t.month - 1]} {t.day:>2} {clock} {t.year:04d}]",
        "glog": f"E{t.month:02d}{t.day:02d} {clock}.{t.microsecond:06d}",
        "bracketed": f"[{MON[t.month - 1]} {t.day:02d} {t.year:04d} {clock}]",
    }[fmt]


STAMP_FORMATS = ["iso", "iso-offset", "iso-zoneless", "syslog", "dmesg -T", "glog", "bracketed"]
STAMPED = st.builds(_stamp, ANY_MOMENT, st.sampled_from(STAMP_FORMATS), OFFSETS)


@PROPERTIES
@given(stamp=STAMPED, prefix=st.sampled_from(["", "[rank3]:", "12: ", "  "]), rest=ANY_TEXT, reference=ANY_REFERENCE)
def test_stamps_across_the_calendar_give_a_time_in_the_window_or_none(stamp: str, prefix: str, rest: str,
                                                                       reference: datetime | None) -> None:
    parsed = TimestampParser(reference).parse_stamp(f"{prefix}{stamp} {rest}")
    if parsed.time is not None:
        assert EARLIEST <= parsed.time < LATEST and parsed.time.utcoffset() == timedelta(0)
        assert parsed.outside is None
    elif parsed.outside is not None:
        assert parsed.outside in f"{prefix}{stamp} {rest}"


XID_TEXT = " n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, pid=1, name=x, GPU has fallen off the bus."
EVIDENCE_LINES = st.lists(st.one_of(STAMPED.map(lambda stamp: stamp + XID_TEXT), STAMPED.map(lambda s: f"{s} {{}}"),
                                    ANY_TEXT.map(lambda t: t.replace("\n", " ").replace("\r", " ")),
                                    st.just(XID_TEXT.strip())), min_size=1, max_size=12)


def _no_line_lost(result: Attribution, lines: list[str]) -> None:
    """Every line is counted in the coverage, every Xid line is evidence (undated or not), and the result encodes."""
    assert sum(s.observations for s in result.coverage.sources) == len(lines)
    xid_lines = sum(1 for line in lines if line.endswith(XID_TEXT.strip()))
    assert sum(s.count for s in result.symptoms if s.symptom == "XID-79") == xid_lines
    json.dumps(result.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")


@FEW
@given(lines=EVIDENCE_LINES)
def test_a_session_counts_every_line_of_any_time_and_text(lines: list[str]) -> None:
    """The library path (lines given to a session) and the file path (the same lines as a file's bytes)."""
    session = default_engine().session(CONTEXT)
    session.ingest_lines("n1", SourceKind.SYSLOG, lines, "fuzz")
    _no_line_lost(session.attribute(), lines)
    session = default_engine().session(CONTEXT)
    data = "\n".join(lines).encode("utf-8", "surrogatepass") + b"\n"
    session.ingest_stream("n1", SourceKind.SYSLOG, io.BytesIO(data), "n1/syslog.log")
    _no_line_lost(session.attribute(), lines)


@FEW
@given(lines=EVIDENCE_LINES, node=ANY_TEXT.filter(lambda n: 0 < len(n) <= 255))
def test_raw_text_batches_count_every_line_of_any_time_and_text(lines: list[str], node: str) -> None:
    """The service's and the Blueprint's path: a raw_text batch through firstfault.wire."""
    session = default_engine().session(CONTEXT)
    batch = RawTextBatch(format="raw_text", node=node, source="syslog", text="\n".join(lines) + "\n")
    prepare(batch, 2048).apply(session)
    result = session.attribute()
    assert sum(s.observations for s in result.coverage.sources) == len(lines)
    json.dumps(result.model_dump(mode="json"), ensure_ascii=False).encode("utf-8")


@FEW
@given(start=ANY_MOMENT, end=ANY_MOMENT, offset=OFFSETS, lines=EVIDENCE_LINES)
def test_a_workload_of_any_times_is_analysed_or_refused_with_an_evidence_error(start: datetime, end: datetime,
                                                                             offset: str, lines: list[str]) -> None:
    """scenario.toml's start and end anywhere in the calendar (TOML datetimes with any offset): analyze gives a
    result that counts every line, or an EvidenceError naming the problem."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "scenario.toml").write_text(
            f'id = "w"\n[workload]\nnodes = ["n1"]\nstart_time = {start.isoformat()}{offset}\n'
            f'end_time = {end.isoformat()}Z\n', encoding="utf-8")
        (root / "n1").mkdir()
        (root / "n1" / "syslog.log").write_bytes("\n".join(lines).encode("utf-8", "surrogatepass") + b"\n")
        try:
            result = default_engine().analyze_path(root)
        except EvidenceError as exc:
            assert str(exc)
            return
    _no_line_lost(result, lines)


@PROPERTIES
@given(moment=ANY_MOMENT, offset=OFFSETS)
def test_wire_times_are_in_the_window_or_refused(moment: datetime, offset: str) -> None:
    """firstfault.wire's structured times (bodies, contexts): the engine's window, or a ValueError (a 4xx)."""
    value = datetime.fromisoformat(moment.isoformat() + offset)
    try:
        bounded = bounded_utc(value)
    except ValueError as exc:
        assert "between 1970-01-01 and 2200-01-01" in str(exc)
        return
    assert bounded is not None and EARLIEST <= bounded < LATEST


@PROPERTIES
@given(text=ANY_TEXT | st.builds(lambda n, unit: f"{n}{unit}", st.integers(0, 10**30) | st.floats(0, 1e300),
                                 st.sampled_from(["", "ms", "s", "m", "h", "d", "w"]))
       | ANY_MOMENT.map(datetime.isoformat) | st.builds(lambda t, o: t.isoformat() + o, ANY_MOMENT, OFFSETS))
def test_times_people_type_parse_or_raise_config_error(text: str) -> None:
    """firstfault.timeinput (CLI, configuration, dashboard queries): a time, or a ConfigError naming the text."""
    try:
        value = parse_time(text, now=datetime(2026, 3, 2, tzinfo=UTC))
    except ConfigError as exc:
        assert str(exc)
        return
    assert value.tzinfo is not None


# -- Slurm -----------------------------------------------------------------------------------------------------------
NODE_NAMES = st.from_regex(r"\A[a-z][a-z0-9-]{0,8}[0-9]{1,3}\Z", fullmatch=True)


@PROPERTIES
@given(st.text(max_size=80) | st.from_regex(r"\A[a-z0-9\[\],\-]{0,40}\Z", fullmatch=True))
def test_node_lists_expand_or_raise_slurm_error(text: str) -> None:
    try:
        nodes = expand_nodes(text)
    except SlurmError:
        return
    assert all(isinstance(n, str) and n for n in nodes)


@PROPERTIES
@given(st.lists(NODE_NAMES, min_size=1, max_size=30, unique=True))
def test_node_lists_round_trip(nodes: list[str]) -> None:
    import hostlist

    assert sorted(expand_nodes(hostlist.collect_hostlist(nodes))) == sorted(nodes)


SACCT_ROW = st.lists(st.one_of(st.text(string.printable.replace("\n", ""), max_size=20),
                               st.sampled_from(["FAILED", "COMPLETED", "CANCELLED by 0", "2026-03-02T08:00:00",
                                                "Unknown", "gpu[01-04]", "1:0", "None assigned", "12_3", "9+1"])),
                     min_size=len(TEXT_FIELDS) - 1, max_size=len(TEXT_FIELDS) + 1).map(SEP.join)


@PROPERTIES
@given(st.lists(SACCT_ROW, max_size=5).map("\n".join) | st.text(max_size=300))
def test_sacct_text_parses_or_raises_slurm_error(text: str) -> None:
    problems: list[str] = []
    try:
        records = parse_sacct_text(text, problems)
    except SlurmError:
        return
    assert all(r.job_id is not None for r in records)


SACCT_JOB = st.fixed_dictionaries({}, optional={
    "job_id": st.integers(0, 10**9) | TEXT, "name": JSON, "user": JSON, "nodes": st.sampled_from(["n[1-2]", "x["]) | JSON,
    "state": st.fixed_dictionaries({}, optional={"current": st.sampled_from(["FAILED", "COMPLETED"]) | JSON,
                                                 "reason": JSON}) | JSON,
    "time": st.fixed_dictionaries({}, optional={"start": st.integers(-10, 2**40) | JSON,
                                                "end": st.fixed_dictionaries({"set": st.booleans(),
                                                                              "infinite": st.booleans(),
                                                                              "number": JSON}) | JSON}) | JSON,
    "exit_code": st.fixed_dictionaries({}, optional={"return_code": JSON, "signal": JSON}) | JSON,
    "array": JSON, "het": JSON, "stdout": JSON, "stderr": JSON,
    "steps": st.lists(st.fixed_dictionaries({}, optional={"step": JSON, "nodes": JSON}) | JSON, max_size=2) | JSON,
})


@PROPERTIES
@given(st.fixed_dictionaries({"jobs": st.lists(SACCT_JOB, max_size=4)}) | JSON)
def test_sacct_json_parses_or_raises_slurm_error(doc: Any) -> None:
    problems: list[str] = []
    try:
        records, _ = parse_sacct_json(doc, problems)
    except SlurmError:
        return
    for record in records:
        assert isinstance(record.job_id, str) and isinstance(record.nodes, list)


@PROPERTIES
@given(st.text(max_size=300))
def test_scontrol_output_never_raises(text: str) -> None:
    assert isinstance(parse_scontrol(text), dict)


@PROPERTIES
@given(st.lists(st.lists(st.text(max_size=12) | st.sampled_from(["N/A", "1", "2026-03-02T08:00:00", "/w/%j.out"]),
                         min_size=9, max_size=11).map(SEP.join), max_size=4).map("\n".join) | st.text(max_size=300))
def test_squeue_output_never_raises(text: str) -> None:
    assert all(job.job_id is not None for job in parse_squeue(text))


@PROPERTIES
@given(st.text(st.sampled_from("%\\/ab0123456789AaJjNnsStuxrq.-"), max_size=30),
       st.sampled_from([(22, 5), (24, 11), (25, 11)]), st.sampled_from(["", "3", "x"]), st.sampled_from(["", "/w"]))
def test_output_patterns_expand_or_raise_slurm_error(pattern: str, version: tuple[int, int], task: str,
                                                     work_dir: str) -> None:
    job = PatternJob(job_id="7", array_job_id="5" if task else "", array_task_id=task, user="u", name="n",
                     work_dir=work_dir)
    try:
        path = expand(pattern, job, version)
    except SlurmError:
        return
    assert path == "" or path.startswith("/")


# -- the TOML rule loader --------------------------------------------------------------------------------------------
TOML_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x7f"), max_size=40)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value, ensure_ascii=False)


def to_toml(doc: dict[str, Any]) -> str:
    """A small TOML writer for what the strategies below build (arrays of tables hold inline tables)."""
    lines = []
    for key, value in doc.items():
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            for table in value:
                lines.append(f"[[{key}]]")
                lines += [f"{json.dumps(k, ensure_ascii=False)} = {_toml_value(v)}" for k, v in table.items()]
        else:
            lines.append(f"{json.dumps(key, ensure_ascii=False)} = {_toml_value(value)}")
    return "\n".join(lines) + "\n"


TOML_SCALAR = st.booleans() | st.integers(-2**63, 2**63 - 1) | TOML_TEXT
TOML_VALUE = st.recursive(TOML_SCALAR, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(TOML_TEXT, inner, max_size=3), max_leaves=8)
PATTERNS = st.sampled_from([r"NVRM: Xid \((?P<pci>[0-9a-f:]+)\)", r"(?P<x>a+)+b", r"(?=x)y", r"\1", r"[", "",
                            r"x*", r"(?P<n>\d+) fuzz", r"fuzz marker \d+"]) | TOML_TEXT
EXTRACTOR = st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["FuzzRule", "XidLine", "bad name"]) | TOML_TEXT, "match_re": PATTERNS,
    "source": st.sampled_from(["syslog", "applog", "node_metrics", "tape"]) | st.lists(TOML_TEXT, max_size=2),
    "emit": st.fixed_dictionaries({}, optional={
        "type": st.sampled_from(["bad_node", "interesting_node", "xid", "context", "other"]),
        "symptom": st.sampled_from(["Fuzz symptom", "Fuzz {n}", "{missing}", "XID-{pci}"]) | TOML_TEXT,
        "fact": TOML_TEXT}) | TOML_VALUE,
    "doc": TOML_TEXT, "key": st.lists(st.sampled_from(["n", "pci", "nope"]), max_size=2) | TOML_VALUE,
    "sampled": st.booleans() | TOML_VALUE, "attributes": st.dictionaries(TOML_TEXT, TOML_SCALAR, max_size=2),
    "cases": st.lists(st.fixed_dictionaries({}, optional={
        "expect": st.sampled_from(["bad", "none", "context", "maybe"]), "line": TOML_TEXT | st.just("fuzz marker 7"),
        "symptom": TOML_TEXT, "source": st.sampled_from(["syslog", "tape"]),
        "attributes": st.dictionaries(TOML_TEXT, TOML_SCALAR, max_size=2)}) | TOML_VALUE, max_size=3),
})
SYMPTOM = st.fixed_dictionaries({}, optional={
    "name": st.sampled_from(["Fuzz symptom", "XID-79", "Host OOM kill"]) | TOML_TEXT,
    "sub_domain": st.sampled_from(["gpu", "network", "nowhere"]) | TOML_VALUE,
    "role": st.sampled_from(["root", "symptom", "context", "boss"]) | TOML_VALUE,
    "blame": st.sampled_from(["node", "peer", "none", "everyone"]) | TOML_VALUE,
    "strength": st.integers(-5, 105) | TOML_VALUE, "immediate": TOML_TEXT | TOML_VALUE,
    "action": TOML_TEXT, "doc": TOML_TEXT | TOML_VALUE, "outcome": st.sampled_from(["Fail User", "Win"]) | TOML_VALUE,
})
RULE_FILES = st.fixed_dictionaries({}, optional={
    "symptom": st.lists(SYMPTOM, max_size=2) | TOML_VALUE, "extractor": st.lists(EXTRACTOR, max_size=2) | TOML_VALUE,
    "meta": TOML_VALUE, "surprise": TOML_VALUE,
})


def _load(blob: bytes, verify: bool = False) -> None:
    try:
        (load_verified_catalog if verify else lambda files: load_catalog(extra_files=files))([("fuzz.toml", blob)])
    except CatalogError as exc:
        assert str(exc)


@PROPERTIES
@given(RULE_FILES)
def test_rule_files_load_or_raise_catalog_error(doc: dict[str, Any]) -> None:
    _load(to_toml(doc).encode("utf-8"))


@settings(max_examples=examples(8, 60), **_COMMON)
@given(RULE_FILES)
def test_rule_files_verified_load_or_raise_catalog_error(doc: dict[str, Any]) -> None:
    _load(to_toml(doc).encode("utf-8"), verify=True)   # hyperscan compile and every inline case


@PROPERTIES
@given(st.binary(max_size=300) | TEXT.map(str.encode))
def test_rule_file_bytes_load_or_raise_catalog_error(blob: bytes) -> None:
    _load(blob)


# -- Loki and Prometheus: the service's batch formats ----------------------------------------------------------------
NS = st.integers(-10, 2**64).map(str) | st.integers(0, 7_000_000_000_000_000_000) | TEXT
LOKI_LINE = TEXT | st.builds(lambda body, host: json.dumps({"body": body, "attributes": {"hostname": host}}),
                             JSON, JSON) | st.just("Mar  2 08:10:01 n1 kernel: NVRM: Xid (PCI:0000:91:00): 79, x")
LOKI_STREAM = st.fixed_dictionaries({"values": st.lists(st.lists(NS | LOKI_LINE | JSON, min_size=0, max_size=4)
                                                        | st.tuples(NS, LOKI_LINE).map(list), max_size=4)},
                                    optional={"stream": st.dictionaries(st.sampled_from(["hostname", "job", ""]) | TEXT,
                                                                        TEXT | JSON, max_size=3)})
LOKI_BATCH = st.fixed_dictionaries({"format": st.just("raw_loki_streams"),
                                    "source": st.sampled_from(["syslog", "applog", "metrics"]),
                                    "streams": st.lists(LOKI_STREAM, max_size=3) | st.lists(LOKI_STREAM, max_size=3).map(json.dumps) | JSON},
                                   optional={"node_label": TEXT | JSON, "origin": TEXT | JSON})
PROM_SAMPLE = st.lists(st.floats(allow_nan=False) | st.integers(-2**40, 2**40) | TEXT
                       | st.sampled_from(["NaN", "+Inf", "-Inf", "1e308", "0x10"]), min_size=0, max_size=3)
PROM_SERIES = st.fixed_dictionaries({}, optional={"metric": st.dictionaries(
    st.sampled_from(["__name__", "Hostname", "instance", "gpu"]) | TEXT,
    st.sampled_from(["DCGM_FI_DEV_XID_ERRORS", "n1", "n1:9100", "node_infiniband_link_downed_total"]) | TEXT, max_size=4),
    "values": st.lists(PROM_SAMPLE, max_size=4), "value": PROM_SAMPLE | JSON})
PROM_BATCH = st.fixed_dictionaries({"format": st.just("prometheus_metrics")}, optional={
    "result": st.lists(PROM_SERIES, max_size=3) | JSON, "status": st.sampled_from(["success", "error"]) | JSON,
    "data": st.fixed_dictionaries({"resultType": st.sampled_from(["matrix", "vector", "streams"]),
                                   "result": st.lists(PROM_SERIES, max_size=3)}) | JSON,
    "node_label": TEXT, "warnings": JSON})


def _ingest_wire(batch: Any) -> None:
    """The service's path for one observations body: strict validation (4xx ServiceError), then preparation and
    ingest, which must not fail on anything that validated."""
    try:
        data = json.dumps(batch, allow_nan=False).encode()
    except (ValueError, OverflowError):
        assume(False)
    try:
        parsed = strict_validate(BATCH, data)
    except ServiceError as exc:
        assert 400 <= exc.status < 500
        return
    session = default_engine().session(CONTEXT)
    prepare(parsed, 2048).apply(session)
    session.attribute()


@PROPERTIES
@given(LOKI_BATCH)
def test_loki_batches_are_ingested_or_refused_with_a_4xx(batch: dict[str, Any]) -> None:
    _ingest_wire(batch)


@PROPERTIES
@given(PROM_BATCH)
def test_prometheus_batches_are_ingested_or_refused_with_a_4xx(batch: dict[str, Any]) -> None:
    _ingest_wire(batch)


# -- Loki and Prometheus: the Blueprint's collectors reading query_range answers -------------------------------------
class _Answer:
    def __init__(self, doc: Any) -> None:
        self.doc = doc

    def json(self) -> Any:
        return self.doc


LOKI_ANSWER = st.fixed_dictionaries({"status": st.sampled_from(["success", "error"]) | JSON,
                                     "data": st.fixed_dictionaries({"resultType": st.sampled_from(["streams", "matrix"]),
                                                                    "result": st.lists(LOKI_STREAM, max_size=3) | JSON})
                                     | JSON}) | JSON
PROM_ANSWER = st.fixed_dictionaries({"status": st.sampled_from(["success", "error"]) | JSON,
                                     "data": st.fixed_dictionaries({"resultType": st.sampled_from(["matrix", "vector"]),
                                                                    "result": st.lists(PROM_SERIES, max_size=3) | JSON})
                                     | JSON}) | JSON
WINDOW = {"start_time": datetime(2026, 3, 2, 8, tzinfo=UTC), "end_time": datetime(2026, 3, 2, 9, tzinfo=UTC)}


@lru_cache(maxsize=1)
def loki_collector() -> LokiCollector:
    return LokiCollector(spec_from_words(["logs", "loki", "url", "http://127.0.0.1:9", "limit", "2", "split", "1h"]),
                         timedelta(0))


@lru_cache(maxsize=1)
def promql_collector() -> PromqlCollector:
    return PromqlCollector(spec_from_words(["metrics", "promql", "url", "http://127.0.0.1:9", "defaults", "off",
                                            "query", "xid=DCGM_FI_DEV_XID_ERRORS"]), timedelta(0))


@PROPERTIES
@given(st.lists(LOKI_ANSWER, min_size=1, max_size=3))
def test_loki_answers_are_read_or_the_collector_reports_an_error(answers: list[Any]) -> None:
    collector = loki_collector()
    pages = iter(answers)
    collector.client.get_json = lambda _path, _params=None: next(pages, {"status": "success", "data": {
        "resultType": "streams", "result": []}})
    _collect_and_attribute(collector)


def _collect_and_attribute(collector: Any) -> None:
    """Run the collector into a session and attribute: its answers are read, or it raises CollectorError."""
    ctx = ExecutionContext(workload_id="w", nodes=["n1", "n2"], **WINDOW)
    session = default_engine().session(ctx)
    try:
        for batch in collector.collect(ctx):
            ingest_batch(session, batch)
    except CollectorError:
        pass
    session.attribute()


@PROPERTIES
@given(PROM_ANSWER)
def test_prometheus_answers_are_read_or_the_collector_reports_an_error(answer: Any) -> None:
    collector = promql_collector()
    collector.client.request = lambda *_a, **_k: _Answer(answer)
    _collect_and_attribute(collector)


@pytest.mark.parametrize("text", ["gpu[", "n[3-1]", "n[1-100000000]", "[]"])
def test_bad_node_lists_are_slurm_errors(text: str) -> None:
    with pytest.raises(SlurmError):
        expand_nodes(text)
