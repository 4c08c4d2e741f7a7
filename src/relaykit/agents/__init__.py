"""Prebuilt agents: the chat-model agent, agent-as-tool, workflows, the supervisor and
plan-execute."""

from relaykit.agents.agent_tool import AgentTool
from relaykit.agents.chat import ChatModelAgent
from relaykit.agents.planexecute import PlanExecute
from relaykit.agents.supervisor import Supervisor
from relaykit.agents.workflows import LoopAgent, ParallelAgent, SequentialAgent

__all__ = [
    "AgentTool",
    "ChatModelAgent",
    "LoopAgent",
    "ParallelAgent",
    "PlanExecute",
    "SequentialAgent",
    "Supervisor",
]
