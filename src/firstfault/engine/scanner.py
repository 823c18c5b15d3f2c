"""Multi-pattern scanning: every extractor pattern of a source in one hyperscan database.

Input is read in large blocks cut at line boundaries; hyperscan scans each block once for all patterns and
reports (pattern, end offset) pairs; only the lines that matched are decoded and handed to Python. Memory is
bounded by `block_size + max_line_bytes` whatever the input size: a line longer than `max_line_bytes` is
scanned up to that length and the rest of it is skipped (and reported).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from re import _constants as _sre  # type: ignore[attr-defined]
from re import _parser as _sre_parser  # type: ignore[attr-defined]
from typing import Any, BinaryIO, cast

import hyperscan

from firstfault.errors import PatternCompileError

DEFAULT_BLOCK_SIZE = 4 * 1024 * 1024
DEFAULT_MAX_LINE_BYTES = 1024 * 1024


def read_blocks(stream: BinaryIO, *, block_size: int = DEFAULT_BLOCK_SIZE,
                max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> Iterator[tuple[bytearray, int, int, bool]]:
    """Blocks of whole lines from a binary stream, read into one reusable buffer, with bounded memory:
    yields (buffer, length, start_offset, truncated) where `buffer[:length]` holds the block's complete lines
    (no trailing newline), `start_offset` is the stream offset of its first byte, and `truncated` says the
    block is the head of one over-long line (cut at `max_line_bytes`; the rest of that line is skipped).

    The buffer is overwritten by the next block, so a consumer must finish with a block before asking for
    the next one. Nothing is allocated per block (no `read()` result, no `carry + data`, no slice), which
    keeps the process from faulting in fresh pages for every 4 MiB, and no line is counted here: the
    session counts newlines once, while it walks the hits (see `Session.ingest_stream`).
    """
    capacity = max(block_size, max_line_bytes) + block_size
    buf = _take_buffer(capacity)
    view = memoryview(buf)
    readinto = getattr(stream, "readinto", None)
    carry = 0  # bytes of an incomplete line kept at buf[:carry]
    carry_offset = 0
    offset = 0
    skipping = False  # inside an over-long line whose head was already yielded
    try:
        while True:
            if readinto is not None:
                n = readinto(view[carry:carry + block_size]) or 0
            else:
                chunk = stream.read(block_size)
                n = len(chunk)
                view[carry:carry + n] = chunk
            if not n:
                break
            read_at = offset
            offset += n
            end = carry + n
            if skipping:  # carry is 0 here
                nl = buf.find(b"\n", 0, end)
                if nl < 0:
                    continue
                end -= nl + 1
                buf[:end] = bytes(view[nl + 1:nl + 1 + end])
                read_at += nl + 1
                skipping = False
                carry_offset = read_at
            if not carry:
                carry_offset = read_at
            last_nl = buf.rfind(b"\n", carry, end)  # the carry holds no newline
            if last_nl < 0:
                if end > max_line_bytes:
                    yield buf, max_line_bytes, carry_offset, True
                    carry = 0
                    skipping = True
                else:
                    carry = end
                continue
            yield buf, last_nl, carry_offset, False
            rest = end - last_nl - 1
            if rest:
                buf[:rest] = bytes(view[last_nl + 1:end])
            carry = rest
            carry_offset += last_nl + 1
        if carry and not skipping:
            yield buf, carry, carry_offset, False
    finally:
        view.release()
        _give_buffer(buf)


# Block buffers are kept per thread and reused: a new 8 MiB bytearray is zero-filled on creation, which would
# cost more than scanning a small file (a 1,250-node workload has 2,500 of them; the catalog check scans a
# stream per inline case). A generator that is still open holds its buffer, so streams read side by side in
# one thread each get their own.
_BUFFERS = threading.local()


def _take_buffer(capacity: int) -> bytearray:
    free: list[bytearray] = getattr(_BUFFERS, "free", None) or []
    _BUFFERS.free = free
    for i, buf in enumerate(free):
        if len(buf) >= capacity:
            return free.pop(i)
    return bytearray(capacity)


def _give_buffer(buf: bytearray) -> None:
    free: list[bytearray] = getattr(_BUFFERS, "free", None) or []
    _BUFFERS.free = free
    if len(free) < 2:
        free.append(buf)


_GLOBAL_FLAGS = re.compile(r"\(\?[aiLmsux]+\)")


def scan_expression(pattern: str) -> str | None:
    """A cheaper expression whose matches are necessary for `pattern` to match on a line, or None.

    A branch `X<gap>Y` of the pattern, where the gap is a top-level run of any characters of the line (`.*`, `.+`,
    `.{m,n}`, `[^\\n]*`, `[^\\n]{m,n}`) or of non-space ones (`\\S*`), lazy or not, cannot match a line unless `Y`
    matches there, ending where the
    whole match ends. Scanning for `Y` alone gives the same candidate lines or more, never fewer, and Python `re`
    decides on every candidate anyway. Each top-level branch is cut at its last gap on its own; the branches are
    alternatives, so the cut ones joined with the others are necessary for the pattern. It matters when `X` is
    common: `\\biteration\\s+\\d+ ... \\|.*(?:grad norm|loss): nan` starts a `.*` state on every Megatron iteration
    line and halved hyperscan's throughput on training logs, and `\\b(?:cp|mv|ls|...): [^\\n]{0,250}?: <strerror>`
    kept a bounded-repeat automaton running from every short tool name. Only a tail that is itself selective (at
    least 8 characters, cannot match the empty string) is used.
    """
    if _GLOBAL_FLAGS.search(pattern):  # flags for the whole pattern would not carry over to the tail
        return None
    branches = _top_level_branches(pattern)
    tails = [_tail_after_gap(branch) for branch in branches]
    if all(tail is None for tail in tails):
        return None
    return "|".join(branch if tail is None else tail for branch, tail in zip(branches, tails, strict=True))


def _top_level(pattern: str) -> Iterator[int]:
    """The indices of the pattern's top-level items: characters outside any group, an escape or a character class
    counting as one (only its first index is given)."""
    depth, i, n = 0, 0, len(pattern)
    while i < n:
        ch = pattern[i]
        if depth == 0:
            yield i
        if ch == "\\":
            i += 2
            continue
        if ch == "[":
            i = _bracket_end(pattern, i)
            continue
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        i += 1


def _top_level_branches(pattern: str) -> list[str]:
    """The pattern split at its top-level `|`."""
    cuts = [i for i in _top_level(pattern) if pattern[i] == "|"]
    return [pattern[start + 1:end] for start, end in zip([-1, *cuts], [*cuts, len(pattern)], strict=True)]


_LINE_GAP = re.compile(r"(?:\.|\[\^\\n\]|\\S)(?:[*+]|\{\d*,\d*\})\??")


def _tail_after_gap(branch: str) -> str | None:
    """What follows one of the branch's top-level gaps (`_LINE_GAP`): of the tails that are selective, the one whose
    required literals are the most selective (`_selectivity`), the longest on a tie; None if there is none."""
    best: tuple[tuple[int, int], str] | None = None
    for i in _top_level(branch):
        gap = _LINE_GAP.match(branch, i)
        if gap is None:
            continue
        tail = branch[gap.end():]
        literals = _selective_tail_literals(tail)
        if literals is not None and (best is None or _selectivity(literals) > best[0]):
            best = (_selectivity(literals), tail)
    return None if best is None else best[1]


def _selective_tail_literals(tail: str) -> frozenset[tuple[str, bool]] | None:
    """The literals a candidate tail requires, if it is usable alone: at least 8 characters, not starting with a
    quantifier, valid, not matching the empty string, and requiring some literal of three characters or more."""
    if len(tail) < 8 or tail[0] in "*+?{":
        return None
    try:
        if re.compile(tail).match(""):
            return None
    except re.error:
        return None
    literals = required_literals(tail)
    return None if literals is None else frozenset(literals)


def _bracket_end(pattern: str, i: int) -> int:
    """The index after the character class that starts at pattern[i] == '['."""
    j = i + 1
    if j < len(pattern) and pattern[j] == "^":
        j += 1
    if j < len(pattern) and pattern[j] == "]":
        j += 1
    while j < len(pattern) and pattern[j] != "]":
        j += 2 if pattern[j] == "\\" else 1
    return j + 1


_MIN_GATE_LITERAL = 3  # a shorter literal would be met in nearly every block


def required_literals(pattern: str) -> list[tuple[str, bool]] | None:
    """Literals one of which every match of `pattern` contains, each with whether it is matched without regard to
    ASCII case (within `(?i)`), or None when the pattern has no such set of literals of at least three characters.

    Read from Python's own parse of the pattern: a run of literal characters in a sequence is needed by that
    sequence, so is whatever a group, a repeat of at least once, or every branch of an alternation needs."""
    try:
        parsed = _sre_parser.parse(pattern)
    except (re.error, RecursionError):
        return None
    found = _needed(list(parsed), bool(parsed.state.flags & re.IGNORECASE))
    return None if found is None else sorted(found)


def _gate_expressions(pattern: str) -> list[str]:
    """Hyperscan expressions of the literals a sampled pattern needs (none when it needs none)."""
    literals = set(required_literals(pattern) or [])
    literals -= {(text, False) for text, caseless in literals if caseless}  # met anyway when any case is
    return [("(?i)" if caseless else "") + "".join(f"\\x{byte:02x}" for byte in text.encode("utf-8"))
            for text, caseless in sorted(literals)]


def _selectivity(literals: frozenset[tuple[str, bool]]) -> tuple[int, int]:
    """Longer literals first, then fewer of them."""
    return min(len(text) for text, _ in literals), -len(literals)


def _needed(items: list[tuple[Any, Any]], caseless: bool) -> frozenset[tuple[str, bool]] | None:
    best: frozenset[tuple[str, bool]] | None = None
    run: list[str] = []

    def better(candidate: frozenset[tuple[str, bool]] | None) -> None:
        nonlocal best
        if candidate and (best is None or _selectivity(candidate) > _selectivity(best)):
            best = candidate

    for op, av in [*items, (None, None)]:
        if op is _sre.LITERAL:
            run.append(chr(av))
            continue
        if len(run) >= _MIN_GATE_LITERAL:
            better(frozenset({("".join(run), caseless)}))
        run = []
        if op is _sre.SUBPATTERN:
            _group, add, remove, sub = av
            better(_needed(list(sub), (caseless or bool(add & re.IGNORECASE)) and not remove & re.IGNORECASE))
        elif op is _sre.ATOMIC_GROUP:
            better(_needed(list(av), caseless))
        elif op in (_sre.MAX_REPEAT, _sre.MIN_REPEAT, _sre.POSSESSIVE_REPEAT) and av[0] >= 1:
            better(_needed(list(av[2]), caseless))
        elif op is _sre.BRANCH:
            branches = [_needed(list(branch), caseless) for branch in av[1]]
            if all(branches):
                better(frozenset().union(*branches))  # type: ignore[arg-type]
    return best


class SourceScanner:
    """Compiled hyperscan databases for a list of patterns (ids are list positions).

    A hit means the line may match the pattern: the regular patterns are compiled in hyperscan's prefilter
    mode (HS_FLAG_PREFILTER: hyperscan may approximate a construct and report a superset of the matches, never
    fewer), and those with a `scan_expression` are scanned for a necessary part only. Callers confirm every
    hit with Python `re` (the session does, for the captures anyway). Prefiltering costs nothing in precision
    on the corpus (the same 6,586 line/pattern pairs as exact matching) and scans training logs 25% faster
    with the packaged catalog, 80% faster with a catalog ten times its size. `exact[i]` is True only for the
    sampled patterns; `rules test` still compiles every pattern exactly (`exact_database`).

    Sampled patterns (progress markers that may match most lines) get their own databases: one per pattern
    stops at its first match in a block (HS_FLAG_SINGLEMATCH), another is run on growing tails of the block to find
    the last one, so their matches never cost a callback per line. They are always scanned exactly (a first
    match that re rejected would hide the real one). A block holding none of the literals a sampled pattern's
    matches need (`required_literals`; found by hyperscan's literal matcher, which stops at the first) is not
    scanned for that pattern at all: a training-progress pattern costs a full scan of every syslog block
    otherwise. Each sampled pattern has its own gate, so one that needs no literal (a tqdm bar) does not open
    the others'.
    """

    # Growing tails searched for the last match of a sampled pattern. Any sizes give the same result; a small
    # first window keeps the callbacks to the few lines at the end of a block (a small file is one block).
    TAIL_WINDOWS = (4 * 1024, 64 * 1024, 1024 * 1024)

    def __init__(self, patterns: list[str], sampled: frozenset[int] = frozenset(), *,
                 cache_dir: Path | None = None) -> None:
        """Compile `patterns`. With `cache_dir`, databases compiled earlier for the same patterns (by the same
        hyperscan, for the same machine type) are loaded from there instead, and new ones are saved."""
        self.size = len(patterns)
        self._local = threading.local()
        self.cached = False
        self.exact: list[bool] = [index in sampled for index in range(len(patterns))]
        regular = [i for i in range(len(patterns)) if i not in sampled]
        sampled_ids = sorted(sampled)
        gate: list[str] = []  # the gates' expressions, after the patterns in id order
        gate_ids: dict[int, list[int]] = {}
        for i in sampled_ids:
            expressions = _gate_expressions(patterns[i])
            gate_ids[i] = [len(patterns) + len(gate) + k for k in range(len(expressions))]
            gate += expressions
        plan = [("main", regular, hyperscan.HS_FLAG_PREFILTER),
                *((f"first-{i}", [i], hyperscan.HS_FLAG_SINGLEMATCH) for i in sampled_ids),
                ("tail", sampled_ids, 0),
                *((f"gate-{i}", gate_ids[i], hyperscan.HS_FLAG_SINGLEMATCH) for i in sampled_ids)]
        dbs: dict[str, hyperscan.Database] = {}
        cache_files: dict[str, Path] = {}
        if cache_dir is not None and patterns:
            # Keyed by the patterns, not by the expressions derived from them (scan_expression costs tens of ms
            # for the catalog): _CACHE_FORMAT stands for the derivation.
            key = hashlib.sha256(json.dumps([_CACHE_FORMAT, getattr(hyperscan, "__version__", ""), platform.machine(), patterns,
                                             gate, sampled_ids]).encode()).hexdigest()[:40]
            for name, ids, _flags in plan:
                if ids:
                    cache_files[name] = cache_dir / f"hyperscan-{key}-{name}.db"
                    db = _load_cached(cache_files[name])
                    if db is not None:
                        dbs[name] = db
            self.cached = bool(cache_files) and len(dbs) == len(cache_files)
        if not self.cached:
            expressions = [pattern if index in sampled or (tail := scan_expression(pattern)) is None else tail
                           for index, pattern in enumerate(patterns)] + gate
            dbs = {}
            for name, ids, flags in plan:
                if ids:
                    dbs[name] = _compile([expressions[i] for i in ids], ids, flags)
                    if name in cache_files:
                        _save_cached(cache_files[name], dbs[name])
        self._db: hyperscan.Database | None = dbs.get("main")
        # Per sampled pattern: its first-match database and its literal gate (None if it needs no literal).
        self._sampled: list[tuple[int, hyperscan.Database, hyperscan.Database | None]] = [
            (i, dbs[f"first-{i}"], dbs.get(f"gate-{i}")) for i in sampled_ids]
        self._tail_db: hyperscan.Database | None = dbs.get("tail")

    def _scratch(self, name: str, db: hyperscan.Database) -> hyperscan.Scratch:
        scratch = getattr(self._local, name, None)
        if scratch is None:
            scratch = hyperscan.Scratch(db)
            setattr(self._local, name, scratch)
        return scratch

    def _matches(self, name: str, db: hyperscan.Database, data: bytes | bytearray, start: int,
                 end: int) -> list[tuple[int, int]]:
        """(end offset in data, pattern id) of every match in data[start:end]."""
        found: list[tuple[int, int]] = []
        append = found.append

        def on_match(pattern_id: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
            append((start + to, pattern_id))

        scratch = self._scratch(name, db)
        if start == 0 and end == len(data):
            db.scan(cast(bytes, data), match_event_handler=on_match, scratch=scratch)
        else:
            with memoryview(data) as view, view[start:end] as part:
                db.scan(cast(bytes, part), match_event_handler=on_match, scratch=scratch)
        return found

    def _sampled_matches(self, data: bytes | bytearray, length: int) -> list[tuple[int, int]]:
        assert self._tail_db is not None
        first = [(to, pattern_id) for pattern_id, db, gate in self._sampled
                 if gate is None or self._contains_literal(pattern_id, gate, data, length)
                 if (to := self._first_match(f"first-{pattern_id}", db, data, length)) is not None]
        if not first:
            return []
        wanted = {pattern_id for _, pattern_id in first}
        last: dict[int, int] = {}
        for window in (*self.TAIL_WINDOWS, length):
            start = 0 if window >= length else data.find(b"\n", length - window, length) + 1
            for to, pattern_id in self._matches("tail", self._tail_db, data, start, length):
                last[pattern_id] = max(to, last.get(pattern_id, -1))
            if set(last) >= wanted or start == 0:
                break
        return first + [(to, pattern_id) for pattern_id, to in last.items()]

    def _first_match(self, name: str, db: hyperscan.Database, data: bytes | bytearray, length: int) -> int | None:
        """End offset of the first match of `db`'s one pattern in `data[:length]`. The scan stops there: one
        database per sampled pattern, because a database holding several can only stop once all have matched,
        and a pattern absent from the block (a progress bar in a Megatron log) kept the others' costly
        automata running to its end."""
        found: list[int] = []

        def stop(_pattern_id: int, _from: int, to: int, _flags: int, _ctx: object) -> bool:
            found.append(to)
            return True

        try:
            with memoryview(data) as view, view[:length] as part:
                db.scan(cast(bytes, part), match_event_handler=stop, scratch=self._scratch(name, db))
        except hyperscan.ScanTerminated:
            pass
        return found[0] if found else None

    def _contains_literal(self, pattern_id: int, gate: hyperscan.Database, data: bytes | bytearray,
                          length: int) -> bool:
        """Whether `data[:length]` holds one of the literals every match of sampled pattern `pattern_id` contains
        (`gate`; hyperscan's literal matcher stops at the first): without one, the pattern cannot match the block."""

        def found(*_args: object) -> bool:
            return True  # stop the scan

        try:
            with memoryview(data) as view, view[:length] as part:
                gate.scan(cast(bytes, part), match_event_handler=found, scratch=self._scratch(f"gate-{pattern_id}", gate))
        except hyperscan.ScanTerminated:
            return True
        return False

    def scan(self, data: bytes | bytearray, length: int | None = None) -> list[tuple[int, int, list[int]]]:
        """Return (line_start, line_end, sorted pattern ids) for every line of `data[:length]` that matched (for
        sampled patterns: the first and the last matching line only)."""
        if length is None:
            length = len(data)
        if not length:
            return []
        hits = self._matches("main", self._db, data, 0, length) if self._db is not None else []
        if self._sampled:
            hits += self._sampled_matches(data, length)
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
                end = data.find(b"\n", to, length)
                current_end = length if end < 0 else end
                ids = []
            ids.append(pattern_id)
        if ids:
            lines.append((current_start, current_end, sorted(set(ids))))
        return lines

def exact_database(patterns: list[str]) -> hyperscan.Database:
    """Every pattern compiled exactly, as written (the catalog check: patterns must stay in hyperscan's
    subset even though the engine scans with prefilter databases)."""
    return _compile(patterns, list(range(len(patterns))))


def _compile(expressions: list[str], ids: list[int], extra_flags: int = 0) -> hyperscan.Database:
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    try:
        db.compile(expressions=[p.encode("utf-8") for p in expressions], ids=ids,
                   flags=[hyperscan.HS_FLAG_MULTILINE | extra_flags] * len(expressions))
    except hyperscan.error as exc:
        # hyperscan names the failing expression by id in its message ("Expression id N").
        message = str(exc)
        index = _failing_index(message)
        raise PatternCompileError(ids[0] if len(ids) == 1 else index, message) from None
    return db


# The version of what the cached databases are compiled from besides the patterns themselves: bump it whenever
# scan_expression, _gate_expressions or the compile flags change what they derive.
_CACHE_FORMAT = 6


def _load_cached(path: Path) -> hyperscan.Database | None:
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    try:
        db = hyperscan.loadb(blob, hyperscan.HS_MODE_BLOCK)
        hyperscan.Scratch(db)  # refuses a database built for another platform
    except Exception:  # noqa: BLE001 - a damaged or foreign cache entry is simply recompiled
        return None
    return db


def _save_cached(path: Path, db: hyperscan.Database) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_bytes(hyperscan.dumpb(db))
        os.replace(tmp, path)
    except OSError:
        pass  # a cache that cannot be written only costs the next run a compile


def _failing_index(message: str) -> int:
    import re

    m = re.search(r"[Ee]xpression (?:id )?(\d+)", message)
    return int(m.group(1)) if m else -1
