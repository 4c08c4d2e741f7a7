"""One turn run by the HTTP API: a background task feeding a queue the response reads.

The task owns the turn: a client that goes away stops reading the queue, never the turn, which
runs to its end and is stored (docs/http-server.md#disconnects). The events it publishes are the
session's *stored* events (read back after each event the Runner delivers, so their ids are the
ids ``/events?after=`` takes), plus the chunks of a message while it streams and the few
events the Runner delivers without storing them (an agent tool's inner events, an error that
could not be stored). A streamed message that breaks (a model call retried part-way, a failed
stream) is followed by a ``discard`` of its chunks.

Nothing a turn raises escapes its task: an exception, a ``SystemExit`` or a
``KeyboardInterrupt`` a tool raised ends the turn with an error event (the server stays up);
cancellation (a shutdown past its grace period) ends it with one too, then propagates.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Literal

from relaykit._aio import closing
from relaykit.errors import SessionStoreError, WillRetryError
from relaykit.events import AgentEvent
from relaykit.messages import Message
from relaykit.resume import InterruptInfo
from relaykit.server._models import ChunkOut, DiscardOut, EventOut, InterruptOut, RunResultOut
from relaykit.sessions.base import (
    HistoryMark,
    SessionEvent,
    SessionService,
    TurnView,
    validate_session_name,
)

__all__ = ["Head", "Heads", "Item", "Turn"]

#: How often an idle event stream sends an SSE comment, so proxies keep the connection.
KEEPALIVE_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Item:
    """One thing the turn published: an event, a chunk, a discard of chunks, the end, or a
    failure before the first event (then the response is an HTTP error)."""

    kind: Literal["agent_event", "chunk", "discard", "done", "failed"]
    event: EventOut | None = None
    chunk: ChunkOut | None = None
    discard: DiscardOut | None = None
    result: RunResultOut | None = None
    error: BaseException | None = None

    def sse(self) -> str:
        """The item as one server-sent event."""
        body = self.event or self.chunk or self.discard or self.result
        assert body is not None
        return f"event: {self.kind}\ndata: {body.model_dump_json()}\n\n"


@dataclass(frozen=True, slots=True)
class Head:
    """Where a session's stored events ended when it was last read."""

    #: The mark of that read, for a service that can read on from it (``read_turn``).
    mark: HistoryMark | None
    #: The id of the session's last event then (None: it had none).
    last_id: str | None


class Heads:
    """The heads of the sessions this server ran turns of, the most recent ``size`` of them.

    Checking that a session exists before a turn, and reading what the turn stored, then cost
    the events stored since (``read_turn`` from the remembered mark), not the whole session:
    a turn of a long session costs what a turn of a short one does.

    Args:
        service: the Runner's session service.
        app_name: the Runner's app.
        size: how many sessions are remembered.
    """

    def __init__(self, service: SessionService, app_name: str, size: int = 4096) -> None:
        self._service = service
        self._app = app_name
        self._size = size
        self._marks: OrderedDict[tuple[str, str], HistoryMark] = OrderedDict()

    async def read(self, user_id: str, session_id: str) -> Head | None:
        """The session's head now, or None when it does not exist (or the id is invalid)."""
        try:
            validate_session_name(session_id, "session_id")
        except SessionStoreError:
            return None
        read_turn = getattr(self._service, "read_turn", None)
        if read_turn is None:  # a service without it: read the whole session
            session = await self._service.get_session(self._app, user_id, session_id)
            if session is None:
                return None
            return Head(None, session.events[-1].id if session.events else None)
        key = (user_id, session_id)
        view: TurnView | None = await read_turn(
            self._app, user_id, session_id, after=self._marks.get(key)
        )
        if view is None:
            self._marks.pop(key, None)
            return None
        self.remember(user_id, session_id, view.mark)
        return Head(view.mark, view.mark.last_id)

    def remember(self, user_id: str, session_id: str, mark: HistoryMark | None) -> None:
        """Keep ``mark`` as where the session's stored events end."""
        if mark is None:
            return
        key = (user_id, session_id)
        self._marks[key] = mark
        self._marks.move_to_end(key)
        while len(self._marks) > self._size:
            self._marks.popitem(last=False)


class Turn:
    """Runs ``events`` (a Runner turn, not yet iterated) in a task; ``first`` and ``batches``
    give what it publishes.

    Args:
        events: the turn's event stream (``runner.run(...)`` or ``runner.resume(...)``).
        service: the Runner's session service, to read the stored events back.
        app_name: the Runner's app.
        user_id: the caller.
        session_id: the session.
        head: where the session's events ended before the turn (read by the caller).
        heads: told where they end after it.
        root_name: the root agent's name, the author of an error the turn raised.
        tasks: where the running task is kept until it ends (not garbage-collected, and
            awaitable at shutdown).
    """

    def __init__(
        self,
        events: AsyncIterator[AgentEvent],
        *,
        service: SessionService,
        app_name: str,
        user_id: str,
        session_id: str,
        head: Head,
        heads: Heads,
        root_name: str,
        tasks: set[asyncio.Task[None]],
    ) -> None:
        self._events = events
        self._service = service
        self._ref = (app_name, user_id, session_id)
        # Where the last read of the session ended: with a service that can read only what was
        # stored since (``read_turn``), each look costs the new events, not the session.
        self._mark = head.mark
        self._last_id = head.last_id
        self._published: set[str] = set()
        self._heads = heads
        self._root = root_name
        self._queue: asyncio.Queue[Item] = asyncio.Queue()
        self._invocation_id = ""
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(self._run())
        tasks.add(self.task)
        discard: Callable[[asyncio.Task[None]], None] = tasks.discard
        self.task.add_done_callback(discard)

    async def first(self) -> Item:
        """The first item: ``failed`` when the turn could not start."""
        return await self._queue.get()

    async def batches(self, *, keepalive: float | None = None) -> AsyncIterator[list[Item]]:
        """The items after the first, up to ``done``: each time, all those published since
        (a response writes them at once); an empty list every ``keepalive`` idle seconds."""
        while True:
            try:
                if keepalive is None:
                    item = await self._queue.get()
                else:
                    item = await asyncio.wait_for(self._queue.get(), keepalive)
            except TimeoutError:
                yield []
                continue
            batch = [item]
            while item.kind not in ("done", "failed") and not self._queue.empty():
                item = self._queue.get_nowait()
                batch.append(item)
            yield batch
            if item.kind in ("done", "failed"):
                return

    def _put(self, item: Item) -> None:
        self._queue.put_nowait(item)

    async def _publish_stored(self) -> list[EventOut]:
        """Publish the events stored since the last look; return them."""
        new: list[SessionEvent] | None = None
        read_turn = getattr(self._service, "read_turn", None)
        if read_turn is not None:
            view: TurnView | None = await read_turn(*self._ref, after=self._mark)
            if view is None:  # deleted while the turn ran
                return []
            self._mark = view.mark
            if view.delta:
                new = view.events
        if new is None:  # no mark that leads on (a compaction summary, a write from elsewhere)
            session = await self._service.get_session(*self._ref)
            if session is None:
                return []
            new = session.events
            ids = [event.id for event in new]
            if self._last_id in ids:
                new = new[ids.index(self._last_id) + 1 :]
        new = [event for event in new if event.id not in self._published]
        if new:
            self._last_id = new[-1].id
            self._published.update(event.id for event in new)
        out = [EventOut.of_stored(event) for event in new]
        for event in out:
            if event.author != "user" or not self._invocation_id:
                self._invocation_id = event.invocation_id
            self._put(Item("agent_event", event=event))
        return out

    async def _run(self) -> None:
        try:
            await self._turn()
        finally:  # the next turn of the session reads on from here
            self._heads.remember(self._ref[1], self._ref[2], self._mark)

    async def _turn(self) -> None:
        started = False
        output: str | None = None
        interrupt: InterruptInfo | None = None
        try:
            async with closing(self._events) as events:
                async for ev in events:
                    started = True
                    await self._publish_stored()
                    out = ev.output
                    message: Message | None = None
                    if out is not None and out.stream is not None:
                        message = await self._stream(ev)
                    elif out is not None:
                        message = out.message
                    stored = ev.stored_id is not None
                    streamed = out is not None and out.stream is not None
                    if ev.internal or (not streamed and not stored):
                        self._put(
                            Item(
                                "agent_event",
                                event=EventOut.of_delivered(
                                    ev, self._invocation_id, time.time(), message
                                ),
                            )
                        )
                    if message is not None and not ev.internal:
                        output = message.content
                    action = ev.action
                    if (
                        action is not None
                        and action.interrupted is not None
                        and action.interrupted.contexts
                        and not ev.internal
                    ):
                        interrupt = action.interrupted
            await self._publish_stored()
        except (Exception, SystemExit, KeyboardInterrupt) as exc:
            # SystemExit and KeyboardInterrupt too: a tool's sys.exit() must not stop the
            # server (re-raised in this task, they would stop its event loop).
            if not started:
                self._put(Item("failed", error=exc))
                return
            self._fail(exc)
        except asyncio.CancelledError as exc:  # the server shuts down: say so, then stop
            if not started:
                self._put(Item("failed", error=exc))
            else:
                self._fail(asyncio.CancelledError("the server shut down before the turn ended"))
                self._done(output, None)
            raise
        if not started:  # a turn that delivered nothing (possible with plugins)
            await self._publish_stored()
        self._done(output, interrupt)

    def _fail(self, exc: BaseException) -> None:
        """Publish the error the turn ended with, as an event of the root agent (not stored:
        the Runner stores the errors it catches itself)."""
        failure = AgentEvent(self._root, (), error=exc)
        self._put(
            Item(
                "agent_event",
                event=EventOut.of_delivered(failure, self._invocation_id, time.time(), None),
            )
        )

    def _done(self, output: str | None, interrupt: InterruptInfo | None) -> None:
        self._put(
            Item(
                "done",
                result=RunResultOut(
                    output=output,
                    interrupt=InterruptOut.of(interrupt) if interrupt is not None else None,
                    session_id=self._ref[2],
                ),
            )
        )

    async def _stream(self, ev: AgentEvent) -> Message | None:
        """Publish a streamed message's chunks; the whole message (None if it broke)."""
        assert ev.output is not None and ev.output.stream is not None
        stream = ev.output.stream
        event_id = uuid.uuid4().hex
        sent = False
        try:
            async for chunk in stream:
                if chunk.content:
                    delta = ChunkOut(
                        event_id=event_id, agent_name=ev.agent_name, delta=chunk.content
                    )
                    self._put(Item("chunk", chunk=delta))
                    sent = True
            return await stream.collect()
        except Exception as exc:
            # Never stored: a retried reply streams anew; the agent's own error event reports
            # a broken stream. Either way the client drops the chunks it has shown.
            if sent:
                reason: Literal["retry", "error"] = (
                    "retry" if isinstance(exc, WillRetryError) else "error"
                )
                self._put(Item("discard", discard=DiscardOut(event_id=event_id, reason=reason)))
            return None
