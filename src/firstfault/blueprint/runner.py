"""Orchestration: discover workloads, collect their evidence, attribute, write results; watch mode; summary.

Watch mode runs as a daemon: one JSON line per discovery pass on stderr (`cycle_record`), a stop request
(SIGTERM or SIGINT through `stop_on_signals`) lets the workloads in progress finish and starts no other, and
its memory stays bounded over any number of passes:

- `Runner.done` (the attempts already attributed or skipped) keeps an attempt only while the context
  connector that found it still reports it: after each successful discovery pass of a connector, the attempts
  it no longer reports are forgotten (a Slurm watch pass only looks back `lookback` before the previous pass,
  so an attempt leaves once its end is that far behind; a static directory keeps reporting its workloads, so
  they stay). A connector whose pass failed forgets nothing. So `done` never holds more than the connectors'
  latest discoveries.
- `Summary.problems` keeps the last `PROBLEMS_KEPT` problems; `Summary.problem_count` counts them all.
"""

from __future__ import annotations

import json
import os
import queue
import resource
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from firstfault.blueprint.base import Batch, Collector, ContextConnector
from firstfault.blueprint.config import BlueprintConfig
from firstfault.blueprint.connectors import Claiming, Plan
from firstfault.blueprint.result import AttributionBlueprintResult, ConnectorReport, ReportStatus, Timings
from firstfault.engine import Attribution, ExecutionContext
from firstfault.errors import AttributionError, CollectorError, CollectorTimeout, NothingInScope

# The problems a summary keeps (the most recent ones); a watch that meets a problem every pass stays bounded.
PROBLEMS_KEPT = 100


@dataclass
class Summary:
    attributed: int = 0
    skipped: int = 0
    failed: int = 0
    elsewhere: int = 0   # another driver was attributing it (claimed in a shared results database)
    outcomes: Counter[str] = field(default_factory=Counter)
    collector_errors: Counter[str] = field(default_factory=Counter)
    unresolved: Counter[str] = field(default_factory=Counter)   # per context: attempts missing evidence it names
    problems: deque[str] = field(default_factory=lambda: deque(maxlen=PROBLEMS_KEPT))
    problem_count: int = 0

    def problem(self, text: str) -> None:
        self.problems.append(text)
        self.problem_count += 1

    def add(self, result: AttributionBlueprintResult) -> None:
        if result.diagnosis is None:
            self.failed += 1
        else:
            self.attributed += 1
            self.outcomes[f"{result.diagnosis.outcome.value} / {result.diagnosis.sub_domain.value}"] += 1
        for report in result.failed_connectors():
            counter = self.unresolved if report.kind == "context" else self.collector_errors
            counter[f"{report.kind} {report.connector}"] += 1

    @property
    def incomplete(self) -> bool:
        """Some workload was attributed with evidence missing (what `--strict` fails on)."""
        return bool(self.collector_errors or self.unresolved)


def _key(ctx: ExecutionContext) -> tuple[str, int]:
    return ctx.workload_id, ctx.attempt


# an attempt, the connector that found it, and what that connector could not locate for it ("": nothing)
Found = list[tuple[ExecutionContext, ContextConnector, str]]


class Runner:
    def __init__(self, plan: Plan, config: BlueprintConfig, console: Console | None = None,
                 progress: bool = False, log: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.config = config
        self.console = console or Console(stderr=True)
        self.show_progress = progress
        self.summary = Summary()
        # attempt -> the index (in plan.contexts) of the connector that reported it; see the module docstring
        self.done: dict[tuple[str, int], int] = {}
        self.stop = threading.Event()          # set: finish the workloads in progress, start no other
        self.stopped_by: str | None = None     # the signal's name when a signal asked to stop
        self.cycles = 0
        self.discovered = 0                    # attempts reported by discovery passes, in all
        self._log = log

    # -- one workload -----------------------------------------------------------------------------------
    def attribute(self, ctx: ExecutionContext, found_by: ContextConnector,
                  unresolved: str = "") -> AttributionBlueprintResult:
        """Collect every applicable collector's evidence for one attempt and attribute it. What the context
        connector could not locate (`unresolved`) makes its report an `error`, and the diagnosis partial."""
        started = time.monotonic()
        reports = [ConnectorReport(connector=found_by.label, kind=found_by.kind, status="error" if unresolved else "ok",
                                   reason=unresolved, nodes=list(ctx.nodes))]
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
                diagnosis = with_gaps(session.attribute(), reports)
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
    def discover(self) -> Found:
        """New finished attempts from every context connector (a failing connector is reported, not fatal)."""
        return self._discover()[0]

    def _discover(self) -> tuple[Found, dict[int, set[tuple[str, int]]]]:
        """What every connector found, and per connector whose pass succeeded, the attempts it reported."""
        found: Found = []
        reported: dict[int, set[tuple[str, int]]] = {}
        for index, connector in enumerate(self.plan.contexts):
            try:
                discovery = connector.discover()
            except Exception as exc:  # noqa: BLE001 - one connector failing must not stop the others
                self.summary.problem(f"context {connector.label}: {_describe(exc)}")
                continue
            for problem in discovery.problems:
                self.summary.problem(f"context {connector.label}: {problem}")
            found += [(ctx, connector, discovery.unresolved.get(_key(ctx), "")) for ctx in discovery.contexts]
            reported[index] = {_key(ctx) for ctx in discovery.contexts}
        self.discovered += len(found)
        return found, reported

    def _forget(self, reported: dict[int, set[tuple[str, int]]]) -> None:
        """Forget the attempts a connector found before and no longer reports (it will not report them again)."""
        self.done = {key: index for key, index in self.done.items()
                     if index not in reported or key in reported[index]}

    def _todo(self, found: Found) -> Found:
        todo = []
        index = {id(c): i for i, c in enumerate(self.plan.contexts)}
        for ctx, connector, unresolved in found:
            if _key(ctx) in self.done:
                continue
            try:
                attributed = not self.config.force and any(o.already_attributed(ctx) for o in self.plan.outputs)
            except Exception as exc:  # noqa: BLE001 - a workload the outputs cannot look up fails alone
                self.summary.failed += 1
                self.summary.problem(f"workload {ctx.workload_id} attempt {ctx.attempt}: cannot be looked up in "
                                     f"the outputs: {_describe(exc)}")
                continue
            if attributed:
                self.summary.skipped += 1
                self.done[_key(ctx)] = index.get(id(connector), -1)
                continue
            todo.append((ctx, connector, unresolved))
        return todo

    def run_once(self) -> int:
        """One discovery pass: attribute every new attempt; returns how many were processed. Once `stop` is
        set, no further attempt is started; those in progress are finished and written."""
        found, reported = self._discover()
        self._forget(reported)
        if self.stop.is_set():
            return 0
        todo = self._todo(found)
        index = {id(c): i for i, c in enumerate(self.plan.contexts)}
        workers = max(1, self.config.workers)
        processed = 0
        with self._progress(len(todo)) as advance, ThreadPoolExecutor(workers) as pool:
            waiting = iter(todo)
            running: dict[Future[AttributionBlueprintResult], ContextConnector] = {}

            def start_more() -> None:
                while len(running) < workers and not self.stop.is_set():
                    item = next(waiting, None)
                    if item is None:
                        return
                    if self._claim(item[0]):
                        running[pool.submit(self.attribute, *item)] = item[1]

            start_more()
            while running:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    connector = running.pop(future)
                    result = future.result()
                    self._write(result)
                    processed += 1
                    if result.diagnosis is not None:
                        self.done[_key(result.context)] = index.get(id(connector), -1)
                    advance(result.context.workload_id)
                start_more()
        self._flush()
        return processed

    def _claim(self, ctx: ExecutionContext) -> bool:
        """Claim the attempt in every output several drivers share. False, holding nothing, when another driver
        has it or wrote it meanwhile (counted in `elsewhere`; the next pass looks again) or a claim failed (a
        problem; the next pass tries again)."""
        held: list[Claiming] = []
        for output in self.plan.outputs:
            if not isinstance(output, Claiming):
                continue
            try:
                claimed = output.claim(ctx)
            except Exception as exc:  # noqa: BLE001 - a workload the outputs cannot claim fails alone
                self.summary.failed += 1
                self.summary.problem(f"output {output.label}: workload {ctx.workload_id} attempt {ctx.attempt} "
                                     f"cannot be claimed: {_describe(exc)}")
                claimed = None
            if not claimed:
                self.summary.elsewhere += claimed is False
                for other in held:
                    try:
                        other.release(ctx)
                    except Exception:  # noqa: BLE001 - an unreleased claim runs out by itself
                        pass
                return False
            held.append(output)
        return True

    def watch(self, cycles: int | None = None, sleep: Callable[[float], None] | None = None) -> None:
        """Keep discovering newly finished workloads every `interval` (for `cycles` passes, or until `stop` is
        set or Ctrl-C), with one `cycle_record` line per pass."""
        done_cycles = 0
        try:
            while (cycles is None or done_cycles < cycles) and not self.stop.is_set():
                self.run_cycle()
                done_cycles += 1
                if (cycles is None or done_cycles < cycles) and not self.stop.is_set():
                    if sleep is None:
                        self.stop.wait(self.config.interval.total_seconds())
                    else:
                        sleep(self.config.interval.total_seconds())
        except KeyboardInterrupt:
            self.console.print("interrupted: stopping the watch")
        if self.stopped_by:
            self._emit({"event": "stopped", "signal": self.stopped_by, "cycles": self.cycles})

    def run_cycle(self) -> dict[str, Any]:
        """One pass of the watch (`run_once`) and its log record, which is written and returned."""
        before = (self.summary.attributed, self.summary.failed, self.summary.skipped, self.summary.problem_count,
                  self.summary.elsewhere)
        started = time.monotonic()
        found_before = self.discovered
        self.run_once()
        s = self.summary
        self.cycles += 1
        record = cycle_record(
            cycle=self.cycles, discovered=self.discovered - found_before, attributed=s.attributed - before[0],
            failed=s.failed - before[1], skipped=s.skipped - before[2], problems=s.problem_count - before[3],
            elsewhere=s.elsewhere - before[4], seconds=time.monotonic() - started, known=len(self.done), problems_kept=len(s.problems))
        self._emit(record)
        return record

    def _emit(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, separators=(",", ":"))
        if self._log is not None:
            self._log(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def _write(self, result: AttributionBlueprintResult) -> None:
        self.summary.add(result)
        for output in self.plan.outputs:
            try:
                output.write(result)
            except Exception as exc:  # noqa: BLE001 - an output failing must not lose the other outputs
                self.summary.problem(f"output {output.label}: {_describe(exc)}")

    def _flush(self) -> None:
        """The end of a pass: outputs deliver what they still owe (a failed or due alert delivery)."""
        for output in self.plan.outputs:
            try:
                output.flush()
            except Exception as exc:  # noqa: BLE001 - reported like a failed write
                self.summary.problem(f"output {output.label}: {_describe(exc)}")

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
        elsewhere = f", {s.elsewhere} left to another driver" if s.elsewhere else ""
        self.console.print(f"[bold]firstfault blueprint[/bold]: {s.attributed} attributed, {s.skipped} skipped "
                           f"(already attributed){elsewhere}, {s.failed} failed")
        if s.outcomes:
            table = Table("outcome / sub_domain", "workloads")
            for name, count in sorted(s.outcomes.items()):
                table.add_row(name, str(count))
            self.console.print(table)
        for name, count in sorted(s.collector_errors.items()):
            self.console.print(f"[yellow]collector error[/yellow] {escape(name)}: {count} workload(s)")
        for name, count in sorted(s.unresolved.items()):
            self.console.print(f"[yellow]unresolved[/yellow] {escape(name)}: {count} workload(s) attributed without "
                               "evidence it could not locate (their context reports say what, by job)")
        for problem in s.problems:
            self.console.print(f"[red]problem[/red] {escape(problem)}", markup=True, highlight=False)
        if s.problem_count > len(s.problems):
            self.console.print(f"{s.problem_count} problems in all; the last {len(s.problems)} are shown")


def rss_mb() -> float:
    """The process's resident memory now (Linux), else its peak."""
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cycle_record(*, cycle: int, discovered: int, attributed: int, failed: int, skipped: int, problems: int,
                 seconds: float, known: int, problems_kept: int, elsewhere: int) -> dict[str, Any]:
    """The watch's log line for one pass: what it discovered (every attempt the connectors reported, including
    those attributed before), attributed, failed to attribute, skipped (an output already held them), left to
    another driver (`elsewhere`: claimed in a shared results database) and the problems it met; how long it took; how many attempts `done` remembers and how many problems the summary
    keeps (both bounded); the resident memory."""
    return {"event": "cycle", "time": datetime.now(timezone.utc).isoformat(timespec="seconds"), "cycle": cycle,
            "discovered": discovered, "attributed": attributed, "failed": failed, "skipped": skipped,
            "elsewhere": elsewhere, "problems": problems, "seconds": round(seconds, 3), "known": known, "problems_kept": problems_kept,
            "rss_mb": round(rss_mb(), 1)}


@contextmanager
def stop_on_signals(runner: Runner, signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[None]:
    """While inside: the first SIGTERM or SIGINT sets `runner.stop` (the workloads in progress finish and are
    written, none other starts); a second one acts as before (SIGINT raises KeyboardInterrupt, SIGTERM ends
    the process). Handlers can only be installed from the main thread; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) or signal.SIG_DFL for sig in signals}

    def handle(signum: int, _frame: Any) -> None:
        runner.stopped_by = signal.Signals(signum).name
        runner.stop.set()
        for sig, handler in previous.items():   # a second signal is not ignored
            signal.signal(sig, handler)

    for sig in signals:
        signal.signal(sig, handle)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


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
        status, reason = "error", _describe(exc)
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


def _describe(exc: BaseException) -> str:
    return f"{exc.__class__.__name__}: {exc}" if str(exc) else exc.__class__.__name__
