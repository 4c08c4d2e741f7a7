"""What the server reads of a session around a turn: only what was stored since its last look.

A turn of a long session must not read (and decode) the whole session: the server checks the
session and reads back the turn's events with ``read_turn`` from the mark of its last read.
A service without ``read_turn``, and a mark a compaction summary invalidates, fall back to
whole reads, with the same events published once each.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import relaykit as rk
from relaykit.compaction import CompactionConfig
from relaykit.sessions.base import SessionEvent
from relaykit.sessions.database import DatabaseSessionService
from tests.server.support import client, desk, turn


class _CountsWholeReads:
    """Counts ``get_session`` calls: reads of the whole session, every event decoded."""

    whole_reads = 0

    async def get_session(self, *args: Any) -> Any:
        self.whole_reads += 1
        return await super().get_session(*args)  # type: ignore[misc]


class CountingMemory(_CountsWholeReads, rk.InMemorySessionService):
    pass


class CountingDatabase(_CountsWholeReads, DatabaseSessionService):
    pass


class WithoutIncrementalReads(rk.InMemorySessionService):
    """A service with the protocol's methods only (no ``read_turn``)."""

    read_turn = None


def _agent_events(events: list[tuple[str, Any]]) -> list[dict[str, Any]]:
    return [data for name, data in events if name == "agent_event"]


async def _turns_of_a_session(runner: rk.Runner, service: Any) -> None:
    async with client(runner) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        first = await turn(http, "s1", {"text": "Where is order 7?"})
        service.whole_reads = 0
        second = await turn(http, "s1", {"text": "I want a refund"})  # pauses
        answer = {"messages": [{"role": "tool", "content": "yes", "tool_call_id": "c9"}]}
        third = await turn(http, "s1", answer)
        assert service.whole_reads == 0  # the server read only what each turn stored
        assert third[-1][1]["output"] == "manager said: yes"
        stored = (await http.get("/sessions/s1/events")).json()
        streamed = [e["id"] for t in (first, second, third) for e in _agent_events(t)]
        assert streamed == [e["id"] for e in stored]


async def test_a_turn_reads_only_what_was_stored_since_the_last_turn() -> None:
    service = CountingMemory()
    await _turns_of_a_session(desk(service=service), service)


async def test_a_turn_reads_only_what_was_stored_since_the_last_turn_on_a_database(
    database_url: str,
) -> None:
    async with CountingDatabase(database_url) as service:
        await _turns_of_a_session(desk(service=service), service)


async def test_a_service_without_read_turn_gets_the_same_events() -> None:
    async with client(desk(service=WithoutIncrementalReads())) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        events = await turn(http, "s1", {"text": "Where is order 7?"})
        again = await turn(http, "s1", {"text": "I want a refund"})
        stored = (await http.get("/sessions/s1/events")).json()
        streamed = _agent_events(events) + _agent_events(again)
        assert [e["id"] for e in streamed] == [e["id"] for e in stored]
        assert [e["author"] for e in _agent_events(events)] == ["user", *["triage"] * 2, "orders"]


class Echo(rk.BaseAgent):
    async def run(self, ctx: Any, input: Any, **options: Any) -> AsyncIterator[rk.AgentEvent]:
        yield rk.AgentEvent.from_message(rk.Message.assistant(f"echo {input.messages[-1].content}"))


async def _summarize(events: list[SessionEvent]) -> str:
    return "talked about " + ", ".join(
        e.message.content for e in events if e.message is not None and e.author == "user"
    )


async def test_a_compaction_summary_stored_at_the_end_of_a_turn_is_published_once() -> None:
    config = CompactionConfig(compaction_interval=2, overlap_size=0, summarizer=_summarize)
    runner = rk.Runner(Echo("echo"), session_service=rk.InMemorySessionService(), compaction=config)
    async with client(runner) as http:
        await http.post("/sessions", json={"session_id": "s1"})
        streamed = []
        for text in ("a", "b", "c"):
            streamed += _agent_events(await turn(http, "s1", {"text": text}))
        stored = (await http.get("/sessions/s1/events")).json()
        assert [e["id"] for e in streamed] == [e["id"] for e in stored]
        contents = [e["message"]["content"] for e in streamed]
        assert contents == [
            "a",
            "echo a",
            "b",
            "echo b",
            "Summary of the earlier conversation: talked about a, b",
            "c",
            "echo c",
        ]


async def test_two_users_with_the_same_session_id_read_only_their_own_events() -> None:
    keys = {"key-a": "alice", "key-b": "bob"}
    alice = {"Authorization": "Bearer key-a"}
    bob = {"Authorization": "Bearer key-b"}
    service = CountingMemory()
    async with client(desk(service=service), api_keys=keys) as http:
        for who in (alice, bob):
            await http.post("/sessions", json={"session_id": "s1"}, headers=who)
        streamed: dict[str, list[str]] = {"alice": [], "bob": []}
        for text in ("Where is order 7?", "I want a refund"):  # the turns interleave
            for name, who in (("alice", alice), ("bob", bob)):
                events = await turn(http, "s1", {"text": text}, **who)
                streamed[name] += [e["id"] for e in _agent_events(events)]
        for name, who in (("alice", alice), ("bob", bob)):
            stored = (await http.get("/sessions/s1/events", headers=who)).json()
            assert streamed[name] == [e["id"] for e in stored]
        assert not set(streamed["alice"]) & set(streamed["bob"])
