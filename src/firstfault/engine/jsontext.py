"""JSON as pydantic writes it, written without pydantic (the result JSON of `firstfault analyze`).

pydantic's JSON differs from `json.dumps` in its numbers (`1e+16`, `1.5e-7`, `0.00001`), in its times (`Z` for
UTC) and in what it does with NaN (null). The values a result holds (records, strings, integers, lists, dicts,
enums, UTC times, the odd float) are written here, and the same text pydantic-core would write; a value of any
other type is handed to pydantic-core itself, imported then. tests/engine/test_records.py compares both.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from json.encoder import encode_basestring  # C-accelerated; escapes as pydantic-core does
from typing import Any

_ARRAYS = (list, tuple, set, frozenset)


def json_text(value: Any, indent: int | None = None) -> str:
    """`value` as pydantic-core's `to_json` (and so a model's `model_dump_json`) writes it."""
    out: list[str] = []
    _write(value, out, None if indent is None else " " * indent, "\n")
    return "".join(out)


def _write(value: Any, out: list[str], step: str | None, newline: str) -> None:
    """Append `value`; `step` is one level of indentation (None: compact), `newline` the current line start."""
    kind = type(value)
    if kind is str:
        out.append(encode_basestring(value))
    elif value is None:
        out.append("null")
    elif kind is bool:
        out.append("true" if value else "false")
    elif kind is int:
        out.append(int.__repr__(value))
    elif kind is float:
        out.append(float_text(value))
    elif (names := getattr(kind, "__record_fields__", None)) is not None:
        _write_object(_record_items(value, names), out, step, newline)
    elif kind is dict and all(type(k) is str for k in value):
        _write_object(list(value.items()), out, step, newline)
    elif kind in _ARRAYS:
        _write_array(value, out, step, newline)
    elif kind is datetime and (text := datetime_text(value)) is not None:
        out.append(encode_basestring(text))
    elif isinstance(value, Enum) and type(value.value) in (str, int):
        _write(value.value, out, step, newline)
    else:
        out.append(_pydantic_json(value, step, newline))


def _record_items(value: Any, names: tuple[str, ...]) -> list[tuple[str, Any]]:
    """A record's fields as written: those declared `OmitNone` (records.py) only when they are set."""
    omitted = type(value)._omitted()
    return [(name, item) for name in names if (item := getattr(value, name)) is not None or name not in omitted]


def _write_object(items: list[tuple[str, Any]], out: list[str], step: str | None, newline: str) -> None:
    if not items:
        out.append("{}")
        return
    inner = newline if step is None else newline + step
    out.append("{")
    for i, (key, item) in enumerate(items):
        if i:
            out.append(",")
        if step is not None:
            out.append(inner)
        out.append(encode_basestring(key))
        out.append(":" if step is None else ": ")
        _write(item, out, step, inner)
    if step is not None:
        out.append(newline)
    out.append("}")


def _write_array(values: Any, out: list[str], step: str | None, newline: str) -> None:
    if not values:
        out.append("[]")
        return
    inner = newline if step is None else newline + step
    out.append("[")
    for i, item in enumerate(values):
        if i:
            out.append(",")
        if step is not None:
            out.append(inner)
        _write(item, out, step, inner)
    if step is not None:
        out.append(newline)
    out.append("]")


def _pydantic_json(value: Any, step: str | None, newline: str) -> str:
    """A value of a type written nowhere else, as pydantic-core writes it (NaN and infinities as null, a
    model's default), indented to where it sits."""
    import pydantic_core

    text = pydantic_core.to_json(value, indent=None if step is None else len(step), inf_nan_mode="null").decode()
    return text if step is None else text.replace("\n", newline)


def float_text(value: float) -> str:
    """A float as pydantic-core writes it: the shortest digits that read back, in decimal notation from 1e-5 up
    to 1e16 and in scientific notation (`1e+16`, `1.5e-7`) outside; NaN and infinities as null."""
    if value != value or value in (float("inf"), float("-inf")):
        return "null"
    text = repr(value)
    sign = "-" if text.startswith("-") else ""
    mantissa, _, exponent = text.lstrip("-").partition("e")
    whole, _, fraction = mantissa.partition(".")
    digits = (whole + fraction).lstrip("0")
    if not digits:
        return sign + "0.0"
    scale = (int(exponent) if exponent else 0) - len(fraction)  # value = int(digits) * 10**scale
    stripped = digits.rstrip("0")
    scale += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    point = length + scale  # 10**(point - 1) <= value < 10**point
    if scale >= 0 and point <= 16:
        return f"{sign}{digits}{'0' * scale}.0"
    if 0 < point <= 16:
        return f"{sign}{digits[:point]}.{digits[point:]}"
    if -5 < point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    shown = digits if length == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{shown}e{point - 1:+d}"


def datetime_text(value: datetime) -> str | None:
    """A time as pydantic writes it (ISO 8601, `Z` for UTC), or None for an offset that is not whole minutes."""
    offset = value.utcoffset()
    if offset is None:
        return value.isoformat()
    seconds = offset.total_seconds()
    if seconds == 0:
        return value.replace(tzinfo=None).isoformat() + "Z"
    if seconds % 60:
        return None
    return value.isoformat()


def jsonable(value: Any, *, json_mode: bool) -> Any:
    """`value` with every record made a dict, as pydantic's `model_dump` gives it; with `json_mode`, only JSON
    types (times as text, enums as their values, arrays as lists)."""
    kind = type(value)
    if kind in (str, int, bool, float) or value is None:
        return value
    if (names := getattr(kind, "__record_fields__", None)) is not None:
        return {name: jsonable(item, json_mode=json_mode) for name, item in _record_items(value, names)}
    if kind is dict:
        if json_mode and not all(type(k) is str for k in value):
            return _pydantic_jsonable(value)
        return {k: jsonable(v, json_mode=json_mode) for k, v in value.items()}
    if kind in _ARRAYS:
        items = [jsonable(v, json_mode=json_mode) for v in value]
        return items if json_mode or kind is list else kind(items)
    if not json_mode:
        return value
    if kind is datetime and (text := datetime_text(value)) is not None:
        return text
    if isinstance(value, Enum) and type(value.value) in (str, int):
        return value.value
    return _pydantic_jsonable(value)


def _pydantic_jsonable(value: Any) -> Any:
    import pydantic_core

    return pydantic_core.to_jsonable_python(value)
