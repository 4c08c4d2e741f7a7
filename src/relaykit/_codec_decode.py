"""Loading: JSON data back into values, trusting nothing (the format is described in ``codec``).

Only registered classes and adapters are ever constructed, every field of a registered
dataclass is checked against its shape before the class sees it, nesting is bounded and every
failure is a ``SerializationError`` naming markers, types and fields — never stored values.

``_decode`` and ``_decode_typed`` are the hot loops of every load: JSON scalars return at once
(and are not even passed to ``_decode`` as dataclass fields), and a marker is one dict lookup.
"""

from __future__ import annotations

import enum
from typing import Any

from relaykit import _codec_registry as registry
from relaykit._codec_adapters import Adapter, adapters_by_marker
from relaykit._codec_errors import MAX_DEPTH, corrupt, quote, too_deep
from relaykit._codec_registry import Entry, shape_of
from relaykit._codec_shapes import Shape, describe, type_text
from relaykit._codec_types import DECODERS, Decoder, expect
from relaykit.errors import SerializationError

__all__ = ["decode"]

# Bound by assignment, not by ``from ... import``: CPython 3.11 compiles ``name.get(...)`` on an
# imported name as a module attribute call, which builds a bound method on every call. The
# dicts are filled in place, never rebound, so the aliases stay current.
_by_name: dict[str, Entry] = registry.by_name
_adapters_by_marker: dict[str, Adapter[Any]] = adapters_by_marker


def decode(data: Any) -> Any:
    """The inverse of ``encode``: raises SerializationError for anything ``encode`` cannot have
    written (a wrong shape, an unknown type name, nesting deeper than ``MAX_DEPTH``).

    >>> decode({"__tuple__": [1, {"__bytes__": "YQ=="}]})
    (1, b'a')
    """
    try:
        return _decode(data, 0)
    except RecursionError:
        raise too_deep() from None


def _decode(data: Any, depth: int) -> Any:
    cls = data.__class__
    if cls is str or cls is int or cls is float or cls is bool or data is None:
        return data
    if depth >= MAX_DEPTH:
        raise too_deep()
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
        ((key, inner),) = data.items()
        if key.__class__ is str and key.startswith("__"):
            handler = _MARKERS.get(key)
            if handler is not None:
                return handler(inner, depth)
            adapter = _adapters_by_marker.get(key)
            if adapter is not None:
                return _decode_adapted(adapter, inner, depth)
            raise corrupt(f"unknown marker {quote(key)}")
    out = {}
    for key, value in data.items():
        if key.__class__ is not str:
            raise corrupt(f"an object key must be a str, found {type(key).__name__}")
        if key.startswith("__"):
            raise corrupt("an object mixes a reserved key (starting with '__') with other keys")
        out[key] = _decode(value, depth)
    return out


# -- containers --------------------------------------------------------------------------------
def _decode_pairs(inner: Any, depth: int) -> dict[Any, Any]:
    out: dict[Any, Any] = {}
    for pair in expect(inner, list, "__dict__"):
        if pair.__class__ is not list or len(pair) != 2:
            raise corrupt("__dict__ must hold [key, value] pairs")
        key = _decode(pair[0], depth)
        value = _decode(pair[1], depth)
        try:
            out[key] = value
        except TypeError:
            raise corrupt(f"a dict key of type {type(key).__name__} is not hashable") from None
    return out


def _decode_set(inner: Any, depth: int, marker: str) -> set[Any]:
    items = [_decode(v, depth) for v in expect(inner, list, marker)]
    try:
        return set(items)
    except TypeError:
        bad = next((type(v).__name__ for v in items if not _hashable(v)), "unknown type")
        raise corrupt(f"a {marker} item of type {bad} is not hashable") from None


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def _decode_lone(marker: str) -> Decoder:
    def reject(inner: Any, depth: int) -> Any:
        raise corrupt(f"{marker} needs a second key")

    return reject


_MARKERS: dict[str, Decoder] = {
    "__tuple__": lambda v, d: tuple([_decode(x, d) for x in expect(v, list, "__tuple__")]),
    "__dict__": _decode_pairs,
    "__set__": lambda v, d: _decode_set(v, d, "__set__"),
    "__frozenset__": lambda v, d: frozenset(_decode_set(v, d, "__frozenset__")),
    **DECODERS,
    "__type__": _decode_lone("__type__ (with 'data')"),
    "__enum__": _decode_lone("__enum__ (with 'member')"),
}


# -- adapted values ----------------------------------------------------------------------------
def _decode_adapted(adapter: Adapter[Any], inner: Any, depth: int) -> Any:
    marker = adapter.marker
    if inner.__class__ is not dict or not inner.keys() <= frozenset(adapter.fields):
        raise corrupt(f"{marker} must hold an object with {adapter.fields_text}")
    # In the adapter's field order, whatever the document's, so the same error is reported.
    fields = {name: _decode(inner[name], depth) for name in adapter.fields if name in inner}
    try:
        return adapter.load(fields)
    except SerializationError:
        raise
    except ValueError as exc:  # the adapter's refusal, worded with type names only
        raise corrupt(str(exc)) from None
    except Exception as exc:
        raise SerializationError(
            f"stored data for {marker} was refused by "
            f"{adapter.cls.__qualname__}: {type(exc).__name__}"
        ) from None


# -- registered classes ------------------------------------------------------------------------
def _registered(data: dict[str, Any], marker: str, kind: str) -> Entry:
    name = data[marker]
    if name.__class__ is not str:
        raise corrupt(f"{marker} must hold a type name (a str), found {type(name).__name__}")
    entry = _by_name.get(name)
    if entry is None:
        shown = quote(name)
        if not shown.startswith("'"):  # not a name: corrupt or hostile, never echoed
            raise corrupt(f"a type marker holds {shown}")
        raise SerializationError(
            f"unknown type name {shown} in stored data: register the class with "
            f"@relaykit.register_type({shown}) before loading"
        )
    if (entry.kind == "enum") != (kind == "enum"):
        stored_as = "an Enum member" if kind == "enum" else "an object"
        raise corrupt(
            f"type name {quote(name)} is stored as {stored_as} but is registered "
            f"for {entry.cls.__qualname__}"
        )
    return entry


def _decode_enum(data: dict[str, Any]) -> Any:
    entry = _registered(data, "__enum__", "enum")
    member = data.get("member")
    if member.__class__ is not str:
        raise corrupt(f"__enum__ {entry.name!r} needs a str 'member'")
    cls = entry.cls
    try:
        if issubclass(cls, enum.Flag) and ("|" in member or not member):
            value = cls(0)
            for part in member.split("|") if member else ():
                value |= cls[part]
            return value
        return cls[member]
    except (KeyError, ValueError, TypeError):
        raise SerializationError(
            f"stored data for type {entry.name!r} names a member that "
            f"{cls.__qualname__} does not have"
        ) from None


def _decode_typed(data: dict[str, Any], depth: int) -> Any:
    # The hot path of loading: every registered dataclass goes through this loop.
    name = data["__type__"]
    entry = _by_name.get(name) if name.__class__ is str else None
    fields = data.get("data")
    if entry is None or entry.kind != "dataclass" or fields.__class__ is not dict:
        return _decode_typed_other(data, depth)
    shape = entry.shape
    if shape is None or (shape.generation is not None and shape.generation != registry.generation):
        shape = entry.shape = shape_of(entry)
    checks: dict[str, Any] = shape.checks  # Any: the loop tells tuples from predicates itself
    kwargs: dict[str, Any] = {}
    for field_name, raw in fields.items():
        check = checks.get(field_name, _UNKNOWN)
        if check is _UNKNOWN:
            raise SerializationError(
                f"stored data for type {name!r} does not fit "
                f"{entry.cls.__qualname__}: unknown field "
                f"{quote(field_name)}"
            )
        kind = raw.__class__
        if kind is str or raw is None or kind is bool or kind is int or kind is float:
            value = raw  # a scalar: no call needed
        else:
            value = _decode(raw, depth)
        if check is not None and not (
            isinstance(value, check) if check.__class__ is tuple else check(value)
        ):
            raise SerializationError(_misfit(entry, shape, field_name, value))
        kwargs[field_name] = value
    if len(kwargs) != len(checks) and not shape.required <= kwargs.keys():
        missing = ", ".join(repr(n) for n in sorted(shape.required - kwargs.keys()))
        raise SerializationError(
            f"stored data for type {name!r} does not fit "
            f"{entry.cls.__qualname__}: missing required field(s) {missing}"
        )
    try:
        return entry.cls(**kwargs)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(
            f"stored data for type {name!r} was refused by "
            f"{entry.cls.__qualname__}: {type(exc).__name__}"
        ) from None


def _decode_typed_other(data: dict[str, Any], depth: int) -> Any:
    """Pydantic models, and the reasons a ``__type__`` marker is malformed."""
    entry = _registered(data, "__type__", "object")
    if "data" not in data:
        raise corrupt(f"__type__ {entry.name!r} needs 'data'")
    fields = data["data"]
    cls = entry.cls
    if fields.__class__ is not dict and not (
        entry.kind == "pydantic" and getattr(cls, "__pydantic_root_model__", False)
    ):
        raise corrupt(
            f"the data of {entry.name!r} must be an object, found {type(fields).__name__}"
        )
    value = _decode(fields, depth)
    try:
        return cls.model_validate(value)
    except Exception as exc:
        raise SerializationError(_pydantic_problem(entry, exc)) from None


_UNKNOWN: Any = object()


def _misfit(entry: Entry, shape: Shape, field_name: str, value: Any) -> str:
    expected = type_text(shape.hints.get(field_name, Any))
    return (
        f"stored data for type {entry.name!r} does not fit {entry.cls.__qualname__}: "
        f"field {field_name!r} must be {expected}, found {describe(value)}"
    )


def _pydantic_problem(entry: Entry, exc: Exception) -> str:
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
            place = (
                f"field {head!r}"
                if isinstance(head, str) and head in known
                else "the model"
                if head is None
                else "an unknown field"
            )
            problems.append(f"{place} ({item.get('type', 'invalid')})")
    detail = "; ".join(dict.fromkeys(problems)) or type(exc).__name__
    return f"stored data for type {entry.name!r} does not fit {entry.cls.__qualname__}: {detail}"
