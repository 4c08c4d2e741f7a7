"""JSON codec with a registry of named types (D10). Nothing is unpickled, imported or evaluated
from a document.

Checkpoints are loaded from storage that an attacker may control, so loading trusts nothing:
only classes registered with ``register_type`` are ever constructed, every field of a
registered dataclass is checked against its type hints before the class sees it (the hints are
the class's own code, resolved once per class), nesting is bounded, and every failure is a
``SerializationError`` naming what was wrong — type and field names, never stored values.

How values are saved
--------------------
``None``, ``bool``, ``int``, ``float`` (finite), ``str`` and ``list`` are saved as themselves,
and a ``dict`` whose keys are all ``str`` not starting with ``__`` as a JSON object. Everything
else is an object with a reserved key (a *marker*)::

    tuple                   {"__tuple__": [...]}
    dict (other keys)       {"__dict__": [[key, value], ...]}
    set / frozenset         {"__set__": [...]} / {"__frozenset__": [...]}
    bytes / bytearray       {"__bytes__": "<base64>"} / {"__bytearray__": "<base64>"}
    datetime / date / time  {"__datetime__": "<ISO 8601>"} / {"__date__": ...} / {"__time__": ...}
    timedelta               {"__timedelta__": [days, seconds, microseconds]}
    uuid.UUID               {"__uuid__": "<hex>"}
    decimal.Decimal         {"__decimal__": "<str(value)>"}
    pathlib.Path            {"__path__": "..."} (comes back as the reader's ``Path``)
    PurePosixPath / PureWindowsPath  {"__pureposixpath__": ...} / {"__purewindowspath__": ...}
    exception               {"__error__": {"type": name, "message": text}} (loads as StoredError)
    MessageStream (ended)   {"__stream__": {"message": ..., "error": ...}}
    registered dataclass / pydantic model   {"__type__": name, "data": {field: value, ...}}
    member of a registered Enum             {"__enum__": name, "member": member name}

Aware datetimes and times are saved with their UTC offset and come back with a fixed-offset
``datetime.timezone``: a ``zoneinfo`` zone comes back as its offset at that instant (the same
instant and ``utcoffset()``; the zone's name and rules are not saved, so loading never reads zone
files). ``fold`` is not saved. Subclasses of ``int``, ``float`` and ``str`` that are not
registered (an unregistered ``IntEnum``, say) are saved as the plain value.

How loaded values are checked
-----------------------------
Every field of a registered dataclass must fit its annotation: ``Any``, ``None``, unions,
``Literal``, ``list`` / ``set`` / ``frozenset`` / ``tuple`` / ``dict`` and their
``collections.abc`` counterparts (items included), classes by ``isinstance`` (an ``int`` fits
``float``, a ``bool`` fits ``int``, a loaded ``StoredError`` fits any exception class). An
annotation that cannot be judged (a protocol, a name that does not resolve) accepts anything.
Unknown and missing fields are refused; pydantic models validate themselves. Nesting is bounded
by ``MAX_DEPTH``: every list, dict, tuple, set, registered object or other marker is one level.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import datetime
import decimal
import enum
import hashlib
import hmac
import inspect
import json
import math
import pathlib
import re
import sys
import types
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from typing import Any, Literal, TypeVar

from relaykit.errors import SerializationError, StoredError, WillRetryError

__all__ = ["FORMAT_VERSION", "MAX_DEPTH", "decode", "dumps", "encode", "loads",
           "materialize_streams", "register_type"]

FORMAT_VERSION = 1
#: Most levels of containers (lists, dicts, tuples, sets, registered objects, markers) a saved
#: value may nest. A checkpoint takes about ten levels and each agent tool nested in it about
#: seven more; the bound keeps hostile documents far from Python's recursion limit (a level is
#: at most three JSON levels and three Python frames).
MAX_DEPTH = 100
T = TypeVar("T")

_NoneType = type(None)
# A field check: a tuple of classes (isinstance), a predicate, or None (anything fits).
_Check = tuple[type[Any], ...] | Callable[[Any], bool] | None


@dataclasses.dataclass(slots=True)
class _Shape:
    """What a registered dataclass accepts on load, resolved once from its type hints."""

    checks: dict[str, _Check]  # every field a document may hold → its check
    required: frozenset[str]
    hints: dict[str, Any]
    # None when every hint was resolved; else the registry generation it was built at, so it is
    # rebuilt once more classes are registered (a forward reference may resolve then).
    generation: int | None


@dataclasses.dataclass(slots=True, eq=False)
class _Entry:
    """One registered class."""

    name: str
    cls: type[Any]
    kind: Literal["dataclass", "pydantic", "enum"]
    saved: tuple[str, ...] = ()  # dataclass fields that are saved, in order
    excluded: frozenset[str] = frozenset()
    shape: _Shape | None = None


_by_name: dict[str, _Entry] = {}
_by_type: dict[type[Any], _Entry] = {}
_generation = 0


def register_type(name: str, *, exclude: Iterable[str] = ()) -> Callable[[type[T]], type[T]]:
    """Class decorator: values of this dataclass, pydantic model or Enum can be saved as ``name``.

    ``exclude`` names dataclass fields that are not saved (they need a default). Enum members are
    saved by name.

    >>> @register_type("myapp.Approval")
    ... @dataclasses.dataclass
    ... class Approval:
    ...     amount: int
    """
    skipped = frozenset(exclude)

    def decorate(cls: type[T]) -> type[T]:
        global _generation
        entry = _new_entry(name, cls, skipped)
        known = _by_name.get(name)
        if (known is not None and known.cls is not cls
                and known.cls.__qualname__ != cls.__qualname__):
            raise ValueError(f"register_type: name {name!r} is already used by "
                             f"{known.cls.__qualname__}")
        _by_name[name] = entry
        _by_type[cls] = entry
        _generation += 1
        return cls

    return decorate


def _new_entry(name: str, cls: type[Any], skipped: frozenset[str]) -> _Entry:
    where = f"register_type({name!r}): {getattr(cls, '__qualname__', cls)!r}"
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        if skipped:
            raise TypeError(f"{where} is an Enum: exclude= does not apply")
        return _Entry(name, cls, "enum")
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for field_name in skipped:
            f = fields.get(field_name)
            if f is None:
                raise TypeError(f"{where} has no field {field_name!r} to exclude")
            if (f.init and f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING):
                raise TypeError(f"{where}: excluded field {field_name!r} needs a default")
        saved = tuple(f.name for f in fields.values() if f.init and f.name not in skipped)
        return _Entry(name, cls, "dataclass", saved, skipped)
    if hasattr(cls, "model_validate") and hasattr(cls, "model_dump"):
        return _Entry(name, cls, "pydantic", (), skipped)
    raise TypeError(f"{where} is neither a dataclass, a pydantic model nor an Enum")


# -- errors ------------------------------------------------------------------------------------
def _too_deep() -> SerializationError:
    return SerializationError(
        f"the data is nested deeper than {MAX_DEPTH} levels (lists, dicts, tuples, sets and "
        "registered objects each count one level; is it cyclic?)")


def _quote(text: str) -> str:
    """A name read from a document, shortened, for an error message."""
    return repr(text if len(text) <= 80 else text[:80] + "…")


def _corrupt(what: str) -> SerializationError:
    return SerializationError(f"corrupt data: {what}")


# -- encoding ----------------------------------------------------------------------------------
def encode(value: Any) -> Any:
    """``value`` as JSON-compatible data (raises SerializationError for types it cannot save).

    >>> encode((1, b"a"))
    {'__tuple__': [1, {'__bytes__': 'YQ=='}]}
    """
    try:
        return _encode(value, 0)
    except RecursionError:
        raise _too_deep() from None


def _encode(value: Any, depth: int) -> Any:
    cls = value.__class__
    if cls is str or cls is int or cls is float or cls is bool or value is None:
        return value
    if depth >= MAX_DEPTH:
        raise _too_deep()
    depth += 1
    if cls is list:
        return [_encode(v, depth) for v in value]
    if cls is dict:
        return _encode_dict(value, depth)
    entry = _by_type.get(cls)
    if entry is not None:
        return _encode_registered(entry, value, depth)
    encoder = _ENCODERS.get(cls)
    if encoder is not None:
        return encoder(value, depth)
    return _encode_other(value, depth)


def _encode_dict(value: Mapping[Any, Any], depth: int) -> Any:
    for k in value:
        if k.__class__ is not str or k.startswith("__"):
            return {"__dict__": [[_encode(k, depth), _encode(v, depth)] for k, v in value.items()]}
    return {k: _encode(v, depth) for k, v in value.items()}


def _encode_registered(entry: _Entry, value: Any, depth: int) -> Any:
    if entry.kind == "dataclass":
        data = {name: _encode(getattr(value, name), depth) for name in entry.saved}
    elif entry.kind == "enum":
        return {"__enum__": entry.name, "member": value.name or ""}
    else:
        try:
            dumped = value.model_dump(mode="json", exclude=set(entry.excluded) or None)
        except Exception as exc:
            raise SerializationError(f"cannot save {entry.cls.__qualname__} ({entry.name!r}): "
                                     f"model_dump failed with {type(exc).__name__}") from exc
        data = _encode(dumped, depth)
    return {"__type__": entry.name, "data": data}


def _b64(value: bytes | bytearray) -> str:
    return base64.b64encode(value).decode("ascii")


def _encode_error(value: BaseException, depth: int) -> Any:
    type_name = value.type_name if isinstance(value, StoredError) else type(value).__name__
    return {"__error__": {"type": type_name, "message": str(value)}}


def _encode_stream(stream: Any, depth: int) -> Any:
    from relaykit.messages import concat_messages

    if not stream.done:
        raise SerializationError("cannot save a message stream that has not ended; "
                                 "materialise it first (materialize_streams)")
    chunks = stream.chunks
    message = concat_messages(chunks) if chunks else None
    return {"__stream__": {"message": _encode(message, depth),
                           "error": _encode(stream.error, depth)}}


_Encoder = Callable[[Any, int], Any]
# Exact types; subclasses go through _encode_other's isinstance checks.
_ENCODERS: dict[type[Any], _Encoder] = {
    tuple: lambda v, d: {"__tuple__": [_encode(x, d) for x in v]},
    set: lambda v, d: {"__set__": [_encode(x, d) for x in v]},
    frozenset: lambda v, d: {"__frozenset__": [_encode(x, d) for x in v]},
    bytes: lambda v, d: {"__bytes__": _b64(v)},
    bytearray: lambda v, d: {"__bytearray__": _b64(v)},
    datetime.datetime: lambda v, d: {"__datetime__": datetime.datetime.isoformat(v)},
    datetime.date: lambda v, d: {"__date__": datetime.date.isoformat(v)},
    datetime.time: lambda v, d: {"__time__": datetime.time.isoformat(v)},
    datetime.timedelta: lambda v, d: {"__timedelta__": [v.days, v.seconds, v.microseconds]},
    uuid.UUID: lambda v, d: {"__uuid__": str(v)},
    decimal.Decimal: lambda v, d: {"__decimal__": decimal.Decimal.__str__(v)},
    pathlib.PosixPath: lambda v, d: {"__path__": str(v)},
    pathlib.WindowsPath: lambda v, d: {"__path__": str(v)},
    pathlib.PurePosixPath: lambda v, d: {"__pureposixpath__": str(v)},
    pathlib.PureWindowsPath: lambda v, d: {"__purewindowspath__": str(v)},
}
# For subclasses, most specific first (datetime before date, Path before PurePath).
_SUBCLASS_ENCODERS: tuple[tuple[type[Any], _Encoder], ...] = (
    (list, lambda v, d: [_encode(x, d) for x in v]),
    (dict, _encode_dict),
    (tuple, _ENCODERS[tuple]),
    (set, _ENCODERS[set]),
    (frozenset, _ENCODERS[frozenset]),
    (bytes, _ENCODERS[bytes]),
    (bytearray, _ENCODERS[bytearray]),
    (datetime.datetime, _ENCODERS[datetime.datetime]),
    (datetime.date, _ENCODERS[datetime.date]),
    (datetime.time, _ENCODERS[datetime.time]),
    (datetime.timedelta, _ENCODERS[datetime.timedelta]),
    (uuid.UUID, _ENCODERS[uuid.UUID]),
    (decimal.Decimal, _ENCODERS[decimal.Decimal]),
    (pathlib.Path, _ENCODERS[pathlib.PosixPath]),
    (pathlib.PureWindowsPath, _ENCODERS[pathlib.PureWindowsPath]),
    (pathlib.PurePath, _ENCODERS[pathlib.PurePosixPath]),
    (BaseException, _encode_error),
)

_SAVABLE = ("None, bool, int, float, str, list, dict, tuple, set, frozenset, bytes, bytearray, "
            "datetime, date, time, timedelta, UUID, Decimal, pathlib paths")


def _encode_other(value: Any, depth: int) -> Any:
    from relaykit.messages import MessageStream

    cls = type(value)
    where = f"{cls.__module__}.{cls.__qualname__}"
    if isinstance(value, enum.Enum) and not isinstance(value, (int, float, str)):
        raise SerializationError(
            f"cannot save a member of the Enum {where}: register the Enum with "
            "@relaykit.register_type('<stable name>') (members are saved by name)")
    # Unregistered subclasses of the JSON scalars (an IntEnum, a str subclass) were always saved
    # as the plain value; keep doing so. The base-class methods return the exact base type.
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, MessageStream):
        return _encode_stream(value, depth)
    for base, encoder in _SUBCLASS_ENCODERS:
        if isinstance(value, base):
            return encoder(value, depth)
    if dataclasses.is_dataclass(value) or hasattr(value, "model_validate"):
        advice = ("register its class with @relaykit.register_type('<stable name>') "
                  "(dataclasses, pydantic models and Enums can be registered)")
    else:
        advice = (f"convert it to one of the types relaykit saves ({_SAVABLE}) or to a "
                  "dataclass, pydantic model or Enum registered with "
                  "@relaykit.register_type('<stable name>')")
    raise SerializationError(f"cannot save a value of type {where}: {advice}")


# -- decoding ----------------------------------------------------------------------------------
def decode(data: Any) -> Any:
    """The inverse of ``encode``: raises SerializationError for anything ``encode`` cannot have
    written (a wrong shape, an unknown type name, nesting deeper than ``MAX_DEPTH``).

    >>> decode({"__tuple__": [1, {"__bytes__": "YQ=="}]})
    (1, b'a')
    """
    try:
        return _decode(data, 0)
    except RecursionError:
        raise _too_deep() from None


def _decode(data: Any, depth: int) -> Any:
    cls = data.__class__
    if cls is str or cls is int or cls is float or cls is bool or data is None:
        return data
    if depth >= MAX_DEPTH:
        raise _too_deep()
    depth += 1
    if cls is list:
        return [_decode(v, depth) for v in data]
    if cls is not dict:
        raise SerializationError(f"unexpected value of type {cls.__name__} (not JSON data)")
    size = len(data)
    if size == 2:
        if "__type__" in data:
            return _decode_typed(data, depth)
        if "__enum__" in data:
            return _decode_enum(data)
    elif size == 1:
        (key, inner), = data.items()
        if key.__class__ is str and key.startswith("__"):
            handler = _MARKERS.get(key)
            if handler is None:
                raise _corrupt(f"unknown marker {_quote(key)}")
            return handler(inner, depth)
    out = {}
    for key, value in data.items():
        if key.__class__ is not str:
            raise _corrupt(f"an object key must be a str, found {type(key).__name__}")
        if key.startswith("__"):
            raise _corrupt("an object mixes a reserved key (starting with '__') with other keys")
        out[key] = _decode(value, depth)
    return out


def _expect(value: Any, kind: type[Any], marker: str) -> Any:
    if value.__class__ is not kind:
        raise _corrupt(f"{marker} must hold a {kind.__name__}, found {type(value).__name__}")
    return value


def _decode_pairs(inner: Any, depth: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for pair in _expect(inner, list, "__dict__"):
        if pair.__class__ is not list or len(pair) != 2:
            raise _corrupt("__dict__ must hold [key, value] pairs")
        key = _decode(pair[0], depth)
        value = _decode(pair[1], depth)
        try:
            out[key] = value
        except TypeError:
            raise _corrupt(f"a dict key of type {type(key).__name__} is not hashable") from None
    return out


def _decode_set(inner: Any, depth: int, marker: str) -> set[Any]:
    items = [_decode(v, depth) for v in _expect(inner, list, marker)]
    try:
        return set(items)
    except TypeError:
        bad = next((type(v).__name__ for v in items if not _hashable(v)), "unknown type")
        raise _corrupt(f"a {marker} item of type {bad} is not hashable") from None


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _decode_b64(inner: Any, marker: str) -> bytes:
    try:
        return base64.b64decode(_expect(inner, str, marker), validate=True)
    except (ValueError, TypeError):
        raise _corrupt(f"{marker} does not hold valid base64") from None


def _parse(marker: str, parse: Callable[[Any], Any]) -> Callable[[Any, int], Any]:
    """A decoder for a marker holding a string parsed by ``parse`` (a constructor)."""

    def decode_marker(inner: Any, depth: int) -> Any:
        try:
            return parse(_expect(inner, str, marker))
        except (ValueError, ArithmeticError):
            raise _corrupt(f"{marker} does not hold a valid value") from None

    return decode_marker


# CPython 3.11's fromisoformat reads an offset under one second ("+00:00:00.000001") as UTC.
_TINY_OFFSET = re.compile(r"([+-])00:00:00\.(\d{6})$")
_Clock = TypeVar("_Clock", datetime.datetime, datetime.time)


def _with_tiny_offset(value: _Clock, text: str) -> _Clock:
    if value.tzinfo is None or value.utcoffset():
        return value
    match = _TINY_OFFSET.search(text)
    if match is None:
        return value
    micros = int(match[2]) * (-1 if match[1] == "-" else 1)
    return value.replace(tzinfo=datetime.timezone(datetime.timedelta(microseconds=micros)))


def _decode_timedelta(inner: Any, depth: int) -> datetime.timedelta:
    parts = _expect(inner, list, "__timedelta__")
    if len(parts) != 3 or any(p.__class__ is not int for p in parts):
        raise _corrupt("__timedelta__ must hold [days, seconds, microseconds] integers")
    try:
        return datetime.timedelta(days=parts[0], seconds=parts[1], microseconds=parts[2])
    except (OverflowError, ValueError):
        raise _corrupt("__timedelta__ is out of range") from None


def _decode_error(inner: Any, depth: int) -> BaseException:
    if (inner.__class__ is not dict or not inner.keys() <= {"type", "message"}
            or inner.get("message").__class__ is not str
            or inner.get("type", "").__class__ is not str):
        raise _corrupt("__error__ must hold an object with a str 'type' and 'message'")
    type_name = inner.get("type", "Exception")
    if type_name == "WillRetryError":
        return WillRetryError(inner["message"])
    return StoredError(type_name, inner["message"])


def _decode_stream(inner: Any, depth: int) -> Any:
    from relaykit.messages import Message, MessageStream

    if inner.__class__ is not dict or not inner.keys() <= {"message", "error"}:
        raise _corrupt("__stream__ must hold an object with 'message' and 'error'")
    message = _decode(inner.get("message"), depth)
    error = _decode(inner.get("error"), depth)
    if message is not None and not isinstance(message, Message):
        raise _corrupt(f"a stream must hold a relaykit.Message, found {type(message).__name__}")
    if error is not None and not isinstance(error, BaseException):
        raise _corrupt(f"a stream's error must be an error, found {type(error).__name__}")
    chunks = [message] if message is not None else []
    if error is not None:
        return MessageStream.failed(chunks, error)
    return MessageStream.from_list(chunks)


def _decode_lone(marker: str) -> Callable[[Any, int], Any]:
    def reject(inner: Any, depth: int) -> Any:
        raise _corrupt(f"{marker} needs a second key")

    return reject


_MARKERS: dict[str, Callable[[Any, int], Any]] = {
    "__tuple__": lambda v, d: tuple([_decode(x, d) for x in _expect(v, list, "__tuple__")]),
    "__dict__": _decode_pairs,
    "__set__": lambda v, d: _decode_set(v, d, "__set__"),
    "__frozenset__": lambda v, d: frozenset(_decode_set(v, d, "__frozenset__")),
    "__bytes__": lambda v, d: _decode_b64(v, "__bytes__"),
    "__bytearray__": lambda v, d: bytearray(_decode_b64(v, "__bytearray__")),
    "__datetime__": _parse("__datetime__", lambda t: _with_tiny_offset(
        datetime.datetime.fromisoformat(t), t)),
    "__date__": _parse("__date__", datetime.date.fromisoformat),
    "__time__": _parse("__time__", lambda t: _with_tiny_offset(datetime.time.fromisoformat(t), t)),
    "__timedelta__": _decode_timedelta,
    "__uuid__": _parse("__uuid__", uuid.UUID),
    "__decimal__": _parse("__decimal__", decimal.Decimal),
    "__path__": _parse("__path__", pathlib.Path),
    "__pureposixpath__": _parse("__pureposixpath__", pathlib.PurePosixPath),
    "__purewindowspath__": _parse("__purewindowspath__", pathlib.PureWindowsPath),
    "__error__": _decode_error,
    "__stream__": _decode_stream,
    "__type__": _decode_lone("__type__ (with 'data')"),
    "__enum__": _decode_lone("__enum__ (with 'member')"),
}


def _registered(data: dict[str, Any], marker: str, kind: str) -> _Entry:
    name = data[marker]
    if name.__class__ is not str:
        raise _corrupt(f"{marker} must hold a type name (a str), found {type(name).__name__}")
    entry = _by_name.get(name)
    if entry is None:
        raise SerializationError(
            f"unknown type name {_quote(name)} in stored data: register the class with "
            f"@relaykit.register_type({_quote(name)}) before loading")
    if (entry.kind == "enum") != (kind == "enum"):
        stored_as = "an Enum member" if kind == "enum" else "an object"
        raise _corrupt(f"type name {_quote(name)} is stored as {stored_as} but is registered "
                       f"for {entry.cls.__qualname__}")
    return entry


def _decode_enum(data: dict[str, Any]) -> Any:
    entry = _registered(data, "__enum__", "enum")
    member = data.get("member")
    if member.__class__ is not str:
        raise _corrupt(f"__enum__ {entry.name!r} needs a str 'member'")
    cls = entry.cls
    try:
        if issubclass(cls, enum.Flag) and ("|" in member or not member):
            value = cls(0)
            for part in member.split("|") if member else ():
                value |= cls[part]
            return value
        return cls[member]
    except (KeyError, ValueError, TypeError):
        raise SerializationError(f"stored data for type {entry.name!r} names a member that "
                                 f"{cls.__qualname__} does not have") from None


def _decode_typed(data: dict[str, Any], depth: int) -> Any:
    # The hot path of loading: every registered dataclass goes through this loop.
    name = data["__type__"]
    entry = _by_name.get(name) if name.__class__ is str else None
    fields = data.get("data")
    if entry is None or entry.kind != "dataclass" or fields.__class__ is not dict:
        return _decode_typed_other(data, depth)
    shape = entry.shape
    if shape is None or (shape.generation is not None and shape.generation != _generation):
        shape = entry.shape = _shape_of(entry)
    checks: dict[str, Any] = shape.checks  # Any: the loop tells tuples from predicates itself
    kwargs: dict[str, Any] = {}
    for field_name, raw in fields.items():
        check = checks.get(field_name, _UNKNOWN)
        if check is _UNKNOWN:
            raise SerializationError(f"stored data for type {name!r} does not fit "
                                     f"{entry.cls.__qualname__}: unknown field "
                                     f"{_quote(field_name)}")
        kind = raw.__class__
        if kind is str or raw is None or kind is bool or kind is int or kind is float:
            value = raw  # a scalar: no call needed
        else:
            value = _decode(raw, depth)
        if check is not None and not (isinstance(value, check) if check.__class__ is tuple
                                      else check(value)):
            raise SerializationError(_misfit(entry, shape, field_name, value))
        kwargs[field_name] = value
    if len(kwargs) != len(checks) and not shape.required <= kwargs.keys():
        missing = ", ".join(repr(n) for n in sorted(shape.required - kwargs.keys()))
        raise SerializationError(f"stored data for type {name!r} does not fit "
                                 f"{entry.cls.__qualname__}: missing required field(s) {missing}")
    try:
        return entry.cls(**kwargs)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"stored data for type {name!r} was refused by "
                                 f"{entry.cls.__qualname__}: {type(exc).__name__}") from None


def _decode_typed_other(data: dict[str, Any], depth: int) -> Any:
    """Pydantic models, and the reasons a ``__type__`` marker is malformed."""
    entry = _registered(data, "__type__", "object")
    if "data" not in data:
        raise _corrupt(f"__type__ {entry.name!r} needs 'data'")
    fields = data["data"]
    cls = entry.cls
    if fields.__class__ is not dict and not (
            entry.kind == "pydantic" and getattr(cls, "__pydantic_root_model__", False)):
        raise _corrupt(f"the data of {entry.name!r} must be an object, found "
                       f"{type(fields).__name__}")
    value = _decode(fields, depth)
    try:
        return cls.model_validate(value)
    except Exception as exc:
        raise SerializationError(_pydantic_problem(entry, exc)) from None


_UNKNOWN: Any = object()


def _pydantic_problem(entry: _Entry, exc: Exception) -> str:
    """Which fields a pydantic model refused: field names and error kinds, never the input."""
    problems: list[str] = []
    errors = getattr(exc, "errors", None)
    known = getattr(entry.cls, "model_fields", {})
    if callable(errors):
        try:
            items = errors(include_url=False, include_input=False, include_context=False)
        except Exception:
            items = []
        for item in items[:10]:
            loc = item.get("loc") or ()
            head = loc[0] if loc else None
            place = (f"field {head!r}" if isinstance(head, str) and head in known
                     else "the model" if head is None else "an unknown field")
            problems.append(f"{place} ({item.get('type', 'invalid')})")
    detail = "; ".join(dict.fromkeys(problems)) or type(exc).__name__
    return (f"stored data for type {entry.name!r} does not fit {entry.cls.__qualname__}: "
            f"{detail}")


# -- shape checks ------------------------------------------------------------------------------
def _shape_of(entry: _Entry) -> _Shape:
    """Resolve the type hints of a registered dataclass into field checks (cached per class)."""
    cls = entry.cls
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name in entry.saved}
    hints, complete = _resolve_hints(cls, list(fields))
    checks = {name: _compile(hints.get(name, Any)) for name in fields}
    required = frozenset(name for name, f in fields.items()
                         if f.default is dataclasses.MISSING
                         and f.default_factory is dataclasses.MISSING)
    return _Shape(checks, required, hints, None if complete else _generation)


def _resolve_hints(cls: type[Any], names: list[str]) -> tuple[dict[str, Any], bool]:
    """Field annotations, evaluated; (hints, False) when some stay unresolved (then Any).

    Names imported only for type checking are looked up among the registered classes, after
    the module's own names (a registered class elsewhere must not shadow them).
    """
    try:
        return typing.get_type_hints(cls), True
    except Exception:
        pass
    by_name: dict[str, Any] = {}
    for other in _by_type:
        by_name[other.__name__] = None if other.__name__ in by_name else other
    fallback = {k: v for k, v in by_name.items() if v is not None}
    hints: dict[str, Any] = {}
    complete = True
    for name in names:
        owner = next((k for k in cls.__mro__ if name in inspect.get_annotations(k)), cls)
        annotation = inspect.get_annotations(owner).get(name, Any)
        module = sys.modules.get(owner.__module__)
        namespace = {**fallback, **(vars(module) if module is not None else {})}
        holder = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            hints[name] = typing.get_type_hints(holder, globalns=namespace)[name]
        except Exception:
            hints[name] = Any
            complete = False
    return hints, complete


def _class_check(cls: type[Any]) -> _Check:
    if cls is object:
        return None
    if cls is float:
        return (int, float)  # an int is a float for typing (PEP 484 numeric tower)
    if cls is complex:
        return (int, float, complex)
    if cls is bytes:
        return (bytes, bytearray)
    if issubclass(cls, BaseException):
        return (cls, StoredError)  # loaded errors keep only their type name and text
    if getattr(cls, "_is_protocol", False):
        return None  # cannot judge structural types cheaply (or at all, if not runtime)
    return (cls,)


_COLLECTIONS = {list, set, frozenset}


def _compile(annotation: Any, level: int = 0) -> _Check:
    """A check for values of ``annotation``; None where it cannot judge (so it accepts)."""
    if level > 12 or annotation is Any:
        return None
    if annotation is None or annotation is _NoneType:
        return (_NoneType,)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is None:
        if isinstance(annotation, typing.NewType):
            return _compile(annotation.__supertype__, level + 1)
        return _class_check(annotation) if isinstance(annotation, type) else None
    if origin is typing.Annotated or origin in (typing.ClassVar, typing.Final):
        return _compile(args[0], level + 1) if args else None
    if origin is typing.Union or origin is types.UnionType:
        return _union_check([_compile(a, level + 1) for a in args])
    if origin is typing.Literal:
        return _literal_check(args)
    if origin is tuple:
        return _tuple_check(args, level)
    if not isinstance(origin, type):
        return None
    base = _class_check(origin)
    if base is None or not args:
        return base
    if issubclass(origin, Mapping) and len(args) == 2:
        return _mapping_check(origin, base, _compile(args[0], level + 1),
                              _compile(args[1], level + 1))
    if (origin in _COLLECTIONS or origin.__module__ == "collections.abc") and len(args) == 1:
        return _collection_check(origin, base, _compile(args[0], level + 1))
    return base


def _union_check(parts: list[_Check]) -> _Check:
    if any(p is None for p in parts):
        return None
    classes: tuple[type[Any], ...] = ()
    predicates: list[Callable[[Any], bool]] = []
    for part in parts:
        if isinstance(part, tuple):
            classes += part
        elif part is not None:
            predicates.append(part)
    if not predicates:
        return classes
    return lambda v: isinstance(v, classes) or any(p(v) for p in predicates)


def _literal_check(values: tuple[Any, ...]) -> _Check:
    # Compare type and value: True == 1, but a Literal[1] field must not take True.
    if all(type(v) is str for v in values):
        texts = frozenset(values)
        return lambda v: v.__class__ is str and v in texts
    allowed = frozenset((type(v), v) for v in values)
    kinds = frozenset(type(v) for v in values)
    return lambda v: type(v) in kinds and (type(v), v) in allowed


def _items_ok(items: Iterable[Any], check: _Check) -> bool:
    if check is None:
        return True
    if isinstance(check, tuple):
        return all(map(isinstance, items, repeat(check)))
    return all(map(check, items))


def _all_of(container: type[Any], item: _Check) -> Callable[[Any], bool]:
    """A check that a value is a ``container`` whose items all pass ``item``.

    The item loop runs in C (``all(map(...))``): this is on the hot path of every load.
    """
    if isinstance(item, tuple):
        classes = item
        return lambda v: isinstance(v, container) and (
            not v or all(map(isinstance, v, repeat(classes))))
    assert item is not None
    predicate = item
    return lambda v: isinstance(v, container) and (not v or all(map(predicate, v)))


def _tuple_check(args: tuple[Any, ...], level: int) -> _Check:
    if not args:
        return lambda v: v.__class__ is tuple and not v  # tuple[()]
    if len(args) == 2 and args[1] is Ellipsis:
        item = _compile(args[0], level + 1)
        return (tuple,) if item is None else _all_of(tuple, item)
    checks = [_compile(a, level + 1) for a in args]
    return lambda v: (isinstance(v, tuple) and len(v) == len(checks)
                      and all(_items_ok((x,), c) for x, c in zip(v, checks, strict=True)))


# The containers a document can produce; only these are iterated to check their items (a str
# is a Sequence too, but a Sequence[X] field holding one cannot be judged cheaply).
_ITERATED = (list, tuple, set, frozenset)


def _collection_check(origin: type[Any], base: _Check, item: _Check) -> _Check:
    if item is None or not isinstance(base, tuple):
        return base
    if origin in _COLLECTIONS:
        return _all_of(origin, item)
    classes, items_ok = base, _all_of(object, item)
    return lambda v: isinstance(v, classes) and (not isinstance(v, _ITERATED) or items_ok(v))


def _mapping_check(origin: type[Any], base: _Check, key: _Check, value: _Check) -> _Check:
    if (key is None and value is None) or not isinstance(base, tuple):
        return base
    keys_ok = _all_of(dict, key) if key is not None else (lambda v: True)
    if value is None and origin is dict:
        return keys_ok  # dict[str, Any], the usual case: one call
    values_ok = _all_of(object, value) if value is not None else (lambda v: True)
    classes = base
    return lambda v: isinstance(v, classes) and (not isinstance(v, dict) or (
        keys_ok(v) and values_ok(v.values())))


def _type_text(annotation: Any) -> str:
    if annotation is None or annotation is _NoneType:
        return "None"
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__qualname__
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", repr(annotation))


def _describe(value: Any) -> str:
    """The type of ``value`` (with its item types for containers) — never its content."""
    name = type(value).__qualname__
    if isinstance(value, dict) and value:
        keys = sorted({type(k).__qualname__ for k in value})
        values = sorted({type(v).__qualname__ for v in value.values()})
        return f"{name} with {' | '.join(keys[:4])} keys and {' | '.join(values[:4])} values"
    if isinstance(value, (list, tuple, set, frozenset)) and value:
        items = sorted({type(v).__qualname__ for v in value})
        return f"{name} of {' | '.join(items[:4])}"
    return name


def _misfit(entry: _Entry, shape: _Shape, field_name: str, value: Any) -> str:
    expected = _type_text(shape.hints.get(field_name, Any))
    return (f"stored data for type {entry.name!r} does not fit {entry.cls.__qualname__}: "
            f"field {field_name!r} must be {expected}, found {_describe(value)}")


# -- documents ---------------------------------------------------------------------------------
def _signature(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def dumps(payload: Any, *, kind: str, key: bytes | None = None) -> bytes:
    """A versioned JSON document of ``kind`` holding ``payload`` (signed when ``key`` is set).

    >>> dumps({"a": 1}, kind="demo")
    b'{"format":"demo","version":1,"payload":{"a":1}}'
    """
    encoded = encode(payload)
    try:
        body = json.dumps(encoded, separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(f"cannot save {kind} data: a string holds an unpaired "
                                 "surrogate, which is not valid UTF-8") from None
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:
        raise SerializationError(f"cannot save {kind} data: {exc} (NaN and infinite floats "
                                 "are not valid JSON)") from None
    doc: dict[str, Any] = {"format": kind, "version": FORMAT_VERSION, "payload": "__BODY__"}
    if key is not None:
        doc["signature"] = _signature(key, body)
    head = json.dumps(doc, separators=(",", ":")).encode("utf-8")
    return head.replace(b'"__BODY__"', body, 1)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("a number is out of the float range")
    return value


def _reject_constant(text: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


def loads(data: bytes, *, kind: str, key: bytes | None = None, what: str = "document") -> Any:
    """Load a document written by ``dumps``; every failure is a SerializationError naming
    ``what`` (e.g. ``checkpoint 'c1'``) and what was wrong, never the stored content.

    >>> loads(b'{"format":"demo","version":1,"payload":{"a":1}}', kind="demo")
    {'a': 1}
    """
    try:
        return _loads(data, kind, key, what)
    except SerializationError:
        raise
    except RecursionError:
        raise SerializationError(f"{what}: {_too_deep()}") from None
    except Exception as exc:  # a safety net: loading must fail only with SerializationError
        raise SerializationError(f"{what} could not be loaded ({type(exc).__name__})") from exc


def _loads(data: Any, kind: str, key: bytes | None, what: str) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SerializationError(f"{what} is not bytes (found {type(data).__name__})")
    raw = bytes(data)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(f"{what} is corrupt (not JSON: invalid UTF-8 at byte "
                                 f"{exc.start})") from None
    try:
        doc = json.loads(text, parse_float=_finite_float, parse_constant=_reject_constant)
    except RecursionError:
        raise SerializationError(f"{what} is corrupt (not JSON: nested too deeply)") from None
    except ValueError as exc:
        detail = f"{exc.msg} (line {exc.lineno}, column {exc.colno})" if isinstance(
            exc, json.JSONDecodeError) else str(exc)
        raise SerializationError(f"{what} is corrupt (not JSON: {detail})") from None
    if not isinstance(doc, dict) or doc.get("format") != kind or "payload" not in doc:
        raise SerializationError(f"{what} is not a relaykit {kind} document")
    version = doc.get("version")
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        shown = (f"format version {version}" if type(version) is int and abs(version) < 10**9
                 else f"an invalid format version (a {type(version).__name__})")
        advice = ": upgrade relaykit" if type(version) is int and version > FORMAT_VERSION else ""
        raise SerializationError(f"{what} has {shown}; this relaykit reads versions 1 to "
                                 f"{FORMAT_VERSION}{advice}")
    if key is not None and not _signature_ok(doc, key):
        raise SerializationError(f"{what} failed its signature check (tampered or signed "
                                 "with another key)")
    # JSON escapes can spell unpaired surrogates that dumps would refuse to write again (only
    # escapes can: the bytes were strict UTF-8). Cheap to rule out when no such escape appears.
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(doc["payload"]):
        raise SerializationError(f"{what} is corrupt: a string holds an unpaired surrogate")
    try:
        return _decode(doc["payload"], 0)
    except SerializationError as exc:
        raise SerializationError(f"{what}: {exc}") from None


def _signature_ok(doc: dict[str, Any], key: bytes) -> bool:
    sig = doc.get("signature")
    if not isinstance(sig, str) or not sig.isascii():
        return False
    try:
        body = json.dumps(doc["payload"], separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False).encode("utf-8")
    except (UnicodeEncodeError, ValueError):
        return False  # dumps cannot have signed it
    return hmac.compare_digest(sig, _signature(key, body))


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(payload: Any) -> bool:
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# -- streams -----------------------------------------------------------------------------------
async def materialize_streams(value: Any, _seen: set[int] | None = None) -> None:
    """Read every message stream reachable from ``value`` to its end (errors are kept).

    Raises SerializationError when ``value`` nests deeper than ``MAX_DEPTH`` levels.

    >>> stream = MessageStream.from_list([Message.assistant("hi")])  # doctest: +SKIP
    >>> await materialize_streams({"reply": stream})  # doctest: +SKIP
    """
    for stream in _streams_in(value, _seen if _seen is not None else set()):
        with contextlib.suppress(Exception):
            await stream.collect()


def _streams_in(value: Any, seen: set[int]) -> list[Any]:
    """The message streams reachable from ``value``, in order (an explicit stack, no recursion)."""
    from relaykit.messages import MessageStream

    found: list[Any] = []
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if item is None or isinstance(item, (str, bytes, int, float)) or id(item) in seen:
            continue
        seen.add(id(item))
        children: Iterable[Any]
        if isinstance(item, MessageStream):
            found.append(item)
            continue
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            children = [getattr(item, f.name) for f in dataclasses.fields(item)]
        elif hasattr(item, "__slots__") and hasattr(item, "event"):
            children = (item.event,)  # a RecordedEvent of the run history
        else:
            continue
        if depth >= MAX_DEPTH:
            raise _too_deep()
        stack.extend((child, depth + 1) for child in reversed(list(children)))
    return found
