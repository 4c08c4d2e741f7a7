"""A research pipeline: the workflow agents together.

``pipeline`` is a ``SequentialAgent`` of three steps:

1. ``gather`` — a ``ParallelAgent``: ``web_researcher`` (tool ``search_web``) and
   ``paper_researcher`` (tool ``search_papers``) search at the same time; each saves its findings
   in a session value (``output_key``: ``web_findings``, ``paper_findings``).
2. ``refine`` — a ``LoopAgent`` (``max_iterations=3``): ``writer`` drafts from the findings (its
   instruction reads the session values), ``critic`` asks for another round or calls the
   built-in ``rk.exit_loop`` tool.
3. ``editor`` — polishes the approved draft into the final brief.

Runs offline on ScriptedModel: the scripts answer as functions of the request (the system
message with the session values filled in, and the history), so they answer every turn alike.

Run: ``.venv/bin/python -m examples.research_pipeline``; chat with it:
``.venv/bin/relaykit run examples/research_pipeline.py``; draw it:
``.venv/bin/relaykit tree examples/research_pipeline.py``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any

import relaykit as rk
from relaykit import Message, ModelRequest, ToolCall

APP_NAME = "research"
QUESTION = "What do we know about retrieval-augmented generation (RAG)?"

WEB_RESULTS = [
    {"title": "RAG explained", "snippet": "RAG grounds LLM answers in retrieved documents."},
    {"title": "RAG in production", "snippet": "Teams report fewer hallucinations with RAG."},
]
PAPERS = [
    {"title": "Lewis et al. 2020", "finding": "RAG beats closed-book models on open QA."},
    {"title": "Gao et al. 2023", "finding": "retrieval quality bounds answer quality."},
]


@rk.tool
def search_web(query: str) -> list[dict[str, str]]:
    """Search the web.

    Args:
        query: what to search for
    """
    return WEB_RESULTS


@rk.tool
def search_papers(query: str) -> list[dict[str, str]]:
    """Search scientific papers.

    Args:
        query: what to search for
    """
    return PAPERS


# -- scripted models: what a real LLM would answer, as functions of the request ------------
def _is_user_text(message: Message) -> bool:
    return message.role == "user" and not message.content.startswith("For context:")


def _this_turn(request: ModelRequest) -> list[Message]:
    """The messages from the user's latest message on (earlier turns left out)."""
    messages = request.messages
    last = max(i for i, m in enumerate(messages) if _is_user_text(m))
    return messages[last:]


def _call(name: str, arguments: dict[str, object], n: int) -> Message:
    return Message.assistant("", [ToolCall(f"call_{name}_{n}", name, json.dumps(arguments))])


def web_script(request: ModelRequest, n: int) -> Message:
    last = request.messages[-1]
    if last.role == "tool":
        hits = json.loads(last.content)
        return Message.assistant("Web: " + " ".join(hit["snippet"] for hit in hits))
    return _call("search_web", {"query": _this_turn(request)[0].content}, n)


def papers_script(request: ModelRequest, n: int) -> Message:
    last = request.messages[-1]
    if last.role == "tool":
        papers = json.loads(last.content)
        return Message.assistant(
            "Papers: " + " ".join(f"{p['title']}: {p['finding']}" for p in papers)
        )
    return _call("search_papers", {"query": _this_turn(request)[0].content}, n)


def writer_script(request: ModelRequest, n: int) -> Message:
    # The instruction (the system message) carries the findings: {web_findings}, {paper_findings}.
    system = request.messages[0].content
    web = system.split("Web findings: ", 1)[1].split("\n", 1)[0].removeprefix("Web: ")
    papers = system.split("Paper findings: ", 1)[1].split("\n", 1)[0].removeprefix("Papers: ")
    draft = f"Draft: {web} Research: {papers}"
    criticised = any(
        m.content.startswith("For context: [critic] said:") for m in _this_turn(request)
    )
    if criticised:
        draft += " Limitation: retrieval quality bounds answer quality."
    return Message.assistant(draft)


def critic_script(request: ModelRequest, n: int) -> Message:
    if request.messages[-1].role == "tool":  # not reached: exit_loop returns directly
        return Message.assistant("Approved.")
    if "Limitation:" in request.messages[0].content:  # the draft, read from {draft}
        return _call("exit_loop", {}, n)
    return Message.assistant("Add a limitation: when does RAG not help?")


def editor_script(request: ModelRequest, n: int) -> Message:
    draft = request.messages[0].content.split("Approved draft: ", 1)[1]
    return Message.assistant("Final brief — " + draft.removeprefix("Draft: "))


def scripted(script: Callable[[ModelRequest, int], Message]) -> rk.ScriptedModel:
    """A ScriptedModel that never runs out: each call answers ``script(request, n)``."""
    counter = itertools.count()

    def responses() -> Iterator[Callable[[ModelRequest], Message]]:
        while True:
            yield lambda request: script(request, next(counter))

    return rk.ScriptedModel(responses())


def build_pipeline(model: str | None = None) -> rk.Agent:
    """The pipeline. ``model`` is a provider string; None = scripted (offline)."""

    def pick(script: Callable[[ModelRequest, int], Message]) -> rk.ChatModel:
        return rk.models.from_string(model) if model else scripted(script)

    web = rk.ChatModelAgent(
        "web_researcher",
        "Searches the web.",
        "Research the user's question with search_web and summarise what you found in one line.",
        model=pick(web_script),
        tools=[search_web],
        output_key="web_findings",
    )
    papers = rk.ChatModelAgent(
        "paper_researcher",
        "Searches scientific papers.",
        "Research the user's question with search_papers and summarise the papers in one line.",
        model=pick(papers_script),
        tools=[search_papers],
        output_key="paper_findings",
    )
    writer = rk.ChatModelAgent(
        "writer",
        "Drafts the brief from the findings.",
        "Write a short brief answering the user's question from these findings.\n"
        "Web findings: {web_findings}\n"
        "Paper findings: {paper_findings}\n"
        "If the critic asked for changes, make them.",
        model=pick(writer_script),
        output_key="draft",
    )
    critic = rk.ChatModelAgent(
        "critic",
        "Reviews the draft.",
        "Review the draft. It must state a limitation. If it does, call exit_loop; otherwise say "
        "what to add.\nDraft: {draft}",
        model=pick(critic_script),
        tools=[rk.exit_loop],
        output_key="feedback",
    )
    editor = rk.ChatModelAgent(
        "editor",
        "Polishes the approved draft into the final brief.",
        "Edit the approved draft into the final brief.\nApproved draft: {draft}",
        model=pick(editor_script),
        output_key="brief",
    )
    return rk.SequentialAgent(
        "pipeline",
        [
            rk.ParallelAgent("gather", [web, papers], description="Researches in parallel."),
            rk.LoopAgent(
                "refine", [writer, critic], max_iterations=3, description="Drafts and reviews."
            ),
            editor,
        ],
        description="Researches, drafts and edits a brief.",
    )


#: The app's root agent: ``relaykit run examples/research_pipeline.py`` runs it offline.
root_agent = build_pipeline()


def make_runner(*, session_service: rk.SessionService, model: str | None = None) -> rk.Runner:
    """The Runner ``relaykit run`` / ``relaykit api`` use: ``--model`` picks a provider."""
    pipeline = root_agent if model is None else build_pipeline(model)
    return rk.Runner(pipeline, app_name=APP_NAME, session_service=session_service, streaming=True)


# -- the transcript -------------------------------------------------------------------------
def describe(event: rk.AgentEvent) -> str | None:
    """One line for an event: who, where, and what (text, tool call, tool result, break)."""
    path = " > ".join(step.agent_name for step in event.run_path)
    where = f"{event.agent_name:<16} [{path}]"
    if event.error is not None:
        return f"{where} ✗ {event.error}"
    message = event.output.message if event.output is not None else None
    if message is not None and message.tool_calls:
        calls = ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
        return f"{where} → {calls}"
    if message is not None and message.role == "tool":
        result = message.content if len(message.content) <= 60 else message.content[:57] + "..."
        return f"{where} ← {message.tool_name}: {result}"
    if message is not None and message.content:
        return f"{where} {message.content}"
    if event.action is not None and event.action.break_loop is not None:
        return f"{where} (breaks the loop)"
    return None


async def main(question: str = QUESTION) -> dict[str, Any]:
    """Run one turn of the pipeline, print its transcript; returns the final session state."""
    service = rk.InMemorySessionService()
    runner = rk.Runner(root_agent, app_name=APP_NAME, session_service=service)
    print(f"> {question}")
    rounds = 0
    final = ""
    async for event in runner.run([Message.user(question)], user_id="dev", session_id="s-1"):
        if event.agent_name == "writer":
            message = event.output.message if event.output else None
            if message is not None and not message.tool_calls:
                rounds += 1
                print(f"-- refine: round {rounds}")
        line = describe(event)
        if line is not None:
            print(line)
        if event.agent_name == "editor" and event.output is not None:
            final = event.output.message.content
    print(f"\nfinal: {final}")
    session = await service.get_session(APP_NAME, "dev", "s-1")
    assert session is not None
    state = dict(sorted(session.state.items()))
    print("\nsession state:")
    for key, value in state.items():
        print(f"  {key}: {value}")
    return state


if __name__ == "__main__":
    asyncio.run(main())
