"""Catalog-wide properties: every rule documented and tested both ways; one meaning per symptom name; every
symptom referenced by a rule is defined; `firstfault rules test` passes."""

from __future__ import annotations

from firstfault.cli import main
from firstfault.engine.catalog import load_catalog


def test_every_extractor_has_doc_and_both_kinds_of_case() -> None:
    for e in load_catalog().extractors:
        assert e.doc, e.name
        assert any(c.expect != "none" for c in e.cases), e.name
        assert any(c.expect == "none" for c in e.cases), e.name


def test_every_python_rule_has_doc_and_cases() -> None:
    for rule in load_catalog().python_rules:
        assert rule.doc and rule.cases, rule.name


def test_symptom_names_have_one_meaning() -> None:
    catalog = load_catalog()
    # Definitions are unique by construction (duplicates refuse to load); extractors emitting the same symptom
    # must agree on its emit type, so one name never means bad here and context there.
    kinds: dict[str, set[str]] = {}
    for e in catalog.extractors:
        if e.symptom and "{" not in e.symptom:
            kinds.setdefault(e.symptom, set()).add(e.emit_type)
            catalog.symptom(e.symptom)
    assert {name: k for name, k in kinds.items() if len(k) > 1} == {}


def test_rules_test_command_passes(capsys) -> None:
    assert main(["rules", "test"]) == 0
    assert "inline cases passed" in capsys.readouterr().out


def test_rules_list_and_show(capsys) -> None:
    assert main(["rules", "list", "--json"]) == 0
    assert "HandleXidBurstEvents" in capsys.readouterr().out
    assert main(["rules", "show", "NcclIbRetryExceeded"]) == 0
    assert "status=12" in capsys.readouterr().out
    assert main(["rules", "show", "NoSuchRule"]) == 2


def test_rules_patterns_exports_every_pattern(capsys) -> None:
    assert main(["rules", "patterns"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(load_catalog().extractors)


def test_docs_rules_md_is_generated_from_the_catalog() -> None:
    from pathlib import Path

    from firstfault.tools.catalog_docs import render_markdown

    docs = Path(__file__).parents[2] / "docs" / "rules.md"
    assert docs.read_text() == render_markdown(load_catalog()), "run: firstfault rules docs > docs/rules.md"
