"""The in-memory MemoryService: keyword search over the text messages of a user's sessions."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from relaykit import codec
from relaykit.memory import InMemoryMemoryService, MemoryEntry, MemoryService
from relaykit.messages import Message, ToolCall


@dataclass
class Event:
    """The attributes of a session event that the memory service reads."""

    author: str
    message: Message | None
    timestamp: float


@dataclass
class Session:
    """The attributes of a session that the memory service reads."""

    app_name: str
    user_id: str
    id: str
    events: list[Event] = field(default_factory=list)


def session(
    session_id: str, *texts: str, app: str = "shop", user: str = "alice", start: float = 100.0
) -> Session:
    """A session whose events alternate user and assistant messages, one second apart."""
    events = [
        Event(
            "user" if i % 2 == 0 else "helper",
            Message.user(t) if i % 2 == 0 else Message.assistant(t),
            start + i,
        )
        for i, t in enumerate(texts)
    ]
    return Session(app, user, session_id, events)


def contents(entries: list[MemoryEntry]) -> list[str]:
    return [entry.message.content for entry in entries]


async def test_service_satisfies_the_protocol() -> None:
    assert isinstance(InMemoryMemoryService(), MemoryService)


async def test_nothing_is_remembered_until_a_session_is_added() -> None:
    memory = InMemoryMemoryService()
    assert await memory.search("shop", "alice", "anything") == []


async def test_search_matches_words_case_insensitively() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session(
        session("s-1", "My shoe size is 38.", "Noted: SIZE 38.", "I live in Lyon", "Nice city")
    )
    assert contents(await memory.search("shop", "alice", "what is my Size?")) == [
        "My shoe size is 38.",
        "Noted: SIZE 38.",
    ]
    assert contents(await memory.search("shop", "alice", "lyon")) == ["I live in Lyon"]
    assert await memory.search("shop", "alice", "siz") == []  # whole words only


async def test_entries_say_who_wrote_what_when_and_in_which_session() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session(session("s-1", "hello there", "hello alice", start=50.0))
    assert await memory.search("shop", "alice", "hello") == [
        MemoryEntry("helper", Message.assistant("hello alice"), 51.0, "s-1"),
        MemoryEntry("user", Message.user("hello there"), 50.0, "s-1"),
    ]


async def test_results_are_ordered_by_score_then_newest_first() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session(session("old", "red shoes", "red blue shoes", start=10.0))
    await memory.add_session(session("new", "red hat", "blue hat", start=20.0))
    found = await memory.search("shop", "alice", "red blue shoes")
    assert contents(found) == [
        "red blue shoes",  # three shared words
        "red shoes",  # two
        "blue hat",  # one, newest
        "red hat",  # one
    ]


async def test_search_never_returns_another_users_or_another_apps_memory() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session(session("s-1", "alice secret plan", user="alice", app="shop"))
    await memory.add_session(session("s-1", "bob secret plan", user="bob", app="shop"))
    await memory.add_session(session("s-2", "alice secret in crm", user="alice", app="crm"))
    assert contents(await memory.search("shop", "alice", "secret")) == ["alice secret plan"]
    assert contents(await memory.search("shop", "bob", "secret")) == ["bob secret plan"]
    assert contents(await memory.search("crm", "alice", "secret")) == ["alice secret in crm"]
    assert await memory.search("crm", "bob", "secret") == []
    assert await memory.search("shop", "carol", "secret") == []


async def test_adding_a_session_again_replaces_its_entries() -> None:
    memory = InMemoryMemoryService()
    grown = session("s-1", "order 42 shipped")
    await memory.add_session(grown)
    await memory.add_session(grown)
    assert contents(await memory.search("shop", "alice", "order")) == ["order 42 shipped"]
    grown.events.append(Event("helper", Message.assistant("order 42 delivered"), 500.0))
    await memory.add_session(grown)
    assert contents(await memory.search("shop", "alice", "order")) == [
        "order 42 delivered",
        "order 42 shipped",
    ]
    # Re-adding a session that lost its texts forgets them; other sessions stay.
    await memory.add_session(session("s-2", "another order"))
    await memory.add_session(Session("shop", "alice", "s-1", []))
    assert contents(await memory.search("shop", "alice", "order")) == ["another order"]


async def test_only_events_with_a_text_message_are_remembered() -> None:
    memory = InMemoryMemoryService()
    await memory.add_session(
        Session(
            "shop",
            "alice",
            "s-1",
            [
                Event("helper", None, 1.0),  # an action or an error
                Event(
                    "helper",
                    Message.assistant("", [ToolCall("c1", "lookup", '{"q": "order"}')]),
                    2.0,
                ),
                Event("user", Message.user("   \n"), 3.0),
                Event("lookup", Message.tool("order found", tool_call_id="c1"), 4.0),
            ],
        )
    )
    assert contents(await memory.search("shop", "alice", "order lookup")) == ["order found"]


@pytest.mark.parametrize("query", ["", "   ", "?!,.", "—"])
async def test_a_query_without_words_finds_nothing(query: str) -> None:
    memory = InMemoryMemoryService()
    await memory.add_session(session("s-1", "? ! , . —"))
    assert await memory.search("shop", "alice", query) == []


async def test_changing_the_session_later_does_not_change_what_is_remembered() -> None:
    memory = InMemoryMemoryService()
    added = session("s-1", "keep this text")
    await memory.add_session(added)
    assert added.events[0].message is not None
    added.events[0].message.content = "changed"
    assert contents(await memory.search("shop", "alice", "keep")) == ["keep this text"]


async def test_memory_entries_round_trip_through_the_codec() -> None:
    entry = MemoryEntry("user", Message.user("I live in Lyon"), 1700000000.5, "s-1")
    document = codec.dumps([entry], kind="memory")
    assert codec.loads(document, kind="memory") == [entry]


async def test_concurrent_adds_and_searches_see_whole_sessions() -> None:
    memory = InMemoryMemoryService()

    async def add(i: int) -> None:
        await memory.add_session(session(f"s-{i}", f"ticket {i} opened", f"ticket {i} closed"))

    async def search() -> list[int]:
        return [len(await memory.search("shop", "alice", "ticket")) for _ in range(20)]

    *_, counts = await asyncio.gather(*(add(i) for i in range(20)), search())
    assert all(count % 2 == 0 for count in counts)  # never half a session
    assert len(await memory.search("shop", "alice", "ticket")) == 40


async def test_wrong_types_raise_clear_errors() -> None:
    memory = InMemoryMemoryService()
    with pytest.raises(TypeError, match="memory query must be a str"):
        await memory.search("shop", "alice", None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="session's user_id must be a str"):
        await memory.add_session(Session("shop", 7, "s-1", []))  # type: ignore[arg-type]
