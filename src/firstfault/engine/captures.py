"""Taking the named captures of a line that a scanner reported as matching an extractor."""

from __future__ import annotations

from functools import cache

from firstfault.engine.catalog import Extractor

# Captures of a matching line are taken with Python's `re` when the line is short (fast per call, and its
# backtracking cannot go far on a short line), and with RE2 when it is longer: RE2's time is linear in the line
# whatever the pattern, so a crafted line (a long token before `\S+ invoked`, thousands of near-miss
# prefixes) cannot make the capture step explode. Both find the same match on the catalog's patterns (the
# hyperscan/RE2 common subset); tests/reliability/test_hostile_evidence.py holds the time ratio.
PY_RE_MAX_CHARS = 128


class LinearRegex:
    """A pattern under RE2, answering like `re`'s `search(text).groupdict()`.

    The match runs on the UTF-8 bytes of the line through google-re2's matcher, which gives every group's span
    in one call; its Python-level `Match` objects cost ten times the match itself, so they are used only when
    that matcher is not there (another google-re2 layout)."""

    def __init__(self, pattern: str) -> None:
        import re2  # here: an analysis whose matching lines are all short does not load RE2

        compiled = re2.compile(pattern.encode("utf-8"))
        self._names = sorted((index, name.decode("utf-8")) for name, index in compiled.groupindex.items())
        self._spans = getattr(getattr(compiled, "_regexp", None), "Match", None)
        self._anchor = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)
        self._compiled = compiled

    def groups(self, text: str) -> dict[str, str | None] | None:
        data = text.encode("utf-8", "replace")
        if self._spans is None or self._anchor is None:
            m = self._compiled.search(data)
            if m is None:
                return None
            return {name: (None if m.group(i) is None else m.group(i).decode("utf-8", "replace"))
                    for i, name in self._names}
        spans = self._spans(self._anchor, data, 0, len(data))
        if spans[0][0] < 0:
            return None
        return {name: (None if spans[i][0] < 0 else data[spans[i][0]:spans[i][1]].decode("utf-8", "replace"))
                for i, name in self._names}


@cache
def _linear_regex(pattern: str) -> LinearRegex:
    return LinearRegex(pattern)


def match_groups(extractor: Extractor, text: str) -> dict[str, str | None] | None:
    """The named captures of the extractor's leftmost match in `text` (one line), or None."""
    if len(text) > PY_RE_MAX_CHARS:
        return _linear_regex(extractor.match_re).groups(text)
    m = extractor.regex.search(text)
    return None if m is None else m.groupdict()
