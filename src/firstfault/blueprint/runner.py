"""Orchestration: discover workloads, collect their evidence, attribute, write results; watch mode; summary."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from firstfault.blueprint.base import Batch, Collector, ContextConnector
from firstfault.blueprint.config import BlueprintConfig
from firstfault.blueprint.connectors import Plan
from firstfault.blueprint.result import AttributionBlueprintResult, ConnectorReport, ReportStatus, Timings
from firstfault.engine import Attribution, ExecutionContext
from firstfault.errors import AttributionError, CollectorError, CollectorTimeout, NothingInScope


@dataclass
class Summary:
    attributed: int = 0
    skipped: int = 0
    failed: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    collector_errors: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)

    def add(self, result: AttributionBlueprintResult) -> None:
        if result.diagnosis is None:
            self.failed += 1
        else:
            self.attributed += 1
            self.outcomes[f"{result.diagnosis.outcome.value} / {result.diagnosis.sub_domain.value}"] += 1
        for report in result.failed_connectors():
            self.collector_errors[f"{report.kind} {report.connector}"] += 1


def _key(ctx: ExecutionContext) -> tuple[str, int]:
    return ctx.workload_id, ctx.attempt


class Runner:
    def __init__(self, plan: Plan, config: BlueprintConfig, console: Console | None = None,
                 progress: bool = False) -> None:
        self.plan = plan
        self.config = config
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.summary = Summary()
        self.done: set[tuple[str, int]] = set()

    # -- one workload -----------------------------------------------------------------------------------
    def attribute(self, ctx: ExecutionContext, found_by: ContextConnector) -> AttributionBlueprintResult:
        """Collect every applicable collector's evidence for one attempt and attribute it."""
        started = time.monotonic()
        reports = [ConnectorReport(connector=found_by.label, kind=found_by.kind, status="ok",
                                   nodes=list(ctx.nodes))]
        diagnosis: Attribution | None = None
        error: str | None = None
        collect_s = attribute_s = 0.0
        try:
            session = self.plan.attributor.open(ctx)
            try:
                for collector, timeout in self.plan.collecting():
                    if collector.applies(ctx):
                        reports.append(_run_collector(collector, ctx, session.add,
                                                      timeout or self.config.collect_timeout.total_seconds()))
                collect_s = time.monotonic() - started
                diagnosis = session.attribute()
                attribute_s = time.monotonic() - started - collect_s
            finally:
                session.close()
        except AttributionError as exc:
            error = str(exc)
        except Exception as exc:  # noqa: BLE001 - one workload failing must not stop the batch
            error = _describe(exc)
        return AttributionBlueprintResult(
            context=ctx, diagnosis=diagnosis, error=error, connector_reports=reports,
            timings=Timings(collect_s=round(collect_s, 4), attribute_s=round(attribute_s, 4),
                            total_s=round(time.monotonic() - started, 4)),
            catalog_hash=diagnosis.catalog_hash if diagnosis else "", mode=self.plan.attributor.mode,
            attributed_at=datetime.now(timezone.utc))

    # -- batches ----------------------------------------------------------------------------------------
    def discover(self) -> list[tuple[ExecutionContext, ContextConnector]]:
        """New finished attempts from every context connector (a failing connector is reported, not fatal)."""
        found: list[tuple[ExecutionContext, ContextConnector]] = []
        for connector in self.plan.contexts:
            try:
                discovery = connector.discover()
            except Exception as exc:  # noqa: BLE001 - one connector failing must not stop the others
                self.summary.problems.append(f"context {connector.label}: {_describe(exc)}")
                continue
            self.summary.problems += [f"context {connector.label}: {p}" for p in discovery.problems]
            found += [(ctx, connector) for ctx in discovery.contexts]
        return found

    def _todo(self, found: list[tuple[ExecutionContext, ContextConnector]]) -> list[tuple[ExecutionContext, ContextConnector]]:
        todo = []
        for ctx, connector in found:
            if _key(ctx) in self.done:
                continue
            if not self.config.force and any(o.already_attributed(ctx) for o in self.plan.outputs):
                self.summary.skipped += 1
                self.done.add(_key(ctx))
                continue
            todo.append((ctx, connector))
        return todo

    def run_once(self) -> int:
        """One discovery pass: attribute every new attempt; returns how many were processed."""
        todo = self._todo(self.discover())
        with self._progress(len(todo)) as advance, ThreadPoolExecutor(max(1, self.config.workers)) as pool:
            futures: dict[Future[AttributionBlueprintResult], ExecutionContext] = {
                pool.submit(self.attribute, ctx, connector): ctx for ctx, connector in todo}
            for future in as_completed(futures):
                result = future.result()
                self._write(result)
                if result.diagnosis is not None:
                    self.done.add(_key(result.context))
                advance(result.context.workload_id)
        return len(todo)

    def watch(self, cycles: int | None = None, sleep: Callable[[float], None] = time.sleep) -> None:
        """Keep discovering newly finished workloads every `interval` (for `cycles` passes, or until Ctrl-C)."""
        done_cycles = 0
        try:
            while cycles is None or done_cycles < cycles:
                self.run_once()
                done_cycles += 1
                if cycles is None or done_cycles < cycles:
                    sleep(self.config.interval.total_seconds())
        except KeyboardInterrupt:
            self.console.print("interrupted: stopping the watch")

    def _write(self, result: AttributionBlueprintResult) -> None:
        self.summary.add(result)
        for output in self.plan.outputs:
            try:
                output.write(result)
            except Exception as exc:  # noqa: BLE001 - an output failing must not lose the other outputs
                self.summary.problems.append(f"output {output.label}: {_describe(exc)}")

    @contextmanager
    def _progress(self, total: int) -> Iterator[Callable[[str], None]]:
        if not self.show_progress or total == 0:
            yield lambda _name: None
            return
        columns = (TextColumn("[bold]attributing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.description}"))
        with Progress(*columns, console=self.console, transient=True) as progress:
            task = progress.add_task("", total=total)
            yield lambda name: progress.update(task, advance=1, description=name)

    # -- summary ----------------------------------------------------------------------------------------
    def print_summary(self) -> None:
        s = self.summary
        self.console.print(f"[bold]firstfault blueprint[/bold]: {s.attributed} attributed, {s.skipped} skipped "
                           f"(already attributed), {s.failed} failed")
        if s.outcomes:
            table = Table("outcome / sub_domain", "workloads")
            for name, count in sorted(s.outcomes.items()):
                table.add_row(name, str(count))
            self.console.print(table)
        for name, count in sorted(s.collector_errors.items()):
            self.console.print(f"[yellow]collector error[/yellow] {name}: {count} workload(s)")
        for problem in s.problems:
            self.console.print(f"[red]problem[/red] {problem}", markup=True, highlight=False)


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
    """Run one collector into the session; its failure becomes its report (a backend failure propagates)."""
    started = time.monotonic()
    count = 0
    nodes: set[str] = set()
    status: ReportStatus = "ok"
    reason = ""
    try:
        batches = collector.collect(ctx)
        for batch in (within(batches, timeout, collector.label) if timeout else batches):
            add(batch)
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
        status, reason = "error", _describe(exc)
    return ConnectorReport(connector=collector.label, kind=collector.kind, status=status, reason=reason,
                           observation_count=count, nodes=sorted(nodes),
                           seconds=round(time.monotonic() - started, 4))


def _describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
