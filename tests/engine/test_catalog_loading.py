"""Catalog loading: a broken inline case or an invalid pattern refuses to load with a message naming the rule
and the case; every pattern stays in the hyperscan / RE2 common subset."""

from __future__ import annotations

import re

import pytest

from firstfault.engine.catalog import check_pattern_subset, load_catalog
from firstfault.errors import CatalogError
from firstfault.tools.verify import load_verified_catalog

_SYMPTOM = '''
[[symptom]]
name = "Test symptom"
sub_domain = "application"
role = "root"
immediate = "NONE"
action = "none"
doc = "test"
'''


def _extractor(name: str, pattern: str, positive: str, negative: str) -> bytes:
    return (_SYMPTOM + f'''
[[extractor]]
name = "{name}"
doc = "test rule"
match_re = '{pattern}'
emit = {{ type = "bad_node", symptom = "Test symptom" }}

[[extractor.cases]]
expect = "bad"
line = "{positive}"

[[extractor.cases]]
expect = "none"
line = "{negative}"
''').encode()


def test_packaged_catalog_loads_and_every_case_passes() -> None:
    catalog = load_verified_catalog()
    assert catalog.content_hash.startswith("sha256:")
    assert len(catalog.extractors) > 50 and len(catalog.python_rules) > 10


def test_broken_case_names_rule_and_case() -> None:
    bad = _extractor("BrokenCaseRule", r"widget failure \d+", "widget failure: none", "all good")
    with pytest.raises(CatalogError) as err:
        load_verified_catalog([("zz_test.toml", bad)])
    assert "BrokenCaseRule" in str(err.value) and "case 1" in str(err.value)


def test_negative_case_that_matches_is_reported() -> None:
    bad = _extractor("LeakyRule", "widget", "widget failure", "widget ok")
    with pytest.raises(CatalogError) as err:
        load_verified_catalog([("zz_test.toml", bad)])
    assert "LeakyRule" in str(err.value) and "case 2" in str(err.value)


@pytest.mark.parametrize("pattern", [r"foo(?=bar)", r"(a)\\1", r"(?<!x)y", r"[unclosed"])
def test_invalid_or_unsupported_pattern_names_rule(pattern: str) -> None:
    bad = _extractor("UnsupportedPatternRule", pattern, "foobar", "nothing")
    with pytest.raises(CatalogError) as err:
        load_verified_catalog([("zz_test.toml", bad)])
    assert "UnsupportedPatternRule" in str(err.value)


def test_rule_without_negative_case_is_refused() -> None:
    text = (_SYMPTOM + '''
[[extractor]]
name = "OnlyPositive"
doc = "x"
match_re = 'widget'
emit = { type = "bad_node", symptom = "Test symptom" }

[[extractor.cases]]
expect = "bad"
line = "widget"
''').encode()
    with pytest.raises(CatalogError, match="OnlyPositive.*negative"):
        load_verified_catalog([("zz_test.toml", text)])


def test_unknown_symptom_is_refused() -> None:
    text = b'''
[[extractor]]
name = "UndefinedSymptom"
doc = "x"
match_re = 'widget'
emit = { type = "bad_node", symptom = "No such symptom" }

[[extractor.cases]]
expect = "bad"
line = "widget"

[[extractor.cases]]
expect = "none"
line = "gadget"
'''
    with pytest.raises(CatalogError, match="No such symptom"):
        load_verified_catalog([("zz_test.toml", text)])


def test_duplicate_symptom_definition_is_refused() -> None:
    text = b'''
[[symptom]]
name = "XID-79"
sub_domain = "application"
role = "root"
immediate = "NONE"
action = "none"
doc = "a different meaning for an existing name"
'''
    with pytest.raises(CatalogError, match="already defined"):
        load_verified_catalog([("zz_test.toml", text)])


def test_every_pattern_is_in_the_hyperscan_re2_common_subset() -> None:
    re2 = pytest.importorskip("re2")
    for extractor in load_catalog().extractors:
        assert check_pattern_subset(extractor.match_re) is None, extractor.name
        re2.compile(extractor.match_re)  # raises on anything RE2 does not support
        re.compile(extractor.match_re)


def test_subset_check_rejects_lookaround_and_backreferences() -> None:
    assert check_pattern_subset(r"a(?=b)") is not None
    assert check_pattern_subset(r"(a)\1") is not None
    assert check_pattern_subset(r"x*") is not None  # matches the empty string
    assert check_pattern_subset(r"NVRM: Xid \((?P<pci>[^)]+)\)") is None


def _one_extractor(name: str, pattern: str, matching: str, not_matching: str) -> bytes:
    """A catalog file of one extractor (an existing symptom) with a positive and a negative case."""
    return f"""
[[extractor]]
name = "{name}"
doc = "a test extractor"
match_re = '{pattern}'
emit = {{ type = "interesting_node", symptom = "PCIe AER corrected errors" }}
[[extractor.cases]]
expect = "interesting"
line = "{matching}"
[[extractor.cases]]
expect = "none"
line = "{not_matching}"
""".encode()


def test_rules_test_still_compiles_every_pattern_exactly() -> None:
    """The engine scans with prefilter databases, which accept patterns exact hyperscan refuses; the authoring
    check (`rules test`, strict) still refuses them."""
    from firstfault.tools.verify import check_catalog

    text = _one_extractor("HugeRepeat", r"QQQ (?:[a-z0-9]{1,30}[0-9]{1,30}[a-f]{1,30}){1,10}X", "QQQ a1aX", "QQQ X")
    catalog = load_verified_catalog([("zz_test.toml", text)])
    assert check_catalog(catalog) == []
    with pytest.raises(CatalogError, match="HugeRepeat.*does not compile"):
        check_catalog(load_verified_catalog([("zz_test.toml", text)]), strict=True)


def test_rules_test_refuses_a_pattern_without_a_posix_ere_form() -> None:
    """A repeat bound above RE_DUP_MAX (255) compiles in hyperscan and re, but `rules patterns --ere` cannot export it
    (grep refuses it): the authoring check says so, naming the extractor."""
    from firstfault.tools.verify import check_catalog

    text = _one_extractor("LongGap", r"QQQ [^\n]{0,300}ZZZ", "QQQ x ZZZ", "QQQ x")
    catalog = load_verified_catalog([("zz_test.toml", text)])
    assert check_catalog(catalog) == []
    failures = check_catalog(catalog, strict=True)
    assert [(f.rule, f.case) for f in failures] == [("LongGap", "POSIX ERE form")]
    assert "RE_DUP_MAX" in failures[0].message


@pytest.mark.parametrize(("original", "misspelt", "where", "bad_key"), [
    ('line = "widget failure 7"', 'line = "widget failure 7"\natributes = { code = "7" }', "case 1", "atributes"),
    ('type = "bad_node"', 'type = "bad_node", symptm = "x"', "emit", "symptm"),
    ('doc = "test rule"', 'doc = "test rule"\nmatch = "widget"', "extractor StrictRule", "match"),
    ('sub_domain = "application"', 'sub_domain = "application"\nstrenght = 40', "symptom 'Test symptom'", "strenght"),
])
def test_an_unknown_key_is_an_error_naming_file_table_and_key(original: str, misspelt: str, where: str,
                                                              bad_key: str) -> None:
    """A typo must not silently delete a field: `atributes` in a case would otherwise drop its assertion."""
    text = _extractor("StrictRule", r"widget failure (?P<code>\d+)", "widget failure 7", "all good").decode()
    assert original in text
    with pytest.raises(CatalogError) as err:
        load_catalog(extra_files=[("zz_strict.toml", text.replace(original, misspelt, 1).encode())])
    message = str(err.value)
    assert "zz_strict.toml" in message and where in message and repr(bad_key) in message


def test_rule_case_expectations_are_typed() -> None:
    from firstfault.engine.rules_api import Expect, RuleCase

    with pytest.raises(TypeError):
        Expect(fierd=True)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="sub_domain"):
        Expect(sub_domain="gpu_hardware")
    with pytest.raises(TypeError, match="Expect"):
        RuleCase(evidence={}, expect={"fired": True})  # type: ignore[arg-type]
    assert Expect(fired=True, demoted=["XID-45"]).as_dict() == {"fired": True, "demoted": ["XID-45"]}


def test_a_verified_catalog_is_not_verified_again_until_it_changes(tmp_path, monkeypatch) -> None:
    """The CLI's start-up: the first engine over a catalog runs every inline case and leaves a snapshot of the catalog
    in the cache; the next one over the same catalog and engine code loads that snapshot as data (no TOML parsed, no
    case run) and gets the same catalog; a changed catalog is verified anew (a broken case still fails)."""
    from firstfault.tools import verify

    first = verify.verified_engine(cache_dir=tmp_path)
    assert len(list(tmp_path.glob("verified-*.json"))) == 1

    def must_not_run(*_args: object) -> None:
        raise AssertionError("parsed or verified again")

    monkeypatch.setattr(verify, "verify_catalog", must_not_run)
    monkeypatch.setattr(verify, "parse_catalog", must_not_run)
    again = verify.verified_engine(cache_dir=tmp_path).catalog
    monkeypatch.undo()
    assert again.content_hash == first.catalog.content_hash and again.files == first.catalog.files
    assert again.symptoms == first.catalog.symptoms and again.extractors == first.catalog.extractors
    assert [r.name for r in again.python_rules] == [r.name for r in first.catalog.python_rules]
    bad = _extractor("BrokenCaseRule", r"widget failure \d+", "widget failure: none", "all good")
    with pytest.raises(CatalogError, match="BrokenCaseRule"):
        verify.verified_engine(load_catalog(extra_files=[("zz_test.toml", bad)]), cache_dir=tmp_path)


def test_a_damaged_snapshot_is_read_as_no_snapshot(tmp_path) -> None:
    from firstfault.tools import verify

    verify.verified_engine(cache_dir=tmp_path)
    (snapshot,) = tmp_path.glob("verified-*.json")
    for damage in (b'{"catalog": {"content_hash": "sha256:0", "symptoms": []}}', b'{"catalog": {"symptoms": 5}}',
                   b"[1, 2]", b"not json"):
        snapshot.write_bytes(damage)
        assert verify.verified_engine(cache_dir=tmp_path).catalog.extractors == load_catalog().extractors
