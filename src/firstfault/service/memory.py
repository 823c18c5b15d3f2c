"""Estimates of the memory a session holds, in bytes: the service's budgets are bytes, not event counts.

An estimate is the deep size (`sys.getsizeof` summed over the objects reachable from a value, each once) of what a
session keeps: its context, its coalesced events with their evidence, its per-stream counters, its last result.
It is kept per session and updated by each batch, so no request walks a whole session.
"""

from __future__ import annotations

import sys
from enum import Enum
from typing import Any

from pydantic import BaseModel

from firstfault.engine.ingest import IngestState

# Events whose size is measured per batch; the batch's other events are taken to be of their average size.
_SAMPLE_EVENTS = 64
# A dict slot and its share of the table, per entry of the accumulator's dicts (events, streams).
_DICT_ENTRY_BYTES = 100
# A result held as a pydantic model takes about this many times the size of its JSON (a 5,000-node result: 8.6x
# by deep_size, 9.1x by tracemalloc). Walking a large result would cost seconds; its JSON is written anyway.
RESULT_JSON_FACTOR = 9
_ATOMS = (str, bytes, int, float, bool, type(None))
# How deep_size walks a type (worked out once per type: a session's events are a handful of types, and isinstance
# against pydantic's ABC-based model class is slow): what to skip, count alone, or look into.
# Other objects are looked into through the slots their class declares and their __dict__, if any.
_SKIP, _ATOM, _MAPPING, _ITEMS, _MODEL, _OBJECT = range(6)
_KINDS: dict[type, tuple[int, tuple[str, ...]]] = {}


def _kind(cls: type) -> tuple[int, tuple[str, ...]]:
    if issubclass(cls, (Enum, type)):
        return _SKIP, ()
    if issubclass(cls, _ATOMS):
        return _ATOM, ()
    if issubclass(cls, dict):
        return _MAPPING, ()
    if issubclass(cls, (list, tuple, set, frozenset)):
        return _ITEMS, ()
    if issubclass(cls, BaseModel):
        return _MODEL, ()
    slots = getattr(cls, "__slots__", ())
    return _OBJECT, ((slots,) if isinstance(slots, str) else tuple(slots)) + (("__dict__",) if cls.__dictoffset__ else ())


def deep_size(value: Any) -> int:
    """Bytes held by `value` and everything it references (each object counted once; classes, enum members and
    other shared constants not at all)."""
    seen: set[int] = set()
    total = 0
    stack = [value]
    getsizeof = sys.getsizeof
    while stack:
        obj = stack.pop()
        cls = type(obj)
        found = _KINDS.get(cls)
        if found is None:
            found = _KINDS[cls] = _kind(cls)
        kind, attributes = found
        if kind == _SKIP or id(obj) in seen:
            continue
        seen.add(id(obj))
        total += getsizeof(obj)
        if kind == _ATOM:
            continue
        if kind == _MAPPING:
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif kind == _ITEMS:
            stack.extend(obj)
        elif kind == _MODEL:
            stack.extend((obj.__dict__, obj.__pydantic_fields_set__))
        else:
            stack.extend(getattr(obj, name) for name in attributes if hasattr(obj, name))
    return total


def event_bytes(state: IngestState) -> float:
    """The average bytes one coalesced event of `state` holds in a session (a sample of them measured)."""
    if not state.accs:
        return 0.0
    step = max(1, len(state.accs) // _SAMPLE_EVENTS)
    sample = state.accs[::step]
    return sum(deep_size(entry) for entry in sample) / len(sample) + _DICT_ENTRY_BYTES


def stream_bytes(key: tuple[str, str], origins: list[str]) -> int:
    """Bytes one stream's counters hold in a session (its key, counts and first origins)."""
    return deep_size((key, origins)) + _DICT_ENTRY_BYTES


def batch_bytes(state: IngestState, new_events: int, streams: set[tuple[str, str]]) -> int:
    """Bytes a batch's `state` adds to a session that took `new_events` new coalesced events from it and held
    counters for `streams` (those it adds are noted there as held)."""
    added = round(event_bytes(state) * new_events)
    for key, _observations, _nbytes, origins in state.stats:
        if key not in streams:
            streams.add(key)
            added += stream_bytes(key, origins)
    return added
