"""Print a round's first-run rows for docs/accuracy.md: `python3 ledger_rows.py REPORT.json ...`.

Each REPORT is the `firstfault eval --json` report of one new batch (blind-NNN), in batch order. Prints one ledger row
per batch (the description and catalog hash left as DESC and HASH for the person who writes them), the round's bold
total row for the ledger, and its row for the short per-round table.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

UNCOMMITTED = ("unknown", "ambiguous")
COUNTED = ("sub_domain_ok", "culprits_ok", "terminal_ok", "evidence_ok")


def pct(share: float) -> str:
    return f"{100 * share:.1f}".rstrip("0").rstrip(".") + "%"


def batch_row(name: str, report: dict, totals: Counter[str]) -> str:
    metrics, scenarios = report["metrics"], report["scenarios"]
    n = len(scenarios)
    committed = [s for s in scenarios if s["got_sub_domain"] not in UNCOMMITTED]
    right = sum(s["sub_domain_ok"] for s in committed)
    with_culprit = round(100 * sum(bool(s["expected_culprits"]) for s in scenarios) / n)
    totals.update({"n": n, "committed": len(committed), "right": right, "fb": metrics["false_infra_blame"],
                   "missed": metrics["missed_hardware"], "culprit_nodes": metrics["expected_culprit_nodes"]})
    totals.update({key: sum(s[key] for s in scenarios) for key in COUNTED})
    precision = pct(right / len(committed)) if committed else "-"
    return (f"| {name} | DESC ({n} scenarios; {with_culprit}% with a culprit node; first run on catalog HASH; not read: "
            f"the final check) | {n} | {pct(metrics['sub_domain_accuracy'])} | {pct(metrics['culprit_exact_match'])} "
            f"| {pct(metrics['terminal_state_accuracy'])} | {pct(metrics['root_evidence_accuracy'])} "
            f"| {metrics['false_infra_blame']} | {metrics['missed_hardware']} of {metrics['expected_culprit_nodes']} "
            f"| {len(committed)} ({round(100 * len(committed) / n)}%) | {precision} |")


def main(paths: list[str]) -> None:
    totals: Counter[str] = Counter()
    names = [re.sub(r"\D", "", Path(p).stem) for p in paths]
    for path, number in zip(paths, names, strict=True):
        print(batch_row(f"b{number}", json.loads(Path(path).read_text()), totals))
    t, label = totals, f"b{names[0]}-b{names[-1]}"
    shares = [pct(t[key] / t["n"]) for key in COUNTED]
    precision = f"{round(100 * t['right'] / t['committed'])}%" if t["committed"] else "-"
    print(f"| **{label} (ROUND)** |  | **{t['n']}** | " + " | ".join(f"**{s}**" for s in shares)
          + f" | **{t['fb']}** | **{t['missed']} of {t['culprit_nodes']}** "
          f"| **{t['committed']} ({round(100 * t['committed'] / t['n'])}%)** | **{precision}** |")
    print(f"| **{label} (the last round)** | **{t['n']}** | **{shares[0]}** | **{shares[1]}** | **{t['fb']}** "
          f"| **{precision}** |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
