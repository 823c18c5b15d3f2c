"""The per-line shortcuts of the reader give what the general code gives (engine/reader.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from firstfault.engine.catalog import load_catalog
from firstfault.engine.reader import _RANK_PREFIX, _emits, _rank_prefix

_prefixes = st.sampled_from(["", " ", "  ", "host ", "[rank3]:", "[rank12]: ", "x [rank0]:", "[1,3]<stdout>:",
                             "[0,12]<stderr>: ", "[rank]:", "[1,3]<stdin>:", "a b [rank1]:", "]:", ">:"])


@settings(max_examples=2000)
@given(_prefixes, st.text(alphabet=" []:<>rank0123456789,stdoue\t", max_size=40), st.integers(0, 300))
def test_the_rank_prefix_shortcut_reads_what_the_pattern_reads(prefix: str, rest: str, padding: int) -> None:
    for text in (prefix + rest, " " * padding + prefix + rest, rest + prefix):
        found = _RANK_PREFIX.match(text, 0, 256)
        assert _rank_prefix(text) == (found and (found.group(1) or found.group(2)))


def test_each_extractor_emits_what_its_definition_says() -> None:
    extractors = load_catalog().extractors
    for extractor, emit in zip(extractors, _emits(extractors), strict=True):
        assert emit.extractor is extractor and emit.attributes == extractor.attributes
        for case in extractor.cases:
            groups = extractor.regex.search(case.line)
            if groups is not None:
                symptom = extractor.render_symptom(groups.groupdict()) if emit.templated else emit.symptom
                assert symptom == extractor.render_symptom(groups.groupdict())
