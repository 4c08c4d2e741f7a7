"""examples/research_pipeline.py: the workflow agents together, offline, and its CLI tree."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from examples import research_pipeline as app
from typer.testing import CliRunner

import relaykit as rk
from relaykit import Message
from relaykit.cli._app import app as cli

ROOT = Path(__file__).resolve().parents[1]
LIMITATION = "Limitation: retrieval quality bounds answer quality."


def _rows(out: str) -> list[tuple[str, str, str]]:
    """The transcript's event lines as (agent, run path, what)."""
    rows = []
    for line in out.splitlines():
        found = re.match(r"(\w+)\s+\[([^\]]+)\] (.*)", line)
        if found:
            rows.append((found.group(1), found.group(2), found.group(3)))
    return rows


def test_main_prints_the_pipeline_transcript_and_the_state(
    capsys: pytest.CaptureFixture[str],
) -> None:
    state = asyncio.run(app.main())
    out = capsys.readouterr().out
    rows = _rows(out)

    # gather: both researchers call their tool and answer, in parallel (interleaved).
    gather = rows[:6]
    for agent, tool in (("web_researcher", "search_web"), ("paper_researcher", "search_papers")):
        own = [what for who, path, what in gather if who == agent]
        assert all(
            path == f"pipeline > gather > {agent}" for who, path, _ in gather if who == agent
        )
        assert own[0] == f'→ {tool}({{"query": "{app.QUESTION}"}})'
        assert own[1].startswith(f"← {tool}: [")
        assert own[2].startswith(("Web:", "Papers:"))
    assert [who for who, _, _ in rows[6:]] == [
        "writer", "critic",                     # round 1: the critic asks for more
        "writer", "critic", "critic",           # round 2: the critic calls exit_loop
        "editor",
    ]  # fmt: skip
    assert all(path == f"pipeline > refine > {who}" for who, path, _ in rows[6:11])
    assert rows[7][2] == "Add a limitation: when does RAG not help?"
    assert LIMITATION not in rows[6][2] and rows[8][2].endswith(LIMITATION)
    assert rows[9][2] == "→ exit_loop({})"
    assert rows[10][2] == "← exit_loop: exiting the loop"
    assert rows[11][1] == "pipeline > editor"
    # The loop's rounds: two, not max_iterations=3.
    assert re.findall(r"-- refine: round (\d)", out) == ["1", "2"]

    final = rows[11][2]
    assert final.startswith("Final brief — RAG grounds LLM answers") and final.endswith(LIMITATION)
    assert f"final: {final}" in out

    # The session state: both researchers' output keys, the draft, the critic's feedback, the brief.
    assert sorted(state) == ["brief", "draft", "feedback", "paper_findings", "web_findings"]
    assert state["web_findings"].startswith("Web: RAG grounds LLM answers")
    assert state["paper_findings"].startswith("Papers: Lewis et al. 2020")
    assert state["draft"].endswith(LIMITATION)
    assert state["feedback"] == "Add a limitation: when does RAG not help?"  # exit_loop not saved
    assert state["brief"] == final
    assert out.split("session state:\n", 1)[1].startswith("  brief: Final brief")


def test_the_scripts_answer_every_turn_alike() -> None:
    """In session mode (as ``relaykit run`` uses it), each turn runs the whole pipeline again."""

    async def turns() -> list[list[str]]:
        runner = app.make_runner(session_service=rk.InMemorySessionService())
        authors = []
        for text in ("What about RAG?", "And about fine-tuning?"):
            events = runner.run([Message.user(text)], user_id="u", session_id="s")
            authors.append([e.agent_name async for e in events if e.output is not None])
        return authors

    first, second = asyncio.run(turns())
    assert first == second
    assert first[-6:] == ["writer", "critic", "writer", "critic", "critic", "editor"]


def test_relaykit_tree_draws_the_pipeline() -> None:
    result = CliRunner().invoke(cli, ["tree", str(ROOT / "examples" / "research_pipeline.py")])
    assert result.exit_code == 0, result.stderr
    lines = [line.rstrip() for line in result.stdout.splitlines()]
    assert lines[:9] == [
        "pipeline (SequentialAgent) — Researches, drafts and edits a brief.",
        "├── gather (ParallelAgent) — Researches in parallel.",
        "│   ├── web_researcher (ChatModelAgent) — Searches the web.",
        "│   │   └── search_web (tool) — Search the web.",
        "│   └── paper_researcher (ChatModelAgent) — Searches scientific papers.",
        "│       └── search_papers (tool) — Search scientific papers.",
        "├── refine (LoopAgent) — Drafts and reviews.",
        "│   ├── writer (ChatModelAgent) — Drafts the brief from the findings.",
        "│   └── critic (ChatModelAgent) — Reviews the draft.",
    ]
    assert lines[9].startswith("│       └── exit_loop (tool) — Exit the loop.")
    assert lines[-1] == (
        "└── editor (ChatModelAgent) — Polishes the approved draft into the final brief."
    )
