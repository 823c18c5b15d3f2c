"""The ingest state (`IngestState`) as bytes another process can read: versioned JSON, never pickle.

What a session accumulated from one batch of evidence, written so that any process running the same catalog
and tunables can merge it (`Session.merge_state`) exactly as if it had read that evidence itself. The document
names its format and version, the catalog's content hash and a digest of the engine's tunables; a reader with
another catalog or other tunables refuses it (`StateMismatch`), since the same evidence would give it other
events. Nothing in it is executed: it is data checked field by field on the way in (`StateFormatError`).

Timings (where ingest time went) are not written: they are never part of a result.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from functools import cache
from typing import Annotated, Any

from firstfault.engine.ingest import IngestState, _Acc, evidence_key
from firstfault.engine.model import Evidence, SourceKind
from firstfault.engine.params import Params
from firstfault.engine.timing import Timings
from firstfault.errors import FirstfaultError

FORMAT = "firstfault-ingest-state"
VERSION = 1


class StateFormatError(FirstfaultError):
    """Bytes that are not an ingest state this version of firstfault can read."""


class StateMismatch(StateFormatError):
    """An ingest state written with another rule catalog or other engine tunables: merging it would not give
    what this process would have read from the same evidence."""


def _as_utc(value: datetime | None) -> datetime | None:
    return None if value is None else value.astimezone(timezone.utc)


@cache
def _document() -> Any:
    """The pydantic model a state document is checked against, built on the first decode: writing a state, and
    an analysis that never reads one, do not load pydantic (docs/benchmarks.md, start-up)."""
    from pydantic import AfterValidator, BaseModel, ConfigDict

    time = Annotated[datetime | None, AfterValidator(_as_utc)]

    class _Strict(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)

    class _ProvenanceDoc(_Strict):
        origin: str
        line: int | None
        offset: int | None
        labels: dict[str, str]

    class _EvidenceDoc(_Strict):
        source: SourceKind
        node: str | None
        time: time
        time_inferred: bool
        text: str
        provenance: _ProvenanceDoc

    # type, node, symptom, rule, key captures, count, first, last, evidence, attributes, values per attribute
    acc_doc = tuple[str, str | None, str | None, str, list[str], int, time, time, _EvidenceDoc,
                    dict[str, Any], dict[str, list[str]]]

    class _StateDoc(_Strict):
        format: str
        version: int
        catalog: str
        params: str
        accs: list[acc_doc]
        stats: list[tuple[str, str, int, int, list[str]]]
        issues: list[str]
        notes: list[str]
        out_of_order: list[tuple[str, str]]
        dropped_keys: int
        issues_dropped: int

    return _StateDoc


def params_digest(params: Params) -> str:
    """A digest of the engine's tunables (they change what the same evidence gives)."""
    return hashlib.sha256(repr(params).encode()).hexdigest()[:16]


def encode_state(state: IngestState, catalog_hash: str, params: Params) -> bytes:
    """`state` as a versioned JSON document naming `catalog_hash` and the tunables."""
    doc = {
        "format": FORMAT, "version": VERSION, "catalog": catalog_hash, "params": params_digest(params),
        "accs": [[a.type, a.node, a.symptom, a.rule, list(key[4]), a.count, _time(a.first), _time(a.last),
                  a.evidence.model_dump(mode="json"), a.attributes, {k: list(v) for k, v in a.values.items()}]
                 for key, a in state.accs],
        "stats": [[node, source, observations, nbytes, origins]
                  for (node, source), observations, nbytes, origins in state.stats],
        "issues": state.issues, "notes": state.notes, "out_of_order": state.out_of_order,
        "dropped_keys": state.dropped_keys, "issues_dropped": state.issues_dropped,
    }
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode("utf-8",
                                                                                           "surrogatepass")


def decode_state(data: bytes, catalog_hash: str, params: Params) -> IngestState:
    """The state `encode_state` wrote. `StateMismatch` when it was written with another catalog or tunables,
    `StateFormatError` when it is not such a document."""
    try:
        head = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise StateFormatError(f"an ingest state is not JSON ({exc})") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise StateFormatError("bytes that are not a firstfault ingest state")
    if head.get("version") != VERSION:
        raise StateFormatError(f"an ingest state of format version {head.get('version')!r}; this firstfault reads "
                               f"version {VERSION}: run every process of one deployment on the same firstfault")
    if head.get("catalog") != catalog_hash:
        raise StateMismatch(f"an ingest state written with rule catalog {head.get('catalog')!r}, but this process "
                            f"runs catalog {catalog_hash!r}: every process sharing sessions must run the same "
                            "firstfault version and rules")
    if head.get("params") != params_digest(params):
        raise StateMismatch("an ingest state written with other engine tunables than this process's: every "
                            "process sharing sessions must run with the same settings")
    from pydantic import ValidationError

    try:
        doc = _document().model_validate(head)
    except ValidationError as exc:
        raise StateFormatError(f"a malformed ingest state: {exc.errors()[0]['loc']}: {exc.errors()[0]['msg']}") \
            from None
    return IngestState(
        accs=[_acc(entry) for entry in doc.accs],
        stats=[((node, source), observations, nbytes, origins)
               for node, source, observations, nbytes, origins in doc.stats],
        issues=doc.issues, dropped_keys=doc.dropped_keys, timings=Timings(), notes=doc.notes,
        out_of_order=[(origin, message) for origin, message in doc.out_of_order], issues_dropped=doc.issues_dropped)


def _time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _acc(entry: tuple[Any, ...]) -> tuple[tuple[str, str | None, str | None, str, tuple[str, ...]], _Acc]:
    from pydantic import ValidationError

    kind, node, symptom, rule, key, count, first, last, ev, attributes, values = entry
    try:
        evidence = Evidence.model_validate(ev.model_dump())
    except ValidationError as exc:
        raise StateFormatError(f"an ingest state holds invalid evidence: {exc.errors()[0]['msg']}") from None
    acc = _Acc(type=kind, node=node, symptom=symptom, rule=rule, count=count, first=first, last=last,
               evidence=evidence, evidence_key=evidence_key(evidence), attributes=attributes,
               values={k: dict.fromkeys(v) for k, v in values.items()})
    return (kind, node, symptom, rule, tuple(key)), acc
