"""Which results are infrastructure faults, and the alerts they raise (pure: a result in, alerts out).

A diagnosis is an infrastructure fault when its outcome is `Fail InfraHW` or `Fail InfraSW` (by default the
sub_domains gpu, nvlink, network, host and storage; a symptom definition may set another outcome, and the
outcome decides) and it names at least one culprit node. Each culprit node raises one alert per GPU it names
(one alert for the node when it names none). An alert is identified by its labels, as in Alertmanager; the
workload it came from is in its annotations, so two workloads hurt by the same fault on the same GPU raise one
alert. A workload whose diagnosis is `Pass` marks its nodes clean from its start (what resolves them).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import quote

from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.engine import Attribution
from firstfault.engine.model import CulpritNode, Outcome
from firstfault.errors import ConfigError

ALERTNAME = "FirstfaultInfrastructureFault"
INFRASTRUCTURE_OUTCOMES = frozenset({Outcome.FAIL_INFRA_HW, Outcome.FAIL_INFRA_SW})
OWN_LABELS = ("alertname", "node", "gpu", "sub_domain", "xid", "next_action", "severity")
_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def is_infrastructure(diagnosis: Attribution | None) -> bool:
    return diagnosis is not None and diagnosis.outcome in INFRASTRUCTURE_OUTCOMES and bool(diagnosis.culprit_nodes)


def is_clean(diagnosis: Attribution | None) -> bool:
    return diagnosis is not None and diagnosis.outcome == Outcome.PASS


def parse_labels(pairs: tuple[str, ...], where: str) -> dict[str, str]:
    """`key=value` texts as extra labels; a ConfigError for a malformed pair, an invalid Prometheus label name,
    or one of the labels the output sets itself."""
    labels: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        name = name.strip()
        if not sep or not value.strip():
            raise ConfigError(f"{where}: option `labels` takes key=value pairs, not {pair!r}")
        if not _LABEL_NAME.fullmatch(name) or name.startswith("__"):
            raise ConfigError(f"{where}: {name!r} is not a label name ([A-Za-z_][A-Za-z0-9_]*, no leading __)")
        if name in OWN_LABELS:
            raise ConfigError(f"{where}: label {name!r} is set by the output itself (its own labels: "
                              f"{', '.join(OWN_LABELS)})")
        labels[name] = value.strip()
    return labels


@dataclass(frozen=True)
class Fault:
    """One alert a result raises: its labels (its identity), its annotations, when the fault began."""

    node: str
    labels: dict[str, str]
    annotations: dict[str, str]
    generator_url: str
    began: datetime

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.labels)


def fingerprint(labels: Mapping[str, str]) -> str:
    return hashlib.sha256(json.dumps(sorted(labels.items())).encode()).hexdigest()[:32]


def faults(result: AttributionBlueprintResult, *, severity: str, extra: Mapping[str, str],
           dashboard_url: str | None) -> list[Fault]:
    """The alerts of one result (none unless it is an infrastructure fault), in culprit then GPU order."""
    d = result.diagnosis
    if d is None or not is_infrastructure(d):
        return []
    url = workload_url(dashboard_url, result) if dashboard_url else ""
    found = []
    for culprit in d.culprit_nodes:
        gpus: list[str | None] = list(culprit.gpus) or [None]
        for gpu in gpus:
            xid = _xid(d, culprit, gpu)
            labels = {"alertname": ALERTNAME, **extra, "node": culprit.node, "sub_domain": d.sub_domain.value,
                      "next_action": culprit.next_action.immediate, "severity": severity}
            labels |= {"gpu": gpu} if gpu else {}
            labels |= {"xid": xid} if xid else {}
            found.append(Fault(culprit.node, labels, _annotations(result, d, culprit, gpu, xid), url,
                               _began(result, d, culprit)))
    return found


def workload_url(dashboard_url: str, result: AttributionBlueprintResult) -> str:
    ctx = result.context
    return f"{dashboard_url.rstrip('/')}/workload?id={quote(ctx.workload_id, safe='')}&attempt={ctx.attempt}"


def _xid(d: Attribution, culprit: CulpritNode, gpu: str | None) -> str | None:
    """The Xid of the culprit's own symptoms (the root's first, then the one on this GPU), if any is an Xid."""
    views = [s for s in d.symptoms if s.node == culprit.node and s.symptom in culprit.symptoms and
             s.attributes.get("xid") not in (None, "")]
    views.sort(key=lambda s: (s.role != "root", gpu is not None and s.attributes.get("pci") != gpu,
                              s.first_time is None, s.first_time or datetime.min))
    return str(views[0].attributes["xid"]) if views else None


def _began(result: AttributionBlueprintResult, d: Attribution, culprit: CulpritNode) -> datetime:
    """The first time of the culprit's symptoms, else the root's, else the workload's end, else attribution time."""
    times = [s.first_time for s in d.symptoms
             if s.node == culprit.node and s.symptom in culprit.symptoms and s.first_time is not None]
    if times:
        return min(times)
    root = d.root_cause
    return (root.time if root and root.node == culprit.node else None) or result.context.end_time \
        or result.attributed_at


def _annotations(result: AttributionBlueprintResult, d: Attribution, culprit: CulpritNode, gpu: str | None,
                 xid: str | None) -> dict[str, str]:
    ctx = result.context
    root = d.root_cause
    if root is not None and root.node == culprit.node:
        cause = f"{root.symptom}: {root.description}"
    else:
        cause = ", ".join(culprit.symptoms)
    what = f"Xid {xid}" if xid else f"{d.sub_domain.value} fault"
    where = culprit.node + (f" GPU {gpu}" if gpu else "")
    job = f"{ctx.scheduler} job {ctx.job_id}" if ctx.job_id else f"workload {ctx.workload_id}"
    action = culprit.next_action
    values = {
        "summary": f"{what} on {where} failed {job}",
        "description": f"{cause.rstrip('.')}. Next action: {action.summary}",
        "root_cause": cause,
        "next_action_summary": action.summary,
        "investigatory": action.investigatory or "",
        "workload_id": ctx.workload_id,
        "attempt": str(ctx.attempt),
        "job_id": ctx.job_id,
        "scheduler": ctx.scheduler,
        "workload_name": ctx.name,
        "terminal_state": d.terminal_state.value,
        "outcome": d.outcome.value,
        "confidence": d.confidence,
        "attributed_at": result.attributed_at.isoformat(),
    }
    return {key: value for key, value in values.items() if value}
