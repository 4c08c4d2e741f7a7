"""The Runner's live sessions: one long-lived invocation over a realtime connection (D27).

What a live session does (docs/live.md has the rules for users):

1. opening: the session's turn lock (held until the end); the session (created when missing);
   the agent by next-turn routing, checked to run live; ``before_run``; the connection, with
   the agent's system message and the session history; then the answers to what an earlier
   invocation left pending are stored. A failure raises from the opening call.
2. a background task reads the connection: each response becomes an event that goes through
   ``on_event``, the ordering buffer, storage (complete events only), then ``events()``;
3. tools run when the model calls them, their results go back over the connection; a
   transfer closes the connection and connects the target with the session as stored;
4. ``send`` forwards the user's input and then stores it, under the same storage order;
5. the end (the model closed, the connection failed, ``close()``, a failed store): the
   current agent's held events are stored, its pending calls answered, ``after_run`` runs once
   and the lock is released.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from relaykit._agent_hooks import after_agent_event, before_agent
from relaykit._aio import closing
from relaykit._live_events import (
    LIVE_ENDED_TEXT,
    AgentFailed,
    AgentStream,
    ClosedMeanwhile,
    ConnectionFailed,
    EventBuffer,
    audio_blob,
    close_quietly,
    connection_error,
    describe,
    invalid_response,
    is_held,
    is_stored,
    live_agent,
    live_event,
    send_to,
)
from relaykit._live_open import connect_agent, open_run
from relaykit._session_history import pending_tool_calls, records_of
from relaykit._session_invocation import Run
from relaykit._session_state import _StoreFailed
from relaykit.agents._tool_calls import PendingToolCall, ToolCallResult, with_unique_call_ids
from relaykit.context import PriorTurns, RunHistory, RunOptions
from relaykit.errors import (
    ConfigurationError,
    LiveSessionClosedError,
    MaxTransfersError,
    ModelError,
    PluginError,
    ResumeTargetError,
    RunnerError,
)
from relaykit.events import AgentAction, AgentEvent, AgentOutput, RunStep
from relaykit.messages import Blob, Message, ToolCall
from relaykit.models.live import LiveResponse, LiveRunConfig
from relaykit.resume import InterruptInfo, ResumeInfo
from relaykit.sessions.base import SessionEvent

if TYPE_CHECKING:
    from relaykit._session_run import SessionRunner
    from relaykit.sessions._records import SessionRef

__all__ = ["LiveRun"]

logger = logging.getLogger("relaykit")

T = TypeVar("T")


class LiveRun:
    """One live session's invocation: see the module docstring."""

    def __init__(self, owner: SessionRunner, ref: SessionRef, config: LiveRunConfig) -> None:
        self.owner = owner
        self.ref = ref
        self.config = config
        self.buffer = EventBuffer(config.max_buffered_events)
        # The storage order: a response is processed, or an input forwarded and stored, at a
        # time -- so a reply is never stored before the input that caused it.
        self.order = asyncio.Lock()
        self.run: Run | None = None
        self.stream: AgentStream | None = None
        self.options = RunOptions(False, owner.max_transfers)
        # True once the end began: nothing more is sent; the end task finishes the rest.
        self.ended = False
        # True once the caller asked to close: no tool starts, a running one is cancelled.
        self.closing = False
        self.end_task: asyncio.Future[None] | None = None
        self.pump_task: asyncio.Future[None] | None = None
        self.closer: asyncio.Future[None] | None = None
        # Cleared from a transfer's result until the target is connected (or the session
        # ended): audio, which does not keep the storage order, waits for the new connection.
        self.connected = asyncio.Event()
        self.connected.set()
        # A tool call or a transfer's connect running now (in a task of its own, so that
        # close() can cancel it).
        self.work: asyncio.Future[Any] | None = None
        # The session's turn lock, held until the end.
        self.lock = contextlib.AsyncExitStack()
        self.before_run_ran = False
        self._audio_turns = 0
        self._on_event_hooks = owner.plugins.has("on_event")
        self._audio_kept = config.save_live_audio and owner.artifact_service is not None

    # -- opening ----------------------------------------------------------------------------
    async def open(self) -> None:
        """Open the live session (D27, ``_live_open``); raises what failed, with nothing
        stored but a created session, ``after_run`` run if ``before_run`` did, and the lock
        released. Then the connection is read in the background."""
        await open_run(self)
        if not self.ended:  # (``before_run`` may have answered: no connection then)
            self.pump_task = asyncio.ensure_future(self._pump())

    # -- reading the connection -------------------------------------------------------------
    async def _pump(self) -> None:
        """Read the connections until the session ends; a failure nobody expected ends it
        with an error event (D9)."""
        try:
            await self._read_connections()
        except asyncio.CancelledError:
            if not self.ended:
                # Cancelled from outside (the event loop ending with the session open): it
                # ends as a crash would -- nothing more is stored, the next turn answers the
                # calls left open -- but its connection closes, after_run runs, the lock goes.
                self.ended = True
                await self._release()
            raise
        except Exception as exc:
            logger.exception("the live session of %s failed", self.ref)
            if not self.ended:
                root = self.owner.root
                self.buffer.put(AgentEvent(root.name, (RunStep(root.name),), error=exc))
                self._begin_end()

    async def _read_connections(self) -> None:
        """Read the current agent's connection; a transfer switches to the target's."""
        while True:
            stream = self.stream
            assert stream is not None
            failure: BaseException | None = None
            try:
                async with closing(stream.connection.receive()) as responses:
                    buffer, order = self.buffer, self.order
                    while True:
                        if len(buffer) >= buffer.limit:
                            await buffer.wait_for_room()
                        try:
                            response = await anext(responses)
                        except StopAsyncIteration:
                            break
                        except Exception as exc:
                            failure = exc
                            break
                        async with order:
                            if self.ended:
                                return
                            if self.stream is not stream:
                                break  # read before a transfer (by send) closed it: dropped
                            try:
                                await self._on_response(stream, response)
                            except Exception as exc:
                                await self._fail(stream, exc)
                        if self.ended or self.closing or self.stream is not stream:
                            break
            except Exception as exc:  # closing the connection's stream failed
                failure = failure or exc
            async with self.order:
                if self.ended:
                    return
                if self.stream is not stream:
                    continue  # transferred: the old connection was closed on purpose
                error = None
                if failure is not None:
                    error = AgentEvent(
                        stream.name, stream.run_path, error=connection_error(stream, failure)
                    )
                await self._finish(stream, error)
            return

    async def _fail(self, stream: AgentStream, exc: Exception) -> None:
        """End the session after ``exc`` (under the storage order)."""
        if isinstance(exc, ClosedMeanwhile):
            return  # close() cancelled the tool: it ends the session (the call is answered)
        if isinstance(exc, _StoreFailed):
            self._end_without_storing(exc)
            return
        if isinstance(exc, AgentFailed):
            error: BaseException = exc.args[0]
        elif isinstance(exc, ConnectionFailed):
            error = connection_error(stream, exc.args[0])
        else:  # D9: nothing crashes the caller
            error = exc
        await self._finish(self.stream, AgentEvent(stream.name, stream.run_path, error=error))

    async def _on_response(self, stream: AgentStream, response: LiveResponse) -> None:
        problem = invalid_response(response)
        if problem is not None:  # the connection is broken: it ends as a failed one (D27)
            raise AgentFailed(
                ModelError(
                    f"the live model of agent {stream.name!r} sent an invalid response: {problem}",
                    provider="live",
                )
            )
        if (
            response.partial
            and response.transcription is None
            and response.audio is None
            and not stream.transcribing
            and not self._on_event_hooks
        ):  # the common case: a chunk of the model's text, delivered only
            self.buffer.put(live_event(response, stream.name, stream.run_path))
            return
        ev = live_event(response, stream.name, stream.run_path)
        message = ev.output.message if ev.output is not None else None
        calls = message is not None and bool(message.tool_calls) and response.transcription is None
        if calls and message is not None and ev.output is not None:
            message = with_unique_call_ids(message)  # D24
            ev.output.message = message
        if response.transcription is not None and response.partial:
            stream.transcribing = True
        if response.audio is not None and self._audio_kept:
            stream.audio.append(response.audio)
        if response.turn_complete or response.interrupted:
            await self._save_audio(stream)
        await self._emit(stream, ev, user=response.transcription == "input")
        if response.transcription is not None and not response.partial:
            stream.transcribing = False
            await self._flush_held(stream)
        if calls and message is not None:
            await self._run_tools(stream, message)

    # -- events -----------------------------------------------------------------------------
    async def _emit(
        self, stream: AgentStream | None, ev: AgentEvent, *, user: bool = False
    ) -> None:
        """``on_event``, the ordering buffer, storage, delivery (D27)."""
        run = self.run
        assert run is not None
        ev, rejected = await run._on_event(ev)
        if rejected:
            self.buffer.put(ev)  # (stored by _on_event)
            return
        if stream is not None and stream.transcribing and is_held(ev):
            stream.held.append(ev)
            return
        await self._store(ev, user=user)
        self.buffer.put(ev)

    async def _store(self, ev: AgentEvent, *, user: bool = False) -> None:
        if not is_stored(ev):
            return
        run = self.run
        assert run is not None
        message = ev.output.message if ev.output is not None else None
        if user:  # the user's transcribed speech is the user's message
            stored = await run.append(
                SessionEvent(
                    invocation_id=run.context.invocation_id,
                    author="user",
                    timestamp=time.time(),
                    message=message,
                )
            )
            ev.stored_id = stored.id
        else:
            await run.store(ev, message)

    async def _flush_held(self, stream: AgentStream) -> None:
        held, stream.held = stream.held, []
        for ev in held:
            await self._store(ev)
            self.buffer.put(ev)

    # -- tools ------------------------------------------------------------------------------
    async def _run_tools(self, stream: AgentStream, message: Message) -> None:
        """Run the calls of one model message in order; their results go back to the model
        (a transfer's result does not: the connection closes)."""
        transfer: str | None = None
        for call in message.tool_calls:
            outcome = await self._invoke(stream, call, None)
            dest = await self._settle(stream, call, outcome, send=transfer is None)
            if dest is not None and transfer is None:
                transfer = dest
        if transfer is not None:
            await self._transfer(stream, transfer)

    async def _invoke(
        self, stream: AgentStream, call: ToolCall, resume: ResumeInfo | None
    ) -> ToolCallResult | PendingToolCall:
        """Run one call (``close()`` cancels it: ``ClosedMeanwhile``)."""
        try:
            return await self._cancellable(
                stream.agent._invoke(
                    stream.ctx, stream.prepared, call, resume, list(stream.context)
                )
            )
        except ClosedMeanwhile:
            raise
        except Exception as exc:  # the tool failed: the agent ends (D27, D15)
            raise AgentFailed(exc) from exc

    async def _cancellable(self, work: Coroutine[Any, Any, T]) -> T:
        """Await ``work`` in a task of its own, which ``close()`` cancels: then
        ``ClosedMeanwhile`` (a cancellation of the awaiting task propagates as such)."""
        if self.closing:
            work.close()
            raise ClosedMeanwhile
        task = asyncio.ensure_future(work)
        self.work = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if task.cancelled() and self.closing and not (current and current.cancelling()):
                raise ClosedMeanwhile from None
            raise
        finally:
            self.work = None

    async def _settle(
        self,
        stream: AgentStream,
        call: ToolCall,
        outcome: ToolCallResult | PendingToolCall,
        *,
        send: bool,
    ) -> str | None:
        """Send, store and deliver a call's outcome; the transfer target it names, if any."""
        if isinstance(outcome, PendingToolCall):
            stream.pending[call.id] = (call, outcome)
            point = outcome.point
            assert point is not None
            data = {"agent": stream.name, "interrupted_tool_calls": [call.id]}
            pause = AgentAction(interrupted=InterruptInfo(data, [point]))
            await self._emit(stream, AgentEvent(stream.name, stream.run_path, action=pause))
            return None
        result = outcome.message
        action = outcome.action
        dest = None
        if action is not None and action.transfer_to_agent is not None and not outcome.is_error:
            dest = action.transfer_to_agent.dest_agent_name
            self.connected.clear()  # input after this event goes to the target (D27)
        if dest is None and send:
            await send_to(stream, result)
        out = AgentOutput(result, None, "tool", result.tool_name)
        await self._emit(stream, AgentEvent(stream.name, stream.run_path, out, action))
        return dest

    async def answer(self, message: Message) -> None:
        """The user's answer to a pending long-running call (under the storage order): the
        call's result (the tool continues with it, as on a resume), forwarded and then stored
        as the calling agent's tool event. ``ResumeTargetError`` for an unknown call, before
        anything is sent; a failed store ends the session and raises."""
        stream = self.stream
        assert stream is not None
        call_id = message.tool_call_id or ""
        entry = stream.pending.get(call_id)
        if entry is None:
            raise ResumeTargetError(
                f"tool response for call {call_id!r} matches no pending long-running call of "
                f"the live session of {self.ref}",
                call_id,
            )
        call, pending = entry
        resume = ResumeInfo(
            was_interrupted=True,
            interrupt_state=pending.state,
            is_resume_target=True,
            resume_data=message.content,
        )
        try:
            outcome = await self._invoke(stream, call, resume)
            del stream.pending[call_id]
            dest = await self._settle(stream, call, outcome, send=True)
            if dest is not None:
                await self._transfer(stream, dest)
        except ClosedMeanwhile:
            raise LiveSessionClosedError(
                f"the live session of {self.ref} was closed while the tool of call {call_id!r} "
                "ran: the response was not sent or stored"
            ) from None
        except _StoreFailed as failed:
            self._end_without_storing(failed)
            raise RunnerError(
                f"failed to store the tool response for call {call_id!r} of {self.ref}; the "
                "live session ended (the model already has the response: do not send it "
                f"again): {describe(failed.args[0])}"
            ) from failed.args[0]
        except Exception as exc:
            await self._fail(stream, exc)

    # -- transfer ---------------------------------------------------------------------------
    async def _transfer(self, stream: AgentStream, dest: str) -> None:
        """End ``stream``'s agent and connect ``dest`` with the session as stored (D27)."""
        try:
            await self._switch(stream, dest)
        finally:
            self.connected.set()

    async def _switch(self, stream: AgentStream, dest: str) -> None:
        completed = not stream.pending  # (a call still waiting: the agent did not complete)
        await self._end_stream(stream)
        stream.ended = True
        await close_quietly(stream)
        try:
            ok = not completed or await self._cancellable(self._after_agent(stream))
        except ClosedMeanwhile:
            return  # close() came: the session ends without the target
        if not ok:
            await self._finish(None, None)  # the hook failed: its error event ended the agent
            return
        if self.closing:
            return  # close() came: the target is not started
        target = stream.flow.find_target(dest)
        error: Exception | None = None
        if target is None:
            error = ConfigurationError(
                f"transfer failed: agent {dest!r} not found when transferring from {stream.name!r}"
            )
        else:
            refused = self.options.count_transfer(stream.name, dest)
            if refused is not None:  # D23
                error = MaxTransfersError(refused)
        if target is not None and error is None:
            try:
                agent = live_agent(target)
                run = self.run
                assert run is not None and run.cached is not None
                prior = PriorTurns([*run.cached.prior.records, *records_of(run.stored)])
                ctx = target._enter(stream.ctx.derive(history=RunHistory(run.values, prior=prior)))
                invocation = self.options.invocation
                try:
                    answered = (
                        await self._cancellable(before_agent(invocation, dest))
                        if invocation is not None
                        else None
                    )
                except ClosedMeanwhile:
                    return  # close() came first: the target is not started
                except PluginError as exc:  # the target failing: its error event
                    await self._finish(None, AgentEvent(dest, ctx.run_path, error=exc))
                    return
                if answered is not None:  # the hook answers instead of the target: no connect
                    await self._emit(None, AgentEvent(dest, ctx.run_path, AgentOutput(answered)))
                    await self._finish(None, None)
                    return
                try:
                    self.stream = await self._cancellable(
                        connect_agent(target, agent, ctx, self.config.modalities)
                    )
                except ClosedMeanwhile:
                    return  # close() came first: the target is not connected
                except ConfigurationError:
                    raise
                except Exception as exc:
                    raise ModelError(
                        f"the live model of agent {dest!r} failed to connect after the transfer "
                        f"from {stream.name!r}: {describe(exc)}",
                        provider="live",
                    ) from exc
            except Exception as exc:
                error = exc
        if error is not None:
            await self._finish(None, AgentEvent(stream.name, stream.run_path, error=error))

    # -- ending -----------------------------------------------------------------------------
    async def _end_stream(self, stream: AgentStream) -> None:
        """The agent's stream ended: its held events, answers to its pending calls, its
        audio (D27)."""
        stream.transcribing = False
        await self._flush_held(stream)
        run = self.run
        assert run is not None
        stream.pending.clear()
        await run._answer(
            pending_tool_calls(run.stored, run.context.invocation_id, LIVE_ENDED_TEXT)
        )
        await self._save_audio(stream)

    async def _finish(self, stream: AgentStream | None, error: AgentEvent | None) -> None:
        """End the session (under the storage order): the agent's stream, then ``error``
        stored and delivered last; then the end task."""
        run = self.run
        assert run is not None
        try:
            if stream is not None and not stream.ended:
                completed = error is None and not stream.pending
                await self._end_stream(stream)
                stream.ended = True
                if completed:  # as in a turn: not after an error, nor with a call waiting
                    await self._after_agent(stream)
            await run.flush_writes()
            if error is not None:
                await self._emit(None, error)
        except _StoreFailed as failed:
            self._end_without_storing(failed)
            return
        self._begin_end()

    async def _after_agent(self, stream: AgentStream) -> bool:
        """``after_agent`` for ``stream``'s agent, which completed (its model ended the stream,
        the caller closed the session, or it transferred): the hook's message, or its error
        event, stored and delivered. False when the hook failed."""
        invocation = self.options.invocation
        if invocation is None or not invocation.plugins.has("after_agent"):
            return True
        ev = await after_agent_event(invocation, stream.name, stream.run_path)
        if ev is None:
            return True
        await self._emit(None, ev)
        return ev.error is None

    def _end_without_storing(self, failed: _StoreFailed) -> None:
        """A store failed: the invocation ends, its error event last and not stored (D20)."""
        run = self.run
        assert run is not None
        self.buffer.put(run.failure_event(failed))
        self._begin_end()

    def _begin_end(self) -> None:
        """Start the end (under the storage order): the reading task stops (it waits outside
        the storage order, so nothing is half done), the end task releases the rest."""
        if self.end_task is not None:
            return
        self.ended = True
        self.connected.set()  # (audio waiting for a transfer sees the end)
        task = self.pump_task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self.end_task = asyncio.ensure_future(self._release())

    async def _release(self) -> None:
        """Close the connection, run ``after_run`` (once), release the lock, end the events."""
        try:
            if self.stream is not None:
                await close_quietly(self.stream)
            run = self.run
            if run is not None and self.before_run_ran:
                await run.after_run()
        finally:
            try:
                if self.run is not None:
                    self.owner._remember(self.ref, self.run)
                await self.lock.aclose()
            except Exception as exc:
                logger.warning("releasing the live session of %s failed: %s", self.ref, exc)
            finally:
                self.buffer.end()

    async def close(self) -> None:
        """End the session from the caller's side (idempotent); returns once it ended.

        A running tool is cancelled (its call is answered as abandoned). The end runs in a
        task of its own, so a caller cancelled meanwhile does not leave the session open.
        """
        if self.closer is None:
            self.closing = True
            if self.work is not None:
                self.work.cancel()
            self.closer = asyncio.ensure_future(self._close())
        await asyncio.shield(self.closer)

    async def _close(self) -> None:
        try:
            if not self.ended:
                async with self.order:
                    if not self.ended:
                        await self._finish(self.stream, None)
        except Exception:  # D9: the end still happens
            logger.exception("closing the live session of %s failed", self.ref)
            self._begin_end()
        await self.wait_ended()

    async def wait_ended(self) -> None:
        """Wait until the end task (``after_run``, the lock) and the reading task are done."""
        if self.end_task is not None:
            await asyncio.shield(self.end_task)
        task = self.pump_task
        if task is not None and not task.done() and task is not asyncio.current_task():
            await asyncio.wait({task})

    # -- audio ------------------------------------------------------------------------------
    async def _save_audio(self, stream: AgentStream) -> None:
        """Save the model's audio of the turn that ended as one artifact."""
        chunks: list[Blob] = stream.audio
        if not chunks:
            return
        stream.audio = []
        service = self.owner.artifact_service
        run = self.run
        assert service is not None and run is not None
        name = f"live_audio_{run.context.invocation_id}_{self._audio_turns}"
        self._audio_turns += 1
        ref = self.ref
        try:
            await service.save(ref.app_name, ref.user_id, ref.session_id, name, audio_blob(chunks))
        except Exception as exc:  # a Runner-level error: delivered, the session goes on (D20)
            err = AgentEvent(
                stream.name,
                stream.run_path,
                error=RunnerError(
                    f"failed to save the live audio {name!r} of {ref}: {describe(exc)}"
                ),
            )
            await run.store(err, None)
            self.buffer.put(err)
