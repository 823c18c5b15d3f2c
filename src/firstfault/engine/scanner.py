"""Multi-pattern scanning: every extractor pattern of a source in one hyperscan database.

Input is read in large blocks cut at line boundaries; hyperscan scans each block once for all patterns and
reports (pattern, end offset) pairs; only the lines that matched are decoded and handed to Python. Memory is
bounded by `block_size + max_line_bytes` whatever the input size: a line longer than `max_line_bytes` is
scanned up to that length and the rest of it is skipped (and reported).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

import hyperscan

DEFAULT_BLOCK_SIZE = 4 * 1024 * 1024
DEFAULT_MAX_LINE_BYTES = 1024 * 1024


class PatternCompileError(Exception):
    def __init__(self, index: int, message: str) -> None:
        super().__init__(message)
        self.index = index


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


def _compile(patterns: list[str], ids: list[int], extra_flags: int = 0) -> hyperscan.Database:
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        db.compile(expressions=[patterns[i].encode("utf-8") for i in ids], ids=ids,
                   flags=[hyperscan.HS_FLAG_MULTILINE | extra_flags] * len(ids))
    except hyperscan.error as exc:
        # hyperscan names the failing expression by index in its message ("Expression id N").
        raise PatternCompileError(_failing_index(str(exc)), str(exc)) from None
    return db


class SourceScanner:
    """Compiled hyperscan databases for a list of patterns (ids are list positions).

    Sampled patterns (progress markers that may match most lines) get their own databases: one reports only
    the first match of a block (HS_FLAG_SINGLEMATCH), the other is run on growing tails of the block to find
    the last one, so their matches never cost a callback per line.
    """

    TAIL_WINDOWS = (64 * 1024, 1024 * 1024)

    def __init__(self, patterns: list[str], sampled: frozenset[int] = frozenset()) -> None:
        self.size = len(patterns)
        self._local = threading.local()
        regular = [i for i in range(len(patterns)) if i not in sampled]
        sampled_ids = sorted(sampled)
        self._db = _compile(patterns, regular) if regular else None
        self._first_db = _compile(patterns, sampled_ids, hyperscan.HS_FLAG_SINGLEMATCH) if sampled_ids else None
        self._tail_db = _compile(patterns, sampled_ids) if sampled_ids else None

    def _scratch(self, name: str, db: hyperscan.Database) -> hyperscan.Scratch:
        scratch = getattr(self._local, name, None)
        if scratch is None:
            scratch = hyperscan.Scratch(db)
            setattr(self._local, name, scratch)
        return scratch

    def _matches(self, name: str, db: hyperscan.Database, data: bytes, base: int = 0) -> list[tuple[int, int]]:
        found: list[tuple[int, int]] = []
        append = found.append

        def on_match(pattern_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append((base + to, pattern_id))

        db.scan(data, match_event_handler=on_match, scratch=self._scratch(name, db))
        return found

    def _sampled_matches(self, data: bytes) -> list[tuple[int, int]]:
        assert self._first_db is not None and self._tail_db is not None
        first = self._matches("first", self._first_db, data)
        wanted = {pattern_id for _, pattern_id in first}
        last: dict[int, int] = {}
        for window in (*self.TAIL_WINDOWS, len(data)):
            start = 0 if window >= len(data) else data.find(b"\n", len(data) - window) + 1
            for to, pattern_id in self._matches("tail", self._tail_db, data[start:], start):
                last[pattern_id] = max(to, last.get(pattern_id, -1))
            if set(last) >= wanted or start == 0:
                break
        return first + [(to, pattern_id) for pattern_id, to in last.items()]

    def scan(self, data: bytes) -> list[tuple[int, int, list[int]]]:
        """Return (line_start, line_end, sorted pattern ids) for every line of `data` that matched (for sampled
        patterns: the first and the last matching line only)."""
        if not data:
            return []
        hits = self._matches("main", self._db, data) if self._db is not None else []
        if self._first_db is not None:
            hits += self._sampled_matches(data)
        if not hits:
            return []
        hits.sort()
        lines: list[tuple[int, int, list[int]]] = []
        current_start = -1
        current_end = -1
        ids: list[int] = []
        for to, pattern_id in hits:
            if to > current_end:
                if ids:
                    lines.append((current_start, current_end, sorted(set(ids))))
                current_start = data.rfind(b"\n", 0, to) + 1
                end = data.find(b"\n", to)
                current_end = len(data) if end < 0 else end
                ids = []
            ids.append(pattern_id)
        if ids:
            lines.append((current_start, current_end, sorted(set(ids))))
        return lines


def _failing_index(message: str) -> int:
    import re

    m = re.search(r"[Ee]xpression (?:id )?(\d+)", message)
    return int(m.group(1)) if m else -1
