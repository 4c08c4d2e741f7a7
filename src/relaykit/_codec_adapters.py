"""Adapters: how the codec saves values of classes it does not know, and finishes them first.

``register_type`` covers dataclasses, pydantic models and Enums. A class that is none of these
(a ``MessageStream``, whose chunks come from a running model) registers an *adapter* instead: a
marker name and a few named fields. The codec then needs no import of that class's module: the
module that defines the class registers its adapter when it is imported. This keeps the codec
at the bottom of the import graph (``relaykit.messages`` imports the codec, never the reverse).

An adapted value is saved as ``{"__<name>__": {field: value, ...}}``: ``save`` gives the fields,
the codec encodes and decodes each one (one nesting level for the whole marker), and ``load``
builds the value back from the decoded fields. A value that must be finished before it can be
saved (a stream still being read) gives a ``materialize`` hook, which ``materialize_streams``
awaits for every such value it finds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from relaykit._codec_errors import MAX_DEPTH, too_deep
from relaykit._codec_registry import by_type

__all__ = [
    "BUILTIN_MARKERS",
    "Adapter",
    "adapters_by_marker",
    "adapters_by_type",
    "materialize_streams",
    "register_adapter",
]

T = TypeVar("T")

#: The markers the codec reads itself; an adapter may not take one of them.
BUILTIN_MARKERS = frozenset(
    {
        "__tuple__",
        "__dict__",
        "__set__",
        "__frozenset__",
        "__bytes__",
        "__bytearray__",
        "__datetime__",
        "__date__",
        "__time__",
        "__timedelta__",
        "__uuid__",
        "__decimal__",
        "__path__",
        "__pureposixpath__",
        "__purewindowspath__",
        "__error__",
        "__type__",
        "__enum__",
    }
)


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class Adapter(Generic[T]):
    """How values of ``cls`` are saved under ``marker`` (see ``register_adapter``)."""

    cls: type[T]
    marker: str  # "__stream__"
    fields: tuple[str, ...]  # the field names a document may hold, in decoding order
    save: Callable[[T], Mapping[str, Any]]
    load: Callable[[dict[str, Any]], T]
    materialize: Callable[[T], Awaitable[object]] | None
    fields_text: str  # "'message' and 'error'", for error messages


# Filled in place, never rebound: the encoder and decoder read them as module globals.
adapters_by_marker: dict[str, Adapter[Any]] = {}
adapters_by_type: dict[type[Any], Adapter[Any]] = {}
# The classes whose values materialize_streams finishes (a tuple, for one isinstance call).
_pending_classes: tuple[type[Any], ...] = ()

_NAME = re.compile(r"[a-z][a-z0-9_]*[a-z0-9]|[a-z]")


def register_adapter(
    cls: type[T],
    name: str,
    *,
    fields: Iterable[str],
    save: Callable[[T], Mapping[str, Any]],
    load: Callable[[dict[str, Any]], T],
    materialize: Callable[[T], Awaitable[object]] | None = None,
) -> None:
    """Save values of ``cls`` as ``{"__<name>__": {field: value}}`` with ``fields`` named.

    ``save(value)`` returns the fields to save (a subset of ``fields``; each value must itself be
    savable) and raises ``SerializationError`` for a value that cannot be saved. ``load(fields)``
    gets the decoded fields that the document holds (perhaps fewer) and raises ``ValueError``,
    worded with type names and never stored values, for fields it refuses: the load fails with
    "corrupt data: <that message>". ``materialize(value)``, if given, is awaited by
    ``materialize_streams`` before a save (errors it raises are kept by the value, not raised).
    Values of subclasses of ``cls`` are saved the same way and load as ``load`` builds them.

    >>> class Span:
    ...     def __init__(self, start: int, end: int) -> None:
    ...         self.start, self.end = start, end
    >>> register_adapter(Span, "span", fields=("start", "end"),  # doctest: +SKIP
    ...                  save=lambda s: {"start": s.start, "end": s.end},
    ...                  load=lambda f: Span(f["start"], f["end"]))
    """
    global _pending_classes
    marker = f"__{name}__"
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValueError(
            f"register_adapter: name {name!r} must be lowercase letters, digits "
            "and inner underscores (it becomes the marker '__<name>__')"
        )
    if marker in BUILTIN_MARKERS:
        raise ValueError(f"register_adapter: the marker {marker!r} is the codec's own")
    names = tuple(fields)
    if not names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"register_adapter({name!r}): fields must be distinct names")
    known = adapters_by_marker.get(marker)
    # As for register_type: the same class defined again (a reloaded module) may take its
    # marker back; another class may not.
    if known is not None and known.cls is not cls and known.cls.__qualname__ != cls.__qualname__:
        raise ValueError(
            f"register_adapter: the marker {marker!r} is already used by {known.cls.__qualname__}"
        )
    quoted = [repr(n) for n in names]
    text = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    adapter = Adapter(cls, marker, names, save, load, materialize, text)
    adapters_by_marker[marker] = adapter
    adapters_by_type[cls] = adapter
    _pending_classes = tuple(a.cls for a in adapters_by_type.values() if a.materialize is not None)


def adapter_for(value: Any) -> Adapter[Any] | None:
    """The adapter saving ``value``: its class's, else the first registered for a base class."""
    adapter = adapters_by_type.get(type(value))
    if adapter is not None:
        return adapter
    return next((a for a in adapters_by_type.values() if isinstance(value, a.cls)), None)


async def materialize_streams(value: Any, _seen: set[int] | None = None) -> None:
    """Read every message stream reachable from ``value`` to its end (errors are kept).

    More generally: await the ``materialize`` hook of every adapted value reachable from
    ``value`` through dicts, lists, tuples, sets and dataclass fields, so that it can be saved.
    Raises SerializationError when ``value`` nests deeper than ``MAX_DEPTH`` levels.

    >>> stream = MessageStream.from_list([Message.assistant("hi")])  # doctest: +SKIP
    >>> await materialize_streams({"reply": stream})  # doctest: +SKIP
    """
    for item in _pending_in(value, _seen if _seen is not None else set()):
        adapter = adapter_for(item)
        if adapter is None or adapter.materialize is None:
            continue
        # The value keeps the error (a stream ends with it) and is saved with it.
        with contextlib.suppress(Exception):
            await adapter.materialize(item)


def _pending_in(value: Any, seen: set[int]) -> list[Any]:
    """The values to materialize reachable from ``value``, in order (an explicit stack, no
    recursion)."""
    pending = _pending_classes
    found: list[Any] = []
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if item is None or isinstance(item, (str, bytes, int, float)) or id(item) in seen:
            continue
        seen.add(id(item))
        children: Iterable[Any]
        if isinstance(item, pending):
            found.append(item)
            continue
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = item
        elif dataclasses.is_dataclass(item) and not isinstance(item, type):
            # Only what the codec saves: an excluded field (an interrupt point's links to its
            # parents, say) is not part of the saved value and may lead anywhere.
            entry = by_type.get(type(item))
            names = entry.saved if entry is not None else [f.name for f in dataclasses.fields(item)]
            children = [getattr(item, name) for name in names]
        elif hasattr(item, "__slots__") and hasattr(item, "event"):
            children = (item.event,)  # a RecordedEvent of the run history
        else:
            continue
        if depth >= MAX_DEPTH:
            raise too_deep()
        stack.extend((child, depth + 1) for child in reversed(list(children)))
    return found
