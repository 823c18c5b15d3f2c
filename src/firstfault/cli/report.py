"""The human-readable report of `firstfault analyze` (the JSON is the machine interface)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from firstfault.engine.model import Attribution, Evidence

_MAX_LINE = 220


def headline(result: Attribution) -> str:
    """One sentence: what happened, where it began."""
    root = result.root_cause
    if result.sub_domain.value == "none":
        return f"{result.workload.workload_id} completed: no failure evidence."
    if result.sub_domain.value == "ambiguous":
        names = ", ".join(f"{c.symptom} ({c.sub_domain.value})" for c in result.candidates)
        return f"{result.workload.workload_id} {result.terminal_state.value}: ambiguous - several causes fit: {names}."
    if root is None:
        return (f"{result.workload.workload_id} {result.terminal_state.value}: cause unknown "
                "- the available evidence names no fault.")
    culprits = [c.node for c in result.culprit_nodes]
    if root.node and culprits and root.node not in culprits:
        where = f" reported on {root.node}"
    else:
        where = f" on {root.node}" if root.node else ""
    gpu = f" (GPU {root.gpu})" if root.gpu else ""
    blame = (" Culprit: " + ", ".join(c.node for c in result.culprit_nodes) + ".") if result.culprit_nodes else \
        " No node is blamed."
    return (f"{result.workload.workload_id} {result.terminal_state.value}: {result.outcome.value}, "
            f"{result.sub_domain.value} - {root.symptom}{where}{gpu} began it.{blame}")


def _cite(ev: Evidence) -> str:
    where = ev.provenance.origin + (f":{ev.provenance.line}" if ev.provenance.line else "")
    text = ev.text if len(ev.text) <= _MAX_LINE else ev.text[:_MAX_LINE] + " …"
    return f"{where}\n    {text}"


def render(result: Attribution, console: Console) -> None:
    console.print(f"[bold]{escape(headline(result))}[/bold]")
    console.print(f"terminal_state={result.terminal_state.value}  outcome={result.outcome.value}  "
                  f"sub_domain={result.sub_domain.value}")
    root = result.root_cause
    if root:
        console.print(f"\n[bold]Root cause[/bold] ({escape(root.decided_by)}): {escape(root.symptom)} - "
                      f"{escape(root.description)}")
        for ev in root.evidence:
            console.print("  " + escape(_cite(ev)), highlight=False)
    if result.culprit_nodes:
        console.print("\n[bold]Culprit nodes[/bold]")
        for c in result.culprit_nodes:
            gpus = f" GPU {', '.join(c.gpus)}" if c.gpus else ""
            console.print(f"  {escape(c.node)}{escape(gpus)}: {escape(', '.join(c.symptoms))}")
            console.print(f"    next action: {escape(c.next_action.immediate)}"
                          + (f" / {escape(c.next_action.investigatory)}" if c.next_action.investigatory else "")
                          + f" - {escape(c.next_action.summary)}")
            for f in c.history or []:
                gpus = f" GPU {', '.join(f.gpus)}" if f.gpus else ""
                console.print(f"    the same fault before: {escape(f.symptom)}{escape(gpus)} in {escape(f.workload_id)} "
                              f"attempt {f.attempt} at {f.time:%Y-%m-%d %H:%M:%S}Z")
    if result.candidates:
        console.print("\n[bold]Candidates[/bold]")
        for cand in result.candidates:
            console.print(f"  {escape(cand.symptom)} ({cand.sub_domain.value}) on {escape(', '.join(cand.nodes) or '-')}")
    demoted = [s for s in result.symptoms if s.status == "interesting" and s.demoted_by]
    if demoted:
        table = Table(title="Demoted to supporting evidence", show_lines=False, expand=False)
        for col in ("node", "symptom", "count", "by", "first evidence"):
            table.add_column(col)
        for s in demoted[:40]:
            ev = s.evidence[0]
            table.add_row(escape(s.node or "-"), escape(s.symptom), str(s.count), escape(s.demoted_by or ""),
                          escape(f"{ev.provenance.origin}:{ev.provenance.line or ''}"))
        console.print(table)
        if len(demoted) > 40:
            console.print(f"  ... and {len(demoted) - 40} more (see --json)")
    cov = result.coverage
    if cov.partial or cov.issues:
        console.print("\n[bold yellow]Coverage[/bold yellow] (result is partial)" if cov.partial else "\n[bold]Coverage[/bold]")
        for issue in cov.issues:
            console.print(f"  - {escape(issue)}")
    if cov.history is not None:
        h = cov.history
        since = f" since {h.since:%Y-%m-%d %H:%M}Z" if h.since else " (the workload has no time to count back from)"
        console.print(f"\n[bold]Node history[/bold]: {h.counted} of {h.findings} earlier finding(s) on these nodes "
                      f"within {h.window_days} days{since}")
