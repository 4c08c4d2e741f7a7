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
    PlanExecute,
    SequentialAgent,
    Supervisor,
)
from relaykit.artifacts import ArtifactService, FileArtifactService, InMemoryArtifactService
from relaykit.cancel import Cancelled, CancelMode, CancelOutcome, RunHandle
from relaykit.checkpoints import CheckpointStore, InMemoryCheckpointStore
from relaykit.codec import register_type
from relaykit.compaction import CompactionConfig
from relaykit.context import RunContext
from relaykit.errors import AgentRunError, StreamCancelledError, ToolError
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
from relaykit.memory import InMemoryMemoryService, MemoryEntry, MemoryService
from relaykit.messages import Blob, Message, MessageStream, ToolCall
from relaykit.models import (
    ChatModel,
    FailoverModel,
    LiveConfig,
    LiveConnection,
    LiveModel,
    LiveResponse,
    LiveRunConfig,
    ModelRequest,
    ScriptedLiveModel,
    ScriptedModel,
    ToolSpec,
)
from relaykit.options import AgentOptions, ModelRetry, ResumeOptions, tool_options
from relaykit.plugins import InvocationContext, Plugin
from relaykit.runner import LiveSession, Runner, RunResult
from relaykit.sessions import InMemorySessionService, Session, SessionEvent, SessionService
from relaykit.tools import (
    FunctionTool,
    Tool,
    ToolContext,
    ToolInterrupt,
    exit_loop,
    load_memory,
    tool,
)
from relaykit.transfer import with_deterministic_transfer

if TYPE_CHECKING:
    from relaykit.checkpoints.database import DatabaseCheckpointStore
    from relaykit.sessions.database import DatabaseSessionService


def __getattr__(name: str) -> Any:
    """Optional pieces load on first use (their extras stay optional)."""
    if name == "DatabaseCheckpointStore":
        from relaykit.checkpoints.database import DatabaseCheckpointStore

        return DatabaseCheckpointStore
    if name == "DatabaseSessionService":
        from relaykit.sessions.database import DatabaseSessionService

        return DatabaseSessionService
    raise AttributeError(f"module 'relaykit' has no attribute {name!r}")


__all__ = [
    "AddressSegment",
    "Agent",
    "AgentAction",
    "AgentEvent",
    "AgentInput",
    "AgentOptions",
    "AgentOutput",
    "AgentRunError",
    "AgentTool",
    "ArtifactService",
    "BaseAgent",
    "Blob",
    "BreakLoopAction",
    "CancelMode",
    "CancelOutcome",
    "Cancelled",
    "ChatModel",
    "ChatModelAgent",
    "CheckpointStore",
    "CompactionConfig",
    "DatabaseCheckpointStore",
    "DatabaseSessionService",
    "FailoverModel",
    "FileArtifactService",
    "FlowAgent",
    "FunctionTool",
    "HistoryEntry",
    "HistoryRewriter",
    "InMemoryArtifactService",
    "InMemoryCheckpointStore",
    "InMemoryMemoryService",
    "InMemorySessionService",
    "InterruptContext",
    "InterruptInfo",
    "InvocationContext",
    "LiveConfig",
    "LiveConnection",
    "LiveModel",
    "LiveResponse",
    "LiveRunConfig",
    "LiveSession",
    "LoopAgent",
    "MemoryEntry",
    "MemoryService",
    "Message",
    "MessageStream",
    "ModelRequest",
    "ModelRetry",
    "ParallelAgent",
    "PlanExecute",
    "Plugin",
    "ResumableAgent",
    "ResumeInfo",
    "ResumeOptions",
    "RunContext",
    "RunHandle",
    "RunPath",
    "RunResult",
    "RunStep",
    "Runner",
    "ScriptedLiveModel",
    "ScriptedModel",
    "SequentialAgent",
    "Session",
    "SessionEvent",
    "SessionService",
    "StreamCancelledError",
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
    "load_memory",
    "models",
    "register_type",
    "set_sub_agents",
    "stateful_interrupt",
    "tool",
    "tool_options",
    "transfer_messages",
    "with_deterministic_transfer",
]
