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


def _demo(db: Path, *args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "examples.demo", "--db", str(db), *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        check=True,
    ).stdout
    return [line.rstrip() for line in out.splitlines()]


def _stored(db: Path, session_id: str) -> tuple[list[SessionEvent], bytes | None]:
    async def read() -> tuple[list[SessionEvent], bytes | None]:
        async with DatabaseSessionService(f"sqlite+aiosqlite:///{db}") as svc:
            session = await svc.get_session("desk", "dev", session_id)
            assert session is not None
            return session.events, await svc.get_checkpoint("desk", "dev", session_id)

    return asyncio.run(read())


ORDER = (
    '{"order_id": "1234", "status": "shipped", "carrier": "DHL", "eta": "Thursday", "total": 59.9}'
)
STARTED = (
    '⏸ refunds: request_refund started {"ticket": "APR-1234", "status": "waiting for a '
    'manager", "amount": 59.9} and waits for its result'
)
HINT = "  type the result of request_refund to resume; exit leaves it waiting"


def test_demo_chats_through_relaykit_run_in_two_processes_and_the_database_keeps_it(
    tmp_path: Path,
) -> None:
    db = tmp_path / "desk.db"
    db.write_bytes(b"an earlier run's file: the demo starts afresh")
    lines = _demo(db)
    found = re.search(r"^new session (\w{12}) ", "\n".join(lines), re.M)
    assert found is not None, lines
    sid = found.group(1)
    run = f"relaykit run examples/support_desk --db {db}"
    # The transcript is relaykit run's own output: the prompts echo what the script typed.
    assert lines == [
        f"relaykit support desk on scripted models (offline); sessions in {db}",
        "",
        "── process 1",
        f"$ {run}",
        f"new session {sid} (user dev, app desk; continue it with --session {sid})",
        "type a message; exit or Ctrl-D ends the chat",
        "you> Where is my order 1234?",
        "  ⇢ triage transfers to orders",
        '  → orders calls lookup_order(order_id="1234")',
        f"  ← lookup_order: {ORDER}",
        "orders: Order 1234 has shipped with DHL; it arrives Thursday.",
        "you> Can you give me the tracking number?",
        '  → orders calls track_parcel(order_id="1234")',
        '  ← track_parcel: {"order_id": "1234", "tracking": "JD0146000031", "last_seen": '
        '"the Leipzig hub, this morning"}',
        "orders: Your parcel's DHL tracking number is JD0146000031; it was last seen at the "
        "Leipzig hub, this morning.",
        "you> It arrived broken. I want a refund.",
        "orders: Refunds are not my desk: passing you back to the front desk.",
        "  ⇢ orders transfers to triage",
        "  ⇢ triage transfers to refunds",
        '  → refunds calls lookup_order(order_id="1234")',
        f"  ← lookup_order: {ORDER}",
        '  → refunds calls request_refund(order_id="1234", amount=59.9, reason="arrived broken")',
        STARTED,
        HINT,
        "answer> exit",
        f"bye — session {sid} is stored; its pause waits for an answer: {run} --session {sid}",
        lines[26],
        "",
        "── process 2",
        f"$ {run} --session {sid}",
        f"session {sid} continues (19 stored events)",
        "type a message; exit or Ctrl-D ends the chat",
        STARTED,
        HINT,
        "answer> approved by Ana (manager)",
        "  ← request_refund: approved by Ana (manager)",
        "refunds: Good news: Ana (manager) approved your refund of €59.90 for order 1234.",
        "you> Thanks! When will I see the money?",
        "refunds: The €59.90 for order 1234 goes back to your card within 5 business days.",
        "you> exit",
        f"bye — session {sid} is stored",
        lines[41],
        "",
        "Your turn (the relaykit command is in .venv/bin):",
        "  relaykit run examples/support_desk          chat with the desk (approve with: "
        "approved by Ana)",
        f"  relaykit sessions show examples/support_desk {sid} --db {db}",
        "  relaykit web examples/support_desk          the same desk in the web UI",
    ]
    # Two processes of their own, one after the other.
    pids = [re.fullmatch(r"── process (\d) \(pid (\d+)\) has exited", lines[i]) for i in (26, 41)]
    assert [m.group(1) for m in pids if m] == ["1", "2"]
    assert pids[0] and pids[1] and pids[0].group(2) != pids[1].group(2)

    # What the database holds: four invocations; the manager's answer continued the third,
    # the paused one, under its id; the pause is consumed.
    events, pause = _stored(db, sid)
    assert pause is None
    invocations = list(dict.fromkeys(e.invocation_id for e in events))
    assert len(invocations) == 4
    counts = [sum(e.invocation_id == inv for e in events) for inv in invocations]
    assert counts == [6, 4, 12, 2]
    answer = next(
        e
        for e in events
        if e.message is not None and e.message.role == "tool" and e.author == "user"
    )
    paused = next(e for e in events if e.action is not None and e.action.interrupted is not None)
    assert answer.invocation_id == paused.invocation_id == invocations[2]
    assert answer.message is not None and answer.message.content == "approved by Ana (manager)"
    assert paused.author == "refunds"
    with sqlite3.connect(db) as raw:
        assert raw.execute("SELECT COUNT(*) FROM relaykit_session_events").fetchone() == (24,)
        assert raw.execute("SELECT COUNT(*) FROM relaykit_session_checkpoints").fetchone() == (0,)


def test_demo_keep_adds_a_session_beside_the_earlier_ones(tmp_path: Path) -> None:
    db = tmp_path / "desk.db"
    first = _demo(db)
    again = _demo(db, "--keep")
    ids = [re.search(r"^new session (\w{12}) ", "\n".join(out), re.M) for out in (first, again)]
    assert ids[0] is not None and ids[1] is not None
    assert ids[0].group(1) != ids[1].group(1)
    # The second run continued its own new session, not the first one.
    assert f"$ relaykit run examples/support_desk --db {db} --session {ids[1].group(1)}" in again
    assert len(_stored(db, ids[0].group(1))[0]) == len(_stored(db, ids[1].group(1))[0]) == 24


def test_make_demo_runs_the_demo_from_the_makefile() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert "\t$(BIN)/python -m examples.demo $(ARGS)" in makefile


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
