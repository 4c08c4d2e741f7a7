"""The supervisor pattern: sub-agents always hand control back to the supervisor."""

from __future__ import annotations

from collections.abc import Sequence

from relaykit.agent import Agent
from relaykit.flow import FlowAgent, set_sub_agents
from relaykit.transfer import with_deterministic_transfer

__all__ = ["Supervisor"]


def Supervisor(supervisor: Agent, sub_agents: Sequence[Agent]) -> FlowAgent:
    """A tree whose root is ``supervisor``; each sub-agent is wrapped with a deterministic
    transfer back to it, so control always returns to the supervisor.

    Args:
        supervisor: the root; normally an LLM agent, which transfers to the sub-agents.
        sub_agents: the workers; each hands control back to the supervisor when it finishes
            (``with_deterministic_transfer``).

    >>> import asyncio
    >>> import relaykit as rk
    >>> to_worker = rk.ToolCall("c1", "transfer_to_agent", '{"agent_name": "worker"}')
    >>> boss = rk.ChatModelAgent("boss", "assigns work", model=rk.ScriptedModel(
    ...     [rk.Message.assistant("", [to_worker]), rk.Message.assistant("All done.")]))
    >>> worker = rk.ChatModelAgent("worker", "does the work", model=rk.ScriptedModel(
    ...     [rk.Message.assistant("Work done.")]))
    >>> result = asyncio.run(rk.Runner(Supervisor(boss, [worker])).invoke("go"))
    >>> [ev.agent_name for ev in result.events if ev.message]
    ['boss', 'boss', 'worker', 'worker', 'worker', 'boss']
    >>> result.events[-2].message.content, result.output.content
    ('successfully transferred to agent [boss]', 'All done.')
    """
    wrapped = [with_deterministic_transfer(sub, [supervisor.name]) for sub in sub_agents]
    return set_sub_agents(supervisor, wrapped)
