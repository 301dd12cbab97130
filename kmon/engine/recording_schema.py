"""The type of every field of a recorded snapshot, checked before anything is built of it.

A recording (``kmon attach --json``) is a file anyone may hand to ``kmon replay``. A field
of the wrong type (``"state": 5``, ``"ts_ms": 1e300``, ``"claims": [{}]``) would be taken
in as it is and fail later, in the middle of drawing a screen. Here each record is held
against the types of the model's own dataclasses (``kmon.model``; claims as
``Claim.summary`` writes them), integers within 64 bits and times within years 1970-9999,
floats finite; a mismatch is a ``SchemaError`` naming the field.
"""

from __future__ import annotations

import dataclasses
import math
import types
from enum import Enum
from typing import Any, Union, get_args, get_origin, get_type_hints

from kmon.model import (
    Churn,
    ClientInstance,
    CloseStory,
    Connection,
    Event,
    Finding,
    ProcessView,
    Snapshot,
)
from kmon.sources.text import valid

_INT64 = range(-(2 ** 63), 2 ** 63)
_TIMES = range(0, 253_402_300_800_000)  # epoch ms up to the end of the year 9999
_NONE = type(None)


class SchemaError(ValueError):
    """A record that does not have the shape kmon writes; the message names the field."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """The fields of one kind of record: name -> type, and which of them must be there."""

    types: dict[str, Any]
    required: frozenset[str]


def _shape(cls: type, written: dict[str, Any] | None = None, unwritten: tuple[str, ...] = (),
           required: tuple[str, ...] = ()) -> Shape:
    """The shape of ``cls`` as its ``to_dict()`` writes it: ``written`` adds or overrides
    fields' types, ``unwritten`` are left out; fields with no default are required, and
    those named in ``required``."""
    hints = get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.name not in unwritten]
    kinds = {f.name: hints[f.name] for f in fields} | (written or {})
    needed = {f.name for f in fields if f.default is dataclasses.MISSING
              and f.default_factory is dataclasses.MISSING} | set(required)
    return Shape(kinds, frozenset(needed))


def _list_of(shape: Shape) -> types.GenericAlias:
    """``list[shape]``, a list of records of ``shape``, written so (a shape is a value, and
    the type checker reads ``list[...]`` as a type)."""
    return types.GenericAlias(list, (shape,))


CLAIM = Shape({"source": str, "role": str | None, "node_id": int | None,
               "broker_id": int | None, "confidence": float, "detail": str},
              frozenset({"source", "role", "node_id", "broker_id", "confidence"}))
CLIENT = _shape(ClientInstance)
CONNECTION = _shape(Connection, {"claims": _list_of(CLAIM), "reap_in_ms": int | None})
FINDING = _shape(Finding)
PROCESS = _shape(ProcessView, {"clients": _list_of(CLIENT), "connections": _list_of(CONNECTION),
                               "findings": _list_of(FINDING)},
                 unwritten=("wire_closes",), required=("clients", "connections"))
SNAPSHOT = _shape(Snapshot, {"processes": _list_of(PROCESS)}, unwritten=("lives",),
                  required=("processes",))
EVENT = _shape(Event, unwritten=("close", "churn"))
CLOSE = _shape(CloseStory)
CHURN = _shape(Churn)


def _fits(value: Any, kind: Any, name: str) -> bool:
    """True when ``value`` (as JSON gave it) has type ``kind``; a nested record is checked
    in full, and raises SchemaError for its own field."""
    origin = get_origin(kind)
    if origin in (Union, types.UnionType):
        return any(_fits(value, k, name) for k in get_args(kind))
    if kind is _NONE:
        return value is None
    if kind is object:  # any JSON value (a finding's evidence), each part checked
        return _json_value(value)
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        bounds = _TIMES if name.endswith(".ts_ms") else _INT64
        return isinstance(value, int) and not isinstance(value, bool) and value in bounds
    if kind is float:
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value))
    if kind is str:  # valid text: a "\udcff" escape would reach a screen and break it
        return isinstance(value, str) and valid(value) == value
    if isinstance(kind, type) and issubclass(kind, Enum):
        return isinstance(value, str) and value in kind._value2member_map_
    if isinstance(kind, Shape):
        check(value, kind, name)
        return True
    if origin is list:
        (item,) = get_args(kind)
        return isinstance(value, list) and all(
            _fits(v, item, f"{name}[{index}]") for index, v in enumerate(value))
    if origin is dict:
        key, item = get_args(kind)
        return isinstance(value, dict) and all(
            _fits(k, key, name) and _fits(v, item, f"{name}.{k}") for k, v in value.items())
    return False  # a type a recording never holds (close and churn: flattened into events)


def _json_value(value: Any) -> bool:
    """True when ``value`` is JSON kmon could have written: integers within 64 bits, finite
    floats, valid text, and lists and objects of those."""
    if value is None or isinstance(value, bool):
        return True
    if isinstance(value, int):
        return value in _INT64
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, str):
        return valid(value) == value
    if isinstance(value, list):
        return all(_json_value(v) for v in value)
    return isinstance(value, dict) and all(
        isinstance(k, str) and valid(k) == k and _json_value(v) for k, v in value.items())


def check(record: Any, shape: Shape, where: str) -> None:
    """Raise SchemaError unless ``record`` is a dict with ``shape``'s fields, each of its type
    (fields kmon does not know are left out of the check, as they are of the replay)."""
    if not isinstance(record, dict):
        raise SchemaError(f"{where} is {_kind(record)}, not an object")
    missing = shape.required - record.keys()
    if missing:
        raise SchemaError(f"{where} has no {', '.join(sorted(missing))}")
    for name, kind in shape.types.items():
        if name in record and not _fits(record[name], kind, f"{where}.{name}"):
            value = record[name]
            if isinstance(value, str) and valid(value) != value:
                raise SchemaError(f"{where}.{name} is no valid text (a lone surrogate)")
            raise SchemaError(f"{where}.{name} is {_kind(value)}, not {_name(kind)}")


def check_event(record: Any, where: str) -> None:
    """An event, with its close story or churn pattern when it has one."""
    check(record, EVENT, where)
    if record.get("closed_by") is not None:
        check(record, CLOSE, where)
    if record.get("pattern") is not None:
        check(record, CHURN, where)


def _kind(value: Any) -> str:
    shown = repr(value)
    return f"{type(value).__name__} {shown[:40]}{'…' if len(shown) > 40 else ''}"


def _name(kind: Any) -> str:
    if isinstance(kind, Shape):
        return "an object"
    return getattr(kind, "__name__", None) or str(kind).replace("kmon.model.", "")
