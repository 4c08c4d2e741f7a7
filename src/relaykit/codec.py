"""JSON codec with a registry of named types (D10). Nothing is unpickled or evaluated.

Values of registered dataclasses and pydantic models are saved as ``{"__type__": name,
"data": ...}``; loading an unknown name, a wrong shape or a newer format version raises
``SerializationError``. Documents can be signed with HMAC-SHA256 to detect tampering.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import hmac
import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from relaykit.errors import SerializationError, StoredError, WillRetryError

__all__ = ["FORMAT_VERSION", "decode", "dumps", "encode", "loads", "materialize_streams",
           "register_type"]

FORMAT_VERSION = 1
T = TypeVar("T")

_by_name: dict[str, tuple[type[Any], tuple[str, ...]]] = {}
_by_type: dict[type[Any], str] = {}


def register_type(name: str, *, exclude: Iterable[str] = ()) -> Callable[[type[T]], type[T]]:
    """Class decorator: values of this dataclass or pydantic model can be saved under ``name``.

    >>> @register_type("myapp.Approval")
    ... @dataclasses.dataclass
    ... class Approval:
    ...     amount: int
    """
    skipped = tuple(exclude)

    def decorate(cls: type[T]) -> type[T]:
        if not (dataclasses.is_dataclass(cls) or hasattr(cls, "model_validate")):
            raise TypeError(f"register_type({name!r}): {cls.__qualname__} is neither a "
                            "dataclass nor a pydantic model")
        known = _by_name.get(name)
        if known is not None and known[0] is not cls and known[0].__qualname__ != cls.__qualname__:
            raise ValueError(f"register_type: name {name!r} is already used by "
                             f"{known[0].__qualname__}")
        _by_name[name] = (cls, skipped)
        _by_type[cls] = name
        return cls

    return decorate


def encode(value: Any) -> Any:
    """``value`` as JSON-compatible data (raises SerializationError for unknown types)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [encode(v) for v in value]
    if isinstance(value, tuple):
        return {"__tuple__": [encode(v) for v in value]}
    if isinstance(value, dict):
        if all(isinstance(k, str) and not k.startswith("__") for k in value):
            return {k: encode(v) for k, v in value.items()}
        return {"__dict__": [[encode(k), encode(v)] for k, v in value.items()]}
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode("ascii")}
    if isinstance(value, BaseException):
        return {"__error__": {"type": type(value).__name__, "message": str(value)}}
    cls = type(value)
    name = _by_type.get(cls)
    if name is None:
        from relaykit.messages import MessageStream

        if isinstance(value, MessageStream):
            return _encode_stream(value)
        if isinstance(value, (set, frozenset)):
            return {"__set__": [encode(v) for v in value]}
        raise SerializationError(
            f"cannot save a value of type {cls.__module__}.{cls.__qualname__}: register it with "
            "@relaykit.register_type('<stable name>') (dataclasses and pydantic models)")
    skipped = _by_name[name][1]
    if dataclasses.is_dataclass(value):
        data = {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)
                if f.init and f.name not in skipped}
    else:
        data = encode(value.model_dump(mode="json"))
    return {"__type__": name, "data": data}


def _encode_stream(stream: Any) -> Any:
    from relaykit.messages import concat_messages

    if not stream.done:
        raise SerializationError("cannot save a message stream that has not ended; "
                                 "materialise it first (materialize_streams)")
    chunks = stream.chunks
    message = concat_messages(chunks) if chunks else None
    return {"__stream__": {"message": encode(message), "error": encode(stream.error)}}


def decode(data: Any) -> Any:
    """The inverse of ``encode``."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v) for v in data]
    if not isinstance(data, dict):
        raise SerializationError(f"unexpected JSON value of type {type(data).__name__}")
    if len(data) == 1:
        (key, inner), = data.items()
        if key == "__tuple__":
            return tuple(decode(v) for v in _expect_list(inner, key))
        if key == "__dict__":
            return {decode(k): decode(v) for k, v in _expect_list(inner, key)}
        if key == "__bytes__":
            try:
                return base64.b64decode(inner, validate=True)
            except (ValueError, TypeError) as exc:
                raise SerializationError(f"corrupt bytes value: {exc}") from None
        if key == "__set__":
            return {decode(v) for v in _expect_list(inner, key)}
        if key == "__error__":
            return _decode_error(inner)
        if key == "__stream__":
            return _decode_stream(inner)
    if "__type__" in data:
        return _decode_typed(data)
    return {k: decode(v) for k, v in data.items()}


def _expect_list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list):
        raise SerializationError(f"corrupt data: {key} must hold a list")
    return value


def _decode_error(inner: Any) -> BaseException:
    if not isinstance(inner, dict) or not isinstance(inner.get("message"), str):
        raise SerializationError("corrupt data: __error__ must hold a type and a message")
    type_name = str(inner.get("type", "Exception"))
    if type_name == "WillRetryError":
        return WillRetryError(inner["message"])
    return StoredError(type_name, inner["message"])


def _decode_stream(inner: Any) -> Any:
    from relaykit.messages import Message, MessageStream

    if not isinstance(inner, dict):
        raise SerializationError("corrupt data: __stream__ must hold an object")
    message = decode(inner.get("message"))
    error = decode(inner.get("error"))
    if message is not None and not isinstance(message, Message):
        raise SerializationError("corrupt data: a stream must hold a relaykit.Message")
    chunks = [message] if message is not None else []
    if isinstance(error, BaseException):
        return MessageStream.failed(chunks, error)
    return MessageStream.from_list(chunks)


def _decode_typed(data: dict[str, Any]) -> Any:
    name = data["__type__"]
    entry = _by_name.get(name) if isinstance(name, str) else None
    if entry is None:
        raise SerializationError(
            f"unknown type name {name!r} in stored data: register the class with "
            f"@relaykit.register_type({name!r}) before loading")
    cls = entry[0]
    fields = data.get("data")
    try:
        if dataclasses.is_dataclass(cls):
            if not isinstance(fields, dict):
                raise TypeError("expected an object of fields")
            return cls(**{k: decode(v) for k, v in fields.items()})
        return cls.model_validate(decode(fields))
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(
            f"stored data for type {name!r} does not fit {cls.__qualname__}: {exc}") from None


def _signature(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def dumps(payload: Any, *, kind: str, key: bytes | None = None) -> bytes:
    """A versioned JSON document of ``kind`` holding ``payload`` (signed when ``key`` is set)."""
    try:
        body = json.dumps(encode(payload), separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)
        body.encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise SerializationError(f"cannot save {kind} data: {exc} (NaN/infinite floats and "
                                 "unpaired surrogates are not valid JSON)") from None
    doc = {"format": kind, "version": FORMAT_VERSION, "payload": "__BODY__"}
    if key is not None:
        doc["signature"] = _signature(key, body.encode("utf-8"))
    head = json.dumps(doc, separators=(",", ":"))
    return head.replace('"__BODY__"', body, 1).encode("utf-8")


def loads(data: bytes, *, kind: str, key: bytes | None = None, what: str = "document") -> Any:
    """Load a document written by ``dumps``; every failure is a SerializationError naming
    ``what`` (e.g. ``checkpoint 'c1'``)."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SerializationError(f"{what} is corrupt (not JSON): {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != kind or "payload" not in doc:
        raise SerializationError(f"{what} is not a relaykit {kind} document")
    version = doc.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise SerializationError(
            f"{what} has format version {version!r}; this relaykit reads versions up to "
            f"{FORMAT_VERSION}: upgrade relaykit")
    if key is not None:
        body = json.dumps(doc["payload"], separators=(",", ":"), ensure_ascii=False)
        sig = doc.get("signature")
        if not isinstance(sig, str) or not hmac.compare_digest(sig, _signature(key,
                                                                               body.encode())):
            raise SerializationError(f"{what} failed its signature check (tampered or signed "
                                     "with another key)")
    return decode(doc["payload"])


async def materialize_streams(value: Any, _seen: set[int] | None = None) -> None:
    """Read every message stream reachable from ``value`` to its end (errors are kept)."""
    from relaykit.messages import MessageStream

    seen = _seen if _seen is not None else set()
    if id(value) in seen or value is None or isinstance(value, (str, bytes, int, float)):
        return
    seen.add(id(value))
    if isinstance(value, MessageStream):
        with contextlib.suppress(Exception):
            await value.collect()
        return
    if isinstance(value, dict):
        for v in value.values():
            await materialize_streams(v, seen)
    elif isinstance(value, (list, tuple)):
        for v in value:
            await materialize_streams(v, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            await materialize_streams(getattr(value, f.name), seen)
    elif hasattr(value, "__slots__") and hasattr(value, "event"):
        await materialize_streams(value.event, seen)
