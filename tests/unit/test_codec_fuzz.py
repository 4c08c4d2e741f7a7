"""Property tests of the codec (semantics D10): round trips, hostile documents, no side effects.

(a) every supported value round-trips exactly; unpaired surrogates cannot be saved;
(b) random JSON documents and mutations of real checkpoints either load — as well-typed values
    that can be saved again — or raise ``SerializationError``, nothing else;
(c) loading imports, compiles, opens and runs nothing, and constructs registered classes only.

The strategies and checks live here so that ``python -m bench.fuzz`` can run them with many
more examples; ``make test`` runs a few hundred in all.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import datetime
import decimal
import enum
import functools
import json
import pathlib
import sys
import types
import typing
import uuid
import zoneinfo
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import relaykit as rk
from relaykit import _codec_registry as registry
from relaykit import codec
from relaykit.checkpoints.document import CHECKPOINT_FORMAT, Checkpoint, SavedInterruptPoint
from relaykit.errors import SerializationError, StoredError, WillRetryError

FAST = settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- registered test types ---------------------------------------------------------------------
@rk.register_type("tests.codec_fuzz.Box")
@dataclass
class Box:
    label: str
    content: Any = None
    items: list[Any] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    when: datetime.datetime | None = None
    kind: Literal["a", "b"] = "a"
    pair: tuple[int, str] = (0, "")


@rk.register_type("tests.codec_fuzz.Tone")
class Tone(enum.Enum):
    LOW = "low"
    HIGH = "high"


@rk.register_type("tests.codec_fuzz.Bits")
class Bits(enum.Flag):
    A = 1
    B = 2
    C = 4


@rk.register_type("tests.codec_fuzz.Note")
class Note(pydantic.BaseModel):
    text: str
    tags: list[str] = []


DECOY_CALLS: list[str] = []


@dataclass
class Decoy:
    """Never registered: a document naming it must not construct it."""

    x: Any = None

    def __post_init__(self) -> None:
        DECOY_CALLS.append("Decoy")


HOSTILE_NAMES = [
    "os.system",
    "builtins.eval",
    "builtins.exec",
    "subprocess.Popen",
    "posix.system",
    "pickle.loads",
    "importlib.import_module",
    "Decoy",
    f"{__name__}.Decoy",
    "tests.unit.test_codec_fuzz.Decoy",
    "__main__.Decoy",
    "relaykit.runner.Runner",
    "relaykit.InterruptSignal",
    "",
    "relaykit.Message\x00",
    "relaykit.message",
]


def registered_names() -> list[str]:
    return sorted(registry.by_name)


def field_names() -> list[str]:
    names = {
        f.name
        for entry in registry.by_name.values()
        if dataclasses.is_dataclass(entry.cls)
        for f in dataclasses.fields(entry.cls)
    }
    return sorted(names)


MARKERS = [
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
    "__stream__",
    "__type__",
    "__enum__",
]


# -- (a) values of every supported type ---------------------------------------------------------
texts = st.text(st.characters(codec="utf-8"), max_size=12)  # odd unicode, no lone surrogates
odd_texts = texts | st.sampled_from(
    [
        "",
        "\x00",
        "\u2028",
        "\ufeff",
        "e\u0301",
        "\u202e abc",
        "🧪🏳️‍🌈",
        "__type__",
        "__dict__",
        "data",
        "\\ud800",
    ]
)
fixed_offsets = st.builds(
    datetime.timezone,
    st.timedeltas(
        min_value=-datetime.timedelta(hours=23, minutes=59), max_value=datetime.timedelta(hours=23)
    ),
)
# Zone names need a time-zone database; fixed offsets do not.
zones = st.timezones() if zoneinfo.available_timezones() else st.nothing()
datetimes = st.datetimes(
    min_value=datetime.datetime(2, 1, 1),
    max_value=datetime.datetime(9998, 12, 31),
    timezones=st.none() | fixed_offsets | zones,
)
floats = st.floats(allow_nan=False, allow_infinity=False)

hashable_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    floats,
    odd_texts,
    st.binary(max_size=8),
    datetimes,
    st.dates(),
    st.times(timezones=st.none() | fixed_offsets),
    st.timedeltas(),
    st.uuids(),
    st.decimals(allow_nan=False),
    st.sampled_from(list(Tone)),
    st.sampled_from(list(Bits)),
    st.builds(lambda a, b: a | b, st.sampled_from(list(Bits)), st.sampled_from(list(Bits))),
    st.builds(pathlib.PurePosixPath, texts),
    st.builds(pathlib.Path, texts),
    st.builds(pathlib.PureWindowsPath, texts),
)
hashables = st.recursive(
    hashable_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(tuple), st.frozensets(inner, max_size=3)
    ),
    max_leaves=6,
)
scalars = (
    hashable_scalars | st.binary(max_size=8).map(bytearray) | st.builds(StoredError, texts, texts)
)


def messages(contents: st.SearchStrategy[Any] = odd_texts) -> st.SearchStrategy[rk.Message]:
    calls = st.builds(rk.ToolCall, odd_texts, odd_texts, odd_texts, st.none() | st.integers(0, 5))
    blobs = st.builds(rk.Blob, texts, st.binary(max_size=8), st.none() | texts)
    return st.builds(
        rk.Message,
        st.sampled_from(["system", "user", "assistant", "tool"]),
        contents,
        st.lists(calls, max_size=2),
        st.none() | texts,
        st.none() | texts,
        st.none() | texts,
        st.lists(blobs, max_size=1),
        st.dictionaries(texts, st.integers() | texts, max_size=2),
    )


def events(values: st.SearchStrategy[Any]) -> st.SearchStrategy[rk.AgentEvent]:
    steps = st.lists(st.builds(rk.RunStep, texts), max_size=3).map(tuple)
    outputs = st.none() | st.builds(
        rk.AgentOutput, st.none() | messages(), st.none(), texts, st.none() | texts, values
    )
    actions = st.none() | st.builds(
        rk.AgentAction,
        st.booleans(),
        st.none(),
        st.none() | st.builds(rk.TransferToAgentAction, texts),
        st.none(),
        values,
    )
    return st.builds(
        rk.AgentEvent,
        texts,
        steps,
        outputs,
        actions,
        st.none() | st.builds(StoredError, texts, texts),
    )


def containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(odd_texts, inner, max_size=3),
        st.dictionaries(hashables, inner, max_size=3),
        st.sets(hashables, max_size=3),
        st.frozensets(hashables, max_size=3),
        st.builds(
            Box,
            odd_texts,
            inner,
            st.lists(inner, max_size=2),
            st.dictionaries(texts, st.integers(), max_size=2),
            st.none() | datetimes,
            st.sampled_from(["a", "b"]),
            st.tuples(st.integers(), texts),
        ),
        st.builds(Note, text=texts, tags=st.lists(texts, max_size=2)),
        messages(),
        st.lists(messages(), max_size=1).map(rk.MessageStream.from_list),
    )


values = st.recursive(scalars, containers, max_leaves=10)
checkpoints = st.builds(
    Checkpoint,
    st.builds(rk.AgentInput, st.lists(messages(), max_size=2), st.booleans()),
    st.lists(events(values), max_size=3),
    st.dictionaries(texts, values, max_size=3),
    st.booleans(),
    values,
    st.lists(
        st.builds(
            SavedInterruptPoint,
            texts,
            st.lists(
                st.builds(
                    rk.AddressSegment, st.sampled_from(["agent", "tool"]), texts, st.none() | texts
                ),
                max_size=2,
            ).map(tuple),
            values,
            values,
            st.booleans(),
            st.none() | texts,
        ),
        max_size=2,
    ),
)
surrogate_texts = st.builds(
    lambda a, s, b: a + s + b,
    texts,
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
    texts,
)


def same(a: Any, b: Any) -> bool:
    """Equal, of the same types all the way down (floats and Decimals by their text)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float | decimal.Decimal):
        return repr(a) == repr(b)  # tells -0.0 from 0.0 and Decimal("1.0") from Decimal("1")
    if isinstance(a, datetime.datetime | datetime.time):
        return (
            a.replace(tzinfo=None) == b.replace(tzinfo=None)
            and (a.tzinfo is None) == (b.tzinfo is None)
            and a.utcoffset() == b.utcoffset()
        )
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        # Keys are matched with same() too: a zoneinfo datetime in a DST gap or fold is unequal
        # to its fixed-offset copy by ==, though it is the same instant and offset (PEP 495).
        return matched(list(a.items()), list(b.items()))
    if isinstance(a, set | frozenset):
        return matched(list(a), list(b))
    if isinstance(a, StoredError):
        return a.type_name == b.type_name and str(a) == str(b)
    if isinstance(a, rk.MessageStream):
        return same(a.chunks, b.chunks) and same(a.error, b.error)
    if dataclasses.is_dataclass(a) and not isinstance(a, type):
        return all(
            same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a) if f.compare
        )
    return bool(a == b)


def matched(left: list[Any], right: list[Any]) -> bool:
    """Every item of ``left`` is ``same`` as a distinct item of ``right`` (small collections)."""
    if len(left) != len(right):
        return False
    unused = list(right)
    for item in left:
        match = next((i for i, other in enumerate(unused) if same(item, other)), None)
        if match is None:
            return False
        del unused[match]
    return True


def check_round_trip(value: Any, key: bytes | None = None) -> str:
    got = codec.loads(codec.dumps(value, kind="fuzz", key=key), kind="fuzz", key=key)
    assert same(got, value), (value, got)
    return "round-tripped"


def check_surrogates_refused(value: Any) -> str:
    with contextlib.suppress(SerializationError):
        codec.dumps(value, kind="fuzz")
        raise AssertionError("an unpaired surrogate was saved")
    return "refused"


@FAST
@given(values)
def test_supported_values_round_trip_exactly(value: Any) -> None:
    check_round_trip(value)


@settings(FAST, max_examples=20)
@given(checkpoints, st.none() | st.just(b"key"))
def test_checkpoints_round_trip_exactly(checkpoint: Checkpoint, key: bytes | None) -> None:
    check_round_trip(checkpoint, key)


@settings(FAST, max_examples=30)
@given(
    st.one_of(
        surrogate_texts,
        surrogate_texts.map(lambda t: {t: 1}),
        surrogate_texts.map(lambda t: [rk.Message.user(t)]),
        surrogate_texts.map(lambda t: Box(t)),
    )
)
def test_unpaired_surrogates_cannot_be_saved(value: Any) -> None:
    check_surrogates_refused(value)


# -- (b) hostile documents ----------------------------------------------------------------------
@functools.cache
def json_documents() -> st.SearchStrategy[Any]:
    """Random JSON, biased towards the codec's markers, type names and field names."""
    keys = (
        st.sampled_from(MARKERS + field_names() + ["data", "member", "type", "message", "error"])
        | texts
    )
    names = st.sampled_from(registered_names() + HOSTILE_NAMES) | texts
    leaves = (
        st.none()
        | st.booleans()
        | st.integers()
        | floats
        | texts
        | st.sampled_from(
            ["user", "assistant", "agent", "tool", "YQ==", "2024-01-01T00:00:00+01:00", "RED", "A"]
        )
    )

    def extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
        return st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(keys, inner, max_size=4),
            st.builds(lambda k, v: {k: v}, st.sampled_from(MARKERS), inner),
            st.builds(
                lambda n, d: {"__type__": n, "data": d},
                names,
                st.dictionaries(st.sampled_from(field_names()), inner, max_size=5),
            ),
            st.builds(lambda n, m: {"__enum__": n, "member": m}, names, inner),
        )

    return st.recursive(leaves, extend, max_leaves=25)


def document(payload: Any, kind: str = CHECKPOINT_FORMAT) -> bytes:
    return json.dumps({"format": kind, "version": 1, "payload": payload}).encode()


def check_load(data: Any, kind: str = CHECKPOINT_FORMAT) -> str:
    """``loads`` returns a well-typed value that saves again, or raises SerializationError."""
    DECOY_CALLS.clear()
    try:
        with no_side_effects():
            value = codec.loads(data, kind=kind, what="checkpoint 'fuzz'")
            if isinstance(value, Checkpoint):
                # What the Runner does first with a loaded checkpoint: rebuild its tree.
                value.interrupt("checkpoint 'fuzz'")
    except SerializationError as exc:
        message = str(exc)
        # Named, and short: type and field names only, never the stored values.
        assert message.startswith("checkpoint 'fuzz'") and len(message) < 600, message
        assert not DECOY_CALLS
        return f"rejected: {rejection_kind(message)}"
    assert not DECOY_CALLS
    assert_well_typed(value)
    if isinstance(value, Checkpoint):
        dict(value.pending_chains)
        {p.id: (p.address, p.state) for p in value.points}
    again = codec.dumps(value, kind=kind)
    codec.loads(again, kind=kind)
    return "loaded checkpoint" if isinstance(value, Checkpoint) else "loaded other"


REJECTIONS = [
    "not JSON",
    "does not fit",
    "was refused by",
    "unknown type name",
    "nested",
    "corrupt data",
    "unpaired surrogate",
    "format version",
    "not a relaykit",
    "not bytes",
    "signature",
    "names a member",
]


def rejection_kind(message: str) -> str:
    """A short class of a load failure, for the fuzz report."""
    return next((kind for kind in REJECTIONS if kind in message), "other")


@FAST
@given(json_documents())
def test_random_json_documents_load_or_raise_serialization_error(payload: Any) -> None:
    check_load(document(payload))


@settings(FAST, max_examples=30)
@given(st.binary(max_size=64) | st.text(max_size=16) | st.none() | st.integers())
def test_random_bytes_and_objects_load_or_raise_serialization_error(data: Any) -> None:
    check_load(data)


# -- mutations of real checkpoints --------------------------------------------------------------
@rk.tool
def approve(ctx: rk.ToolContext, item: str) -> str:
    """Ask a human to approve ``item``."""
    if not ctx.was_interrupted:
        raise rk.ToolInterrupt(
            {"approve": item, "at": datetime.date(2024, 1, 2)},
            state={
                "item": item,
                "amount": decimal.Decimal("9.99"),
                "seen": frozenset({"a"}),
                "tone": Tone.HIGH,
            },
        )
    return f"{item}: {ctx.resume_data}"


@rk.tool
def echo(text: str) -> str:
    """Echo ``text`` back."""
    return f"echo: {text}"


class Greeter(rk.BaseAgent):
    """Says hello with an attachment and metadata, then hands over."""

    async def run(self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any) -> Any:
        yield rk.AgentEvent.from_message(
            rk.Message(
                "assistant",
                "hello ✓",
                [],
                None,
                None,
                "greeter",
                [rk.Blob("image/png", b"\x89PNG\x00", "p.png")],
                {"usage": {"tokens": 3}},
            )
        )


def build_tree() -> rk.Agent:
    inner = rk.ChatModelAgent(
        "inner",
        "asks for approval",
        "You are inner.",
        model=rk.ScriptedModel(
            [rk.Message.assistant("", [rk.ToolCall("ic1", "approve", '{"item": "inner"}')])]
        ),
        tools=[approve],
    )
    worker = rk.ChatModelAgent(
        "worker",
        "does the work",
        "You are worker.",
        model=rk.ScriptedModel(
            [
                rk.Message.assistant(
                    "working",
                    [
                        rk.ToolCall("c1", "echo", '{"text": "x"}'),
                        rk.ToolCall("c2", "approve", '{"item": "invoice"}'),
                        rk.ToolCall("c3", "inner", '{"request": "check"}'),
                    ],
                )
            ]
        ),
        tools=[echo, approve, rk.AgentTool(inner)],
    )
    return rk.SequentialAgent("root", [Greeter("greeter"), worker])


@functools.cache
def real_checkpoint() -> bytes:
    """The checkpoint document of a real run of a small tree, interrupted by two tools."""

    async def interrupt() -> bytes:
        store = rk.InMemoryCheckpointStore()
        runner = rk.Runner(build_tree(), checkpoint_store=store, streaming=True)
        [ev async for ev in runner.query("go", checkpoint_id="cp")]
        data = await store.get("cp")
        assert data is not None, "the run did not interrupt"
        return data

    return asyncio.run(interrupt())


@functools.cache
def built_checkpoint() -> bytes:
    """A checkpoint built directly, holding every kind of stored value."""
    values = {
        "when": datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.UTC),
        "ids": {uuid.UUID(int=7)},
        "path": pathlib.Path("/srv/x"),
        "tone": Tone.LOW,
        "bits": Bits.A | Bits.C,
        "raw": bytearray(b"\x00"),
        "note": Note(text="n"),
        "pairs": {(1, "a"): [datetime.timedelta(hours=1)]},
    }
    address = (rk.AddressSegment("agent", "root"), rk.AddressSegment("tool", "approve", "c1"))
    stream = rk.MessageStream.failed([rk.Message.assistant("part")], WillRetryError("again"))
    event = rk.AgentEvent(
        "a",
        (rk.RunStep("root"), rk.RunStep("a")),
        rk.AgentOutput(None, stream, "assistant"),
        rk.AgentAction(transfer_to_agent=rk.TransferToAgentAction("b")),
    )
    checkpoint = Checkpoint(
        rk.AgentInput([rk.Message.user("hi")]),
        [event],
        values,
        True,
        {"question": "ok?"},
        [SavedInterruptPoint("p1", address, "info", Box("s"), True)],
        [(address, [Box("pending")])],
    )
    return codec.dumps(checkpoint, kind=CHECKPOINT_FORMAT)


Path = tuple[Any, ...]


def all_paths(root: Any) -> list[Path]:
    """The path of every node of a JSON tree, the root first."""
    found: list[Path] = []
    stack: list[tuple[Path, Any]] = [((), root)]
    while stack:
        path, node = stack.pop()
        found.append(path)
        if isinstance(node, dict):
            stack.extend(((*path, key), value) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend(((*path, index), value) for index, value in enumerate(node))
    return found


def get_at(node: Any, path: Path) -> Any:
    for step in path:
        node = node[step]
    return node


def set_at(root: dict[str, Any], path: Path, value: Any) -> None:
    get_at(root, path[:-1])[path[-1]] = value


WRAPPERS: list[Callable[[Any], Any]] = [
    lambda v: [v],
    lambda v: {"k": v},
    lambda v: {"__tuple__": [v]},
    lambda v: {"__dict__": [[1, v]]},
    lambda v: {"__type__": "relaykit.AgentOutput", "data": {"custom": v}},
]


def tweaked(node: Any) -> st.SearchStrategy[Any]:
    """A value of the same JSON shape as ``node`` with other content."""
    if isinstance(node, bool):
        return st.just(not node)
    if isinstance(node, int):
        return st.integers(-2, 3) | st.integers()
    if isinstance(node, str):
        return st.sampled_from(["", "root", "worker", "inner", "greeter", "p1", "c1", node * 2])
    if isinstance(node, list):
        return st.sampled_from([[], node[:1], node[::-1], node + node[:1]])
    return st.just(node)


@st.composite
def mutated_checkpoints(draw: st.DrawFn) -> bytes:
    """A real checkpoint document with one to four random mutations."""
    base = draw(st.sampled_from([real_checkpoint, built_checkpoint]))()
    root = json.loads(base)
    for _ in range(draw(st.integers(1, 4))):
        paths = [p for p in all_paths(root) if p and p[0] == "payload"]
        path = draw(st.sampled_from(paths))
        node = get_at(root, path)
        operation = draw(
            st.sampled_from(
                [
                    "replace",
                    "transplant",
                    "delete",
                    "rename",
                    "deepen",
                    "add-key",
                    "marker",
                    "tweak",
                    "tweak",
                ]
            )
        )
        if operation == "tweak":  # same shape, other content: probes what the Runner does next
            set_at(root, path, draw(tweaked(node)))
        elif operation == "replace":
            set_at(root, path, draw(json_documents()))
        elif operation == "transplant":  # a real value of another shape: type confusion
            set_at(root, path, copy.deepcopy(get_at(root, draw(st.sampled_from(paths)))))
        elif operation == "delete" and len(path) > 1:
            del get_at(root, path[:-1])[path[-1]]
        elif operation == "rename" and isinstance(node, dict) and "__type__" in node:
            node["__type__"] = draw(st.sampled_from(registered_names() + HOSTILE_NAMES) | texts)
        elif operation == "deepen":
            wrap = draw(st.sampled_from(WRAPPERS))
            for _ in range(draw(st.integers(1, codec.MAX_DEPTH + 10))):
                node = wrap(node)
            set_at(root, path, node)
        elif operation == "add-key" and isinstance(node, dict):
            key = draw(st.sampled_from(MARKERS + field_names()) | texts)
            node[key] = draw(json_documents())
        elif operation == "marker" and isinstance(node, dict) and len(node) == 1:
            (value,) = node.values()
            set_at(root, path, {draw(st.sampled_from(MARKERS)): value})
    if draw(st.integers(0, 5)) < 5:  # Hypothesis favours 0: the undamaged document
        return json.dumps(root, ensure_ascii=False).encode("utf-8")
    data = bytearray(json.dumps(root).encode())  # and sometimes a damaged byte
    data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def test_the_real_checkpoints_load() -> None:
    for data in (real_checkpoint(), built_checkpoint()):
        assert check_load(data) == "loaded checkpoint"
    checkpoint = codec.loads(real_checkpoint(), kind=CHECKPOINT_FORMAT)
    assert {type(p.state).__name__ for p in checkpoint.points} >= {"dict"}


@settings(FAST, max_examples=150)
@given(mutated_checkpoints())
def test_mutated_checkpoints_load_well_typed_or_raise_serialization_error(data: bytes) -> None:
    check_load(data)


def check_resume(data: bytes) -> str:
    """A checkpoint that loads can be resumed: the Runner fails only with relaykit errors
    (raised before any agent runs, or as error events) — never a raw AttributeError/TypeError
    from a value of the wrong shape."""
    outcome = check_load(data)
    if outcome != "loaded checkpoint":
        return outcome

    async def resume() -> list[rk.AgentEvent]:
        store = rk.InMemoryCheckpointStore()
        await store.set("fuzz", data)
        runner = rk.Runner(build_tree(), checkpoint_store=store, streaming=True)
        return [ev async for ev in runner.resume("fuzz")]

    try:
        resumed = asyncio.run(resume())
    except rk.errors.RelayKitError as exc:
        return f"resume raised {type(exc).__name__}"
    errors = sorted({type(ev.error).__name__ for ev in resumed if ev.error is not None})
    raw = [
        ev.error
        for ev in resumed
        if ev.error is not None and not isinstance(ev.error, rk.errors.RelayKitError)
    ]
    assert not raw, raw
    return "resumed" + (f" with error events {', '.join(errors)}" if errors else "")


@settings(FAST, max_examples=25)
@given(mutated_checkpoints())
def test_mutated_checkpoints_that_load_can_be_resumed(data: bytes) -> None:
    check_resume(data)


# -- checking what was loaded -------------------------------------------------------------------
def _namespace() -> dict[str, Any]:
    names: dict[str, Any] = {}
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("relaykit"):
            names.update({k: v for k, v in vars(module).items() if isinstance(v, type)})
    return names


@functools.cache
def hints_of(cls: type[Any]) -> dict[str, Any]:
    # Names imported for type checking only come from relaykit's modules, without shadowing
    # the class's own module (elsewhere ``datetime`` may be the class, here the module).
    own = vars(sys.modules[cls.__module__])
    extra = {k: v for k, v in _namespace().items() if k not in own}
    return typing.get_type_hints(cls, localns=extra)


def fits(value: Any, annotation: Any) -> bool:
    """An independent, simple check of ``value`` against ``annotation``."""
    if annotation is Any or isinstance(annotation, typing.TypeVar):
        return True
    if annotation is None or annotation is type(None):
        return value is None
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return any(fits(value, a) for a in args)
    if origin is Literal:
        return any(type(value) is type(a) and value == a for a in args)
    if origin is list:
        return isinstance(value, list) and all(fits(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            fits(k, args[0]) and fits(v, args[1]) for k, v in value.items()
        )
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return isinstance(value, tuple) and all(fits(v, args[0]) for v in value)
        return (
            isinstance(value, tuple)
            and len(value) == len(args)
            and all(fits(v, a) for v, a in zip(value, args, strict=True))
        )
    if origin in (set, frozenset):
        return isinstance(value, origin) and all(fits(v, args[0]) for v in value)
    if isinstance(annotation, type):
        if annotation is float:
            return isinstance(value, int | float)
        if issubclass(annotation, BaseException):
            return isinstance(value, BaseException)
        return isinstance(value, annotation)
    return True


KNOWN_TYPES = (
    type(None),
    bool,
    int,
    float,
    str,
    bytes,
    bytearray,
    list,
    dict,
    tuple,
    set,
    frozenset,
    datetime.datetime,
    datetime.date,
    datetime.time,
    datetime.timedelta,
    uuid.UUID,
    decimal.Decimal,
    pathlib.PurePath,
    StoredError,
    WillRetryError,
    rk.MessageStream,
)


def assert_well_typed(value: Any, depth: int = 0) -> None:
    """Every object is of a registered or natively saved type, and every field of a registered
    dataclass fits its annotation."""
    assert depth <= codec.MAX_DEPTH + 1
    kind = type(value)
    assert kind in registry.by_type or isinstance(value, KNOWN_TYPES), kind
    children: list[Any] = []
    if isinstance(value, dict):
        children = [*value.keys(), *value.values()]
    elif isinstance(value, list | tuple | set | frozenset):
        children = list(value)
    elif isinstance(value, rk.MessageStream):
        children = [*value.chunks, value.error]
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        hints = hints_of(kind)
        for f in dataclasses.fields(value):
            item = getattr(value, f.name)
            assert fits(item, hints[f.name]), (kind.__name__, f.name, type(item))
            children.append(item)
    for child in children:
        assert_well_typed(child, depth + 1)


# -- (c) no side effects ------------------------------------------------------------------------
WATCHED_EVENTS = frozenset(
    {
        "import",
        "exec",
        "compile",
        "open",
        "os.system",
        "subprocess.Popen",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "ctypes.dlopen",
        "pickle.find_class",
        "marshal.loads",
        "socket.connect",
    }
)
_audit = {"installed": False, "generation": -1}
_recorded: list[str] | None = None  # a list only while a load runs: the hook is inert otherwise


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if _recorded is not None and event in WATCHED_EVENTS:
        _recorded.append(event)


def _resolve_registered_annotations() -> None:
    # The annotations of registered classes are the application's own code: the codec evaluates
    # them once per class. Resolve them first so that what is recorded is what a document causes.
    if _audit["generation"] != registry.generation:
        for entry in list(registry.by_name.values()):
            if entry.kind == "dataclass":
                entry.shape = registry.shape_of(entry)
        _audit["generation"] = registry.generation


@contextlib.contextmanager
def no_side_effects() -> Iterator[None]:
    """Assert that the block imports, compiles, executes, opens and spawns nothing."""
    global _recorded
    if not _audit["installed"]:
        sys.addaudithook(_hook)  # cannot be removed: installed once, inert unless recording
        _audit["installed"] = True
    _resolve_registered_annotations()
    _recorded = []
    try:
        yield
    finally:
        seen, _recorded = _recorded, None
    assert not seen, f"loading caused audit events {sorted(set(seen))}"


def test_the_audit_hook_sees_what_it_watches() -> None:
    with pytest.raises(AssertionError, match="compile"), no_side_effects():
        compile("1", "<test>", "eval")


@settings(FAST, max_examples=40)
@given(st.sampled_from(HOSTILE_NAMES) | texts, json_documents())
def test_only_registered_types_are_ever_constructed(name: str, data: Any) -> None:
    for payload in (
        {"__type__": name, "data": {"x": data}},
        {"__enum__": name, "member": data},
        [{"__type__": name, "data": {}}, data],
    ):
        outcome = check_load(document(payload))
        assert outcome.startswith("rejected") or name in registry.by_name
    assert not DECOY_CALLS
