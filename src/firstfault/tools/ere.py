"""Convert catalog patterns (Python `re` syntax, hyperscan/RE2 subset) to POSIX extended regular expressions.

`firstfault rules patterns --ere` prints the converted catalog so that `grep -E -f` can run the same
signatures (the benchmark's baseline, and a way to look at raw evidence by hand). The conversion works on
Python's own parse tree (`re._parser`), so what is emitted is what Python parsed, not a textual rewrite:

* named and non-capturing groups become plain groups; lazy repeats become greedy ones (grep decides only
  whether a line matches, and a line matches lazily iff it matches greedily);
* `\\d`, `\\s`, `\\w` (and their negations) become `[0-9]`, `[[:space:]]`, `[[:alnum:]_]` (`[^...]`);
* `(?i:...)` is expanded into bracket pairs (`[nN][aA][nN]`), since ERE has no scoped case-insensitivity;
* special characters are escaped for ERE; bracket expressions are re-emitted with `]` first and `-` last.

One GNU extension remains: `\\b` (word boundary) has no POSIX spelling; GNU grep, busybox grep and BSD grep
all accept it. The output is meant for `LC_ALL=C grep -E`: in the C locale character classes are ASCII and
`.` is one byte, which is also how hyperscan (compiled without UTF-8 mode) reads the evidence. Lines with
non-ASCII text can therefore differ from Python `re` in `\\w`/`\\d`/`\\s` and in bounded repeats of `.`.
Constructs outside the catalog's subset (lookaround, backreferences, atomic groups, `\\A`/`\\Z`) raise
`EreError`.
"""

from __future__ import annotations

import re
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]
from typing import Any

from firstfault.errors import EreError

_SPECIAL = set(".[()*+?{|^$\\")
_RE_DUP_MAX = 255  # POSIX's minimum for the largest repeat bound; GNU grep refuses larger ones
_CATEGORY = {
    C.CATEGORY_DIGIT: ("0-9", False),
    C.CATEGORY_NOT_DIGIT: ("0-9", True),
    C.CATEGORY_SPACE: ("[:space:]", False),
    C.CATEGORY_NOT_SPACE: ("[:space:]", True),
    C.CATEGORY_WORD: ("[:alnum:]_", False),
    C.CATEGORY_NOT_WORD: ("[:alnum:]_", True),
}


def to_ere(pattern: str) -> str:
    """The POSIX ERE (for `LC_ALL=C grep -E`) that matches the same lines as `re.search(pattern, line)`."""
    parsed = P.parse(pattern)
    ignorecase = bool(parsed.state.flags & re.IGNORECASE)
    if parsed.state.flags & re.DOTALL:
        raise EreError("the DOTALL flag has no line-oriented meaning")
    return _seq(list(parsed), ignorecase)


def _seq(items: list[tuple[Any, Any]], icase: bool) -> str:
    return "".join(_item(op, av, icase) for op, av in items)


def _is_atom(items: list[tuple[Any, Any]]) -> bool:
    if len(items) != 1:
        return False
    op, av = items[0]
    if op is C.LITERAL:
        return bool(av < 128)  # a multibyte character is several bytes for grep -E in C
    return op in (C.NOT_LITERAL, C.ANY, C.IN, C.SUBPATTERN)


def _item(op: Any, av: Any, icase: bool) -> str:
    if op is C.LITERAL:
        return _literal(av, icase)
    if op is C.NOT_LITERAL:
        return _bracket([(C.LITERAL, av)], negate=True, icase=icase)
    if op is C.ANY:
        return "."
    if op is C.IN:
        items = list(av)
        negate = bool(items) and items[0][0] is C.NEGATE
        return _bracket(items[1:] if negate else items, negate=negate, icase=icase)
    if op is C.BRANCH:
        _, alternatives = av
        return _alternation([list(a) for a in alternatives], icase)
    if op is C.SUBPATTERN:
        _group, add_flags, del_flags, sub = av
        if (add_flags | del_flags) & ~(re.IGNORECASE | re.UNICODE):
            raise EreError("scoped flags other than (?i) have no ERE form")
        inner_icase = (icase or bool(add_flags & re.IGNORECASE)) and not del_flags & re.IGNORECASE
        items = list(sub)
        if len(items) == 1 and items[0][0] is C.BRANCH:
            return _item(items[0][0], items[0][1], inner_icase)
        return f"({_seq(items, inner_icase)})"
    if op in (C.MAX_REPEAT, C.MIN_REPEAT):
        low, high, sub = av
        items = list(sub)
        body = _seq(items, icase)
        if not _is_atom(items) or body.startswith("(") and not body.endswith(")"):
            body = f"({body})"
        return body + _quantifier(low, high)
    if op is C.AT:
        if av is C.AT_BEGINNING:
            return "^"
        if av is C.AT_END:
            return "$"
        if av is C.AT_BOUNDARY:
            return r"\b"
        if av is C.AT_NON_BOUNDARY:
            return r"\B"
        raise EreError(r"\A and \Z have no line-oriented ERE form")
    raise EreError(f"{str(op).lower()} has no ERE form (outside the catalog's hyperscan/RE2 subset)")


def _alternation(alternatives: list[list[tuple[Any, Any]]], icase: bool) -> str:
    parts = [_seq(a, icase) for a in alternatives]
    empty = any(p == "" for p in parts)
    parts = [p for p in parts if p != ""]
    body = "|".join(parts)
    if empty:
        return f"({body})?"
    return f"({body})"


def _quantifier(low: int, high: int) -> str:
    unbounded = high is C.MAXREPEAT or high == C.MAXREPEAT
    if low > _RE_DUP_MAX or not unbounded and high > _RE_DUP_MAX:
        raise EreError(f"repeat bound {low if unbounded else high} exceeds the portable ERE limit "
                       f"(RE_DUP_MAX {_RE_DUP_MAX})")
    if unbounded:
        return {0: "*", 1: "+"}.get(low, f"{{{low},}}")
    if (low, high) == (0, 1):
        return "?"
    if low == high:
        return f"{{{low}}}"
    return f"{{{low},{high}}}"


def _literal(code: int, icase: bool) -> str:
    ch = chr(code)
    if ch == "\n":
        raise EreError("a newline inside a pattern cannot match within one line")
    if icase and ch.isascii() and ch.isalpha():
        return f"[{ch.lower()}{ch.upper()}]"
    if ch in _SPECIAL:
        return "\\" + ch
    return ch


def _bracket(items: list[tuple[Any, Any]], *, negate: bool, icase: bool) -> str:
    chars: set[int] = set()
    ranges: list[tuple[int, int]] = []
    classes: list[str] = []
    negated_classes: list[str] = []
    for op, av in items:
        if op is C.LITERAL:
            chars.add(av)
        elif op is C.RANGE:
            lo, hi = av
            if hi > 127:
                raise EreError("a non-ASCII range has no byte-wise ERE form")
            ranges.append((lo, hi))
        elif op is C.CATEGORY:
            text, neg = _CATEGORY.get(av, (None, False))
            if text is None:
                raise EreError(f"category {av} has no ERE form")
            (negated_classes if neg else classes).append(text)
        else:
            raise EreError(f"{op} inside a character class has no ERE form")
    if icase:
        for c in list(chars):
            ch = chr(c)
            if ch.isascii() and ch.isalpha():
                chars.update((ord(ch.lower()), ord(ch.upper())))
        for lo, hi in list(ranges):
            for a, b, shift in ((65, 90, 32), (97, 122, -32)):
                s, e = max(lo, a), min(hi, b)
                if s <= e:
                    ranges.append((s + shift, e + shift))
    if any(c > 127 for c in chars):
        raise EreError("a non-ASCII character inside a class has no byte-wise ERE form")
    # A line never contains a newline: drop it from positive sets, and from negated ones it is implied.
    chars.discard(10)
    if negated_classes:
        if negate or len(negated_classes) > 1:
            raise EreError("a negated class inside a class has no ERE form")
        positive = _bracket_text(chars, ranges, classes, negate=False)
        outer = f"[^{negated_classes[0]}]"
        return outer if positive is None else f"({positive}|{outer})"
    text = _bracket_text(chars, ranges, classes, negate=negate)
    if text is None:
        if negate:
            return "."
        raise EreError("an empty character class never matches")
    return text


def _bracket_text(chars: set[int], ranges: list[tuple[int, int]], classes: list[str], *, negate: bool) -> str | None:
    if not chars and not ranges and not classes:
        return None
    if not negate and not ranges and not classes and len(chars) == 1:
        return _literal(next(iter(chars)), False)
    # ']' first (literal there), '[' after the ordinary members (so it cannot open '[:'), then '^' (never
    # first), then '-' last (literal there).
    body = "]" if 93 in chars else ""
    body += "".join(chr(c) for c in sorted(chars) if c not in (91, 93, 94, 45))
    body += "".join(f"{_range_char(lo)}-{_range_char(hi)}" for lo, hi in sorted(set(ranges)))
    body += "".join(classes)
    body += "[" if 91 in chars else ""
    body += "^" if 94 in chars else ""
    body += "-" if 45 in chars else ""
    if not negate and body.startswith("^"):
        if body == "^":
            return r"\^"
        body = body[1:] + "^"  # "^-" -> "-^"
    return f"[{'^' if negate else ''}{body}]"


def _range_char(code: int) -> str:
    ch = chr(code)
    if ch in "]-^[":
        raise EreError(f"a range ending in {ch!r} is not portable in ERE")
    return ch
