"""The streaming scanner finds exactly the lines Python's re finds, with correct line numbers, in bounded
memory, across block boundaries and over-long lines."""

from __future__ import annotations

import io
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import pytest

from firstfault.engine.scanner import DEFAULT_BLOCK_SIZE, DEFAULT_MAX_LINE_BYTES, SourceScanner, required_literals

PATTERNS = [r"NVRM: Xid \(PCI:[0-9a-f:]+\): \d+", r"NCCL WARN .*status=12", r"(?i:out of memory)"]


# The straightforward block reader (a fresh bytes object per read, `carry + data`), kept as the oracle that
# the engine's buffer-reusing `read_blocks` is checked against.
@dataclass
class Block:
    """Complete lines (joined by \\n, no trailing newline) starting at line number `first_line`."""

    data: bytes
    first_line: int
    start_offset: int
    truncated_lines: list[int] = field(default_factory=list)


def iter_blocks(stream: BinaryIO, *, block_size: int = DEFAULT_BLOCK_SIZE,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[Block]:
    """Yield blocks of whole lines from a binary stream, with bounded memory."""
    carry = b""
    carry_offset = 0
    offset = 0  # bytes consumed from the stream so far
    line_no = 1
    skipping = False  # inside an over-long line whose head was already emitted
    while True:
        data = stream.read(block_size)
        if not data:
            break
        read_at = offset
        offset += len(data)
        if skipping:
            nl = data.find(b"\n")
            if nl < 0:
                continue
            data = data[nl + 1:]
            read_at += nl + 1
            skipping = False
            carry_offset = read_at
        if not carry:
            carry_offset = read_at
        buf = carry + data if carry else data
        last_nl = buf.rfind(b"\n")
        if last_nl < 0:
            if len(buf) > max_line_bytes:
                yield Block(buf[:max_line_bytes], line_no, carry_offset, [line_no])
                line_no += 1
                carry = b""
                skipping = True
            else:
                carry = buf
            continue
        block = buf[:last_nl]
        carry = buf[last_nl + 1:]
        yield Block(block, line_no, carry_offset)
        line_no += block.count(b"\n") + 1
        carry_offset += last_nl + 1
    if carry and not skipping:
        yield Block(carry, line_no, carry_offset)


def _reference(lines: list[str]) -> list[tuple[int, list[int]]]:
    out = []
    for n, line in enumerate(lines, start=1):
        ids = [i for i, p in enumerate(PATTERNS) if re.search(p, line)]
        if ids:
            out.append((n, ids))
    return out


def _scan(data: bytes, block_size: int, max_line: int = 1 << 20) -> list[tuple[int, list[int]]]:
    scanner = SourceScanner(PATTERNS)
    found = []
    for block in iter_blocks(io.BytesIO(data), block_size=block_size, max_line_bytes=max_line):
        lines_before = 0
        pos = 0
        for start, _end, ids in scanner.scan(block.data):
            lines_before += block.data.count(b"\n", pos, start)
            pos = start
            found.append((block.first_line + lines_before, ids))
    return found


def test_matches_reference_for_many_block_sizes() -> None:
    rnd = random.Random(7)
    vocab = ["iteration 5 loss 2.1", "n1:1:1 [0] NCCL WARN NET/IB : x status=12 y", "NCCL INFO ok",
             "kernel: NVRM: Xid (PCI:0000:9a:00): 79, pid=1", "CUDA error: OUT OF MEMORY here", "", "x" * 300]
    lines = [rnd.choice(vocab) for _ in range(3000)]
    data = ("\n".join(lines) + "\n").encode()
    want = _reference(lines)
    for block_size in (17, 64, 1000, 4096, 1 << 20):
        assert _scan(data, block_size) == want, block_size


def test_file_without_final_newline() -> None:
    assert _scan(b"a\nNVRM: Xid (PCI:0000:01:00): 48", 4) == [(2, [0])]


def test_over_long_line_is_truncated_and_numbering_continues() -> None:
    data = b"y" * 10_000 + b"\nNCCL WARN a status=12\n"
    blocks = list(iter_blocks(io.BytesIO(data), block_size=1024, max_line_bytes=2048))
    assert blocks[0].truncated_lines == [1] and len(blocks[0].data) == 2048
    assert _scan(data, 1024, max_line=2048) == [(2, [1])]


def test_offsets_point_at_line_starts() -> None:
    data = b"aa\nbbb\ncccc\n"
    blocks = list(iter_blocks(io.BytesIO(data), block_size=4))
    for block in blocks:
        assert data[block.start_offset:block.start_offset + len(block.data)] == block.data


def _blocks_via_read_blocks(data: bytes, block_size: int, max_line: int) -> list[tuple[bytes, int, bool]]:
    from firstfault.engine.scanner import read_blocks

    return [(bytes(buf[:length]), offset, truncated)
            for buf, length, offset, truncated in read_blocks(io.BytesIO(data), block_size=block_size,
                                                              max_line_bytes=max_line)]


class _NoReadinto(io.RawIOBase):
    """A stream with read() only (the reader falls back to copying)."""

    def __init__(self, data: bytes) -> None:
        self._inner = io.BytesIO(data)

    def read(self, n: int = -1) -> bytes:
        return self._inner.read(n)

    readinto = None  # type: ignore[assignment]


def test_read_blocks_yields_the_blocks_of_iter_blocks() -> None:
    rnd = random.Random(11)
    for trial in range(40):
        lines = [rnd.choice([b"", b"a", b"NCCL WARN status=12", b"x" * rnd.randrange(1, 900)]) for _ in range(200)]
        data = b"\n".join(lines) + (b"\n" if trial % 2 else b"")
        if trial % 5 == 0:
            data = b"y" * 5000 + b"\n" + data + b"z" * 3000  # over-long first and last lines
        for block_size, max_line in ((7, 64), (64, 64), (100, 4096), (1000, 300), (4096, 1 << 20)):
            want = [(b.data, b.start_offset, bool(b.truncated_lines))
                    for b in iter_blocks(io.BytesIO(data), block_size=block_size, max_line_bytes=max_line)]
            assert _blocks_via_read_blocks(data, block_size, max_line) == want, (trial, block_size, max_line)


def test_read_blocks_without_readinto() -> None:
    from firstfault.engine.scanner import read_blocks

    data = b"one\ntwo\nthree"
    got = [bytes(buf[:n]) for buf, n, _, _ in read_blocks(_NoReadinto(data), block_size=5, max_line_bytes=64)]
    assert got == [b.data for b in iter_blocks(io.BytesIO(data), block_size=5, max_line_bytes=64)]


def test_scan_expression_only_for_a_selective_tail_after_a_top_level_gap() -> None:
    from firstfault.engine.scanner import scan_expression

    assert scan_expression(r"\biteration\s+\d+ \|.*(?:grad norm|loss): (?P<v>nan|inf)\b") == \
        r"(?:grad norm|loss): (?P<v>nan|inf)\b"
    assert scan_expression(r"a.*?bcdefghijkl") == "bcdefghijkl"
    # each top-level branch is cut on its own; bounded gaps count, and a branch without one is kept whole
    assert scan_expression(r"a.+bcdefghijkl|zz") == "bcdefghijkl|zz"
    assert scan_expression(r"\b(?:cp|mv): [^\n]{0,250}?: (?P<e>Input/output error|Stale file handle)\b|zz") == \
        r": (?P<e>Input/output error|Stale file handle)\b|zz"
    # of several gaps, the cut whose tail needs the most selective literals: not the one leaving a 3-letter literal
    assert scan_expression(r"world size[^\n]{0,60}?must be divisible by[^\n]{0,40}?(?:parallel|\w*_tp\b)") == \
        r"must be divisible by[^\n]{0,40}?(?:parallel|\w*_tp\b)"
    for pattern in (r"abc.*de", r"(?i)abc.*defghijkl", r"x[.*]yzzzzzzzzzz", r"ab\.*cdefghijkl",
                    r"a(.*)bcdefghijkl", r"abc.*(?:x|)", r"x.{0,120}"):
        assert scan_expression(pattern) is None, pattern


def test_scanner_with_a_scan_expression_finds_every_line_re_finds() -> None:
    pattern = r"\biteration\s+\d+\s*/\s*\d+ \|.*(?:grad norm|loss): (?P<value>nan|inf|-inf)\b"
    scanner = SourceScanner([pattern, r"NCCL WARN"])
    assert scanner.exact == [False, False]  # prefilter databases: re confirms every hit
    lines = ["iteration 5/ 10 | lm loss: 2.1 | grad norm: nan |", "lm loss: nan", "iteration 5/10 | loss: 2",
             "NCCL WARN x", " iteration 7 / 9 |x| loss: -inf", "iterationloss: nan"]
    data = "\n".join(lines).encode()
    regex = re.compile(pattern)
    flagged = {data[:start].count(b"\n") for start, _end, ids in scanner.scan(data) if 0 in ids}
    matching = {i for i, line in enumerate(lines) if regex.search(line)}
    assert matching == {0, 4} and matching <= flagged


def test_compiled_database_cache(tmp_path) -> None:  # type: ignore[no-untyped-def]
    data = b"a NCCL WARN x status=12\nCUDA error: out of memory\n"
    first = SourceScanner(PATTERNS, cache_dir=tmp_path)
    second = SourceScanner(PATTERNS, cache_dir=tmp_path)
    assert not first.cached and second.cached
    assert first.scan(data) == second.scan(data) == [(0, 23, [1]), (24, 49, [2])]
    (entry,) = tmp_path.glob("hyperscan-*.db")
    entry.write_bytes(b"not a database")
    third = SourceScanner(PATTERNS, cache_dir=tmp_path)
    assert not third.cached and third.scan(data) == first.scan(data)
    assert SourceScanner(PATTERNS[:2], cache_dir=tmp_path).cached is False  # other patterns, other entry


def test_sampled_patterns_report_first_and_last_match_only() -> None:
    patterns = [r"ERROR \d+", r"iteration \d+"]
    scanner = SourceScanner(patterns, sampled=frozenset({1}))
    lines = [f"iteration {i}" if i % 3 else f"ERROR {i}" for i in range(60_000)]
    data = "\n".join(lines).encode()
    got = scanner.scan(data)
    errors = [start for start, _end, ids in got if ids == [0]]
    progress = [data[start:end] for start, end, ids in got if ids == [1]]
    assert len(errors) == 20_000
    assert progress == [b"iteration 1", b"iteration 59999"]


def test_sampled_last_match_found_outside_the_tail_window() -> None:
    scanner = SourceScanner([r"ERROR", r"iteration \d+"], sampled=frozenset({1}))
    data = b"iteration 1\niteration 2\n" + b"x" * (3 * 1024 * 1024) + b"\nend"
    got = [data[s:e] for s, e, ids in scanner.scan(data)]
    assert got == [b"iteration 1", b"iteration 2"]


# -- the literal gate of the sampled patterns --------------------------------------------------------------------
def test_required_literals_follow_the_structure_of_the_pattern() -> None:
    assert required_literals(r"\biteration\s+\d+") == [("iteration", False)]
    assert required_literals(r"(?i:saved) checkpoint") == [(" checkpoint", False)]
    assert required_literals(r"(?i)loss=\d") == [("loss=", True)]
    assert required_literals(r"x(?:error|failure)+y") == [("error", False), ("failure", False)]
    assert required_literals(r"(?:warning)?abc") == [("abc", False)]  # an optional group needs nothing
    assert required_literals(r"error|x\d+") is None  # a branch without a literal: no gate
    assert required_literals(r"ab\d") is None  # too short to be worth a scan
    assert required_literals(r"(") is None


def test_every_positive_case_of_the_catalog_contains_a_required_literal() -> None:
    """Soundness on the real patterns: every line an extractor's case says it matches passes its gate (so a gate
    never hides a match, whichever extractor is marked sampled)."""
    from firstfault.engine.catalog import load_catalog

    gated = 0
    for extractor in load_catalog().extractors:
        scanner = SourceScanner([extractor.match_re], sampled=frozenset({0}))
        ((_id, _first, gate),) = scanner._sampled
        if gate is None:  # no literal every match needs: never gated
            continue
        gated += 1
        for case in extractor.cases:
            if case.expect != "none":
                line = case.line.encode()
                assert scanner._contains_literal(0, gate, line, len(line)), (extractor.name, case.line)
    assert gated > 100


def test_a_block_without_a_required_literal_skips_the_sampled_scans(monkeypatch: pytest.MonkeyPatch) -> None:
    # the tqdm-like bar (2) needs no literal of three characters: it is always scanned, and does not open the
    # progress pattern's gate
    scanner = SourceScanner([r"ERROR", r"(?i:step) \d+ loss", r"\d+%\|"], sampled=frozenset({1, 2}))
    assert [gate is not None for _id, _first, gate in scanner._sampled] == [True, False]
    scanned: list[str] = []
    first_match = scanner._first_match

    def counted(name: str, *args: object) -> int | None:
        scanned.append(name)
        return first_match(name, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(scanner, "_first_match", counted)
    quiet = b"ERROR one\nnothing here\n" * 1000
    assert [ids for _s, _e, ids in scanner.scan(quiet)] == [[0]] * 1000
    assert scanned == ["first-2"]
    busy = quiet + b"STEP 7 loss\n" + quiet + b"step 9 loss"
    progress = [busy[s:e] for s, e, ids in scanner.scan(busy) if ids == [1]]
    assert progress == [b"STEP 7 loss", b"step 9 loss"]
