"""Saving: any supported value as JSON-compatible data (the format is described in ``codec``).

``_encode`` is the hot loop of every save: JSON scalars return at once, lists and plain dicts
recurse inline, and everything else is one dict lookup by exact class (registered types, then
the containers and standard types); only subclasses and unsavable values reach ``_encode_other``.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from relaykit import _codec_registry as registry
from relaykit._codec_adapters import Adapter, adapter_for
from relaykit._codec_errors import MAX_DEPTH, too_deep
from relaykit._codec_registry import Entry
from relaykit._codec_types import ENCODERS, SUBCLASS_ENCODERS, Encoder
from relaykit.errors import SerializationError

__all__ = ["encode"]

# Bound by assignment, not by ``from ... import``: CPython 3.11 compiles ``name.get(...)`` on an
# imported name as a module attribute call, which builds a bound method on every call (~4% of
# a save). The dict is filled in place, never rebound, so the alias stays current.
_by_type: dict[type[Any], Entry] = registry.by_type


def encode(value: Any) -> Any:
    """``value`` as JSON-compatible data (raises SerializationError for types it cannot save).

    >>> encode((1, b"a"))
    {'__tuple__': [1, {'__bytes__': 'YQ=='}]}
    """
    try:
        return _encode(value, 0)
    except RecursionError:
        raise too_deep() from None


def _encode(value: Any, depth: int) -> Any:
    cls = value.__class__
    if cls is str or cls is int or cls is float or cls is bool or value is None:
        return value
    if depth >= MAX_DEPTH:
        raise too_deep()
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


def _encode_registered(entry: Entry, value: Any, depth: int) -> Any:
    if entry.kind == "dataclass":
        data = {name: _encode(getattr(value, name), depth) for name in entry.saved}
    elif entry.kind == "enum":
        return {"__enum__": entry.name, "member": value.name or ""}
    else:
        try:
            dumped = value.model_dump(mode="json", exclude=set(entry.excluded) or None)
        except Exception as exc:
            raise SerializationError(
                f"cannot save {entry.cls.__qualname__} ({entry.name!r}): "
                f"model_dump failed with {type(exc).__name__}"
            ) from exc
        data = _encode(dumped, depth)
    return {"__type__": entry.name, "data": data}


def _encode_adapted(adapter: Adapter[Any], value: Any, depth: int) -> Any:
    try:
        fields = adapter.save(value)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(
            f"cannot save a {type(value).__qualname__}: its codec adapter "
            f"failed with {type(exc).__name__}"
        ) from exc
    # What is written must load again: only the adapter's declared fields.
    if not fields.keys() <= frozenset(adapter.fields):
        raise SerializationError(
            f"cannot save a {type(value).__qualname__}: its codec adapter "
            f"gave fields other than {adapter.fields_text}"
        )
    return {adapter.marker: {name: _encode(item, depth) for name, item in fields.items()}}


def _encode_tuple(value: Any, depth: int) -> Any:
    return {"__tuple__": [_encode(x, depth) for x in value]}


def _encode_set(value: Any, depth: int) -> Any:
    return {"__set__": [_encode(x, depth) for x in value]}


def _encode_frozenset(value: Any, depth: int) -> Any:
    return {"__frozenset__": [_encode(x, depth) for x in value]}


# Exact types; subclasses go through _encode_other's isinstance checks.
_ENCODERS: dict[type[Any], Encoder] = {
    tuple: _encode_tuple,
    set: _encode_set,
    frozenset: _encode_frozenset,
    **ENCODERS,
}
# For subclasses, most specific first (the standard types keep their own order).
_SUBCLASS_ENCODERS: tuple[tuple[type[Any], Encoder], ...] = (
    (list, lambda v, d: [_encode(x, d) for x in v]),
    (dict, _encode_dict),
    (tuple, _encode_tuple),
    (set, _encode_set),
    (frozenset, _encode_frozenset),
    *SUBCLASS_ENCODERS,
)

_SAVABLE = (
    "None, bool, int, float, str, list, dict, tuple, set, frozenset, bytes, bytearray, "
    "datetime, date, time, timedelta, UUID, Decimal, pathlib paths"
)


def _encode_other(value: Any, depth: int) -> Any:
    if isinstance(value, enum.Enum) and not isinstance(value, (int, float, str)):
        raise SerializationError(
            f"cannot save a member of the Enum {_where(value)}: register the Enum with "
            "@relaykit.register_type('<stable name>') (members are saved by name)"
        )
    # Unregistered subclasses of the JSON scalars (an IntEnum, a str subclass) were always saved
    # as the plain value; keep doing so. The base-class methods return the exact base type.
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    adapter = adapter_for(value)
    if adapter is not None:
        return _encode_adapted(adapter, value, depth)
    for base, encoder in _SUBCLASS_ENCODERS:
        if isinstance(value, base):
            return encoder(value, depth)
    if dataclasses.is_dataclass(value) or hasattr(value, "model_validate"):
        advice = (
            "register its class with @relaykit.register_type('<stable name>') "
            "(dataclasses, pydantic models and Enums can be registered)"
        )
    else:
        advice = (
            f"convert it to one of the types relaykit saves ({_SAVABLE}) or to a "
            "dataclass, pydantic model or Enum registered with "
            "@relaykit.register_type('<stable name>')"
        )
    raise SerializationError(f"cannot save a value of type {_where(value)}: {advice}")


def _where(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"
