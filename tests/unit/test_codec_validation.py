"""Unit tests: what the codec refuses to load, and how it says so (semantics D10).

Checkpoints come from storage an attacker may control: a document of the right format but the
wrong shapes, malformed markers or hostile nesting must fail to load with a
``SerializationError`` that names the checkpoint, the type and the field — never the stored
values — instead of crashing the Runner later.
"""

from __future__ import annotations

import asyncio
import enum
import json
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Optional, Protocol, Union

import pydantic
import pytest

import relaykit as rk
from relaykit import codec

if TYPE_CHECKING:
    from relaykit.context import RunContext
    from relaykit.interrupts import InterruptInfo

SerializationError = rk.errors.SerializationError
SECRET = "SECRET-stored-value"  # planted in bad documents: must never reach an error message


def doc(payload: Any, kind: str = "test") -> bytes:
    return json.dumps({"format": kind, "version": 1, "payload": payload}).encode()


def load_error(payload: Any, what: str = "checkpoint 'c1'") -> str:
    """The message of the SerializationError that loading ``payload`` raises."""
    with pytest.raises(SerializationError) as caught:
        codec.loads(doc(payload), kind="test", what=what)
    message = str(caught.value)
    assert message.startswith(what), message
    assert SECRET not in message
    return message


def typed(type_name: str, /, **data: Any) -> dict[str, Any]:
    return {"__type__": type_name, "data": data}


def message(**data: Any) -> dict[str, Any]:
    return typed("relaykit.Message", **data)


class Greeter(Protocol):
    def greet(self) -> str: ...


@rk.register_type("tests.codec_validation.Shapes")
@dataclass
class Shapes:
    """One field per kind of annotation the shape checker understands."""

    text: str = ""
    count: int = 0
    ratio: float = 0.0
    flag: bool = False
    raw: bytes = b""
    maybe: int | None = None
    old_optional: Optional[str] = None  # noqa: UP045 - the typing spelling is checked too
    either: Union[int, str] = 0  # noqa: UP007
    mode: Literal["a", "b", 1] = "a"
    names: list[str] = field(default_factory=list)
    table: dict[str, int] = field(default_factory=dict)
    row: tuple[int, str] = (0, "")
    many: tuple[int, ...] = ()
    tags: set[str] = field(default_factory=set)
    frozen: frozenset[int] = frozenset()
    mapping: Mapping[str, list[int]] = field(default_factory=dict)
    sequence: Sequence[int] = ()
    later: Later | None = None  # a forward reference to a class defined below
    anything: Any = None
    callback: Callable[[int], int] | None = None
    greeter: Greeter | None = None  # a non-runtime protocol: accepted
    problem: ValueError | None = None  # loaded errors are StoredErrors


@rk.register_type("tests.codec_validation.Later")
@dataclass
class Later:
    note: str


@rk.register_type("tests.codec_validation.Hidden")
@dataclass
class Hidden:
    """Annotations naming classes imported only for type checking."""

    info: InterruptInfo | None = None  # found among the registered classes
    signal: RunContext | None = None  # not registered anywhere: cannot be judged


@rk.register_type("tests.codec_validation.Picky")
@dataclass
class Picky:
    amount: int

    def __post_init__(self) -> None:
        if self.amount < 0:
            raise ValueError(f"negative amount {self.amount}")


@rk.register_type("tests.codec_validation.Suit")
class Suit(enum.Enum):
    HEARTS = 1


@rk.register_type("tests.codec_validation.Model")
class Model(pydantic.BaseModel):
    count: int
    items: list[int] = []
    lookup: dict[str, int] = {}


# -- the attacker's probes -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        (
            message(role=[SECRET]),
            "field 'role' must be Literal['system', 'user', 'assistant', "
            "'tool'], found list of str",
        ),
        (message(role=SECRET), "field 'role' must be Literal"),
        (
            message(role="user", tool_calls=SECRET),
            "field 'tool_calls' must be list[ToolCall], found str",
        ),
        (message(role="user", tool_calls=[SECRET]), "found list of str"),
        (message(role="user", content=12345), "field 'content' must be str, found int"),
        (
            message(role="user", metadata={"__dict__": [[1, SECRET]]}),
            "field 'metadata' must be dict[str, Any], found dict with int keys",
        ),
        (
            message(role="user", attachments=[typed("relaykit.ToolCall", id="i", name="n")]),
            "field 'attachments' must be list[Blob], found list of ToolCall",
        ),
        (
            typed(
                "relaykit.Checkpoint",
                root_input=typed("relaykit.AgentInput"),
                events=[1, 2],
                values={},
                enable_streaming=False,
                interrupt_data=None,
                points=[],
            ),
            "type 'relaykit.Checkpoint' does not fit Checkpoint: field 'events' must be "
            "list[AgentEvent], found list of int",
        ),
        (typed("relaykit.AgentEvent", run_path=[SECRET]), "field 'run_path' must be"),
        (typed("relaykit.AgentEvent", error=SECRET), "field 'error' must be BaseException | None"),
        (
            typed("relaykit.AgentAction", interrupted=message(role="user")),
            "field 'interrupted' must be InterruptInfo | None, found Message",
        ),
    ],
    ids=[
        "role-list",
        "role-unknown",
        "tool-calls-str",
        "tool-calls-items",
        "content-int",
        "metadata-keys",
        "attachments-items",
        "checkpoint-events",
        "run-path-list",
        "error-str",
        "type-checking-import",
    ],
)
def test_wrong_field_shapes_name_type_field_and_found_type(payload: Any, expected: str) -> None:
    message_text = load_error(payload)
    assert expected in message_text


def test_missing_and_unknown_fields_are_serialization_errors() -> None:
    assert "missing required field(s) 'role'" in load_error(message(content="hi"))
    assert "unknown field 'nope'" in load_error(message(role="user", nope=SECRET))
    long_name = "x" * 500
    assert len(load_error(message(role="user", **{long_name: 1}))) < 300


def test_construction_errors_name_only_the_exception_type() -> None:
    text = load_error(typed("tests.codec_validation.Picky", amount=-1))
    assert text.endswith("was refused by Picky: ValueError")
    assert "-1" not in text


def test_pydantic_errors_name_the_fields_only() -> None:
    name = "tests.codec_validation.Model"
    text = load_error(typed(name, count=SECRET, items=[1, SECRET], lookup={SECRET: SECRET}))
    assert "field 'count' (int_parsing)" in text and "field 'items'" in text
    assert "field 'lookup'" in text
    assert "must be an object, found list" in load_error({"__type__": name, "data": [1]})


# -- the shape checker -----------------------------------------------------------------------
SHAPES = "tests.codec_validation.Shapes"


@pytest.mark.parametrize(
    "fields",
    [
        {"count": True},  # a bool is an int for typing
        {"ratio": 3},  # an int is a float for typing
        {"maybe": None},
        {"maybe": 4},
        {"old_optional": "s"},
        {"either": "s"},
        {"either": 2},
        {"mode": "b"},
        {"mode": 1},
        {"names": ["a", "b"]},
        {"table": {"a": 1}},
        {"row": {"__tuple__": [1, "x"]}},
        {"many": {"__tuple__": [1, 2, 3]}},
        {"tags": {"__set__": ["a"]}},
        {"frozen": {"__frozenset__": [1]}},
        {"mapping": {"k": [1]}},
        {"sequence": [1, 2]},
        {"later": typed("tests.codec_validation.Later", note="n")},
        {"anything": {"__set__": [1]}},
        {"greeter": "not checked"},
        {"problem": {"__error__": {"type": "ValueError", "message": "m"}}},
        {"raw": {"__bytes__": "YQ=="}},
    ],
    ids=repr,
)
def test_values_that_fit_their_annotations_load(fields: dict[str, Any]) -> None:
    value = codec.loads(doc(typed(SHAPES, **fields)), kind="test")
    assert isinstance(value, Shapes)


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"text": 1}, "field 'text' must be str, found int"),
        ({"text": {"__bytes__": "YQ=="}}, "found bytes"),
        ({"count": "1"}, "field 'count' must be int, found str"),
        ({"count": 1.5}, "found float"),
        ({"ratio": "1.0"}, "found str"),
        ({"flag": 1}, "field 'flag' must be bool, found int"),
        ({"maybe": "4"}, "must be int | None, found str"),
        ({"either": [1]}, "found list of int"),
        ({"mode": "c"}, "found str"),
        ({"mode": True}, "found bool"),  # True == 1, but it is not Literal[1]
        ({"names": ["a", 2]}, "must be list[str], found list of int | str"),
        ({"names": {"__tuple__": ["a"]}}, "found tuple of str"),
        ({"table": {"a": "1"}}, "found dict with str keys and str values"),
        ({"row": {"__tuple__": [1]}}, "must be tuple[int, str], found tuple of int"),
        ({"row": {"__tuple__": ["x", 1]}}, "found tuple"),
        ({"many": {"__tuple__": [1, "2"]}}, "found tuple of int | str"),
        ({"tags": ["a"]}, "must be set[str], found list"),
        ({"frozen": {"__set__": [1]}}, "found set of int"),
        ({"mapping": {"k": ["x"]}}, "found dict"),
        ({"sequence": [1, "x"]}, "found list"),
        ({"later": typed("tests.codec_validation.Picky", amount=1)}, "found Picky"),
        ({"problem": "boom"}, "found str"),
        ({"callback": 5}, "must be Callable[[int], int] | None, found int"),
    ],
    ids=repr,
)
def test_values_that_do_not_fit_their_annotations_are_refused(
    fields: dict[str, Any], problem: str
) -> None:
    text = load_error(typed(SHAPES, **fields))
    assert f"'{SHAPES}' does not fit Shapes" in text
    assert problem in text


def test_names_known_only_for_type_checking_resolve_through_the_registry() -> None:
    ok = codec.loads(
        doc(typed("tests.codec_validation.Hidden", info=typed("relaykit.InterruptInfo", data=1))),
        kind="test",
    )
    assert ok.info == rk.InterruptInfo(1)
    text = load_error(typed("tests.codec_validation.Hidden", info=5))
    assert "field 'info' must be InterruptInfo | None, found int" in text
    # An annotation that cannot be resolved is not judged.
    assert codec.loads(doc(typed("tests.codec_validation.Hidden", signal=1)), kind="test")


def test_excluded_fields_cannot_be_smuggled_in() -> None:
    text = load_error(typed("relaykit.AgentAction", signal={"x": 1}))
    assert "unknown field 'signal'" in text


# -- malformed markers -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"__dict__": [[[1], SECRET]]}, "a dict key of type list is not hashable"),
        ({"__dict__": [[{"a": 1}, 2]]}, "a dict key of type dict is not hashable"),
        ({"__dict__": [[{"__tuple__": [[1]]}, 2]]}, "a dict key of type tuple is not hashable"),
        ({"__dict__": [[1]]}, "__dict__ must hold [key, value] pairs"),
        ({"__dict__": [[1, 2, 3]]}, "__dict__ must hold [key, value] pairs"),
        ({"__dict__": [SECRET]}, "__dict__ must hold [key, value] pairs"),
        ({"__dict__": {"a": 1}}, "__dict__ must hold a list, found dict"),
        ({"__set__": [[1]]}, "a __set__ item of type list is not hashable"),
        ({"__frozenset__": [{"a": 1}]}, "a __frozenset__ item of type dict is not hashable"),
        ({"__set__": SECRET}, "__set__ must hold a list, found str"),
        ({"__tuple__": 3}, "__tuple__ must hold a list, found int"),
        ({"__type__": 5, "data": {}}, "__type__ must hold a type name (a str), found int"),
        ({"__type__": "relaykit.Message"}, "__type__ (with 'data') needs a second key"),
        ({"__type__": "relaykit.Message", "extra": {}}, "'relaykit.Message' needs 'data'"),
        ({"__type__": "relaykit.Message", "data": [SECRET]}, "must be an object, found list"),
        ({"__type__": "relaykit.Message", "data": {}, "x": 1}, "reserved key"),
        ({"__type__": "os.system", "data": {}}, "unknown type name 'os.system'"),
        ({"__type__": "builtins.eval", "data": {}}, "unknown type name 'builtins.eval'"),
        ({"__type__": "tests.codec_validation.Color", "data": {}}, "unknown type name"),
        ({"__bytes__": 5}, "__bytes__ must hold a str, found int"),
        ({"__bytes__": "!!"}, "__bytes__ does not hold valid base64"),
        ({"__bytes__": "é"}, "__bytes__ does not hold valid base64"),
        ({"__error__": 1}, "__error__ must hold an object"),
        ({"__error__": {"type": 1, "message": "m"}}, "__error__ must hold an object"),
        ({"__error__": {"message": ["m"]}}, "__error__ must hold an object"),
        ({"__error__": {"message": "m", "extra": 1}}, "__error__ must hold an object"),
        ({"__stream__": [1]}, "__stream__ must hold an object"),
        ({"__stream__": {"message": 1}}, "a stream must hold a relaykit.Message, found int"),
        ({"__stream__": {"error": SECRET}}, "a stream's error must be an error, found str"),
        ({"__stream__": {"chunks": []}}, "__stream__ must hold an object"),
        ({"__datetime__": SECRET}, "__datetime__ does not hold a valid value"),
        ({"__datetime__": 5}, "__datetime__ must hold a str, found int"),
        ({"__date__": "2024-13-01"}, "__date__ does not hold a valid value"),
        ({"__time__": "25:00"}, "__time__ does not hold a valid value"),
        ({"__timedelta__": [1, 2]}, "__timedelta__ must hold [days, seconds, microseconds]"),
        ({"__timedelta__": [1, 2, True]}, "__timedelta__ must hold [days, seconds, microseconds]"),
        ({"__timedelta__": [10**12, 0, 0]}, "__timedelta__ is out of range"),
        ({"__uuid__": SECRET}, "__uuid__ does not hold a valid value"),
        ({"__decimal__": SECRET}, "__decimal__ does not hold a valid value"),
        ({"__decimal__": 1.5}, "__decimal__ must hold a str, found float"),
        ({"__path__": ["a"]}, "__path__ must hold a str, found list"),
        ({"__enum__": "tests.codec.Nope", "member": "A"}, "unknown type name"),
        ({"__enum__": "relaykit.Message", "member": "A"}, "is registered for Message"),
        ({"__type__": "tests.codec_validation.Suit", "data": {}}, "registered for Suit"),
        (
            {"__enum__": "tests.codec_validation.Suit", "member": SECRET},
            "names a member that Suit does not have",
        ),
        ({"__enum__": "tests.codec_validation.Suit", "member": 1}, "needs a str 'member'"),
        ({"__enum__": "tests.codec_validation.Suit"}, "__enum__ (with 'member') needs a second"),
        ({"__nope__": 1}, "unknown marker '__nope__'"),
        ({"__tuple__": [], "a": 1}, "reserved key"),
        ({"a": 1, "__x": SECRET}, "reserved key"),
    ],
)
def test_malformed_markers_are_serialization_errors(payload: Any, problem: str) -> None:
    assert problem in load_error(payload)


def test_type_names_that_are_no_names_are_described_never_echoed() -> None:
    text = load_error({"__type__": "n" * 10_000, "data": {}})
    assert len(text) < 400 and "a name of 10000 characters" in text and "nnnn" not in text
    hostile = load_error({"__type__": f"<{SECRET}>", "data": {}})
    assert SECRET not in hostile and "corrupt data" in hostile
    # A name a class could have is quoted: it says what to register.
    missing = load_error({"__type__": "shop.Refund", "data": {}})
    assert "unknown type name 'shop.Refund'" in missing
    assert "@relaykit.register_type('shop.Refund')" in missing


# -- documents -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ("a str", "is not bytes (found str)"),
        (None, "is not bytes (found NoneType)"),
        (b"\xff\xfe{}", "is corrupt (not JSON: invalid UTF-8 at byte 0)"),
        ('{"a": "é"}'.encode("utf-16"), "invalid UTF-8"),
        (b"{", "is corrupt (not JSON"),
        (b"", "is corrupt (not JSON"),
        (b"\xef\xbb\xbf{}", "is corrupt (not JSON"),  # a UTF-8 byte order mark
        (b'{"format":"test","version":1,"payload":NaN}', "NaN and Infinity are not JSON"),
        (b'{"format":"test","version":1,"payload":-Infinity}', "NaN and Infinity"),
        (b'{"format":"test","version":1,"payload":1e999}', "out of the float range"),
        (b'{"format":"test","version":1,"payload":' + b"9" * 5000 + b"}", "is corrupt (not JSON"),
        (b'{"format":"test","version":1,"payload":"\\ud800"}', "unpaired surrogate"),
        (b'{"format":"test","version":1,"payload":{"\\udfff":1}}', "unpaired surrogate"),
        (b'{"format":"test","version":"1","payload":1}', "invalid format version (a str)"),
        (b'{"format":"test","version":true,"payload":1}', "invalid format version (a bool)"),
        (b'{"format":"test","version":0,"payload":1}', "format version 0"),
        (
            b'{"format":"test","version":2,"payload":1}',
            "format version 2; this relaykit reads versions 1 to 1: upgrade relaykit",
        ),
        (b'{"format":"other","version":1,"payload":1}', "is not a relaykit test document"),
        (b"[1]", "is not a relaykit test document"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ],
    ids=repr,
)
def test_bad_documents_name_what_was_loaded(data: Any, problem: str) -> None:
    with pytest.raises(SerializationError) as caught:
        codec.loads(data, kind="test", what="checkpoint 'c1'")
    assert str(caught.value).startswith("checkpoint 'c1'")
    assert problem in str(caught.value)


def test_paired_surrogate_escapes_load_as_one_character() -> None:
    data = b'{"format":"test","version":1,"payload":"\\ud83d\\ude00 \\\\ud800"}'
    assert codec.loads(data, kind="test") == "\U0001f600 \\ud800"


def test_odd_signatures_fail_the_signature_check() -> None:
    signed = json.loads(codec.dumps({"a": 1}, kind="test", key=b"k"))
    for signature in ("é" * 64, "\ud800", 5, None):
        signed["signature"] = signature
        data = json.dumps(signed).encode()
        with pytest.raises(SerializationError, match="cp failed its signature check"):
            codec.loads(data, kind="test", key=b"k", what="cp")


def test_bytearray_and_memoryview_documents_load() -> None:
    data = codec.dumps([1], kind="test")
    assert codec.loads(bytearray(data), kind="test") == [1]
    assert codec.loads(memoryview(data), kind="test") == [1]


def test_unpaired_surrogates_cannot_be_saved() -> None:
    for value in ("\ud800", {"\udfff": 1}, {("\ud800",): 1}, rk.Message.user("a\udc00")):
        with pytest.raises(SerializationError, match="unpaired surrogate"):
            codec.dumps(value, kind="test")


# -- nesting ---------------------------------------------------------------------------------
def nested(levels: int, wrap: Callable[[Any], Any]) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = wrap(value)
    return value


WRAPPERS: dict[str, Callable[[Any], Any]] = {
    "list": lambda v: [v],
    "dict": lambda v: {"k": v},
    "pairs": lambda v: {1: v},
    "tuple": lambda v: (v,),
    "registered": lambda v: rk.AgentOutput(custom=v),
}


@pytest.mark.parametrize("kind", WRAPPERS)
def test_nesting_up_to_max_depth_round_trips_and_deeper_is_refused(kind: str) -> None:
    deepest = nested(codec.MAX_DEPTH, WRAPPERS[kind])
    data = codec.dumps(deepest, kind="test")
    assert codec.loads(data, kind="test") == deepest
    too_deep = nested(codec.MAX_DEPTH + 1, WRAPPERS[kind])
    with pytest.raises(SerializationError, match=f"nested deeper than {codec.MAX_DEPTH} levels"):
        codec.encode(too_deep)
    with pytest.raises(SerializationError, match=f"nested deeper than {codec.MAX_DEPTH}"):
        codec.dumps(too_deep, kind="test")
    # A document written by hand (or by an attacker) with one level more is refused too.
    payload = {"__tuple__": [json.loads(data)["payload"]]}
    with pytest.raises(SerializationError, match="c1: the data is nested deeper than"):
        codec.loads(doc(payload), kind="test", what="c1")
    with pytest.raises(SerializationError, match="nested deeper than"):
        codec.decode(payload)


def test_cyclic_values_are_refused_not_recursed() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="is it cyclic"):
        codec.dumps(loop, kind="test")


def test_hostile_nesting_never_raises_recursion_error() -> None:
    deep_json = (
        b'{"format":"test","version":1,"payload":' + b'{"a":' * 50_000 + b"1" + (b"}" * 50_001)
    )
    with pytest.raises(SerializationError, match="nested too deeply"):
        codec.loads(deep_json, kind="test")
    deep_list = nested(50_000, lambda v: [v])
    with pytest.raises(SerializationError, match="nested deeper than"):
        codec.decode(deep_list)
    with pytest.raises(SerializationError, match="nested deeper than"):
        codec.encode(deep_list)
    with pytest.raises(SerializationError, match="nested deeper than"):
        asyncio.run(codec.materialize_streams(deep_list))


def test_loading_from_a_deep_call_stack_fails_cleanly_or_loads() -> None:
    deepest = nested(codec.MAX_DEPTH, WRAPPERS["pairs"])
    data = codec.dumps(deepest, kind="test")
    limit = sys.getrecursionlimit()

    def at_depth(n: int) -> Any:
        if n:
            return at_depth(n - 1)
        try:
            return codec.loads(data, kind="test") == deepest
        except SerializationError as exc:
            return str(exc)

    for frames in (100, limit - 400, limit - 50):
        outcome = at_depth(frames)
        assert outcome is True or "nested" in outcome


async def test_materialize_streams_reads_streams_and_bounds_depth() -> None:
    stream = rk.MessageStream.from_list([rk.Message.assistant("a"), rk.Message.assistant("b")])
    holder = {"events": [rk.AgentEvent.from_message(stream)], "again": (stream,)}
    await codec.materialize_streams(holder)
    assert (await stream.collect()).content == "ab"
    with pytest.raises(SerializationError, match="nested deeper than"):
        await codec.materialize_streams(nested(codec.MAX_DEPTH + 1, lambda v: [v]))
    await codec.materialize_streams(nested(codec.MAX_DEPTH, lambda v: [v]))


# -- through the Runner ----------------------------------------------------------------------
async def test_resuming_a_checkpoint_with_wrong_shapes_raises_serialization_error() -> None:
    class Asker(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield rk.AgentEvent.from_message(rk.Message.assistant("thinking"))
            yield rk.interrupt(ctx, "ok?")

        async def resume(self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any) -> Any:
            yield rk.AgentEvent.from_message(rk.Message.assistant("done"))

    store = rk.InMemoryCheckpointStore()
    runner = rk.Runner(Asker("A"), checkpoint_store=store)
    [ev async for ev in runner.query("hi", checkpoint_id="cp")]
    raw = await store.get("cp")
    assert raw is not None and b'"role":"assistant"' in raw
    await store.set("cp", raw.replace(b'"role":"assistant"', b'"role":["assistant"]', 1))
    with pytest.raises(SerializationError, match=r"^checkpoint 'cp': .*field 'role'"):
        [ev async for ev in runner.resume("cp")]
    await store.set("cp", raw)
    assert [
        ev.message.content
        for ev in [ev async for ev in runner.resume("cp")]
        if ev.message is not None
    ] == ["done"]
