"""Unit tests: the JSON codec with registered types and HMAC signing (semantics D10)."""

from __future__ import annotations

import datetime
import decimal
import enum
import json
import pathlib
import uuid
import zoneinfo
from dataclasses import dataclass, field
from typing import Any

import pydantic
import pytest

import relaykit as rk
from relaykit import codec

SerializationError = rk.errors.SerializationError


@rk.register_type("tests.codec.Leaf")
@dataclass
class Leaf:
    label: str
    raw: bytes = b""


@rk.register_type("tests.codec.Node")
@dataclass
class Node:
    leaf: Leaf
    children: list[Node] = field(default_factory=list)
    pair: tuple[int, str] = (0, "")
    lookup: dict[Any, Any] = field(default_factory=dict)


@rk.register_type("tests.codec.Model")
class Model(pydantic.BaseModel):
    count: int
    tags: list[str] = []


@rk.register_type("tests.codec.Stamped")
class Stamped(pydantic.BaseModel):
    at: datetime.datetime


@dataclass
class NotRegistered:
    x: int


def round_trip(value: Any, key: bytes | None = None) -> Any:
    return codec.loads(codec.dumps(value, kind="test", key=key), kind="test", key=key)


# -- round trips -------------------------------------------------------------------------------
@rk.register_type("tests.codec.Color")
class Color(enum.Enum):
    RED = "r"
    GREEN = "g"


@rk.register_type("tests.codec.Perm")
class Perm(enum.Flag):
    READ = 1
    WRITE = 2


@rk.register_type("tests.codec.Level")
class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Unregistered(enum.Enum):
    ONE = 1


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        -3,
        2**70,
        1.5,
        "text ✓",
        [],
        [1, "a", None],
        {"a": {"b": [1]}},
        (1, (2, "x")),
        [(1,), ()],
        b"\x00\xff bytes",
        {1: "int key", (1, 2): "tuple key"},
        {"__type__": "not a type", "__tuple__": 1},
        {1, 2},
    ],
    ids=repr,
)
def test_plain_values_round_trip(value: Any) -> None:
    got = round_trip(value)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize(
    "value",
    [
        datetime.datetime(2024, 5, 1, 12, 30, 15, 123456),
        datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC),
        datetime.datetime(2024, 5, 1, tzinfo=datetime.timezone(datetime.timedelta(hours=-3.5))),
        # Offsets under a second: CPython 3.11's fromisoformat reads them as UTC.
        datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone(datetime.timedelta(microseconds=1))),
        datetime.time(tzinfo=datetime.timezone(-datetime.timedelta(microseconds=999_999))),
        datetime.date(1999, 12, 31),
        datetime.time(23, 59, 59, 999999),
        datetime.time(8, 0, tzinfo=datetime.timezone(datetime.timedelta(hours=2))),
        datetime.timedelta(days=-2, seconds=5, microseconds=7),
        datetime.timedelta.max,
        uuid.UUID("12345678-1234-5678-1234-567812345678"),
        decimal.Decimal("-0.10"),
        decimal.Decimal("1E+400"),
        decimal.Decimal("Infinity"),
        bytearray(b"\x00buf"),
        frozenset({1, "a"}),
        frozenset(),
        set(),
        (),
        pathlib.Path("/tmp/a b/c.txt"),
        pathlib.PurePosixPath("rel/x"),
        pathlib.PureWindowsPath(r"C:\Users\x"),
        Color.GREEN,
        Perm.READ,
        Perm.READ | Perm.WRITE,
        Perm(0),
        Level.HIGH,
        {Color.RED: [datetime.date(2024, 1, 1)], (Level.LOW, frozenset({2})): uuid.UUID(int=0)},
    ],
    ids=repr,
)
def test_standard_types_round_trip_exactly(value: Any) -> None:
    got = round_trip(value)
    assert got == value and type(got) is type(value)
    assert str(got) == str(value)  # exact: Decimal exponent, path text, time offset


def test_zoneinfo_datetimes_come_back_with_their_offset() -> None:
    paris = datetime.datetime(2024, 7, 1, 9, 0, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    got = round_trip(paris)
    assert got == paris and got.utcoffset() == datetime.timedelta(hours=2)
    assert got.tzinfo == datetime.timezone(datetime.timedelta(hours=2))


def test_datetime_in_a_registered_dataclass_is_saved_natively() -> None:
    @rk.register_type("tests.codec.Meeting")
    @dataclass
    class Meeting:
        at: datetime.datetime
        length: datetime.timedelta

    value = Meeting(datetime.datetime(2024, 1, 2, 3, 4), datetime.timedelta(minutes=30))
    assert round_trip(value) == value


def test_stored_errors_keep_their_type_name_when_saved_again() -> None:
    first = round_trip(KeyError("k"))
    again = round_trip(first)
    assert isinstance(again, rk.errors.StoredError) and again.type_name == "KeyError"


def test_message_with_blob_and_tool_calls_round_trips() -> None:
    msg = rk.Message(
        "assistant",
        "look",
        [rk.ToolCall("c1", "f", '{"a": 1}')],
        None,
        None,
        "bot",
        [rk.Blob("image/png", b"\x89PNG\x00\xff", "p.png")],
        {"usage": {"input_tokens": 1, "output_tokens": 2}},
    )
    got = round_trip(msg)
    assert got == msg
    assert type(got.attachments[0]) is rk.Blob and got.attachments[0].data == b"\x89PNG\x00\xff"
    assert type(got.tool_calls[0]) is rk.ToolCall


def test_nested_registered_dataclasses_round_trip() -> None:
    tree = Node(
        Leaf("root", b"\x01"),
        [Node(Leaf("kid"), pair=(2, "b"))],
        (1, "a"),
        {("k", 1): Leaf("v"), "s": (1, 2)},
    )
    got = round_trip(tree)
    assert got == tree
    assert type(got.children[0]) is Node and type(got.children[0].leaf) is Leaf
    assert isinstance(got.pair, tuple) and isinstance(got.lookup["s"], tuple)


def test_registered_pydantic_model_round_trips() -> None:
    got = round_trip({"m": Model(count=2, tags=["x"])})
    assert got == {"m": Model(count=2, tags=["x"])} and type(got["m"]) is Model


def test_events_and_framework_types_round_trip() -> None:
    ev = rk.AgentEvent(
        "A",
        (rk.RunStep("R"), rk.RunStep("A")),
        rk.AgentOutput(rk.Message.assistant("hi")),
        rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("B")),
    )
    got = round_trip(ev)
    assert got == ev and isinstance(got.run_path, tuple)
    seg = rk.AddressSegment("tool", "search", "call_1")
    assert round_trip((seg,)) == (seg,)


def test_errors_become_stored_errors() -> None:
    got = round_trip([ValueError("boom"), rk.errors.SerializationError("bad data")])
    assert all(isinstance(e, rk.errors.StoredError) for e in got)
    assert [(e.type_name, str(e)) for e in got] == [
        ("ValueError", "boom"),
        ("SerializationError", "bad data"),
    ]
    retry = round_trip(rk.errors.WillRetryError("again"))
    assert isinstance(retry, rk.errors.WillRetryError) and str(retry) == "again"


async def test_streams_are_saved_materialised() -> None:
    stream = rk.MessageStream.from_list([rk.Message.assistant("a"), rk.Message.assistant("b")])
    got = round_trip(stream)
    assert isinstance(got, rk.MessageStream)
    assert (await got.collect()).content == "ab"

    failed = rk.MessageStream.failed([rk.Message.assistant("part")], ValueError("cut"))
    got = round_trip(failed)
    assert [c.content for c in got.chunks] == ["part"]
    assert isinstance(got.error, rk.errors.StoredError) and str(got.error) == "cut"

    async def endless() -> Any:
        yield rk.Message.assistant("x")

    with pytest.raises(SerializationError, match="not ended"):
        codec.dumps(rk.MessageStream(endless()), kind="test")


def test_document_shape() -> None:
    doc = json.loads(codec.dumps({"a": 1}, kind="test"))
    assert doc == {"format": "test", "version": codec.FORMAT_VERSION, "payload": {"a": 1}}


# -- failures ----------------------------------------------------------------------------------
def test_unregistered_type_fails_to_save_clearly() -> None:
    with pytest.raises(SerializationError, match=r"NotRegistered.*register_type"):
        codec.dumps({"x": NotRegistered(1)}, kind="test")
    with pytest.raises(SerializationError, match="object"):
        codec.encode(object())


def test_advice_for_an_unsavable_value_is_one_that_works() -> None:
    class Plain:
        pass

    with pytest.raises(SerializationError, match="convert it to one of the types") as caught:
        codec.encode(Plain())
    assert "datetime" in str(caught.value)  # the list of natively saved types
    with pytest.raises(SerializationError, match=r"register the Enum.*register_type"):
        codec.encode(Unregistered.ONE)
    # Following the advice works.
    rk.register_type("tests.codec.Unregistered")(Unregistered)
    assert round_trip([Unregistered.ONE]) == [Unregistered.ONE]


def test_unregistered_int_and_str_enums_are_saved_as_their_plain_value() -> None:
    class Size(enum.IntEnum):
        BIG = 3

    got = round_trip({"size": Size.BIG})
    assert got == {"size": 3} and type(got["size"]) is int


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        (
            lambda d: d.replace(b'"tests.codec.Leaf"', b'"tests.codec.Gone"'),
            "unknown type name 'tests.codec.Gone'",
        ),
        (lambda d: d.replace(b'"label":"x"', b'"nope":"x"'), "does not fit Leaf"),
        (lambda d: d.replace(b'"version":1', b'"version":2'), "format version 2"),
        (lambda d: d[:-3], "not JSON"),
        (lambda d: d.replace(b'"format":"test"', b'"format":"other"'), "not a relaykit test"),
        (lambda d: b"\xff" + d, "not JSON"),
    ],
    ids=["unknown-type", "wrong-shape", "newer-version", "truncated", "wrong-kind", "bad-utf8"],
)
def test_corrupt_documents_fail_to_load_clearly(mutate: Any, problem: str) -> None:
    data = codec.dumps([Leaf("x")], kind="test")
    with pytest.raises(SerializationError, match=problem):
        codec.loads(mutate(data), kind="test", what="checkpoint 'c1'")


def test_corrupt_values_inside_a_document() -> None:
    for bad in ({"__bytes__": "!!"}, {"__tuple__": 3}, {"__error__": 1}):
        data = json.dumps({"format": "test", "version": 1, "payload": bad}).encode()
        with pytest.raises(SerializationError):
            codec.loads(data, kind="test")


def test_messages_name_what_was_loaded() -> None:
    with pytest.raises(SerializationError, match="checkpoint 'c1' is corrupt"):
        codec.loads(b"{", kind="test", what="checkpoint 'c1'")


# -- signing -----------------------------------------------------------------------------------
def test_signed_documents_verify_and_detect_tampering() -> None:
    value = {"leaf": Leaf("x", b"\x00"), "text": "héllo ✓", "n": 1e16}
    signed = codec.dumps(value, kind="test", key=b"k")
    assert "signature" in json.loads(signed)
    assert codec.loads(signed, kind="test", key=b"k") == value
    assert codec.loads(signed, kind="test") == value  # readers without a key do not check

    tampered = signed.replace(b'"label":"x"', b'"label":"y"')
    with pytest.raises(SerializationError, match="signature"):
        codec.loads(tampered, kind="test", key=b"k")
    with pytest.raises(SerializationError, match="signature"):
        codec.loads(signed, kind="test", key=b"other")
    unsigned = codec.dumps(value, kind="test")
    with pytest.raises(SerializationError, match="signature"):
        codec.loads(unsigned, kind="test", key=b"k")
    doc = json.loads(signed)
    doc["signature"] = 5
    with pytest.raises(SerializationError, match="signature"):
        codec.loads(json.dumps(doc).encode(), kind="test", key=b"k")


async def test_runner_signs_checkpoints() -> None:
    class Asker(rk.BaseAgent):
        async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
            yield rk.stateful_interrupt(ctx, "ok?", Leaf("state"))

        async def resume(self, ctx: rk.RunContext, info: rk.ResumeInfo, **options: Any) -> Any:
            yield rk.AgentEvent.from_message(rk.Message.assistant(info.interrupt_state.label))

    store = rk.InMemoryCheckpointStore()
    runner = rk.Runner(Asker("A"), checkpoint_store=store, checkpoint_signing_key=b"k")
    [ev async for ev in runner.query("hi", checkpoint_id="cp")]
    raw = await store.get("cp")
    assert raw is not None
    doc = codec.loads(raw, kind="relaykit/checkpoint", key=b"k")
    assert doc.points[0].state == Leaf("state")
    await store.set("cp", raw.replace(b'"label":"state"', b'"label":"evil"'))
    with pytest.raises(SerializationError, match="signature"):
        [ev async for ev in runner.resume("cp")]
    await store.set("cp", raw)
    events = [ev async for ev in runner.resume("cp")]
    assert [ev.message.content for ev in events] == ["state"]  # type: ignore[union-attr]


# -- register_type -----------------------------------------------------------------------------
def test_register_type_rejects_other_classes_and_name_clashes() -> None:
    with pytest.raises(TypeError):
        rk.register_type("tests.codec.Plain")(type("Plain", (), {}))

    @dataclass
    class Other:
        y: int

    with pytest.raises(ValueError, match="already used"):
        rk.register_type("tests.codec.Leaf")(Other)


def test_register_type_checks_excluded_fields() -> None:
    @dataclass
    class Job:
        name: str
        handle: Any = None

    with pytest.raises(TypeError, match="no field 'nope'"):
        rk.register_type("tests.codec.Job1", exclude=["nope"])(Job)
    with pytest.raises(TypeError, match="'name' needs a default"):
        rk.register_type("tests.codec.Job2", exclude=["name"])(Job)
    rk.register_type("tests.codec.Job3", exclude=["handle"])(Job)
    assert round_trip(Job("j", handle=object())) == Job("j")
    with pytest.raises(TypeError, match="Enum"):
        rk.register_type("tests.codec.Color2", exclude=["RED"])(Color)


def test_excluded_fields_of_pydantic_models_are_not_saved() -> None:
    @rk.register_type("tests.codec.Secretive", exclude=["token"])
    class Secretive(pydantic.BaseModel):
        name: str
        token: str = ""

    data = codec.dumps(Secretive(name="n", token="hidden"), kind="test")
    assert b"hidden" not in data
    assert codec.loads(data, kind="test") == Secretive(name="n")


# -- bugs --------------------------------------------------------------------------------------
def test_registered_pydantic_model_with_datetime_round_trips() -> None:
    value = Stamped(at=datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC))
    assert round_trip(value) == value


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), "\ud800"], ids=["nan", "inf", "lone-surrogate"]
)
def test_unsavable_builtin_values_raise_serialization_error(value: Any) -> None:
    with pytest.raises(SerializationError):
        codec.dumps({"v": value}, kind="test")


# -- adapters ----------------------------------------------------------------------------------
class Span:
    """Not a dataclass: saved through an adapter."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end
        self.finished = False

    async def finish(self) -> None:
        self.finished = True

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Span) and (self.start, self.end) == (other.start, other.end)


def _load_span(fields: dict[str, Any]) -> Span:
    if type(fields.get("start")) is not int:
        raise ValueError(f"a span's start must be an int, found {type(fields.get('start'))}")
    return Span(fields["start"], fields.get("end", fields["start"]))


codec.register_adapter(
    Span,
    "tests_span",
    fields=("start", "end"),
    save=lambda s: {"start": s.start, "end": s.end},
    load=_load_span,
    materialize=Span.finish,
)


def test_adapted_values_round_trip_under_their_marker() -> None:
    class Wide(Span):
        pass

    value = {"span": Span(1, 5), "spans": (Span(2, 3),), "wide": Wide(7, 9)}
    assert codec.encode(Span(1, 5)) == {"__tests_span__": {"start": 1, "end": 5}}
    got = round_trip(value)
    assert got == value and type(got["wide"]) is Span  # a subclass loads as load builds it


async def test_materialize_streams_awaits_every_adapters_hook() -> None:
    spans = [Span(1, 2), Span(3, 4)]
    await codec.materialize_streams({"a": [spans[0]], "b": Node(Leaf("x"), lookup={1: spans[1]})})
    assert [s.finished for s in spans] == [True, True]


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"__tests_span__": [1]}, "__tests_span__ must hold an object with 'start' and 'end'"),
        (
            {"__tests_span__": {"start": 1, "other": 2}},
            "must hold an object with 'start' and 'end'",
        ),
        ({"__tests_span__": {"start": "1"}}, "corrupt data: a span's start must be an int"),
        ({"__tests_span__": {"start": {"__nope__": 1}}}, "unknown marker '__nope__'"),
    ],
)
def test_adapted_values_that_do_not_fit_fail_to_load_clearly(payload: Any, problem: str) -> None:
    data = json.dumps({"format": "test", "version": 1, "payload": payload}).encode()
    with pytest.raises(SerializationError, match=problem):
        codec.loads(data, kind="test")


def test_an_adapter_that_saves_undeclared_fields_fails_to_save() -> None:
    class Loose:
        pass

    codec.register_adapter(
        Loose, "tests_loose", fields=("a",), save=lambda v: {"b": 1}, load=lambda f: Loose()
    )
    with pytest.raises(SerializationError, match="fields other than 'a'"):
        codec.encode(Loose())


def test_register_adapter_rejects_the_codecs_markers_and_taken_names() -> None:
    class Other:
        pass

    for name in ("tuple", "type", "error"):
        with pytest.raises(ValueError, match="the codec's own"):
            codec.register_adapter(Other, name, fields=("a",), save=vars, load=lambda f: Other())
    for name in ("stream", "tests_span"):
        with pytest.raises(ValueError, match="already used"):
            codec.register_adapter(Other, name, fields=("a",), save=vars, load=lambda f: Other())
    for name in ("", "Bad", "_x", "x_", "a-b"):
        with pytest.raises(ValueError, match="lowercase"):
            codec.register_adapter(Other, name, fields=("a",), save=vars, load=lambda f: Other())
    with pytest.raises(ValueError, match="distinct"):
        codec.register_adapter(
            Other, "tests_other", fields=("a", "a"), save=vars, load=lambda f: Other()
        )


def test_the_codecs_own_markers_are_the_ones_adapters_may_not_take() -> None:
    from relaykit import _codec_adapters, _codec_decode

    assert _codec_decode._MARKERS.keys() == _codec_adapters.BUILTIN_MARKERS


def test_streams_saved_by_earlier_versions_still_load() -> None:
    # Written by relaykit before streams were saved through an adapter: the format is unchanged.
    data = (
        b'{"format":"test","version":1,"payload":[{"__stream__":{"message":{"__type__":'
        b'"relaykit.Message","data":{"role":"assistant","content":"hi","tool_calls":[],'
        b'"tool_call_id":null,"tool_name":null,"name":null,"attachments":[],"metadata":{}}},'
        b'"error":null}},{"__stream__":{"message":null,"error":{"__error__":{"type":'
        b'"ValueError","message":"cut"}}}}]}'
    )
    ok, failed = codec.loads(data, kind="test")
    assert [c.content for c in ok.chunks] == ["hi"] and ok.error is None and ok.done
    assert failed.chunks == [] and str(failed.error) == "cut"
    assert codec.dumps([ok, failed], kind="test") == data
