"""The registry of named types: the only classes the codec ever constructs from a document.

A class is saved under a stable name given by the application (``register_type``), never under
its import path, so loading imports nothing and a renamed module does not break old data.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable
from typing import Any, Literal, TypeVar

from relaykit._codec_shapes import Shape, build_shape

__all__ = ["Entry", "by_name", "by_type", "register_type", "shape_of"]

T = TypeVar("T")


@dataclasses.dataclass(slots=True, eq=False)
class Entry:
    """One registered class."""

    name: str
    cls: type[Any]
    kind: Literal["dataclass", "pydantic", "enum"]
    saved: tuple[str, ...] = ()  # dataclass fields that are saved, in order
    excluded: frozenset[str] = frozenset()
    shape: Shape | None = None  # built by the decoder on first load (see shape_of)


# The encoder and decoder keep aliases of these two dicts: they are filled in place, never
# rebound, so the hot loops read them as plain module globals.
by_name: dict[str, Entry] = {}
by_type: dict[type[Any], Entry] = {}
#: Bumped by every registration: a shape with unresolved hints is rebuilt once it is stale.
generation = 0


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
        global generation
        entry = _new_entry(name, cls, skipped)
        known = by_name.get(name)
        # The same class defined again (a reloaded module, a test re-run) may take its name
        # back; another class may not.
        if (
            known is not None
            and known.cls is not cls
            and known.cls.__qualname__ != cls.__qualname__
        ):
            raise ValueError(
                f"register_type: name {name!r} is already used by {known.cls.__qualname__}"
            )
        by_name[name] = entry
        by_type[cls] = entry
        generation += 1
        return cls

    return decorate


def _new_entry(name: str, cls: type[Any], skipped: frozenset[str]) -> Entry:
    where = f"register_type({name!r}): {getattr(cls, '__qualname__', cls)!r}"
    if isinstance(cls, type) and issubclass(cls, enum.Enum):
        if skipped:
            raise TypeError(f"{where} is an Enum: exclude= does not apply")
        return Entry(name, cls, "enum")
    if isinstance(cls, type) and dataclasses.is_dataclass(cls):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for field_name in skipped:
            f = fields.get(field_name)
            if f is None:
                raise TypeError(f"{where} has no field {field_name!r} to exclude")
            if (
                f.init
                and f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING
            ):
                raise TypeError(f"{where}: excluded field {field_name!r} needs a default")
        saved = tuple(f.name for f in fields.values() if f.init and f.name not in skipped)
        return Entry(name, cls, "dataclass", saved, skipped)
    if hasattr(cls, "model_validate") and hasattr(cls, "model_dump"):
        return Entry(name, cls, "pydantic", (), skipped)
    raise TypeError(f"{where} is neither a dataclass, a pydantic model nor an Enum")


def shape_of(entry: Entry) -> Shape:
    """Resolve the type hints of a registered dataclass into field checks.

    The decoder caches the result on the entry; the registered classes help resolve names the
    class's module imports only for type checking.
    """
    return build_shape(entry.cls, entry.saved, by_type.keys(), generation)
