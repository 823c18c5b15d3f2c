"""Typed records: the engine's data model, with pydantic's rules but without pydantic on the engine's own path.

A record is a dataclass whose constructor validates as a pydantic model with the same fields does. A value that
already has exactly its declared type (what the engine and the rules pass: a `str` for a `str`, an aware
`datetime`, a `SourceKind`, a nested record) is checked here and kept, as pydantic keeps it; lists and dicts
are copied, as pydantic copies them. Anything else (a string for a time, a dict for a nested record, a value
out of bounds, an unknown or a missing field) goes to a pydantic model generated from the same fields, the
record's *twin*, built on first use: it converts the value or raises its `ValidationError`.

Records are pydantic types too (`__get_pydantic_core_schema__`): the service's request and response models,
the Blueprint's result and any `TypeAdapter` validate, serialise and describe them (JSON Schema, OpenAPI)
through the twin. Serialising needs no pydantic: `model_dump_json()` writes what pydantic writes for the
twin, byte for byte (tests/engine/test_records.py holds both to it over the corpus).

So `firstfault analyze` imports neither pydantic nor pydantic-core: they cost it about 0.2 s of start-up
(docs/benchmarks.md).
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Callable, Mapping
from datetime import datetime
from enum import Enum
from types import NoneType, UnionType
from typing import Annotated, Any, ClassVar, Literal, Self, dataclass_transform

from firstfault.engine.jsontext import json_text, jsonable


class Length:
    """The length bounds of a `str` or a list field (pydantic's `min_length` / `max_length`)."""

    __slots__ = ("max", "min")

    def __init__(self, min: int | None = None, max: int | None = None) -> None:  # noqa: A002 - pydantic's words
        self.min, self.max = min, max


class Bounds:
    """The bounds of an `int` field (pydantic's `ge` / `le`)."""

    __slots__ = ("ge", "le")

    def __init__(self, ge: int | None = None, le: int | None = None) -> None:
        self.ge, self.le = ge, le


class After:
    """A function run on a field's value once its type is checked (a pydantic after-validator): it returns the
    value to keep, or raises ValueError."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[Any], Any]) -> None:
        self.func = func


class OmitNone:
    """A field left out of the JSON and of `model_dump` while it is None (pydantic's `exclude_if`): a field added
    to a record for an optional input keeps every output that does not use it byte for byte as it was."""

    __slots__ = ()


def _is_none(value: Any) -> bool:
    return value is None


class _Slow(Exception):
    """The fast path does not take a value as it is: the twin decides."""


_SLOW = _Slow()
_REQUIRED = object()
_Check = Callable[[Any], Any]
_Plan = list[tuple[str, _Check, Any, Callable[[], Any] | None]]


def _slow(value: Any) -> Any:
    raise _SLOW


def _same(value: Any) -> Any:
    return value


def _exact(kind: type) -> _Check:
    def check(value: Any) -> Any:
        if type(value) is not kind:
            raise _SLOW
        return value
    return check


def _float(value: Any) -> Any:
    """A float, or an int that a float holds exactly (pydantic takes ints for floats, in strict mode too)."""
    if type(value) is float:
        return value
    if type(value) is not int or abs(value) > 2**53:
        raise _SLOW
    return float(value)


def _instance(kind: type) -> _Check:
    def check(value: Any) -> Any:
        if not isinstance(value, kind):
            raise _SLOW
        return value
    return check


def _optional(inner: _Check) -> _Check:
    def check(value: Any) -> Any:
        return None if value is None else inner(value)
    return check


def _literal(allowed: tuple[Any, ...]) -> _Check:
    if not all(type(a) is str for a in allowed):
        return _slow
    choices = frozenset(allowed)

    def check(value: Any) -> Any:
        if type(value) is not str or value not in choices:
            raise _SLOW
        return value
    return check


def _list_of(item: _Check) -> _Check:
    def check(value: Any) -> Any:
        if type(value) is not list:
            raise _SLOW
        return list(value) if item is _same else [item(v) for v in value]
    return check


def _dict_of(item: _Check) -> _Check:
    def check(value: Any) -> Any:
        if type(value) is not dict or not all(type(k) is str for k in value):
            raise _SLOW
        return dict(value) if item is _same else {k: item(v) for k, v in value.items()}
    return check


def _annotated(inner: _Check, metadata: tuple[Any, ...]) -> _Check:
    steps: list[_Check] = []
    for item in metadata:
        if isinstance(item, Length):
            steps.append(_length_check(item))
        elif isinstance(item, Bounds):
            steps.append(_bounds_check(item))
        elif isinstance(item, After):
            steps.append(item.func)
        elif isinstance(item, OmitNone):
            continue
        else:  # a constraint of pydantic's own (a subclass declared in a module that uses pydantic anyway)
            return _slow

    def check(value: Any) -> Any:
        value = inner(value)
        for step in steps:
            value = step(value)
        return value
    return check


def _length_check(bounds: Length) -> _Check:
    low, high = bounds.min or 0, math.inf if bounds.max is None else bounds.max

    def check(value: Any) -> Any:
        if value is not None and not low <= len(value) <= high:  # pydantic bounds the value, not its None
            raise _SLOW
        return value
    return check


def _bounds_check(bounds: Bounds) -> _Check:
    low, high = -math.inf if bounds.ge is None else bounds.ge, math.inf if bounds.le is None else bounds.le

    def check(value: Any) -> Any:
        if value is not None and not low <= value <= high:
            raise _SLOW
        return value
    return check


def _checker(annotation: Any) -> _Check:
    """The fast-path check of one field: returns the value pydantic would keep for a value of exactly the
    declared type, raises _Slow for any other value."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _annotated(_checker(args[0]), annotation.__metadata__)
    if annotation is Any:
        return _same
    if origin in (typing.Union, UnionType):
        others = [a for a in args if a is not NoneType]
        return _optional(_checker(others[0])) if len(others) == 1 < len(args) else _slow
    if origin is Literal:
        return _literal(args)
    if origin is list:
        return _list_of(_checker(args[0]))
    if origin is dict:
        return _dict_of(_checker(args[1])) if args[0] is str else _slow
    if isinstance(annotation, type):
        if issubclass(annotation, Record):
            return _instance(annotation)
        if annotation is float:
            return _float
        if annotation in (str, int, bool, datetime) or issubclass(annotation, Enum):
            return _exact(annotation)
    return _slow


def _pydantic_annotation(annotation: Any) -> Any:
    """A record field's annotation for its twin: the constraints and functions of this module as pydantic's."""
    if typing.get_origin(annotation) is not Annotated:
        return annotation
    from pydantic import AfterValidator, Field

    metadata: list[Any] = []
    for item in annotation.__metadata__:
        if isinstance(item, Length):
            metadata.append(Field(min_length=item.min, max_length=item.max))
        elif isinstance(item, Bounds):
            metadata.append(Field(ge=item.ge, le=item.le))
        elif isinstance(item, After):
            metadata.append(AfterValidator(item.func))
        elif isinstance(item, OmitNone):
            metadata.append(Field(exclude_if=_is_none))
        else:
            metadata.append(item)
    return Annotated[(typing.get_args(annotation)[0], *metadata)]


@dataclass_transform(kw_only_default=True, frozen_default=True, field_specifiers=(dataclasses.field,))
class Record:
    """A typed record (see the module docstring). Subclasses are dataclasses, keyword-only and frozen unless
    declared with `frozen=False`; unknown fields are refused (pydantic's `extra="forbid"`)."""

    __record_frozen__: ClassVar[bool] = True
    __record_doc__: ClassVar[str | None] = None
    __record_fields__: ClassVar[tuple[str, ...]] = ()  # in declaration order (jsontext writes them so)
    _record_plan: ClassVar[_Plan]  # built on first use, per class
    _record_omitted: ClassVar[frozenset[str]]
    _record_twin: ClassVar[Any]

    def __init_subclass__(cls, *, frozen: bool = True, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__record_frozen__ = frozen
        cls.__record_doc__ = cls.__dict__.get("__doc__")
        # A dataclass for its fields only: the methods it would write (and compile) for each class are the
        # generic ones below, which keeps importing the model cheap.
        dataclasses.dataclass(cls, init=False, repr=False, eq=False, kw_only=True)
        cls.__record_fields__ = tuple(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]
        cls.__hash__ = Record._hash if frozen else None  # type: ignore[assignment]

    def __init__(self, **data: Any) -> None:
        cls = type(self)
        values: dict[str, Any] = {}
        try:
            taken = 0
            for name, check, default, factory in cls._plan():
                if name in data:
                    values[name] = check(data[name])
                    taken += 1
                elif factory is not None:
                    values[name] = factory()
                elif default is not _REQUIRED:
                    values[name] = default
                else:
                    raise _SLOW
            if taken != len(data):
                raise _SLOW
        except (_Slow, ValueError, AssertionError):
            values = cls._twin().model_validate(data).__dict__
        self.__dict__.update(values)

    def __setattr__(self, name: str, value: Any) -> None:
        if self.__record_frozen__:
            raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        if self.__record_frozen__:
            raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
        super().__delattr__(name)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self.__dict__ == other.__dict__

    def _hash(self) -> int:
        return hash(tuple(self.__dict__[name] for name in self.__record_fields__))

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={self.__dict__[name]!r}" for name in self.__record_fields__)
        return f"{type(self).__qualname__}({shown})"

    # -- the fast path -------------------------------------------------------------------------------------
    @classmethod
    def _plan(cls) -> _Plan:
        plan: _Plan | None = cls.__dict__.get("_record_plan")
        if plan is None:
            hints = typing.get_type_hints(cls, include_extras=True)
            plan = []
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                factory = None if f.default_factory is dataclasses.MISSING else f.default_factory
                default = _REQUIRED if f.default is dataclasses.MISSING else f.default
                plan.append((f.name, _checker(hints[f.name]), default, factory))
            cls._record_plan = plan
        return plan

    @classmethod
    def _omitted(cls) -> frozenset[str]:
        """The fields declared `OmitNone` (found on first use, per class)."""
        omitted: frozenset[str] | None = cls.__dict__.get("_record_omitted")
        if omitted is None:
            hints = typing.get_type_hints(cls, include_extras=True)
            omitted = frozenset(name for name in cls.__record_fields__
                                if any(isinstance(m, OmitNone) for m in getattr(hints[name], "__metadata__", ())))
            cls._record_omitted = omitted
        return omitted

    @classmethod
    def _trusted(cls, values: Mapping[str, Any]) -> Self:
        """A record of values that were validated already (by its twin)."""
        record = object.__new__(cls)
        record.__dict__.update(values)
        return record

    # -- pydantic's methods that the service, the Blueprint and the tests use --------------------------------
    def model_copy(self, *, update: Mapping[str, Any] | None = None) -> Self:
        """A shallow copy with `update`'s values, not validated (as pydantic's `model_copy`)."""
        return type(self)._trusted({**self.__dict__, **(update or {})})

    def model_dump(self, *, mode: Literal["python", "json"] = "python") -> dict[str, Any]:
        """The fields as a dict, nested records as dicts; `mode="json"`: only JSON types, as pydantic's."""
        dumped: dict[str, Any] = jsonable(self, json_mode=mode == "json")
        return dumped

    def model_dump_json(self, *, indent: int | None = None) -> str:
        """The JSON pydantic writes for the twin, byte for byte."""
        return json_text(self, indent)

    @classmethod
    def model_validate(cls, obj: Any, *, strict: bool | None = None) -> Self:
        """`obj` (a mapping, or already a record of this class) validated by the twin."""
        if isinstance(obj, cls):
            return obj
        return cls._trusted(cls._twin().model_validate(obj, strict=strict).__dict__)

    @classmethod
    def model_validate_json(cls, data: str | bytes, *, strict: bool | None = None) -> Self:
        return cls._trusted(cls._twin().model_validate_json(data, strict=strict).__dict__)

    # -- the twin ------------------------------------------------------------------------------------------
    @classmethod
    def _twin(cls) -> Any:
        """The pydantic model with this record's fields, constraints and functions (built once per class)."""
        twin = cls.__dict__.get("_record_twin")
        if twin is None:
            from pydantic import ConfigDict, Field, create_model

            hints = typing.get_type_hints(cls, include_extras=True)
            fields: dict[str, Any] = {}
            for f in dataclasses.fields(cls):  # type: ignore[arg-type]
                if f.default_factory is not dataclasses.MISSING:
                    info = Field(default_factory=f.default_factory)
                else:
                    info = Field() if f.default is dataclasses.MISSING else Field(default=f.default)
                fields[f.name] = (_pydantic_annotation(hints[f.name]), info)
            twin = create_model(cls.__name__, __config__=ConfigDict(frozen=cls.__record_frozen__, extra="forbid"),
                                __doc__=cls.__record_doc__, __module__=cls.__module__, **fields)
            cls._record_twin = twin
        return twin

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        """Validate through the twin (JSON input with JSON rules, strict or not), serialise as the twin does."""
        from pydantic_core import core_schema

        # The twin's model schema, under the twin's reference: JSON Schema then names and describes the record
        # exactly as the twin (no field title beside a `$ref`, one definition per record).
        model = dict(handler.resolve_ref_schema(handler.generate_schema(cls._twin())))
        ref = model.pop("ref")

        def from_twin(value: Any) -> Any:
            return cls._trusted(value.__dict__)

        def from_python(value: Any, validate: Callable[[Any], Any]) -> Any:
            return value if isinstance(value, cls) else from_twin(validate(value))

        return core_schema.json_or_python_schema(
            json_schema=core_schema.no_info_after_validator_function(from_twin, model),
            python_schema=core_schema.no_info_wrap_validator_function(from_python, model),
            serialization=core_schema.plain_serializer_function_ser_schema(_serialise, info_arg=True), ref=ref)


def _serialise(value: Any, info: Any) -> Any:
    return jsonable(value, json_mode=info.mode_is_json())


__all__ = ["After", "Bounds", "Length", "OmitNone", "Record"]
