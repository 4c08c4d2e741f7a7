"""relaykit: multi-agent LLM applications with exact transfers, interrupt and resume.

Everything in the public API is importable from here (``import relaykit as rk``).
"""

from typing import TYPE_CHECKING, Any

from relaykit import errors, models
from relaykit.agent import Agent, AgentInput, BaseAgent, ResumableAgent
from relaykit.agents import (
    AgentTool,
    ChatModelAgent,
    LoopAgent,
    ParallelAgent,
    SequentialAgent,
    Supervisor,
)
from relaykit.checkpoints import CheckpointStore, InMemoryCheckpointStore
from relaykit.codec import register_type
from relaykit.context import RunContext
from relaykit.errors import AgentRunError, ToolError
from relaykit.events import (
    AgentAction,
    AgentEvent,
    AgentOutput,
    BreakLoopAction,
    RunPath,
    RunStep,
    TransferToAgentAction,
    transfer_messages,
)
from relaykit.flow import (
    FlowAgent,
    HistoryEntry,
    HistoryRewriter,
    as_flow_agent,
    set_sub_agents,
)
from relaykit.interrupts import (
    AddressSegment,
    InterruptContext,
    InterruptInfo,
    ResumeInfo,
    composite_interrupt,
    interrupt,
    stateful_interrupt,
)
from relaykit.messages import Blob, Message, MessageStream, ToolCall
from relaykit.models import ChatModel, ModelRequest, ScriptedModel, ToolSpec
from relaykit.runner import Runner, RunResult
from relaykit.tools import FunctionTool, Tool, ToolContext, ToolInterrupt, exit_loop, tool
from relaykit.transfer import with_deterministic_transfer

if TYPE_CHECKING:
    from relaykit.checkpoints.database import DatabaseCheckpointStore


def __getattr__(name: str) -> Any:
    """Optional pieces load on first use (their extras stay optional)."""
    if name == "DatabaseCheckpointStore":
        from relaykit.checkpoints.database import DatabaseCheckpointStore

        return DatabaseCheckpointStore
    raise AttributeError(f"module 'relaykit' has no attribute {name!r}")


__all__ = [
    "AddressSegment",
    "Agent",
    "AgentAction",
    "AgentEvent",
    "AgentInput",
    "AgentOutput",
    "AgentRunError",
    "AgentTool",
    "BaseAgent",
    "Blob",
    "BreakLoopAction",
    "ChatModel",
    "ChatModelAgent",
    "CheckpointStore",
    "DatabaseCheckpointStore",
    "FlowAgent",
    "FunctionTool",
    "HistoryEntry",
    "HistoryRewriter",
    "InMemoryCheckpointStore",
    "InterruptContext",
    "InterruptInfo",
    "LoopAgent",
    "Message",
    "MessageStream",
    "ModelRequest",
    "ParallelAgent",
    "ResumableAgent",
    "ResumeInfo",
    "RunContext",
    "RunPath",
    "RunResult",
    "RunStep",
    "Runner",
    "ScriptedModel",
    "SequentialAgent",
    "Supervisor",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolInterrupt",
    "ToolSpec",
    "TransferToAgentAction",
    "as_flow_agent",
    "composite_interrupt",
    "errors",
    "exit_loop",
    "interrupt",
    "models",
    "register_type",
    "set_sub_agents",
    "stateful_interrupt",
    "tool",
    "transfer_messages",
    "with_deterministic_transfer",
]
