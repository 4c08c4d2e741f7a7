"""``relaykit tree`` and ``relaykit sessions``: what an app is made of, what it stored."""

from __future__ import annotations

import json
import re
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from relaykit._tree import unwrap_layers
from relaykit.sessions.base import Session, SessionService

from ._render import clip, is_cancelled, stored_lines

__all__ = ["agent_tree", "session_table", "show_session"]


def _kind(agent: Any) -> str:
    """The innermost layer's class: what the agent is under its wrappers."""
    layers = unwrap_layers(agent)
    names = [type(layer).__name__ for layer in layers]
    inner = names[-1]
    wrappers = [n for n in names[:-1] if n != "FlowAgent" and not n.startswith("_")]
    if inner.startswith("_") and wrappers:  # a framework layer (a workflow's own loop)
        inner, wrappers = wrappers[0], wrappers[1:]
    return inner if not wrappers else f"{inner} in {', '.join(wrappers)}"


def _label(agent: Any) -> str:
    name = escape(str(getattr(agent, "name", "?")))
    description = str(getattr(agent, "description", "") or "")
    text = f"[bold cyan]{name}[/] [dim]({escape(_kind(agent))})[/]"
    return text + (f" — {escape(clip(description, 120))}" if description else "")


def _fill(node: Tree, agent: Any, seen: set[int]) -> None:
    """Add ``agent``'s tools (agent tools with their agent) and sub-agents below ``node``."""
    if id(agent) in seen:
        node.add("[dim](already shown above)[/]")
        return
    seen.add(id(agent))
    layers = unwrap_layers(agent)
    tools: list[Any] = []
    subs: list[Any] = []
    for layer in layers:
        tools.extend(t for t in getattr(layer, "tools", None) or () if t not in tools)
        subs.extend(s for s in getattr(layer, "sub_agents", None) or () if s not in subs)
    for tool in tools:
        spec = getattr(tool, "spec", None)
        name = getattr(tool, "name", None) or getattr(spec, "name", "?")
        # The first paragraph, on one line: a first sentence may wrap in the docstring.
        paragraph = re.split(r"\n\s*\n", str(getattr(spec, "description", "") or ""), maxsplit=1)
        description = " ".join(paragraph[0].split())
        inner = getattr(tool, "agent", None)
        kind = "agent tool" if inner is not None else "tool"
        label = f"[yellow]{escape(str(name))}[/] [dim]({kind})[/]"
        if description:
            label += f" — {escape(clip(description, 100))}"
        branch = node.add(label)
        if inner is not None and hasattr(inner, "name"):
            _fill(branch.add(_label(inner)), inner, seen)
    for sub in subs:
        _fill(node.add(_label(sub)), sub, seen)


def agent_tree(root: Any) -> Tree:
    """The agent tree of ``root`` as a Rich ``Tree``: each agent's name, kind and description,
    its tools (an agent tool's agent below it) and its sub-agents."""
    tree = Tree(_label(root))
    _fill(tree, root, set())
    return tree


def _when(timestamp: float) -> str:
    if not timestamp:
        return "-"
    return datetime.fromtimestamp(timestamp).astimezone().strftime("%Y-%m-%d %H:%M:%S")


async def session_table(service: SessionService, app_name: str, user_id: str) -> tuple[Table, int]:
    """The user's sessions, newest last, as a table (id, last update, events); their count."""
    sessions = await service.list_sessions(app_name, user_id)
    sessions.sort(key=lambda s: s.last_update_time)
    table = Table(title=f"sessions of {user_id} in {app_name}", title_justify="left")
    table.add_column("id", no_wrap=True)
    table.add_column("last update", no_wrap=True)
    table.add_column("events", justify="right")
    for listed in sessions:
        full = await service.get_session(app_name, user_id, listed.id)
        count = len(full.events) if full is not None else 0
        table.add_row(escape(listed.id), _when(listed.last_update_time), str(count))
    return table, len(sessions)


def _stopped(session: Session) -> bool:
    """Whether the session's last pause is a stopped turn (a cancel, Ctrl-C, stopped it)."""
    for event in reversed(session.events):
        if event.action is not None and event.action.interrupted is not None:
            return any(is_cancelled(point) for point in event.action.interrupted.contexts)
    return False


def show_session(console: Console, session: Session, paused: bool) -> None:
    """Print a stored session: its events (author, text, tool calls and results), its state."""
    console.print(
        f"[bold]session {escape(session.id)}[/] [dim](user {escape(session.user_id)}, app "
        f"{escape(session.app_name)}; {len(session.events)} events, last update "
        f"{_when(session.last_update_time)})[/]",
        highlight=False,
        soft_wrap=True,
    )
    for event in session.events:
        for line in stored_lines(event):
            console.print(line, highlight=False, soft_wrap=True)
    if paused and _stopped(session):
        console.print(
            "[yellow]paused: a stopped turn waits to be continued (relaykit run "
            f"--session {escape(session.id)} offers it)[/]",
            highlight=False,
        )
    elif paused:
        console.print(
            "[yellow]paused: an invocation waits for an answer (relaykit run "
            f"--session {escape(session.id)} asks for it)[/]",
            highlight=False,
        )
    state = json.dumps(session.state, ensure_ascii=False, indent=2, sort_keys=True, default=str)
    console.print("[bold]state[/]", highlight=False)
    console.print(escape(state), highlight=False, soft_wrap=True)
