"""The session-mode Runner with compaction and artifacts (AR-07, AR-11, AR-12, D25)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import relaykit as rk
from relaykit.compaction import CompactionConfig
from relaykit.errors import ConfigurationError, PluginError, RunnerError
from relaykit.sessions import InMemorySessionService, SessionEvent, compaction_range

APP, USER, SID = "desk", "u1", "s1"


class Echo(rk.BaseAgent):
    """Answers each turn with what it was given (and reports a prompt size)."""

    def __init__(self, name: str, tokens: int = 0) -> None:
        super().__init__(name)
        self.inputs: list[list[str]] = []
        self.tokens = tokens

    async def run(
        self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
    ) -> AsyncIterator[rk.AgentEvent]:
        self.inputs.append([m.content for m in input.messages])
        reply = rk.Message.assistant(f"echo {input.messages[-1].content}")
        if self.tokens:
            reply.metadata["usage"] = {"input_tokens": self.tokens, "output_tokens": 1}
        yield rk.AgentEvent.from_message(reply)


async def summarizer(events: list[SessionEvent]) -> str:
    return "talked about " + ", ".join(
        e.message.content for e in events if e.message is not None and e.author == "user"
    )


async def test_sliding_window_summaries_are_stored_not_yielded_and_replace_history(
    service: Any,
) -> None:
    agent = Echo("echo")
    config = CompactionConfig(compaction_interval=2, overlap_size=0, summarizer=summarizer)
    runner = rk.Runner(agent, app_name=APP, session_service=service, compaction=config)
    delivered = []
    for text in ("a", "b", "c"):
        result = await runner.invoke(text, user_id=USER, session_id=SID)
        delivered += [ev.message.content for ev in result.events if ev.message]
    assert delivered == ["echo a", "echo b", "echo c"]  # the summary is never delivered
    session = await service.get_session(APP, USER, SID)
    summaries = [e for e in session.events if compaction_range(e) is not None]
    assert len(summaries) == 1
    assert summaries[0].message.content == (
        "Summary of the earlier conversation: talked about a, b"
    )
    # The third turn read the summary in place of the two turns it covers.
    assert agent.inputs[-1] == ["Summary of the earlier conversation: talked about a, b", "c"]
    history = await service.load_history(APP, USER, SID)
    assert [e.message.content for e in history] == [
        "Summary of the earlier conversation: talked about a, b",
        "c",
        "echo c",
    ]


async def test_the_token_rule_summarises_before_the_next_turn_runs(service: Any) -> None:
    agent = Echo("echo", tokens=500)
    config = CompactionConfig(token_threshold=400, event_retention_size=1, summarizer=summarizer)
    runner = rk.Runner(agent, app_name=APP, session_service=service, compaction=config)
    await runner.invoke("a", user_id=USER, session_id=SID)
    await runner.invoke("b", user_id=USER, session_id=SID)
    # After turn 1 the prompt reported 500 tokens: the turn-2 model call saw a summary.
    assert agent.inputs[1] == ["Summary of the earlier conversation: talked about a", "echo a", "b"]


async def test_the_token_rule_runs_before_a_turn_when_the_last_one_was_not_compacted(
    service: Any,
) -> None:
    class FailsOnce(Echo):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            async for ev in super().run(ctx, input, **options):
                yield ev
            if len(self.inputs) == 1:
                raise RuntimeError("after answering")  # the invocation is not compacted

    agent = FailsOnce("echo", tokens=500)
    config = CompactionConfig(token_threshold=400, event_retention_size=1, summarizer=summarizer)
    runner = rk.Runner(agent, app_name=APP, session_service=service, compaction=config)
    events = [ev async for ev in runner.run([rk.Message.user("a")], user_id=USER, session_id=SID)]
    assert events[-1].error is not None
    session = await service.get_session(APP, USER, SID)
    assert not [e for e in session.events if compaction_range(e) is not None]
    await runner.invoke("b", user_id=USER, session_id=SID)
    # Summarised before turn 2 ran; its own message appears once, after the summary.
    assert agent.inputs[1][0].startswith("Summary of the earlier conversation: talked about a")
    assert agent.inputs[1].count("b") == 1 and agent.inputs[1][-1] == "b"


async def test_an_interrupted_or_failed_invocation_is_not_compacted() -> None:
    service = InMemorySessionService()

    class Fails(rk.BaseAgent):
        async def run(
            self, ctx: rk.RunContext, input: rk.AgentInput, **options: Any
        ) -> AsyncIterator[rk.AgentEvent]:
            yield rk.AgentEvent.from_message(rk.Message.assistant("partial"))
            raise RuntimeError("boom")

    config = CompactionConfig(compaction_interval=1, overlap_size=0, summarizer=summarizer)
    runner = rk.Runner(Fails("fails"), app_name=APP, session_service=service, compaction=config)
    events = [ev async for ev in runner.run([rk.Message.user("x")], user_id=USER, session_id=SID)]
    assert events[-1].error is not None
    session = await service.get_session(APP, USER, SID)
    assert not [e for e in session.events if compaction_range(e) is not None]


async def test_a_failing_summarizer_is_a_runner_error_after_the_last_event() -> None:
    async def broken(events: list[SessionEvent]) -> str:
        raise OSError("summarizer offline")

    service = InMemorySessionService()
    config = CompactionConfig(compaction_interval=1, overlap_size=0, summarizer=broken)
    runner = rk.Runner(Echo("echo"), app_name=APP, session_service=service, compaction=config)
    result = await runner.invoke("hi", user_id=USER, session_id=SID)  # does not raise
    assert result.output is not None and result.output.content == "echo hi"
    assert isinstance(result.events[-1].error, RunnerError)
    assert "summarizer" in str(result.events[-1].error)


def test_compaction_configuration_is_checked_when_the_runner_is_built() -> None:
    config = CompactionConfig(compaction_interval=2, overlap_size=1)
    with pytest.raises(ConfigurationError, match="not a ChatModelAgent"):
        rk.Runner(Echo("echo"), session_service=InMemorySessionService(), compaction=config)
    with pytest.raises(ConfigurationError, match="session service"):
        rk.Runner(Echo("echo"), compaction=config)
    model = rk.ScriptedModel([])
    runner = rk.Runner(
        rk.ChatModelAgent("helper", model=model),
        session_service=InMemorySessionService(),
        compaction=config,
    )
    assert runner.compaction is config


async def test_input_attachments_are_saved_as_artifacts_and_replaced(service: Any) -> None:
    artifacts = rk.InMemoryArtifactService()
    agent = Echo("echo")
    runner = rk.Runner(
        agent,
        app_name=APP,
        session_service=service,
        artifact_service=artifacts,
        save_input_blobs_as_artifacts=True,
    )
    blob = rk.Blob("text/plain", b"receipt #7", "receipt.txt")
    result = await runner.invoke(
        [rk.Message.user("see attached", attachments=[blob])], user_id=USER, session_id=SID
    )
    inv = result.events[0]  # the agent saw the placeholder
    assert inv.message is not None
    session = await service.get_session(APP, USER, SID)
    user = session.events[0]
    name = f"artifact_{user.invocation_id}_0"
    assert user.message.content == f"see attached\nUploaded file: {name}"
    assert user.message.attachments == []
    assert agent.inputs[0][-1] == user.message.content
    loaded = await artifacts.load(APP, USER, SID, name)
    assert loaded is not None and loaded.data == b"receipt #7"


async def test_attachments_of_several_messages_get_names_of_their_own() -> None:
    service, artifacts = InMemorySessionService(), rk.InMemoryArtifactService()
    runner = rk.Runner(
        Echo("echo"),
        app_name=APP,
        session_service=service,
        artifact_service=artifacts,
        save_input_blobs_as_artifacts=True,
    )
    one, two = rk.Blob("text/plain", b"one"), rk.Blob("text/plain", b"two")
    await runner.invoke(
        [rk.Message.user("a", attachments=[one]), rk.Message.user("b", attachments=[two])],
        user_id=USER,
        session_id=SID,
    )
    session = await service.get_session(APP, USER, SID)
    inv = session.events[0].invocation_id
    assert [e.message.content for e in session.events[:2]] == [
        f"a\nUploaded file: artifact_{inv}_0",
        f"b\nUploaded file: artifact_{inv}_1",
    ]
    assert (await artifacts.load(APP, USER, SID, f"artifact_{inv}_1")).data == b"two"


async def test_a_failing_on_user_message_ends_the_turn_with_an_error_and_after_run() -> None:
    calls: list[str] = []

    class Picky(rk.Plugin):
        async def on_user_message(self, ctx: Any, message: rk.Message) -> rk.Message | None:
            raise ValueError("rejected")

        async def after_run(self, ctx: Any) -> None:
            calls.append("after_run")

    service = InMemorySessionService()
    agent = Echo("echo")
    runner = rk.Runner(agent, app_name=APP, session_service=service, plugins=[Picky()])
    events = [ev async for ev in runner.run([rk.Message.user("x")], user_id=USER, session_id=SID)]
    assert len(events) == 1 and isinstance(events[0].error, PluginError)
    assert calls == ["after_run"] and agent.inputs == []
    session = await service.get_session(APP, USER, SID)
    assert [e.error is not None for e in session.events] == [True]


def test_saving_blobs_needs_an_artifact_service() -> None:
    with pytest.raises(ConfigurationError, match="artifact_service"):
        rk.Runner(
            Echo("echo"),
            session_service=InMemorySessionService(),
            save_input_blobs_as_artifacts=True,
        )
