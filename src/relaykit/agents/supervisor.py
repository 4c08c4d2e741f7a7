"""The supervisor pattern: sub-agents always hand control back to the supervisor (seed 004)."""

from __future__ import annotations

from collections.abc import Sequence

from relaykit.agent import Agent
from relaykit.flow import FlowAgent, set_sub_agents
from relaykit.transfer import with_deterministic_transfer

__all__ = ["Supervisor"]


def Supervisor(supervisor: Agent, sub_agents: Sequence[Agent]) -> FlowAgent:
    """A tree whose root is ``supervisor``; each sub-agent is wrapped with a deterministic
    transfer back to it, so control always returns to the supervisor.

    >>> desk = Supervisor(triage, [orders, refunds])  # doctest: +SKIP
    """
    wrapped = [with_deterministic_transfer(sub, [supervisor.name]) for sub in sub_agents]
    return set_sub_agents(supervisor, wrapped)
