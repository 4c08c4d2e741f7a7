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
    MessageStream (ended)   {"__stream__": {"message": ..., "error": ...}} (an adapter)
    registered dataclass / pydantic model   {"__type__": name, "data": {field: value, ...}}
    member of a registered Enum             {"__enum__": name, "member": member name}
    value of an adapted class               {"__<name>__": {field: value, ...}}

Classes that are neither dataclasses, pydantic models nor Enums are saved through an *adapter*
(``register_adapter``) registered by the module that defines them: ``relaykit.messages``
registers ``MessageStream`` as ``stream``, so the codec never imports the message module.

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

Where the pieces live
---------------------
This module is the public surface and the document format (``dumps`` / ``loads``: versions,
signatures). The rest is private, one concept a module: ``_codec_registry`` (named types),
``_codec_adapters`` (adapters, ``materialize_streams``), ``_codec_types`` (the standard types),
``_codec_encode`` and ``_codec_decode`` (the two walks), ``_codec_shapes`` (field checks from
type hints) and ``_codec_errors`` (the nesting bound, error wording).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import re
from typing import Any

from relaykit._codec_adapters import materialize_streams, register_adapter
from relaykit._codec_decode import decode
from relaykit._codec_encode import encode
from relaykit._codec_errors import MAX_DEPTH, too_deep
from relaykit._codec_registry import register_type
from relaykit.errors import SerializationError

__all__ = [
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "decode",
    "dumps",
    "encode",
    "loads",
    "materialize_streams",
    "register_adapter",
    "register_type",
]

#: The version ``dumps`` writes; ``loads`` reads versions 1 to this one.
FORMAT_VERSION = 1


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
        body = json.dumps(
            encoded, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except UnicodeEncodeError:
        raise SerializationError(
            f"cannot save {kind} data: a string holds an unpaired "
            "surrogate, which is not valid UTF-8"
        ) from None
    except RecursionError:
        raise too_deep() from None
    except ValueError as exc:
        raise SerializationError(
            f"cannot save {kind} data: {exc} (NaN and infinite floats are not valid JSON)"
        ) from None
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
        raise SerializationError(f"{what}: {too_deep()}") from None
    except Exception as exc:  # a safety net: loading must fail only with SerializationError
        raise SerializationError(f"{what} could not be loaded ({type(exc).__name__})") from exc


def _loads(data: Any, kind: str, key: bytes | None, what: str) -> Any:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SerializationError(f"{what} is not bytes (found {type(data).__name__})")
    raw = bytes(data)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SerializationError(
            f"{what} is corrupt (not JSON: invalid UTF-8 at byte {exc.start})"
        ) from None
    try:
        doc = json.loads(text, parse_float=_finite_float, parse_constant=_reject_constant)
    except RecursionError:
        raise SerializationError(f"{what} is corrupt (not JSON: nested too deeply)") from None
    except ValueError as exc:
        detail = (
            f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
            if isinstance(exc, json.JSONDecodeError)
            else str(exc)
        )
        raise SerializationError(f"{what} is corrupt (not JSON: {detail})") from None
    if not isinstance(doc, dict) or doc.get("format") != kind or "payload" not in doc:
        raise SerializationError(f"{what} is not a relaykit {kind} document")
    version = doc.get("version")
    if type(version) is not int or not 1 <= version <= FORMAT_VERSION:
        shown = (
            f"format version {version}"
            if type(version) is int and abs(version) < 10**9
            else f"an invalid format version (a {type(version).__name__})"
        )
        advice = ": upgrade relaykit" if type(version) is int and version > FORMAT_VERSION else ""
        raise SerializationError(
            f"{what} has {shown}; this relaykit reads versions 1 to {FORMAT_VERSION}{advice}"
        )
    if key is not None and not _signature_ok(doc, key):
        raise SerializationError(
            f"{what} failed its signature check (tampered or signed with another key)"
        )
    # JSON escapes can spell unpaired surrogates that dumps would refuse to write again (only
    # escapes can: the bytes were strict UTF-8). Cheap to rule out when no such escape appears.
    if _SURROGATE_ESCAPE.search(raw) and _has_lone_surrogate(doc["payload"]):
        raise SerializationError(f"{what} is corrupt: a string holds an unpaired surrogate")
    try:
        return decode(doc["payload"])
    except SerializationError as exc:
        raise SerializationError(f"{what}: {exc}") from None


def _signature_ok(doc: dict[str, Any], key: bytes) -> bool:
    sig = doc.get("signature")
    if not isinstance(sig, str) or not sig.isascii():
        return False
    try:
        body = json.dumps(
            doc["payload"], separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
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
