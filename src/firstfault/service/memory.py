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
_SAMPLE_EVENTS = 256
# A dict slot and its share of the table, per entry of the accumulator's dicts (events, streams).
_DICT_ENTRY_BYTES = 100
# A result held as a pydantic model takes about this many times the size of its JSON (a 5,000-node result: 8.6x
# by deep_size, 9.1x by tracemalloc). Walking a large result would cost seconds; its JSON is written anyway.
RESULT_JSON_FACTOR = 9
_ATOMS = (str, bytes, int, float, bool, type(None), Enum, type)


def deep_size(value: Any) -> int:
    """Bytes held by `value` and everything it references (each object counted once; classes, enum members and
    other shared constants not at all)."""
    seen: set[int] = set()
    total = 0
    stack = [value]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, (Enum, type)):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, _ATOMS):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif isinstance(obj, BaseModel):
            stack.extend((obj.__dict__, obj.__pydantic_fields_set__))
        else:
            stack.extend(getattr(obj, slot) for slot in getattr(type(obj), "__slots__", ()) if hasattr(obj, slot))
            if hasattr(obj, "__dict__"):
                stack.append(obj.__dict__)
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
