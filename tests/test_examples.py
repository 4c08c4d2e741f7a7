"""The README's example, the demo and the examples run as documented (docs must not rot)."""

from __future__ import annotations

import asyncio
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

from relaykit.sessions import SessionEvent
from relaykit.sessions.database import DatabaseSessionService

ROOT = Path(__file__).resolve().parents[1]


def test_readme_twenty_line_example_runs_and_routes_to_the_weather_agent() -> None:
    readme = (ROOT / "README.md").read_text()
    example = re.findall(r"```python\n(.*?)```", readme, re.S)[0]
    out = subprocess.run(
        [sys.executable, "-c", example],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    ).stdout
    lines = out.splitlines()
    assert lines[0] == "It is sunny in Paris."
    assert lines[1:] == [
        "['router'] assistant",
        "['router'] tool",
        "['router', 'weather'] assistant",
        "['router', 'weather'] tool",
        "['router', 'weather'] assistant",
    ]


def _demo_lines(*args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "examples.demo", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        check=True,
    ).stdout
    return [line.strip() for line in out.splitlines()]


def _transcript(lines: list[str], header: str) -> list[tuple[str, str, str]]:
    """The (invocation, agent, what) rows printed under ``header``, up to the next blank line."""
    rows = []
    for line in lines[lines.index(header) + 1 :]:
        if not line.startswith("inv "):
            break
        inv, agent, what = (part.strip() for part in line.split("│", 2))
        rows.append((inv.removeprefix("inv "), agent, what))
    return rows


def _stored(db: Path) -> tuple[list[SessionEvent], bytes | None]:
    async def read() -> tuple[list[SessionEvent], bytes | None]:
        async with DatabaseSessionService(f"sqlite+aiosqlite:///{db}") as svc:
            session = await svc.get_session("desk", "ada", "chat-1")
            assert session is not None
            return session.events, await svc.get_checkpoint("desk", "ada", "chat-1")

    return asyncio.run(read())


def test_demo_runs_a_session_over_two_processes_and_the_database_keeps_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "desk.db"
    db.write_bytes(b"an earlier run's file: the demo starts afresh")
    lines = _demo_lines("--db", str(db))

    # Two processes of their own, one after the other, on one database.
    pids = [line for line in lines if line.startswith("── process")]
    assert [p.split(" (")[0] for p in pids] == [
        "── process 1 starts",
        "── process 1 exits",
        "── process 2 starts",
        "── process 2 exits",
    ]
    assert pids[0].split("pid ")[1] != pids[2].split("pid ")[1]
    assert lines.index("── process 1 exits") < lines.index(pids[2])
    assert f"new session 'chat-1' of user 'ada' in {db}" in lines

    turn1 = _transcript(lines, "Turn 1 · ada: Where is my order 1234?")
    assert [(agent, what) for _, agent, what in turn1] == [
        ("triage", "→ hands over to orders"),
        ("orders", 'calls lookup_order(order_id="1234")'),
        ("orders", turn1[2][2]),
        ("orders", 'says "Order 1234 has shipped with DHL; it arrives Thursday."'),
    ]
    assert turn1[2][2].startswith('← lookup_order: {"order_id": "1234", "status": "shipped"')

    # The follow-up starts at orders (who spoke last) and finds the order number in turn 1.
    turn2 = _transcript(lines, "Turn 2 · ada: Can you give me the tracking number?")
    assert [agent for _, agent, _ in turn2] == ["orders"] * 3
    assert turn2[0][2] == 'calls track_parcel(order_id="1234")'
    assert "JD0146000031" in turn2[2][2]

    turn3 = _transcript(lines, "Turn 3 · ada: It arrived broken. I want a refund.")
    assert [(agent, what.split(" {")[0].split("(")[0]) for _, agent, what in turn3] == [
        (
            "orders",
            'says "Refunds are not my desk: passing you back to the front desk." → '
            "hands over to triage",
        ),
        ("triage", "→ hands over to refunds"),
        ("refunds", "calls lookup_order"),
        ("refunds", "← lookup_order:"),
        ("refunds", "calls request_refund"),
        ("refunds", "⏸ request_refund started"),
    ]
    assert turn3[-1][2].endswith("the invocation pauses")
    paused = turn3[0][0]
    assert any(
        line.startswith(f"invocation {paused} is paused, waiting for a manager") for line in lines
    )
    assert (
        f"opened {db}: session 'chat-1' has invocation {paused} paused at request_refund "
        "(call 'call_request_refund_1' of the refunds agent)" in lines
    )

    # Process 2 continues the same invocation with the manager's decision.
    resumed = _transcript(
        lines, "Turn 3, continued · the decision, as the result of call call_request_refund_1"
    )
    assert resumed == [
        (paused, "refunds", '← request_refund: {"approved": true, "by": "Ana (manager)"}'),
        (
            paused,
            "refunds",
            'says "Good news: Ana (manager) approved your refund of €59.90 for order 1234."',
        ),
    ]
    # The last turn starts at refunds (who spoke last) and answers from the earlier turns.
    turn4 = _transcript(lines, "Turn 4 · ada: Thanks! When will I see the money?")
    assert [(agent, what) for _, agent, what in turn4] == [
        (
            "refunds",
            'says "The €59.90 for order 1234 goes back to your card within 5 business days."',
        )
    ]
    invocations = [turn1[0][0], turn2[0][0], paused, turn4[0][0]]
    assert len(set(invocations)) == 4

    # What the database holds, read back by the demo and by the test.
    summary = lines[lines.index(f"Read back from {db}: session 'chat-1', 24 events") + 1 :]
    assert summary[:5] == [
        f"invocation 1 {invocations[0]}:  6 events by user, triage, orders",
        f"invocation 2 {invocations[1]}:  4 events by user, orders",
        f"invocation 3 {invocations[2]}: 12 events by user, orders, triage, refunds",
        f"invocation 4 {invocations[3]}:  2 events by user, refunds",
        "pause: none (consumed)",
    ]
    events, pause = _stored(db)
    assert pause is None
    assert [e.invocation_id[:8] for e in events] == [
        inv for inv, n in zip(invocations, (6, 4, 12, 2), strict=True) for _ in range(n)
    ]
    assert [(e.author, e.message.content) for e in events if e.author == "user" and e.message] == [
        ("user", "Where is my order 1234?"),
        ("user", "Can you give me the tracking number?"),
        ("user", "It arrived broken. I want a refund."),
        ("user", '{"approved": true, "by": "Ana (manager)"}'),
        ("user", "Thanks! When will I see the money?"),
    ]
    interrupts = [e for e in events if e.action is not None and e.action.interrupted is not None]
    assert [(e.author, e.invocation_id[:8]) for e in interrupts] == [("refunds", paused)]
    info = interrupts[0].action.interrupted.contexts[0].info  # type: ignore[union-attr]
    assert info["tool_call_id"] == "call_request_refund_1"
    assert info["started"] == {
        "ticket": "APR-1234",
        "status": "waiting for a manager",
        "amount": 59.9,
    }
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM relaykit_session_events").fetchone() == (24,)
        assert raw.execute("SELECT COUNT(*) FROM relaykit_session_checkpoints").fetchone() == (0,)


def test_demo_keep_starts_a_fresh_session_and_approve_alone_finds_nothing(
    tmp_path: Path,
) -> None:
    db = str(tmp_path / "desk.db")
    _demo_lines("--db", db)
    again = _demo_lines("--db", db, "--keep")
    assert f"new session 'chat-2' of user 'ada' in {db}" in again
    assert f"Read back from {db}: session 'chat-2', 24 events" in again
    alone = _demo_lines("--db", db, "--step", "approve")
    assert f"no paused invocation in {db}: nothing to approve" in alone
    assert alone[-1] == "── process 2 exits"


def _run_module(module: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", module],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    ).stdout
    return out.splitlines()


def test_workflows_example_fans_out_then_loops_until_the_critic_breaks() -> None:
    lines = _run_module("examples.workflows")
    assert lines[0].startswith("[report > research > ")
    assert {lines[0].split("]")[0], lines[1].split("]")[0]} == {
        "[report > research > web",
        "[report > research > docs",
    }
    assert lines[2:6] == [
        "[report > refine > writer] Draft: Paris, capital of France, 2.1M people, and much more...",
        "[report > refine > critic] Too long; cut it.",
        "[report > refine > writer] Paris: capital of France, 2.1M people.",
        "[report > refine > critic] Approved.",
    ]
    assert "break_loop=BreakLoopAction(from_agent='critic', done=True" in lines[6]


def test_agent_tool_example_returns_the_researchers_answer() -> None:
    assert _run_module("examples.agent_tool") == [
        "[lead] assistant: ['researcher']",
        "[lead] tool: Fact: the Eiffel Tower is 330 m tall.",
        "[lead] assistant: Answer, from research: Fact: the Eiffel Tower is 330 m tall.",
    ]


def test_agent_tool_events_example_shows_the_inner_run_outside_the_leads_history() -> None:
    fact = "Fact: The Eiffel Tower is 330 m tall (since 2022)."
    assert _run_module("examples.agent_tool_events") == [
        " [lead] assistant: ['researcher']",
        "~[lead > researcher] assistant: ['search']",
        "~[lead > researcher] tool: The Eiffel Tower is 330 m tall (since 2022).",
        f"~[lead > researcher] assistant: {fact}",
        f" [lead] tool: {fact}",
        f" [lead] assistant: Answer (4 messages seen): {fact}",
    ]


def test_live_desk_example_streams_chunks_runs_the_tool_and_stores_the_transcriptions() -> None:
    assert _run_module("examples.live_desk") == [
        "> Hi! Where is my order 1234?",
        "  desk ▸ Let me look that up.",
        '  desk → lookup_order({"order_id": "1234"})',
        '  desk ← lookup_order: {"order_id": "1234", "status": "shipped", "carrier": "DHL", '
        '"eta": "Thursday"}',
        "  desk ▸ Order 1234 shipped with DHL and arrives on Thursday.",
        "  (turn complete)",
        "> (speaks: 3200 bytes of audio)",
        "  user (heard) ▸ Great, thank you!",
        "  desk (said) ▸ You're welcome, have a nice day!",
        "  (turn complete)",
        "stored:",
        "  user  user      Hi! Where is my order 1234?",
        "  desk  assistant Let me look that up.",
        '  desk  tool      {"order_id": "1234", "status": "shipped", "carrier": "DHL", '
        '"eta": "Thursday"}',
        "  desk  assistant Order 1234 shipped with DHL and arrives on Thursday.",
        "  user  user      Great, thank you!",
        "  desk  assistant You're welcome, have a nice day!",
    ]


def test_cancel_example_pauses_three_runs_and_resumes_each_without_repeating_work() -> None:
    assert _run_module("examples.cancel") == [
        "1. cancel(AFTER_TOOLS) when the model asks for two searches",
        "   model asks for 2 searches: stop requested",
        "   paused as 'research-1': AFTER_TOOLS; waiting: ['agent:researcher']",
        "   tool: results for 'Eiffel Tower height'",
        "   tool: results for 'Eiffel Tower antenna'",
        "   resumed: The Eiffel Tower is 330 m tall, antennas included.",
        "   searches run: 2 (none twice)",
        "2. cancel(IMMEDIATE) while the answer streams",
        "   paused as 'research-2': IMMEDIATE; waiting: ['agent:researcher']",
        "   stream cut after 'Paris has about ' (the partial answer is not kept)",
        "   resumed: Paris has about 2.1 million inhabitants.",
        "3. cancel(AFTER_TOOLS, timeout=0.1) while a tool hangs",
        "   paused as 'research-3': AFTER_TOOLS (timed out, escalated); waiting: "
        "['tool:fetch_report:c3']",
        "   resumed: The report says the tower was repainted in 2024.",
    ]
