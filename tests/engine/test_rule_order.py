"""Rule order within a phase is declared, not implied by where a rule sits: `after=` and then names. A test runs
the corpora under a second order the declarations allow and fails if any result changes (trace order aside), so a
dependency between two rules that nobody wrote down cannot decide an attribution silently."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from firstfault.engine.catalog import load_catalog, order_rules
from firstfault.engine.engine import Engine
from firstfault.engine.rules_api import Phase, PythonRule
from firstfault.errors import CatalogError
from firstfault.samples import samples_root

CORPUS = Path(__file__).parents[1] / "data" / "corpus"


def _rule(name: str, phase: Phase = Phase.REFINE, after: tuple[str, ...] = ()) -> PythonRule:
    return PythonRule(name=name, kind="refiner", phase=phase, doc="", func=lambda ws: None, module="m", after=after)


def test_after_then_names_then_phases() -> None:
    rules = [_rule("Zeta"), _rule("Alpha", after=("Zeta",)), _rule("Mid"), _rule("Early", Phase.CLEAN)]
    assert [r.name for r in order_rules(rules)] == ["Early", "Mid", "Zeta", "Alpha"]
    assert [r.name for r in order_rules(rules, reverse_ties=True)] == ["Early", "Zeta", "Mid", "Alpha"]


@pytest.mark.parametrize(("rules", "message"), [
    ([_rule("A", after=("Nope",))], "not a rule"),
    ([_rule("A", after=("B",)), _rule("B", after=("A",))], "circle"),
    ([_rule("A", after=("B",)), _rule("B", Phase.CLEAN)], "phases already order them"),
])
def test_a_bad_declaration_is_refused(rules: list[PythonRule], message: str) -> None:
    with pytest.raises(CatalogError, match=message):
        order_rules(rules)


def _without_trace_order(doc: str) -> dict[str, object]:
    result = json.loads(doc)
    result["trace"] = sorted(json.dumps(entry, sort_keys=True) for entry in result["trace"])
    return result


def test_no_undeclared_dependency_decides_a_result() -> None:
    declared = load_catalog()
    other = load_catalog()
    other.python_rules = order_rules(other.python_rules, reverse_ties=True)
    assert [r.name for r in other.python_rules] != [r.name for r in declared.python_rules]
    first, second = Engine(declared), Engine(other)
    workloads = sorted(p.parent for p in CORPUS.glob("*/*/scenario.toml") if p.parent.parent.name != "blind-04")
    workloads += sorted(p.parent for p in samples_root().glob("*/scenario.toml"))
    changed = [w.name for w in workloads
               if _without_trace_order(first.analyze_path(w).to_json())
               != _without_trace_order(second.analyze_path(w).to_json())]
    assert changed == [], "rule order changes these results; declare the dependency with after=: " + ", ".join(changed)
