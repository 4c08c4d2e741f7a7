"""Peers in one durable conversation on a SQLite file: the workload of bench/turns.py.

Each turn: the user asks; agent A's model hands off (transfers) to agent B; B's model calls
``get_weather(city="Paris")``; the tool runs; B's model answers "It is sunny in Paris." Every
model is a small scripted class (no network, no API key); every framework keeps the whole
conversation in its own SQLite session store on a file and loads it back each turn, as an
application serving one long conversation does.

Run one peer per process: ``python -m bench.peers_sessions NAME`` prints one JSON line (the
time of each turn, the database's size at the end, the package versions, peak RSS), or
``{"missing": ...}`` when the peer is not installed. ``bench/sessions.py`` runs them all.
The peers are the optional ``bench`` extra: ``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import pathlib
import resource
import sys
import tempfile
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator
from importlib import metadata
from typing import Any

TURNS = 200
QUESTION = "weather in Paris?"
ANSWER = "It is sunny in Paris."
INSTALL_HINT = "not installed (pip install -e '.[bench]')"

Peer = Callable[[pathlib.Path, int], Awaitable["Clock"]]


class Clock:
    """Wall time and process CPU time (every thread of the process) of each turn."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.wall.append(time.perf_counter() - wall)
        self.cpu.append(time.process_time() - cpu)


def _versions(*packages: str) -> dict[str, str]:
    return {p: metadata.version(p) for p in packages}


# -- OpenAI Agents SDK: handoff, SQLiteSession on a file ------------------------------------
async def agents_sdk(db: pathlib.Path, turns: int) -> Clock:
    """``Runner.run(agent_a, text, session=SQLiteSession("s", db))`` per turn, tracing off."""
    from agents import Agent, Runner, SQLiteSession, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    set_tracing_disabled(True)  # the default exporter would try the network

    def call(name: str, args: dict[str, str], call_id: str) -> ResponseFunctionToolCall:
        return ResponseFunctionToolCall(
            id=f"fc_{call_id}",
            call_id=call_id,
            type="function_call",
            name=name,
            arguments=json.dumps(args),
            status="completed",
        )

    class ScriptedModel(Model):
        def __init__(self, policy: Callable[[Any, int], list[Any]]) -> None:
            self.policy, self.calls = policy, 0

        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            self.calls += 1
            items = args[1] if len(args) > 1 else kwargs["input"]
            return ModelResponse(
                output=self.policy(items, self.calls), usage=Usage(), response_id=None
            )

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("the bench runs without streaming")

    def policy_a(items: Any, n: int) -> list[Any]:
        return [call("transfer_to_agent_b", {}, f"a{n}")]

    def policy_b(items: Any, n: int) -> list[Any]:
        # B's first input already ends with the handoff's function_call_output ("a<n>").
        last = items[-1]
        if last.get("type") == "function_call_output" and last["call_id"].startswith("b"):
            text = ResponseOutputText(type="output_text", text=ANSWER, annotations=[])
            return [
                ResponseOutputMessage(
                    id=f"m{n}", type="message", role="assistant", status="completed", content=[text]
                )
            ]
        return [call("get_weather", {"city": "Paris"}, f"b{n}")]

    @function_tool
    async def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"It is sunny in {city}."

    agent_b = Agent(name="agent_b", model=ScriptedModel(policy_b), tools=[get_weather])
    agent_a = Agent(name="agent_a", model=ScriptedModel(policy_a), handoffs=[agent_b])
    session = SQLiteSession("s", db)
    clock = Clock()
    try:
        for _ in range(turns):
            with clock.turn():
                result = await Runner.run(agent_a, QUESTION, session=session)
            assert result.final_output == ANSWER and result.last_agent.name == "agent_b"
    finally:
        session.close()
    return clock


# -- LangGraph: a handoff graph with a checkpointer on a file, one thread -------------------
def _langgraph_graph() -> Any:
    """The graph of peers.md §6.1 (A hands off with a Command, B loops over a ToolNode)."""
    from typing import Literal

    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage, ToolMessage
    from langchain_core.outputs import ChatResult
    from langchain_core.tools import tool
    from langgraph.graph import END, START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition
    from langgraph.types import Command

    class FakeToolChatModel(GenericFakeChatModel):
        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
            # The stock fake runs _generate in a worker thread: a real model client does not.
            return self._generate(*args, **kwargs)

    def script_a() -> Iterator[AIMessage]:
        for n in itertools.count():
            yield AIMessage(
                content="", tool_calls=[{"name": "transfer_to_agent_b", "args": {}, "id": f"a{n}"}]
            )

    def script_b() -> Iterator[AIMessage]:
        for n in itertools.count():
            yield AIMessage(
                content="",
                tool_calls=[{"name": "get_weather", "args": {"city": "Paris"}, "id": f"b{n}"}],
            )
            yield AIMessage(content=ANSWER)

    @tool
    async def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"It is sunny in {city}."

    model_a = FakeToolChatModel(messages=script_a())
    model_b = FakeToolChatModel(messages=script_b())

    async def agent_a(state: MessagesState) -> Command[Literal["agent_b"]]:
        ai = await model_a.ainvoke(state["messages"])
        tc = ai.tool_calls[0]
        done = ToolMessage("Transferred to agent_b", name=tc["name"], tool_call_id=tc["id"])
        return Command(goto="agent_b", update={"messages": [ai, done]})

    async def agent_b(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model_b.ainvoke(state["messages"])]}

    g = StateGraph(MessagesState)
    g.add_node("agent_a", agent_a)
    g.add_node("agent_b", agent_b)
    g.add_node("tools", ToolNode([get_weather]))
    g.add_edge(START, "agent_a")
    g.add_conditional_edges("agent_b", tools_condition, {"tools": "tools", END: END})
    g.add_edge("tools", "agent_b")
    return g


async def langgraph(db: pathlib.Path, turns: int) -> Clock:
    """``graph.ainvoke`` per turn on one thread, ``AsyncSqliteSaver`` on a file."""
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    clock = Clock()
    async with AsyncSqliteSaver.from_conn_string(str(db)) as saver:
        graph = _langgraph_graph().compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "s"}}
        for _ in range(turns):
            with clock.turn():
                out = await graph.ainvoke({"messages": [HumanMessage(QUESTION)]}, config)
            assert out["messages"][-1].content == ANSWER
    return clock


# -- Google ADK: sub-agent transfer, a SQLite session service -------------------------------
def _adk_agents() -> Any:
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    def reply(parts: list[types.Part]) -> LlmResponse:
        return LlmResponse(content=types.Content(role="model", parts=parts))

    class ScriptedA(BaseLlm):
        model: str = "scripted-a"

        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):  # type: ignore[no-untyped-def]
            yield reply(
                [
                    types.Part(
                        function_call=types.FunctionCall(
                            name="transfer_to_agent", args={"agent_name": "agent_b"}
                        )
                    )
                ]
            )

    class ScriptedB(BaseLlm):
        model: str = "scripted-b"

        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):  # type: ignore[no-untyped-def]
            last = llm_request.contents[-1].parts or []
            if any(p.function_response and p.function_response.name == "get_weather" for p in last):
                yield reply([types.Part(text=ANSWER)])
            else:
                call = types.FunctionCall(name="get_weather", args={"city": "Paris"})
                yield reply([types.Part(function_call=call)])

    async def get_weather(city: str) -> str:
        """The weather in a city."""
        return f"It is sunny in {city}."

    # B never transfers back: each turn then starts at the root (A), as in the other peers.
    agent_b = LlmAgent(
        name="agent_b",
        model=ScriptedB(),
        instruction="Answer weather questions.",
        description="knows the weather",
        tools=[get_weather],
        disallow_transfer_to_parent=True,
        disallow_transfer_to_peers=True,
    )
    return LlmAgent(
        name="agent_a",
        model=ScriptedA(),
        instruction="Route the question.",
        description="routes questions",
        sub_agents=[agent_b],
    )


async def _adk_turns(service: Any, turns: int) -> Clock:
    from google.adk.runners import Runner
    from google.genai import types

    runner = Runner(app_name="bench", agent=_adk_agents(), session_service=service)
    await service.create_session(app_name="bench", user_id="u", session_id="s")
    clock = Clock()
    try:
        for _ in range(turns):
            message = types.Content(role="user", parts=[types.Part(text=QUESTION)])
            with clock.turn():
                events = [
                    ev
                    async for ev in runner.run_async(
                        user_id="u", session_id="s", new_message=message
                    )
                ]
            final = events[-1]
            assert final.author == "agent_b" and final.content.parts[0].text == ANSWER, final
    finally:
        await runner.close()
    return clock


async def adk_database(db: pathlib.Path, turns: int) -> Clock:
    """``Runner.run_async`` per turn, ``DatabaseSessionService("sqlite+aiosqlite:///...")``."""
    from google.adk.sessions import DatabaseSessionService

    service = DatabaseSessionService(f"sqlite+aiosqlite:///{db}")
    try:
        return await _adk_turns(service, turns)
    finally:
        await service.close()


async def adk_sqlite(db: pathlib.Path, turns: int) -> Clock:
    """``Runner.run_async`` per turn, ``SqliteSessionService(path)`` (aiosqlite, no ORM)."""
    from google.adk.sessions.sqlite_session_service import SqliteSessionService

    service = SqliteSessionService(str(db))
    try:
        return await _adk_turns(service, turns)
    finally:
        await service.close()


#: name -> (row label, run, distributions whose versions the row reports)
PEERS: dict[str, tuple[str, Peer, tuple[str, ...]]] = {
    "agents-sdk": (
        "OpenAI Agents SDK, `SQLiteSession` (file)",
        agents_sdk,
        ("openai-agents", "openai"),
    ),
    "langgraph": (
        "LangGraph, `AsyncSqliteSaver` (file), one thread",
        langgraph,
        ("langgraph", "langgraph-checkpoint-sqlite", "langchain-core"),
    ),
    "adk-database": (
        "Google ADK, `DatabaseSessionService` (sqlite+aiosqlite file)",
        adk_database,
        ("google-adk",),
    ),
    "adk-sqlite": (
        "Google ADK, `SqliteSessionService` (file)",
        adk_sqlite,
        ("google-adk",),
    ),
}


def db_bytes(db: pathlib.Path) -> int:
    """The size of the database file and its journals, as left on disk."""
    return sum(
        p.stat().st_size
        for p in (db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-journal"))
        if p.exists()
    )


def measure(name: str, turns: int = TURNS) -> dict[str, Any]:
    """Run peer ``name`` in this process and report what ``bench/sessions.py`` prints."""
    _, run, packages = PEERS[name]
    try:
        versions = _versions(*packages)
    except metadata.PackageNotFoundError as exc:
        return {"missing": f"{exc.name}: {INSTALL_HINT}"}
    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        db = pathlib.Path(tmp) / "peer.db"
        try:
            # One turn on a throwaway file first: lazy imports and first-call set-up are not
            # counted in the first turns of the conversation.
            warm = asyncio.run(run(pathlib.Path(tmp) / "warm-up.db", 1))
            clock = asyncio.run(run(db, turns))
        except ImportError as exc:
            return {"missing": f"{exc.name}: {INSTALL_HINT}"}
        size = db_bytes(db)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "times": clock.wall,
        "cpu": clock.cpu,
        "warm_up_s": warm.wall[0],
        "db_bytes": size,
        "versions": versions,
        "peak_rss_mb": peak,
    }


if __name__ == "__main__":
    os.environ.setdefault("OTEL_SDK_DISABLED", "true")
    print(json.dumps(measure(sys.argv[1])))
