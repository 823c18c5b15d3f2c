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
import resource
import signal
import sys
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from firstfault.blueprint.attribution import catalog_hash
from firstfault.blueprint.base import ContextConnector
from firstfault.blueprint.config import BlueprintConfig
from firstfault.blueprint.connectors import Claiming, HistorySource, Plan, with_environment
from firstfault.blueprint.result import AttributionBlueprintResult
from firstfault.blueprint.workload import (
    WorkloadTask,
    attribute_workload,
    describe,
    failed_result,
    forget_plan,
    new_plan_key,
    register_plan,
    run_workload,
)
from firstfault.engine import ExecutionContext
from firstfault.executor import Executor, LocalExecutor

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
                 progress: bool = False, log: Callable[[str], None] | None = None,
                 executor: Executor | None = None) -> None:
        self.plan = plan
        self.config = config
        # where workloads are attributed: threads here (default), or tasks of a Ray cluster; see workload.py
        self.executor = executor or LocalExecutor()
        self._plan_key = new_plan_key()
        self._catalog_hash = catalog_hash(plan.attributor)
        self._shipped: BlueprintConfig | None = None
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
        """Collect every applicable collector's evidence for one attempt and attribute it, in this thread. What
        the context connector could not locate (`unresolved`) makes its report an `error`, and the diagnosis
        partial."""
        return attribute_workload(self.plan, self.config, self._with_history(ctx), found_by.label, found_by.kind,
                                  unresolved)

    def _with_history(self, ctx: ExecutionContext) -> ExecutionContext:
        """The attempt with the node fault history of the first output that keeps one (a results database). One
        that cannot be read is a problem of the pass, and the attempt is attributed without it."""
        for output in self.plan.outputs:
            if not isinstance(output, HistorySource):
                continue
            try:
                history = output.node_history(ctx)
            except Exception as exc:  # noqa: BLE001 - a history that cannot be read must not stop the attempt
                self.summary.problem(f"output {getattr(output, 'label', '?')}: workload {ctx.workload_id} attempt "
                                     f"{ctx.attempt}: node history cannot be read, attributed without it: "
                                     f"{describe(exc)}")
                continue
            if history is not None:
                return ctx.model_copy(update={"history": history})
        return ctx

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
                self.summary.problem(f"context {connector.label}: {describe(exc)}")
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
                                     f"the outputs: {describe(exc)}")
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
        workers = self.config.workers if self.config.workers > 0 else self.executor.capacity()
        processed = 0
        register_plan(self._plan_key, self.plan)
        try:
            with self._progress(len(todo)) as advance, self.executor.pool(workers, threads=True) as pool:
                waiting = iter(todo)
                running: dict[Future[dict[str, Any]], tuple[ExecutionContext, ContextConnector, str]] = {}

                def start_more() -> None:
                    while len(running) < workers and not self.stop.is_set():
                        item = next(waiting, None)
                        if item is None:
                            return
                        if self._claim(item[0]):
                            running[pool.submit(run_workload, self._task(*item))] = item

                start_more()
                while running:
                    finished, _ = wait(running, return_when=FIRST_COMPLETED)
                    for future in finished:
                        ctx, connector, unresolved = running.pop(future)
                        result = self._result(future, ctx, connector, unresolved)
                        self._write(result)
                        processed += 1
                        if result.diagnosis is not None:
                            self.done[_key(result.context)] = index.get(id(connector), -1)
                        advance(result.context.workload_id)
                    start_more()
        finally:
            forget_plan(self._plan_key)
        self._flush()
        return processed

    def _task(self, ctx: ExecutionContext, found_by: ContextConnector, unresolved: str) -> WorkloadTask:
        if self._shipped is None:   # the driver's environment, written into the config once
            self._shipped = with_environment(self.config)
        return WorkloadTask(plan_key=self._plan_key, config=self._shipped, catalog_hash=self._catalog_hash,
                            context=self._with_history(ctx).model_dump(mode="json"), found_by=found_by.label, found_kind=found_by.kind,
                            unresolved=unresolved)

    def _result(self, future: Future[dict[str, Any]], ctx: ExecutionContext, found_by: ContextConnector,
                unresolved: str) -> AttributionBlueprintResult:
        """The task's result; when the executor gave up on the task (its worker died every time), a failed
        result saying so: the attempt is not done, so a watch attributes it again on its next pass."""
        try:
            return AttributionBlueprintResult.model_validate(future.result())
        except Exception as exc:  # noqa: BLE001 - one lost task must not stop the batch
            return failed_result(self.plan, ctx, found_by.label, found_by.kind, unresolved,
                                 f"executor {self.executor.name}: the task failed: {describe(exc)}")

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
                                     f"cannot be claimed: {describe(exc)}")
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
                self.summary.problem(f"output {output.label}: {describe(exc)}")

    def _flush(self) -> None:
        """The end of a pass: outputs deliver what they still owe (a failed or due alert delivery)."""
        for output in self.plan.outputs:
            try:
                output.flush()
            except Exception as exc:  # noqa: BLE001 - reported like a failed write
                self.summary.problem(f"output {output.label}: {describe(exc)}")

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


