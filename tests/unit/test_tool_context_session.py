"""Session mode in tools: ``ToolContext.session``, ``state``, the artifact and memory methods,
and the built-in ``load_memory`` tool.

Most tests build the invocation as the Runner does (``options.invocation``) and run a real tree;
the last ones go through ``Runner`` in session mode.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

import relaykit as rk
from relaykit._invocation import Invocation
from relaykit.context import RunOptions
from relaykit.errors import ConfigurationError
from relaykit.memory import MemoryEntry
from relaykit.plugins import InvocationContext, PluginManager
from relaykit.sessions import InMemorySessionService
from relaykit.tools.base import SessionState


def invocation(
    *,
    artifacts: rk.ArtifactService | None = None,
    memory: rk.MemoryService | None = None,
    user_id: str | None = "u",
    session_id: str | None = "s",
    session: Any = None,
) -> Invocation:
    return Invocation(
        InvocationContext("app", user_id, session_id, "inv", session),
        PluginManager([]),
        artifact_service=artifacts,
        memory_service=memory,
        session=session,
    )


async def run(
    agent: rk.Agent, text: str, inv: Invocation | None, *, writes: bool = False
) -> tuple[list[rk.AgentEvent], rk.RunContext]:
    root = rk.as_flow_agent(agent)
    ctx = rk.RunContext(options=RunOptions(writes=[] if writes else None))
    ctx.options.invocation = inv
    events = [ev async for ev in root.run(ctx, rk.AgentInput([rk.Message.user(text)]))]
    return events, ctx


def calls(name: str, args: dict[str, Any] | None = None, call_id: str = "c1") -> rk.Message:
    return rk.Message.assistant("", [rk.ToolCall(call_id, name, json.dumps(args or {}))])


def llm(name: str, *script: rk.Message, tools: list[rk.Tool]) -> rk.ChatModelAgent:
    return rk.ChatModelAgent(name, model=rk.ScriptedModel(list(script)), tools=tools)


def tool_texts(events: list[rk.AgentEvent]) -> list[str]:
    return [
        ev.output.message.content
        for ev in events
        if ev.output is not None and ev.output.role == "tool" and ev.output.message is not None
    ]


# -- state ------------------------------------------------------------------------------------
async def test_state_reads_and_writes_session_values_as_state_deltas() -> None:
    @rk.tool
    def remember(ctx: rk.ToolContext, city: str) -> str:
        """Remember the user's city."""
        previous = ctx.state.get("city", "nowhere")
        ctx.state["city"] = city
        ctx.state.update({"visits": ctx.state.get("visits", 0) + 1})
        return f"moved from {previous}"

    agent = llm(
        "concierge",
        calls("remember", {"city": "Lyon"}),
        rk.Message.assistant("Noted."),
        tools=[remember],
    )
    events, ctx = await run(agent, "I moved to Lyon", invocation(), writes=True)

    assert tool_texts(events) == ["moved from nowhere"]
    assert dict(ctx.session_values) == {"city": "Lyon", "visits": 1}
    # Tracked as the agent's writes: the Runner stores them as its next event's state_delta.
    assert ctx.options.writes == [("concierge", "city", "Lyon"), ("concierge", "visits", 1)]


def test_state_is_a_mapping_view_that_refuses_deletion() -> None:
    run_ctx = rk.RunContext.new({"a": 1})
    state = rk.ToolContext(run_ctx, "t", "c1").state
    assert isinstance(state, SessionState)
    state["b"] = 2
    assert sorted(state) == ["a", "b"] and len(state) == 2 and state["a"] == 1
    run_ctx.set_session_value("c", 3)
    assert "c" in state  # a live view, not a copy
    with pytest.raises(TypeError, match="cannot be deleted"):
        del state["a"]
    with pytest.raises(KeyError):
        state["missing"]


def test_session_is_the_invocations_session() -> None:
    session = SimpleNamespace(id="s")
    run_ctx = rk.RunContext.new()
    assert rk.ToolContext(run_ctx, "t", "c1").session is None
    run_ctx.options.invocation = invocation(session=session)
    assert rk.ToolContext(run_ctx, "t", "c1").session is session


# -- artifacts --------------------------------------------------------------------------------
@rk.tool
async def write_report(ctx: rk.ToolContext, text: str) -> dict[str, Any]:
    """Save a report and read it back."""
    version = await ctx.save_artifact("report.txt", rk.Blob("text/plain", text.encode()))
    latest = await ctx.load_artifact("report.txt")
    first = await ctx.load_artifact("report.txt", 0)
    missing = await ctx.load_artifact("nothing.txt")
    assert latest is not None and first is not None
    return {
        "version": version,
        "latest": latest.data.decode(),
        "first": first.data.decode(),
        "missing": missing is None,
    }


async def test_artifacts_are_saved_for_the_invocations_session() -> None:
    store = rk.InMemoryArtifactService()
    agent = llm(
        "writer",
        calls("write_report", {"text": "draft"}),
        calls("write_report", {"text": "final"}, call_id="c2"),
        rk.Message.assistant("Saved."),
        tools=[write_report],
    )
    events, _ = await run(agent, "write it", invocation(artifacts=store))

    assert [json.loads(t) for t in tool_texts(events)] == [
        {"version": 0, "latest": "draft", "first": "draft", "missing": True},
        {"version": 1, "latest": "final", "first": "draft", "missing": True},
    ]
    assert await store.list_versions("app", "u", "s", "report.txt") == [0, 1]
    stored = await store.load("app", "u", "s", "report.txt")
    assert stored is not None and stored.data == b"final"


@pytest.mark.parametrize(
    ("inv", "expected"),
    [
        (
            None,
            r"needs an artifact service and session mode: Runner\(agent, "
            r"session_service=\.\.\., artifact_service=\.\.\.\)",
        ),
        (
            invocation(),
            r"needs an artifact service: pass Runner\(\.\.\., artifact_service=\.\.\.\)",
        ),
        (
            invocation(artifacts=rk.InMemoryArtifactService(), user_id=None, session_id=None),
            r"works in session mode only",
        ),
    ],
)
async def test_artifacts_without_a_service_or_a_session_fail_the_tool_clearly(
    inv: Invocation | None, expected: str
) -> None:
    agent = llm("writer", calls("write_report", {"text": "x"}), tools=[write_report])
    events, _ = await run(agent, "write it", inv)
    error = events[-1].error
    assert isinstance(error, ConfigurationError)
    assert events[-1].agent_name == "writer"
    with pytest.raises(ConfigurationError, match=expected):
        raise error


# -- memory -----------------------------------------------------------------------------------
async def remembered(*texts: str) -> rk.InMemoryMemoryService:
    memory = rk.InMemoryMemoryService()
    events = [
        SimpleNamespace(author="user", message=rk.Message.user(t), timestamp=float(i + 1))
        for i, t in enumerate(texts)
    ]
    await memory.add_session(SimpleNamespace(app_name="app", user_id="u", id="s-0", events=events))
    return memory


async def test_search_memory_finds_the_users_entries() -> None:
    memory = await remembered("My shoe size is 38", "I like green")
    run_ctx = rk.RunContext.new()
    run_ctx.options.invocation = invocation(memory=memory)
    found = await rk.ToolContext(run_ctx, "t", "c1").search_memory("what size?")
    assert [(e.author, e.message.content, e.session_id) for e in found] == [
        ("user", "My shoe size is 38", "s-0")
    ]
    assert all(isinstance(e, MemoryEntry) for e in found)


async def test_load_memory_tool_returns_the_entries_to_the_model() -> None:
    memory = await remembered("My shoe size is 38")
    agent = llm(
        "shop",
        calls("load_memory", {"query": "shoe size"}),
        rk.Message.assistant("Size 38."),
        tools=[rk.load_memory],
    )
    events, _ = await run(agent, "which size do I wear?", invocation(memory=memory))

    assert json.loads(tool_texts(events)[0]) == {
        "memories": [
            {"author": "user", "text": "My shoe size is 38", "timestamp": 1.0, "session_id": "s-0"}
        ]
    }
    assert events[-1].output is not None and events[-1].output.message is not None
    assert events[-1].output.message.content == "Size 38."


async def test_load_memory_with_a_bad_query_goes_back_to_the_model() -> None:
    agent = llm(
        "shop",
        calls("load_memory", {"query": 3}),
        rk.Message.assistant("Sorry."),
        tools=[rk.load_memory],
    )
    events, _ = await run(agent, "size?", invocation(memory=rk.InMemoryMemoryService()))
    assert tool_texts(events) == ["error: load_memory needs a string argument 'query'"]


async def test_load_memory_without_a_memory_service_says_what_to_configure() -> None:
    agent = llm("shop", calls("load_memory", {"query": "size"}), tools=[rk.load_memory])
    events, _ = await run(agent, "size?", invocation())
    error = events[-1].error
    assert isinstance(error, ConfigurationError)
    assert "Runner(..., memory_service=...)" in str(error)


# -- through the Runner -----------------------------------------------------------------------
async def test_runner_session_mode_tools_save_artifacts_state_and_recall_memory() -> None:
    @rk.tool
    async def note(ctx: rk.ToolContext, text: str) -> str:
        """Keep a note."""
        assert ctx.session is not None and ctx.session.id == "s-2"
        ctx.state["last_note"] = text
        version = await ctx.save_artifact("note.txt", rk.Blob("text/plain", text.encode()))
        return f"note v{version}"

    sessions = InMemorySessionService()
    artifacts = rk.InMemoryArtifactService()
    memory = rk.InMemoryMemoryService()
    await memory.add_session(
        SimpleNamespace(
            app_name="shop",
            user_id="u",
            id="s-1",
            events=[
                SimpleNamespace(
                    author="user", message=rk.Message.user("My shoe size is 38"), timestamp=1.0
                )
            ],
        )
    )
    agent = llm(
        "shop",
        calls("load_memory", {"query": "shoe size"}),
        calls("note", {"text": "size 38"}, call_id="c2"),
        rk.Message.assistant("You wear 38."),
        tools=[rk.load_memory, note],
    )
    runner = rk.Runner(
        agent,
        app_name="shop",
        session_service=sessions,
        artifact_service=artifacts,
        memory_service=memory,
    )

    result = await runner.invoke("which size?", user_id="u", session_id="s-2")

    texts = tool_texts(list(result.events))
    assert json.loads(texts[0])["memories"][0]["session_id"] == "s-1"
    assert texts[1] == "note v0"
    stored = await artifacts.load("shop", "u", "s-2", "note.txt")
    assert stored is not None and stored.data == b"size 38"
    session = await sessions.get_session("shop", "u", "s-2")
    assert session is not None and session.state["last_note"] == "size 38"


async def test_runner_eino_mode_artifacts_need_a_session() -> None:
    agent = llm("writer", calls("write_report", {"text": "x"}), tools=[write_report])
    runner = rk.Runner(agent, artifact_service=rk.InMemoryArtifactService())
    events = [ev async for ev in runner.run([rk.Message.user("write")])]
    error = events[-1].error
    assert isinstance(error, ConfigurationError)
    assert "session mode" in str(error) and "session service" in str(error)
