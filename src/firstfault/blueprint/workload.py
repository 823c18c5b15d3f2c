"""One workload attempt: collect every applicable collector's evidence, attribute it; and the same as a task an
executor runs (`run_workload`), in a thread of the driver or as a Ray task on another machine.

A task is plain data (`WorkloadTask`: the run's config, the context in JSON form, who found it) and its answer is
the result in JSON form (`model_dump(mode="json")`: dicts, lists, strings and numbers, what the service's answers
are too). In the driver's own process the task uses the driver's plan (its collectors and attributor,
registered by key while a pass runs); in a worker elsewhere the plan is built from the config, once per worker
process. Outputs are never built in a worker: the driver writes each result it receives, once.
"""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from firstfault.blueprint.attribution import catalog_hash
from firstfault.blueprint.base import Batch, Collector
from firstfault.blueprint.config import BlueprintConfig
from firstfault.blueprint.connectors import Plan, build_worker_plan
from firstfault.blueprint.result import AttributionBlueprintResult, ConnectorReport, ReportStatus, Timings
from firstfault.engine import Attribution, ExecutionContext
from firstfault.errors import AttributionError, CollectorError, CollectorTimeout, ExecutorError, NothingInScope


def attribute_workload(plan: Plan, config: BlueprintConfig, ctx: ExecutionContext, found_by: str,
                       found_kind: str, unresolved: str = "") -> AttributionBlueprintResult:
    """Collect every applicable collector's evidence for one attempt and attribute it (never raises: a failure
    is the result's `error`). `found_by` and `found_kind` name the context connector that reported it; what it
    could not locate (`unresolved`) makes its report an `error`, and the diagnosis partial."""
    started = time.monotonic()
    reports = [_found_report(ctx, found_by, found_kind, unresolved)]
    diagnosis: Attribution | None = None
    error: str | None = None
    collect_s = attribute_s = 0.0
    try:
        session = plan.attributor.open(ctx)
        try:
            for collector, timeout in plan.collecting():
                if collector.applies(ctx):
                    reports.append(_run_collector(collector, ctx, session.add,
                                                  timeout or config.collect_timeout.total_seconds()))
            collect_s = time.monotonic() - started
            diagnosis = with_gaps(session.attribute(), reports)
            attribute_s = time.monotonic() - started - collect_s
        finally:
            session.close()
    except AttributionError as exc:
        error = str(exc)
    except Exception as exc:  # noqa: BLE001 - one workload failing must not stop the batch
        error = describe(exc)
    return AttributionBlueprintResult(
        context=_stored(ctx), diagnosis=diagnosis, error=error, connector_reports=reports,
        timings=Timings(collect_s=round(collect_s, 4), attribute_s=round(attribute_s, 4),
                        total_s=round(time.monotonic() - started, 4)),
        catalog_hash=diagnosis.catalog_hash if diagnosis else "", mode=plan.attributor.mode,
        attributed_at=datetime.now(timezone.utc))


def failed_result(plan: Plan, ctx: ExecutionContext, found_by: str, found_kind: str, unresolved: str,
                  error: str) -> AttributionBlueprintResult:
    """The result of an attempt whose task never answered (the executor gave up on it)."""
    return AttributionBlueprintResult(
        context=_stored(ctx), diagnosis=None, error=error,
        connector_reports=[_found_report(ctx, found_by, found_kind, unresolved)],
        timings=Timings(collect_s=0.0, attribute_s=0.0, total_s=0.0), catalog_hash="", mode=plan.attributor.mode,
        attributed_at=datetime.now(timezone.utc))


def _stored(ctx: ExecutionContext) -> ExecutionContext:
    """The context a result records: without the node history it was given (the diagnosis says what of it counted,
    `coverage.history`, and which findings supported a culprit, `culprit_nodes[].history`)."""
    return ctx if ctx.history is None else ctx.model_copy(update={"history": None})


def _found_report(ctx: ExecutionContext, found_by: str, found_kind: str, unresolved: str) -> ConnectorReport:
    return ConnectorReport(connector=found_by, kind=found_kind, status="error" if unresolved else "ok",
                           reason=unresolved, nodes=list(ctx.nodes))


# -- the task form ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkloadTask:
    """One attempt to attribute, as plain data. `plan_key` names the driver's plan (found in the driver's own
    process); `config` is the run's configuration with the driver's `FIRSTFAULT_*` options written in
    (`connectors.with_environment`), from which a worker elsewhere builds the same collectors; `catalog_hash` is
    the driver's rule catalog when attribution is embedded ("" otherwise), which a worker's must equal."""

    plan_key: str
    config: BlueprintConfig
    catalog_hash: str
    context: dict[str, Any]
    found_by: str
    found_kind: str
    unresolved: str = ""    # what the context connector could not locate for it


# The driver's plans while a pass runs, by key; and the one plan a worker process built (for the latest key).
_PLANS: dict[str, Plan] = {}
_BUILT: dict[str, Plan] = {}
_BUILD_LOCK = threading.Lock()


def new_plan_key() -> str:
    """A key no other driver uses (a worker may serve several drivers over its life)."""
    return uuid.uuid4().hex


def register_plan(key: str, plan: Plan) -> None:
    """Tasks of `key` run in this process use `plan` until `forget_plan(key)`."""
    _PLANS[key] = plan


def forget_plan(key: str) -> None:
    _PLANS.pop(key, None)


def run_workload(task: WorkloadTask) -> dict[str, Any]:
    """Attribute one attempt; the result in JSON form."""
    plan = _plan_for(task)
    ctx = ExecutionContext.model_validate(task.context)
    return attribute_workload(plan, task.config, ctx, task.found_by, task.found_kind,
                              task.unresolved).model_dump(mode="json")


def _plan_for(task: WorkloadTask) -> Plan:
    plan = _PLANS.get(task.plan_key)
    if plan is not None:
        return plan
    with _BUILD_LOCK:
        plan = _BUILT.get(task.plan_key)
        if plan is None:
            plan = build_worker_plan(task.config)
            mine = catalog_hash(plan.attributor)
            if task.catalog_hash and mine != task.catalog_hash:
                plan.close()
                raise ExecutorError(f"this worker's rule catalog ({mine[:12]}) is not the driver's "
                                    f"({task.catalog_hash[:12]}): run the same firstfault version everywhere")
            for old in _BUILT.values():
                old.close()
            _BUILT.clear()
            _BUILT[task.plan_key] = plan
    return plan


# -- collecting ---------------------------------------------------------------------------------------------------
_DONE = object()


def within(batches: Iterable[Batch], timeout: float, label: str) -> Iterator[Batch]:
    """The collector's batches, produced in a thread of their own, for at most `timeout` seconds in all.

    Past the deadline the collector is abandoned (CollectorTimeout): it is told to stop at its next batch, and a
    collector blocked for good (a hung mount, a server that never answers) only keeps its own daemon thread.
    The session is fed by the caller's thread only, so nothing reaches it after the deadline.
    """
    handoff: queue.Queue[Any] = queue.Queue(maxsize=2)
    cancelled = threading.Event()

    def produce() -> None:
        iterator = iter(batches)
        try:
            for batch in iterator:
                while not cancelled.is_set():
                    try:
                        handoff.put((batch, None), timeout=0.2)
                        break
                    except queue.Full:
                        continue
                if cancelled.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the caller, which raises it
            outcome: tuple[Any, BaseException | None] = (_DONE, exc)
        else:
            outcome = (_DONE, None)
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
        while not cancelled.is_set():
            try:
                handoff.put(outcome, timeout=0.2)
                return
            except queue.Full:
                continue

    worker = threading.Thread(target=produce, name=f"collector {label}", daemon=True)
    deadline = time.monotonic() + timeout
    worker.start()
    try:
        while True:
            try:
                item, exc = handoff.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise CollectorTimeout(f"timed out after {timeout:g} s; abandoned (what it delivered before "
                                       "is kept)") from None
            if item is _DONE:
                if exc is not None:
                    raise exc
                return
            yield item
    finally:
        cancelled.set()


def _run_collector(collector: Collector, ctx: ExecutionContext, add: Callable[..., None],
                   timeout: float | None = None) -> ConnectorReport:
    """Run one collector into the session; its failure becomes its report (a backend failure propagates).

    A batch the engine or the service refuses is lost alone: the collector's other batches (other files, other
    nodes) still go in, and the report is an `error` naming the batch's origin and the reason."""
    started = time.monotonic()
    count = 0
    nodes: set[str] = set()
    refused: list[str] = []
    status: ReportStatus = "ok"
    reason = ""
    try:
        batches = collector.collect(ctx)
        for batch in (within(batches, timeout, collector.label) if timeout else batches):
            try:
                add(batch)
            except CollectorError as exc:
                refused.append(f"{batch.origin}: {exc}")
                continue
            count += batch.count()
            nodes |= batch.nodes()
        if count == 0:
            status, reason = "empty", "nothing in the workload's scope"
    except AttributionError:
        raise
    except NothingInScope as exc:
        status, reason = ("ok" if count else "empty"), str(exc)
    except CollectorError as exc:
        status, reason = "error", str(exc)
    except Exception as exc:  # noqa: BLE001 - one collector failing never stops the run or the others
        status, reason = "error", describe(exc)
    if refused:
        also = reason if status == "error" else ""
        status = "error"
        reason = "; ".join(filter(None, [f"{len(refused)} batch(es) refused: {'; '.join(refused[:3])}", also]))
    return ConnectorReport(connector=collector.label, kind=collector.kind, status=status, reason=reason,
                           observation_count=count, nodes=sorted(nodes),
                           seconds=round(time.monotonic() - started, 4))


def with_gaps(diagnosis: Attribution, reports: list[ConnectorReport]) -> Attribution:
    """The diagnosis marked partial when a collector failed to deliver evidence: each failure (its connector
    and reason, which names the file or request) becomes a coverage issue. Unchanged when none failed."""
    gaps = [f"{r.kind} {r.connector}: {r.reason}" for r in reports if r.status == "error"]
    if not gaps:
        return diagnosis
    coverage = diagnosis.coverage.model_copy(update={"partial": True,
                                                     "issues": [*diagnosis.coverage.issues, *gaps]})
    return diagnosis.model_copy(update={"coverage": coverage})


def describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
