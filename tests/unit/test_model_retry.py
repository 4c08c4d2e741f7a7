"""ChatModelAgent(retry=ModelRetry(...)): failed model calls retried, streamed or not (D28).

A streamed reply that fails part-way reaches the caller ending in ``WillRetryError`` and is
left out of every history (FA-17); the retried reply is a new event.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest

import relaykit as rk
from relaykit.agents import _retry
from relaykit.checkpoints.document import decode_checkpoint
from relaykit.errors import ConfigurationError, ModelError, WillRetryError
from relaykit.messages import Message, MessageStream, ToolCall
from relaykit.models.base import ModelRequest

Attempt = tuple[Sequence[Message], BaseException | None]


class FlakyStreams:
    """A streaming model answering each call from ``attempts``: the chunks, then (optionally)
    the exception the stream ends with. ``requests`` keeps every call's messages."""

    def __init__(self, attempts: Sequence[Attempt]) -> None:
        self._attempts = iter(attempts)
        self.requests: list[list[Message]] = []

    async def generate(self, request: ModelRequest) -> Message:
        raise AssertionError("this model only streams")

    def stream(self, request: ModelRequest) -> MessageStream:
        self.requests.append(list(request.messages))
        chunks, error = next(self._attempts)

        async def produce() -> AsyncIterator[Message]:
            for chunk in chunks:
                yield chunk
            if error is not None:
                raise error

        return MessageStream(produce())


def no_wait(attempt: int) -> float:
    return 0.0


async def read(runner: rk.Runner, events: AsyncIterator[rk.AgentEvent]) -> list[tuple[str, str]]:
    """Each event as (agent, what): a stream as its chunks' texts joined by ``|`` and how it
    ended; a message as its role and content; an interrupt or an error by its type."""
    seen: list[tuple[str, str]] = []
    async for ev in events:
        out = ev.output
        if out is not None and out.stream is not None:
            texts: list[str] = []
            try:
                async for chunk in out.stream:
                    texts.append(chunk.content or ",".join(c.name for c in chunk.tool_calls))
                end = "ok"
            except WillRetryError as exc:
                end = f"WillRetryError#{exc.retry_attempt}({exc})"
            except Exception as exc:
                end = f"{type(exc).__name__}({exc})"
            seen.append((ev.agent_name, f"stream {'|'.join(texts)} -> {end}"))
        elif out is not None and out.message is not None:
            seen.append((ev.agent_name, f"{out.message.role}: {out.message.content}"))
        elif ev.action is not None and ev.action.interrupted is not None:
            seen.append((ev.agent_name, "interrupt"))
        elif ev.error is not None:
            seen.append((ev.agent_name, f"error {type(ev.error).__name__}: {ev.error}"))
    return seen


async def test_a_stream_failing_after_two_chunks_ends_in_will_retry_and_is_never_history() -> None:
    writer_model = FlakyStreams(
        [
            (
                [Message.assistant("Draft one, "), Message.assistant("cut")],
                ConnectionError("reset"),
            ),
            ([Message.assistant("Final "), Message.assistant("answer.")], None),
        ]
    )
    writer = rk.ChatModelAgent(
        "writer", model=writer_model, retry=rk.ModelRetry(max_retries=2, backoff=no_wait)
    )
    reviewer_model = rk.ScriptedModel([Message.assistant("Looks good.")])
    reviewer = rk.ChatModelAgent("reviewer", model=reviewer_model)
    runner = rk.Runner(rk.SequentialAgent("pipeline", [writer, reviewer]), streaming=True)

    seen = await read(runner, runner.run([Message.user("write")]))

    assert seen == [
        ("writer", "stream Draft one, |cut -> WillRetryError#1(reset)"),
        ("writer", "stream Final |answer. -> ok"),
        ("reviewer", "stream Looks |good. -> ok"),
    ]
    # The retry sends the same conversation: the partial reply is not part of it.
    assert [m.content for m in writer_model.requests[1]] == ["write"]
    texts = [m.content for m in reviewer_model.requests[0].messages]
    assert any("Final answer." in t for t in texts)
    assert not any("Draft one" in t for t in texts)


async def test_a_failure_before_the_first_chunk_is_retried_as_a_new_empty_stream() -> None:
    model = FlakyStreams([([], TimeoutError("slow")), ([Message.assistant("Hi.")], None)])
    agent = rk.ChatModelAgent("a", model=model, retry=rk.ModelRetry(backoff=no_wait))
    runner = rk.Runner(agent, streaming=True)
    assert await read(runner, runner.run([Message.user("hi")])) == [
        ("a", "stream  -> WillRetryError#1(slow)"),
        ("a", "stream Hi. -> ok"),
    ]


async def test_generate_is_retried_invisibly_with_backoff_for_attempts_1_to_n(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def record(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(_retry, "_sleep", record)
    attempts: list[int] = []

    def backoff(attempt: int) -> float:
        attempts.append(attempt)
        return attempt / 2

    model = rk.ScriptedModel(
        [ConnectionError("a"), TimeoutError("b"), ConnectionError("c"), Message.assistant("ok")]
    )
    agent = rk.ChatModelAgent("a", model=model, retry=rk.ModelRetry(3, backoff=backoff))
    runner = rk.Runner(agent)
    assert await read(runner, runner.run([Message.user("hi")])) == [("a", "assistant: ok")]
    assert attempts == [1, 2, 3]
    assert slept == [0.5, 1.0, 1.5]
    assert len(model.requests) == 4


async def test_spent_retries_end_the_agent_with_a_model_error_naming_the_attempts() -> None:
    last = ConnectionError("c")
    model = rk.ScriptedModel([ConnectionError("a"), ConnectionError("b"), last])
    agent = rk.ChatModelAgent("a", model=model, retry=rk.ModelRetry(2, backoff=no_wait))
    events = [ev async for ev in rk.Runner(agent).run([Message.user("hi")])]
    assert len(events) == 1
    error = events[0].error
    assert isinstance(error, ModelError)
    assert str(error) == "agent 'a': model call failed after 3 attempts: ConnectionError: c"
    assert error.__cause__ is last
    with pytest.raises(rk.AgentRunError) as raised:
        agent.model = rk.ScriptedModel([ConnectionError("x")] * 3)
        await rk.Runner(agent).invoke("hi")
    assert isinstance(raised.value.__cause__, ModelError)


async def test_spent_stream_retries_deliver_the_last_failure_then_the_model_error() -> None:
    model = FlakyStreams(
        [
            ([Message.assistant("one")], ConnectionError("x")),
            ([Message.assistant("two")], ConnectionError("y")),
        ]
    )
    agent = rk.ChatModelAgent("a", model=model, retry=rk.ModelRetry(1, backoff=no_wait))
    runner = rk.Runner(agent, streaming=True)
    assert await read(runner, runner.run([Message.user("hi")])) == [
        ("a", "stream one -> WillRetryError#1(x)"),
        ("a", "stream two -> ConnectionError(y)"),
        (
            "a",
            "error ModelError: agent 'a': model call failed after 2 attempts: ConnectionError: y",
        ),
    ]


async def test_should_retry_false_stops_at_once_with_the_failure_itself() -> None:
    backoffs: list[int] = []
    refused = ValueError("bad request")
    model = rk.ScriptedModel([refused, Message.assistant("never")])

    def backoff(attempt: int) -> float:
        backoffs.append(attempt)
        return 0.0

    retry = rk.ModelRetry(
        5,
        backoff=backoff,
        should_retry=lambda exc: not isinstance(exc, ValueError),
    )
    agent = rk.ChatModelAgent("a", model=model, retry=retry)
    events = [ev async for ev in rk.Runner(agent).run([Message.user("hi")])]
    assert [ev.error for ev in events] == [refused]
    assert len(model.requests) == 1 and backoffs == []


async def test_by_default_a_configuration_error_is_not_retried() -> None:
    model = rk.ScriptedModel([ConfigurationError("no API key"), Message.assistant("never")])
    agent = rk.ChatModelAgent("a", model=model, retry=rk.ModelRetry(backoff=no_wait))
    events = [ev async for ev in rk.Runner(agent).run([Message.user("hi")])]
    assert [str(ev.error) for ev in events] == ["no API key"]
    assert len(model.requests) == 1


def test_retry_settings_are_checked() -> None:
    with pytest.raises(ConfigurationError, match="max_retries must be an int >= 0"):
        rk.ModelRetry(max_retries=True)
    with pytest.raises(ConfigurationError, match=r"ModelRetry\(backoff=...\) must be a function"):
        rk.ModelRetry(backoff=1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"retry must be a relaykit\.ModelRetry, not int"):
        rk.ChatModelAgent("a", model=rk.ScriptedModel([]), retry=3)  # type: ignore[arg-type]


@rk.tool
def approve(ctx: rk.ToolContext, amount: int) -> str:
    """Pay after a human approved."""
    if not ctx.is_resume_target:
        raise rk.ToolInterrupt({"question": f"pay {amount}?"})
    return "paid" if ctx.resume_data else "refused"


async def test_a_checkpoint_holding_a_will_retry_stream_saves_and_resumes() -> None:
    call = ToolCall("c1", "approve", '{"amount": 5}')
    model = FlakyStreams(
        [
            ([Message.assistant("Let me "), Message.assistant("th")], ConnectionError("reset")),
            ([Message.assistant("", [call])], None),
            ([Message.assistant("Paid.")], None),
        ]
    )
    agent = rk.ChatModelAgent(
        "payer", model=model, tools=[approve], retry=rk.ModelRetry(backoff=no_wait)
    )
    store = rk.InMemoryCheckpointStore()
    runner = rk.Runner(agent, streaming=True, checkpoint_store=store)

    seen = await read(runner, runner.run([Message.user("pay 5")], checkpoint_id="cp"))
    assert seen == [
        ("payer", "stream Let me |th -> WillRetryError#1(reset)"),
        ("payer", "stream approve -> ok"),
        ("payer", "interrupt"),
    ]
    data = await store.get("cp")
    assert data is not None
    cp, interrupted = decode_checkpoint(data)
    # The saved history holds both streams: the one that will be retried keeps its error.
    streams = [r.event.output.stream for r in cp.history().events if r.event.output]
    errors = [s.error for s in streams if s is not None]
    assert len(errors) == 2 and errors[1] is None
    assert isinstance(errors[0], WillRetryError) and str(errors[0]) == "reset"

    point = interrupted.contexts[0].id
    seen = await read(runner, runner.resume("cp", targets={point: True}))
    assert seen == [("payer", "tool: paid"), ("payer", "stream Paid. -> ok")]
    final = model.requests[-1]
    assert [(m.role, m.content) for m in final] == [
        ("user", "pay 5"),
        ("assistant", ""),
        ("tool", "paid"),
    ]
    assert await store.get("cp") is None  # consumed (D21)


def test_the_retries_example_retries_the_broken_stream_and_pays_the_approved_amount() -> None:
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "examples.retries"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=root,
        check=True,
    ).stdout
    assert out.splitlines() == [
        "stream: 'I will pay the' ended: will retry (attempt 1)",
        "stream: 'pay'",
        "paused: pay 500 EUR?",
        "tool: paid 50 CHF",
        "stream: 'Payment done.'",
    ]


async def test_in_session_mode_only_the_retried_reply_is_stored_and_read_next_turn() -> None:
    model = FlakyStreams(
        [
            ([Message.assistant("Half "), Message.assistant("a")], ConnectionError("reset")),
            ([Message.assistant("Whole answer.")], None),
            ([Message.assistant("Second turn.")], None),
        ]
    )
    agent = rk.ChatModelAgent("a", model=model, retry=rk.ModelRetry(backoff=no_wait))
    service = rk.InMemorySessionService()
    runner = rk.Runner(agent, streaming=True, session_service=service)
    first = await read(runner, runner.run([Message.user("one")], user_id="u", session_id="s"))
    assert first == [
        ("a", "stream Half |a -> WillRetryError#1(reset)"),
        ("a", "stream Whole answer. -> ok"),
    ]
    session = await service.get_session("relaykit", "u", "s")
    assert session is not None
    stored = [(e.author, e.message.content if e.message else None) for e in session.events]
    assert stored == [("user", "one"), ("a", "Whole answer.")]
    await read(runner, runner.run([Message.user("two")], user_id="u", session_id="s"))
    assert [m.content for m in model.requests[2]] == ["one", "Whole answer.", "two"]
