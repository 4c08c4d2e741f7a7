"""The standard types the codec saves natively, each as a marker holding text or numbers.

bytes, bytearray, datetime, date, time, timedelta, UUID, Decimal, pathlib paths and exceptions
(which load as ``StoredError``). None of them holds other values, so none recurses: the
containers (tuple, set, frozenset, dict with other keys) live with the encoder and decoder.
Every encoder and decoder takes the nesting depth, unused here, to share one table with them.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import pathlib
import re
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from relaykit._codec_errors import corrupt
from relaykit.errors import StoredError, StreamCancelledError, WillRetryError

__all__ = ["DECODERS", "ENCODERS", "SUBCLASS_ENCODERS", "Decoder", "Encoder", "expect"]

#: Saves a value at a nesting depth: (value, depth) -> JSON data.
Encoder = Callable[[Any, int], Any]
#: Loads what a marker holds at a nesting depth: (inner, depth) -> value.
Decoder = Callable[[Any, int], Any]


# -- saving ------------------------------------------------------------------------------------
def _b64(value: bytes | bytearray) -> str:
    return base64.b64encode(value).decode("ascii")


def _encode_error(value: BaseException, depth: int) -> Any:
    type_name = value.type_name if isinstance(value, StoredError) else type(value).__name__
    return {"__error__": {"type": type_name, "message": str(value)}}


# Exact types. The base-class methods (datetime.isoformat, Decimal.__str__) are called, so a
# subclass (saved through SUBCLASS_ENCODERS) is stored as its base class would be.
ENCODERS: dict[type[Any], Encoder] = {
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
#: For subclasses, most specific first (datetime before date, Path before PurePath).
SUBCLASS_ENCODERS: tuple[tuple[type[Any], Encoder], ...] = (
    (bytes, ENCODERS[bytes]),
    (bytearray, ENCODERS[bytearray]),
    (datetime.datetime, ENCODERS[datetime.datetime]),
    (datetime.date, ENCODERS[datetime.date]),
    (datetime.time, ENCODERS[datetime.time]),
    (datetime.timedelta, ENCODERS[datetime.timedelta]),
    (uuid.UUID, ENCODERS[uuid.UUID]),
    (decimal.Decimal, ENCODERS[decimal.Decimal]),
    (pathlib.Path, ENCODERS[pathlib.PosixPath]),
    (pathlib.PureWindowsPath, ENCODERS[pathlib.PureWindowsPath]),
    (pathlib.PurePath, ENCODERS[pathlib.PurePosixPath]),
    (BaseException, _encode_error),
)


# -- loading -----------------------------------------------------------------------------------
def expect(value: Any, kind: type[Any], marker: str) -> Any:
    """``value`` if it is exactly a ``kind`` (a JSON type), else a corrupt-data error."""
    if value.__class__ is not kind:
        raise corrupt(f"{marker} must hold a {kind.__name__}, found {type(value).__name__}")
    return value


def _decode_b64(inner: Any, marker: str) -> bytes:
    try:
        return base64.b64decode(expect(inner, str, marker), validate=True)
    except (ValueError, TypeError):
        raise corrupt(f"{marker} does not hold valid base64") from None


def _parse(marker: str, parse: Callable[[Any], Any]) -> Decoder:
    """A decoder for a marker holding a string parsed by ``parse`` (a constructor)."""

    def decode_marker(inner: Any, depth: int) -> Any:
        try:
            return parse(expect(inner, str, marker))
        except (ValueError, ArithmeticError):
            raise corrupt(f"{marker} does not hold a valid value") from None

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
    parts = expect(inner, list, "__timedelta__")
    if len(parts) != 3 or any(p.__class__ is not int for p in parts):
        raise corrupt("__timedelta__ must hold [days, seconds, microseconds] integers")
    try:
        return datetime.timedelta(days=parts[0], seconds=parts[1], microseconds=parts[2])
    except (OverflowError, ValueError):
        raise corrupt("__timedelta__ is out of range") from None


def _decode_error(inner: Any, depth: int) -> BaseException:
    if (
        inner.__class__ is not dict
        or not inner.keys() <= {"type", "message"}
        or inner.get("message").__class__ is not str
        or inner.get("type", "").__class__ is not str
    ):
        raise corrupt("__error__ must hold an object with a str 'type' and 'message'")
    type_name = inner.get("type", "Exception")
    # The error classes the run loop acts on: a retried stream (FA-17) and a stream cut by a
    # cancel (D26) are left out of histories.
    if type_name == "WillRetryError":
        return WillRetryError(inner["message"])
    if type_name == "StreamCancelledError":
        return StreamCancelledError(inner["message"])
    return StoredError(type_name, inner["message"])


DECODERS: dict[str, Decoder] = {
    "__bytes__": lambda v, d: _decode_b64(v, "__bytes__"),
    "__bytearray__": lambda v, d: bytearray(_decode_b64(v, "__bytearray__")),
    "__datetime__": _parse(
        "__datetime__", lambda t: _with_tiny_offset(datetime.datetime.fromisoformat(t), t)
    ),
    "__date__": _parse("__date__", datetime.date.fromisoformat),
    "__time__": _parse("__time__", lambda t: _with_tiny_offset(datetime.time.fromisoformat(t), t)),
    "__timedelta__": _decode_timedelta,
    "__uuid__": _parse("__uuid__", uuid.UUID),
    "__decimal__": _parse("__decimal__", decimal.Decimal),
    "__path__": _parse("__path__", pathlib.Path),
    "__pureposixpath__": _parse("__pureposixpath__", pathlib.PurePosixPath),
    "__purewindowspath__": _parse("__purewindowspath__", pathlib.PureWindowsPath),
    "__error__": _decode_error,
}
