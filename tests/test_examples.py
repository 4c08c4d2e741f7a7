"""The README's example and the demo run as documented (docs must not rot)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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


def test_demo_transfers_pauses_for_approval_and_resumes_in_a_fresh_runner() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "examples.demo"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        check=True,
    ).stdout
    lines = [line.strip() for line in out.splitlines()]
    assert "[triage > orders] says: Order 1234 has shipped with DHL; it arrives Thursday." in lines
    assert (
        "[triage > refunds] PAUSED for a human: Approve a refund of €59.90 for order 1234?" in lines
    )
    resumed = lines[lines.index("Later, in a fresh Runner — a manager approves the refund:") :]
    assert resumed[1] == (
        "[triage > refunds] tool issue_refund returned: refund of €59.90 for "
        "order 1234 approved by manager Ana"
    )
    assert (
        resumed[-2] == "[triage > refunds > triage] says: Is there anything else I can help "
        "you with?"
    )
    assert resumed[-1].startswith("a second approval finds nothing to resume")
    assert any(line.startswith("checkpoint 'refund-1234' saved in SQLite") for line in lines)


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
