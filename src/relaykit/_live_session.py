"""``LiveSession``: the caller's handle on a live session (``Runner.run_live``, D27)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any

from relaykit._live_events import describe
from relaykit._live_run import LiveRun
from relaykit._session_state import _check_user_message, _StoreFailed
from relaykit.errors import ConfigurationError, LiveSessionClosedError, ModelError, RunnerError
from relaykit.events import AgentEvent
from relaykit.messages import Blob, Message
from relaykit.models.live import LiveRunConfig
from relaykit.sessions._records import SessionRef

if TYPE_CHECKING:
    from relaykit._session_run import SessionRunner

__all__ = ["LiveSession", "open_live"]


def open_live(
    owner: SessionRunner | None, user_id: object, session_id: object, config: object
) -> LiveSession:
    """The ``LiveSession`` of ``Runner.run_live``, its arguments checked
    (``ConfigurationError``); nothing opens until it is awaited or entered."""
    if owner is None:
        raise ConfigurationError(
            "run_live needs a session service: a live session is stored as it runs "
            "(Runner(agent, session_service=InMemorySessionService()))"
        )
    if user_id is None or session_id is None:
        raise ConfigurationError(
            "run_live needs user_id and session_id: runner.run_live(user_id='u1', session_id='s1')"
        )
    if config is None:
        config = LiveRunConfig()
    if not isinstance(config, LiveRunConfig):
        raise ConfigurationError(
            f"run_live(config=...) takes a relaykit.LiveRunConfig, not {type(config).__name__}"
        )
    try:
        ref = SessionRef.of(owner.app_name, user_id, session_id)
    except Exception as exc:
        raise ConfigurationError(str(exc)) from None
    return LiveSession(LiveRun(owner, ref, config))


class LiveSession:
    """A live session: a realtime connection of the routed agent, stored as it runs.

    Open it by awaiting it (then ``close()`` it) or with ``async with``; either way the
    connection opens during that call, so a failure to connect raises there. ``send`` and
    ``send_realtime`` go to the model while ``events()`` yields what happens; the session is
    one invocation holding the session's turn lock until it ends (docs/live.md).

    >>> import asyncio
    >>> import relaykit as rk
    >>> model = rk.ScriptedLiveModel([[rk.ScriptedLiveModel.WAIT, rk.Message.assistant("Hi!")]])
    >>> runner = rk.Runner(rk.ChatModelAgent("desk", live_model=model),
    ...                    session_service=rk.InMemorySessionService())
    >>> async def main() -> list[str]:
    ...     async with runner.run_live(user_id="u1", session_id="s1") as live:
    ...         await live.send(rk.Message.user("hello"))
    ...         return [ev.message.content async for ev in live.events() if ev.message]
    >>> asyncio.run(main())
    ['Hi!']
    """

    def __init__(self, run: LiveRun) -> None:
        self._run = run
        # Made when the opening starts, set once it is over (opened or failed).
        self._opening: asyncio.Event | None = None
        self._reading = False

    def __repr__(self) -> str:
        opening = self._opening
        if self._run.ended:
            state = "ended"
        elif opening is None:
            state = "not opened"
        else:
            state = "open" if opening.is_set() else "opening"
        return f"LiveSession({self._run.ref}, {state})"

    # -- opening and closing ----------------------------------------------------------------
    async def _open(self) -> LiveSession:
        if self._opening is not None:
            raise ConfigurationError("this live session was already opened")
        self._opening = asyncio.Event()
        try:
            await self._run.open()
        finally:
            self._opening.set()
        return self

    def __await__(self) -> Generator[Any, None, LiveSession]:
        return self._open().__await__()

    async def __aenter__(self) -> LiveSession:
        return await self._open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """End the live session (idempotent): the current agent's held events are stored,
        its pending calls answered, the connection closed and ``after_run`` run by the time
        this returns. Events already buffered can still be read.

        A tool running at that moment is cancelled; closing while the session still opens
        waits for the opening to end. A caller cancelled while it waits for ``close()`` does
        not stop the end."""
        opening = self._opening
        if opening is None:
            self._opening = asyncio.Event()
            self._opening.set()
            self._run.ended = True
            self._run.buffer.end()
            return
        if not opening.is_set():
            await opening.wait()
        await self._run.close()

    # -- state ------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Whether the session has ended (closed, or the model or a failure ended it)."""
        return self._run.ended

    @property
    def invocation_id(self) -> str | None:
        """The invocation id of the stored events (None until opened)."""
        run = self._run.run
        return run.context.invocation_id if run is not None else None

    @property
    def agent_name(self) -> str | None:
        """The agent connected now (after a transfer, the target); None until connected."""
        stream = self._run.stream
        return stream.name if stream is not None else None

    # -- input ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        opening = self._opening
        if opening is None:
            raise ConfigurationError(
                "open the live session first: live = await runner.run_live(...), or "
                "async with runner.run_live(...) as live"
            )
        if self._run.ended or self._run.closing:
            raise LiveSessionClosedError(
                f"the live session of {self._run.ref} has ended: nothing was sent or stored"
            )
        if not opening.is_set():
            raise ConfigurationError(
                "the live session is still opening: send once run_live(...) has returned"
            )

    async def send(self, message: Message) -> None:
        """Send the user's text, or answer a pending long-running call with
        ``Message.tool(result, tool_call_id=...)``.

        Text goes through ``on_user_message``, then to the model, then into the session (as
        the user's event). A tool response is the call's result: sent to the model, then
        stored as the calling agent's tool event.

        Raises:
            LiveSessionClosedError: the session has ended (nothing sent or stored).
            ResumeTargetError: a tool response for a call that is not pending.
            ConfigurationError: not a user message or a tool response.
            RunnerError: the input was sent but could not be stored; the session ended (the
                model has the input: do not send it again).
            ModelError: the connection refused the input (nothing stored).
        """
        self._check_open()
        if not isinstance(message, Message):
            raise ConfigurationError(
                f"LiveSession.send takes a Message, not {type(message).__name__}"
            )
        _check_user_message(message)
        run = self._run
        try:
            async with run.order:
                self._check_open()
                if message.role == "tool":
                    await run.answer(message)
                    return
                invocation = run.run
                stream = run.stream
                assert invocation is not None and stream is not None
                message = await invocation.user_message(message)
                await _forward(stream.name, stream.connection.send(message))
                try:
                    await invocation.store_user(message, {})
                except _StoreFailed as failed:
                    run._end_without_storing(failed)
                    cause = failed.args[0]
                    raise RunnerError(
                        f"failed to store the user's message of {run.ref}; the live session "
                        "ended (the model already has the input: do not send it again): "
                        f"{describe(cause)}"
                    ) from cause
        finally:
            if run.ended:
                await run.wait_ended()  # after_run has run when send returns or raises

    async def send_realtime(self, blob: Blob) -> None:
        """Send a chunk of realtime input (audio) to the model; never stored.

        It goes at once, even while a tool runs or an event is stored (only text keeps the
        storage order); during a transfer it waits for the target's connection.

        Raises:
            ConfigurationError: not a ``Blob``, or larger than
                ``LiveRunConfig.max_realtime_chunk_bytes`` (nothing sent).
            LiveSessionClosedError: the session has ended.
            ModelError: the connection refused the chunk.
        """
        if not isinstance(blob, Blob):
            raise ConfigurationError(
                f"LiveSession.send_realtime takes a Blob, not {type(blob).__name__}"
            )
        limit = self._run.config.max_realtime_chunk_bytes
        if len(blob.data) > limit:
            raise ConfigurationError(
                f"send_realtime: a chunk of {len(blob.data)} bytes is over "
                f"LiveRunConfig.max_realtime_chunk_bytes={limit}; send smaller chunks"
            )
        self._check_open()
        run = self._run
        while True:
            if not run.connected.is_set():
                await run.connected.wait()
                self._check_open()
            stream = run.stream
            assert stream is not None
            try:
                await _forward(stream.name, stream.connection.send_realtime(blob))
                return
            except ModelError:
                if run.stream is stream and run.connected.is_set():
                    raise
                self._check_open()  # a transfer replaced the connection meanwhile: resend

    # -- output -----------------------------------------------------------------------------
    def events(self) -> AsyncIterator[AgentEvent]:
        """The live events as they happen, until the session ends (one consumer; events
        are not replayed).

        Raises:
            ConfigurationError: ``events()`` was already called.
        """
        if self._reading:
            raise ConfigurationError(
                "LiveSession.events() has one consumer and it was already called"
            )
        self._reading = True
        return self._read()

    async def _read(self) -> AsyncIterator[AgentEvent]:
        buffer = self._run.buffer
        while True:
            ev = await buffer.get()
            if ev is None:
                return
            yield ev


async def _forward(agent_name: str, sending: Awaitable[None]) -> None:
    """Await a send on the connection; its failure as a ``ModelError`` naming the agent."""
    try:
        await sending
    except Exception as exc:
        raise ModelError(
            f"sending to the live model of agent {agent_name!r} failed: {describe(exc)}",
            provider="live",
        ) from exc
