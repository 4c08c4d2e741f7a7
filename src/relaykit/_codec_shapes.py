"""Field shapes: the type hints of a registered dataclass turned into cheap runtime checks.

The codec checks every field it loads against its annotation before the class sees it. The
hints are the class's own code, evaluated once per class (never text read from a document), and
compiled into a *check* per field:

- a tuple of classes, tested with ``isinstance`` (the common case, and the fastest);
- a predicate, for containers with typed items, ``Literal`` and unions mixing both;
- ``None`` where the annotation cannot be judged (``Any``, a protocol, an unresolved name): then
  anything fits.

An ``int`` fits ``float`` and ``complex``, ``bytearray`` fits ``bytes`` and a loaded
``StoredError`` fits any exception class, as in typing and as the codec loads them.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from itertools import repeat
from typing import Any

from relaykit.errors import StoredError

__all__ = ["Check", "Shape", "build_shape", "compile_check", "describe", "type_text"]

_NoneType = type(None)
#: A field check: a tuple of classes (isinstance), a predicate, or None (anything fits).
Check = tuple[type[Any], ...] | Callable[[Any], bool] | None


@dataclasses.dataclass(slots=True)
class Shape:
    """What a registered dataclass accepts on load, resolved once from its type hints."""

    checks: dict[str, Check]  # every field a document may hold → its check
    required: frozenset[str]
    hints: dict[str, Any]
    # None when every hint was resolved; else the registry generation it was built at, so it is
    # rebuilt once more classes are registered (a forward reference may resolve then).
    generation: int | None


def build_shape(
    cls: type[Any], saved: Iterable[str], known: Iterable[type[Any]], generation: int
) -> Shape:
    """The shape of dataclass ``cls`` for its ``saved`` fields.

    ``known`` are the registered classes: a hint naming one that the class's module imports only
    for type checking resolves to it. ``generation`` is the registry's, recorded when some hint
    stays unresolved.

    >>> @dataclasses.dataclass
    ... class Point:
    ...     x: int
    >>> build_shape(Point, ["x"], [], 0).checks
    {'x': (<class 'int'>,)}
    """
    wanted = frozenset(saved)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.name in wanted}
    hints, complete = _resolve_hints(cls, list(fields), known)
    checks = {name: compile_check(hints.get(name, Any)) for name in fields}
    required = frozenset(
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return Shape(checks, required, hints, None if complete else generation)


def _resolve_hints(
    cls: type[Any], names: list[str], known: Iterable[type[Any]]
) -> tuple[dict[str, Any], bool]:
    """Field annotations, evaluated; (hints, False) when some stay unresolved (then Any).

    Names imported only for type checking are looked up among the registered classes, after
    the module's own names (a registered class elsewhere must not shadow them).
    """
    try:
        return typing.get_type_hints(cls), True
    except Exception:
        pass
    by_name: dict[str, Any] = {}
    for other in known:
        # Two registered classes sharing a name: neither is a safe guess.
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


def _class_check(cls: type[Any]) -> Check:
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


def compile_check(annotation: Any, level: int = 0) -> Check:
    """A check for values of ``annotation``; None where it cannot judge (so it accepts).

    >>> compile_check(int | None)
    (<class 'int'>, <class 'NoneType'>)
    """
    if level > 12 or annotation is Any:
        return None
    if annotation is None or annotation is _NoneType:
        return (_NoneType,)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is None:
        if isinstance(annotation, typing.NewType):
            return compile_check(annotation.__supertype__, level + 1)
        return _class_check(annotation) if isinstance(annotation, type) else None
    if origin is typing.Annotated or origin in (typing.ClassVar, typing.Final):
        return compile_check(args[0], level + 1) if args else None
    if origin is typing.Union or origin is types.UnionType:
        return _union_check([compile_check(a, level + 1) for a in args])
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
        return _mapping_check(
            origin, base, compile_check(args[0], level + 1), compile_check(args[1], level + 1)
        )
    if (origin in _COLLECTIONS or origin.__module__ == "collections.abc") and len(args) == 1:
        return _collection_check(origin, base, compile_check(args[0], level + 1))
    return base


def _union_check(parts: list[Check]) -> Check:
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


def _literal_check(values: tuple[Any, ...]) -> Check:
    # Compare type and value: True == 1, but a Literal[1] field must not take True.
    if all(type(v) is str for v in values):
        texts = frozenset(values)
        return lambda v: v.__class__ is str and v in texts
    allowed = frozenset((type(v), v) for v in values)
    kinds = frozenset(type(v) for v in values)
    return lambda v: type(v) in kinds and (type(v), v) in allowed


def _items_ok(items: Iterable[Any], check: Check) -> bool:
    if check is None:
        return True
    if isinstance(check, tuple):
        return all(map(isinstance, items, repeat(check)))
    return all(map(check, items))


def _all_of(container: type[Any], item: Check) -> Callable[[Any], bool]:
    """A check that a value is a ``container`` whose items all pass ``item``.

    The item loop runs in C (``all(map(...))``): this is on the hot path of every load.
    """
    if isinstance(item, tuple):
        classes = item
        return lambda v: (
            isinstance(v, container) and (not v or all(map(isinstance, v, repeat(classes))))
        )
    assert item is not None
    predicate = item
    return lambda v: isinstance(v, container) and (not v or all(map(predicate, v)))


def _tuple_check(args: tuple[Any, ...], level: int) -> Check:
    if not args:
        return lambda v: v.__class__ is tuple and not v  # tuple[()]
    if len(args) == 2 and args[1] is Ellipsis:
        item = compile_check(args[0], level + 1)
        return (tuple,) if item is None else _all_of(tuple, item)
    checks = [compile_check(a, level + 1) for a in args]
    return lambda v: (
        isinstance(v, tuple)
        and len(v) == len(checks)
        and all(_items_ok((x,), c) for x, c in zip(v, checks, strict=True))
    )


# The containers a document can produce; only these are iterated to check their items (a str
# is a Sequence too, but a Sequence[X] field holding one cannot be judged cheaply).
_ITERATED = (list, tuple, set, frozenset)


def _collection_check(origin: type[Any], base: Check, item: Check) -> Check:
    if item is None or not isinstance(base, tuple):
        return base
    if origin in _COLLECTIONS:
        return _all_of(origin, item)
    classes, items_ok = base, _all_of(object, item)
    return lambda v: isinstance(v, classes) and (not isinstance(v, _ITERATED) or items_ok(v))


def _mapping_check(origin: type[Any], base: Check, key: Check, value: Check) -> Check:
    if (key is None and value is None) or not isinstance(base, tuple):
        return base
    keys_ok = _all_of(dict, key) if key is not None else (lambda v: True)
    if value is None and origin is dict:
        return keys_ok  # dict[str, Any], the usual case: one call
    values_ok = _all_of(object, value) if value is not None else (lambda v: True)
    classes = base
    return lambda v: (
        isinstance(v, classes)
        and (not isinstance(v, dict) or (keys_ok(v) and values_ok(v.values())))
    )


def type_text(annotation: Any) -> str:
    """``annotation`` as a reader writes it, without module prefixes (``list[Message]``)."""
    if annotation is None or annotation is _NoneType:
        return "None"
    if isinstance(annotation, type) and typing.get_origin(annotation) is None:
        return annotation.__qualname__
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+(?=[A-Za-z_])", "", repr(annotation))


def describe(value: Any) -> str:
    """The type of ``value`` (with its item types for containers) — never its content.

    >>> describe({"a": 1})
    'dict with str keys and int values'
    """
    name = type(value).__qualname__
    if isinstance(value, dict) and value:
        keys = sorted({type(k).__qualname__ for k in value})
        values = sorted({type(v).__qualname__ for v in value.values()})
        return f"{name} with {' | '.join(keys[:4])} keys and {' | '.join(values[:4])} values"
    if isinstance(value, (list, tuple, set, frozenset)) and value:
        items = sorted({type(v).__qualname__ for v in value})
        return f"{name} of {' | '.join(items[:4])}"
    return name
