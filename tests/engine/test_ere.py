"""`firstfault rules patterns --ere` exports patterns that `LC_ALL=C grep -E` matches on the same lines as
Python `re` (the benchmark's grep baseline depends on it)."""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from firstfault.engine import Engine
from firstfault.errors import EreError
from firstfault.samples import samples_root
from firstfault.tools.ere import to_ere
from tests.support.workloads import CORPUS

GREP = shutil.which("grep")
needs_grep = pytest.mark.skipif(GREP is None, reason="grep is not installed")


def _grep_lines(ere: str, path: Path) -> set[int]:
    assert GREP is not None
    proc = subprocess.run([GREP, "-n", "-E", "-e", ere, str(path)], capture_output=True,
                          env={**os.environ, "LC_ALL": "C"}, check=False)
    assert proc.returncode in (0, 1), proc.stderr
    assert not proc.stderr, proc.stderr  # no "stray \" or other warnings: the ERE is clean
    return {int(line.split(b":", 1)[0]) - 1 for line in proc.stdout.splitlines()}


def _write(lines: list[str], path: Path) -> Path:
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return path


CONSTRUCTS = [
    (r"(?P<pci>[0-9a-fA-F:.]{1,24}): (?P<xid>\d{1,3}),", ["0000:9a:00: 79,", "zz: 1,", "0000: 1234,", ": 7,"]),
    (r"(?:^|[\s:\]>])(?P<e>KeyError|ValueError): ", ["KeyError: x", " ValueError: y", "]KeyError: z", "aKeyError: q"]),
    (r"(?i:out of memory)|Non-finite", ["CUDA OUT OF MEMORY", "Out Of Memory", "non-finite", "Non-finite loss"]),
    (r"(?i:[a-c]x\b)", ["Bx", "bX!", "dx", "abx", "cxy"]),
    (r"\bloss: (?:nan|inf)\b", ["loss: nan", "xloss: nan", "loss: nanx", "gloss: inf", "a loss: inf."]),
    (r"[^\]]+\] \S+?:", ["abc] x:", "] x:", "a] :"]),
    (r"[\w.-]+\[\d+\]: segfault", ["py.thon-3[12]: segfault", "[12]: segfault", "a b[1]: segfault"]),
    (r"a[\^]b|c\^d|e[-^]f|g[]x]h|i[^\n]j", ["a^b", "c^d", "e-f", "e^f", "g]h", "gxh", "ixj", "ab"]),
    (r"x{2,3}y|z{2}|w+?v|(?:ab)*q\.\$\(\)\{\|", ["xxy", "xy", "zz", "wwv", "ababq.$(){|", "q.$(){|"]),
    (r"^start|end$|\Bmid", ["start here", "x start", "the end", "end x", "amid", " mid"]),
    (r"[\S]-[\D]-[\W]", ["a-b-!", "a-1-!", " -b-!", "a-b-c"]),
    (r"(?:foo|)bar|baz(?:qux)?$", ["bar", "foobar", "baz", "bazqux", "bazq"]),
]


@needs_grep
@pytest.mark.parametrize(("pattern", "lines"), CONSTRUCTS)
def test_constructs_match_like_re(pattern: str, lines: list[str], tmp_path: Path) -> None:
    path = _write(lines, tmp_path / "lines.txt")
    want = {i for i, line in enumerate(lines) if re.search(pattern, line)}
    assert _grep_lines(to_ere(pattern), path) == want, to_ere(pattern)


@pytest.mark.parametrize("pattern", [r"(?=x)y", r"(x)\1", r"\Afoo", r"foo\Z", r"(?>x)", r"[é-ü]", r"(?s:a.b)",
                                     r"a{1,300}", r"a{300}", r"a{256,}"])
def test_constructs_without_an_ere_form_are_refused(pattern: str) -> None:
    with pytest.raises((EreError, re.error)):
        to_ere(pattern)


def _sample_lines(engine: Engine) -> list[str]:
    lines: set[str] = set()
    for path in list(CORPUS.glob("*/*/*.log")) + list(samples_root().glob("*/*/*.log")):
        lines.update(path.read_text(encoding="utf-8", errors="replace").replace("\r", "").split("\n"))
    for extractor in engine.catalog.extractors:
        lines.update(case.line for case in extractor.cases)
    # grep -E and Python agree on ASCII; the module documents the non-ASCII differences.
    return sorted(line for line in lines if line and line.isascii())


@needs_grep
def test_every_catalog_pattern_matches_the_same_lines_as_re(engine: Engine, tmp_path: Path) -> None:
    """Every extractor, on every distinct line of the corpus, the samples and the inline cases (~70k lines).

    Python `re` runs on the lines grep reports, on the lines hyperscan flags (a superset of the lines `re`
    matches) and on a fixed random fifth of all lines; a disagreement anywhere in those fails the test.
    """
    from firstfault.engine.model import SourceKind

    lines = _sample_lines(engine)
    path = _write(lines, tmp_path / "sample.txt")
    data = "\n".join(lines).encode()
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line.encode()) + 1)
    extractors = engine.compiled.by_source[SourceKind.APPLOG] + [
        e for e in engine.catalog.extractors if SourceKind.APPLOG not in e.sources]
    flagged: dict[str, set[int]] = {e.name: set() for e in extractors}
    import bisect

    for source in (SourceKind.APPLOG, SourceKind.SYSLOG, SourceKind.SCHEDULER):
        for start, _end, ids in engine.compiled.scanners[source].scan(data):
            line = bisect.bisect_right(starts, start) - 1
            for i in ids:
                flagged[engine.compiled.by_source[source][i].name].add(line)
    spot = set(random.Random(3).sample(range(len(lines)), len(lines) // 5))
    for extractor in extractors:
        grep_says = _grep_lines(to_ere(extractor.match_re), path)
        checked = grep_says | flagged[extractor.name] | spot
        re_says = {i for i in checked if extractor.regex.search(lines[i])}
        assert grep_says == re_says, (extractor.name, [lines[i][:200] for i in sorted(grep_says ^ re_says)[:3]])
    assert len(lines) > 20_000


def test_rules_patterns_ere_prints_one_line_per_extractor(engine: Engine, capsys: pytest.CaptureFixture[str]) -> None:
    from firstfault.cli import main

    assert main(["rules", "patterns", "--ere"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(engine.catalog.extractors)
    assert not any(re.search(r"\(\?[:P<i]|\\[dsw]", line) for line in out)
