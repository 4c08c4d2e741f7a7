"""A session's pause stays right whatever happens around it, on every session service:

- a crash, or a failed write, at each of the two writes that save a pause (the pause, then its
  interrupt event): the next resume or text turn gives the model a valid, truthful history;
- a pause that cannot be read (a corrupt row, a wrong signature): resuming it raises
  ``SerializationError``, a new text message abandons it;
- with a signing key, the pause itself is checked, not only the checkpoint inside it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

import relaykit as rk
from relaykit import CancelMode, Message, RunHandle
from relaykit._session_history import ABANDONED_TEXT, STOPPED_TEXT, earlier_attempt
from relaykit.errors import CheckpointNotFoundError, SerializationError
from relaykit.events import AgentAction
from relaykit.resume import InterruptInfo
from relaykit.sessions import DatabaseSessionService, InMemorySessionService, SessionEvent
from tests.cancel.support import Counter, asks, call
from tests.sessions.support import fetch

APP, USER, SID = "desk", "u1", "s1"
KEY = b"0123456789abcdef0123456789abcdef"
CANARY = "CANARY-7f3a"


class Killed(BaseException):
    """The process dies here: a BaseException, so no handler of the Runner runs after it (as
    after a SIGKILL, nothing more is written)."""


class Faults:
    """A session service that, once armed, dies or fails at one write: ``write`` is "pause"
    (``set_checkpoint`` saving a pause), "delete" (``set_checkpoint`` deleting it) or
    "interrupt" (``append_event`` of an interrupt event); ``when`` is "kill-before",
    "kill-after" (the write is done) or "fail" (it raises, nothing written)."""

    armed: tuple[str, str] | None = None

    async def set_checkpoint(self, app: str, user: str, sid: str, data: bytes | None) -> None:
        write: Any = super().set_checkpoint  # (the service class this is mixed into)
        kind = "pause" if data is not None else "delete"
        return await self._write(kind, lambda: write(app, user, sid, data))

    async def append_event(self, session: Any, event: SessionEvent) -> Any:
        write: Any = super().append_event
        if event.action is None or event.action.interrupted is None:
            return await write(session, event)
        return await self._write("interrupt", lambda: write(session, event))

    async def _write(self, write: str, do: Callable[[], Awaitable[Any]]) -> Any:
        if self.armed is None or self.armed[0] != write:
            return await do()
        when = self.armed[1]
        self.armed = None
        if when == "fail":
            raise OSError("disk I/O error")
        if when == "kill-before":
            raise Killed
        await do()
        raise Killed


class FaultyMemory(Faults, InMemorySessionService):
    pass


class FaultyDatabase(Faults, DatabaseSessionService):
    pass


@pytest.fixture
async def faulty(service_kind: tuple[str, str | None]) -> AsyncIterator[Any]:
    """Each kind of service, able to die or fail at a write."""
    _, url = service_kind
    made: Any = FaultyMemory() if url is None else FaultyDatabase(url)
    async with made:
        yield made


#: Each fault: (the write, when).
FAULTS = [
    pytest.param(("pause", "kill-before"), id="killed-before-saving-the-pause"),
    pytest.param(("pause", "fail"), id="saving-the-pause-fails"),
    pytest.param(("pause", "kill-after"), id="killed-after-saving-the-pause"),
    pytest.param(("interrupt", "kill-before"), id="killed-before-storing-the-interrupt"),
    pytest.param(("interrupt", "fail"), id="storing-the-interrupt-fails"),
    pytest.param(("interrupt", "kill-after"), id="killed-after-storing-the-interrupt"),
]


def saves_the_pause(fault: tuple[str, str]) -> bool:
    """Whether the new pause is saved when ``fault`` strikes."""
    return fault not in (("pause", "kill-before"), ("pause", "fail"))


def runner_with(service: Any, work: Counter, *replies: Message, key: bytes | None = None) -> Any:
    """A fresh Runner (a new process: nothing cached) whose model replies ``replies``."""
    model = rk.ScriptedModel(list(replies))
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model, tools=[work.tool]),
        app_name=APP,
        session_service=service,
        checkpoint_signing_key=key,
    )
    return model, runner


async def cancel_at_call(handle: RunHandle, call_id: str) -> None:
    """Drive ``handle``; once the model asked for ``call_id``, cancel after the model (the run
    pauses before the call runs)."""
    async for ev in handle:
        if ev.message is not None and any(c.id == call_id for c in ev.message.tool_calls):
            await handle.cancel(CancelMode.AFTER_MODEL)


def transcript(messages: list[Message]) -> list[str]:
    """A model request's messages, one line each: who spoke, or which calls, or which answer."""
    lines = []
    for m in messages:
        if m.tool_calls:
            lines.append("calls " + ",".join(c.id for c in m.tool_calls))
        elif m.role == "tool":
            lines.append(f"{m.tool_call_id}: {m.content}")
        else:
            lines.append(f"{m.role}: {m.content}")
    return lines


async def next_turn(service: Any, work: Counter, key: bytes | None = None) -> list[str]:
    """A new text turn "next" (a new process); what its model read."""
    model, runner = runner_with(service, work, Message.assistant("ok"), key=key)
    result = await runner.invoke("next", user_id=USER, session_id=SID)
    assert result.output is not None and result.output.content == "ok"
    assert await service.get_checkpoint(APP, USER, SID) is None
    return transcript(model.requests[-1].messages)


async def with_fault(
    service: Any, fault: tuple[str, str], run: Callable[[], Awaitable[None]]
) -> None:
    """Run ``run`` with ``fault`` armed: a kill ends it there."""
    service.armed = fault
    if fault[1] == "fail":
        await run()
    else:
        with pytest.raises(Killed):
            await run()
    assert service.armed is None  # the fault struck


# -- a second pause of one invocation ----------------------------------------------------------
async def paused_twice(service: Any, work: Counter, fault: tuple[str, str]) -> None:
    """Turn 1 pauses before call c1 runs; its continuation runs c1, then pauses again before c2,
    and ``fault`` strikes as that second pause is saved."""
    _, runner = runner_with(service, work, asks(call("c1", "work", "x")))
    await cancel_at_call(runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1")
    assert await service.get_checkpoint(APP, USER, SID) is not None
    _, runner = runner_with(service, work, asks(call("c2", "work", "y")))
    await with_fault(
        service,
        fault,
        lambda: cancel_at_call(runner.resume(user_id=USER, session_id=SID), "c2"),
    )
    assert work.started == ["x"]


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_fault_at_a_second_pause_leaves_a_resume_with_a_true_history(
    faulty: Any, fault: tuple[str, str]
) -> None:
    """Whatever became of the second pause, the resume continues the pause that is saved and
    the next turn's model reads each call once, with the result it really had."""
    work = Counter("work")
    await paused_twice(faulty, work, fault)
    model, runner = runner_with(faulty, work, Message.assistant("finished"))
    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "finished"

    if saves_the_pause(fault):  # the continuation goes on from the second pause: c2 runs
        assert work.started == ["x", "y"]
        ran = ["calls c1", "c1: work did x", "calls c2", "c2: work did y"]
    else:  # from the first one again: c1 runs again, the earlier attempt is left out
        assert work.started == ["x", "x"]
        ran = ["calls c1", "c1: work did x"]
    assert transcript(model.requests[0].messages) == ["user: go", *ran]
    assert await next_turn(faulty, work) == [
        "user: go",
        *ran,
        "assistant: finished",
        "user: next",
    ]


@pytest.mark.parametrize("fault", FAULTS)
async def test_a_fault_at_a_second_pause_leaves_a_text_turn_with_a_true_history(
    faulty: Any, fault: tuple[str, str]
) -> None:
    """A new text message abandons whichever pause is saved: the call that ran keeps its
    result, the one that did not is answered as abandoned."""
    work = Counter("work")
    await paused_twice(faulty, work, fault)
    assert await next_turn(faulty, work) == [
        "user: go",
        "calls c1",
        "c1: work did x",
        "calls c2",
        f"c2: {ABANDONED_TEXT}",
        "user: next",
    ]
    assert work.started == ["x"]


async def _then_next_turn(
    faulty: Any, work: Any, then: str, *, paused: bool, abandoned: str
) -> None:
    """After a fault around the first pause: a resume (``CheckpointNotFoundError`` when no
    pause is stored) or a text turn, then the history the next turn's model reads, with c1
    answered by its result or by ``abandoned``."""
    if then == "resume":
        _, runner = runner_with(faulty, work, Message.assistant("finished"))
        if not paused:
            with pytest.raises(CheckpointNotFoundError):
                await runner.invoke_resume(user_id=USER, session_id=SID)
            return
        await runner.invoke_resume(user_id=USER, session_id=SID)
        answer = ["c1: work did x", "assistant: finished"]
    else:
        answer = [f"c1: {abandoned}"]
    assert await next_turn(faulty, work) == ["user: go", "calls c1", *answer, "user: next"]


@pytest.mark.parametrize("then", ["resume", "text"])
@pytest.mark.parametrize("fault", FAULTS)
async def test_a_fault_at_a_first_pause_leaves_a_true_history(
    faulty: Any, fault: tuple[str, str], then: str
) -> None:
    work = Counter("work")
    _, runner = runner_with(faulty, work, asks(call("c1", "work", "x")))
    await with_fault(
        faulty,
        fault,
        lambda: cancel_at_call(
            runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1"
        ),
    )
    saved = saves_the_pause(fault)
    assert (await faulty.get_checkpoint(APP, USER, SID) is not None) == saved
    await _then_next_turn(
        faulty, work, then, paused=saved, abandoned=ABANDONED_TEXT if saved else STOPPED_TEXT
    )


@pytest.mark.parametrize("then", ["resume", "text"])
@pytest.mark.parametrize("when", ["kill-before", "fail", "kill-after"])
async def test_a_fault_as_a_text_turn_abandons_a_pause_leaves_a_true_history(
    faulty: Any, when: str, then: str
) -> None:
    """The abandon stores the answers, then deletes the pause: if that delete fails or the
    process dies around it, a resume leaves the stored answers out, a new text turn does not
    answer twice."""
    work = Counter("work")
    _, runner = runner_with(faulty, work, asks(call("c1", "work", "x")))
    await cancel_at_call(runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1")
    _, runner = runner_with(faulty, work, Message.assistant("never"))
    await with_fault(
        faulty, ("delete", when), lambda: runner.invoke("first", user_id=USER, session_id=SID)
    )
    deleted = when == "kill-after"
    assert (await faulty.get_checkpoint(APP, USER, SID) is None) == deleted
    await _then_next_turn(faulty, work, then, paused=not deleted, abandoned=ABANDONED_TEXT)


async def test_a_pause_stored_without_its_last_event_is_still_resumed(service: Any) -> None:
    """Pauses stored before relaykit recorded the last event before them still load (the
    invocation's last interrupt event marks the pause then)."""
    work = Counter("work")
    _, runner = runner_with(service, work, asks(call("c1", "work", "x")))
    await cancel_at_call(runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1")
    stored = await service.get_checkpoint(APP, USER, SID)
    doc = json.loads(stored)
    assert isinstance(doc["payload"]["data"].pop("last_event_id"), str)
    await service.set_checkpoint(APP, USER, SID, json.dumps(doc).encode())
    model, runner = runner_with(service, work, Message.assistant("finished"))
    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "finished"
    assert transcript(model.requests[0].messages) == ["user: go", "calls c1", "c1: work did x"]


def _event(event_id: str, author: str, text: str | None, interrupt: bool = False) -> SessionEvent:
    action = AgentAction(interrupted=InterruptInfo(None, [], None)) if interrupt else None
    message = Message.assistant(text) if text is not None else None
    return SessionEvent(
        id=event_id, invocation_id="i1", author=author, message=message, action=action
    )


def test_earlier_attempt_starts_after_the_pauses_last_event() -> None:
    events = [
        _event("u", "user", "go"),
        _event("a1", "helper", ""),
        _event("int1", "helper", None, interrupt=True),
        _event("r1", "helper", "did x"),
        _event("a2", "helper", ""),
        _event("state", "helper", None),
        _event("int2", "helper", "", interrupt=True),
        _event("r2", "helper", "did y"),
    ]
    # Since the pause's last event: neither interrupt events, nor state-only ones.
    assert earlier_attempt(events, "i1", "a1") == ["r1", "a2", "r2"]
    assert earlier_attempt(events, "i1", "a2") == ["r2"]
    # A pause without it (or naming an event not there): after the last interrupt event.
    assert earlier_attempt(events, "i1") == ["r2"]
    assert earlier_attempt(events, "i1", "gone") == ["r2"]
    assert earlier_attempt(events, "other", "a1") == []


# -- a pause that cannot be read ---------------------------------------------------------------
def _outer(change: Callable[[dict[str, Any]], None]) -> Callable[[bytes], bytes]:
    def corrupt(data: bytes) -> bytes:
        doc = json.loads(data)
        change(doc)
        return json.dumps(doc).encode()

    return corrupt


def _set(path: list[str], value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return change


CORRUPTIONS: dict[str, Callable[[bytes], bytes]] = {
    "not-json": lambda data: b"{" + CANARY.encode(),
    "invalid-utf8": lambda data: b"\xff\xfe" + data,
    "wrong-field-type": _outer(_set(["payload", "data", "invocation_id"], 12345)),
    "no-invocation": _outer(_set(["payload", "data", "invocation_id"], "")),
    "unknown-type-tag": _outer(_set(["payload", "__type__"], f"evil.{CANARY}")),
    "deep-nesting": lambda data: b"[" * 200_000 + b"]" * 200_000,
    "not-a-pause": _outer(_set(["payload"], [CANARY])),
}


async def corrupt_pause(service: Any, url: str | None, corrupt: Callable[[bytes], bytes]) -> None:
    """Rewrite the stored pause: by SQL in a database, through the service in memory."""
    stored = await service.get_checkpoint(APP, USER, SID)
    assert stored is not None
    bad = corrupt(stored)
    if url is None:
        await service.set_checkpoint(APP, USER, SID, bad)
        return
    await fetch(url, "UPDATE relaykit_session_checkpoints SET data = :data", data=bad)
    assert await service.get_checkpoint(APP, USER, SID) == bad


async def count_events(service: Any) -> int:
    session = await service.get_session(APP, USER, SID)
    assert session is not None
    return len(session.events)


async def assert_unreadable(
    service: Any, work: Counter, match: str, key: bytes | None = None
) -> None:
    """Resume, a tool response and ``pending_interrupt`` raise ``SerializationError`` naming the
    session, and store nothing."""
    before = await count_events(service)
    _, runner = runner_with(service, work, Message.assistant("never"), key=key)
    with pytest.raises(SerializationError, match=match):
        await runner.pending_interrupt(user_id=USER, session_id=SID)
    with pytest.raises(SerializationError, match=match):
        await runner.invoke_resume(user_id=USER, session_id=SID)
    with pytest.raises(SerializationError, match=match):
        await runner.invoke([Message.tool("yes", tool_call_id="c1")], user_id=USER, session_id=SID)
    assert await count_events(service) == before
    assert await service.get_checkpoint(APP, USER, SID) is not None


@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
async def test_a_corrupt_pause_is_refused_by_a_resume_and_abandoned_by_a_text_turn(
    service_kind: tuple[str, str | None],
    service: Any,
    corruption: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    work = Counter("work")
    _, runner = runner_with(service, work, asks(call("c1", "work", "x")))
    await cancel_at_call(runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1")
    await corrupt_pause(service, service_kind[1], CORRUPTIONS[corruption])
    await assert_unreadable(service, work, "the pause of session 's1'")

    with caplog.at_level(logging.WARNING, logger="relaykit"):
        history = await next_turn(service, work)
    assert history == ["user: go", "calls c1", f"c1: {ABANDONED_TEXT}", "user: next"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "the pause of session 's1'" in warnings[0]
    assert "cannot be read" in warnings[0]
    assert CANARY not in caplog.text  # nothing stored is logged
    assert await next_turn(service, work) == [  # and the session goes on as usual
        "user: go",
        "calls c1",
        f"c1: {ABANDONED_TEXT}",
        "user: next",
        "assistant: ok",
        "user: next",
    ]
    assert work.started == []


# -- signatures --------------------------------------------------------------------------------
async def test_a_tampered_signed_pause_fails_its_signature_check(
    service_kind: tuple[str, str | None], service: Any
) -> None:
    """The pause itself is signed and checked, not only the checkpoint inside it: a pause whose
    invocation id was rewritten is refused, and a new text message abandons it."""
    work = Counter("work")
    _, runner = runner_with(service, work, asks(call("c1", "work", "x")), key=KEY)
    await cancel_at_call(runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1")
    forged = _outer(_set(["payload", "data", "invocation_id"], "forged-invocation"))
    await corrupt_pause(service, service_kind[1], forged)
    await assert_unreadable(service, work, "failed its signature check", key=KEY)
    assert await next_turn(service, work, key=KEY) == [
        "user: go",
        "calls c1",
        f"c1: {ABANDONED_TEXT}",
        "user: next",
    ]
    session = await service.get_session(APP, USER, SID)
    assert session is not None
    assert "forged-invocation" not in {e.invocation_id for e in session.events}


@pytest.mark.parametrize(
    ("written_with", "read_with"),
    [pytest.param(None, KEY, id="unsigned"), pytest.param(b"another key" * 3, KEY, id="other-key")],
)
async def test_a_pause_not_signed_with_the_key_fails_its_signature_check(
    service: Any, written_with: bytes | None, read_with: bytes
) -> None:
    """As for the checkpoint inside it: with a key, an unsigned pause or one signed with
    another key is refused."""
    work = Counter("work")
    _, runner = runner_with(service, work, asks(call("c1", "work", "x")), key=written_with)
    await cancel_at_call(runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1")
    await assert_unreadable(service, work, "failed its signature check", key=read_with)


async def test_a_signed_pause_resumes_with_its_key(service: Any) -> None:
    work = Counter("work")
    _, runner = runner_with(service, work, asks(call("c1", "work", "x")), key=KEY)
    await cancel_at_call(runner.run([Message.user("go")], user_id=USER, session_id=SID), "c1")
    assert "signature" in json.loads(await service.get_checkpoint(APP, USER, SID))
    _, runner = runner_with(service, work, Message.assistant("finished"), key=KEY)
    assert await runner.pending_interrupt(user_id=USER, session_id=SID) is not None
    done = await runner.invoke_resume(user_id=USER, session_id=SID)
    assert done.output is not None and done.output.content == "finished"
    assert work.started == ["x"]
