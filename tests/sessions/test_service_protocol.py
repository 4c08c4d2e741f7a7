"""The SessionService protocol, the same on every service: in memory, SQLite and PostgreSQL.

Sessions and their ids, events (stored copies, ids and timestamps), state by scope, histories
with compaction summaries, pauses, validation before any I/O, and the turn lock within one
process. Processes are in test_lock_processes.py, what only the database has in
test_database_service.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

import pytest

from relaykit import AgentAction, Message
from relaykit.errors import (
    SerializationError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from relaykit.sessions import Session, SessionEvent
from tests.sessions.support import is_service

APP, USER = "shop", "u1"


def said(text: str, author: str = "user", **fields: Any) -> SessionEvent:
    """An event carrying a message with ``text``."""
    message = Message.user(text) if author == "user" else Message.assistant(text)
    return SessionEvent(author=author, message=message, **fields)


def texts(events: list[SessionEvent]) -> list[str]:
    return [e.message.content if e.message is not None else f"<{e.id}>" for e in events]


def summary(start: str, end: str, text: str = "summary") -> SessionEvent:
    return SessionEvent(
        author="compactor",
        message=Message.assistant(text),
        action=AgentAction(custom={"compaction": {"start": start, "end": end}}),
    )


async def test_every_service_implements_the_protocol(service: Any) -> None:
    assert is_service(service)


# -- sessions --------------------------------------------------------------------------------------
async def test_create_session_returns_an_empty_session_with_its_state_by_scope(
    service: Any,
) -> None:
    created = await service.create_session(
        APP,
        USER,
        "s1",
        {"app:theme": "dark", "user:name": "Ada", "cart": [1, 2], "temp:draft": "x"},
    )

    assert (created.app_name, created.user_id, created.id) == (APP, USER, "s1")
    assert created.state == {"app:theme": "dark", "user:name": "Ada", "cart": [1, 2]}
    assert created.events == []
    assert created.last_update_time > 0
    again = await service.get_session(APP, USER, "s1")
    assert again == created


async def test_create_session_without_an_id_generates_a_uuid4_hex(service: Any) -> None:
    first = await service.create_session(APP, USER)
    second = await service.create_session(APP, USER)

    assert re.fullmatch(r"[0-9a-f]{32}", first.id) and first.id[12] == "4"
    assert first.id != second.id
    assert await service.get_session(APP, USER, first.id) is not None


async def test_creating_a_session_whose_id_exists_raises_session_exists_error(service: Any) -> None:
    await service.create_session(APP, USER, "s1", {"k": "first"})
    with pytest.raises(SessionExistsError, match="'s1'"):
        await service.create_session(APP, USER, "s1", {"k": "second"})

    kept = await service.get_session(APP, USER, "s1")
    assert kept is not None and kept.state == {"k": "first"}


async def test_the_same_session_id_under_another_user_or_app_is_another_session(
    service: Any,
) -> None:
    await service.create_session(APP, USER, "s1", {"k": 1})
    await service.create_session(APP, "u2", "s1", {"k": 2})
    await service.create_session("other-app", USER, "s1", {"k": 3})

    states = [
        (await service.get_session(app, user, "s1")).state["k"]
        for app, user in ((APP, USER), (APP, "u2"), ("other-app", USER))
    ]
    assert states == [1, 2, 3]


async def test_concurrent_creates_of_one_id_have_exactly_one_winner(service: Any) -> None:
    results = await asyncio.gather(
        *(service.create_session(APP, USER, "s1", {"n": n}) for n in range(10)),
        return_exceptions=True,
    )

    winners = [r for r in results if isinstance(r, Session)]
    assert len(winners) == 1
    assert all(isinstance(r, SessionExistsError) for r in results if r not in winners)
    stored = await service.get_session(APP, USER, "s1")
    assert stored is not None and stored.state == winners[0].state


async def test_get_session_of_a_missing_session_is_none(service: Any) -> None:
    assert await service.get_session(APP, USER, "nope") is None


async def test_get_session_returns_every_event_in_order_with_the_merged_state(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1")
    appended = [
        await service.append_event(session, said(f"m{n}", state_delta={"n": n})) for n in range(5)
    ]

    stored = await service.get_session(APP, USER, "s1")
    assert stored.events == appended
    assert texts(stored.events) == ["m0", "m1", "m2", "m3", "m4"]
    assert stored.state == {"n": 4}
    assert stored.last_update_time == session.last_update_time


async def test_list_sessions_returns_the_users_sessions_oldest_first_without_events(
    service: Any,
) -> None:
    s1 = await service.create_session(APP, USER, "s1", {"k": 1, "user:name": "Ada"})
    await service.create_session(APP, USER, "s2", {"k": 2, "app:v": 9})
    await service.create_session(APP, "u2", "s3")
    await service.create_session("other-app", USER, "s4")
    await service.append_event(s1, said("hello"))

    listed = await service.list_sessions(APP, USER)

    assert [s.id for s in listed] == ["s1", "s2"]
    assert [s.events for s in listed] == [[], []]
    assert [s.state for s in listed] == [
        {"app:v": 9, "user:name": "Ada", "k": 1},
        {"app:v": 9, "user:name": "Ada", "k": 2},
    ]
    assert listed[0].last_update_time == s1.last_update_time
    assert await service.list_sessions(APP, "nobody") == []


async def test_delete_session_removes_its_events_own_state_and_pause_but_not_shared_state(
    service: Any,
) -> None:
    session = await service.create_session(APP, USER, "s1", {"own": 1, "user:u": 2, "app:a": 3})
    await service.append_event(session, said("hi", state_delta={"own": 4}))
    await service.set_checkpoint(APP, USER, "s1", b"pause")
    await service.create_session(APP, USER, "s2")

    await service.delete_session(APP, USER, "s1")

    assert await service.get_session(APP, USER, "s1") is None
    assert await service.get_checkpoint(APP, USER, "s1") is None
    assert [s.id for s in await service.list_sessions(APP, USER)] == ["s2"]
    other = await service.get_session(APP, USER, "s2")
    assert other.state == {"app:a": 3, "user:u": 2}
    again = await service.create_session(APP, USER, "s1")  # a new session: nothing comes back
    assert (again.events, again.state) == ([], {"app:a": 3, "user:u": 2})
    assert await service.load_history(APP, USER, "s1") == []
    assert await service.get_checkpoint(APP, USER, "s1") is None


async def test_deleting_a_missing_session_is_not_an_error(service: Any) -> None:
    await service.delete_session(APP, USER, "never-created")
    assert await service.get_session(APP, USER, "never-created") is None


# -- events ----------------------------------------------------------------------------------------
async def test_append_event_to_a_missing_or_deleted_session_raises_session_not_found(
    service: Any,
) -> None:
    ghost = Session(APP, USER, "ghost")
    with pytest.raises(SessionNotFoundError, match="'ghost'"):
        await service.append_event(ghost, said("hi"))
    assert ghost.events == []

    session = await service.create_session(APP, USER, "s1")
    await service.delete_session(APP, USER, "s1")
    with pytest.raises(SessionNotFoundError, match="'s1'"):
        await service.append_event(session, said("hi", state_delta={"user:k": 1}))
    recreated = await service.create_session(APP, USER, "s1")
    assert recreated.state == {}  # the refused append wrote no state either


async def test_append_event_returns_a_stored_copy_and_never_changes_the_callers_event(
    service: Any,
) -> None:
    session = await service.create_session(APP, USER, "s1")
    event = said("hi", state_delta={"k": 1, "temp:t": 2})
    before = dataclasses.replace(event, state_delta=dict(event.state_delta))

    stored = await service.append_event(session, event)

    assert event == before and event.state_delta == {"k": 1, "temp:t": 2}
    assert (event.id, event.timestamp) == ("", 0.0)
    assert stored is not event
    assert re.fullmatch(r"[0-9a-f]{32}", stored.id)
    assert stored.timestamp == session.last_update_time > 0
    assert stored.state_delta == {"k": 1}
    assert (stored.author, stored.message) == ("user", event.message)


async def test_the_returned_copy_and_the_session_share_no_object_with_the_callers_event(
    service: Any,
) -> None:
    session = await service.create_session(APP, USER, "s1")
    event = said("hi", state_delta={"items": [1, 2]})

    stored = await service.append_event(session, event)
    event.message.content = "changed afterwards"
    event.state_delta["items"].append(3)

    assert stored.message is not event.message and stored.message.content == "hi"
    assert session.state == {"items": [1, 2]} and stored.state_delta == {"items": [1, 2]}
    loaded = await service.get_session(APP, USER, "s1")
    assert loaded.events == [stored] and loaded.state == {"items": [1, 2]}


async def test_an_event_or_value_that_would_not_load_back_is_refused_before_it_is_stored(
    service: Any,
) -> None:
    session = await service.create_session(APP, USER, "s1")
    # run_path is a tuple of names: a list would be saved but could never be loaded again.
    with pytest.raises(SerializationError, match="run_path"):
        await service.append_event(session, said("x", run_path=["root", "a"]))
    with pytest.raises(SerializationError, match="cannot store state key 'k'"):
        await service.append_event(session, said("x", state_delta={"k": Message("user", 5)}))

    assert (await service.get_session(APP, USER, "s1")).events == []
    assert session.events == []


async def test_append_event_keeps_a_given_id_and_timestamp(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1")

    stored = await service.append_event(session, said("hi", id="evt-1", timestamp=12.5))

    assert (stored.id, stored.timestamp) == ("evt-1", 12.5)
    loaded = await service.get_session(APP, USER, "s1")
    assert [(e.id, e.timestamp) for e in loaded.events] == [("evt-1", 12.5)]


async def test_append_event_updates_the_session_object_it_is_given(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1", {"user:name": "Ada"})
    created_at = session.last_update_time

    stored = await service.append_event(
        session, said("hi", state_delta={"app:a": 1, "user:name": "Bob", "k": 2, "temp:t": 3})
    )

    assert session.events == [stored]
    assert session.state == {"app:a": 1, "user:name": "Bob", "k": 2}
    assert session.last_update_time >= created_at
    assert (await service.get_session(APP, USER, "s1")).state == session.state


async def test_every_field_of_an_event_comes_back_as_stored(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1")
    event = SessionEvent(
        id="e1",
        invocation_id="inv-1",
        author="planner",
        timestamp=3.0,
        message=Message.assistant("plan", []),
        run_path=("root", "planner"),
        action=AgentAction(exit=True, custom={"step": [1, 2]}),
        error="ToolError: no",
        state_delta={"plan": {"steps": ("a", "b")}},
    )

    await service.append_event(session, event)

    assert (await service.get_session(APP, USER, "s1")).events == [event]


# -- state by scope --------------------------------------------------------------------------------
async def test_state_is_scoped_across_sessions_of_one_user_and_users_of_one_app(
    service: Any,
) -> None:
    a1 = await service.create_session(APP, "alice", "a1")
    a2 = await service.create_session(APP, "alice", "a2")
    b1 = await service.create_session(APP, "bob", "b1")
    other = await service.create_session("other-app", "alice", "o1")

    await service.append_event(
        a1, said("x", state_delta={"app:motd": "hello", "user:lang": "fr", "topic": "refund"})
    )
    await service.append_event(b1, said("y", state_delta={"user:lang": "de", "topic": "hats"}))

    states = {
        s.id: (await service.get_session(s.app_name, s.user_id, s.id)).state
        for s in (a1, a2, b1, other)
    }
    assert states == {
        "a1": {"app:motd": "hello", "user:lang": "fr", "topic": "refund"},
        "a2": {"app:motd": "hello", "user:lang": "fr"},
        "b1": {"app:motd": "hello", "user:lang": "de", "topic": "hats"},
        "o1": {},
    }


async def test_temp_keys_are_never_stored(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1", {"temp:scratch0": 1})
    stored = await service.append_event(session, said("x", state_delta={"temp:scratch": 2, "k": 3}))

    loaded = await service.get_session(APP, USER, "s1")
    assert loaded.state == {"k": 3}
    assert stored.state_delta == {"k": 3}
    assert [e.state_delta for e in loaded.events] == [{"k": 3}]
    assert "temp:scratch" not in session.state


async def test_replaying_the_stored_deltas_in_order_gives_the_stored_state(service: Any) -> None:
    initial = {"count": 0, "user:visits": 1}
    session = await service.create_session(APP, USER, "s1", initial)
    deltas = [
        {"count": 1},
        {"user:visits": 2, "temp:x": 0},
        {"count": 2, "app:v": "1"},
        {},
        {"count": None, "list": [1, {"a": (1, 2)}]},
        {"app:v": "2"},
    ]
    for delta in deltas:
        await service.append_event(session, said("turn", state_delta=delta))

    loaded = await service.get_session(APP, USER, "s1")
    replayed = dict(initial)
    for event in loaded.events:
        replayed.update(event.state_delta)
    assert replayed == loaded.state
    assert loaded.state == {
        "app:v": "2",
        "user:visits": 2,
        "count": None,
        "list": [1, {"a": (1, 2)}],
    }


async def test_concurrent_appends_to_different_sessions_writing_the_same_user_key_all_succeed(
    service: Any,
) -> None:
    sessions = [await service.create_session(APP, USER, f"s{n}") for n in range(8)]

    results = await asyncio.gather(
        *(
            service.append_event(
                sessions[n % 8],
                said(
                    f"m{n}",
                    state_delta={"user:last": n, f"user:from_{n % 8}": n, "app:hits": n, "own": n},
                ),
            )
            for n in range(80)
        ),
        return_exceptions=True,
    )

    assert [r for r in results if not isinstance(r, SessionEvent)] == []
    for n, session in enumerate(sessions):
        loaded = await service.get_session(APP, USER, session.id)
        assert len(loaded.events) == 10
        # Nobody lost another's keys; each key holds the value of the last event that wrote it.
        last = loaded.events[-1].state_delta
        assert loaded.state[f"user:from_{n}"] == loaded.state["own"] == last["own"]
        assert last["own"] % 8 == n
        assert {f"user:from_{k}" for k in range(8)} <= set(loaded.state)
        assert loaded.state["user:last"] in range(80) and loaded.state["app:hits"] in range(80)


# -- histories -------------------------------------------------------------------------------------
async def test_load_history_without_a_summary_returns_every_event(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1")
    for n in range(4):
        await service.append_event(session, said(f"m{n}"))

    assert texts(await service.load_history(APP, USER, "s1")) == ["m0", "m1", "m2", "m3"]


async def test_load_history_returns_the_latest_summary_then_the_events_after_its_end(
    service: Any,
) -> None:
    session = await service.create_session(APP, USER, "s1")
    ids = [(await service.append_event(session, said(f"m{n}"))).id for n in range(6)]
    await service.append_event(session, summary(ids[0], ids[2], "sum 0-2"))
    await service.append_event(session, said("m6"))

    assert texts(await service.load_history(APP, USER, "s1")) == ["sum 0-2", "m3", "m4", "m5", "m6"]

    await service.append_event(session, summary(ids[0], ids[4], "sum 0-4"))
    await service.append_event(session, said("m7"))

    # The newest summary counts; what it covers is gone, the older summary comes after m4.
    assert texts(await service.load_history(APP, USER, "s1")) == [
        "sum 0-4",
        "m5",
        "sum 0-2",
        "m6",
        "m7",
    ]
    assert len((await service.get_session(APP, USER, "s1")).events) == 10


async def test_a_summary_covering_up_to_the_last_event_leaves_only_itself(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1")
    ids = [(await service.append_event(session, said(f"m{n}"))).id for n in range(3)]
    stored = await service.append_event(session, summary(ids[0], ids[2]))

    assert await service.load_history(APP, USER, "s1") == [stored]


async def test_a_summary_whose_end_is_not_in_the_session_is_refused_and_nothing_is_stored(
    service: Any,
) -> None:
    session = await service.create_session(APP, USER, "s1")
    first = await service.append_event(session, said("m0"))

    with pytest.raises(SessionStoreError, match="'missing'"):
        await service.append_event(session, summary(first.id, "missing"))

    assert texts((await service.get_session(APP, USER, "s1")).events) == ["m0"]
    assert texts(await service.load_history(APP, USER, "s1")) == ["m0"]


async def test_an_action_that_only_looks_like_a_summary_is_an_ordinary_event(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1")
    first = await service.append_event(session, said("m0"))
    odd = SessionEvent(
        author="a",
        action=AgentAction(custom={"compaction": {"start": first.id, "end": first.id}, "other": 1}),
    )
    await service.append_event(session, odd)

    assert len(await service.load_history(APP, USER, "s1")) == 2


async def test_load_history_of_a_missing_session_raises_session_not_found(service: Any) -> None:
    with pytest.raises(SessionNotFoundError, match="'nope'"):
        await service.load_history(APP, USER, "nope")


# -- pauses ----------------------------------------------------------------------------------------
async def test_a_sessions_pause_is_set_replaced_and_deleted(service: Any) -> None:
    await service.create_session(APP, USER, "s1")
    await service.create_session(APP, USER, "s2")
    assert await service.get_checkpoint(APP, USER, "s1") is None

    await service.set_checkpoint(APP, USER, "s1", b"first")
    await service.set_checkpoint(APP, USER, "s1", bytearray(b"second"))
    assert await service.get_checkpoint(APP, USER, "s1") == b"second"
    assert await service.get_checkpoint(APP, USER, "s2") is None

    await service.set_checkpoint(APP, USER, "s1", None)
    assert await service.get_checkpoint(APP, USER, "s1") is None
    await service.set_checkpoint(APP, USER, "s1", None)  # deleting nothing is fine


async def test_a_pause_for_a_missing_session_is_refused_and_deleting_it_is_a_no_op(
    service: Any,
) -> None:
    with pytest.raises(SessionNotFoundError, match="'nope'"):
        await service.set_checkpoint(APP, USER, "nope", b"pause")
    await service.set_checkpoint(APP, USER, "nope", None)
    assert await service.get_checkpoint(APP, USER, "nope") is None


async def test_a_pause_that_is_not_bytes_is_refused(service: Any) -> None:
    await service.create_session(APP, USER, "s1")
    with pytest.raises(TypeError, match="bytes"):
        await service.set_checkpoint(APP, USER, "s1", "text")


# -- validation ------------------------------------------------------------------------------------
BAD_NAMES = [
    pytest.param("", id="empty"),
    pytest.param("x" * 256, id="too-long"),
    pytest.param("a\x00b", id="nul"),
    pytest.param("\ud800", id="surrogate"),
    pytest.param(42, id="int"),
    pytest.param(None, id="none"),
]


def calls(app: Any, user: Any, sid: Any) -> list[tuple[str, Any]]:
    """Every operation that takes a session's names."""
    return [
        ("create_session", lambda s: s.create_session(app, user, sid)),
        ("get_session", lambda s: s.get_session(app, user, sid)),
        ("delete_session", lambda s: s.delete_session(app, user, sid)),
        ("load_history", lambda s: s.load_history(app, user, sid)),
        ("append_event", lambda s: s.append_event(Session(app, user, sid), said("x"))),
        ("set_checkpoint", lambda s: s.set_checkpoint(app, user, sid, b"x")),
        ("get_checkpoint", lambda s: s.get_checkpoint(app, user, sid)),
    ]


@pytest.mark.parametrize("bad", BAD_NAMES)
@pytest.mark.parametrize("argument", ["app_name", "user_id", "session_id"])
async def test_an_invalid_name_is_refused_naming_the_argument(
    service: Any, argument: str, bad: Any
) -> None:
    names = {"app_name": APP, "user_id": USER, "session_id": "s1", argument: bad}
    operations = calls(names["app_name"], names["user_id"], names["session_id"])
    if argument != "session_id":
        operations.append(
            ("list_sessions", lambda s: s.list_sessions(names["app_name"], names["user_id"]))
        )
    for name, operation in operations:
        if name == "create_session" and bad is None:
            continue  # create_session(session_id=None) generates an id
        with pytest.raises(SessionStoreError, match=f"^{argument} must") as caught:
            await operation(service)
        if isinstance(bad, str) and bad:
            assert bad not in str(caught.value)
    with pytest.raises(SessionStoreError, match=f"^{argument} must"):
        service.lock(names["app_name"], names["user_id"], names["session_id"], timeout=1)
    assert await service.list_sessions(APP, USER) == []


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        pytest.param("", "1 to 255", id="empty"),
        pytest.param("user:", "1 to 255", id="prefix-only"),
        pytest.param("k" * 256, "1 to 255", id="too-long"),
        pytest.param("a\x00", "NUL", id="nul"),
        pytest.param("temp:\ud800", "UTF-8", id="surrogate"),
        pytest.param(7, "str", id="int"),
    ],
)
async def test_a_bad_state_key_is_refused_and_nothing_is_stored(
    service: Any, key: Any, problem: str
) -> None:
    with pytest.raises(SessionStoreError, match=problem):
        await service.create_session(APP, USER, "s1", {key: 1})
    session = await service.create_session(APP, USER, "s1")
    with pytest.raises(SessionStoreError, match=problem):
        await service.append_event(session, said("x", state_delta={"good": 1, key: 1}))

    stored = await service.get_session(APP, USER, "s1")
    assert (stored.events, stored.state, session.events) == ([], {}, [])


async def test_values_the_codec_cannot_save_are_refused_before_anything_is_stored(
    service: Any,
) -> None:
    session = await service.create_session(APP, USER, "s1")

    with pytest.raises(SerializationError):
        await service.append_event(session, said("x", state_delta={"user:k": object()}))
    with pytest.raises(SerializationError):
        await service.append_event(session, said("x", timestamp=float("nan")))
    with pytest.raises(SerializationError):
        await service.create_session(APP, USER, "s2", {"k": object()})

    assert (await service.get_session(APP, USER, "s1")).events == []
    assert await service.get_session(APP, USER, "s2") is None


async def test_append_event_checks_its_arguments(service: Any) -> None:
    session = await service.create_session(APP, USER, "s1")
    with pytest.raises(TypeError, match="SessionEvent"):
        await service.append_event(session, Message.user("hi"))
    with pytest.raises(TypeError, match="Session"):
        await service.append_event(("shop", "u1", "s1"), said("hi"))
    with pytest.raises(SessionStoreError, match="event id"):
        await service.append_event(session, said("hi", id="e\x00"))
    assert (await service.get_session(APP, USER, "s1")).events == []


# -- the turn lock within one process --------------------------------------------------------------
async def test_a_second_task_waits_then_gets_session_busy_and_takes_the_lock_once_released(
    service: Any,
) -> None:
    held, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with service.lock(APP, USER, "s1", timeout=5):
            held.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await held.wait()
    with pytest.raises(SessionBusyError, match="'s1'"):
        async with service.lock(APP, USER, "s1", timeout=0.2):
            pytest.fail("the lock is held by the other task")
    # A waiter that is still waiting when the holder lets go gets the lock.
    waiter = asyncio.create_task(_hold_once(service, "s1", timeout=10))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    release.set()
    await task
    assert await waiter == "held"
    async with service.lock(APP, USER, "s1", timeout=0):
        pass


async def _hold_once(service: Any, session_id: str, timeout: float) -> str:
    async with service.lock(APP, USER, session_id, timeout=timeout):
        return "held"


async def test_the_lock_is_per_session_and_needs_no_session(service: Any) -> None:
    async with service.lock(APP, USER, "s1", timeout=1):
        assert await _hold_once(service, "s2", timeout=0) == "held"
        assert await _hold_once(service, "s3", timeout=0) == "held"
    assert await service.get_session(APP, USER, "s1") is None


async def test_the_lock_is_released_when_the_block_raises(service: Any) -> None:
    with pytest.raises(RuntimeError):
        async with service.lock(APP, USER, "s1", timeout=1):
            raise RuntimeError("the turn failed")
    assert await _hold_once(service, "s1", timeout=0) == "held"


async def test_a_cancelled_waiter_leaves_the_lock_usable(service: Any) -> None:
    async with service.lock(APP, USER, "s1", timeout=1):
        waiter = asyncio.create_task(_hold_once(service, "s1", timeout=30))
        await asyncio.sleep(0.05)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
    assert await _hold_once(service, "s1", timeout=0) == "held"


@pytest.mark.parametrize(
    ("timeout", "error"),
    [(-1, ValueError), (float("nan"), ValueError), ("1", TypeError), (True, TypeError)],
)
async def test_a_bad_lock_timeout_is_refused(
    service: Any, timeout: Any, error: type[Exception]
) -> None:
    with pytest.raises(error, match="timeout"):
        service.lock(APP, USER, "s1", timeout=timeout)


async def test_200_concurrent_appends_by_tasks_taking_the_lock_in_turn_are_all_stored_in_order(
    service: Any,
) -> None:
    await service.create_session(APP, USER, "s1")
    order: list[int] = []

    async def turn(n: int) -> None:
        async with service.lock(APP, USER, "s1", timeout=60):
            # Each turn reads the session, then appends: the lock makes it a consistent turn.
            session = await service.get_session(APP, USER, "s1")
            count = session.state.get("count", 0)
            order.append(n)
            await service.append_event(session, said(f"m{n}", state_delta={"count": count + 1}))

    await asyncio.gather(*(turn(n) for n in range(200)))

    stored = await service.get_session(APP, USER, "s1")
    assert texts(stored.events) == [f"m{n}" for n in order]
    assert sorted(order) == list(range(200))
    assert stored.state["count"] == 200
    assert len({e.id for e in stored.events}) == 200
