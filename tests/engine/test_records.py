"""The engine's records (engine/records.py) validate and serialise as pydantic does, and `analyze` runs without it.

A record's constructor checks exactly-typed values itself and hands anything else to its twin, a pydantic model
generated from the same fields; its JSON is written without pydantic. Both shortcuts are held to pydantic here:
the constructor to the twin over random field values, the JSON to pydantic-core over every corpus result and
over random values.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pydantic_core
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, TypeAdapter, ValidationError

from firstfault.engine import Engine, model
from firstfault.engine.jsontext import datetime_text, float_text, json_text
from firstfault.engine.records import Record
from firstfault.samples import sample_dirs

CORPUS = Path(__file__).resolve().parents[1] / "data" / "corpus"
UTC = timezone.utc
T0 = datetime(2026, 2, 11, 22, 14, tzinfo=UTC)


def _pydantic_json(value: Any, indent: int | None = None) -> str:
    """What pydantic-core writes for the python-mode dump (its own times, numbers and escapes)."""
    return pydantic_core.to_json(value, indent=indent, inf_nan_mode="null").decode()


def test_every_corpus_result_is_written_as_pydantic_writes_it(engine: Engine) -> None:
    dirs = sorted(p.parent for p in CORPUS.rglob("scenario.toml")) + sorted(sample_dirs().values())
    assert len(dirs) > 100
    for directory in dirs:
        result = engine.analyze_path(directory)
        assert result.to_json() == _pydantic_json(result.model_dump(), indent=2), directory
        assert result.model_dump_json() == _pydantic_json(result.model_dump()), directory
        assert model.Attribution.model_validate_json(result.to_json()) == result


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text()
    | st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones())
    | st.sampled_from([*model.SourceKind, *model.SubDomain, *model.Outcome]),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=8), inner,
                                                                                          max_size=4),
    max_leaves=12)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.sampled_from([None, 2]))
def test_json_text_is_pydantic_cores(value: Any, indent: int | None) -> None:
    assert json_text(value, indent) == _pydantic_json(value, indent)


@settings(max_examples=2000)
@given(st.floats())
def test_floats_are_written_as_pydantic_writes_them(value: float) -> None:
    assert float_text(value) == _pydantic_json(value)


@pytest.mark.parametrize("value", [0.0, -0.0, 1.0, 0.1, 1e15, 1e16, 1.5e16, 1e-4, 1e-5, 1.2e-5, 9.99e-6, 1.5e-7, 5e-324,
                                   1.7976931348623157e308, 123456789.125, 2.0**53, float("nan"), float("-inf")])
def test_the_notation_boundaries_of_floats(value: float) -> None:
    assert float_text(value) == _pydantic_json(value)


@given(st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones()))
def test_times_are_written_as_pydantic_writes_them(value: datetime) -> None:
    text = datetime_text(value)
    if text is not None:  # offsets with seconds are left to pydantic-core
        assert f'"{text}"' == _pydantic_json(value)


# -- construction: the fast path against the twin ------------------------------------------------------------
_PROVENANCE = model.Provenance(origin="n1/syslog.log", line=3, offset=120, labels={"job": "7"})
_EVIDENCE = model.Evidence(source=model.SourceKind.SYSLOG, node="n1", time=T0, text="NVRM: Xid 79",
                           provenance=_PROVENANCE)
_NEXT = model.NextAction(immediate="drain", investigatory=None, summary="Replace the GPU.")
_VALID: dict[type[Record], dict[str, Any]] = {
    model.ExecutionContext: dict(workload_id="w", attempt=1, scheduler="slurm", job_id="7", nodes=["n1", "n2"],
                                 ranks_per_node=8, start_time=T0, end_time=T0 + timedelta(hours=1),
                                 scheduler_state="FAILED", exit_code="1:0", metadata={"k": "v"}),
    model.Provenance: dict(origin="o", line=1, offset=0, labels={}),
    model.MetricSample: dict(name="DCGM_FI_DEV_XID_ERRORS", labels={"gpu": "0"}, value=79.0),
    model.Observation: dict(source=model.SourceKind.APPLOG, node="n1", observed_at=T0, line="x",
                            provenance=_PROVENANCE),
    model.Evidence: dict(source=model.SourceKind.APPLOG, node=None, time=None, time_inferred=True, text="t",
                         provenance=_PROVENANCE),
    model.Event: dict(type="Attribution.node.bad", node="n1", symptom="XID-79", time=T0, last_time=T0, count=2,
                      evidence=_EVIDENCE, attributes={"pci": "0000:9a:00", "n": 3}, values={"pci": ["a"]}, rule="R"),
    model.SymptomView: dict(node="n1", symptom="XID-79", status="bad", role="root", sub_domain=model.SubDomain.GPU,
                            first_time=T0, last_time=T0, count=1, evidence=[_EVIDENCE], attributes={}, rule="R"),
    model.NextAction: dict(immediate="drain", summary="s"),
    model.CulpritNode: dict(node="n1", symptoms=["XID-79"], gpus=["0000:9a:00"], next_action=_NEXT),
    model.RootCause: dict(symptom="XID-79", description="d", sub_domain=model.SubDomain.GPU, node="n1", time=T0,
                          evidence=[_EVIDENCE], rule="R", decided_by="Election"),
    model.Candidate: dict(symptom="s", sub_domain=model.SubDomain.NVLINK, nodes=["n1"], first_time=None,
                          evidence=[]),
    model.TraceEntry: dict(phase="FINAL", rule="R", action="decide", detail="d", node=None),
    model.SourceCoverage: dict(node="n1", source=model.SourceKind.SYSLOG, observations=3, bytes=300, origins=["o"]),
    model.Coverage: dict(nodes_with_evidence=["n1"], nodes_without_evidence=[], nodes_outside_allocation=[],
                         sources=[], missing_sources=[], partial=False, issues=[]),
    model.WorkloadRef: dict(workload_id="w", attempt=0, scheduler="slurm", job_id="", name="", nodes=[],
                            start_time=None, end_time=None, scheduler_state="", exit_code=""),
}
_FIELD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-2, max_value=3), st.integers(), st.floats(), st.text(max_size=4),
    st.text(alphabet="ab", min_size=250, max_size=600), st.sampled_from(["slurm", "pbs", "bad", "root", "applog",
                                                                          "2026-01-01T00:00:00Z", "79", ""]),
    st.datetimes(timezones=st.none() | st.just(UTC) | st.timezones()), st.sampled_from([*model.SourceKind, *model.SubDomain]),
    st.lists(st.text(max_size=3) | st.integers(), max_size=3), st.dictionaries(st.text(max_size=3),
                                                                               st.text(max_size=3) | st.integers(),
                                                                               max_size=2),
    st.sampled_from([_PROVENANCE, _EVIDENCE, _NEXT, _PROVENANCE.model_dump(), {"origin": 5}, [_EVIDENCE], [{}]]))


def _outcome(build: Any) -> Any:
    try:
        return build()
    except ValidationError as exc:
        return [(e["type"], e["loc"], e["msg"]) for e in exc.errors(include_url=False)]


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(_VALID, key=lambda c: c.__name__)), st.data())
def test_a_record_is_built_as_its_twin_validates(cls: type[Record], data: st.DataObject) -> None:
    kwargs = dict(_VALID[cls])
    for name in data.draw(st.lists(st.sampled_from([*cls.__record_fields__, "unknown"]), max_size=3)):
        if data.draw(st.booleans()):
            kwargs[name] = data.draw(_FIELD_VALUES)
        else:
            kwargs.pop(name, None)
    built = _outcome(lambda: cls(**kwargs))
    validated = _outcome(lambda: cls._trusted(cls._twin().model_validate(kwargs).__dict__))
    assert built == validated


def test_records_copy_their_containers_as_pydantic_does() -> None:
    labels = {"job": "7"}
    provenance = model.Provenance(origin="o", labels=labels)
    assert provenance.labels == labels and provenance.labels is not labels
    view = model.SymptomView(**_VALID[model.SymptomView])
    assert view.evidence[0] is _EVIDENCE and view.evidence is not _VALID[model.SymptomView]["evidence"]


# -- records inside pydantic -----------------------------------------------------------------------------------
class _Response(BaseModel):
    context: model.ExecutionContext
    result: model.Attribution | None = None


def test_records_inside_pydantic_models_read_and_write_the_wire_format(engine: Engine) -> None:
    result = engine.analyze_path(sample_dirs()["xid79-fallen-off-bus"])
    context = model.ExecutionContext(**_VALID[model.ExecutionContext])
    response = _Response(context=context, result=result)
    assert response.result is result  # an instance is taken as it is, as pydantic takes its own models
    text = response.model_dump_json()
    assert text == f'{{"context":{context.model_dump_json()},"result":{result.model_dump_json()}}}'
    for strict in (False, True):  # the service validates JSON strictly: times are ISO strings there
        again = TypeAdapter(_Response).validate_json(text, strict=strict)
        assert again.result == result and again.context == context
    assert response.model_dump()["result"] == result.model_dump()
    # a dataclass to pydantic-core: the same fields, but `OmitNone` ones written as null (exclude_if is pydantic's,
    # which its inference of a dataclass does not know)
    inferred = json.loads(pydantic_core.to_json(result))
    assert inferred["coverage"].pop("history") is None
    assert all(culprit.pop("history") is None for culprit in inferred["culprit_nodes"])
    assert inferred == json.loads(pydantic_core.to_json(result.model_dump()))


def test_omit_none_fields_are_written_only_when_set_as_the_twin_writes_them() -> None:
    context = model.ExecutionContext(workload_id="w", nodes=["n1"])
    twin = model.ExecutionContext._twin()
    assert "history" not in context.model_dump() and '"history"' not in context.model_dump_json()
    assert context.model_dump_json() == twin.model_validate(context.model_dump()).model_dump_json()
    finding = {"node": "n1", "symptom": "XID-79", "sub_domain": "gpu", "time": "2025-01-01T00:00:00+01:00",
               "workload_id": "slurm:7"}
    given = model.ExecutionContext(workload_id="w", nodes=["n1"], history={"findings": [finding]})
    assert given.model_dump_json() == twin.model_validate(given.model_dump()).model_dump_json()
    assert json.loads(given.model_dump_json())["history"]["findings"][0]["time"] == "2024-12-31T23:00:00Z"
    assert "history" in TypeAdapter(model.ExecutionContext).json_schema()["properties"]


def test_records_pickle_and_copy() -> None:
    event = model.Event(**_VALID[model.Event])
    assert pickle.loads(pickle.dumps(event)) == event
    moved = event.model_copy(update={"node": "n2"})
    assert moved.node == "n2" and event.node == "n1" and moved.evidence is event.evidence
    with pytest.raises(AttributeError):
        _EVIDENCE.text = "changed"  # type: ignore[misc]


def test_analyze_does_not_import_pydantic(tmp_path: Path) -> None:
    """The start-up budget (docs/benchmarks.md): once the catalog was verified, `analyze` reads, attributes and
    writes its JSON without pydantic."""
    code = ("import sys; from firstfault.cli import main; rc = main(['analyze', '--sample', '--json']); "
            "print(sorted(m for m in sys.modules if m.startswith(('pydantic', 'rich'))), file=sys.stderr); sys.exit(rc)")
    env = {**os.environ, "FIRSTFAULT_CACHE_DIR": str(tmp_path)}
    for _ in range(2):  # the first run verifies the catalog (its metric cases validate through pydantic)
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
        assert run.returncode == 0, run.stderr
    assert run.stderr.strip() == "[]"
