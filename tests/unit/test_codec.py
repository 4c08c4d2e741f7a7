"""Unit tests: the JSON codec with registered types and HMAC signing (semantics D10)."""

from __future__ import annotations

import datetime
import json
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
@pytest.mark.parametrize("value", [
    None, True, 0, -3, 2**70, 1.5, "text ✓", [], [1, "a", None], {"a": {"b": [1]}},
    (1, (2, "x")), [(1,), ()], b"\x00\xff bytes", {1: "int key", (1, 2): "tuple key"},
    {"__type__": "not a type", "__tuple__": 1}, {1, 2},
], ids=repr)
def test_plain_values_round_trip(value: Any) -> None:
    got = round_trip(value)
    assert got == value and type(got) is type(value)


def test_message_with_blob_and_tool_calls_round_trips() -> None:
    msg = rk.Message("assistant", "look", [rk.ToolCall("c1", "f", '{"a": 1}')], None, None,
                     "bot", [rk.Blob("image/png", b"\x89PNG\x00\xff", "p.png")],
                     {"usage": {"input_tokens": 1, "output_tokens": 2}})
    got = round_trip(msg)
    assert got == msg
    assert type(got.attachments[0]) is rk.Blob and got.attachments[0].data == b"\x89PNG\x00\xff"
    assert type(got.tool_calls[0]) is rk.ToolCall


def test_nested_registered_dataclasses_round_trip() -> None:
    tree = Node(Leaf("root", b"\x01"), [Node(Leaf("kid"), pair=(2, "b"))], (1, "a"),
                {("k", 1): Leaf("v"), "s": (1, 2)})
    got = round_trip(tree)
    assert got == tree
    assert type(got.children[0]) is Node and type(got.children[0].leaf) is Leaf
    assert isinstance(got.pair, tuple) and isinstance(got.lookup["s"], tuple)


def test_registered_pydantic_model_round_trips() -> None:
    got = round_trip({"m": Model(count=2, tags=["x"])})
    assert got == {"m": Model(count=2, tags=["x"])} and type(got["m"]) is Model


def test_events_and_framework_types_round_trip() -> None:
    ev = rk.AgentEvent("A", (rk.RunStep("R"), rk.RunStep("A")),
                       rk.AgentOutput(rk.Message.assistant("hi")),
                       rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("B")))
    got = round_trip(ev)
    assert got == ev and isinstance(got.run_path, tuple)
    seg = rk.AddressSegment("tool", "search", "call_1")
    assert round_trip((seg,)) == (seg,)


def test_errors_become_stored_errors() -> None:
    got = round_trip([ValueError("boom"), rk.errors.SerializationError("bad data")])
    assert all(isinstance(e, rk.errors.StoredError) for e in got)
    assert [(e.type_name, str(e)) for e in got] == [("ValueError", "boom"),
                                                    ("SerializationError", "bad data")]
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


@pytest.mark.parametrize(("mutate", "problem"), [
    (lambda d: d.replace(b'"tests.codec.Leaf"', b'"tests.codec.Gone"'),
     "unknown type name 'tests.codec.Gone'"),
    (lambda d: d.replace(b'"label":"x"', b'"nope":"x"'), "does not fit Leaf"),
    (lambda d: d.replace(b'"version":1', b'"version":2'), "format version 2"),
    (lambda d: d[:-3], "not JSON"),
    (lambda d: d.replace(b'"format":"test"', b'"format":"other"'), "not a relaykit test"),
    (lambda d: b"\xff" + d, "not JSON"),
], ids=["unknown-type", "wrong-shape", "newer-version", "truncated", "wrong-kind", "bad-utf8"])
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


# -- bugs --------------------------------------------------------------------------------------
def test_registered_pydantic_model_with_datetime_round_trips() -> None:
    value = Stamped(at=datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC))
    assert round_trip(value) == value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "\ud800"],
                         ids=["nan", "inf", "lone-surrogate"])
def test_unsavable_builtin_values_raise_serialization_error(value: Any) -> None:
    with pytest.raises(SerializationError):
        codec.dumps({"v": value}, kind="test")
